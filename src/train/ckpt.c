/* The trainer's side of its checkpoints: opens the store (ckpt.dir, else output.dir), hands the
 * saver and the restore (include/dtrain/ckpt_run.h) a narrow context, gives them the step's
 * numbers, and turns their events into the progress line's "ckpt" and tracking records. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/ckpt_run.h"
#include "train/train_impl.h"

#ifndef DT_GIT_REV
#define DT_GIT_REV "unknown"
#endif

struct dt_train_ckpt {
    dt_store *store;
    char root[1100]; /* "<experiment>/<run>/checkpoints" */
    dt_ckpt_ctx ctx;
    dt_ckpt_saver *saver;
    pthread_mutex_t mu; /* the newest commit below: set by the writer thread, read at the end */
    int64_t last_step;  /* -1: none committed by this attempt */
    char last_url[2400];
};

/* From the saver's writer thread (committed, removed) or the training thread (failed). */
static void on_event(void *ud, const dt_ckpt_event *e) {
    dt_trainer *t = ud;
    if (e->kind == DT_CKPT_COMMITTED) {
        dt_train_progress_ckpt(t, e->step); /* the progress line's "ckpt" */
        pthread_mutex_lock(&t->ck->mu);
        t->ck->last_step = e->step;
        snprintf(t->ck->last_url, sizeof t->ck->last_url, "%s/%s", e->store_url, e->dir);
        pthread_mutex_unlock(&t->ck->mu);
        dt_train_track_ckpt(t, e->step, e->store_url, e->dir, e->state);
    } else if (e->kind == DT_CKPT_REMOVED) {
        dt_train_track_ckpt_removed(t, e->step, e->store_url, e->dir, e->message);
    } else if (e->kind == DT_CKPT_SNAPSHOT) {
        /* The metrics up to this step reach disk before the checkpoint can be committed: a run
         * killed after the commit resumes from a step whose metrics are in the store (a sweep
         * reads its rung's loss from there), not from one whose metrics died in the buffer. */
        dt_train_track_flush(t);
    }
}

dt_status dt_train_ckpt_open(dt_trainer *t, const char *run_name) {
    const dt_config_values *v = &t->v;
    dt_train_ckpt *c = calloc(1, sizeof *c);
    if (!c) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    t->ck = c;
    pthread_mutex_init(&c->mu, NULL);
    c->last_step = -1;
    const char *url = v->ckpt.dir[0] ? v->ckpt.dir : v->output.dir;
    dt_status st = dt_store_open(url, NULL, &c->store);
    if (st != DT_OK) {
        char m[1024];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(st, "%s: %s", v->ckpt.dir[0] ? "ckpt.dir" : "output.dir", m);
    }
    snprintf(c->root, sizeof c->root, "%s/%s/checkpoints", v->output.experiment, run_name);
    c->ctx = (dt_ckpt_ctx){.g = t->g,
                           .opt = t->opt,
                           .loader = t->train_ld,
                           .comm = t->comm,
                           .ddp = t->ddp,
                           .n = t->n,
                           .batch_parts = t->parts,
                           .parts_adopt = t->sh != NULL,
                           .store = c->store,
                           .root = c->root,
                           .log = t->log};
    return DT_OK;
}

static dt_status open_saver(dt_trainer *t) {
    const dt_config_values *v = &t->v;
    dt_ckpt_policy p = {.every_steps = v->ckpt.every_steps,
                        .every_minutes = v->ckpt.every_minutes,
                        .async = v->ckpt.async,
                        .keep_last = (int)v->ckpt.keep_last,
                        .keep_best = (int)v->ckpt.keep_best,
                        .best_metric = v->ckpt.best_metric,
                        .best_max = v->ckpt.best_mode,
                        .require_writable = v->ckpt.require_writable,
                        .on_event = on_event,
                        .event_ud = t};
    return dt_ckpt_saver_open(&t->ck->ctx, &p, &t->ck->saver);
}

