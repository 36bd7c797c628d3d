/* The sweep supervisor (include/dtrain/sweep.h): runs each trial as a `dtrain train` process on
 * a slot of this machine, reads the metric the trial recorded in the store at the step it was
 * told to stop at, lets the early-stopping rule decide, and starts a promoted trial again with a
 * larger train.steps (ckpt.resume=auto continues it from its checkpoint: one more attempt of
 * the same run). Every event is written to sweep.json, so a killed sweep resumes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/file.h"
#include "dtrain/config.h"
#include "dtrain/track.h"
#include "sweep_impl.h"

static volatile sig_atomic_t stop_flag;

void dt_sweep_request_stop(void) {
    stop_flag = 1;
}

typedef struct sup {
    sweep_state *s;
    const dt_sweep_opts *o;
    FILE *log;
    dt_track *store;
    int64_t parent;
    dt_asha *asha;
    dt_median med;
    int sched_total; /* set schedule.total_steps (the base leaves it 0) */
} sup;

static void say(const sup *u, const char *fmt, const char *a, const char *b) {
    if (u->o->quiet) return;
    fprintf(u->log, fmt, a, b);
    fflush(u->log);
}

static void trial_line(const sup *u, int i, const char *what) {
    const sweep_trial *t = &u->s->t[i];
    char params[1024] = "";
    for (int k = 0; k < t->p.n; k++)
        snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s=%s", k ? " " : "",
                 t->p.key[k], t->p.value[k]);
    char line[2048];
    snprintf(line, sizeof line, "sweep %s: trial %d (%s) %s: %s\n", u->s->id, i, t->run, params,
             what);
    say(u, "%s%s", line, "");
}

/* `dtrain train BASE OVERRIDES PARAMS run/steps/...`, stdout and stderr appended to
 * <sweep dir>/<run>.log; across hosts (or with several workers) `dtrain launch -n W [--hosts
 * HOST:W] --max-failures 0 ... BASE ...` on the slot it takes (a failed trial is the sweep's to
 * report, not to retry). */
static dt_status spawn(sup *u, int i) {
    sweep_state *s = u->s;
    sweep_trial *t = &s->t[i];
    char *argv[DT_SWEEP_MAX_OVER + DT_SWEEP_MAX_PARAMS + 32];
    char kv[DT_SWEEP_MAX_PARAMS][DT_SWEEP_KEY + DT_SWEEP_VAL + 2];
    char run[200], steps[64], total[64], every[64], threads[64], logp[4400];
    char np[32], host[300], tpw[32];
    int k = 0, slot = dt_sweep_slot_take(s);
    if (slot < 0) return dt_error_set(DT_ERR_STATE, "sweep %s: no free slot", s->id);
    argv[k++] = (char *)u->o->exe;
    if (s->launch) {
        snprintf(np, sizeof np, "%d", s->workers);
        snprintf(tpw, sizeof tpw, "%d", s->threads);
        argv[k++] = "launch", argv[k++] = "-n", argv[k++] = np;
        if (s->slot_host[slot][0]) {
            snprintf(host, sizeof host, "%s:%d", s->slot_host[slot], s->workers);
            argv[k++] = "--hosts", argv[k++] = host;
        }
        argv[k++] = "--max-failures", argv[k++] = "0";
        argv[k++] = "--threads-per-worker", argv[k++] = tpw;
        if (s->mpirun[0]) argv[k++] = "--mpirun", argv[k++] = s->mpirun;
        if (s->mpirun_args[0]) argv[k++] = "--mpirun-args", argv[k++] = s->mpirun_args;
    } else {
        argv[k++] = "train";
    }
    argv[k++] = s->spec.base;
    for (int j = 0; j < s->spec.n_over; j++) argv[k++] = s->spec.over[j];
    for (int j = 0; j < t->p.n; j++) {
        snprintf(kv[j], sizeof kv[j], "%s=%s", t->p.key[j], t->p.value[j]);
        argv[k++] = kv[j];
    }
    snprintf(run, sizeof run, "output.run_name=%s", t->run);
    snprintf(steps, sizeof steps, "train.steps=%lld", (long long)t->target);
    snprintf(threads, sizeof threads, "train.threads=%d", s->threads);
    argv[k++] = run, argv[k++] = steps;
    if (!s->launch) argv[k++] = threads; /* dtrain launch sets it from --threads-per-worker */
    argv[k++] = "ckpt.resume=auto";
    argv[k++] = "train.progress=off";
    if (u->sched_total) { /* the schedule of the whole run, whatever segment trains now */
        snprintf(total, sizeof total, "schedule.total_steps=%lld", (long long)s->spec.max_steps);
        argv[k++] = total;
    }
    if (s->spec.rule != DT_SWEEP_NONE) { /* a checkpoint at every step a decision is made */
        snprintf(every, sizeof every, "ckpt.every_steps=%lld", (long long)s->spec.grace_period);
        argv[k++] = every;
    }
    argv[k] = NULL;
    snprintf(logp, sizeof logp, "%s/%s.log", s->dir, t->run);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    extern char **environ;
    pid_t pid;
    fflush(stdout), fflush(stderr);
    int e = posix_spawn(&pid, u->o->exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        dt_sweep_slot_give(s, slot);
        return dt_error_set(DT_ERR_IO, "sweep %s: cannot run %s: %s", s->id, u->o->exe,
                            strerror(e));
    }
    t->pid = pid, t->status = T_RUNNING, t->segments++, t->slot = slot;
    char what[400];
    snprintf(what, sizeof what, "%s to step %lld%s%s", t->segments > 1 ? "resumed" : "started",
             (long long)t->target, s->launch && s->slot_host[slot][0] ? " on " : "",
             s->launch ? s->slot_host[slot] : "");
    trial_line(u, i, what);
    return DT_OK;
}

