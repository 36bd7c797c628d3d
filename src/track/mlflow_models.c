/* MLflow's model registry (include/dtrain/mlflow.h): the model_version and alias ops
 * (mlflow_impl.h) and the synchronous senders `dtrain models register` and `models alias` use.
 *
 * A dtrain version is found again in MLflow by its tag dtrain.version (MLflow numbers its own
 * versions, which may differ when versions were added there by others), so a replayed
 * model_version op creates nothing twice and an alias lands on the right MLflow version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "track/mlflow_impl.h"

enum { TRIES = 3 };

/* MLflow's number of dtrain version v of `name` into out ("" when there is none). */
static dt_status find_version(mlf_http *h, const char *name, int v, char *out, size_t n) {
    char filter[400];
    snprintf(filter, sizeof filter, "name='%s' and tags.`dtrain.version`='%d'", name, v);
    char *esc = curl_easy_escape(h->c, filter, 0);
    if (!esc) return dt_error_set(DT_ERR_NOMEM, "mlflow: out of memory");
    char path[1200];
    snprintf(path, sizeof path, "model-versions/search?filter=%s", esc);
    curl_free(esc);
    cJSON *r = NULL;
    dt_status st = mlf_call(h, path, NULL, 0, &r);
    out[0] = 0;
    if (st == DT_OK) {
        const char *x = cJSON_GetStringValue(cJSON_GetObjectItem(
            cJSON_GetArrayItem(cJSON_GetObjectItem(r, "model_versions"), 0), "version"));
        if (x) snprintf(out, n, "%s", x);
    }
    cJSON_Delete(r);
    return st;
}

static dt_status model_version(mlf_http *h, const cJSON *op, const char *run_id) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(op, "name")),
               *path = cJSON_GetStringValue(cJSON_GetObjectItem(op, "path")),
               *desc = cJSON_GetStringValue(cJSON_GetObjectItem(op, "description"));
    int v = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(op, "dtrain_version"));
    if (!name || !path || v < 1)
        return dt_error_set(DT_ERR_INVALID, "mlflow model_version: no name, path or version");
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "name", name);
    if (desc) cJSON_AddStringToObject(q, "description", desc);
    dt_status st = mlf_call(h, "registered-models/create", q, 0, NULL);
    cJSON_Delete(q);
    if (st != DT_OK && strcmp(h->ec, "RESOURCE_ALREADY_EXISTS")) return st;
    char have[32];
    if ((st = find_version(h, name, v, have, sizeof have)) != DT_OK || have[0]) return st;
    /* source: the artefacts' place in the run's artifact store, as MLflow's own clients give it */
    char au[1024], source[2048], num[16];
    if ((st = mlf_artifact_uri(h, run_id, au, sizeof au)) != DT_OK) return st;
    snprintf(source, sizeof source, "%s/%s", au, path);
    snprintf(num, sizeof num, "%d", v);
    q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "name", name);
    cJSON_AddStringToObject(q, "source", source);
    cJSON_AddStringToObject(q, "run_id", run_id);
    if (desc) cJSON_AddStringToObject(q, "description", desc);
    cJSON *tags = cJSON_AddArrayToObject(q, "tags"), *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "key", "dtrain.version");
    cJSON_AddStringToObject(t, "value", num);
    cJSON_AddItemToArray(tags, t);
    cJSON *hash = cJSON_GetObjectItem(op, "hash");
    if (cJSON_IsString(hash)) {
        t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "key", "dtrain.hash");
        cJSON_AddStringToObject(t, "value", hash->valuestring);
        cJSON_AddItemToArray(tags, t);
    }
    st = mlf_call(h, "model-versions/create", q, 0, NULL);
    cJSON_Delete(q);
    return st;
}

static dt_status alias(mlf_http *h, const cJSON *op) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(op, "name")),
               *al = cJSON_GetStringValue(cJSON_GetObjectItem(op, "alias"));
    int v = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(op, "dtrain_version"));
    if (!name || !al) return dt_error_set(DT_ERR_INVALID, "mlflow alias: no name or alias");
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "name", name);
    cJSON_AddStringToObject(q, "alias", al);
    dt_status st = DT_OK;
    if (v > 0) {
        char mv[32];
        if ((st = find_version(h, name, v, mv, sizeof mv)) == DT_OK && !mv[0])
            st = dt_error_set(DT_ERR_NOTFOUND,
                              "mlflow %s: model %s has no version tagged "
                              "dtrain.version=%d (registered before MLflow was used?)",
                              h->base, name, v);
        if (st == DT_OK) cJSON_AddStringToObject(q, "version", mv);
        if (st == DT_OK) st = mlf_call(h, "registered-models/alias", q, 0, NULL);
    } else {
        st = mlf_call(h, "registered-models/alias", q, 1, NULL);
        if (st == DT_ERR_NOTFOUND) st = DT_OK; /* already gone */
    }
    cJSON_Delete(q);
    return st;
}

