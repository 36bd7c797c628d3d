/* The experiment store: experiments, runs, their resolved config, metrics, checkpoints and
 * exported models, tags and lineage, in one SQLite file.
 *
 *   dt_track *s;
 *   dt_track_open("runs/dtrain.db", &s);                     // creates file + schema if needed
 *   int64_t run;
 *   dt_track_run_begin(s, "exp", "r1", 2, "node1:2", yaml, lineage, n, &run);
 *   dt_track_metric(s, run, "loss", step, dt_track_wall(), 2.31);   // buffered, never blocks
 *   dt_track_artifact(s, run, "checkpoint", uri, step, "{\"loss\": 2.3}");
 *   dt_track_run_end(s, run, "done", "600 steps");          // flushes first
 *   dt_track_close(s);
 *
 * Why SQLite in WAL mode: one file beside the runs, no server; readers (`dtrain runs ...`) see
 * committed data while a run writes, and several writers (two launches on one store) take turns
 * through a busy timeout instead of failing with "database is locked". Every write transaction
 * is BEGIN IMMEDIATE, so a writer never holds a read snapshot it cannot upgrade.
 *
 * Metrics and artifacts are buffered in memory and written by a background thread in one
 * transaction every N rows or T seconds (dt_track_set_flush), so a training step never waits on
 * the disk. A write error is sticky: the rows are dropped and every later call returns it (the
 * trainer turns it into one warning and stops tracking; training goes on).
 *
 * A run is named (experiment, run name): beginning a run whose name exists makes a new attempt
 * of it (attempts + 1, status running): a resumed or restarted run stays one run. Metric rows
 * carry their attempt, so an attempt that repeats steps after a resume is told apart. Each
 * attempt keeps its own status, reason, times and writer (schema 2); the run's own status,
 * reason and end time are those of its newest attempt.
 *
 * Two writers per run, taking turns: the process that trains (rank 0) begins each attempt and
 * writes metrics, artifacts and its own end; a supervisor (`dtrain launch`) writes only once the
 * attempt's processes have all exited -- dt_track_attempt_end with what only it knows (a worker
 * killed, the restart, giving up), and tags. */
#ifndef DTRAIN_TRACK_H
#define DTRAIN_TRACK_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: the attempts table (per-attempt status and reason). Stores of version 1 are migrated when
 * opened: each run's latest attempt is copied from the run; earlier ones were never recorded.
 * 3: the model registry's tables (include/dtrain/registry.h), added empty to older stores. */
#define DT_TRACK_SCHEMA_VERSION 3

typedef struct dt_track dt_track;

typedef struct dt_track_kv {
    const char *key, *value;
} dt_track_kv;

/* Opens the store at `uri`: a path to a .db file or file://PATH, creating its folder, the file
 * and the schema when missing. Errors name the path: cannot create, not a SQLite file, made by a
 * newer dtrain. */
dt_status dt_track_open(const char *uri, dt_track **out);
/* The SQLite store a run of a config writes: tracking.uri when it is a path or file://, else
 * (empty, or an MLflow server: http://, https://, which is written in addition,
 * include/dtrain/mlflow.h) <output_dir>/dtrain.db; "off" stays "off". */
void dt_track_local_uri(const char *tracking_uri, const char *output_dir, char *out, size_t n);
/* The same for readers: a missing file is DT_ERR_NOTFOUND, nothing is created. */
dt_status dt_track_open_existing(const char *uri, dt_track **out);
/* The file path. */
const char *dt_track_path(const dt_track *s);
/* Metrics are written every `every_n` rows or `every_s` seconds, whichever comes first
 * (defaults 512 rows, 2 s). */
void dt_track_set_flush(dt_track *s, int every_n, double every_s);
/* Writes the buffered metrics and artifacts now (waits for the disk). */
dt_status dt_track_flush(dt_track *s);
/* Flushes (unless an earlier write failed), stops the writer thread, closes. Returns the flush
 * status; the store is freed either way. NULL is fine. */
dt_status dt_track_close(dt_track *s);
/* Seconds since the Unix epoch (the wall times stored). */
double dt_track_wall(void);

/* ---- Writing -------------------------------------------------------------------------------- */