typedef struct find_metric {
    int64_t step;
    int attempt, found;
    double value;
} find_metric;

static int on_metric(void *ud, const dt_track_metric_row *m) {
    find_metric *f = ud;
    if (m->step == f->step && m->attempt >= f->attempt)
        f->attempt = m->attempt, f->value = m->value, f->found = 1;
    return 0;
}

/* The trial's metric at `step`, as its process recorded it. */
static dt_status read_metric(sup *u, sweep_trial *t, int64_t step, double *v) {
    char ref[600];
    snprintf(ref, sizeof ref, "%s/%s", u->s->experiment, t->run);
    dt_track_run r;
    dt_status st = dt_track_run_find(u->store, ref, &r);
    if (st != DT_OK) return st;
    if (t->segments <= 1 || !t->n_reports) { /* tag on the first report (and after a resume) */
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)u->parent);
        dt_track_tag(u->store, r.id, "sweep_id", u->s->id);
        dt_track_tag(u->store, r.id, "sweep.parent", num);
        snprintf(num, sizeof num, "%d", (int)(t - u->s->t));
        dt_track_tag(u->store, r.id, "sweep.trial", num);
    }
    find_metric f = {.step = step};
    const char *key = u->s->spec.metric_val ? "eval_loss" : "loss";
    if ((st = dt_track_metrics(u->store, r.id, key, on_metric, &f)) != DT_OK) return st;
    if (!f.found)
        return dt_error_set(DT_ERR_NOTFOUND, "sweep %s: run %s recorded no %s at step %lld",
                            u->s->id, ref, key, (long long)step);
    *v = f.value;
    return DT_OK;
}

