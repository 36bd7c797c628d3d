/* Internal state of the experiment store (include/dtrain/track.h). store.c opens it and owns
 * the schema, metrics.c buffers metrics and artifacts and runs the writer thread, write.c writes
 * runs and tags, attempt.c a supervisor's record of an attempt, query.c reads, registry.c the model
 * registry (include/dtrain/registry.h). */
#ifndef DTRAIN_TRACK_IMPL_H
#define DTRAIN_TRACK_IMPL_H

#include <pthread.h>
#include <sqlite3.h>
#include "dtrain/track.h"

enum { DT_TRK_KEY_MAX = 64, DT_TRK_BEGUN_MAX = 16 };

/* A buffered row: a metric value, or an artifact (uri set; key = its kind). */
typedef struct trk_metric {
    int64_t run, step;
    double wall, value;
    int attempt; /* 0: the run's current attempt at write time */
    char key[DT_TRK_KEY_MAX];
    char *uri, *metrics; /* artifacts only (owned); metrics may be NULL */
} trk_metric;

struct dt_track {
    sqlite3 *db;
    char path[4096];
    /* One transaction at a time on the connection (the writer thread, the ckpt writer thread
     * and the caller share it). Recursive: a reader's callback may query again. */
    pthread_mutex_t db_mu;
    /* the metric buffer, handed to the writer thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    trk_metric *rows, *spare;
    size_t n, cap, spare_cap;
    int every_n;
    double every_s;
    pthread_t th;
    int have_th, quit, writing;
    dt_status err; /* sticky: the first failed metric write */
    char err_msg[1024];
    /* attempts of the runs begun through this handle, for their metric rows */
    int n_begun;
    int64_t begun_run[DT_TRK_BEGUN_MAX];
    int begun_attempt[DT_TRK_BEGUN_MAX];
};

/* "PATH: WHAT: sqlite's message" as the last error (DT_ERR_IO). */
dt_status dt_trk_fail(dt_track *s, const char *what);
/* Runs `fn` inside BEGIN IMMEDIATE ... COMMIT (ROLLBACK when it fails), holding db_mu. */
dt_status dt_trk_tx(dt_track *s, const char *what, dt_status (*fn)(dt_track *s, void *ud),
                    void *ud);
/* Prepares a statement; errors name the path. */
dt_status dt_trk_prepare(dt_track *s, const char *sql, sqlite3_stmt **st);
/* Readers (query.c): dt_trk_prep locks db_mu and prepares (unlocked on failure);
 * dt_trk_metric_rows steps a "key, step, wall, value, attempt" query into cb, finalizes it and
 * unlocks. */
dt_status dt_trk_prep(dt_track *s, const char *sql, sqlite3_stmt **q);
/* dt_trk_prep, then binds ?1 to run id `run` (the queries of one run). */
dt_status dt_trk_prep_run(dt_track *s, const char *sql, int64_t run, sqlite3_stmt **q);
/* Steps `q` (bound), calling `row` per result (non-zero stops), finalizes it and unlocks db_mu
 * (taken by dt_trk_prep). */
dt_status dt_trk_each_row(dt_track *s, sqlite3_stmt *q, int (*row)(sqlite3_stmt *q, void *ud),
                          void *ud);
dt_status dt_trk_metric_rows(dt_track *s, sqlite3_stmt *q, dt_track_metric_cb cb, void *ud);
/* Binds text, NULL pointers as SQL NULL. */
void dt_trk_bind_text(sqlite3_stmt *st, int i, const char *v);
/* Writers (write.c, attempt.c), inside a transaction. dt_trk_step_done steps a statement bound
 * by the caller, expecting SQLITE_DONE (else "PATH: WHAT: ..."), and finalizes it. */
dt_status dt_trk_step_done(dt_track *s, sqlite3_stmt *q, const char *what);
/* Adds experiment `experiment` (created `now`) unless it exists. */
dt_status dt_trk_add_experiment(dt_track *s, const char *experiment, double now);
/* The id and attempt count of run `name` of `experiment` (both 0 when there is none). */
dt_status dt_trk_find_run(dt_track *s, const char *experiment, const char *name, int64_t *run,
                          int *attempts);
/* Ends attempt `attempt` of `run` (status, end time; reason NULL keeps the recorded one), and
 * the run itself when `newest`. Inside a transaction (write.c). */
dt_status dt_trk_end_attempt(dt_track *s, int64_t run, int attempt, int newest, const char *status,
                             const char *reason);
/* Writes the buffered metrics now (metrics.c). */
dt_status dt_trk_metrics_flush(dt_track *s);
/* Stops the writer thread after its last flush (metrics.c). */
void dt_trk_metrics_stop(dt_track *s);

#endif
