/* The trainer's checkpoints: policy, snapshot, background writer, commit, resume.
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
 * Preemption: SIGTERM/SIGINT (dt_trainer_request_stop) is agreed on by all ranks in the same
 * per-step exchange; the step finishes, a checkpoint is saved and committed synchronously, and
 * dt_trainer_run returns with progress.preempted set (the CLI exits 75). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "train/train_impl.h"

#ifndef DT_GIT_REV
#define DT_GIT_REV "unknown"
#endif

typedef struct snap_file {
    char name[64];
    void *buf;
    size_t cap, len;
    uint64_t hash;
} snap_file;

enum { JOB_NONE = 0, JOB_WRITE = 1, JOB_COMMIT = 2 };

struct dt_train_ckpt {
    dt_store *store;
    char root[1100]; /* "<experiment>/<run>/checkpoints" */
    int enabled;     /* periodic saves configured */
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
    cJSON *state; /* rank 0: trainer_state.json without "files" */
    char *commit_json;
    double t_begin, stall_s, last_save_time;
    double write_s;
    int failed; /* the last save failed on this rank (files or commit) */
    char commit_line[2048];
    char failed_msg[1024];
    int64_t loaded_bytes; /* resume: bytes this rank read (and hashed) */
};

/* ---- writer thread --------------------------------------------------------------------- */

static dt_status put_file(dt_train_ckpt *c, snap_file *f) {
    char key[1300];
    snprintf(key, sizeof key, "%s/%s", c->dir, f->name);
    f->hash = XXH3_64bits(f->buf, f->len);
    return dt_store_put(c->store, key, f->buf, f->len);
}

static void *writer_main(void *arg) {
    dt_trainer *t = arg;
    dt_train_ckpt *c = t->ck;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->n_jobs && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
        if (!c->n_jobs) break;
        int job = c->jobs[0];
        c->jobs[0] = c->jobs[1], c->n_jobs--;
        pthread_mutex_unlock(&c->mu);
        double t0 = dt_train_now();
        dt_status st = DT_OK;
        if (job == JOB_WRITE) {
            if (c->have_model) st = put_file(c, &c->model);
            if (st == DT_OK && c->have_optim) st = put_file(c, &c->optim);
        } else {
            char key[1300];
            snprintf(key, sizeof key, "%s/%s", c->dir, DT_CKPT_STATE);
            st = dt_store_put(c->store, key, c->commit_json, strlen(c->commit_json));
            if (st == DT_OK && t->log) fputs(c->commit_line, t->log), fflush(t->log);
            if (st == DT_OK) dt_train_progress_ckpt(t, c->step); /* the progress line's "ckpt" */
            if (st == DT_OK)
                dt_train_track_ckpt(t, c->step, dt_store_url(c->store), c->dir, c->commit_json);
            /* Retention only after the new checkpoint is committed. Its failure leaves extra
             * checkpoints behind, not a bad one: a warning, not a failed save. */
            if (st == DT_OK && dt_ckpt_retain(c->store, c->root, c->step, (int)t->v.ckpt.keep_last,
                                              (int)t->v.ckpt.keep_best, t->v.ckpt.best_metric,
                                              t->v.ckpt.best_mode ? "max" : "min", NULL) != DT_OK)
                fprintf(stderr, "warning: checkpoint retention under %s: %s\n", c->root,
                        dt_last_error());
        }
        double dt = dt_train_now() - t0;
        pthread_mutex_lock(&c->mu);
        if (job == JOB_WRITE) c->write_s = dt;
        if (st != DT_OK && c->err == DT_OK) {
            c->err = st;
            snprintf(c->msg, sizeof c->msg, "%s", dt_last_error());
        }
        c->busy--;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void submit(dt_train_ckpt *c, int job) {
    pthread_mutex_lock(&c->mu);
    c->jobs[c->n_jobs++] = job;
    c->busy++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Waits for this rank's writer. A storage failure does not stop training (the previous
 * checkpoint stays the newest; the next save tries again): it is reported on stderr, and
 * remembered so that a final or preemption save can fail the run. Returns 1 if it failed. */
static int writer_wait(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    pthread_mutex_lock(&c->mu);
    while (c->busy) pthread_cond_wait(&c->cv, &c->mu);
    dt_status st = c->err;
    char msg[sizeof c->msg];
    memcpy(msg, c->msg, sizeof msg);
    c->err = DT_OK;
    pthread_mutex_unlock(&c->mu);
    if (st == DT_OK) return 0;
    c->failed = 1;
    snprintf(c->failed_msg, sizeof c->failed_msg, "%s", msg);
    fprintf(stderr, "rank %d: checkpoint step %" PRId64 " FAILED (not committed): %s\n", t->rank,
            c->step, msg);
    return 1;
}

static int writer_idle(dt_train_ckpt *c) {
    pthread_mutex_lock(&c->mu);
    int idle = c->busy == 0;
    pthread_mutex_unlock(&c->mu);
    return idle;
}

/* ---- snapshot ----------------------------------------------------------------------------- */

/* Snapshot buffers start on a 4096-byte boundary, so that the POSIX store writes them with
 * O_DIRECT (no page-cache copy: see src/ckpt/storage_posix.c). */
enum { SNAP_ALIGN = 4096 };

/* Grows a reused buffer (kept across saves: the pages are touched once). `touch`: write every
 * page now (at init, off the training's critical path) rather than in the first snapshot, which
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
 * pretrained files). prefault_only: size and touch the buffer, serialize nothing (init). */
static dt_status snap_model(dt_trainer *t, snap_file *f, int prefault_only) {
    int np = dt_graph_param_count(t->g), k = 0;
    dt_st_entry *e = calloc((size_t)np + 1, sizeof *e);
    if (!e) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(t->g, i);
        if (pi->flags & DT_PARAM_FROZEN) continue;
        e[k].name = pi->name;
        e[k].t = dt_graph_value(t->g, pi->id);
        k++;
    }
    size_t need = dt_st_serialized_size(e, k, NULL, NULL, 0);
    /* prefault: slack for a header that may grow (see snap_optim) */
    dt_status st = need ? reserve(f, prefault_only ? need + SNAP_ALIGN : need, prefault_only)
                        : dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    if (st == DT_OK && !prefault_only)
        st = dt_st_serialize(f->buf, f->cap, e, k, NULL, NULL, 0, &f->len);
    free(e);
    snprintf(f->name, sizeof f->name, "model.safetensors");
    return st;
}

