/* Token sampling over a logits row: greedy, or temperature + top-k + top-p (nucleus) in the
 * order of transformers' logits warpers, with the uniform draw from the counter-based Philox RNG
 * keyed by the seed and counted by the step, so (seed, logits) reproduce a token anywhere.
 *
 * work: cand [V] (scaled logit, id) pairs, then prob [V] doubles. */
#include <math.h>
#include <stdlib.h>
#include "dtrain/generate.h"
#include "dtrain/rng.h"

typedef struct cand {
    float z; /* logit / temperature */
    int32_t id;
} cand;

size_t dt_sample_work_bytes(int V) {
    return V > 0 ? (size_t)V * (sizeof(cand) + sizeof(double)) : 0;
}

/* Descending by scaled logit; ties by ascending id, so the order is total and deterministic. */
static int by_z_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->z != y->z) return x->z < y->z ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A double uniform in [0, 1) with 53 random bits from Philox(seed; step, "samp"). */
static double uniform(uint64_t seed, uint64_t step) {
    uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0x73616d70u, 0}, r[4];
    dt_philox4x32(seed, ctr, r);
    return ((double)(r[0] >> 5) * 67108864.0 + (double)(r[1] >> 6)) * (1.0 / 9007199254740992.0);
}

dt_status dt_sample_token(const float *logits, int V, const dt_sample_opts *o, uint64_t step,
                          void *work, int32_t *token) {
    if (!logits || V < 1 || !token || !work)
        return dt_error_set(DT_ERR_INVALID,
                            "sample: logits, vocabulary size (%d), work and token "
                            "are required",
                            V);
    for (int i = 0; i < V; i++)
        if (isnan(logits[i])) return dt_error_set(DT_ERR_INVALID, "sample: logit %d is NaN", i);
    if (o && isnan(o->temperature))
        return dt_error_set(DT_ERR_INVALID, "sample: temperature is NaN");
    if (!o || o->temperature <= 0.0f) { /* greedy: the first maximum, as torch.argmax */
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        *token = best;
        return DT_OK;
    }
    if (!(o->top_p >= 0.0f) || o->top_k < 0 || !isfinite(o->temperature))
        return dt_error_set(DT_ERR_INVALID,
                            "sample: temperature %g, top_p %g, top_k %d (finite, >= 0, >= 0)",
                            (double)o->temperature, (double)o->top_p, o->top_k);
    cand *c = work;
    double *p = (double *)(c + V);
    for (int i = 0; i < V; i++) c[i].z = logits[i] / o->temperature, c[i].id = i;
    int n = V, use_k = o->top_k > 0 && o->top_k<V, use_p = o->top_p> 0.0f && o->top_p < 1.0f;
    if (use_k || use_p) qsort(c, (size_t)V, sizeof *c, by_z_desc);
    if (use_k) { /* keep scores >= the k-th largest (ties with it stay, as transformers) */
        n = o->top_k;
        while (n < V && c[n].z >= c[o->top_k - 1].z) n++;
    }
    float mx = c[0].z;
    for (int i = 1; i < n; i++) mx = fmaxf(mx, c[i].z);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (p[i] = exp((double)c[i].z - (double)mx));
    if (use_p) { /* keep a token while the mass of the more likely ones is below top_p */
        double cum = p[0] / sum, kept = p[0];
        int keep = 1;
        while (keep < n && cum < o->top_p) cum += p[keep] / sum, kept += p[keep], keep++;
        n = keep, sum = kept;
    }
    double u = uniform(o->seed, step) * sum, acc = 0.0;
    int pick = n - 1; /* rounding: the last candidate takes what is left */
    for (int i = 0; i < n; i++) {
        acc += p[i];
        if (u < acc) {
            pick = i;
            break;
        }
    }
    *token = c[pick].id;
    return DT_OK;
}
