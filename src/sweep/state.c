/* sweep.json (src/sweep/sweep_impl.h): what `dtrain sweep --resume` and `dtrain sweep show`
 * read. Rewritten whole after every trial event (a few KB), atomically, so a killed sweep
 * leaves the last complete state. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include "core/file.h"
#include "sweep_impl.h"

const char *const dt_sweep_status_names[] = {"pending", "running", "promoted",
                                             "stopped", "done",    "failed"};
static const char *const rules[] = {"none", "asha", "median"};
static const char *const samplers[] = {"grid", "random", "sobol"};

static cJSON *spec_json(const dt_sweep_spec *p) {
    cJSON *o = cJSON_CreateObject(), *ov = cJSON_AddArrayToObject(o, "overrides");
    cJSON_AddStringToObject(o, "file", p->path);
    cJSON_AddStringToObject(o, "base", p->base);
    for (int i = 0; i < p->n_over; i++) cJSON_AddItemToArray(ov, cJSON_CreateString(p->over[i]));
    cJSON_AddStringToObject(o, "sampler", samplers[p->sampler]);
    cJSON_AddNumberToObject(o, "seed", (double)p->seed);
    cJSON_AddBoolToObject(o, "shuffle", p->shuffle);
    cJSON_AddNumberToObject(o, "max_concurrent", p->max_concurrent);
    cJSON_AddStringToObject(o, "metric", p->metric_val ? "val_loss" : "train_loss");
    cJSON_AddStringToObject(o, "mode", p->mode_max ? "max" : "min");
    cJSON_AddStringToObject(o, "rule", rules[p->rule]);
    cJSON_AddNumberToObject(o, "max_steps", (double)p->max_steps);
    cJSON_AddNumberToObject(o, "grace_period", (double)p->grace_period);
    cJSON_AddNumberToObject(o, "reduction_factor", p->reduction_factor);
    cJSON_AddNumberToObject(o, "min_samples", p->min_samples);
    return o;
}

static cJSON *trial_json(const sweep_trial *t, int i) {
    cJSON *o = cJSON_CreateObject(), *p = cJSON_AddObjectToObject(o, "params");
    cJSON_AddNumberToObject(o, "trial", i);
    cJSON_AddStringToObject(o, "run", t->run);
    cJSON_AddStringToObject(o, "status", dt_sweep_status_names[t->status]);
    for (int k = 0; k < t->p.n; k++) cJSON_AddStringToObject(p, t->p.key[k], t->p.value[k]);
    cJSON_AddNumberToObject(o, "step", (double)t->step);
    cJSON_AddNumberToObject(o, "target", (double)t->target);
    cJSON_AddNumberToObject(o, "segments", t->segments);
    cJSON_AddNumberToObject(o, "pid", t->status == T_RUNNING ? (double)t->pid : 0);
    cJSON *r = cJSON_AddArrayToObject(o, "reports");
    for (int k = 0; k < t->n_reports; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "step", (double)t->rep_step[k]);
        cJSON_AddNumberToObject(e, "value", t->rep_val[k]);
        cJSON_AddItemToArray(r, e);
    }
    if (t->n_reports)
        cJSON_AddNumberToObject(o, "metric", t->rep_val[t->n_reports - 1]);
    else
        cJSON_AddNullToObject(o, "metric");
    cJSON_AddStringToObject(o, "why", t->why);
    return o;
}

dt_status dt_sweep_state_save(const sweep_state *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->id);
    cJSON_AddStringToObject(o, "status", s->status);
    cJSON_AddStringToObject(o, "experiment", s->experiment);
    cJSON_AddStringToObject(o, "output_dir", s->out_dir);
    cJSON_AddStringToObject(o, "store", s->store);
    cJSON_AddNumberToObject(o, "started", s->started);
    cJSON_AddNumberToObject(o, "slots", s->slots);
    cJSON_AddNumberToObject(o, "threads", s->threads);
    cJSON_AddNumberToObject(o, "workers", s->workers);
    cJSON_AddStringToObject(o, "hosts", s->hosts);
    cJSON_AddStringToObject(o, "mpirun", s->mpirun);
    cJSON_AddStringToObject(o, "mpirun_args", s->mpirun_args);
    cJSON_AddItemToObject(o, "spec", spec_json(&s->spec));
    cJSON *a = cJSON_AddArrayToObject(o, "trials");
    for (int i = 0; i < s->n; i++) cJSON_AddItemToArray(a, trial_json(&s->t[i], i));
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    if (!txt) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", s->json);
    dt_status st = dt_file_write_atomic(s->json, txt, strlen(txt));
    free(txt);
    return st;
}

/* ---- reading -------------------------------------------------------------------------------- */

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int index_of(const char *const *names, int n, const char *v) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], v)) return i;
    return -1;
}