/* optim-R-of-W.safetensors: this rank's optimizer slice [lo, hi) with its layout. */
static dt_status snap_optim(dt_trainer *t, snap_file *f, int shard, int shards, int prefault_only) {
    dt_optim_state os;
    dt_status st = dt_optim_get_state(t->opt, &os);
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
    snprintf(f->name, sizeof f->name, "optim-%05d-of-%05d.safetensors", shard, shards);
    return st;
}

/* Optimizer files: one per rank under ZeRO (each holds its shard), else rank 0's alone. */
static int sharded_optim(const dt_trainer *t) {
    return dt_ddp_shards_optimizer(t->ddp);
}

static cJSON *make_state(dt_trainer *t) {
    cJSON *o = cJSON_CreateObject();
    char cur[512];
    dt_data_cursor dc;
    dt_loader_cursor(t->train_ld, &dc);
    dt_data_cursor_format(&dc, cur, sizeof cur);
    cJSON_AddStringToObject(o, "format", "dtrain-checkpoint-1");
    cJSON_AddNumberToObject(o, "step", (double)t->prog.step);
    cJSON_AddNumberToObject(o, "epoch", (double)t->prog.epoch);
    cJSON_AddNumberToObject(o, "samples_seen",
                            (double)(t->prog.step * t->v.train.grad_accum * t->B * t->world));
    cJSON_AddStringToObject(o, "data_cursor", cur);
    cJSON *r = cJSON_AddObjectToObject(o, "rng");
    cJSON_AddNumberToObject(r, "seed", (double)t->v.train.seed);
    cJSON_AddNumberToObject(r, "counter", (double)(t->prog.step * t->v.train.grad_accum));
    cJSON *sc = cJSON_AddObjectToObject(o, "schedule");
    cJSON_AddNumberToObject(sc, "step", (double)t->prog.step);
    cJSON_AddNumberToObject(sc, "lr", t->prog.lr);
    dt_optim_state os;
    if (dt_optim_get_state(t->opt, &os) == DT_OK)
        cJSON_AddNumberToObject(o, "optimizer_step", (double)os.step);
    cJSON_AddNumberToObject(o, "world_size", t->world);
    cJSON_AddNumberToObject(o, "zero_stage", dt_ddp_zero_stage(t->ddp));
    cJSON *ly = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddNumberToObject(ly, "n", (double)t->n);
    cJSON_AddNumberToObject(ly, "shards", sharded_optim(t) ? t->world : 1);
    cJSON_AddNumberToObject(
        ly, "shard", sharded_optim(t) ? (double)dt_comm_shard_size(t->n, t->world) : (double)t->n);
    cJSON *ps = cJSON_AddArrayToObject(ly, "params");
    for (int i = 0; i < dt_graph_param_count(t->g); i++) {
        const dt_param_info *pi = dt_graph_param_info(t->g, i);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, cJSON_CreateString(pi->name));
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)pi->offset));
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)pi->numel));
        cJSON_AddItemToArray(ps, a);
    }
    cJSON *m = cJSON_AddObjectToObject(o, "metrics");
    cJSON_AddNumberToObject(m, "loss", t->prog.loss);
    if (t->have_eval) {
        cJSON_AddNumberToObject(m, "eval_loss", t->eval.loss);
        cJSON_AddNumberToObject(m, "eval_accuracy", t->eval.accuracy);
    }
    if (t->config_yaml) cJSON_AddStringToObject(o, "config", t->config_yaml);
    cJSON_AddStringToObject(o, "code_version", DT_GIT_REV);
    cJSON_AddStringToObject(o, "dtrain_version", dt_version());
    return o;
}

/* ---- the per-step exchange ---------------------------------------------------------------- */

/* Per rank: done, ok, bytes, hash high/low 32 bits of its optimizer file. */
enum { SLOT = 5 };

typedef struct exchange {
    int stop;     /* some rank asked to stop */
    int time_due; /* rank 0's clock says a timed save is due */
    int all_done; /* every writer finished the pending save */
    int all_ok;
    double *slots; /* [world * SLOT] */
} exchange;

