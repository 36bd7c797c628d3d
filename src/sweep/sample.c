/* The trials of a sweep (include/dtrain/sweep.h): the grid, random draws and the Sobol
 * sequence, each mapping a point u in [0, 1)^d to one value per parameter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/rng.h"
#include "dtrain/sweep.h"

/* Joe and Kuo's primitive polynomials and initial direction numbers for dimensions 2..24
 * (new-joe-kuo-6.21201: degree s, coefficients a, m_1..m_s); dimension 1 is van der Corput's
 * (every m_k = 1). */
static const struct {
    int s, a, m[8];
} jk[DT_SWEEP_MAX_PARAMS - 1] = {
    {1, 0, {1}},
    {2, 1, {1, 3}},
    {3, 1, {1, 3, 1}},
    {3, 2, {1, 1, 1}},
    {4, 1, {1, 1, 3, 3}},
    {4, 4, {1, 3, 5, 13}},
    {5, 2, {1, 1, 5, 5, 17}},
    {5, 4, {1, 1, 5, 5, 5}},
    {5, 7, {1, 1, 7, 11, 19}},
    {5, 11, {1, 1, 5, 1, 1}},
    {5, 13, {1, 1, 1, 3, 11}},
    {5, 14, {1, 3, 5, 5, 31}},
    {6, 1, {1, 3, 3, 9, 7, 49}},
    {6, 13, {1, 1, 1, 15, 21, 21}},
    {6, 16, {1, 3, 1, 13, 27, 49}},
    {6, 19, {1, 1, 1, 15, 7, 5}},
    {6, 22, {1, 3, 1, 15, 13, 25}},
    {6, 25, {1, 1, 5, 5, 19, 61}},
    {7, 1, {1, 3, 7, 11, 23, 15, 103}},
    {7, 4, {1, 3, 7, 13, 13, 15, 69}},
    {7, 7, {1, 1, 3, 13, 7, 35, 63}},
    {7, 8, {1, 3, 5, 9, 1, 25, 53}},
    {7, 14, {1, 3, 1, 13, 9, 35, 107}},
};

/* Direction numbers v_1..v_32 of one dimension, scaled to 32 bits: v_k = m_k / 2^k for
 * k <= s, then the recurrence of the dimension's polynomial. */
static void directions(int dim, uint32_t v[33]) {
    if (dim == 0) {
        for (int k = 1; k <= 32; k++) v[k] = 1u << (32 - k);
        return;
    }
    int s = jk[dim - 1].s, a = jk[dim - 1].a;
    for (int k = 1; k <= s && k <= 32; k++) v[k] = (uint32_t)jk[dim - 1].m[k - 1] << (32 - k);
    for (int k = s + 1; k <= 32; k++) {
        v[k] = v[k - s] ^ (v[k - s] >> s);
        for (int j = 1; j < s; j++)
            if ((a >> (s - 1 - j)) & 1) v[k] ^= v[k - j];
    }
}

dt_status dt_sobol_point(uint32_t index, int dims, double *x) {
    if (dims < 1 || dims > DT_SWEEP_MAX_PARAMS)
        return dt_error_set(DT_ERR_RANGE, "sobol: %d dimensions (1..%d)", dims,
                            DT_SWEEP_MAX_PARAMS);
    /* Gray-code order: point i is the XOR of v_k over the bits k set in i ^ (i >> 1), which is
     * what the usual update (flip v at the lowest zero bit of i - 1) reaches after i steps. */
    uint32_t g = index ^ (index >> 1);
    for (int d = 0; d < dims; d++) {
        uint32_t v[33], acc = 0;
        directions(d, v);
        for (int k = 1; k <= 32; k++)
            if ((g >> (k - 1)) & 1) acc ^= v[k];
        x[d] = (double)acc / 4294967296.0;
    }
    return DT_OK;
}

/* Value of parameter p at u in [0, 1). Floats keep 6 significant digits: short override text,
 * and the sweep's record shows what the trial ran. */
static void value_at(const dt_sweep_param *p, double u, char *out) {
    int n;
    double x;
    switch (p->kind) {
    case DT_SWEEP_VALUES:
    case DT_SWEEP_CHOICE:
        n = (int)(u * p->n_values);
        snprintf(out, DT_SWEEP_VAL, "%s", p->values[n < p->n_values ? n : p->n_values - 1]);
        return;
    case DT_SWEEP_INT:
        x = p->lo + floor(u * (p->hi - p->lo + 1));
        snprintf(out, DT_SWEEP_VAL, "%.0f", x > p->hi ? p->hi : x);
        return;
    case DT_SWEEP_LOG:
        x = exp(log(p->lo) + u * (log(p->hi) - log(p->lo)));
        break;
    default:
        x = p->lo + u * (p->hi - p->lo);
        break;
    }
    if (x < p->lo) x = p->lo;
    if (x > p->hi) x = p->hi;
    snprintf(out, DT_SWEEP_VAL, "%.6g", x);
}

/* Whether parameter i applies to a trial whose earlier parameters are in t. */
static int active(const dt_sweep_param *p, const dt_sweep_trial *t) {
    if (!p->when_key[0]) return 1;
    for (int j = 0; j < t->n; j++)
        if (!strcmp(t->key[j], p->when_key)) return !strcmp(t->value[j], p->when_value);
    return 0; /* the parameter it depends on is itself inactive */
}

