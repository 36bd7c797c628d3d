/* Early stopping (include/dtrain/sweep.h): ASHA with Ray Tune's AsyncHyperBandScheduler
 * semantics (one bracket), and the median stopping rule. Both see a trial's metric at the
 * steps the sweep makes it report at; bigger is better inside (a minimised metric is negated),
 * as Ray keeps `metric_op * value`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/sweep.h"

dt_status dt_asha_init(dt_asha *a, int64_t grace, int64_t max_t, int rf, int mode_max) {
    if (grace < 1 || max_t < grace || rf < 2)
        return dt_error_set(DT_ERR_INVALID,
                            "asha: grace_period %lld, max_t %lld, reduction_factor %d: need "
                            "1 <= grace_period <= max_t and reduction_factor >= 2",
                            (long long)grace, (long long)max_t, rf);
    memset(a, 0, sizeof *a);
    a->rf = rf, a->mode_max = mode_max, a->max_t = max_t;
    /* Ray: MAX_RUNGS = int(log(max_t / min_t) / log(rf) + 1), rungs min_t * rf^k */
    int n = (int)(log((double)max_t / (double)grace) / log((double)rf) + 1);
    if (n > DT_SWEEP_MAX_RUNGS) n = DT_SWEEP_MAX_RUNGS;
    int64_t r = grace;
    for (int k = 0; k < n; k++, r *= rf) a->rung[k] = r;
    a->n_rungs = n;
    return DT_OK;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* numpy.nanpercentile(v, q) with linear interpolation, as numpy computes it: the index
 * (q / 100) * (n - 1), and its lerp that subtracts from the upper end past the middle. */
static double percentile(const double *v, int n, double q) {
    double *s = malloc(sizeof *s * (size_t)n);
    if (!s) return NAN;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i])) s[m++] = v[i];
    if (!m) return free(s), NAN;
    qsort(s, (size_t)m, sizeof *s, cmp_double);
    double idx = (q / 100.0) * (double)(m - 1), lo = floor(idx), t = idx - lo;
    int i = (int)lo, j = i + 1 < m ? i + 1 : i;
    double a = s[i], b = s[j], d = b - a;
    double r = t >= 0.5 ? b - d * (1.0 - t) : a + d * t;
    free(s);
    return r;
}

int dt_asha_on_result(dt_asha *a, int trial, int64_t step, double metric) {
    if (step >= a->max_t) return 0; /* Ray's stop_last_trials: done */
    double v = a->mode_max ? metric : -metric;
    /* the highest rung the step reached; Ray walks the rungs from the top and decides at the
     * first one passed that has no record of the trial, or stops looking at one that has */
    for (int k = a->n_rungs - 1; k >= 0; k--) {
        if (step < a->rung[k]) continue;
        for (int i = 0; i < a->n_rec[k]; i++)
            if (a->rec_trial[k][i] == trial) return 1;
        int keep = 1;
        if (a->n_rec[k] > 0) {
            double cut = percentile(a->rec_val[k], a->n_rec[k], (1.0 - 1.0 / a->rf) * 100.0);
            if (v < cut) keep = 0;
        }
        if (!isnan(v) && a->n_rec[k] < DT_SWEEP_MAX_TRIALS) {
            a->rec_trial[k][a->n_rec[k]] = trial;
            a->rec_val[k][a->n_rec[k]++] = v;
        }
        return keep;
    }
    return 1;
}

int64_t dt_asha_next(const dt_asha *a, int64_t step) {
    for (int k = 0; k < a->n_rungs; k++)
        if (a->rung[k] > step && a->rung[k] < a->max_t) return a->rung[k];
    return a->max_t;
}

dt_status dt_median_init(dt_median *m, int64_t grace, int min_samples, int mode_max) {
    memset(m, 0, sizeof *m);
    m->grace = grace, m->min_samples = min_samples, m->mode_max = mode_max;
    return DT_OK;
}

/* Mean of trial i's values reported at steps <= t, and whether it reported at or past t. */
static int running_mean(const dt_median *m, int i, int64_t t, double *mean) {
    double sum = 0;
    int n = 0, reached = 0;
    for (int k = 0; k < m->n_rep[i]; k++) {
        if (m->step[i][k] >= t) reached = 1;
        if (m->step[i][k] <= t) sum += m->val[i][k], n++;
    }
    if (!reached || !n) return 0;
    *mean = sum / n;
    return 1;
}

int dt_median_on_result(dt_median *m, int trial, int64_t step, double metric) {
    if (trial < 0 || trial >= DT_SWEEP_MAX_TRIALS) return 1;
    double v = m->mode_max ? metric : -metric;
    int k = m->n_rep[trial];
    int64_t *ns = realloc(m->step[trial], sizeof *ns * (size_t)(k + 1));
    if (ns) m->step[trial] = ns;
    double *nv = realloc(m->val[trial], sizeof *nv * (size_t)(k + 1));
    if (nv) m->val[trial] = nv;
    if (!ns || !nv) return 1;
    ns[k] = step, nv[k] = v, m->n_rep[trial] = k + 1;
    if (trial >= m->n_trials) m->n_trials = trial + 1;
    if (step < m->grace) return 1;
    double best = -INFINITY;
    for (int i = 0; i <= k; i++)
        if (nv[i] > best) best = nv[i];
    double means[DT_SWEEP_MAX_TRIALS];
    int n = 0;
    for (int i = 0; i < m->n_trials; i++)
        if (i != trial && running_mean(m, i, step, &means[n])) n++;
    if (n < m->min_samples) return 1;
    return !(best < percentile(means, n, 50.0));
}

void dt_median_free(dt_median *m) {
    for (int i = 0; i < m->n_trials; i++) free(m->step[i]), free(m->val[i]);
    memset(m, 0, sizeof *m);
}
