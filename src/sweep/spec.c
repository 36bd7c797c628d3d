/* Reading a sweep file (include/dtrain/sweep.h) with libyaml's document loader: the file is a
 * few KB, so the whole node tree is fine. Every key is checked before any trial starts: the
 * spec's own keys, each parameter key against the config schema, each value by setting it on a
 * config (the schema's type and range checks), and the base config with the overrides. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "dtrain/config.h"
#include "dtrain/sweep.h"

typedef struct ctx {
    yaml_document_t doc;
    const char *path;
    dt_sweep_spec *s;
} ctx;

static dt_status bad(const ctx *c, const yaml_node_t *n, const char *fmt, const char *a,
                     const char *b) {
    char msg[900];
    snprintf(msg, sizeof msg, fmt, a, b ? b : "");
    return dt_error_set(DT_ERR_INVALID, "%s:%d: %s", c->path, n ? (int)n->start_mark.line + 1 : 0,
                        msg);
}

static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *node(ctx *c, int id) {
    return yaml_document_get_node(&c->doc, id);
}

static dt_status get_int(const ctx *c, const yaml_node_t *v, const char *key, int64_t lo,
                         int64_t *out) {
    const char *t = scalar(v);
    char *end;
    errno = 0;
    long long x = t ? strtoll(t, &end, 10) : 0;
    if (!t || !*t || *end || errno || x < lo) {
        char want[64];
        snprintf(want, sizeof want, "an integer >= %lld", (long long)lo);
        return bad(c, v, "%s: expected %s", key, want);
    }
    *out = x;
    return DT_OK;
}

static dt_status get_num(const ctx *c, const yaml_node_t *v, const char *key, double *out) {
    const char *t = scalar(v);
    char *end;
    double x = t ? strtod(t, &end) : 0;
    if (!t || !*t || *end || !isfinite(x)) return bad(c, v, "%s: expected a number", key, NULL);
    *out = x;
    return DT_OK;
}

/* A value of config key `key` is checked by setting it on a default config: the schema's own
 * type, enum and range checks, with its message. */
static dt_status check_value(const ctx *c, const yaml_node_t *at, const char *key,
                             const char *value) {
    dt_config *cfg = dt_config_init_defaults();
    if (!cfg) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", c->path);
    dt_status st = dt_config_set(cfg, key, value);
    dt_config_free(cfg);
    if (st != DT_OK) {
        char m[512];
        snprintf(m, sizeof m, "%.500s", dt_last_error());
        return bad(c, at, "parameters.%s: %s", key, m);
    }
    return DT_OK;
}

static dt_status check_key(const ctx *c, const yaml_node_t *at, const char *key) {
    if (!dt_config_key_find(key))
        return bad(c, at, "parameters: unknown config key '%s'", key, NULL);
    if (!strncmp(key, "output.", 7) || !strncmp(key, "tracking.", 9) ||
        !strcmp(key, "train.steps") || !strcmp(key, "ckpt.resume") || !strcmp(key, "train.threads"))
        return bad(c, at, "parameters: %s is set by the sweep for every trial, not a parameter",
                   key, NULL);
    return DT_OK;
}

static dt_status read_list(ctx *c, yaml_node_t *v, dt_sweep_param *p) {
    if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top == v->data.sequence.items.start)
        return bad(c, v, "parameters.%s: values/choice must be a non-empty list", p->key, NULL);
    for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
        const char *t = scalar(node(c, *i));
        if (!t) return bad(c, v, "parameters.%s: list items must be scalars", p->key, NULL);
        if (p->n_values == DT_SWEEP_MAX_VALUES || strlen(t) >= DT_SWEEP_VAL)
            return bad(c, v, "parameters.%s: too many or too long values", p->key, NULL);
        snprintf(p->values[p->n_values++], DT_SWEEP_VAL, "%s", t);
    }
    return DT_OK;
}

/* A range's end points are checked as values of the key too (an int key with a float range, a
 * learning rate below the schema's minimum). */