static dt_status do_exchange(dt_trainer *t, exchange *x, double *buf) {
    dt_train_ckpt *c = t->ck;
    int W = t->world;
    memset(buf, 0, (size_t)(2 + W * SLOT) * sizeof *buf);
    buf[0] = t->stop_requested ? 1 : 0;
    double mins = t->v.ckpt.every_minutes;
    if (t->rank == 0 && mins > 0 && dt_train_now() - c->last_save_time >= 60 * mins) buf[1] = 1;
    int idle = !c->pending || writer_idle(c);
    double *me = buf + 2 + t->rank * SLOT;
    me[0] = idle ? 1 : 0;
    if (idle && c->pending) {
        pthread_mutex_lock(&c->mu);
        me[1] = c->err == DT_OK;
        pthread_mutex_unlock(&c->mu);
        if (c->have_optim) {
            me[2] = (double)c->optim.len;
            me[3] = (double)(c->optim.hash >> 32), me[4] = (double)(c->optim.hash & 0xffffffffu);
        }
    } else {
        me[1] = 1;
    }
    if (W > 1) {
        dt_status st = dt_comm_allreduce_f64(t->comm, buf, (size_t)(2 + W * SLOT));
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

/* All writers are done with the pending save: rank 0 commits it (in its writer thread). */
static dt_status commit(dt_trainer *t, const exchange *x) {
    dt_train_ckpt *c = t->ck;
    c->pending = 0;
    if (!x->all_ok) {
        /* some rank failed to write: the save is abandoned, the previous checkpoint stays the
         * newest; the writer's own error is reported on the rank that had it */
        if (!writer_wait(t)) {
            c->failed = 1;
            snprintf(c->failed_msg, sizeof c->failed_msg, "another rank could not write its files");
        }
        if (t->log)
            fprintf(t->log, "checkpoint step %" PRId64 " not committed: %s\n", c->step,
                    c->failed_msg);
        cJSON_Delete(c->state), c->state = NULL;
        return DT_OK; /* training goes on; the next save tries again */
    }
    writer_wait(t);
    if (t->rank != 0) return DT_OK;
    cJSON *files = cJSON_AddObjectToObject(c->state, "files");
    char hex[17];
    int64_t total = 0;
    if (c->have_model) {
        cJSON *f = cJSON_AddObjectToObject(files, c->model.name);
        cJSON_AddNumberToObject(f, "bytes", (double)c->model.len);
        snprintf(hex, sizeof hex, "%016" PRIx64, c->model.hash);
        cJSON_AddStringToObject(f, "xxh3", hex);
        total += (int64_t)c->model.len;
    }
    int shards = sharded_optim(t) ? t->world : 1;
    for (int r = 0; r < shards; r++) {
        const double *s = x->slots + r * SLOT;
        char name[64];
        snprintf(name, sizeof name, "optim-%05d-of-%05d.safetensors", r, shards);
        cJSON *f = cJSON_AddObjectToObject(files, name);
        cJSON_AddNumberToObject(f, "bytes", s[2]);
        snprintf(hex, sizeof hex, "%016" PRIx64, ((uint64_t)s[3] << 32) | (uint64_t)s[4]);
        cJSON_AddStringToObject(f, "xxh3", hex);
        total += (int64_t)s[2];
    }
    free(c->commit_json);
    c->commit_json = cJSON_Print(c->state);
    cJSON_Delete(c->state), c->state = NULL;
    if (!c->commit_json) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    /* the writer logs "committed" once trainer_state.json is really there */
    snprintf(c->commit_line, sizeof c->commit_line,
             "checkpoint step %" PRId64 " committed: %.1f MB in %.2f s (%.0f MB/s) to %s/%s\n",
             c->step, (double)total / 1e6, c->write_s,
             c->write_s > 0
                 ? (double)(c->model.len + (c->have_optim ? c->optim.len : 0)) / 1e6 / c->write_s
                 : 0.0,
             dt_store_url(c->store), c->dir);
    submit(c, JOB_COMMIT);
    return DT_OK;
}

/* Blocks until the pending save is committed (back-pressure, the end, preemption). */
static dt_status drain(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    double buf_small[2 + SLOT];
    double *buf = t->world > 1 ? malloc((size_t)(2 + t->world * SLOT) * sizeof *buf) : buf_small;
    if (!buf) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    dt_status st = DT_OK;
    if (c->pending) {
        pthread_mutex_lock(&c->mu);
        while (c->busy) pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        exchange x;
        if ((st = do_exchange(t, &x, buf)) == DT_OK) st = commit(t, &x);
    }
    if (st == DT_OK) writer_wait(t); /* rank 0: the commit itself */
    if (buf != buf_small) free(buf);
    return st;
}

static dt_status save(dt_trainer *t, const char *why) {
    dt_train_ckpt *c = t->ck;
    double t0 = dt_train_now();
    dt_status st = drain(t); /* back-pressure: one save at a time */
    if (st != DT_OK) return st;
    c->failed = 0;
    double waited = dt_train_now() - t0;
    if ((st = dt_ddp_params_whole(t->ddp)) != DT_OK) return st;
    c->step = t->prog.step;
    snprintf(c->dir, sizeof c->dir, "%s/step-%09" PRId64, c->root, c->step);
    c->have_model = t->rank == 0;
    c->have_optim = sharded_optim(t) || t->rank == 0;
    if (c->have_model) st = snap_model(t, &c->model, 0);
    if (st == DT_OK && c->have_optim)
        st = snap_optim(t, &c->optim, sharded_optim(t) ? t->rank : 0,
                        sharded_optim(t) ? t->world : 1, 0);
    if (t->ddp) { /* ZeRO-3: back to the own shard */
        dt_status rs = dt_ddp_release_params(t->ddp);
        if (st == DT_OK) st = rs;
    }
    if (st != DT_OK) return st;
    if (t->rank == 0) c->state = make_state(t);
    c->pending = 1;
    submit(c, JOB_WRITE);
    c->last_save_time = dt_train_now();
    c->stall_s = c->last_save_time - t0;
    if (t->log)
        fprintf(t->log,
                "checkpoint step %" PRId64 " (%s): snapshot in %.3f s%s, writing in the "
                "background\n",
                c->step, why, c->stall_s - waited,
                waited > 0.001 ? " (after waiting for the previous save)" : "");
    if (!t->v.ckpt.async) return drain(t);
    return DT_OK;
}

dt_status dt_train_ckpt_after_step(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    if (!c) return DT_OK;
    double small[2 + SLOT];
    double *buf = t->world > 1 ? t->ck_buf : small;
    exchange x;
    dt_status st = do_exchange(t, &x, buf);
    if (st != DT_OK) return st;
    if (c->pending && x.all_done && (st = commit(t, &x)) != DT_OK) return st;
    int64_t every = t->v.ckpt.every_steps, step = t->prog.step;
    int last = step == t->prog.total_steps;
    if (x.stop) {
        if ((st = save(t, "preemption")) != DT_OK || (st = drain(t)) != DT_OK) return st;
        t->prog.preempted = 1;
        if (c->failed)
            return dt_error_set(DT_ERR_IO, "checkpoint at preemption (step %" PRId64 ") failed: %s",
                                c->step, c->failed_msg);
        return DT_OK;
    }
    const char *why = NULL;
    if (c->enabled && last)
        why = "end";
    else if (every > 0 && step % every == 0)
        why = "every_steps";
    else if (x.time_due)
        why = "every_minutes";
    if (why && (st = save(t, why)) != DT_OK) return st;
    if (last) {
        if ((st = drain(t)) != DT_OK) return st;
        if (why && c->failed)
            return dt_error_set(DT_ERR_IO, "final checkpoint (step %" PRId64 ") failed: %s",
                                c->step, c->failed_msg);
    }
    return DT_OK;
}

/* ---- setup, resume ------------------------------------------------------------------------ */

dt_status dt_train_ckpt_init(dt_trainer *t, const char *run_name) {
    const dt_config_values *v = &t->v;
    dt_train_ckpt *c = calloc(1, sizeof *c);
    if (!c) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    t->ck = c;
    const char *url = v->ckpt.dir[0] ? v->ckpt.dir : v->output.dir;
    dt_status st = dt_store_open(url, NULL, &c->store);
    if (st != DT_OK) {
        char m[1024];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(st, "%s: %s", v->ckpt.dir[0] ? "ckpt.dir" : "output.dir", m);
    }
    snprintf(c->root, sizeof c->root, "%s/%s/checkpoints", v->output.experiment, run_name);
    c->enabled = v->ckpt.every_steps > 0 || v->ckpt.every_minutes > 0;
    c->last_save_time = dt_train_now();
    if (t->world > 1) {
        t->ck_buf = malloc((size_t)(2 + t->world * SLOT) * sizeof(double));
        if (!t->ck_buf) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    }
    /* Periodic saves: the snapshot buffers get their final size and every page now, so the
     * first save's stall is a copy like every other one's, not ~0.4 s of page faults per GB.
     * (The same memory the first save would take anyway; only resident from the start.) A run
     * without periodic saves allocates them only if it is preempted. */
    if (c->enabled && t->rank == 0 && (st = snap_model(t, &c->model, 1)) != DT_OK) return st;
    if (c->enabled && (sharded_optim(t) || t->rank == 0) &&
        (st = snap_optim(t, &c->optim, sharded_optim(t) ? t->rank : 0,
                         sharded_optim(t) ? t->world : 1, 1)) != DT_OK)
        return st;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->th, NULL, writer_main, t) != 0)
        return dt_error_set(DT_ERR_STATE, "checkpoint: cannot start the writer thread");
    c->have_th = 1;
    return DT_OK;
}

