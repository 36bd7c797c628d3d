/* An MLflow tracking server as a second store (tracking.uri: http://HOST:PORT or https://...):
 * a run's params, tags, metrics, final status and artefacts are sent through MLflow's REST API
 * (/api/2.0/mlflow/..., artefacts through the server's artifact proxy) by a background thread,
 * while the SQLite store stays the local record; registered model versions and aliases are sent
 * synchronously (dt_mlflow_register, dt_mlflow_alias).
 *
 *   dt_mlflow *m;
 *   dt_mlflow_open("http://mlflow:5000", "runs/exp/r1/mlflow-spool.jsonl", &m);  // no I/O yet
 *   dt_mlflow_run_begin(m, "exp", "r1", params, n_params, tags, n_tags);           // queued
 *   dt_mlflow_metric(m, "loss", step, dt_track_wall(), 2.31);                      // queued
 *   dt_mlflow_run_end(m, "FINISHED");                                              // queued
 *   dt_mlflow_close(m);      // sends what is left (a bounded wait), spools the rest
 *
 * Why a thread and a spool: training never waits on the network. Calls only append to memory;
 * the thread sends metrics in log-batch requests of at most 1000 metrics (params and tags: 100
 * per request, MLflow's limits) every 2 s or 1000 values. A request that fails with a network
 * error, a 5xx or a 429 is retried with backoff (0.5, 1, 2, 4 s); when it still fails, the batch
 * is appended to the spool file (JSON lines) and `dtrain runs sync` replays it later
 * (dt_mlflow_sync). Replays are idempotent: a run is found again by its experiment and name, the
 * server ignores a metric it already has (same key, step, timestamp and value), params and tags
 * are set to the same values. When the run itself could not be created, everything of it goes to
 * the spool. Other 4xx answers (a bad key) are one warning and that request is dropped: sending it
 * again would fail again; a refused params batch (a resumed run whose config changed: MLflow
 * never changes a param) is sent again param by param, and the changed ones are named.
 *
 * Auth, as MLflow's own client: MLFLOW_TRACKING_TOKEN (bearer), else MLFLOW_TRACKING_USERNAME
 * and MLFLOW_TRACKING_PASSWORD (basic); MLFLOW_TRACKING_INSECURE_TLS=true skips TLS
 * verification, MLFLOW_TRACKING_SERVER_CERT_PATH names a CA bundle. */
#ifndef DTRAIN_MLFLOW_H
#define DTRAIN_MLFLOW_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"
#include "dtrain/track.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_mlflow dt_mlflow;

/* 1 when `uri` names an MLflow server (http:// or https://). */
int dt_mlflow_is_uri(const char *uri);

/* A client of the server at `uri` that spools to `spool_path` (NULL: nothing is spooled; failed
 * batches are dropped with a warning). No request is made here. */
dt_status dt_mlflow_open(const char *uri, const char *spool_path, dt_mlflow **out);

/* Queues the run's start: the MLflow experiment `experiment` (created when missing) and the run
 * named `run_name` in it (found again when it exists: a resume continues the same MLflow run),
 * with params (values longer than MLflow's 6000 characters are cut) and tags. Copies everything. */
dt_status dt_mlflow_run_begin(dt_mlflow *m, const char *experiment, const char *run_name,
                              const dt_track_kv *params, int n_params, const dt_track_kv *tags,
                              int n_tags);
/* Queues one metric value (wall: Unix seconds, sent as milliseconds). Thread-safe, no I/O. */
dt_status dt_mlflow_metric(dt_mlflow *m, const char *key, int64_t step, double wall, double value);
/* Queues a tag. Thread-safe, no I/O. */
dt_status dt_mlflow_tag(dt_mlflow *m, const char *key, const char *value);
/* Queues the upload of the local file `file` to the run's artifact store at `artifact_path`
 * (segments of letters, digits, '.', '_', '-'), through the server's artifact proxy; xxh3 (16
 * hex digits, may be NULL) is the file's hash when listed: a file that changed since is
 * reported. Streamed from disk when sent; retried and spooled like the other requests (an
 * upload pending in the spool is sent again by `dtrain runs sync`, overwriting the same path).
 * Thread-safe, no I/O. */
dt_status dt_mlflow_artifact(dt_mlflow *m, const char *file, const char *artifact_path,
                             const char *xxh3);