static dt_status check_range(ctx *c, const yaml_node_t *v, dt_sweep_param *p) {
    if (!(p->lo < p->hi)) return bad(c, v, "parameters.%s: min must be below max", p->key, NULL);
    if (p->kind == DT_SWEEP_LOG && p->lo <= 0)
        return bad(c, v, "parameters.%s: log_uniform needs min > 0", p->key, NULL);
    if (p->kind == DT_SWEEP_INT && (p->lo != floor(p->lo) || p->hi != floor(p->hi)))
        return bad(c, v, "parameters.%s: int ranges need integer min and max", p->key, NULL);
    char a[64], b[64];
    snprintf(a, sizeof a, p->kind == DT_SWEEP_INT ? "%.0f" : "%.17g", p->lo);
    snprintf(b, sizeof b, p->kind == DT_SWEEP_INT ? "%.0f" : "%.17g", p->hi);
    dt_status st = check_value(c, v, p->key, a);
    return st != DT_OK ? st : check_value(c, v, p->key, b);
}

static dt_status read_param(ctx *c, const char *key, yaml_node_t *v, dt_sweep_param *p) {
    dt_status st;
    snprintf(p->key, sizeof p->key, "%s", key);
    if (strlen(key) >= sizeof p->key) return bad(c, v, "parameters: key too long: %s", key, NULL);
    if ((st = check_key(c, v, key)) != DT_OK) return st;
    if (v->type == YAML_SEQUENCE_NODE) { /* a bare list: grid values */
        p->kind = DT_SWEEP_VALUES;
        if ((st = read_list(c, v, p)) != DT_OK) return st;
        for (int i = 0; i < p->n_values; i++)
            if ((st = check_value(c, v, key, p->values[i])) != DT_OK) return st;
        return DT_OK;
    }
    if (v->type != YAML_MAPPING_NODE)
        return bad(c, v, "parameters.%s: expected a list or a mapping (values, choice, min/max)",
                   key, NULL);
    int have_list = 0, have_lo = 0, have_hi = 0;
    const char *dist = "uniform";
    p->kind = DT_SWEEP_UNIFORM;
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *k = scalar(node(c, q->key));
        yaml_node_t *val = node(c, q->value);
        if (!k) return bad(c, v, "parameters.%s: keys must be scalars", key, NULL);
        if (!strcmp(k, "values") || !strcmp(k, "choice")) {
            p->kind = !strcmp(k, "values") ? DT_SWEEP_VALUES : DT_SWEEP_CHOICE;
            have_list++;
            if ((st = read_list(c, val, p)) != DT_OK) return st;
        } else if (!strcmp(k, "min")) {
            have_lo = 1;
            if ((st = get_num(c, val, "min", &p->lo)) != DT_OK) return st;
        } else if (!strcmp(k, "max")) {
            have_hi = 1;
            if ((st = get_num(c, val, "max", &p->hi)) != DT_OK) return st;
        } else if (!strcmp(k, "distribution")) {
            dist = scalar(val) ? scalar(val) : "";
        } else if (!strcmp(k, "when")) {
            yaml_node_pair_t *w =
                val->type == YAML_MAPPING_NODE ? val->data.mapping.pairs.start : 0;
            if (!w || val->data.mapping.pairs.top != w + 1 || !scalar(node(c, w->key)) ||
                !scalar(node(c, w->value)))
                return bad(c, val, "parameters.%s.when: expected one 'KEY: VALUE'", key, NULL);
            snprintf(p->when_key, sizeof p->when_key, "%s", scalar(node(c, w->key)));
            snprintf(p->when_value, sizeof p->when_value, "%s", scalar(node(c, w->value)));
        } else {
            return bad(c, val,
                       "parameters.%s: unknown field '%s' (values, choice, min, max, "
                       "distribution, when)",
                       key, k);
        }
    }
    if (have_list > 1 || (have_list && (have_lo || have_hi)))
        return bad(c, v, "parameters.%s: give one of values, choice or min/max", key, NULL);
    if (have_list) {
        for (int i = 0; i < p->n_values; i++)
            if ((st = check_value(c, v, key, p->values[i])) != DT_OK) return st;
        return DT_OK;
    }
    if (!have_lo || !have_hi)
        return bad(c, v, "parameters.%s: a range needs min and max", key, NULL);
    if (!strcmp(dist, "uniform"))
        p->kind = DT_SWEEP_UNIFORM;
    else if (!strcmp(dist, "log_uniform"))
        p->kind = DT_SWEEP_LOG;
    else if (!strcmp(dist, "int"))
        p->kind = DT_SWEEP_INT;
    else
        return bad(c, v, "parameters.%s: distribution '%s' is not uniform, log_uniform or int", key,
                   dist);
    return check_range(c, v, p);
}