void dt_train_ckpt_free(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    if (!c) return;
    if (c->have_th) {
        pthread_mutex_lock(&c->mu);
        c->quit = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    dt_store_close(c->store);
    free(c->model.buf), free(c->optim.buf), free(c->commit_json);
    cJSON_Delete(c->state);
    free(t->ck_buf);
    free(c);
    t->ck = NULL;
}

/* A non-negative integer field of a JSON object, -1 if missing or not one (the range is checked
 * before the cast: (int64_t) of NaN, inf or 1e300 is undefined; 2.5 is not truncated to 2). */
static int64_t jint(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 9e15)) return -1;
    int64_t i = (int64_t)v->valuedouble;
    return (double)i == v->valuedouble ? i : -1;
}

/* ---- restore: one streaming pass per file -------------------------------------------------
 * Each file is read once (dt_store_get_stream: the store reads the next chunk while this thread
 * works on the current one), and every chunk is hashed (streaming xxh3) and its tensor bytes
 * copied straight to their places: parameters, or this rank's optimizer slice. The safetensors
 * header is parsed as soon as it has arrived (it may span chunks), against the size
 * trainer_state.json lists, and turned into a scatter map: file byte ranges -> destinations,
 * sorted by offset, walked once. Only at the end are the file's size and checksum known, so
 * bytes are in place before the file verified: a damaged file leaves the state partly
 * overwritten (*touched), which dt_train_ckpt_resume handles by loading an older checkpoint over
 * it. A header that does not parse, or tensors that do not fit this model, stop the copying at
 * once but are reported only after the size and checksum checks, as when files were read whole
 * first: a damaged file is named as damaged. */

/* File bytes [off, off + n) go to dst. */
typedef struct scatter {
    size_t off, n;
    char *dst;
} scatter;

typedef struct restore_sink restore_sink;
/* Builds k's scatter map from the file's parsed header. */
typedef dt_status (*restore_plan_fn)(restore_sink *k, const dt_st_file *f);

struct restore_sink {
    dt_trainer *t;
    const char *name; /* "<dir>/<file>": messages */
    size_t want;      /* the size trainer_state.json lists */
    XXH3_state_t *h;
    restore_plan_fn plan;
    const void *plan_arg;
    /* the header: 8 bytes, then hdr_need in all (0: not known yet), collected across chunks */
    char *hdr;
    size_t hdr_need, hdr_have, hdr_cap;
    int parsed;
    dt_status err; /* the header or its tensors do not fit: no more copies; reported at the end */
    char msg[1024];
    scatter *map;
    int n_map, cap_map, next; /* next: the first entry not yet completely copied */
    int *touched;
};

static dt_status sink_add(restore_sink *k, size_t off, size_t n, void *dst) {
    if (!n) return DT_OK;
    if (k->n_map == k->cap_map) {
        int cap = k->cap_map ? 2 * k->cap_map : 64;
        scatter *m = realloc(k->map, (size_t)cap * sizeof *m);
        if (!m) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", k->name);
        k->map = m, k->cap_map = cap;
    }
    k->map[k->n_map++] = (scatter){off, n, dst};
    return DT_OK;
}

