/* A training run's checkpoints: the saver (snapshot, background writer, per-step exchange,
 * commit, retention; src/ckpt/save.c) and the restore (src/ckpt/restore.c). Both work on a
 * narrow context -- the graph's parameters, the optimizer, the training loader's cursor, the
 * communicator and the DDP policy -- not on the trainer; the trainer gives them the numbers that
 * go into trainer_state.json and hears back through events. The on-disk format and the commit
 * protocol: docs/checkpoints.md and include/dtrain/checkpoint.h. */
#ifndef DTRAIN_CKPT_RUN_H
#define DTRAIN_CKPT_RUN_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/checkpoint.h"
#include "dtrain/data.h"
#include "dtrain/dist.h"
#include "dtrain/graph.h"
#include "dtrain/optim.h"
#include "dtrain/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_ckpt_ctx {
    dt_graph *g;                /* parameters by name and flat offset (frozen ones are not saved) */
    dt_optim *opt;              /* this rank's slice of the optimizer state */
    dt_loader *loader;          /* the training data: its cursor is saved, and restored */
    dt_comm *comm;              /* rank and world; the per-step exchange */
    dt_ddp *ddp;                /* NULL: one process; else ZeRO shard ownership and gathers */
    size_t n;                   /* trainable elements in the flat parameter buffer */
    const int64_t *batch_parts; /* uneven dist.batch_shares: each rank's batch; NULL: equal */
    int64_t parts_auto_step;    /* > 0: dist.batch_shares=auto chose batch_parts at this step */
    int parts_adopt;  /* auto, not re-balanced yet: a checkpoint whose parts auto chose (another
                       * split of the same global batch) is taken; the trainer then switches */
    dt_store *store;  /* where this run's checkpoints live (the caller's) */
    const char *root; /* their key prefix, "<experiment>/<run>/checkpoints" */
    FILE *log;        /* this rank's log (rank 0's; NULL: none) */
} dt_ckpt_ctx;

typedef enum dt_ckpt_event_kind {
    DT_CKPT_COMMITTED = 0, /* trainer_state.json of `dir` is written: the checkpoint exists */
    DT_CKPT_FAILED = 1,    /* the save of `step` was abandoned; message says why */
    DT_CKPT_REMOVED = 2,   /* retention removed `dir`; message says why */
    DT_CKPT_SNAPSHOT = 3,  /* rank 0, training thread: the state of `step` is copied and is
                            * about to be written; nothing of it is committed yet */
} dt_ckpt_event_kind;

typedef struct dt_ckpt_event {
    dt_ckpt_event_kind kind;
    int64_t step;
    const char *store_url, *dir; /* the checkpoint: dt_store_url and its key prefix */
    const dt_ckpt_state *state;  /* COMMITTED: what was written (metrics, files) */
    const char *message;
} dt_ckpt_event;

/* Called from the writer thread (COMMITTED, REMOVED) or the training thread (FAILED): the
 * callee takes its own locks. */
typedef void (*dt_ckpt_event_fn)(void *ud, const dt_ckpt_event *e);

typedef struct dt_ckpt_policy {
    int64_t every_steps;  /* 0: off */
    double every_minutes; /* 0: off; by rank 0's clock, agreed in the per-step exchange */
    int async;            /* 0: every save waits for its commit */
    int keep_last, keep_best;
    const char *best_metric;
    int best_max;         /* 1: a larger best_metric is better */
    int require_writable; /* a failed probe at open refuses; 0: a warning */
    dt_ckpt_event_fn on_event;
    void *event_ud;
} dt_ckpt_policy;

/* What the trainer knows at a step and trainer_state.json records (the rest comes from the
 * context: layout, optimizer, cursor, world size, ZeRO stage). */
typedef struct dt_ckpt_progress {
    int64_t step, epoch, total_steps;
    int64_t sched_start, sched_total; /* the LR schedule: began at, horizon (from its start) */
    int64_t samples_seen, rng_counter;
    int64_t seed;
    double lr, loss;
    int have_eval;
    double eval_loss, eval_accuracy;
    const char *config_yaml;  /* the resolved config (may be NULL) */
    const char *code_version; /* the git revision dtrain was built from */
} dt_ckpt_progress;

typedef struct dt_ckpt_saver dt_ckpt_saver;

/* Probes the location (every rank creates, writes, syncs and deletes an object of its own under
 * c->root; the ranks agree, so that all refuse or none), starts the writer thread, and with
 * periodic saves configured sizes and touches the snapshot buffers now (so the first save's
 * stall is a copy, not page faults). Every rank. A failed probe is an error naming the location
 * and the config key unless p->require_writable is 0 (then a warning on stderr). */
dt_status dt_ckpt_saver_open(const dt_ckpt_ctx *c, const dt_ckpt_policy *p, dt_ckpt_saver **out);
/* After every optimizer step, on every rank: the per-step exchange (stop requests, a timed save
 * due, writers done), commits a finished save, saves by policy (and at the last step), and on a
 * stop request saves and commits synchronously and sets *preempted. A failed save is reported
 * (a FAILED event and a log line) and training goes on; only a failed final or preemption save
 * is returned as an error. */
dt_status dt_ckpt_saver_step(dt_ckpt_saver *s, const dt_ckpt_progress *p, int stop_requested,
                             int *preempted);
/* What happened to this rank's saves so far (after dt_ckpt_saver_step). */
typedef struct dt_ckpt_report {
    int saves, failed, committed; /* committed: rank 0 only (it writes the commits) */
    int64_t last_committed_step;  /* -1: none in this run */
    int last_failed;              /* the newest save failed */
    char last_error[1024];        /* the newest failure's message */
} dt_ckpt_report;
void dt_ckpt_saver_report(dt_ckpt_saver *s, dt_ckpt_report *r);
/* Where the saver's log lines go from now on (the trainer's progress line wraps its log once
 * training starts; thread-safe against the writer). */
void dt_ckpt_saver_set_log(dt_ckpt_saver *s, FILE *log);
/* Waits for the writer and joins it. */
void dt_ckpt_saver_close(dt_ckpt_saver *s);
/* The trainer rebuilt its graph, DDP and loader for other batch parts (dist.batch_shares=auto):
 * the same parameter layout in new objects. Collective (a pending save is committed first). */
dt_status dt_ckpt_saver_retarget(dt_ckpt_saver *s, const dt_ckpt_ctx *c);

typedef struct dt_ckpt_resumed {
    int found; /* 0: no checkpoint (ckpt.resume=auto): start from step 0 */
    int64_t step, epoch;
    int old_world;       /* world size that wrote it */
    dt_ckpt_state state; /* its trainer_state.json (without files' contents); free with
                          * dt_ckpt_state_free */
    char dir[1200];      /* its key prefix */
} dt_ckpt_resumed;

/* Restores weights, this rank's optimizer slice and the loader's cursor from a checkpoint:
 * resume "auto" (the newest good one under c->root; a damaged one is skipped for the next
 * older) or one checkpoint's URI (which is not replaced by another). Every rank; one streaming
 * pass per file, each hashed while its bytes are put in place (src/ckpt/restore.c). */
dt_status dt_ckpt_restore(const dt_ckpt_ctx *c, const char *resume, dt_ckpt_resumed *out);

#ifdef __cplusplus
}
#endif
#endif
