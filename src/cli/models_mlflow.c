/* `dtrain models register` and `models alias` on an MLflow server as well
 * (include/dtrain/mlflow.h), after the SQLite registry -- the source of truth -- has the version:
 *   the server: --mlflow URI, else the tracking.uri the version's run was trained with when it
 *   names an MLflow server (--mlflow off: never);
 *   register: the checkpoint's files uploaded to the run's artifacts at checkpoints/<folder>/,
 *   then the registered model (created when missing) and a model version with that source and
 *   the run's id, tagged dtrain.version and dtrain.hash;
 *   alias: the MLflow alias set on (or removed from) the version tagged dtrain.version.
 *   sync: each registry version (of NAME, or all) that has no MLflow twin tagged dtrain.version
 *   is registered as above (its run created on the server when it never was tracked there),
 *   then each of its aliases set unless MLflow's points at that version already.
 * A server that does not answer: the rest goes to <run dir>/mlflow-spool.jsonl, which
 * `dtrain runs sync` sends; one warning line, exit 0. A refusal is one error line, exit 1 (the
 * SQLite version stays). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli_models.h"
#include "dtrain/mlflow.h"

/* The MLflow server for version v ("" when none). */
static void server_of(const dt_registry_version *v, const char *opt, char *uri, size_t n) {
    uri[0] = 0;
    if (opt) {
        if (strcmp(opt, "off")) snprintf(uri, n, "%s", opt);
        return;
    }
    cJSON *p = cJSON_Parse(v->params_json);
    const char *u = cJSON_GetStringValue(cJSON_GetObjectItem(p, "tracking.uri"));
    if (dt_mlflow_is_uri(u)) snprintf(uri, n, "%s", u);
    cJSON_Delete(p);
}

/* <run dir>/mlflow-spool.jsonl for an artefact at <run dir>/checkpoints/step-N, else beside the
 * artefact's folder. */
static void spool_of(const dt_registry_version *v, char *out, size_t n) {
    char d[4096];
    snprintf(d, sizeof d, "%s", v->path);
    char *s = strrchr(d, '/');
    if (s) *s = 0;
    s = strrchr(d, '/');
    if (s && !strcmp(s, "/checkpoints")) *s = 0;
    snprintf(out, n, "%s/mlflow-spool.jsonl", d[0] ? d : ".");
}

/* 0 sent (or nothing to send), 1 refused; a spooled request is a warning. */
static int report(const char *cmd, const char *uri, dt_status st, cJSON *json) {
    const char *how = st == DT_OK ? "sent" : st == DT_ERR_IO ? "spooled" : "failed";
    if (json) {
        cJSON *o = cJSON_AddObjectToObject(json, "mlflow");
        cJSON_AddStringToObject(o, "uri", uri);
        cJSON_AddStringToObject(o, "status", how);
        if (st != DT_OK) cJSON_AddStringToObject(o, "error", dt_last_error());
    }
    if (st != DT_OK)
        fprintf(stderr, "%s: mlflow: %s%s\n", st == DT_ERR_IO ? "warning" : cmd, dt_last_error(),
                st == DT_ERR_IO ? "" : " (the version stays in the SQLite registry)");
    return st != DT_OK && st != DT_ERR_IO;
}

/* Version v as MLflow gets it: mv's strings point into h (alive until mv_free). */
typedef struct mv_hold {
    char exp[520], art[4200], hash[17];
    cJSON *files;
    const char **names, **sums;
} mv_hold;

static void mv_free(mv_hold *h) {
    free(h->names), free(h->sums);
    cJSON_Delete(h->files);
}

