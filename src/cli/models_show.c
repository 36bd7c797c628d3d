/* `dtrain models show|diff|verify|export` (src/cli/models.c dispatches): one version read
 * back, two compared, its files checked against the registration, its checkpoint exported
 * through the trainer's export code after that check. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli_models.h"
#include "dtrain/dtrain.h"
#include "dtrain/trainer.h"

static int resolve(dt_track *s, const char *cmd, const char *ref, dt_registry_version *v) {
    if (dt_registry_resolve(s, ref, v) == DT_OK) return 1;
    fprintf(stderr, "dtrain models %s: %s\n", cmd, dt_last_error());
    return 0;
}

/* The integrity check as JSON: {"ok": bool, "problems": [{"file", "what"}...]}. */
static void on_problem(void *ud, const dt_registry_problem *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", p->file);
    cJSON_AddStringToObject(o, "what", p->what);
    cJSON_AddItemToArray(ud, o);
}

static cJSON *integrity(const dt_registry_version *v, char *msg, size_t n) {
    cJSON *o = cJSON_CreateObject(), *probs = cJSON_CreateArray();
    dt_status st = dt_registry_verify(v, on_problem, probs);
    snprintf(msg, n, "%s", st == DT_OK ? "" : dt_last_error());
    cJSON_AddBoolToObject(o, "ok", st == DT_OK);
    cJSON_AddItemToObject(o, "problems", probs);
    return o;
}

static void print_object(const char *title, cJSON *o) {
    printf("%s:\n", title);
    cJSON *e;
    cJSON_ArrayForEach(e, o) {
        char num[64];
        const char *val = cJSON_IsString(e) ? e->valuestring
                          : cJSON_IsNumber(e)
                              ? (snprintf(num, sizeof num, "%.6g", e->valuedouble), num)
                              : "null";
        printf("  %-28s %s\n", e->string, val);
    }
}

int dt_models_show(dt_track *s, const char *ref, const dt_models_args *a) {
    dt_registry_version v;
    if (!resolve(s, "show", ref, &v)) return MODELS_BAD;
    char msg[1200];
    cJSON *o = dt_models_version_json(&v), *in = integrity(&v, msg, sizeof msg);
    if (a->json) {
        cJSON_AddItemToObject(o, "integrity", in);
        dt_models_print_json(o);
        dt_registry_version_free(&v);
        return MODELS_OK;
    }
    char t[32];
    dt_models_time(v.created, t, sizeof t);
    printf("model %s version %d\n", v.name, v.version);
    printf("  created     %s UTC\n", t);
    printf("  aliases     %s\n", v.aliases[0] ? v.aliases : "-");
    if (v.run[0])
        printf("  run         %s (id %lld%s)\n", v.run, (long long)v.run_id,
               v.run_exists ? "" : ", no longer in the store");
    else
        printf("  run         - (no run recorded the checkpoint)\n");
    printf("  step        %lld\n", (long long)v.step);
    printf("  artefact    %s\n", v.path);
    printf("  hash        %s\n", v.hash);
    int nf = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "files"));
    printf("  integrity   %s\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "ok"))
                                     ? "ok (every file as registered)"
                                     : msg);
    printf("  files       %d\n", nf);
    print_object("lineage", cJSON_GetObjectItemCaseSensitive(o, "lineage"));
    print_object("metrics", cJSON_GetObjectItemCaseSensitive(o, "metrics"));
    printf("params: %d (dtrain models show --json lists them)\n",
           cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "params")));
    cJSON_Delete(in);
    cJSON_Delete(o);
    dt_registry_version_free(&v);
    return MODELS_OK;
}

/* ---- diff ------------------------------------------------------------------------------------ */

static void value_text(const cJSON *e, char *buf, size_t n) {
    if (!e)
        snprintf(buf, n, "-");
    else if (cJSON_IsString(e))
        snprintf(buf, n, "%s", e->valuestring);
    else if (cJSON_IsNumber(e))
        snprintf(buf, n, "%.6g", e->valuedouble);
    else
        snprintf(buf, n, "null");
}

/* The keys of x and y whose values differ, into out as {key: [a, b]} and printed. */
static int diff_objects(const char *what, const cJSON *x, const cJSON *y, cJSON *out, int print) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *e, *in = pass ? y : x;
        cJSON_ArrayForEach(e, in) {
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(pass ? x : y, e->string);
            if (pass && other) continue; /* seen in the first pass */
            if (other && cJSON_Compare(e, other, 1)) continue;
            const cJSON *l = pass ? other : e, *r = pass ? e : other;
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, l ? cJSON_Duplicate(l, 1) : cJSON_CreateNull());
            cJSON_AddItemToArray(pair, r ? cJSON_Duplicate(r, 1) : cJSON_CreateNull());
            cJSON_AddItemToObject(out, e->string, pair);
            if (print) {
                char lt[512], rt[512];
                value_text(l, lt, sizeof lt);
                value_text(r, rt, sizeof rt);
                printf("  %-8s %-28s %s -> %s\n", what, e->string, lt, rt);
            }
            n++;
        }
    }
    return n;
}

