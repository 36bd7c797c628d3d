/* The dashboard's JSON API over the experiment store:
 *   runs                          [{id, experiment, name, status, attempts, world, start, end,
 *                                   last_step, n_metrics, hosts}], newest first (at most 200)
 *   runs/ID                       the same fields plus exit_reason, config (YAML), params,
 *                                 tags, lineage, metric keys, artifacts [{kind, uri, step,
 *                                 created, attempt, metrics}]
 *   runs/ID/metrics?key=K&since=S {key, points: [[step, value, wall], ...]} for steps > S
 *   sweeps, sweeps/ID             the sweeps and one sweep's trials (api_sweep.c)
 * ID is a run id or "experiment/name". Errors are {"error": "..."} with 400/404/503. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve/serve_impl.h"
#include "track/track_json.h"

enum { MAX_LIST = 200 };

static int list_cb(void *ud, const dt_track_run *r) {
    cJSON_AddItemToArray(ud, dt_track_run_json(r));
    return cJSON_GetArraySize(ud) >= MAX_LIST;
}

static int kv_cb(void *ud, const char *k, const char *v) {
    cJSON_AddStringToObject(ud, k, v);
    return 0;
}

static int key_cb(void *ud, const dt_track_summary *m) {
    cJSON_AddItemToArray(ud, cJSON_CreateString(m->key));
    return 0;
}

static int art_cb(void *ud, const dt_track_artifact_row *a) {
    cJSON_AddItemToArray(ud, dt_track_artifact_json(a));
    return 0;
}

static int point_cb(void *ud, const dt_track_metric_row *m) {
    cJSON *p = cJSON_CreateArray();
    cJSON_AddItemToArray(p, cJSON_CreateNumber((double)m->step));
    /* JSON has no NaN: a diverged value is null */
    cJSON_AddItemToArray(p, isfinite(m->value) ? cJSON_CreateNumber(m->value) : cJSON_CreateNull());
    cJSON_AddItemToArray(p, cJSON_CreateNumber(m->wall));
    cJSON_AddItemToArray(ud, p);
    return 0;
}

int dt_sv_api_error(sv_buf *b, int code, const char *msg) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    char *t = cJSON_PrintUnformatted(o);
    dt_sv_puts(b, t ? t : "{}");
    free(t);
    cJSON_Delete(o);
    return code;
}

int dt_sv_api_emit(sv_buf *b, cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return b->failed = 1, 500;
    dt_sv_puts(b, t);
    free(t);
    return 200;
}

/* A store failure: the handle is reopened by the next request. */
int dt_sv_api_store_error(dt_serve *s, sv_buf *b) {
    int code = dt_sv_api_error(b, 503, dt_last_error());
    dt_sv_store_reset(s);
    return code;
}

int dt_sv_api(dt_serve *s, const char *path, const char *key, const char *since, sv_buf *b) {
    dt_track *st = dt_sv_store(s);
    if (!st) return dt_sv_api_error(b, 503, dt_last_error());
    if (!strcmp(path, "sweeps") || !strcmp(path, "sweeps/")) return dt_sv_api_sweeps(s, b);
    if (!strncmp(path, "sweeps/", 7)) return dt_sv_api_sweep(s, path + 7, b);
    if (!strcmp(path, "runs") || !strcmp(path, "runs/")) {
        cJSON *a = cJSON_CreateArray();
        if (dt_track_runs(st, NULL, NULL, list_cb, a) != DT_OK) {
            cJSON_Delete(a);
            return dt_sv_api_store_error(s, b);
        }
        return dt_sv_api_emit(b, a);
    }
    if (strncmp(path, "runs/", 5))
        return dt_sv_api_error(b, 404, "no such API: try /api/runs or /api/sweeps");
    char ref[1024];
    snprintf(ref, sizeof ref, "%s", path + 5);
    int metrics = 0;
    size_t l = strlen(ref);
    if (l > 8 && !strcmp(ref + l - 8, "/metrics")) ref[l - 8] = 0, metrics = 1;
    dt_track_run r;
    dt_status rc = dt_track_run_find(st, ref, &r);
    if (rc == DT_ERR_NOTFOUND || rc == DT_ERR_INVALID)
        return dt_sv_api_error(b, 404, dt_last_error());
    if (rc != DT_OK) return dt_sv_api_store_error(s, b);
    if (metrics) {
        if (!key || !key[0])
            return dt_sv_api_error(b, 400, "metrics: give ?key=NAME (e.g. key=loss)");
        char *end = NULL;
        long long from = since && since[0] ? strtoll(since, &end, 10) : -1;
        if (end && *end) return dt_sv_api_error(b, 400, "metrics: since must be a step number");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "key", key);
        cJSON_AddNumberToObject(o, "attempts", r.attempts);
        cJSON *pts = cJSON_AddArrayToObject(o, "points");
        if (dt_track_metrics_since(st, r.id, key, from, point_cb, pts) != DT_OK) {
            cJSON_Delete(o);
            return dt_sv_api_store_error(s, b);
        }
        return dt_sv_api_emit(b, o);
    }
    cJSON *o = dt_track_run_json(&r);
    cJSON_AddStringToObject(o, "exit_reason", r.exit_reason);
    char *yaml = NULL;
    rc = dt_track_config_yaml(st, r.id, &yaml);
    if (rc == DT_OK) cJSON_AddStringToObject(o, "config", yaml ? yaml : "");
    free(yaml);
    if (rc == DT_OK) rc = dt_track_params(st, r.id, kv_cb, cJSON_AddObjectToObject(o, "params"));
    if (rc == DT_OK) rc = dt_track_tags(st, r.id, kv_cb, cJSON_AddObjectToObject(o, "tags"));
    if (rc == DT_OK) rc = dt_track_lineage(st, r.id, kv_cb, cJSON_AddObjectToObject(o, "lineage"));
    if (rc == DT_OK)
        rc = dt_track_metric_summary(st, r.id, key_cb, cJSON_AddArrayToObject(o, "metric_keys"));
    if (rc == DT_OK)
        rc = dt_track_artifacts(st, r.id, art_cb, cJSON_AddArrayToObject(o, "artifacts"));
    if (rc != DT_OK) {
        cJSON_Delete(o);
        return dt_sv_api_store_error(s, b);
    }
    return dt_sv_api_emit(b, o);
}
