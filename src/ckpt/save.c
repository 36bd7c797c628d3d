/* The saver: policy, snapshot, background writer, commit, retention (include/dtrain/ckpt_run.h).
 *
 * A save: (back-pressure) wait until the previous save is committed -> snapshot: copy this
 * rank's part of the state into reused host buffers laid out as whole safetensors files (rank
 * 0: model.safetensors; optim-RRRRR-of-WWWWW.safetensors from each rank that owns optimizer
 * state) -> the writer thread puts the files and hashes them while training goes on -> every
 * step a tiny all-reduce tells every rank whether all writers are done and carries each file's
 * size and xxh3 to rank 0 -> rank 0's writer puts trainer_state.json (the commit) and applies
 * retention. Only the snapshot (and a wait when the previous save is still running) stalls
 * training; it is logged.
 *
 * Preemption: a stop request is agreed on by all ranks in the same per-step exchange; the step
 * finishes, a checkpoint is saved and committed synchronously, and the caller is told. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include "dtrain/ckpt_run.h"
#include "dtrain/safetensors.h"
#include "dtrain/dtrain.h"

typedef struct snap_file {
    char name[64];
    void *buf;
    size_t cap, len;
    uint64_t hash;
} snap_file;

enum { JOB_NONE = 0, JOB_WRITE = 1, JOB_COMMIT = 2 };

/* Per rank in the per-step exchange: done, ok, bytes, hash high/low 32 bits of its optimizer
 * file. */
enum { SLOT = 5 };