static void add(dt_sweep_trial *t, const char *key, const char *value) {
    snprintf(t->key[t->n], DT_SWEEP_KEY, "%s", key);
    snprintf(t->value[t->n], DT_SWEEP_VAL, "%s", value);
    t->n++;
}

/* Depth-first over the parameters: the first varies slowest (as itertools.product). */
static void grid(const dt_sweep_spec *s, int i, dt_sweep_trial *cur, dt_sweep_trial *out, int *n,
                 int cap) {
    if (*n >= cap) return;
    if (i == s->n_params) {
        out[(*n)++] = *cur;
        return;
    }
    const dt_sweep_param *p = &s->params[i];
    if (!active(p, cur)) {
        grid(s, i + 1, cur, out, n, cap);
        return;
    }
    for (int k = 0; k < p->n_values; k++) {
        add(cur, p->key, p->values[k]);
        grid(s, i + 1, cur, out, n, cap);
        cur->n--;
    }
}

/* A uniform draw in [0, 1) (53 random bits) for counter (a, b, tag) under the sweep's seed: a
 * value depends only on its own counter, not on how many draws come before or after it. */
static double unit(uint64_t seed, uint32_t a, uint32_t b, uint32_t tag) {
    uint32_t ctr[4] = {a, b, tag, 0}, r[4];
    dt_philox4x32(seed, ctr, r);
    return ((double)(r[0] >> 5) * 67108864.0 + (double)(r[1] >> 6)) / 9007199254740992.0;
}

/* Fisher-Yates from the end: position i swaps with j uniform in [0, i]. Why shuffle a grid:
 * asynchronous early stopping judges a trial against those that reached its rung before it, so
 * a grid in order (first parameter slowest) lets the first block of one value of that parameter
 * set the rungs' bars and be promoted on little evidence; ASHA (Li et al. 2020) draws its
 * trials at random. */
static void shuffle(uint64_t seed, dt_sweep_trial *t, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(unit(seed, (uint32_t)i, 0, 0x53485546u) * (double)(i + 1));
        if (j > i) j = i;
        dt_sweep_trial x = t[i];
        t[i] = t[j], t[j] = x;
    }
}

static int64_t grid_size(const dt_sweep_spec *s) {
    /* an upper bound (conditional parameters counted as if always crossed) */
    int64_t n = 1;
    for (int i = 0; i < s->n_params && n <= DT_SWEEP_MAX_TRIALS; i++) n *= s->params[i].n_values;
    return n;
}

dt_status dt_sweep_sample(const dt_sweep_spec *s, dt_sweep_trial **out, int *n) {
    *out = NULL, *n = 0;
    int cap = s->trials ? s->trials : DT_SWEEP_MAX_TRIALS;
    int whole = s->sampler == DT_SWEEP_GRID && (!s->trials || s->shuffle); /* all enumerated */
    if (whole) cap = DT_SWEEP_MAX_TRIALS;
    if (whole && grid_size(s) > DT_SWEEP_MAX_TRIALS) {
        /* count exactly before refusing: conditions may make it smaller */
        dt_sweep_trial *probe = malloc(sizeof *probe * (DT_SWEEP_MAX_TRIALS + 1)), cur = {0};
        int m = 0;
        if (!probe) return dt_error_set(DT_ERR_NOMEM, "sweep: out of memory");
        grid(s, 0, &cur, probe, &m, DT_SWEEP_MAX_TRIALS + 1);
        free(probe);
        if (m > DT_SWEEP_MAX_TRIALS)
            return dt_error_set(DT_ERR_RANGE, "%s: the grid has more than %d trials (%s)", s->path,
                                DT_SWEEP_MAX_TRIALS,
                                s->shuffle ? "shuffle enumerates it whole" : "set trials");
    }
    dt_sweep_trial *t = calloc((size_t)cap, sizeof *t);
    if (!t) return dt_error_set(DT_ERR_NOMEM, "sweep: out of memory for %d trials", cap);
    if (s->sampler == DT_SWEEP_GRID) {
        dt_sweep_trial cur = {0};
        grid(s, 0, &cur, t, n, cap);
        if (s->shuffle) shuffle(s->seed, t, *n);
        if (s->trials && *n > s->trials) *n = s->trials;
        *out = t;
        return DT_OK;
    }
    for (int i = 0; i < cap; i++) {
        double u[DT_SWEEP_MAX_PARAMS];
        if (s->sampler == DT_SWEEP_SOBOL) {
            dt_sobol_point((uint32_t)i + 1, s->n_params, u);
        } else {
            /* counter (trial, parameter): a trial's values do not depend on how many trials
             * or parameters come after it */
            for (int d = 0; d < s->n_params; d++)
                u[d] = unit(s->seed, (uint32_t)i, (uint32_t)d, 0x53574545u);
        }
        char v[DT_SWEEP_VAL];
        for (int d = 0; d < s->n_params; d++) {
            if (!active(&s->params[d], &t[i])) continue;
            value_at(&s->params[d], u[d], v);
            add(&t[i], s->params[d].key, v);
        }
    }
    *n = cap;
    *out = t;
    return DT_OK;
}