dt_status mlf_model_op(mlf_http *h, const cJSON *op, const char *run_id) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(op, "op"));
    return kind && !strcmp(kind, "alias") ? alias(h, op) : model_version(h, op, run_id);
}

dt_status mlf_send_all(const char *uri, const char *spool, cJSON *ops) {
    mlf_http h;
    dt_status st = mlf_http_init(&h, uri, 30);
    if (st != DT_OK) return st;
    char run_id[MLF_RUN_ID_MAX] = "", why[1200] = "";
    cJSON *op = ops->child;
    for (; op; op = op->next) {
        for (int i = 0; i < TRIES; i++) {
            if ((st = mlf_exec(&h, op, run_id)) != DT_ERR_IO) break;
            if (i + 1 < TRIES) { /* 0.5 s, then 1 s */
                long ms = 500L << i;
                nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
            }
        }
        if (st != DT_OK) break;
    }
    snprintf(why, sizeof why, "%s", st == DT_OK ? "" : dt_last_error());
    int spooled = 0;
    for (; st == DT_ERR_IO && spool && op; op = op->next) {
        if (run_id[0] && !cJSON_GetObjectItem(op, "run_id") &&
            strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(op, "op")), "alias"))
            cJSON_AddStringToObject(op, "run_id", run_id);
        cJSON_AddStringToObject(op, "uri", h.base);
        if (mlf_spool_append(spool, op) != DT_OK) {
            snprintf(why, sizeof why, "%s", dt_last_error());
            break;
        }
        spooled++;
    }
    mlf_http_free(&h);
    if (st == DT_OK) return DT_OK;
    if (spooled && !op)
        return dt_error_set(DT_ERR_IO,
                            "%s; %d request%s spooled to %s (`dtrain runs sync` sends "
                            "%s)",
                            why, spooled, spooled == 1 ? "" : "s", spool,
                            spooled == 1 ? "it" : "them");
    return dt_error_set(st, "%s", why);
}

/* A look-up before anything was sent failed on I/O: nothing is spooled, so not DT_ERR_IO (which
 * the callers read as "spooled"). */
static dt_status unsent(dt_status st) {
    if (st != DT_ERR_IO) return st;
    char why[1024];
    snprintf(why, sizeof why, "%s", dt_last_error());
    return dt_error_set(DT_ERR_STATE, "%s; nothing sent", why);
}

/* The requests that bring version v to MLflow: each file's upload to artifact_dir, then the
 * model_version op (which creates the registered model when missing). */
static cJSON *version_ops(const dt_mlflow_version *v) {
    cJSON *ops = cJSON_CreateArray();
    for (int i = 0; i < v->n_files; i++) {
        char file[8192], path[1024];
        snprintf(file, sizeof file, "%s/%s", v->folder, v->files[i]);
        snprintf(path, sizeof path, "%s/%s", v->artifact_dir, v->files[i]);
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "upload");
        cJSON_AddStringToObject(op, "experiment", v->experiment);
        cJSON_AddStringToObject(op, "run_name", v->run_name);
        cJSON_AddStringToObject(op, "file", file);
        cJSON_AddStringToObject(op, "path", path);
        if (v->xxh3 && v->xxh3[i]) cJSON_AddStringToObject(op, "xxh3", v->xxh3[i]);
        cJSON_AddItemToArray(ops, op);
    }
    cJSON *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "op", "model_version");
    cJSON_AddStringToObject(op, "experiment", v->experiment);
    cJSON_AddStringToObject(op, "run_name", v->run_name);
    cJSON_AddStringToObject(op, "name", v->model);
    cJSON_AddNumberToObject(op, "dtrain_version", v->version);
    cJSON_AddStringToObject(op, "path", v->artifact_dir);
    if (v->hash) cJSON_AddStringToObject(op, "hash", v->hash);
    if (v->description) cJSON_AddStringToObject(op, "description", v->description);
    cJSON_AddItemToArray(ops, op);
    return ops;
}

static int version_ok(const dt_mlflow_version *v) {
    return v && v->model && v->version >= 1 && v->experiment && v->run_name && v->folder &&
           v->artifact_dir;
}

