/* Internal parts of the MLflow store (include/dtrain/mlflow.h): mlflow_http.c talks REST (one
 * request, auth, the run's ops), mlflow.c is the client's queue, thread and spool,
 * mlflow_sync.c replays a spool.
 *
 * An op is one JSON object, the same in memory, on the wire and as a spool line:
 *   {"op": "begin", "experiment": E, "run_name": N, "start_time": MS}
 *   {"op": "batch", "run_id": ID?, "metrics": [...], "params": [...], "tags": [...]}
 *   {"op": "end", "run_id": ID?, "status": "FINISHED", "end_time": MS}
 *   {"op": "upload", "run_id": ID?, "file": LOCAL, "path": ARTIFACT_PATH, "bytes": N}
 *   {"op": "model_version", "name": M, "dtrain_version": V, "path": ARTIFACT_PATH,
 *    "experiment": E, "run_name": N}      (mlflow_models.c)
 *   {"op": "alias", "name": M, "dtrain_version": V, "alias": A}  (V 0: remove the alias)
 * A batch, end or upload without run_id belongs to the run of the begin before it; an op
 * that names no run_id but an experiment and run_name logs to that run (looked up, never
 * created). */
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
    char ec[64];                  /* MLflow's error_code of the last refused request */
    char art_run[MLF_RUN_ID_MAX]; /* the run whose artifact root is art_root (a cache) */
    char art_root[1600]; /* its artifact proxy URL: .../mlflow-artifacts/artifacts/E/R/artifacts */
} mlf_http;

/* Reads the uri and the auth environment; errors name the uri. */
dt_status mlf_http_init(mlf_http *h, const char *uri, long timeout_s);
void mlf_http_free(mlf_http *h);

/* Runs one op. begin: finds or creates the experiment and the run (a found run is set RUNNING
 * again) and writes its id to run_id; batch/end: the op's run_id, else *run_id. DT_OK, or
 * DT_ERR_IO when the request may succeed later (no answer, 5xx, 429), or DT_ERR_INVALID when the
 * server refused it (its error code and message in the last error). */
dt_status mlf_exec(mlf_http *h, const cJSON *op, char run_id[MLF_RUN_ID_MAX]);

/* An answer's body, as it arrives. */
typedef struct mlf_body {
    char *p;
    size_t n;
} mlf_body;
/* The options every request has (url, headers, auth, TLS, timeouts, the answer into b). */
void mlf_setup(mlf_http *h, const char *url, struct curl_slist *hdr, mlf_body *b, char *err);
/* The status of a performed request (frees b); *resp (may be NULL) gets a 2xx answer. */
dt_status mlf_result(mlf_http *h, const char *url, CURLcode rc, mlf_body *b, const char *err,
                     cJSON **resp);
/* One request: GET (json NULL), POST of json, or DELETE (del set) of /api/2.0/mlflow/<path>;
 * *resp (may be NULL) gets a 2xx answer. Errors as mlf_exec's, NOTFOUND for
 * RESOURCE_DOES_NOT_EXIST; h->ec the error code. */
dt_status mlf_call(mlf_http *h, const char *path, const cJSON *json, int del, cJSON **resp);
/* The id of the run named `name` in experiment `exp` (the newest), DT_ERR_NOTFOUND if none. */
dt_status mlf_find_run(mlf_http *h, const char *exp, const char *name, char run_id[MLF_RUN_ID_MAX]);
/* The upload op (mlflow_artifacts.c): the file streamed from disk with PUT to the run's artifact
 * proxy; refused (DT_ERR_INVALID) when the run's artifact_uri is not mlflow-artifacts:. */
dt_status mlf_upload(mlf_http *h, const cJSON *op, const char *run_id);
/* The run's artifact_uri (runs/get) into out. */
dt_status mlf_artifact_uri(mlf_http *h, const char *run_id, char *out, size_t n);
/* The model_version and alias ops (mlflow_models.c). */
dt_status mlf_model_op(mlf_http *h, const cJSON *op, const char *run_id);
/* Runs the ops (an array) in order, synchronously, each tried 3 times while the server does not
 * answer; from the first that still fails that way, it and the rest go to `spool` (NULL: none)
 * and DT_ERR_IO names the spool (mlflow_models.c). */
dt_status mlf_send_all(const char *uri, const char *spool, cJSON *ops);
/* Appends op as one line to the spool (created with its folder), under the lock that
 * dt_mlflow_sync holds while it replays. */
dt_status mlf_spool_append(const char *spool, const cJSON *op);

/* Milliseconds since the Unix epoch of a wall time in seconds. */
double mlf_ms(double wall);

#endif
