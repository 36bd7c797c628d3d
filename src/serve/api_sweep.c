/* The dashboard's sweep API over the experiment store (what src/sweep/run.c records there: the
 * sweep's own run tagged sweep.kind=sweep, sweep.metric, sweep.mode, sweep.max_steps and one
 * sweep.param.KEY=KIND per parameter; each trial a run tagged sweep_id, sweep.parent,
 * sweep.trial, sweep.status and sweep.step):
 *   sweeps       [{id, run_id, experiment, status, trials, best, start, end}], newest first
 *   sweeps/ID    {id, run_id, experiment, status, metric, mode, max_steps,
 *                 params: [{key, kind}], trials: [{trial, run_id, run, status, last_step, step,
 *                 metric, params: {KEY: VALUE}}], best: {trial, run, run_id, step, metric} | null}
 * ID is the sweep's id (the name of its own run), "experiment/ID" or the run's number. A trial's
 * `step` is the step of its last report (-1 before the first) and `metric` the value the run
 * recorded under the sweep's metric key at that step (null before the first report); `status`
 * is the sweep's view (pending trials have no run yet and are not listed).
 * Why the store and not sweep.json: the server already reads the store, live, for any output
 * folder; sweep.json lies beside the runs, where a server started with --db alone cannot find
 * it. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve/serve_impl.h"

enum { MAX_SWEEPS = 200, MAX_TRIALS = 1024, MAX_PARAMS = 24 };

typedef struct tag_find {
    const char *key;
    char value[256];
    int found;
} tag_find;

static int tag_cb(void *ud, const char *k, const char *v) {
    tag_find *f = ud;
    if (strcmp(k, f->key)) return 0;
    snprintf(f->value, sizeof f->value, "%s", v);
    return f->found = 1;
}

/* One tag of a run ("" when absent). */
static dt_status tag_of(dt_track *st, int64_t run, const char *key, char *out, size_t n) {
    tag_find f = {.key = key};
    dt_status rc = dt_track_tags(st, run, tag_cb, &f);
    size_t l = strnlen(f.value, n - 1); /* a longer value (none is) is cut */
    memcpy(out, f.value, l);
    out[l] = '\0';
    return rc;
}

static cJSON *sweep_head(const dt_track_run *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->name);
    cJSON_AddNumberToObject(o, "run_id", (double)r->id);
    cJSON_AddStringToObject(o, "experiment", r->experiment);
    cJSON_AddStringToObject(o, "status", r->lost ? "lost" : r->status);
    cJSON_AddNumberToObject(o, "start", r->start_time);
    cJSON_AddNumberToObject(o, "end", r->end_time);
    return o;
}

typedef struct list_state {
    dt_track *st;
    cJSON *a;
    dt_status rc;
} list_state;

static int sweep_cb(void *ud, const dt_track_run *r) {
    list_state *l = ud;
    char n[64], best[256];
    if ((l->rc = tag_of(l->st, r->id, "sweep.trials", n, sizeof n)) != DT_OK ||
        (l->rc = tag_of(l->st, r->id, "sweep.best", best, sizeof best)) != DT_OK)
        return 1;
    cJSON *o = sweep_head(r);
    cJSON_AddNumberToObject(o, "trials", atoi(n));
    cJSON_AddStringToObject(o, "best", best);
    cJSON_AddItemToArray(l->a, o);
    return cJSON_GetArraySize(l->a) >= MAX_SWEEPS;
}

int dt_sv_api_sweeps(dt_serve *s, sv_buf *b) {
    dt_track *st = dt_sv_store(s);
    if (!st) return dt_sv_api_error(b, 503, dt_last_error());
    list_state l = {st, cJSON_CreateArray(), DT_OK};
    dt_status rc = dt_track_runs_tagged(st, "sweep.kind", "sweep", sweep_cb, &l);
    if (rc == DT_OK) rc = l.rc;
    if (rc != DT_OK) {
        cJSON_Delete(l.a);
        return dt_sv_api_store_error(s, b);
    }
    return dt_sv_api_emit(b, l.a);
}

/* ---- one sweep ------------------------------------------------------------------------------ */

typedef struct trial_row {
    dt_track_run run;
    int trial;
} trial_row;

typedef struct sweep_view {
    dt_track *st;
    char id[256], parent[32];
    int n;
    trial_row *t;
    dt_status rc;
    int n_params;
    char param[MAX_PARAMS][128], kind[MAX_PARAMS][32];
    char metric[64];
    int mode_max;
} sweep_view;