/* What happens after a report: done at max_steps, else the rule keeps or stops the trial. */
static void decide(sup *u, int i, double v) {
    sweep_state *s = u->s;
    sweep_trial *t = &s->t[i];
    const dt_sweep_spec *p = &s->spec;
    t->step = t->target;
    if (t->n_reports <= DT_SWEEP_MAX_RUNGS) {
        t->rep_step[t->n_reports] = t->step;
        t->rep_val[t->n_reports++] = v;
    }
    char what[512];
    const char *m = p->metric_val ? "val_loss" : "train_loss";
    int keep = 1;
    if (p->rule == DT_SWEEP_ASHA)
        keep = dt_asha_on_result(u->asha, i, t->step, v);
    else if (p->rule == DT_SWEEP_MEDIAN && t->step < p->max_steps)
        keep = dt_median_on_result(&u->med, i, t->step, v);
    if (t->step >= p->max_steps) {
        t->status = T_DONE;
        snprintf(t->why, sizeof t->why, "trained %lld steps", (long long)t->step);
        snprintf(what, sizeof what, "done: %s %.6g at step %lld", m, v, (long long)t->step);
    } else if (!keep) {
        t->status = T_STOPPED;
        snprintf(t->why, sizeof t->why, "%s at step %lld: %s %.6g",
                 p->rule == DT_SWEEP_ASHA ? "asha: not in the top 1/reduction_factor of its rung"
                                          : "median rule: worse than the median",
                 (long long)t->step, m, v);
        snprintf(what, sizeof what, "stopped: %s", t->why);
    } else {
        int64_t next =
            p->rule == DT_SWEEP_ASHA ? dt_asha_next(u->asha, t->step) : t->step + p->grace_period;
        t->target = next < p->max_steps ? next : p->max_steps;
        t->status = T_PROMOTED;
        snprintf(what, sizeof what, "%s %.6g at step %lld: continues to step %lld", m, v,
                 (long long)t->step, (long long)t->target);
    }
    trial_line(u, i, what);
}

/* What the dashboard's sweep view reads from the store (src/serve/api_sweep.c): the trial's
 * status in the sweep (a trial stopped at a rung and one waiting for promotion both ended their
 * process "done") and the step of its last report. Best effort, like the other tags: a trial
 * whose process never reached the store has no run to tag. */
static void tag_trial(sup *u, const sweep_trial *t) {
    char ref[600], step[32];
    snprintf(ref, sizeof ref, "%s/%s", u->s->experiment, t->run);
    dt_track_run r;
    if (dt_track_run_find(u->store, ref, &r) != DT_OK) return;
    dt_track_tag(u->store, r.id, "sweep.status", dt_sweep_status_names[t->status]);
    snprintf(step, sizeof step, "%lld",
             (long long)(t->n_reports ? t->rep_step[t->n_reports - 1] : -1));
    dt_track_tag(u->store, r.id, "sweep.step", step);
}

static void on_exit_status(sup *u, int i, int ws) {
    sweep_trial *t = &u->s->t[i];
    t->pid = 0;
    dt_sweep_slot_give(u->s, t->slot);
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
        double v = 0;
        if (read_metric(u, t, t->target, &v) == DT_OK) {
            decide(u, i, v);
            tag_trial(u, t);
            return;
        }
        t->status = T_FAILED;
        snprintf(t->why, sizeof t->why, "%.250s", dt_last_error());
    } else if (stop_flag) {
        /* ended on our request: checkpointed (exit 75), or SIGTERM came before the trainer
         * took signals (143); --resume continues it from its newest checkpoint either way */
        t->status = T_PROMOTED;
        snprintf(t->why, sizeof t->why, "stopped with the sweep (exit status %d)",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws));
    } else {
        t->status = T_FAILED;
        if (WIFSIGNALED(ws))
            snprintf(t->why, sizeof t->why, "killed by signal %d (%s); log %s.log", WTERMSIG(ws),
                     strsignal(WTERMSIG(ws)), t->run);
        else
            snprintf(t->why, sizeof t->why, "exit status %d; log %s.log", WEXITSTATUS(ws), t->run);
    }
    tag_trial(u, t);
    trial_line(u, i, t->why);
}

static int next_trial(const sweep_state *s) {
    for (int i = 0; i < s->n; i++)
        if (s->t[i].status == T_PROMOTED) return i;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].status == T_PENDING) return i;
    return -1;
}

/* A trial left running by a killed sweep may still have its process (the sweep alone was
 * killed): wait for it to end before starting the trial again on the same run. */
static void wait_orphan(const sweep_trial *t) {
    if (t->pid <= 0) return;
    char p[64], cmd[4096];
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)t->pid);
    for (;;) {
        FILE *f = fopen(p, "rb");
        if (!f) return;
        size_t n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        int ours = 0;
        for (size_t k = 0; k < n; k += strlen(cmd + k) + 1) {
            cmd[n] = 0;
            if (strstr(cmd + k, t->run)) ours = 1;
        }
        if (!ours) return;
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
}