static int by_offset(const void *a, const void *b) {
    const scatter *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Remembers the failure (dt_last_error's message) to report after the size and checksum. */
static void sink_defer(restore_sink *k, dt_status st) {
    k->err = st;
    snprintf(k->msg, sizeof k->msg, "%s", dt_last_error());
}

/* Takes header bytes from the chunk at c [n] (file offset off); parses the header once it is
 * all there. The buffer grows with the bytes that arrived, not to the size the header's first 8
 * bytes claim (up to the listed file size and 100 MB), so a short file claiming a long header
 * costs no more memory than its length. */
static void sink_header(restore_sink *k, size_t off, const char *c, size_t n) {
    for (;;) {
        size_t need = k->hdr_need ? k->hdr_need : 8;
        if (k->hdr_have < need && off + n > k->hdr_have) {
            size_t take = need - k->hdr_have, from = k->hdr_have - off;
            if (take > n - from) take = n - from;
            if (k->hdr_have + take > k->hdr_cap) {
                size_t cap =
                    k->hdr_cap * 2 > k->hdr_have + take ? k->hdr_cap * 2 : k->hdr_have + take;
                if (cap > need) cap = need;
                char *h = realloc(k->hdr, cap);
                if (!h) {
                    sink_defer(k, dt_error_set(DT_ERR_NOMEM, "%s: out of memory", k->name));
                    return;
                }
                k->hdr = h, k->hdr_cap = cap;
            }
            memcpy(k->hdr + k->hdr_have, c + from, take);
            k->hdr_have += take;
        }
        if (k->hdr_have < need) return; /* the rest comes with the next chunks */
        if (k->hdr_need) break;
        size_t hn;
        dt_status st = dt_st_header_size(k->name, k->hdr, k->want, &hn);
        if (st != DT_OK) {
            sink_defer(k, st);
            return;
        }
        k->hdr_need = hn;
    }
    dt_st_file *f;
    dt_status st = dt_st_open_header(k->name, k->hdr, k->hdr_need, k->want, &f);
    if (st == DT_OK) {
        st = k->plan(k, f);
        dt_st_close(f);
    }
    if (st != DT_OK) {
        sink_defer(k, st);
        return;
    }
    /* safetensors tensors do not overlap (checked), nor do the parts of them taken */
    qsort(k->map, (size_t)k->n_map, sizeof *k->map, by_offset);
    k->parsed = 1;
}

static dt_status sink_chunk(void *ud, size_t off, const void *p, size_t n) {
    restore_sink *k = ud;
    const char *c = p;
    XXH3_64bits_update(k->h, c, n);
    if (k->err) return DT_OK; /* hash on: a damaged file is reported as such */
    if (!k->parsed) sink_header(k, off, c, n);
    if (!k->parsed) return DT_OK;
    size_t end = off + n;
    for (; k->next < k->n_map && k->map[k->next].off < end; k->next++) {
        const scatter *e = &k->map[k->next];
        size_t a = e->off > off ? e->off : off, b = e->off + e->n < end ? e->off + e->n : end;
        if (b > a) memcpy(e->dst + (a - e->off), c + (a - off), b - a), *k->touched = 1;
        if (e->off + e->n > end) break; /* continues in the next chunk */
    }
    return DT_OK;
}

/* Reads file `name` of checkpoint dir in one pass, copying its tensors where plan says, and
 * checks it against trainer_state.json's entry: its size and xxh3. This is the resume's only
 * check of the contents (see dt_train_ckpt_resume). *n: the bytes read. */
static dt_status restore_file(dt_trainer *t, dt_store *s, const char *dir, cJSON *files,
                              const char *name, restore_plan_fn plan, const void *plan_arg,
                              int *touched, size_t *n) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(files, name);
    cJSON *jb = cJSON_GetObjectItemCaseSensitive(e, "bytes");
    cJSON *jh = cJSON_GetObjectItemCaseSensitive(e, "xxh3");
    *n = 0;
    if (!cJSON_IsNumber(jb) || !cJSON_IsString(jh))
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s does not list %s", dir, DT_CKPT_STATE,
                            name);
    /* the listed size bounds the read; it must be a size a double holds exactly */
    if (!(jb->valuedouble >= 0 && jb->valuedouble <= 9007199254740992.0) ||
        jb->valuedouble != (double)(int64_t)jb->valuedouble)
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s lists %s with %g bytes (not a size)",
                            dir, DT_CKPT_STATE, name, jb->valuedouble);
    char key[1400], hex[17];
    snprintf(key, sizeof key, "%s/%s", dir, name);
    size_t want = (size_t)jb->valuedouble;
    restore_sink k = {
        .t = t, .name = key, .want = want, .plan = plan, .plan_arg = plan_arg, .touched = touched};
    k.h = XXH3_createState();
    k.hdr = malloc(8), k.hdr_cap = 8;
    if (!k.h || !k.hdr || XXH3_64bits_reset(k.h) != XXH_OK) {
        XXH3_freeState(k.h), free(k.hdr);
        return dt_error_set(DT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
    }
    /* One byte of slack tells a longer file from one of the listed size. */
    dt_status st = dt_store_get_stream(s, key, want + 1, sink_chunk, &k, n);
    if (st == DT_ERR_NOTFOUND) {
        st = dt_error_set(st, "checkpoint %s: file %s is missing", dir, name);
    } else if (st == DT_ERR_RANGE) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "checkpoint %s: file %s is longer than the %zu bytes listed (replaced)",
                          dir, name, want);
    } else if (st == DT_OK) {
        snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(k.h));
        if ((double)*n != jb->valuedouble) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "checkpoint %s: file %s has %zu bytes, expected %.0f (truncated or "
                              "replaced)",
                              dir, name, *n, jb->valuedouble);
        } else if (strcmp(hex, jh->valuestring)) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "checkpoint %s: file %s: checksum xxh3 %s, expected %s (corrupt)",
                              dir, name, hex, jh->valuestring);
        } else if (k.err != DT_OK) {
            st = dt_error_set(k.err, "%s", k.msg);
        } else if (!k.parsed) { /* a verified file too short to hold its own header */
            size_t hn;
            st = dt_st_header_size(key, k.hdr, *n, &hn);
            if (st == DT_OK)
                st = dt_error_set(DT_ERR_FORMAT, "%s: header incomplete (%zu bytes)", key, *n);
        }
    }
    XXH3_freeState(k.h);
    free(k.hdr), free(k.map);
    return st;
}