/* A run resumed with another length (train.steps or train.epochs changed): a linear or cosine
 * schedule whose horizon is the run's length would be stretched over the new one, and the rate
 * jump (back up after a finished decay, or down). schedule.on_extend chooses, and one line says
 * what the schedule does. A horizon set by schedule.total_steps, or one the schedule does not
 * use (constant, step), is left as configured. */
static dt_status on_extend(dt_trainer *t, const dt_ckpt_state *s) {
    dt_lr_schedule *sc = &t->sched;
    int64_t step = t->prog.step, total = t->prog.total_steps;
    if (t->v.schedule.total_steps || (sc->kind != DT_LR_LINEAR && sc->kind != DT_LR_COSINE))
        return DT_OK;
    FILE *log = t->log ? t->log : stderr;
    if (s->sched_total < 0) { /* an older checkpoint: the horizon was the run's length */
        if (t->log)
            fprintf(t->log,
                    "schedule: the checkpoint does not record its schedule's horizon; "
                    "the schedule spans this run's %lld steps\n",
                    (long long)total);
        return DT_OK;
    }
    int64_t start = s->sched_start > 0 ? s->sched_start : 0, end = start + s->sched_total;
    if (end == total) { /* the same length (a restarted schedule keeps its start) */
        t->sched_start = start, sc->total_steps = s->sched_total;
        return DT_OK;
    }
    dt_lr_schedule old = *sc;
    old.total_steps = s->sched_total;
    double lr_old = dt_lr_at(&old, step - start);
    const char *mode = t->v.schedule.on_extend == 1   ? "stretch"
                       : t->v.schedule.on_extend == 2 ? "restart"
                                                      : "continue";
    char what[400];
    if (t->v.schedule.on_extend == 1) { /* the horizon is the new length, from step 0 */
        t->sched_start = 0, sc->total_steps = total;
        snprintf(what, sizeof what,
                 "stretched over the %lld steps: the rate goes from %.3g to %.3g", (long long)total,
                 lr_old, dt_lr_at(sc, step));
    } else if (t->v.schedule.on_extend == 2) { /* warmup and decay again over what is left */
        t->sched_start = step, sc->total_steps = total - step;
        if (sc->total_steps <= sc->warmup_steps)
            return dt_error_set(
                DT_ERR_INVALID,
                "schedule.on_extend=restart: %lld steps remain after step %lld, not "
                "more than schedule.warmup_steps %lld",
                (long long)sc->total_steps, (long long)step, (long long)sc->warmup_steps);
        snprintf(what, sizeof what,
                 "restarted at step %lld: warmup and decay over the %lld steps left (rate %.3g, "
                 "was %.3g)",
                 (long long)step, (long long)sc->total_steps, dt_lr_at(sc, 0), lr_old);
    } else { /* the saved horizon: the decay goes on as it was; min_lr after its end */
        t->sched_start = start, sc->total_steps = s->sched_total;
        snprintf(what, sizeof what, "continued as saved: it ends at step %lld, %s (rate %.3g)",
                 (long long)end,
                 end < total ? "then min_lr until the run's end" : "after the run's end", lr_old);
    }
    if (dt_lr_check(sc) != DT_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "schedule.on_extend=%s: %s", mode, m);
    }
    if (t->rank == 0)
        fprintf(log,
                "schedule: the run now has %lld steps, the checkpoint's schedule was for %lld; "
                "schedule.on_extend=%s: %s\n",
                (long long)total, (long long)end, mode, what);
    return DT_OK;
}

dt_status dt_train_ckpt_resume(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    dt_ckpt_resumed r;
    dt_status st = dt_ckpt_restore(&c->ctx, t->v.ckpt.resume, &r);
    if (st == DT_OK && r.found) {
        t->prog.step = r.step, t->prog.epoch = r.epoch;
        st = on_extend(t, &r.state);
        /* dist.batch_shares=auto: the parts it chose before the checkpoint, not measured again */
        if (st == DT_OK) st = dt_train_shares_resumed(t, &r.state);
    }
    dt_ckpt_state_free(&r.state);
    /* the saver starts after the restore: ckpt.every_minutes counts from here */
    return st == DT_OK ? open_saver(t) : st;
}