static dt_status supervise(sup *u, dt_sweep_result *r) {
    sweep_state *s = u->s;
    int running = 0, slots = s->slots, forwarded = 0;
    dt_status st = DT_OK;
    snprintf(s->status, sizeof s->status, "running");
    if ((st = dt_sweep_state_save(s)) != DT_OK) return st;
    for (;;) {
        while (!stop_flag && running < slots && st == DT_OK) {
            int i = next_trial(s);
            if (i < 0) break;
            if ((st = spawn(u, i)) == DT_OK) running++;
            dt_sweep_state_save(s);
        }
        if (!running) break;
        if (stop_flag && !forwarded) { /* trials checkpoint and exit 75 */
            forwarded = 1;
            for (int i = 0; i < s->n; i++)
                if (s->t[i].status == T_RUNNING && s->t[i].pid > 0) kill(s->t[i].pid, SIGTERM);
        }
        int ws;
        pid_t pid = waitpid(-1, &ws, 0);
        if (pid < 0) {
            if (errno != EINTR) break;
            continue;
        }
        for (int i = 0; i < s->n; i++) {
            if (s->t[i].status != T_RUNNING || s->t[i].pid != pid) continue;
            running--;
            on_exit_status(u, i, ws);
            dt_sweep_state_save(s);
        }
    }
    snprintf(s->status, sizeof s->status, "%s", stop_flag ? "stopped" : "done");
    dt_status sv = dt_sweep_state_save(s);
    if (sv == DT_OK) sv = dt_sweep_summary(s->json, r);
    if (st == DT_OK) st = sv;
    char why[512];
    if (r->best >= 0)
        snprintf(why, sizeof why, "best trial %d (%s): %s %.6g", r->best, r->best_run,
                 s->spec.metric_val ? "val_loss" : "train_loss", r->best_value);
    else
        snprintf(why, sizeof why, "no trial reported");
    dt_track_tag(u->store, u->parent, "sweep.best", r->best >= 0 ? r->best_run : "");
    dt_track_run_end(u->store, u->parent, r->interrupted ? "preempted" : "done", why);
    return st;
}

/* The spec as the dashboard's sweep view needs it, on the sweep's own run: the metric's store
 * key, the mode, max_steps, and one tag per parameter naming its kind (log_uniform parameters
 * get a log axis). */
static void tag_spec(sup *u) {
    static const char *const kinds[] = {"values", "choice", "uniform", "log_uniform", "int"};
    const dt_sweep_spec *p = &u->s->spec;
    char k[DT_SWEEP_KEY + 16], v[32];
    dt_track_tag(u->store, u->parent, "sweep.metric", p->metric_val ? "eval_loss" : "loss");
    dt_track_tag(u->store, u->parent, "sweep.mode", p->mode_max ? "max" : "min");
    snprintf(v, sizeof v, "%lld", (long long)p->max_steps);
    dt_track_tag(u->store, u->parent, "sweep.max_steps", v);
    for (int i = 0; i < p->n_params; i++) {
        snprintf(k, sizeof k, "sweep.param.%s", p->params[i].key);
        dt_track_tag(u->store, u->parent, k, kinds[p->params[i].kind]);
    }
}

/* Opens the store, records the sweep as a run (a new attempt on resume), replays the reports
 * into the rule, supervises. */