/* model.safetensors: every trainable and state parameter, by name, into its value. */
static dt_status plan_model(restore_sink *k, const dt_st_file *f) {
    dt_trainer *t = k->t;
    dt_status st = DT_OK;
    for (int i = 0; i < dt_graph_param_count(t->g) && st == DT_OK; i++) {
        const dt_param_info *pi = dt_graph_param_info(t->g, i);
        if (pi->flags & DT_PARAM_FROZEN) continue;
        dt_tensor src;
        size_t off;
        const dt_tensor *dst = dt_graph_value(t->g, pi->id);
        if ((st = dt_st_locate(f, pi->name, &src, &off)) != DT_OK) break;
        if (src.dtype != DT_F32 || (size_t)dt_tensor_numel(&src) != pi->numel)
            st = dt_error_set(
                DT_ERR_FORMAT, "%s: tensor %s: %s of %lld elements, expected f32 of %zu", k->name,
                pi->name, dt_dtype_name(src.dtype), (long long)dt_tensor_numel(&src), pi->numel);
        else
            st = sink_add(k, off, pi->numel * sizeof(float), dst->data);
    }
    return st;
}

/* *touched: set once parameters may have been overwritten. */
static dt_status load_model(dt_trainer *t, dt_store *s, const char *dir, cJSON *files,
                            int *touched) {
    size_t n;
    dt_status st =
        restore_file(t, s, dir, files, "model.safetensors", plan_model, NULL, touched, &n);
    t->ck->loaded_bytes += (int64_t)n;
    return st;
}

/* One saved optimizer shard, covering [a, b) of the flat layout: what overlaps this rank's
 * slice [lo, hi) of each buffer. */
typedef struct optim_part {
    const dt_optim_state *os;
    size_t a, b, lo, hi;
} optim_part;

static dt_status plan_optim(restore_sink *k, const dt_st_file *f) {
    const optim_part *q = k->plan_arg;
    const dt_optim_state *os = q->os;
    dt_status st = DT_OK;
    for (int j = 0; j < os->n_buffers && st == DT_OK; j++) {
        dt_tensor src;
        size_t off;
        if ((st = dt_st_locate(f, os->names[j], &src, &off)) != DT_OK) break;
        if ((size_t)dt_tensor_numel(&src) < q->hi - q->a || src.dtype != DT_F32)
            st = dt_error_set(DT_ERR_FORMAT, "%s: %s has %lld elements, expected %zu", k->name,
                              os->names[j], (long long)dt_tensor_numel(&src), q->b - q->a);
        else
            st = sink_add(k, off + (q->lo - q->a) * sizeof(float), (q->hi - q->lo) * sizeof(float),
                          os->buffers[j] + (q->lo - os->lo));
    }
    return st;
}

/* The optimizer slice [lo, hi) from the saved shards (any saved world size: the shards are
 * contiguous slices of one flat layout, so resharding is a matter of copying overlaps). */
static dt_status load_optim(dt_trainer *t, dt_store *s, const char *dir, cJSON *state,
                            int *touched) {
    cJSON *ly = cJSON_GetObjectItemCaseSensitive(state, "layout");
    cJSON *files = cJSON_GetObjectItemCaseSensitive(state, "files");
    double jsh = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ly, "shards"));
    double jss = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ly, "shard"));
    if (!(jsh >= 1 && jsh < 1e6 && jss >= 1 && jss < 1e15))
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s: bad layout in %s", dir, DT_CKPT_STATE);
    int shards = (int)jsh;
    size_t ss = (size_t)jss;
    dt_optim_state os;
    dt_status st = dt_optim_get_state(t->opt, &os);
    if (st != DT_OK) return st;
    /* r x ss below must not wrap, and the shards must cover every parameter (a layout that
     * does not would leave the rest of the optimizer state as it was, silently) */
    size_t cover;
    if (shards < 1 || ss < 1 || __builtin_mul_overflow((size_t)shards, ss, &cover) || cover < t->n)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: %s: layout of %d shards of %zu elements does not fit "
                            "%zu parameters",
                            dir, DT_CKPT_STATE, shards, ss, t->n);
    for (int r = 0; r < shards && st == DT_OK; r++) {
        size_t a = (size_t)r * ss, b = a + ss < t->n ? a + ss : t->n;
        size_t lo = a > os.lo ? a : os.lo, hi = b < os.hi ? b : os.hi;
        if (hi <= lo) continue;
        char fname[64];
        snprintf(fname, sizeof fname, "optim-%05d-of-%05d.safetensors", r, shards);
        optim_part q = {&os, a, b, lo, hi};
        size_t n;
        st = restore_file(t, s, dir, files, fname, plan_optim, &q, touched, &n);
        t->ck->loaded_bytes += (int64_t)n;
    }
    if (st != DT_OK) return st;
    /* a missing one is 0 (older checkpoints); one that is there must be an integer in range:
     * (int64_t) of 1e999 (inf), 1e300 or NaN would be undefined */
    int64_t step = cJSON_GetObjectItemCaseSensitive(state, "optimizer_step")
                       ? jint(state, "optimizer_step")
                       : 0;
    if (step < 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: %s: optimizer_step is not an integer in [0, 9e15)", dir,
                            DT_CKPT_STATE);
    return dt_optim_set_step(t->opt, step);
}

