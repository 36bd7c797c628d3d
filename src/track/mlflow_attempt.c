/* The launcher's record of an attempt on the MLflow run (include/dtrain/mlflow.h): what the
 * SQLite store gets from dt_track_attempt_end, as tags and the run's status. The run is begun
 * (found by name, or created when the attempt's workers died before reaching the server), so
 * that a failed job is visible in MLflow even when no worker logged anything. */
#include <stdio.h>
#include <string.h>
#include "track/mlflow_impl.h"

static void tag(cJSON *a, const char *k, const char *v) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", k);
    char cut[MLF_MAX_TAG_VALUE + 1];
    snprintf(cut, sizeof cut, "%s", v);
    cJSON_AddStringToObject(o, "value", cut);
    cJSON_AddItemToArray(a, o);
}

dt_status dt_mlflow_attempt_end(const char *uri, const char *spool, const char *experiment,
                                const char *run_name, int attempt, const char *status,
                                const char *reason, int restarts) {
    if (!experiment || !run_name || !status || attempt < 1)
        return dt_error_set(DT_ERR_INVALID, "mlflow attempt: run, attempt and status needed");
    cJSON *ops = cJSON_CreateArray(), *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "op", "begin");
    cJSON_AddStringToObject(b, "experiment", experiment);
    cJSON_AddStringToObject(b, "run_name", run_name);
    cJSON_AddItemToArray(ops, b);
    cJSON *op = cJSON_CreateObject(), *tags = cJSON_CreateArray();
    cJSON_AddStringToObject(op, "op", "batch");
    cJSON_AddItemToObject(op, "tags", tags);
    char key[64], num[16];
    snprintf(key, sizeof key, "dtrain.attempt.%d.status", attempt);
    tag(tags, key, status);
    if (reason) {
        snprintf(key, sizeof key, "dtrain.attempt.%d.reason", attempt);
        tag(tags, key, reason);
    }
    snprintf(num, sizeof num, "%d", restarts);
    tag(tags, "dtrain.restarts", num);
    cJSON_AddItemToArray(ops, op);
    cJSON *end = cJSON_CreateObject();
    cJSON_AddStringToObject(end, "op", "end");
    cJSON_AddStringToObject(end, "status", dt_mlflow_status(status));
    cJSON_AddItemToArray(ops, end);
    dt_status st = mlf_send_all(uri, spool, ops);
    cJSON_Delete(ops);
    return st;
}