/* Queues the end of the run: MLflow status FINISHED, FAILED or KILLED. */
dt_status dt_mlflow_run_end(dt_mlflow *m, const char *status);
/* The MLflow run status for a dtrain status ("done" -> FINISHED, "failed" -> FAILED, else
 * KILLED: stopped, preempted). */
const char *dt_mlflow_status(const char *dtrain_status);
/* Sends what is queued (each request tried once more at most when the server is down, so this
 * returns within about 2 request timeouts), spools the rest, stops the thread, frees. Returns
 * DT_ERR_IO naming the spool when anything was spooled in the client's life (its message says
 * how many requests and how to replay them). NULL is fine. */
dt_status dt_mlflow_close(dt_mlflow *m);

/* Replays the spool file at `spool_path` to the server it names (or `uri`, when not NULL),
 * in order. Done: the file is removed and *sent is the number of requests replayed. A failure
 * keeps the file (a later sync replays it all again, harmlessly) and names the line and the
 * server's answer. */
dt_status dt_mlflow_sync(const char *spool_path, const char *uri, int *sent);

/* A dtrain registry version as MLflow gets it (`dtrain models register`). */
typedef struct dt_mlflow_version {
    const char *model;       /* the registered model's name */
    int version;             /* dtrain's version number (tag dtrain.version in MLflow) */
    const char *description; /* may be NULL */
    const char *hash;        /* the version's content hash (tag dtrain.hash), may be NULL */
    const char *experiment, *run_name; /* the MLflow run, found by name as the trainer's */
    const char *folder;                /* the local artefact folder */
    const char *const *files;          /* plain file names in it, uploaded to artifact_dir/<name> */
    const char *const *xxh3;           /* each file's xxh3 as 16 hex digits (NULL: not checked) */
    int n_files;
    const char *artifact_dir; /* e.g. "checkpoints/step-600": the version's MLflow source */
} dt_mlflow_version;

/* Synchronously uploads the version's files to the run's artifact store, creates the registered
 * model when missing and a model version (source = the run's artifact_uri/artifact_dir, run_id,
 * tags dtrain.version and dtrain.hash) unless one with that dtrain.version exists. A server that
 * does not answer (each request is tried 3 times): what is left is appended to `spool` (NULL:
 * not kept) and DT_ERR_IO says so; a refusal is DT_ERR_INVALID/NOTFOUND with the server's
 * message. */
dt_status dt_mlflow_register(const char *uri, const char *spool, const dt_mlflow_version *v);
/* `dtrain models sync`: dt_mlflow_register unless MLflow has a version tagged dtrain.version =
 * v->version already (*sent 0). A run the server does not know (the version was made before
 * MLflow was used) is created first, named as in dtrain, and ended FINISHED: it holds the
 * checkpoint's files only, no params or metrics (*run_created 1). Spooled as
 * dt_mlflow_register once sending began; a server that does not answer the look-ups before is
 * DT_ERR_STATE, nothing sent or spooled. */
dt_status dt_mlflow_version_sync(const char *uri, const char *spool, const dt_mlflow_version *v,
                                 int *sent, int *run_created);
/* Sets alias `alias` of `model` on the MLflow version tagged dtrain.version = `version` unless
 * it points there already (*sent 0); the version must be in MLflow (DT_ERR_NOTFOUND otherwise). */
dt_status dt_mlflow_alias_sync(const char *uri, const char *spool, const char *model, int version,
                               const char *alias, int *sent);
/* Points alias `alias` of `model` at the MLflow version tagged dtrain.version=`version`
 * (version 0: deletes the alias), as dt_mlflow_register sends and spools. */
dt_status dt_mlflow_alias(const char *uri, const char *spool, const char *model, int version,
                          const char *alias);
/* What `dtrain launch` knows of an attempt that ended (every process of it exited): on the run
 * (experiment, run_name) -- created when its workers never reached the server -- tags
 * dtrain.attempt.<attempt>.status and .reason (NULL: none) and dtrain.restarts, then the run's
 * status for `status` (dt_mlflow_status; a next attempt sets RUNNING again). Synchronous, spooled
 * as dt_mlflow_register. */
dt_status dt_mlflow_attempt_end(const char *uri, const char *spool, const char *experiment,
                                const char *run_name, int attempt, const char *status,
                                const char *reason, int restarts);
/* MLflow's own version number of dtrain version `version` of `model` ("" when none). */
dt_status dt_mlflow_version_number(const char *uri, const char *model, int version, char *out,
                                   size_t n);

#ifdef __cplusplus
}
#endif
#endif