int dt_models_diff(dt_track *s, const char *ra, const char *rb, const dt_models_args *a) {
    dt_registry_version va, vb;
    if (!resolve(s, "diff", ra, &va)) return MODELS_BAD;
    if (!resolve(s, "diff", rb, &vb)) {
        dt_registry_version_free(&va);
        return MODELS_BAD;
    }
    cJSON *ja = dt_models_version_json(&va), *jb = dt_models_version_json(&vb);
    cJSON *o = cJSON_CreateObject();
    char la[200], lb[200];
    snprintf(la, sizeof la, "%s@%d", va.name, va.version);
    snprintf(lb, sizeof lb, "%s@%d", vb.name, vb.version);
    cJSON_AddStringToObject(o, "a", la);
    cJSON_AddStringToObject(o, "b", lb);
    if (!a->json) printf("%s -> %s\n", la, lb);
    static const char *const parts[] = {"params", "lineage", "metrics"};
    int total = 0;
    for (int i = 0; i < 3; i++) {
        cJSON *d = cJSON_CreateObject();
        total += diff_objects(parts[i], cJSON_GetObjectItemCaseSensitive(ja, parts[i]),
                              cJSON_GetObjectItemCaseSensitive(jb, parts[i]), d, !a->json);
        cJSON_AddItemToObject(o, parts[i], d);
    }
    cJSON *same = cJSON_CreateBool(!strcmp(va.hash, vb.hash));
    cJSON_AddItemToObject(o, "same_artefact", same);
    if (a->json)
        dt_models_print_json(o);
    else {
        if (!total) printf("  (no differences in params, lineage or metrics)\n");
        if (!strcmp(va.hash, vb.hash)) printf("  the same artefact files (hash %s)\n", va.hash);
        cJSON_Delete(o);
    }
    cJSON_Delete(ja), cJSON_Delete(jb);
    dt_registry_version_free(&va), dt_registry_version_free(&vb);
    return MODELS_OK;
}

/* ---- verify, export -------------------------------------------------------------------------- */

static void print_problem(void *ud, const dt_registry_problem *p) {
    const dt_registry_version *v = ud;
    if (!strcmp(p->what, "size"))
        fprintf(stderr, "  %s/%s: %" PRId64 " bytes, registered %" PRId64 "\n", v->path, p->file,
                p->bytes_found, p->bytes_recorded);
    else if (!strcmp(p->what, "checksum"))
        fprintf(stderr, "  %s/%s: xxh3 %016" PRIx64 ", registered %016" PRIx64 "\n", v->path,
                p->file, p->xxh3_found, p->xxh3_recorded);
    else
        fprintf(stderr, "  %s/%s: %s\n", v->path, p->file, p->what);
}

int dt_models_verify(dt_track *s, const char *ref, const dt_models_args *a) {
    dt_registry_version v;
    if (!resolve(s, "verify", ref, &v)) return MODELS_BAD;
    dt_status st;
    if (a->json) {
        char msg[1200];
        cJSON *o = cJSON_CreateObject(), *in = integrity(&v, msg, sizeof msg);
        st = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "ok")) ? DT_OK : DT_ERR_FORMAT;
        cJSON_AddStringToObject(o, "name", v.name);
        cJSON_AddNumberToObject(o, "version", v.version);
        cJSON_AddStringToObject(o, "path", v.path);
        cJSON_AddStringToObject(o, "hash", v.hash);
        cJSON_AddItemToObject(o, "integrity", in);
        dt_models_print_json(o);
    } else if ((st = dt_registry_verify(&v, print_problem, &v)) == DT_OK) {
        printf("%s@%d: ok, every file of %s as registered (hash %s)\n", v.name, v.version, v.path,
               v.hash);
    } else {
        fprintf(stderr, "dtrain models verify: %s\n", dt_last_error());
    }
    dt_registry_version_free(&v);
    return st == DT_OK ? MODELS_OK : MODELS_BAD;
}

/* An output folder that holds something is not written into (its files may be good data). */
static int nonempty_dir(const char *p) {
    DIR *d = opendir(p);
    if (!d) return 0;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n > 0;
}

int dt_models_export(dt_track *s, const char *ref, const dt_models_args *a) {
    dt_registry_version v;
    if (!resolve(s, "export", ref, &v)) return MODELS_BAD;
    int rc = MODELS_BAD;
    struct stat sb;
    if (dt_registry_verify(&v, print_problem, &v) != DT_OK) {
        fprintf(stderr, "dtrain models export: %s: refusing to export a changed artefact\n",
                dt_last_error());
    } else if (stat(a->out, &sb) == 0 && (!S_ISDIR(sb.st_mode) || nonempty_dir(a->out))) {
        fprintf(stderr,
                "dtrain models export: %s exists and is not an empty folder: give a new one\n",
                a->out);
    } else {
        /* where the run found its model and data (absolute), for a config that names them
         * relative to its own folder */
        cJSON *lin = cJSON_Parse(v.lineage_json);
        dt_export_opts o = {
            .format = a->format,
            .base = a->base,
            .base_hint = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(lin, "model.path")),
            .data_hint =
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(lin, "dataset.train.path"))};
        char note[1200];
        if (dt_trainer_export_checkpoint(v.path, &o, a->out, note, sizeof note) != DT_OK) {
            fprintf(stderr, "dtrain models export: %s@%d: %s\n", v.name, v.version,
                    dt_last_error());
        } else {
            rc = MODELS_OK;
            if (a->json) {
                cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "name", v.name);
                cJSON_AddNumberToObject(j, "version", v.version);
                cJSON_AddStringToObject(j, "format", o.written);
                cJSON_AddStringToObject(j, "checkpoint", v.path);
                cJSON_AddStringToObject(j, "path", a->out);
                cJSON_AddStringToObject(j, "note", note);
                dt_models_print_json(j);
            } else {
                printf("exported %s@%d (%s, step %lld) as %s to %s%s%s\n", v.name, v.version,
                       v.path, (long long)v.step, o.written, a->out, note[0] ? "; " : "", note);
            }
        }
        cJSON_Delete(lin);
    }
    dt_registry_version_free(&v);
    return rc;
}