static dt_status read_trial(const char *path, const cJSON *o, sweep_trial *t) {
    int st = index_of(dt_sweep_status_names, 6, str(o, "status"));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "params");
    if (st < 0 || !cJSON_IsObject(p))
        return dt_error_set(DT_ERR_FORMAT, "%s: trial %d: bad status or params", path,
                            (int)num(o, "trial"));
    t->status = (trial_status)st;
    snprintf(t->run, sizeof t->run, "%s", str(o, "run"));
    snprintf(t->why, sizeof t->why, "%s", str(o, "why"));
    t->step = (int64_t)num(o, "step"), t->target = (int64_t)num(o, "target");
    t->segments = (int)num(o, "segments"), t->pid = (pid_t)num(o, "pid");
    const cJSON *kv;
    cJSON_ArrayForEach(kv, p) {
        if (t->p.n == DT_SWEEP_MAX_PARAMS || !cJSON_IsString(kv)) break;
        snprintf(t->p.key[t->p.n], DT_SWEEP_KEY, "%s", kv->string);
        snprintf(t->p.value[t->p.n++], DT_SWEEP_VAL, "%s", kv->valuestring);
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(o, "reports")) {
        if (t->n_reports > DT_SWEEP_MAX_RUNGS) break;
        t->rep_step[t->n_reports] = (int64_t)num(r, "step");
        t->rep_val[t->n_reports++] = num(r, "value");
    }
    return DT_OK;
}

static void read_spec(const cJSON *o, dt_sweep_spec *p) {
    snprintf(p->path, sizeof p->path, "%s", str(o, "file"));
    snprintf(p->base, sizeof p->base, "%s", str(o, "base"));
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(o, "overrides")) {
        if (p->n_over < DT_SWEEP_MAX_OVER && cJSON_IsString(v))
            snprintf(p->over[p->n_over++], sizeof p->over[0], "%s", v->valuestring);
    }
    int k = index_of(samplers, 3, str(o, "sampler"));
    p->sampler = k < 0 ? DT_SWEEP_GRID : (dt_sweep_sampler)k;
    k = index_of(rules, 3, str(o, "rule"));
    p->rule = k < 0 ? DT_SWEEP_NONE : (dt_sweep_rule)k;
    p->seed = (uint64_t)num(o, "seed");
    p->shuffle = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "shuffle"));
    p->max_concurrent = (int)num(o, "max_concurrent");
    p->metric_val = !strcmp(str(o, "metric"), "val_loss");
    p->mode_max = !strcmp(str(o, "mode"), "max");
    p->max_steps = (int64_t)num(o, "max_steps");
    p->grace_period = (int64_t)num(o, "grace_period");
    p->reduction_factor = (int)num(o, "reduction_factor");
    p->min_samples = (int)num(o, "min_samples");
}

dt_status dt_sweep_state_load(const char *path, sweep_state *s) {
    memset(s, 0, sizeof *s);
    uint8_t *data;
    size_t len;
    dt_status st = dt_read_file_max(path, 0, 64u << 20, "sweep.json", &data, &len);
    if (st != DT_OK) return st;
    cJSON *o = cJSON_ParseWithLength((const char *)data, len);
    free(data);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
    const cJSON *trials = cJSON_GetObjectItemCaseSensitive(o, "trials");
    if (!cJSON_IsObject(o) || !cJSON_IsObject(spec) || !cJSON_IsArray(trials) || !*str(o, "id")) {
        cJSON_Delete(o);
        return dt_error_set(DT_ERR_FORMAT, "%s: not a sweep.json (id, spec, trials)", path);
    }
    snprintf(s->id, sizeof s->id, "%s", str(o, "id"));
    snprintf(s->status, sizeof s->status, "%s", str(o, "status"));
    snprintf(s->experiment, sizeof s->experiment, "%s", str(o, "experiment"));
    snprintf(s->out_dir, sizeof s->out_dir, "%s", str(o, "output_dir"));
    snprintf(s->store, sizeof s->store, "%s", str(o, "store"));
    snprintf(s->json, sizeof s->json, "%s", path);
    const char *sl = strrchr(path, '/');
    snprintf(s->dir, sizeof s->dir, "%.*s", sl ? (int)(sl - path) : 1, sl ? path : ".");
    s->started = num(o, "started");
    s->slots = (int)num(o, "slots"), s->threads = (int)num(o, "threads");
    s->workers = (int)num(o, "workers"); /* 0 in sweeps saved before: 1 */
    snprintf(s->hosts, sizeof s->hosts, "%s", str(o, "hosts"));
    snprintf(s->mpirun, sizeof s->mpirun, "%s", str(o, "mpirun"));
    snprintf(s->mpirun_args, sizeof s->mpirun_args, "%s", str(o, "mpirun_args"));
    read_spec(spec, &s->spec);
    s->n = cJSON_GetArraySize(trials);
    s->t = calloc((size_t)(s->n ? s->n : 1), sizeof *s->t);
    if (!s->t) st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, trials) {
        if (st == DT_OK) st = read_trial(path, t, &s->t[i++]);
    }
    cJSON_Delete(o);
    if (st != DT_OK) free(s->t), s->t = NULL;
    return st;
}