/* 0, or -1 when v has no run to attach the version to (one warning line printed). */
static int to_mlflow(const dt_registry_version *v, const char *desc, const char *uri, mv_hold *h,
                     dt_mlflow_version *mv) {
    memset(h, 0, sizeof *h);
    const char *slash = strrchr(v->run, '/');
    if (!v->run[0] || !slash) {
        fprintf(stderr,
                "warning: mlflow: %s version %d has no run, so no MLflow run to attach it to; "
                "not sent to %s\n",
                v->name, v->version, uri);
        return -1;
    }
    snprintf(h->exp, sizeof h->exp, "%.*s", (int)(slash - v->run), v->run);
    const char *folder = strrchr(v->path, '/');
    snprintf(h->art, sizeof h->art, "checkpoints/%s", folder ? folder + 1 : v->path);
    snprintf(h->hash, sizeof h->hash, "%s", v->hash);
    h->files = cJSON_Parse(v->files_json);
    int n = cJSON_GetArraySize(h->files);
    h->names = calloc((size_t)n + 1, sizeof *h->names);
    h->sums = calloc((size_t)n + 1, sizeof *h->sums);
    for (int i = 0; h->names && h->sums && i < n; i++) {
        cJSON *f = cJSON_GetArrayItem(h->files, i);
        h->names[i] = cJSON_GetStringValue(cJSON_GetObjectItem(f, "name"));
        h->sums[i] = cJSON_GetStringValue(cJSON_GetObjectItem(f, "xxh3"));
    }
    *mv = (dt_mlflow_version){.model = v->name,
                              .version = v->version,
                              .description = desc,
                              .hash = h->hash,
                              .experiment = h->exp,
                              .run_name = slash + 1,
                              .folder = v->path,
                              .files = h->names,
                              .xxh3 = h->sums,
                              .n_files = h->names && h->sums ? n : 0,
                              .artifact_dir = h->art};
    return 0;
}

int dt_models_mlflow_register(const dt_registry_version *v, const char *opt, const char *desc,
                              cJSON *json) {
    char uri[2048], spool[4200];
    server_of(v, opt, uri, sizeof uri);
    if (!uri[0]) return 0;
    mv_hold h;
    dt_mlflow_version mv;
    if (to_mlflow(v, desc, uri, &h, &mv)) return 0;
    spool_of(v, spool, sizeof spool);
    dt_status st = h.names && h.sums ? dt_mlflow_register(uri, spool, &mv)
                                     : dt_error_set(DT_ERR_NOMEM, "mlflow: out of memory");
    mv_free(&h);
    char num[32] = "";
    if (st == DT_OK &&
        dt_mlflow_version_number(uri, v->name, v->version, num, sizeof num) == DT_OK && !json)
        printf("mlflow %s: model %s version %s (source %s of run %s)\n", uri, v->name, num,
               mv.artifact_dir, v->run);
    int rc = report("dtrain models register", uri, st, json);
    if (json && num[0])
        cJSON_AddNumberToObject(cJSON_GetObjectItem(json, "mlflow"), "version", atoi(num));
    return rc;
}

/* ---- sync ------------------------------------------------------------------------------------ */

typedef struct sync_ctx {
    const char *opt;
    cJSON *versions, *aliases; /* --json: one object per version and alias (else NULL) */
    int n, sent, present, skipped, spooled, failed, aliases_sent;
} sync_ctx;

static const char *how_of(dt_status st, int sent) {
    return st == DT_OK ? (sent ? "sent" : "present") : st == DT_ERR_IO ? "spooled" : "failed";
}

/* One line (or JSON object) per item; a failure also on stderr. */
static void sync_line(cJSON *arr, cJSON *o, const char *what, dt_status st, int sent) {
    const char *how = how_of(st, sent);
    if (st != DT_OK)
        fprintf(stderr, "%s: mlflow: %s: %s\n", st == DT_ERR_IO ? "warning" : "dtrain models sync",
                what, dt_last_error());
    if (arr) {
        cJSON_AddStringToObject(o, "status", how);
        if (st != DT_OK) cJSON_AddStringToObject(o, "error", dt_last_error());
        cJSON_AddItemToArray(arr, o);
    } else {
        if (st == DT_OK) printf("%s: %s\n", what, sent ? "sent" : "already in MLflow");
        cJSON_Delete(o);
    }
}

