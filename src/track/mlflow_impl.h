/* Internal parts of the MLflow store (include/dtrain/mlflow.h): mlflow_http.c talks REST (one
 * request, auth, the run's ops), mlflow.c is the client's queue, thread and spool,
 * mlflow_sync.c replays a spool.
 *
 * An op is one JSON object, the same in memory, on the wire and as a spool line:
 *   {"op": "begin", "experiment": E, "run_name": N, "start_time": MS}
 *   {"op": "batch", "run_id": ID?, "metrics": [...], "params": [...], "tags": [...]}
 *   {"op": "end", "run_id": ID?, "status": "FINISHED", "end_time": MS}
 * A batch or end without run_id belongs to the run of the begin before it. */
#ifndef DTRAIN_MLFLOW_IMPL_H
#define DTRAIN_MLFLOW_IMPL_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include "dtrain/mlflow.h"

/* MLflow's limits per log-batch request (mlflow/utils/validation.py) and of a param value. */
enum {
    MLF_MAX_METRICS = 1000,
    MLF_MAX_PARAMS_TAGS = 100,
    MLF_MAX_PARAM_VALUE = 6000,
    MLF_MAX_TAG_VALUE = 8000,
    MLF_RUN_ID_MAX = 64
};

typedef struct mlf_http {
    CURL *c;
    char base[1024]; /* the uri without a trailing '/' */
    struct curl_slist *hdr;
    char user[256], pass[256];
    long timeout_s;
} mlf_http;

/* Reads the uri and the auth environment; errors name the uri. */
dt_status mlf_http_init(mlf_http *h, const char *uri, long timeout_s);
void mlf_http_free(mlf_http *h);

/* Runs one op. begin: finds or creates the experiment and the run (a found run is set RUNNING
 * again) and writes its id to run_id; batch/end: the op's run_id, else *run_id. DT_OK, or
 * DT_ERR_IO when the request may succeed later (no answer, 5xx, 429), or DT_ERR_INVALID when the
 * server refused it (its error code and message in the last error). */
dt_status mlf_exec(mlf_http *h, const cJSON *op, char run_id[MLF_RUN_ID_MAX]);

/* Milliseconds since the Unix epoch of a wall time in seconds. */
double mlf_ms(double wall);

#endif