/* ---- showing -------------------------------------------------------------------------------- */

/* The best trial: of those that reached the furthest step, the best last value (a value from a
 * trial stopped early is not comparable with a finished one's). */
static int best_of(const sweep_state *s, double *value) {
    int best = -1;
    for (int i = 0; i < s->n; i++) {
        const sweep_trial *t = &s->t[i];
        if (!t->n_reports || t->status == T_FAILED) continue;
        double v = t->rep_val[t->n_reports - 1];
        int better = s->spec.mode_max ? v > *value : v < *value;
        if (best < 0 || t->step > s->t[best].step || (t->step == s->t[best].step && better))
            best = i, *value = v;
    }
    return best;
}

dt_status dt_sweep_summary(const char *json_path, dt_sweep_result *r) {
    sweep_state s;
    dt_status st = dt_sweep_state_load(json_path, &s);
    if (st != DT_OK) return st;
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", s.id);
    snprintf(r->dir, sizeof r->dir, "%s", s.dir);
    r->trials = s.n;
    for (int i = 0; i < s.n; i++) {
        r->done += s.t[i].status == T_DONE, r->stopped += s.t[i].status == T_STOPPED;
        r->failed += s.t[i].status == T_FAILED;
    }
    r->best = best_of(&s, &r->best_value);
    if (r->best >= 0) snprintf(r->best_run, sizeof r->best_run, "%s", s.t[r->best].run);
    r->interrupted = strcmp(s.status, "done") != 0;
    free(s.t);
    return DT_OK;
}

dt_status dt_sweep_show(const char *json_path, FILE *f, int json) {
    sweep_state s;
    dt_status st = dt_sweep_state_load(json_path, &s);
    if (st != DT_OK) return st;
    double bv = 0;
    int best = best_of(&s, &bv);
    const char *m = s.spec.metric_val ? "val_loss" : "train_loss";
    if (json) {
        uint8_t *data;
        size_t len;
        if ((st = dt_read_file_max(json_path, 0, 64u << 20, "sweep.json", &data, &len)) != DT_OK)
            return free(s.t), st;
        cJSON *o = cJSON_ParseWithLength((const char *)data, len);
        free(data);
        cJSON *b = cJSON_AddObjectToObject(o, "best");
        if (best >= 0) {
            cJSON_AddNumberToObject(b, "trial", best);
            cJSON_AddStringToObject(b, "run", s.t[best].run);
            cJSON_AddNumberToObject(b, "step", (double)s.t[best].step);
            cJSON_AddNumberToObject(b, m, bv);
        }
        char *txt = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (txt) fprintf(f, "%s\n", txt);
        free(txt);
        free(s.t);
        return DT_OK;
    }
    fprintf(f, "sweep %s (%s): %d trials, %s%s, metric %s (%s), early stopping %s\n", s.id,
            s.status, s.n, samplers[s.spec.sampler], s.spec.shuffle ? " (shuffled)" : "", m,
            s.spec.mode_max ? "max" : "min", rules[s.spec.rule]);
    fprintf(f, "%-5s %-28s %-9s %6s %12s  %s\n", "trial", "run", "status", "step", m, "params");
    for (int i = 0; i < s.n; i++) {
        const sweep_trial *t = &s.t[i];
        char v[32] = "-", params[1024] = "";
        if (t->n_reports) snprintf(v, sizeof v, "%.6g", t->rep_val[t->n_reports - 1]);
        for (int k = 0; k < t->p.n; k++)
            snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s=%s",
                     k ? " " : "", t->p.key[k], t->p.value[k]);
        fprintf(f, "%-5d %-28s %-9s %6lld %12s  %s%s\n", i, t->run,
                dt_sweep_status_names[t->status], (long long)t->step, v, params,
                i == best ? "  (best)" : "");
    }
    if (best >= 0)
        fprintf(f, "best: trial %d (%s), %s %.6g at step %lld\n", best, s.t[best].run, m, bv,
                (long long)s.t[best].step);
    free(s.t);
    return DT_OK;
}