static int have_run(const sweep_view *v, int64_t id) {
    for (int i = 0; i < v->n; i++)
        if (v->t[i].run.id == id) return 1;
    return 0;
}

/* Runs tagged with the sweep's id whose parent is this sweep's run (a sweep of the same id in
 * another experiment has another parent). */
static int trial_cb(void *ud, const dt_track_run *r) {
    sweep_view *v = ud;
    char parent[32], trial[32];
    if ((v->rc = tag_of(v->st, r->id, "sweep.parent", parent, sizeof parent)) != DT_OK ||
        (v->rc = tag_of(v->st, r->id, "sweep.trial", trial, sizeof trial)) != DT_OK)
        return 1;
    if (strcmp(parent, v->parent) || !trial[0] || v->n >= MAX_TRIALS) return 0;
    v->t[v->n].run = *r, v->t[v->n++].trial = atoi(trial);
    return 0;
}

/* A trial's first segment runs before the sweep tags it (at its first report): its run is
 * found by name, <sweep id>-tNNN in the sweep's experiment. */
static int running_cb(void *ud, const dt_track_run *r) {
    sweep_view *v = ud;
    size_t l = strlen(v->id);
    if (strncmp(r->name, v->id, l) || strncmp(r->name + l, "-t", 2)) return 0;
    const char *num = r->name + l + 2;
    if (!*num || strspn(num, "0123456789") != strlen(num) || have_run(v, r->id) ||
        v->n >= MAX_TRIALS)
        return 0;
    v->t[v->n].run = *r, v->t[v->n++].trial = atoi(num);
    return 0;
}

static int spec_cb(void *ud, const char *k, const char *val) {
    sweep_view *v = ud;
    if (!strncmp(k, "sweep.param.", 12) && v->n_params < MAX_PARAMS) {
        snprintf(v->param[v->n_params], sizeof v->param[0], "%s", k + 12);
        snprintf(v->kind[v->n_params++], sizeof v->kind[0], "%s", val);
    } else if (!strcmp(k, "sweep.metric")) {
        snprintf(v->metric, sizeof v->metric, "%s", val);
    } else if (!strcmp(k, "sweep.mode")) {
        v->mode_max = !strcmp(val, "max");
    }
    return 0;
}

typedef struct trial_tags {
    char status[32];
    long long step;
} trial_tags;

static int trial_tag_cb(void *ud, const char *k, const char *v) {
    trial_tags *t = ud;
    if (!strcmp(k, "sweep.status")) snprintf(t->status, sizeof t->status, "%s", v);
    if (!strcmp(k, "sweep.step")) t->step = atoll(v);
    return 0;
}

typedef struct param_pick {
    const sweep_view *v;
    cJSON *o;
} param_pick;

static int param_cb(void *ud, const char *k, const char *val) {
    param_pick *p = ud;
    for (int i = 0; i < p->v->n_params; i++)
        if (!strcmp(k, p->v->param[i])) cJSON_AddStringToObject(p->o, k, val);
    return 0;
}

typedef struct at_step {
    int64_t step;
    double value;
    int found;
} at_step;

static int at_step_cb(void *ud, const dt_track_metric_row *m) {
    at_step *a = ud;
    if (m->step == a->step) a->value = m->value, a->found = 1;
    return 1; /* steps come in order: the first row after step - 1 is the one */
}

static int cmp_trial(const void *a, const void *b) {
    return ((const trial_row *)a)->trial - ((const trial_row *)b)->trial;
}

/* Fills the trials array; *best is the index of the best (of those that reported at the
 * furthest step, the best value, as `dtrain sweep show`), -1 if none. */
static dt_status trials_json(sweep_view *v, cJSON *arr, int *best, double *best_v, int64_t *bstep) {
    *best = -1;
    for (int i = 0; i < v->n; i++) {
        const dt_track_run *r = &v->t[i].run;
        trial_tags tg = {.step = -1};
        dt_status rc = dt_track_tags(v->st, r->id, trial_tag_cb, &tg);
        at_step a = {.step = tg.step};
        if (rc == DT_OK && tg.step >= 0 && v->metric[0])
            rc = dt_track_metrics_since(v->st, r->id, v->metric, tg.step - 1, at_step_cb, &a);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        param_pick pp = {v, cJSON_CreateObject()};
        if (rc == DT_OK) rc = dt_track_params(v->st, r->id, param_cb, &pp);
        if (rc != DT_OK) {
            cJSON_Delete(pp.o);
            return rc;
        }
        /* the process's own state while it runs; the sweep's decision once it has exited */
        const char *status = r->lost                         ? "lost"
                             : !strcmp(r->status, "running") ? "running"
                             : tg.status[0]                  ? tg.status
                                                             : r->status;
        cJSON_AddNumberToObject(o, "trial", v->t[i].trial);
        cJSON_AddNumberToObject(o, "run_id", (double)r->id);
        cJSON_AddStringToObject(o, "run", r->name);
        cJSON_AddStringToObject(o, "status", status);
        cJSON_AddNumberToObject(o, "last_step", (double)r->last_step);
        cJSON_AddNumberToObject(o, "step", (double)tg.step);
        int ok = a.found && isfinite(a.value);
        if (ok)
            cJSON_AddNumberToObject(o, "metric", a.value);
        else
            cJSON_AddNullToObject(o, "metric");
        cJSON_AddItemToObject(o, "params", pp.o);
        if (!ok || !strcmp(status, "failed")) continue;
        int better = v->mode_max ? a.value > *best_v : a.value < *best_v;
        if (*best < 0 || tg.step > *bstep || (tg.step == *bstep && better))
            *best = i, *best_v = a.value, *bstep = tg.step;
    }
    return DT_OK;
}