/* when: must name an earlier parameter, and one of its listed values when it has a list. */
static dt_status check_when(ctx *c, const yaml_node_t *at, int i) {
    dt_sweep_param *p = &c->s->params[i];
    if (!p->when_key[0]) return DT_OK;
    for (int j = 0; j < i; j++) {
        const dt_sweep_param *q = &c->s->params[j];
        if (strcmp(q->key, p->when_key)) continue;
        if (q->kind > DT_SWEEP_CHOICE) return DT_OK;
        for (int k = 0; k < q->n_values; k++)
            if (!strcmp(q->values[k], p->when_value)) return DT_OK;
        return bad(c, at, "parameters.%s.when: '%s' is not one of its values", p->key,
                   p->when_value);
    }
    return bad(c, at, "parameters.%s.when: '%s' is not an earlier parameter", p->key, p->when_key);
}

static dt_status read_params(ctx *c, yaml_node_t *v) {
    if (v->type != YAML_MAPPING_NODE)
        return bad(c, v, "parameters: expected a mapping", NULL, NULL);
    dt_status st;
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *k = scalar(node(c, q->key));
        if (!k) return bad(c, v, "parameters: keys must be scalars", NULL, NULL);
        if (c->s->n_params == DT_SWEEP_MAX_PARAMS)
            return bad(c, v, "parameters: more than %s", "24", NULL);
        for (int j = 0; j < c->s->n_params; j++)
            if (!strcmp(c->s->params[j].key, k)) return bad(c, v, "parameters: %s twice", k, NULL);
        if ((st = read_param(c, k, node(c, q->value), &c->s->params[c->s->n_params])) != DT_OK)
            return st;
        if ((st = check_when(c, node(c, q->value), c->s->n_params++)) != DT_OK) return st;
    }
    if (!c->s->n_params) return bad(c, v, "parameters: none given", NULL, NULL);
    return DT_OK;
}

static dt_status read_overrides(ctx *c, yaml_node_t *v) {
    if (v->type != YAML_MAPPING_NODE)
        return bad(c, v, "overrides: expected a mapping of config keys", NULL, NULL);
    dt_status st;
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *k = scalar(node(c, q->key)), *x = scalar(node(c, q->value));
        if (!k || !x) return bad(c, v, "overrides: expected 'key: value' scalars", NULL, NULL);
        if (!dt_config_key_find(k)) return bad(c, v, "overrides: unknown config key '%s'", k, NULL);
        if ((st = check_value(c, v, k, x)) != DT_OK) return st;
        if (c->s->n_over == DT_SWEEP_MAX_OVER || strlen(k) + strlen(x) + 2 > sizeof c->s->over[0])
            return bad(c, v, "overrides: too many or too long (at %s)", k, NULL);
        snprintf(c->s->over[c->s->n_over++], sizeof c->s->over[0], "%s=%s", k, x);
    }
    return DT_OK;
}

static dt_status read_enum(ctx *c, yaml_node_t *v, const char *key, const char *const *names,
                           int *out) {
    const char *t = scalar(v);
    for (int i = 0; t && names[i]; i++)
        if (!strcmp(t, names[i])) return (*out = i), DT_OK;
    char all[128] = "";
    for (int i = 0; names[i]; i++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? "|" : "", names[i]);
    return bad(c, v, "%s: expected %s", key, all);
}