struct dt_ckpt_saver {
    dt_ckpt_ctx c;
    dt_ckpt_policy p;
    char root[1100], best_metric[64];
    int rank, world, sharded; /* sharded: every rank owns an optimizer file (ZeRO) */
    int enabled;              /* periodic saves configured */
    double *xbuf;             /* [2 + world * SLOT] the per-step exchange */
    /* writer thread */
    pthread_t th;
    int have_th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int jobs[2], n_jobs, busy, quit;
    dt_status err;
    char msg[1024];
    /* the save in flight */
    int pending;  /* files handed to the writer, not yet committed */
    int64_t step; /* of the save in flight */
    char dir[1200];
    snap_file model, optim;
    int have_model, have_optim;
    dt_ckpt_state state; /* rank 0: trainer_state.json; "files" added at the commit */
    char *commit_json;
    double stall_s, last_save_time;
    double write_s;
    int failed; /* the last save failed on this rank (files or commit) */
    char commit_line[2048];
    char failed_msg[1024];
    int n_saves, n_failed, n_committed; /* n_committed: under mu (the writer counts) */
    int64_t last_committed, first_step; /* -1: none yet */
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void emit(dt_ckpt_saver *s, dt_ckpt_event_kind kind, int64_t step, const char *dir,
                 const dt_ckpt_state *state, const char *message) {
    if (!s->p.on_event) return;
    dt_ckpt_event e = {kind, step, dt_store_url(s->c.store), dir, state, message};
    s->p.on_event(s->p.event_ud, &e);
}

/* ---- writer thread --------------------------------------------------------------------- */

static dt_status put_file(dt_ckpt_saver *s, snap_file *f) {
    char key[1300];
    snprintf(key, sizeof key, "%s/%s", s->dir, f->name);
    f->hash = XXH3_64bits(f->buf, f->len);
    return dt_store_put(s->c.store, key, f->buf, f->len);
}

static void on_removed(void *ud, const char *dir, int64_t step, const char *why) {
    emit(ud, DT_CKPT_REMOVED, step, dir, NULL, why);
}

static dt_status put_commit(dt_ckpt_saver *s) {
    char key[1300];
    snprintf(key, sizeof key, "%s/%s", s->dir, DT_CKPT_STATE);
    dt_status st = dt_store_put(s->c.store, key, s->commit_json, strlen(s->commit_json));
    if (st != DT_OK) return st;
    pthread_mutex_lock(&s->mu); /* dt_ckpt_saver_set_log may swap it */
    FILE *log = s->c.log;
    pthread_mutex_unlock(&s->mu);
    if (log) fputs(s->commit_line, log), fflush(log);
    pthread_mutex_lock(&s->mu);
    s->n_committed++, s->last_committed = s->step;
    pthread_mutex_unlock(&s->mu);
    emit(s, DT_CKPT_COMMITTED, s->step, s->dir, &s->state, NULL);
    /* Retention only after the new checkpoint is committed. Its failure leaves extra
     * checkpoints behind, not a bad one: a warning, not a failed save. */
    if (dt_ckpt_retain(s->c.store, s->root, s->step, s->p.keep_last, s->p.keep_best, s->best_metric,
                       s->p.best_max ? "max" : "min", on_removed, s) != DT_OK)
        fprintf(stderr, "warning: checkpoint retention under %s: %s\n", s->root, dt_last_error());
    return DT_OK;
}

static void *writer_main(void *arg) {
    dt_ckpt_saver *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->n_jobs && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->n_jobs) break;
        int job = s->jobs[0];
        s->jobs[0] = s->jobs[1], s->n_jobs--;
        pthread_mutex_unlock(&s->mu);
        double t0 = now();
        dt_status st = DT_OK;
        if (job == JOB_WRITE) {
            if (s->have_model) st = put_file(s, &s->model);
            if (st == DT_OK && s->have_optim) st = put_file(s, &s->optim);
        } else {
            st = put_commit(s);
        }
        double dt = now() - t0;
        pthread_mutex_lock(&s->mu);
        if (job == JOB_WRITE) s->write_s = dt;
        if (st != DT_OK && s->err == DT_OK) {
            s->err = st;
            snprintf(s->msg, sizeof s->msg, "%s", dt_last_error());
        }
        s->busy--;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void submit(dt_ckpt_saver *s, int job) {
    pthread_mutex_lock(&s->mu);
    s->jobs[s->n_jobs++] = job;
    s->busy++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* A save of this rank failed: remembered (a final or preemption save fails the run), counted,
 * and said loudly -- on stderr (`own`: this rank's writer failed; else another rank's did) and
 * as an event -- with a reminder while no save of this run has been committed at all. */
static void note_failure(dt_ckpt_saver *s, const char *msg, int own) {
    if (s->failed) return; /* counted once per save */
    s->failed = 1, s->n_failed++;
    snprintf(s->failed_msg, sizeof s->failed_msg, "%s", msg);
    pthread_mutex_lock(&s->mu);
    int none = s->n_committed == 0 && s->last_committed < 0;
    pthread_mutex_unlock(&s->mu);
    char tail[200] = "";
    if (none)
        snprintf(tail, sizeof tail,
                 "; no checkpoint of this run is committed yet (%d of %d saves failed): the "
                 "training since step %" PRId64 " is not protected",
                 s->n_failed, s->n_saves, s->first_step);
    if (own || s->rank == 0)
        fprintf(stderr, "rank %d: checkpoint step %" PRId64 " FAILED (not committed): %s%s\n",
                s->rank, s->step, msg, tail);
    if (own || s->rank == 0) emit(s, DT_CKPT_FAILED, s->step, s->dir, NULL, msg);
}

/* Waits for this rank's writer. A storage failure does not stop training (the previous
 * checkpoint stays the newest; the next save tries again): it is reported on stderr and as an
 * event, and remembered so that a final or preemption save can fail the run. Returns 1 if it
 * failed. */
static int writer_wait(dt_ckpt_saver *s) {
    pthread_mutex_lock(&s->mu);
    while (s->busy) pthread_cond_wait(&s->cv, &s->mu);
    dt_status st = s->err;
    char msg[sizeof s->msg];
    memcpy(msg, s->msg, sizeof msg);
    s->err = DT_OK;
    pthread_mutex_unlock(&s->mu);
    if (st == DT_OK) return 0;
    note_failure(s, msg, 1);
    return 1;
}

static int writer_idle(dt_ckpt_saver *s) {
    pthread_mutex_lock(&s->mu);
    int idle = s->busy == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

/* ---- snapshot ----------------------------------------------------------------------------- */

/* Snapshot buffers start on a 4096-byte boundary, so that the POSIX store writes them with
 * O_DIRECT (no page-cache copy: see src/store/storage_posix.c). */
enum { SNAP_ALIGN = 4096 };

/* Grows a reused buffer (kept across saves: the pages are touched once). `touch`: write every
 * page now (at open, off the training's critical path) rather than in the first snapshot, which
 * would otherwise pay a page fault per 4 KiB inside the stall. */
static dt_status reserve(snap_file *f, size_t n, int touch) {
    if (f->cap >= n) return DT_OK;
    free(f->buf);
    size_t cap = (n + SNAP_ALIGN - 1) / SNAP_ALIGN * SNAP_ALIGN;
    f->buf = aligned_alloc(SNAP_ALIGN, cap);
    f->cap = f->buf ? cap : 0;
    if (!f->buf) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory for %zu bytes", n);
    if (touch) memset(f->buf, 0, cap);
    return DT_OK;
}

/* model.safetensors: every trainable and state parameter by name (frozen ones come from the
 * pretrained files). prefault_only: size and touch the buffer, serialize nothing (open). */
static dt_status snap_model(dt_ckpt_saver *s, snap_file *f, int prefault_only) {
    dt_graph *g = s->c.g;
    int np = dt_graph_param_count(g), k = 0;
    dt_st_entry *e = calloc((size_t)np + 1, sizeof *e);
    if (!e) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (pi->flags & DT_PARAM_FROZEN) continue;
        e[k].name = pi->name;
        e[k].t = dt_graph_value(g, pi->id);
        k++;
    }
    size_t need = dt_st_serialized_size(e, k, NULL, NULL, 0);
    /* prefault: slack for a header that may grow (see snap_optim) */
    dt_status st = need ? reserve(f, prefault_only ? need + SNAP_ALIGN : need, prefault_only)
                        : dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    if (st == DT_OK && !prefault_only)
        st = dt_st_serialize(f->buf, f->cap, e, k, NULL, NULL, 0, &f->len);
    free(e);
    snprintf(f->name, sizeof f->name, "%s", DT_CKPT_MODEL);
    return st;
}

/* optim-R-of-W.safetensors: this rank's optimizer slice [lo, hi) with its layout. */
static dt_status snap_optim(dt_ckpt_saver *s, snap_file *f, int prefault_only) {
    dt_optim_state os;
    dt_status st = dt_optim_get_state(s->c.opt, &os);
    if (st != DT_OK) return st;
    dt_tensor tt[DT_OPTIM_MAX_BUFFERS];
    dt_st_entry e[DT_OPTIM_MAX_BUFFERS];
    int64_t len = (int64_t)(os.hi - os.lo);
    for (int b = 0; b < os.n_buffers; b++) {
        dt_tensor_init(&tt[b], os.buffers[b], DT_F32, 1, &len);
        e[b] = (dt_st_entry){os.names[b], &tt[b]};
    }
    char lo[32], hi[32], n[32], step[32];
    snprintf(lo, sizeof lo, "%zu", os.lo), snprintf(hi, sizeof hi, "%zu", os.hi);
    snprintf(n, sizeof n, "%zu", os.n_total), snprintf(step, sizeof step, "%" PRId64, os.step);
    const char *mk[] = {"lo", "hi", "n_total", "step", "kind"};
    const char *mv[] = {lo, hi, n, step, os.kind == DT_OPTIM_ADAMW ? "adamw" : "sgd"};
    size_t need = dt_st_serialized_size(e, os.n_buffers, mk, mv, 5);
    /* prefault: slack for the header's growth (the step's digits), so that later saves reuse
     * the touched buffer */
    st = need ? reserve(f, prefault_only ? need + SNAP_ALIGN : need, prefault_only)
              : dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    if (st == DT_OK && !prefault_only)
        st = dt_st_serialize(f->buf, f->cap, e, os.n_buffers, mk, mv, 5, &f->len);
    dt_ckpt_optim_name(f->name, s->sharded ? s->rank : 0, s->sharded ? s->world : 1);
    return st;
}

static dt_status dup_str(char **dst, const char *src) {
    if (!src) return DT_OK;
    *dst = strdup(src);
    return *dst ? DT_OK : dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
}

/* Rank 0's trainer_state.json of this save, without "files" (the commit adds them). */
static dt_status make_state(dt_ckpt_saver *s, const dt_ckpt_progress *p) {
    dt_ckpt_state *o = &s->state;
    dt_ckpt_state_free(o);
    char cur[512];
    dt_data_cursor dc;
    dt_loader_cursor(s->c.loader, &dc);
    dt_data_cursor_format(&dc, cur, sizeof cur);
    dt_status st = dup_str(&o->format, DT_CKPT_FORMAT);
    if (st == DT_OK) st = dup_str(&o->data_cursor, cur);
    if (st == DT_OK) st = dup_str(&o->config, p->config_yaml);
    if (st == DT_OK) st = dup_str(&o->code_version, p->code_version);
    if (st == DT_OK) st = dup_str(&o->dtrain_version, dt_version());
    o->step = o->sched_step = p->step;
    o->epoch = p->epoch;
    o->samples_seen = p->samples_seen;
    o->rng_seed = p->seed, o->rng_counter = p->rng_counter;
    o->sched_total = p->sched_total, o->sched_start = p->sched_start;
    o->sched_lr = p->lr;
    dt_optim_state os;
    if (dt_optim_get_state(s->c.opt, &os) == DT_OK) o->optimizer_step = os.step;
    o->world_size = s->world;
    if (s->c.batch_parts) {
        if (st == DT_OK && !(o->batch_parts = malloc((size_t)s->world * sizeof *o->batch_parts)))
            st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
        for (int r = 0; st == DT_OK && r < s->world; r++) o->batch_parts[r] = s->c.batch_parts[r];
        if (st == DT_OK) o->n_batch_parts = s->world;
    }
    if (st == DT_OK && s->c.batch_parts && s->c.parts_auto_step > 0)
        o->batch_parts_auto_step = s->c.parts_auto_step;
    o->zero_stage = dt_ddp_zero_stage(s->c.ddp);
    o->layout_n = (int64_t)s->c.n;
    o->layout_shards = s->sharded ? s->world : 1;
    o->layout_shard = s->sharded ? (int64_t)dt_comm_shard_size(s->c.n, s->world) : (int64_t)s->c.n;
    int np = dt_graph_param_count(s->c.g);
    if (st == DT_OK && !(o->params = calloc((size_t)np + 1, sizeof *o->params)))
        st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < np && st == DT_OK; i++) {
        const dt_param_info *pi = dt_graph_param_info(s->c.g, i);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        dt_ckpt_param_entry *e = &o->params[o->n_params];
        e->offset = (int64_t)pi->offset, e->numel = (int64_t)pi->numel;
        if ((st = dup_str(&e->name, pi->name)) == DT_OK) o->n_params++;
    }
    if (st == DT_OK) st = dt_ckpt_state_set_metric(o, "loss", p->loss);
    if (st == DT_OK && p->have_eval) st = dt_ckpt_state_set_metric(o, "eval_loss", p->eval_loss);
    if (st == DT_OK && p->have_eval)
        st = dt_ckpt_state_set_metric(o, "eval_accuracy", p->eval_accuracy);
    return st;
}

/* ---- the per-step exchange ---------------------------------------------------------------- */

typedef struct exchange {
    int stop;     /* some rank asked to stop */
    int time_due; /* rank 0's clock says a timed save is due */
    int all_done; /* every writer finished the pending save */
    int all_ok;
    const double *slots; /* [world * SLOT] */
} exchange;

static dt_status do_exchange(dt_ckpt_saver *s, int stop_requested, exchange *x) {
    int W = s->world;
    double *buf = s->xbuf;
    memset(buf, 0, (size_t)(2 + W * SLOT) * sizeof *buf);
    buf[0] = stop_requested ? 1 : 0;
    double mins = s->p.every_minutes;
    if (s->rank == 0 && mins > 0 && now() - s->last_save_time >= 60 * mins) buf[1] = 1;
    int idle = !s->pending || writer_idle(s);
    double *me = buf + 2 + s->rank * SLOT;
    me[0] = idle ? 1 : 0;
    if (idle && s->pending) {
        pthread_mutex_lock(&s->mu);
        me[1] = s->err == DT_OK;
        pthread_mutex_unlock(&s->mu);
        if (s->have_optim) {
            me[2] = (double)s->optim.len;
            me[3] = (double)(s->optim.hash >> 32), me[4] = (double)(s->optim.hash & 0xffffffffu);
        }
    } else {
        me[1] = 1;
    }
    if (W > 1) {
        dt_status st = dt_comm_allreduce_f64(s->c.comm, buf, (size_t)(2 + W * SLOT));
        if (st != DT_OK) return st;
    }
    x->stop = buf[0] > 0, x->time_due = buf[1] > 0;
    x->all_done = x->all_ok = 1;
    for (int r = 0; r < W; r++) {
        x->all_done &= buf[2 + r * SLOT] > 0;
        x->all_ok &= buf[2 + r * SLOT + 1] > 0;
    }
    x->slots = buf + 2;
    return DT_OK;
}

static dt_status add_file(dt_ckpt_state *o, const char *name, int64_t bytes, uint64_t hash) {
    dt_ckpt_file_entry *f = realloc(o->files, (size_t)(o->n_files + 1) * sizeof *f);
    if (!f) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    o->files = f;
    f += o->n_files;
    *f = (dt_ckpt_file_entry){strdup(name), bytes, hash};
    if (!f->name) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    o->n_files++;
    return DT_OK;
}

/* An abandoned save: each rank removes the files it wrote, so that a full disk is not kept full
 * by a save that will never be committed (retention would remove them only after the next
 * commit, which they may prevent). A missing file is not an error; a failure is a warning. */
static void discard(dt_ckpt_saver *s) {
    snap_file *f[2] = {s->have_model ? &s->model : NULL, s->have_optim ? &s->optim : NULL};
    for (int i = 0; i < 2; i++) {
        if (!f[i]) continue;
        char key[1300];
        snprintf(key, sizeof key, "%s/%s", s->dir, f[i]->name);
        if (dt_store_delete(s->c.store, key) != DT_OK)
            fprintf(stderr, "warning: rank %d: cannot remove %s of the abandoned save: %s\n",
                    s->rank, key, dt_last_error());
    }
}

/* All writers are done with the pending save: rank 0 commits it (in its writer thread). */
static dt_status commit(dt_ckpt_saver *s, const exchange *x) {
    s->pending = 0;
    if (!x->all_ok) {
        /* some rank failed to write: the save is abandoned, the previous checkpoint stays the
         * newest; the writer's own error is reported on the rank that had it */
        if (!writer_wait(s)) note_failure(s, "another rank could not write its files", 0);
        discard(s);
        if (s->c.log)
            fprintf(s->c.log, "checkpoint step %" PRId64 " not committed: %s\n", s->step,
                    s->failed_msg);
        dt_ckpt_state_free(&s->state);
        return DT_OK; /* training goes on; the next save tries again */
    }
    writer_wait(s);
    if (s->rank != 0) return DT_OK;
    dt_status st = DT_OK;
    int64_t total = 0;
    if (s->have_model) {
        st = add_file(&s->state, s->model.name, (int64_t)s->model.len, s->model.hash);
        total += (int64_t)s->model.len;
    }
    int shards = s->sharded ? s->world : 1;
    for (int r = 0; r < shards && st == DT_OK; r++) {
        const double *sl = x->slots + r * SLOT;
        char name[64];
        dt_ckpt_optim_name(name, r, shards);
        st = add_file(&s->state, name, (int64_t)sl[2], ((uint64_t)sl[3] << 32) | (uint64_t)sl[4]);
        total += (int64_t)sl[2];
    }
    free(s->commit_json), s->commit_json = NULL;
    if (st == DT_OK) st = dt_ckpt_state_encode(&s->state, &s->commit_json);
    if (st != DT_OK) return st;
    /* the writer logs "committed" once trainer_state.json is really there */
    size_t mine = s->model.len + (s->have_optim ? s->optim.len : 0);
    snprintf(s->commit_line, sizeof s->commit_line,
             "checkpoint step %" PRId64 " committed: %.1f MB in %.2f s (%.0f MB/s) to %s/%s\n",
             s->step, (double)total / 1e6, s->write_s,
             s->write_s > 0 ? (double)mine / 1e6 / s->write_s : 0.0, dt_store_url(s->c.store),
             s->dir);
    submit(s, JOB_COMMIT);
    return DT_OK;
}

/* Blocks until the pending save is committed (back-pressure, the end, preemption). */
static dt_status drain(dt_ckpt_saver *s) {
    dt_status st = DT_OK;
    if (s->pending) {
        pthread_mutex_lock(&s->mu);
        while (s->busy) pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        exchange x;
        if ((st = do_exchange(s, 0, &x)) == DT_OK) st = commit(s, &x);
    }
    if (st == DT_OK) writer_wait(s); /* rank 0: the commit itself */
    return st;
}

static dt_status save(dt_ckpt_saver *s, const dt_ckpt_progress *p, const char *why) {
    double t0 = now();
    dt_status st = drain(s); /* back-pressure: one save at a time */
    if (st != DT_OK) return st;
    s->failed = 0, s->n_saves++;
    double waited = now() - t0;
    if ((st = dt_ddp_params_whole(s->c.ddp)) != DT_OK) return st;
    s->step = p->step;
    snprintf(s->dir, sizeof s->dir, "%s/step-%09" PRId64, s->root, s->step);
    s->have_model = s->rank == 0;
    s->have_optim = s->sharded || s->rank == 0;
    if (s->have_model) st = snap_model(s, &s->model, 0);
    if (st == DT_OK && s->have_optim) st = snap_optim(s, &s->optim, 0);
    if (s->c.ddp) { /* ZeRO-3: back to the own shard */
        dt_status rs = dt_ddp_release_params(s->c.ddp);
        if (st == DT_OK) st = rs;
    }
    if (st == DT_OK && s->rank == 0) st = make_state(s, p);
    if (st != DT_OK) return st;
    if (s->rank == 0) emit(s, DT_CKPT_SNAPSHOT, s->step, s->dir, &s->state, NULL);
    s->pending = 1;
    submit(s, JOB_WRITE);
    s->last_save_time = now();
    s->stall_s = s->last_save_time - t0;
    if (s->c.log)
        fprintf(s->c.log,
                "checkpoint step %" PRId64 " (%s): snapshot in %.3f s%s, writing in the "
                "background\n",
                s->step, why, s->stall_s - waited,
                waited > 0.001 ? " (after waiting for the previous save)" : "");
    if (!s->p.async) return drain(s);
    return DT_OK;
}

dt_status dt_ckpt_saver_step(dt_ckpt_saver *s, const dt_ckpt_progress *p, int stop_requested,
                             int *preempted) {
    *preempted = 0;
    if (s->first_step < 0) s->first_step = p->step - 1;
    exchange x;
    dt_status st = do_exchange(s, stop_requested, &x);
    if (st != DT_OK) return st;
    if (s->pending && x.all_done && (st = commit(s, &x)) != DT_OK) return st;
    int64_t every = s->p.every_steps, step = p->step;
    int last = step == p->total_steps;
    if (x.stop) {
        if ((st = save(s, p, "preemption")) != DT_OK || (st = drain(s)) != DT_OK) return st;
        *preempted = 1;
        if (s->failed)
            return dt_error_set(DT_ERR_IO, "checkpoint at preemption (step %" PRId64 ") failed: %s",
                                s->step, s->failed_msg);
        return DT_OK;
    }
    const char *why = NULL;
    if (s->enabled && last)
        why = "end";
    else if (every > 0 && step % every == 0)
        why = "every_steps";
    else if (x.time_due)
        why = "every_minutes";
    if (why && (st = save(s, p, why)) != DT_OK) return st;
    if (last) {
        if ((st = drain(s)) != DT_OK) return st;
        if (why && s->failed)
            return dt_error_set(DT_ERR_IO, "final checkpoint (step %" PRId64 ") failed: %s",
                                s->step, s->failed_msg);
    }
    return DT_OK;
}

/* ---- open, close -------------------------------------------------------------------------- */

/* Every rank puts (the store writes, syncs and renames: the same path a checkpoint file takes)
 * and deletes an object of its own under the root, so that a location that cannot take a
 * checkpoint -- read-only, a file where a folder should be, no permission, no credentials, a
 * full disk -- is found before training rather than at the first save. The ranks agree: a rank
 * that failed names its error, the others say that one did. */
static dt_status probe(dt_ckpt_saver *s) {
    char key[1200];
    snprintf(key, sizeof key, "%s/.probe-rank-%05d", s->root, s->rank);
    static const char body[] = "dtrain checkpoint location probe\n";
    dt_status st = dt_store_put(s->c.store, key, body, sizeof body - 1);
    if (st == DT_OK) st = dt_store_delete(s->c.store, key);
    char msg[1024] = "";
    if (st != DT_OK) snprintf(msg, sizeof msg, "%s", dt_last_error());
    double bad = st != DT_OK;
    if (s->world > 1) {
        dt_status cs = dt_comm_allreduce_f64(s->c.comm, &bad, 1);
        if (cs != DT_OK) return cs;
    }
    if (bad == 0) return DT_OK;
    if (!msg[0]) snprintf(msg, sizeof msg, "another rank could not write its probe");
    if (!s->p.require_writable) {
        if (s->rank == 0 || st != DT_OK)
            fprintf(stderr,
                    "warning: rank %d: checkpoints cannot be written to %s/%s: %s; training "
                    "anyway (ckpt.require_writable=false): no checkpoint will be saved\n",
                    s->rank, dt_store_url(s->c.store), s->root, msg);
        return DT_OK;
    }
    return dt_error_set(DT_ERR_IO,
                        "ckpt.dir: checkpoints cannot be written to %s/%s: %s (fix ckpt.dir or "
                        "output.dir, or set ckpt.require_writable=false to train without them)",
                        dt_store_url(s->c.store), s->root, msg);
}

dt_status dt_ckpt_saver_open(const dt_ckpt_ctx *c, const dt_ckpt_policy *p, dt_ckpt_saver **out) {
    *out = NULL;
    dt_ckpt_saver *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    s->c = *c, s->p = *p;
    snprintf(s->root, sizeof s->root, "%s", c->root);
    snprintf(s->best_metric, sizeof s->best_metric, "%s", p->best_metric ? p->best_metric : "");
    s->c.root = s->root, s->p.best_metric = s->best_metric;
    s->rank = dt_comm_rank(c->comm), s->world = dt_comm_size(c->comm);
    s->sharded = dt_ddp_shards_optimizer(c->ddp);
    s->enabled = p->every_steps > 0 || p->every_minutes > 0;
    s->last_save_time = now();
    s->last_committed = s->first_step = -1;
    dt_ckpt_state_init(&s->state);
    dt_status st = DT_OK;
    if (!(s->xbuf = malloc((size_t)(2 + s->world * SLOT) * sizeof *s->xbuf)))
        st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    if (st == DT_OK) st = probe(s);
    /* Periodic saves: the snapshot buffers get their final size and every page now, so the
     * first save's stall is a copy like every other one's, not ~0.4 s of page faults per GB.
     * (The same memory the first save would take anyway; only resident from the start.) A run
     * without periodic saves allocates them only if it is preempted. */
    if (st == DT_OK && s->enabled && s->rank == 0) st = snap_model(s, &s->model, 1);
    if (st == DT_OK && s->enabled && (s->sharded || s->rank == 0)) st = snap_optim(s, &s->optim, 1);
    if (st == DT_OK) {
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->th, NULL, writer_main, s) != 0) {
            pthread_mutex_destroy(&s->mu), pthread_cond_destroy(&s->cv);
            st = dt_error_set(DT_ERR_STATE, "checkpoint: cannot start the writer thread");
        } else {
            s->have_th = 1;
        }
    }
    if (st != DT_OK) {
        dt_ckpt_saver_close(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

dt_status dt_ckpt_saver_retarget(dt_ckpt_saver *s, const dt_ckpt_ctx *c) {
    dt_status st = drain(s); /* its state was made from the old objects */
    pthread_mutex_lock(&s->mu);
    s->c.g = c->g, s->c.ddp = c->ddp, s->c.loader = c->loader;
    s->c.batch_parts = c->batch_parts, s->c.parts_auto_step = c->parts_auto_step;
    pthread_mutex_unlock(&s->mu);
    return st;
}

void dt_ckpt_saver_set_log(dt_ckpt_saver *s, FILE *log) {
    pthread_mutex_lock(&s->mu);
    s->c.log = log;
    pthread_mutex_unlock(&s->mu);
}

void dt_ckpt_saver_report(dt_ckpt_saver *s, dt_ckpt_report *r) {
    memset(r, 0, sizeof *r);
    r->saves = s->n_saves, r->failed = s->n_failed, r->last_failed = s->failed;
    pthread_mutex_lock(&s->mu);
    r->committed = s->n_committed, r->last_committed_step = s->last_committed;
    pthread_mutex_unlock(&s->mu);
    snprintf(r->last_error, sizeof r->last_error, "%s", s->failed ? s->failed_msg : "");
}

void dt_ckpt_saver_close(dt_ckpt_saver *s) {
    if (!s) return;
    if (s->have_th) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    free(s->model.buf), free(s->optim.buf), free(s->commit_json), free(s->xbuf);
    dt_ckpt_state_free(&s->state);
    free(s);
}