static dt_status check_layout(dt_trainer *t, const char *dir, cJSON *state) {
    cJSON *ly = cJSON_GetObjectItemCaseSensitive(state, "layout");
    cJSON *ps = cJSON_GetObjectItemCaseSensitive(ly, "params");
    int64_t jn = jint(ly, "n");
    size_t n = jn < 0 ? (size_t)-1 : (size_t)jn;
    if (n != t->n)
        return dt_error_set(DT_ERR_INVALID,
                            "checkpoint %s: %zu trainable parameters, this model has %zu "
                            "(different model or config)",
                            dir, n, t->n);
    int k = 0;
    for (int i = 0; i < dt_graph_param_count(t->g); i++) {
        const dt_param_info *pi = dt_graph_param_info(t->g, i);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        cJSON *a = cJSON_GetArrayItem(ps, k++);
        const char *nm = cJSON_GetStringValue(cJSON_GetArrayItem(a, 0));
        if (!nm || strcmp(nm, pi->name) ||
            cJSON_GetNumberValue(cJSON_GetArrayItem(a, 1)) != (double)pi->offset ||
            cJSON_GetNumberValue(cJSON_GetArrayItem(a, 2)) != (double)pi->numel)
            return dt_error_set(DT_ERR_INVALID,
                                "checkpoint %s: parameter %d is %s, this model has %s (%zu "
                                "elements): different model",
                                dir, k - 1, nm ? nm : "missing", pi->name, pi->numel);
    }
    return DT_OK;
}

/* Loads checkpoint `dir` into this rank: parameters, its optimizer slice, data cursor,
 * progress. *bad: it failed on the checkpoint's contents (a file missing, not matching its
 * size or checksum, not safetensors): an older checkpoint may do. *touched: parameters or
 * optimizer state may already have been overwritten. */
static dt_status load_checkpoint(dt_trainer *t, dt_store *s, const char *dir, int *old_world,
                                 int *bad, int *touched) {
    char *txt = NULL;
    cJSON *state = NULL;
    *bad = 0, *old_world = 0;
    dt_status st;
    if ((st = dt_ckpt_read_state(s, dir, &txt)) == DT_OK && !(state = cJSON_Parse(txt)))
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s is not valid JSON", dir, DT_CKPT_STATE);
    free(txt);
    int64_t jw = jint(state, "world_size");
    *old_world = jw >= 1 && jw < 10000000 ? (int)jw : 0;
    if (st == DT_OK && !*old_world)
        st = dt_error_set(DT_ERR_FORMAT,
                          "checkpoint %s: %s has no valid world_size (an integer in [1, 1e7))", dir,
                          DT_CKPT_STATE);
    if (st == DT_OK) st = check_layout(t, dir, state);
    if (st == DT_OK) {
        st = load_model(t, s, dir, cJSON_GetObjectItemCaseSensitive(state, "files"), touched);
        if (st == DT_OK) st = load_optim(t, s, dir, state, touched);
        *bad = st == DT_ERR_FORMAT || st == DT_ERR_NOTFOUND;
    }
    dt_data_cursor cur;
    const char *jc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(state, "data_cursor"));
    if (st == DT_OK && !jc)
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s has no data_cursor string", dir,
                          DT_CKPT_STATE);
    if (st == DT_OK && (st = dt_data_cursor_parse(jc, &cur)) == DT_OK) {
        /* Ranks are interleaved: batch b of every rank holds the first (b+1)*B*W positions of
         * the epoch order. Another world size continues at the first position not yet seen,
         * rounded down to its own batches (at most one global batch is seen twice). The batch
         * is any int64 the file holds: the product is checked (dt_loader_seek checks the
         * range of what it gets). */
        int64_t pos;
        if (*old_world != t->world && __builtin_mul_overflow(cur.batch, (int64_t)*old_world, &pos))
            st = dt_error_set(DT_ERR_FORMAT,
                              "checkpoint %s: %s: data_cursor batch %lld x world_size %d "
                              "overflows",
                              dir, DT_CKPT_STATE, (long long)cur.batch, *old_world);
        else if (*old_world != t->world)
            cur.batch = pos / t->world;
        cur.rank = t->rank, cur.world_size = t->world;
        if (st == DT_OK) st = dt_loader_seek(t->train_ld, &cur);
    }
    if (st == DT_OK) {
        t->prog.step = jint(state, "step");
        t->prog.epoch = jint(state, "epoch");
        if (t->prog.step < 0 || t->prog.epoch < 0)
            st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s has no valid step/epoch", dir,
                              DT_CKPT_STATE);
    }
    cJSON_Delete(state);
    return st;
}

/* Resume in one pass over the checkpoint's bytes. Rank 0 chooses the checkpoint with the cheap
 * check (dt_ckpt_find_before at DT_CKPT_SIZES: committed, every file there with its size: one
 * stat per file), and every rank then hashes each file it loads (get_verified) -- instead of
 * reading and hashing every file once to choose and again to load. The contents are thus checked
 * by whichever rank reads them; a file no rank reads (an optimizer shard overlapping no rank's
 * slice) holds nothing this run uses. The ranks agree on the outcome with one all-reduce: if any
 * rank found a damaged file, every rank warns (the rank that found it naming the file) and rank 0
 * chooses the next older checkpoint for all; any other failure (the store, another model) fails
 * every rank, as before. A checkpoint named by ckpt.resume=URI is not replaced by another: a
 * damaged file there is an error.
 *
 * A damaged file found after parameters or optimizer state were overwritten leaves them mixed:
 * the older checkpoint overwrites them all again. Files stream into place, so that is any file
 * whose size or checksum fails after its tensors were copied (corrupt or truncated), not one
 * that is missing, longer than listed or whose header does not parse. Only if no older
 * checkpoint is left is that an error (rather than starting from step 0 with half-loaded
 * weights); a damaged file that touched nothing still lets the run start from step 0. */