static dt_status read_early(ctx *c, yaml_node_t *v) {
    static const char *const rules[] = {"none", "asha", "median", NULL};
    dt_status st;
    int64_t x;
    if (v->type != YAML_MAPPING_NODE)
        return bad(c, v, "early_stopping: expected a mapping (rule, grace_period, ...)", 0, 0);
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        const char *k = scalar(node(c, q->key));
        yaml_node_t *val = node(c, q->value);
        int r;
        if (!k) return bad(c, v, "early_stopping: keys must be scalars", NULL, NULL);
        if (!strcmp(k, "rule")) {
            if ((st = read_enum(c, val, "early_stopping.rule", rules, &r)) != DT_OK) return st;
            c->s->rule = (dt_sweep_rule)r;
        } else if (!strcmp(k, "grace_period")) {
            if ((st = get_int(c, val, "early_stopping.grace_period", 1, &x)) != DT_OK) return st;
            c->s->grace_period = x;
        } else if (!strcmp(k, "reduction_factor")) {
            if ((st = get_int(c, val, "early_stopping.reduction_factor", 2, &x)) != DT_OK)
                return st;
            c->s->reduction_factor = (int)(x > 64 ? 64 : x);
        } else if (!strcmp(k, "min_samples")) {
            if ((st = get_int(c, val, "early_stopping.min_samples", 1, &x)) != DT_OK) return st;
            c->s->min_samples = (int)(x > 1000 ? 1000 : x);
        } else {
            return bad(c, val,
                       "early_stopping: unknown key '%s' (rule, grace_period, "
                       "reduction_factor, min_samples)",
                       k, NULL);
        }
    }
    return DT_OK;
}

static dt_status read_top(ctx *c, const char *k, yaml_node_t *v) {
    static const char *const samplers[] = {"grid", "random", "sobol", NULL};
    static const char *const metrics[] = {"train_loss", "val_loss", NULL};
    static const char *const modes[] = {"min", "max", NULL};
    dt_sweep_spec *s = c->s;
    dt_status st;
    int64_t x;
    int e;
    if (!strcmp(k, "base")) {
        const char *t = scalar(v);
        if (!t || !*t) return bad(c, v, "base: expected the path of a config file", NULL, NULL);
        const char *sl = strrchr(c->path, '/');
        if (t[0] == '/' || !sl)
            snprintf(s->base, sizeof s->base, "%s", t);
        else
            snprintf(s->base, sizeof s->base, "%.*s/%s", (int)(sl - c->path), c->path, t);
        char abs[PATH_MAX];
        if (realpath(s->base, abs)) snprintf(s->base, sizeof s->base, "%s", abs);
        return DT_OK;
    }
    if (!strcmp(k, "overrides")) return read_overrides(c, v);
    if (!strcmp(k, "parameters")) return read_params(c, v);
    if (!strcmp(k, "early_stopping")) return read_early(c, v);
    if (!strcmp(k, "sampler")) {
        if ((st = read_enum(c, v, "sampler", samplers, &e)) != DT_OK) return st;
        s->sampler = (dt_sweep_sampler)e;
    } else if (!strcmp(k, "metric")) {
        if ((st = read_enum(c, v, "metric", metrics, &e)) != DT_OK) return st;
        s->metric_val = e;
    } else if (!strcmp(k, "mode")) {
        if ((st = read_enum(c, v, "mode", modes, &e)) != DT_OK) return st;
        s->mode_max = e;
    } else if (!strcmp(k, "seed")) {
        if ((st = get_int(c, v, "seed", 0, &x)) != DT_OK) return st;
        s->seed = (uint64_t)x;
    } else if (!strcmp(k, "shuffle")) {
        static const char *const bools[] = {"false", "true", NULL};
        if ((st = read_enum(c, v, "shuffle", bools, &e)) != DT_OK) return st;
        s->shuffle = e;
    } else if (!strcmp(k, "trials")) {
        if ((st = get_int(c, v, "trials", 1, &x)) != DT_OK) return st;
        if (x > DT_SWEEP_MAX_TRIALS) return bad(c, v, "trials: at most %s", "1024", NULL);
        s->trials = (int)x;
    } else if (!strcmp(k, "max_concurrent")) {
        if ((st = get_int(c, v, "max_concurrent", 1, &x)) != DT_OK) return st;
        s->max_concurrent = (int)(x > 1024 ? 1024 : x);
    } else if (!strcmp(k, "max_steps")) {
        if ((st = get_int(c, v, "max_steps", 1, &x)) != DT_OK) return st;
        s->max_steps = x;
    } else {
        return bad(c, v,
                   "unknown key '%s' (base, overrides, parameters, sampler, seed, shuffle, "
                   "trials, max_concurrent, max_steps, metric, mode, early_stopping)",
                   k, NULL);
    }
    return DT_OK;
}

/* Checks that need the whole spec: the base config with the overrides loads, the grid is not
 * given ranges, the rungs fit the steps. */