/* Starts a run, or a new attempt of the run (experiment, run_name). `hosts` is free text
 * (e.g. "node1:2,node2:1"); `config_yaml` the resolved config, stored whole and flattened into
 * params ("optim.lr" -> "0.003"); lineage rows replace the previous attempt's (keys used by the
 * trainer: code_version, config_hash, dataset.train, dataset.val, base_model, base_model_hash).
 * The writer's host and pid are recorded so readers can tell a run whose process died. */
dt_status dt_track_run_begin(dt_track *s, const char *experiment, const char *run_name, int world,
                             const char *hosts, const char *config_yaml, const dt_track_kv *lineage,
                             int n_lineage, int64_t *run_id);
/* Buffers one value (no I/O; thread-safe). Returns the sticky error of an earlier write. */
dt_status dt_track_metric(dt_track *s, int64_t run_id, const char *key, int64_t step, double wall,
                          double value);
/* A checkpoint ("checkpoint") or exported model ("model") at `uri`, with the metrics at that
 * step as a JSON object (may be NULL; anything else is DT_ERR_INVALID). Buffered with the
 * metrics (no I/O: the checkpoint writer thread never waits on the store). Thread-safe. */
dt_status dt_track_artifact(dt_track *s, int64_t run_id, const char *kind, const char *uri,
                            int64_t step, const char *metrics_json);
/* The artifact at `uri` is gone (a checkpoint removed by retention): recorded as a row of kind
 * "removed" after it (buffered, thread-safe), so that readers mark it (dt_track_artifact_row's
 * `removed`) instead of listing a folder that no longer exists. `why` ("retention", ...) goes
 * into the row's metrics as {"reason": why}. */
dt_status dt_track_artifact_removed(dt_track *s, int64_t run_id, const char *uri, int64_t step,
                                    const char *why);
/* Sets (replaces) a tag. */
dt_status dt_track_tag(dt_track *s, int64_t run_id, const char *key, const char *value);
/* Flushes metrics, then sets status ("done", "failed", "preempted", ...), exit reason and end
 * time of the attempt this handle began (of the newest attempt for a run it did not begin); the
 * run's own status follows when that attempt is its newest. */
dt_status dt_track_run_end(dt_track *s, int64_t run_id, const char *status,
                           const char *exit_reason);

/* ---- Supervising (dtrain launch) ------------------------------------------------------------ */

/* The number of attempts of (experiment, run_name) so far; 0 when there is no such run. */
dt_status dt_track_run_attempts(dt_track *s, const char *experiment, const char *run_name,
                                int *attempts);

/* What a supervisor knows of an attempt it ran, told after every process of it has exited. */
typedef struct dt_track_attempt_end_info {
    /* dt_track_run_attempts before the attempt started: when no process began an attempt since
     * (the workers died before reaching the store), the supervisor's attempt is added, so that
     * every attempt is counted; the run is created when missing */
    int attempts_before;
    double start_time; /* of an added attempt (dt_track_wall) */
    int world;         /* of an added attempt */
    const char *hosts; /* of an added attempt; may be NULL */
    const char *status;
    /* NULL: keep the reason the attempt's own writer recorded (if any) */
    const char *exit_reason;
} dt_track_attempt_end_info;

/* Ends the newest attempt of (experiment, run_name) begun after info->attempts_before (or adds
 * one, see above) with info->status and exit reason, whatever its own writer recorded or failed
 * to record (a SIGKILLed rank 0 leaves it "running"); the run's status follows. One
 * transaction. *run_id (may be NULL): the run, for dt_track_tag. */
dt_status dt_track_attempt_end(dt_track *s, const char *experiment, const char *run_name,
                               const dt_track_attempt_end_info *info, int64_t *run_id);

/* ---- Reading -------------------------------------------------------------------------------- */

typedef struct dt_track_run {
    int64_t id;
    char experiment[256], name[256];
    char status[32];
    int attempts, world;
    double start_time, end_time; /* Unix seconds; end 0 while running */
    char hosts[1024];
    char exit_reason[1024];
    char writer_host[256]; /* host and pid of the process that began the latest attempt */
    int64_t writer_pid;
    int lost;          /* status "running", begun on this host by a process that no longer exists */
    int64_t last_step; /* highest step with a metric; -1 if none */
    int64_t n_metrics;
} dt_track_run;