dt_status dt_train_ckpt_resume(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    const char *r = t->v.ckpt.resume;
    if (!c || !strcmp(r, "never")) return DT_OK;
    dt_store *s = c->store, *own = NULL;
    char dir[1200] = "";
    dt_status st = DT_OK;
    int named = strcmp(r, "auto") != 0;
    if (named) { /* a checkpoint URI: its parent is the store */
        char parent[4096];
        snprintf(parent, sizeof parent, "%s", r);
        size_t l = strlen(parent);
        while (l > 1 && parent[l - 1] == '/') parent[--l] = 0;
        char *slash = strrchr(parent, '/');
        if (!slash || !slash[1])
            return dt_error_set(DT_ERR_INVALID, "ckpt.resume: '%s' is not a checkpoint directory",
                                r);
        snprintf(dir, sizeof dir, "%s", slash + 1);
        *slash = 0;
        if ((st = dt_store_open(parent, NULL, &own)) != DT_OK) return st;
        s = own;
        if (t->rank == 0 && (st = dt_ckpt_check(s, dir, DT_CKPT_SIZES, NULL)) != DT_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            st = dt_error_set(st, "ckpt.resume: %s", m);
        }
    }
    FILE *log = t->log ? t->log : stderr;
    int64_t before = INT64_MAX; /* rank 0: candidates are older than the last one skipped */
    int touched_any = 0, old_world = 0;
    double t0 = dt_train_now();
    for (;;) {
        if (!named && t->rank == 0) {
            dt_ckpt_info info;
            st = dt_ckpt_find_before(s, c->root, before, DT_CKPT_SIZES, log, &info);
            if (st == DT_OK)
                snprintf(dir, sizeof dir, "%s", info.dir), before = info.step;
            else if (st == DT_ERR_NOTFOUND)
                st = DT_OK, dir[0] = 0;
        }
        /* every rank learns rank 0's choice (or its error) */
        if (t->world > 1) {
            double e = st != DT_OK;
            dt_status cs = dt_comm_allreduce_f64(t->comm, &e, 1);
            if (cs == DT_OK) cs = dt_comm_broadcast(t->comm, dir, sizeof dir, 0);
            if (cs != DT_OK)
                st = cs;
            else if (e > 0 && st == DT_OK)
                st = dt_error_set(DT_ERR_IO, "ckpt.resume: rank 0 could not choose a checkpoint");
        }
        if (st == DT_OK && !dir[0] && touched_any)
            st = dt_error_set(DT_ERR_FORMAT,
                              "ckpt.resume: no good checkpoint under %s/%s, and the damaged one "
                              "skipped was partly loaded: remove it, or start over with "
                              "ckpt.resume=never",
                              dt_store_url(s), c->root);
        if (st != DT_OK || !dir[0]) {
            if (st == DT_OK && t->log)
                fprintf(t->log, "no checkpoint under %s/%s: starting from step 0\n",
                        dt_store_url(s), c->root);
            dt_store_close(own);
            return st;
        }
        int bad = 0, touched = 0;
        c->loaded_bytes = 0;
        st = load_checkpoint(t, s, dir, &old_world, &bad, &touched);
        /* agree: ranks that failed, that failed on a damaged file, that overwrote state */
        double o[3] = {st != DT_OK, st != DT_OK && bad, touched};
        if (t->world > 1) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            dt_status cs = dt_comm_allreduce_f64(t->comm, o, 3);
            if (cs != DT_OK) {
                dt_store_close(own);
                return st != DT_OK ? dt_error_set(st, "%s", m) : cs;
            }
            if (st != DT_OK) dt_error_set(st, "%s", m);
        }
        touched_any |= o[2] > 0;
        if (o[0] == 0) break;
        if (named || o[1] < o[0]) { /* not (only) damaged files, or no other choice */
            if (st == DT_OK)
                st = dt_error_set(DT_ERR_STATE, "ckpt.resume: another rank could not load %s", dir);
            else if (named) {
                char m[1024];
                snprintf(m, sizeof m, "%s", dt_last_error());
                st = dt_error_set(st, "ckpt.resume: %s", m);
            }
            dt_store_close(own);
            return st;
        }
        if (st != DT_OK)
            fprintf(log, "warning: skipping a bad checkpoint: %s\n", dt_last_error());
        else if (t->rank == 0)
            fprintf(log,
                    "warning: skipping a bad checkpoint: %s: another rank found a damaged file "
                    "(its message names it)\n",
                    dir);
        fflush(log);
        st = DT_OK;
    }
    c->last_save_time = dt_train_now();
    double load_s = c->last_save_time - t0; /* choosing (and any skipped ones) + loading */
    if (t->ddp) st = dt_ddp_release_params(t->ddp);
    if (st == DT_OK && t->log)
        fprintf(t->log, "checkpoint %s loaded: %.1f MB read and verified in %.2f s (%.0f MB/s)\n",
                dir, (double)c->loaded_bytes / 1e6, load_s,
                load_s > 0 ? (double)c->loaded_bytes / 1e6 / load_s : 0.0);
    if (st == DT_OK && t->log)
        fprintf(t->log, "resumed from %s/%s: step %lld%s\n", dt_store_url(s), dir,
                (long long)t->prog.step,
                old_world != t->world ? " (another world size: optimizer state resharded, data "
                                        "continues at the first unseen global batch)"
                                      : "");
    dt_store_close(own);
    return st;
}