static dt_status check_spec(ctx *c, yaml_node_t *root) {
    dt_sweep_spec *s = c->s;
    if (!s->base[0]) return bad(c, root, "base: missing (the config the trials start from)", 0, 0);
    if (!s->n_params) return bad(c, root, "parameters: missing", NULL, NULL);
    char *ov[DT_SWEEP_MAX_OVER];
    for (int i = 0; i < s->n_over; i++) ov[i] = s->over[i];
    dt_config *cfg;
    if (dt_config_from_args(s->base, s->n_over, ov, &cfg) != DT_OK) {
        char m[560];
        snprintf(m, sizeof m, "%.550s", dt_last_error());
        return bad(c, root, "base: %s%s", m, NULL);
    }
    const dt_config_values *v = dt_config_get_values(cfg);
    if (!s->max_steps) s->max_steps = v->train.steps;
    int has_val = v->data.val[0] != 0;
    dt_config_free(cfg);
    if (s->max_steps <= 0)
        return bad(c, root, "max_steps: missing (and the base config has no train.steps)", 0, 0);
    if (s->metric_val && !has_val)
        return bad(c, root, "metric: val_loss needs data.val in the base config or overrides", 0,
                   0);
    if (s->sampler == DT_SWEEP_GRID)
        for (int i = 0; i < s->n_params; i++)
            if (s->params[i].kind > DT_SWEEP_CHOICE)
                return bad(c, root, "parameters.%s: the grid sampler needs values, not a range",
                           s->params[i].key, NULL);
    if (s->sampler != DT_SWEEP_GRID && s->shuffle)
        return bad(c, root, "shuffle: only the grid sampler has an order to shuffle", 0, 0);
    if (s->sampler != DT_SWEEP_GRID && !s->trials)
        return bad(c, root, "trials: missing (random and sobol sample this many)", NULL, NULL);
    if (s->rule != DT_SWEEP_NONE && s->grace_period >= s->max_steps)
        return bad(c, root, "early_stopping.grace_period must be below max_steps", NULL, NULL);
    return DT_OK;
}

dt_status dt_sweep_spec_load(const char *path, dt_sweep_spec **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_error_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ctx c = {.path = path, .s = calloc(1, sizeof(dt_sweep_spec))};
    yaml_parser_t p;
    if (!c.s || !yaml_parser_initialize(&p)) {
        fclose(f);
        free(c.s);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    yaml_parser_set_input_file(&p, f);
    int ok = yaml_parser_load(&p, &c.doc);
    fclose(f);
    if (!ok) {
        dt_status st = dt_error_set(DT_ERR_FORMAT, "%s:%d: %s", path, (int)p.problem_mark.line + 1,
                                    p.problem ? p.problem : "YAML error");
        yaml_parser_delete(&p);
        free(c.s);
        return st;
    }
    yaml_parser_delete(&p);
    dt_sweep_spec *s = c.s;
    snprintf(s->path, sizeof s->path, "%s", path);
    s->max_concurrent = 0, s->reduction_factor = 3, s->grace_period = 0, s->min_samples = 3;
    s->metric_val = 1;
    dt_status st = DT_OK;
    yaml_node_t *root = yaml_document_get_root_node(&c.doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        st = dt_error_set(DT_ERR_INVALID, "%s: expected a mapping (base, parameters, ...)", path);
    for (yaml_node_pair_t *q = st ? NULL : root->data.mapping.pairs.start;
         q && q < root->data.mapping.pairs.top && st == DT_OK; q++) {
        const char *k = scalar(node(&c, q->key));
        st = k ? read_top(&c, k, node(&c, q->value)) : bad(&c, root, "keys must be scalars", 0, 0);
    }
    if (st == DT_OK) {
        if (s->rule != DT_SWEEP_NONE && !s->grace_period) s->grace_period = -1; /* set below */
        st = check_spec(&c, root);
        if (st == DT_OK && s->grace_period < 0)
            s->grace_period = s->max_steps / 9 > 0 ? s->max_steps / 9 : 1;
    }
    yaml_document_delete(&c.doc);
    if (st != DT_OK) {
        free(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_sweep_spec_free(dt_sweep_spec *s) {
    free(s);
}