static int sync_version(void *ud, const dt_registry_version *v) {
    sync_ctx *c = ud;
    c->n++;
    char uri[2048], spool[4200], what[400];
    server_of(v, c->opt, uri, sizeof uri);
    snprintf(what, sizeof what, "%s version %d", v->name, v->version);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", v->name);
    cJSON_AddNumberToObject(o, "version", v->version);
    cJSON_AddStringToObject(o, "uri", uri);
    mv_hold h;
    dt_mlflow_version mv;
    if (!uri[0] || to_mlflow(v, NULL, uri, &h, &mv)) {
        if (!uri[0])
            fprintf(stderr,
                    "warning: %s: its run was not tracked to MLflow and no --mlflow URI "
                    "was given; skipped\n",
                    what);
        c->skipped++;
        cJSON_AddStringToObject(o, "status", "skipped");
        if (c->versions)
            cJSON_AddItemToArray(c->versions, o);
        else
            cJSON_Delete(o);
        return 0;
    }
    spool_of(v, spool, sizeof spool);
    int sent = 0, created = 0;
    dt_status st = h.names && h.sums ? dt_mlflow_version_sync(uri, spool, &mv, &sent, &created)
                                     : dt_error_set(DT_ERR_NOMEM, "mlflow: out of memory");
    mv_free(&h);
    char num[32] = "";
    if (st == DT_OK) dt_mlflow_version_number(uri, v->name, v->version, num, sizeof num);
    if (num[0]) cJSON_AddNumberToObject(o, "mlflow_version", atoi(num));
    cJSON_AddBoolToObject(o, "run_created", created);
    c->sent += st == DT_OK && sent, c->present += st == DT_OK && !sent;
    c->spooled += st == DT_ERR_IO, c->failed += st != DT_OK && st != DT_ERR_IO;
    sync_line(c->versions, o, what, st, sent);
    if (st != DT_OK) return 0; /* its aliases need the version in MLflow */
    char buf[sizeof v->aliases];
    snprintf(buf, sizeof buf, "%s", v->aliases);
    for (char *save, *al = strtok_r(buf, ",", &save); al; al = strtok_r(NULL, ",", &save)) {
        int as = 0;
        dt_status ast = dt_mlflow_alias_sync(uri, spool, v->name, v->version, al, &as);
        snprintf(what, sizeof what, "alias %s of %s version %d", al, v->name, v->version);
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "name", v->name);
        cJSON_AddStringToObject(a, "alias", al);
        cJSON_AddNumberToObject(a, "version", v->version);
        c->aliases_sent += ast == DT_OK && as;
        c->spooled += ast == DT_ERR_IO, c->failed += ast != DT_OK && ast != DT_ERR_IO;
        sync_line(c->aliases, a, what, ast, as);
    }
    return 0;
}

int dt_models_mlflow_sync(dt_track *s, const char *name, const char *opt, int json) {
    sync_ctx c = {.opt = opt};
    if (json) c.versions = cJSON_CreateArray(), c.aliases = cJSON_CreateArray();
    dt_status st = dt_registry_versions(s, name, sync_version, &c);
    if (st == DT_OK && name && !c.n)
        st = dt_error_set(DT_ERR_NOTFOUND, "no model %s in the registry", name);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain models sync: %s\n", dt_last_error());
        cJSON_Delete(c.versions), cJSON_Delete(c.aliases);
        return 1;
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "versions", c.versions);
        cJSON_AddItemToObject(o, "aliases", c.aliases);
        cJSON_AddNumberToObject(o, "sent", c.sent);
        cJSON_AddNumberToObject(o, "present", c.present);
        cJSON_AddNumberToObject(o, "aliases_sent", c.aliases_sent);
        cJSON_AddNumberToObject(o, "skipped", c.skipped);
        cJSON_AddNumberToObject(o, "spooled", c.spooled);
        cJSON_AddNumberToObject(o, "failed", c.failed);
        dt_models_print_json(o);
    } else {
        printf("%d version%s: %d sent, %d already in MLflow, %d skipped; %d alias%s set; %d "
               "spooled, %d failed\n",
               c.n, c.n == 1 ? "" : "s", c.sent, c.present, c.skipped, c.aliases_sent,
               c.aliases_sent == 1 ? "" : "es", c.spooled, c.failed);
    }
    return c.failed ? 1 : 0;
}

int dt_models_mlflow_alias(dt_track *s, const char *name, int version, const char *alias,
                           const char *opt, cJSON *json) {
    char ref[200], uri[2048], spool[4200];
    /* the server and spool of the version named (removal: of the latest version) */
    if (version > 0)
        snprintf(ref, sizeof ref, "%s@%d", name, version);
    else
        snprintf(ref, sizeof ref, "%s", name);
    dt_registry_version v;
    if (dt_registry_resolve(s, ref, &v) != DT_OK) return 0; /* the SQLite step reported it */
    server_of(&v, opt, uri, sizeof uri);
    spool_of(&v, spool, sizeof spool);
    dt_registry_version_free(&v);
    if (!uri[0]) return 0;
    dt_status st = dt_mlflow_alias(uri, spool, name, version, alias);
    if (st == DT_OK && !json)
        printf("mlflow %s: alias %s of %s %s\n", uri, alias, name, version ? "set" : "removed");
    return report("dtrain models alias", uri, st, json);
}