dt_status dt_mlflow_register(const char *uri, const char *spool, const dt_mlflow_version *v) {
    if (!version_ok(v))
        return dt_error_set(DT_ERR_INVALID, "mlflow register: model, version, run and folder "
                                            "must be given");
    cJSON *ops = version_ops(v);
    dt_status st = mlf_send_all(uri, spool, ops);
    cJSON_Delete(ops);
    return st;
}

dt_status dt_mlflow_version_sync(const char *uri, const char *spool, const dt_mlflow_version *v,
                                 int *sent, int *run_created) {
    *sent = 0, *run_created = 0;
    if (!version_ok(v))
        return dt_error_set(DT_ERR_INVALID, "mlflow sync: model, version, run and folder "
                                            "must be given");
    mlf_http h;
    dt_status st = mlf_http_init(&h, uri, 30);
    if (st != DT_OK) return st;
    char have[32], run_id[MLF_RUN_ID_MAX];
    if ((st = find_version(&h, v->model, v->version, have, sizeof have)) == DT_OK && !have[0]) {
        st = mlf_find_run(&h, v->experiment, v->run_name, run_id);
        /* a run never tracked to MLflow: created (FINISHED) to hold the checkpoint's files */
        if (st == DT_ERR_NOTFOUND) *run_created = 1, st = DT_OK;
    }
    mlf_http_free(&h);
    if (st != DT_OK || have[0]) return unsent(st);
    cJSON *ops = version_ops(v);
    if (*run_created) {
        cJSON *b = cJSON_CreateObject(), *e = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "op", "begin");
        cJSON_AddStringToObject(b, "experiment", v->experiment);
        cJSON_AddStringToObject(b, "run_name", v->run_name);
        cJSON_InsertItemInArray(ops, 0, b);
        cJSON_AddStringToObject(e, "op", "end");
        cJSON_AddStringToObject(e, "status", "FINISHED");
        cJSON_AddItemToArray(ops, e);
    }
    st = mlf_send_all(uri, spool, ops);
    cJSON_Delete(ops);
    *sent = st == DT_OK;
    return st;
}

dt_status dt_mlflow_alias_sync(const char *uri, const char *spool, const char *model, int version,
                               const char *alias_name, int *sent) {
    *sent = 0;
    if (!model || !alias_name || version < 1)
        return dt_error_set(DT_ERR_INVALID, "mlflow alias sync: model, version and alias needed");
    mlf_http h;
    dt_status st = mlf_http_init(&h, uri, 30);
    if (st != DT_OK) return st;
    char want[32], at[32] = "", path[1200];
    if ((st = find_version(&h, model, version, want, sizeof want)) == DT_OK) {
        /* the registered model lists its aliases; asking for a missing alias is refused */
        char *em = curl_easy_escape(h.c, model, 0);
        snprintf(path, sizeof path, "registered-models/get?name=%s", em ? em : "");
        curl_free(em);
        cJSON *r = NULL, *al;
        st = mlf_call(&h, path, NULL, 0, &r);
        cJSON_ArrayForEach(
            al, cJSON_GetObjectItem(cJSON_GetObjectItem(r, "registered_model"), "aliases")) {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(al, "alias")),
                       *x = cJSON_GetStringValue(cJSON_GetObjectItem(al, "version"));
            if (n && x && !strcmp(n, alias_name)) snprintf(at, sizeof at, "%s", x);
        }
        if (st == DT_ERR_NOTFOUND) st = DT_OK; /* no such model: the alias op names it */
        cJSON_Delete(r);
    }
    mlf_http_free(&h);
    if (st != DT_OK || (at[0] && !strcmp(at, want))) return unsent(st);
    st = dt_mlflow_alias(uri, spool, model, version, alias_name);
    *sent = st == DT_OK;
    return st;
}

dt_status dt_mlflow_alias(const char *uri, const char *spool, const char *model, int version,
                          const char *alias_name) {
    if (!model || !alias_name || version < 0)
        return dt_error_set(DT_ERR_INVALID, "mlflow alias: model and alias must be given");
    cJSON *ops = cJSON_CreateArray(), *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "op", "alias");
    cJSON_AddStringToObject(op, "name", model);
    cJSON_AddNumberToObject(op, "dtrain_version", version);
    cJSON_AddStringToObject(op, "alias", alias_name);
    cJSON_AddItemToArray(ops, op);
    dt_status st = mlf_send_all(uri, spool, ops);
    cJSON_Delete(ops);
    return st;
}

dt_status dt_mlflow_version_number(const char *uri, const char *model, int version, char *out,
                                   size_t n) {
    mlf_http h;
    dt_status st = mlf_http_init(&h, uri, 30);
    if (st == DT_OK) st = find_version(&h, model, version, out, n);
    mlf_http_free(&h);
    return st;
}