dt_status dt_train_ckpt_retarget(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    if (!c) return DT_OK;
    c->ctx.g = t->g, c->ctx.ddp = t->ddp, c->ctx.loader = t->train_ld;
    c->ctx.batch_parts = t->parts, c->ctx.parts_auto_step = t->parts_auto_step;
    c->ctx.parts_adopt = 0;
    return c->saver ? dt_ckpt_saver_retarget(c->saver, &c->ctx) : DT_OK;
}

dt_status dt_train_ckpt_after_step(dt_trainer *t, int stop) {
    dt_train_ckpt *c = t->ck;
    if (!c || !c->saver) return DT_OK;
    const dt_train_progress *g = &t->prog;
    dt_ckpt_progress p = {
        .step = g->step,
        .epoch = g->epoch,
        .total_steps = g->total_steps,
        .sched_start = t->sched_start,
        .sched_total = t->sched.total_steps,
        .samples_seen = g->step * t->v.train.grad_accum * t->G,
        .rng_counter = g->step * t->v.train.grad_accum,
        .seed = t->v.train.seed,
        .lr = g->lr,
        .loss = g->loss,
        .have_eval = t->have_eval,
        .eval_loss = t->eval.loss,
        .eval_accuracy = t->eval.accuracy,
        .config_yaml = t->config_yaml,
        .code_version = DT_GIT_REV,
    };
    if (c->ctx.log != t->log) /* the progress line wrapped the log (dt_train_progress_begin) */
        c->ctx.log = t->log, dt_ckpt_saver_set_log(c->saver, t->log);
    int preempted = 0;
    dt_status st = dt_ckpt_saver_step(c->saver, &p, stop, &preempted);
    if (preempted) t->prog.preempted = 1;
    return st;
}

int dt_train_ckpt_failed(dt_trainer *t) {
    if (!t->ck || !t->ck->saver) return 0;
    dt_ckpt_report r;
    dt_ckpt_saver_report(t->ck->saver, &r);
    return r.last_failed;
}

void dt_train_ckpt_summary(dt_trainer *t) {
    if (!t->ck || !t->ck->saver || t->rank != 0) return;
    dt_ckpt_report r;
    dt_ckpt_saver_report(t->ck->saver, &r);
    if (!r.failed) return;
    char newest[64] = "none";
    if (r.last_committed_step >= 0)
        snprintf(newest, sizeof newest, "step %lld", (long long)r.last_committed_step);
    char line[1400];
    snprintf(line, sizeof line,
             "checkpoints: %d of %d saves of this run FAILED (the newest committed: %s); last "
             "error: %s\n",
             r.failed, r.saves, newest, r.last_error[0] ? r.last_error : "(a failed save)");
    FILE *f = t->log ? t->log : stderr;
    fputs(line, f), fflush(f);
}

void dt_train_ckpt_where(dt_trainer *t, char *buf, size_t n) {
    dt_ckpt_report r = {.last_committed_step = -1};
    if (t->ck && t->ck->saver) dt_ckpt_saver_report(t->ck->saver, &r);
    if (r.last_committed_step >= 0)
        snprintf(buf, n, "; the trained weights are in the checkpoint of step %lld under %s/%s",
                 (long long)r.last_committed_step, dt_store_url(t->ck->store), t->ck->root);
    else
        snprintf(buf, n, "; no checkpoint of this run was committed: the trained weights are lost");
}

int64_t dt_train_ckpt_last(dt_trainer *t, char *url, size_t n) {
    if (n) url[0] = 0;
    if (!t->ck) return -1;
    pthread_mutex_lock(&t->ck->mu);
    int64_t step = t->ck->last_step;
    snprintf(url, n, "%s", t->ck->last_url);
    pthread_mutex_unlock(&t->ck->mu);
    return step;
}

void dt_train_ckpt_close(dt_trainer *t) {
    dt_train_ckpt *c = t->ck;
    if (!c) return;
    dt_ckpt_saver_close(c->saver);
    dt_store_close(c->store);
    pthread_mutex_destroy(&c->mu);
    free(c);
    t->ck = NULL;
}