/* Callbacks return 0 to go on, non-zero to stop. */
typedef int (*dt_track_run_cb)(void *ud, const dt_track_run *r);
typedef int (*dt_track_kv_cb)(void *ud, const char *key, const char *value);

typedef struct dt_track_metric_row {
    const char *key;
    int64_t step;
    double wall, value;
    int attempt;
} dt_track_metric_row;
typedef int (*dt_track_metric_cb)(void *ud, const dt_track_metric_row *m);

/* Per key: how many values, the final one (latest attempt, highest step), min and max. */
typedef struct dt_track_summary {
    const char *key;
    int64_t n;
    int64_t last_step, min_step, max_step;
    double last, min, max;
} dt_track_summary;
typedef int (*dt_track_summary_cb)(void *ud, const dt_track_summary *m);

/* One attempt of a run (see DT_TRACK_SCHEMA_VERSION for stores migrated from version 1). */
typedef struct dt_track_attempt {
    int attempt; /* 1, 2, ... */
    char status[32];
    double start_time, end_time; /* end 0 while running */
    int world;
    char hosts[1024];
    char exit_reason[1024];
    char writer_host[256]; /* who began it (or the supervisor that added it) */
    int64_t writer_pid;
} dt_track_attempt;
typedef int (*dt_track_attempt_cb)(void *ud, const dt_track_attempt *a);

typedef struct dt_track_artifact_row {
    int64_t id, step;
    const char *kind, *uri, *metrics_json; /* metrics_json "" if none */
    double created;
    int attempt;
    double removed; /* when it was recorded as removed (dt_track_artifact_removed); 0: not */
} dt_track_artifact_row;
typedef int (*dt_track_artifact_cb)(void *ud, const dt_track_artifact_row *a);

/* Runs, newest first, optionally only of one experiment and/or one status (NULL or "": all). */
dt_status dt_track_runs(dt_track *s, const char *experiment, const char *status, dt_track_run_cb cb,
                        void *ud);
/* Runs whose tag `key` is `value` (one statement: e.g. a sweep's trials by sweep_id), newest
 * first. */
dt_status dt_track_runs_tagged(dt_track *s, const char *key, const char *value, dt_track_run_cb cb,
                               void *ud);
/* A run by reference: its numeric id (an all-digit reference is always an id),
 * "experiment/name", or a name unique across experiments. Not found (DT_ERR_NOTFOUND) and
 * ambiguous (DT_ERR_INVALID, listing the candidates) are errors naming the reference. */
dt_status dt_track_run_find(dt_track *s, const char *ref, dt_track_run *out);
dt_status dt_track_params(dt_track *s, int64_t run_id, dt_track_kv_cb cb, void *ud);
/* The resolved config YAML of the latest attempt ("" if none), malloc'ed. */
dt_status dt_track_config_yaml(dt_track *s, int64_t run_id, char **yaml /* free() */);
dt_status dt_track_lineage(dt_track *s, int64_t run_id, dt_track_kv_cb cb, void *ud);
dt_status dt_track_tags(dt_track *s, int64_t run_id, dt_track_kv_cb cb, void *ud);
/* Metric rows in (key, attempt, step) order; key NULL: every key. */
dt_status dt_track_metrics(dt_track *s, int64_t run_id, const char *key, dt_track_metric_cb cb,
                           void *ud);
dt_status dt_track_metric_summary(dt_track *s, int64_t run_id, dt_track_summary_cb cb, void *ud);
/* Artifacts in the order recorded, each with its `removed` time; the "removed" rows themselves are
 * not listed. */
dt_status dt_track_artifacts(dt_track *s, int64_t run_id, dt_track_artifact_cb cb, void *ud);
/* The attempts that were recorded, oldest first. */
dt_status dt_track_attempts(dt_track *s, int64_t run_id, dt_track_attempt_cb cb, void *ud);
/* Deletes a run and everything recorded for it (not its files). */
dt_status dt_track_run_delete(dt_track *s, int64_t run_id);

/* Flattens a YAML document's nested mappings into dotted keys ("optim.lr"); sequences become
 * "[a, b]". Used for params; exposed for tests and tools. */
dt_status dt_track_flatten_yaml(const char *yaml, dt_track_kv_cb cb, void *ud);

#ifdef __cplusplus
}
#endif
#endif