static dt_status start(sweep_state *s, const dt_sweep_opts *o, dt_sweep_result *r) {
    sup u = {.s = s, .o = o, .log = o->log ? o->log : stdout};
    stop_flag = 0;
    dt_status st;
    char *ov[DT_SWEEP_MAX_OVER];
    for (int i = 0; i < s->spec.n_over; i++) ov[i] = s->spec.over[i];
    dt_config *cfg;
    if ((st = dt_config_from_args(s->spec.base, s->spec.n_over, ov, &cfg)) != DT_OK) return st;
    u.sched_total = dt_config_get_values(cfg)->schedule.total_steps == 0;
    dt_config_free(cfg);
    if ((st = dt_track_open(s->store, &u.store)) != DT_OK) return st;
    uint8_t *yaml = NULL;
    size_t len = 0;
    if (dt_read_file_max(s->spec.path, 0, 1u << 20, "sweep file", &yaml, &len) != DT_OK) yaml = 0;
    char hosts[sizeof s->hosts + 64];
    if (s->hosts[0])
        snprintf(hosts, sizeof hosts, "%s", s->hosts);
    else
        snprintf(hosts, sizeof hosts, "localhost:%d", s->slots * s->workers);
    st = dt_track_run_begin(u.store, s->experiment, s->id, 0, hosts, yaml ? (char *)yaml : "", NULL,
                            0, &u.parent);
    free(yaml);
    if (st == DT_OK) {
        char n[32];
        snprintf(n, sizeof n, "%d", s->n);
        dt_track_tag(u.store, u.parent, "sweep.kind", "sweep");
        dt_track_tag(u.store, u.parent, "sweep_id", s->id);
        dt_track_tag(u.store, u.parent, "sweep.trials", n);
        tag_spec(&u);
        u.asha = calloc(1, sizeof *u.asha);
        if (!u.asha) st = dt_error_set(DT_ERR_NOMEM, "sweep: out of memory");
    }
    if (st == DT_OK && s->spec.rule == DT_SWEEP_ASHA)
        st = dt_asha_init(u.asha, s->spec.grace_period, s->spec.max_steps, s->spec.reduction_factor,
                          s->spec.mode_max);
    dt_median_init(&u.med, s->spec.grace_period, s->spec.min_samples, s->spec.mode_max);
    /* replay what the trials reported: the values recorded at each rung are the same whatever
     * order they came in; only the decisions already taken depended on it, and they are kept */
    for (int k = 0; k <= DT_SWEEP_MAX_RUNGS && st == DT_OK; k++)
        for (int i = 0; i < s->n; i++)
            if (k < s->t[i].n_reports) {
                if (s->spec.rule == DT_SWEEP_ASHA)
                    dt_asha_on_result(u.asha, i, s->t[i].rep_step[k], s->t[i].rep_val[k]);
                else if (s->spec.rule == DT_SWEEP_MEDIAN)
                    dt_median_on_result(&u.med, i, s->t[i].rep_step[k], s->t[i].rep_val[k]);
            }
    if (st == DT_OK) st = supervise(&u, r);
    dt_median_free(&u.med);
    free(u.asha);
    dt_status cs = dt_track_close(u.store);
    return st != DT_OK ? st : cs;
}