int dt_sv_api_sweep(dt_serve *s, const char *ref, sv_buf *b) {
    dt_track *st = dt_sv_store(s);
    if (!st) return dt_sv_api_error(b, 503, dt_last_error());
    dt_track_run r;
    dt_status rc = dt_track_run_find(st, ref, &r);
    if (rc == DT_ERR_NOTFOUND || rc == DT_ERR_INVALID)
        return dt_sv_api_error(b, 404, dt_last_error());
    if (rc != DT_OK) return dt_sv_api_store_error(s, b);
    char kind[32];
    if (tag_of(st, r.id, "sweep.kind", kind, sizeof kind) != DT_OK)
        return dt_sv_api_store_error(s, b);
    if (strcmp(kind, "sweep")) {
        char msg[600];
        snprintf(msg, sizeof msg, "sweeps/%.256s: run %.256s is not a sweep", ref, r.name);
        return dt_sv_api_error(b, 404, msg);
    }
    sweep_view *v = calloc(1, sizeof *v);
    if (v) v->t = calloc(MAX_TRIALS, sizeof *v->t);
    if (!v || !v->t) {
        if (v) free(v->t);
        free(v);
        return dt_sv_api_error(b, 500, "sweeps: out of memory");
    }
    v->st = st;
    snprintf(v->id, sizeof v->id, "%s", r.name);
    snprintf(v->parent, sizeof v->parent, "%lld", (long long)r.id);
    rc = dt_track_tags(st, r.id, spec_cb, v);
    if (rc == DT_OK) rc = dt_track_runs_tagged(st, "sweep_id", r.name, trial_cb, v);
    if (rc == DT_OK) rc = v->rc;
    if (rc == DT_OK) rc = dt_track_runs(st, r.experiment, "running", running_cb, v);
    qsort(v->t, (size_t)v->n, sizeof *v->t, cmp_trial);
    cJSON *o = sweep_head(&r), *params = cJSON_AddArrayToObject(o, "params");
    cJSON_AddStringToObject(o, "metric", v->metric);
    cJSON_AddStringToObject(o, "mode", v->mode_max ? "max" : "min");
    char ms[32] = "";
    if (rc == DT_OK) rc = tag_of(st, r.id, "sweep.max_steps", ms, sizeof ms);
    cJSON_AddNumberToObject(o, "max_steps", atof(ms));
    for (int i = 0; i < v->n_params; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "key", v->param[i]);
        cJSON_AddStringToObject(p, "kind", v->kind[i]);
        cJSON_AddItemToArray(params, p);
    }
    int best = -1;
    double bv = 0;
    int64_t bstep = -1;
    if (rc == DT_OK) rc = trials_json(v, cJSON_AddArrayToObject(o, "trials"), &best, &bv, &bstep);
    if (best >= 0) {
        cJSON *bo = cJSON_AddObjectToObject(o, "best");
        cJSON_AddNumberToObject(bo, "trial", v->t[best].trial);
        cJSON_AddStringToObject(bo, "run", v->t[best].run.name);
        cJSON_AddNumberToObject(bo, "run_id", (double)v->t[best].run.id);
        cJSON_AddNumberToObject(bo, "step", (double)bstep);
        cJSON_AddNumberToObject(bo, "metric", bv);
    } else {
        cJSON_AddNullToObject(o, "best");
    }
    free(v->t);
    free(v);
    if (rc != DT_OK) {
        cJSON_Delete(o);
        return dt_sv_api_store_error(s, b);
    }
    return dt_sv_api_emit(b, o);
}