dt_status dt_sweep_run(const dt_sweep_spec *spec, const dt_sweep_opts *o, dt_sweep_result *r) {
    sweep_state *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "sweep: out of memory");
    s->spec = *spec;
    char *ov[DT_SWEEP_MAX_OVER];
    for (int i = 0; i < spec->n_over; i++) ov[i] = s->spec.over[i];
    dt_config *cfg;
    dt_status st = dt_config_from_args(spec->base, spec->n_over, ov, &cfg);
    if (st != DT_OK) return free(s), st;
    const dt_config_values *v = dt_config_get_values(cfg);
    snprintf(s->experiment, sizeof s->experiment, "%.255s", v->output.experiment);
    snprintf(s->out_dir, sizeof s->out_dir, "%s", v->output.dir);
    if (!strncmp(s->out_dir, "file://", 7))
        memmove(s->out_dir, s->out_dir + 7, strlen(s->out_dir) - 6);
    /* with an MLflow server too, the trials' metrics are read from the local record */
    dt_track_local_uri(v->tracking.uri, s->out_dir, s->store, sizeof s->store);
    dt_config_free(cfg);
    if (strstr(s->out_dir, "://") || !strcmp(s->store, "off")) {
        free(s);
        return dt_error_set(DT_ERR_INVALID,
                            "%s: a sweep needs a local output.dir and a store "
                            "(tracking.uri not off): it reads the trials' metrics there",
                            spec->path);
    }
    /* the slots before anything is created: a refusal leaves no sweep folder behind */
    if ((st = dt_sweep_slots_init(s, o)) != DT_OK) return free(s), st;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    if (o->name)
        snprintf(s->id, sizeof s->id, "%s", o->name);
    else
        strftime(s->id, sizeof s->id, "sweep-%Y%m%d-%H%M%S", &tm);
    if (!dt_plain_name(s->id)) {
        free(s);
        return dt_error_set(DT_ERR_INVALID, "sweep name '%s': letters, digits, '.', '_', '-'",
                            o->name);
    }
    /* a path that does not fit is an error, not a silently shortened folder */
    int nd = snprintf(s->dir, sizeof s->dir, "%s/%s/%s", s->out_dir, s->experiment, s->id);
    int nj = nd >= 0 && (size_t)nd < sizeof s->dir
                 ? snprintf(s->json, sizeof s->json, "%s/sweep.json", s->dir)
                 : -1;
    if (nj < 0 || (size_t)nj >= sizeof s->json) {
        free(s);
        return dt_error_set(DT_ERR_INVALID, "output.dir: the sweep's folder path is too long");
    }
    if (dt_path_exists(s->json)) {
        st = dt_error_set(DT_ERR_INVALID, "%s exists: continue it with dtrain sweep --resume %s",
                          s->json, s->id);
        return free(s), st;
    }
    char mk[sizeof s->dir]; /* a prefix of s->dir, which fitted */
    if (snprintf(mk, sizeof mk, "%s/%s", s->out_dir, s->experiment) >= (int)sizeof mk) mk[0] = 0;
    mkdir(s->out_dir, 0755), mkdir(mk, 0755);
    if (mkdir(s->dir, 0755) != 0 && errno != EEXIST) {
        st = dt_error_set(DT_ERR_IO, "%s: cannot create: %s", s->dir, strerror(errno));
        return free(s), st;
    }
    dt_sweep_trial *t;
    if ((st = dt_sweep_sample(spec, &t, &s->n)) != DT_OK) return free(s), st;
    s->t = calloc((size_t)(s->n ? s->n : 1), sizeof *s->t);
    if (!s->t) return free(t), free(s), dt_error_set(DT_ERR_NOMEM, "sweep: out of memory");
    for (int i = 0; i < s->n; i++) {
        s->t[i].p = t[i];
        snprintf(s->t[i].run, sizeof s->t[i].run, "%s-t%03d", s->id, i);
        s->t[i].target = spec->rule == DT_SWEEP_NONE ? spec->max_steps : spec->grace_period;
    }
    free(t);
    s->started = dt_track_wall();
    st = start(s, o, r);
    free(s->t);
    free(s);
    return st;
}

dt_status dt_sweep_resume(const char *json_path, const dt_sweep_opts *o, dt_sweep_result *r) {
    sweep_state *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "sweep: out of memory");
    dt_status st = dt_sweep_state_load(json_path, s);
    if (st != DT_OK) return free(s), st;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].status == T_RUNNING) {
            wait_orphan(&s->t[i]);
            s->t[i].status = T_PROMOTED, s->t[i].pid = 0; /* from its newest checkpoint */
        }
    if ((st = dt_sweep_slots_init(s, o)) == DT_OK) st = start(s, o, r);
    free(s->t);
    free(s);
    return st;
}

dt_status dt_sweep_find(const char *dir, const char *id, char *path, size_t n) {
    if (!dt_plain_name(id))
        return dt_error_set(DT_ERR_INVALID, "sweep id '%s': letters, digits, '.', '_', '-'", id);
    const char *d = dir && *dir ? dir : "runs";
    /* <dir>/<experiment>/<id>/sweep.json: look in each experiment folder */
    DIR *dd = opendir(d);
    if (!dd) return dt_error_set(DT_ERR_NOTFOUND, "sweep %s: no folder %s", id, d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(dd)) && !found) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, n, "%s/%s/%s/sweep.json", d, e->d_name, id);
        found = dt_path_exists(path);
    }
    closedir(dd);
    if (!found) return dt_error_set(DT_ERR_NOTFOUND, "sweep %s: no %s/*/%s/sweep.json", id, d, id);
    return DT_OK;
}
