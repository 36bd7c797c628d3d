/* SGD and AdamW over a slice of the flat parameter buffer.
 *
 * The optimizer owns the slice [lo, hi) of a flat buffer of n_total elements. Its parameter
 * groups are intersected with the slice at init into "segments": runs of local indices
 * [start, start + len) that share one weight decay and one lr scale. A step walks the segments
 * inside one OpenMP parallel region; each segment's loop is split statically over the threads,
 * and since every element is updated independently the result does not depend on the thread
 * count. The arithmetic follows torch.optim.SGD / AdamW (1.13, single-tensor path) operation
 * by operation: scalars that torch computes from Python floats are computed in double and cast
 * to f32 where torch casts them; tensor arithmetic is f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif
#include "dtrain/optim.h"
#include "optim/optim_impl.h"

/* Below this many elements a step runs on one thread: a parallel region costs more. */
#define OPTIM_PAR_MIN 32768

dt_optim_config dt_optim_config_default(dt_optim_kind kind) {
    dt_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    if (kind == DT_OPTIM_ADAMW) {
        c.weight_decay = 0.01;
        c.beta1 = 0.9;
        c.beta2 = 0.999;
        c.eps = 1e-8;
    }
    return c;
}

/* ---- kernels --------------------------------------------------------------------------- */
/* Each kernel updates one segment and is called inside a parallel region: its loop is an
 * orphaned worksharing loop (nowait: segments are disjoint, so no barrier between them). */

/* torch.optim.SGD:  d = g + wd * p;  buf = first ? d : momentum * buf + (1 - dampening) * d;
 *                   d = nesterov ? d + momentum * buf : buf;  p -= lr * d.
 * p, g, buf: [n] (buf unused when momentum == 0). */
static void sgd_segment(float *restrict p, const float *restrict g, float *restrict buf, size_t n,
                        float lr, float wd, float momentum, float dampening, int nesterov,
                        int first) {
    const float one_m_damp = 1.0f - dampening;
    if (momentum == 0.0f) {
#pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
    } else if (first) {
        /* torch creates the buffer as a copy of d at the first step (no dampening); then
         * nesterov's d + momentum * buf is d + momentum * d (kd = 0 leaves d exact). */
        const float kd = nesterov ? momentum : 0.0f;
#pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            buf[i] = d;
            p[i] -= lr * (d + kd * d);
        }
    } else if (nesterov) {
#pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float b = buf[i] * momentum + one_m_damp * d;
            buf[i] = b;
            p[i] -= lr * (d + momentum * b);
        }
    } else {
#pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float b = buf[i] * momentum + one_m_damp * d;
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

/* torch.optim.AdamW:  p *= 1 - lr * wd;  m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2;
 *                     p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * with step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t), computed by the caller.
 * p, g, m, v: [n]. The division is kept (not a multiply by a reciprocal) to round as torch.
 * GCC does not vectorise sqrtf unless the whole build has -fno-math-errno (the optimize
 * attribute and pragma do not do it), so the loop is written with AVX intrinsics; the last
 * partial block uses masked loads/stores so that every element gets the same arithmetic
 * whatever its position: a ZeRO shard then computes bit-for-bit what the full buffer would.
 * The scalar loop is for machines without AVX. */
#if defined(__AVX__)
typedef struct adamw_consts {
    __m256 decay, b1, one_m_b1, b2, one_m_b2, eps, step_size, bc2_sqrt;
} adamw_consts;

/* The update of 8 elements, in registers. */
static inline void adamw8(__m256 *p, __m256 *m, __m256 *v, __m256 g, const adamw_consts *k) {
    *m = _mm256_add_ps(_mm256_mul_ps(*m, k->b1), _mm256_mul_ps(k->one_m_b1, g));
    *v = _mm256_add_ps(_mm256_mul_ps(*v, k->b2), _mm256_mul_ps(_mm256_mul_ps(k->one_m_b2, g), g));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(*v), k->bc2_sqrt), k->eps);
    *p = _mm256_sub_ps(_mm256_mul_ps(*p, k->decay),
                       _mm256_mul_ps(k->step_size, _mm256_div_ps(*m, denom)));
}

static void adamw_segment(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t n, float decay, float b1, float one_m_b1,
                          float b2, float one_m_b2, float eps, float step_size, float bc2_sqrt) {
    static const int32_t mask_tbl[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const adamw_consts k = {_mm256_set1_ps(decay),     _mm256_set1_ps(b1),
                            _mm256_set1_ps(one_m_b1),  _mm256_set1_ps(b2),
                            _mm256_set1_ps(one_m_b2),  _mm256_set1_ps(eps),
                            _mm256_set1_ps(step_size), _mm256_set1_ps(bc2_sqrt)};
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; i += 8) {
        /* masked moves are slow on some CPUs (AMD): only the last partial block uses them */
        if (i + 8 <= n) {
            __m256 mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
            __m256 pi = _mm256_loadu_ps(p + i);
            adamw8(&pi, &mi, &vi, _mm256_loadu_ps(g + i), &k);
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
            _mm256_storeu_ps(p + i, pi);
        } else {
            __m256i mask = _mm256_loadu_si256((const __m256i *)(mask_tbl + 8 - (n - i)));
            __m256 mi = _mm256_maskload_ps(m + i, mask), vi = _mm256_maskload_ps(v + i, mask);
            __m256 pi = _mm256_maskload_ps(p + i, mask);
            adamw8(&pi, &mi, &vi, _mm256_maskload_ps(g + i, mask), &k);
            _mm256_maskstore_ps(m + i, mask, mi);
            _mm256_maskstore_ps(v + i, mask, vi);
            _mm256_maskstore_ps(p + i, mask, pi);
        }
    }
}
#else
static void adamw_segment(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t n, float decay, float b1, float one_m_b1,
                          float b2, float one_m_b2, float eps, float step_size, float bc2_sqrt) {
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = m[i] * b1 + one_m_b1 * gi;
        float vi = v[i] * b2 + one_m_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * (mi / denom);
    }
}
#endif

/* ---- groups ---------------------------------------------------------------------------- */

dt_status dt_optim_groups_from_graph(const dt_graph *g, dt_optim_group *groups, int cap,
                                     int *n_groups) {
    if (!g || !n_groups) return dt_error_set(DT_ERR_INVALID, "optim groups: NULL graph or count");
    int np = dt_graph_param_count(g), n = 0;
    dt_optim_group cur = {0, 0, 0, 0};
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!pi || (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) || pi->numel == 0) continue;
        float wd = (pi->flags & DT_PARAM_NO_DECAY) ? 0.0f : 1.0f;
        if (n > 0 && cur.wd_scale == wd && cur.offset + cur.numel == pi->offset) {
            cur.numel += pi->numel; /* merge with the previous group */
        } else {
            if (n > 0 && groups) groups[n - 1] = cur;
            if (groups && n >= cap)
                return dt_error_set(DT_ERR_INVALID,
                                    "optim groups: capacity %d too small for graph with %d "
                                    "params (pass cap >= dt_graph_param_count)",
                                    cap, np);
            cur = (dt_optim_group){pi->offset, pi->numel, wd, 1.0f};
            n++;
        }
    }
    if (n > 0 && groups) groups[n - 1] = cur;
    *n_groups = n;
    return DT_OK;
}

/* ---- life cycle ------------------------------------------------------------------------ */

static dt_status check_config(const dt_optim_config *c) {
    if (c->kind != DT_OPTIM_SGD && c->kind != DT_OPTIM_ADAMW)
        return dt_error_set(DT_ERR_INVALID, "optim: unknown kind %d", (int)c->kind);
    const char *k = c->kind == DT_OPTIM_SGD ? "sgd" : "adamw";
    if (!(c->weight_decay >= 0 && isfinite(c->weight_decay)))
        return dt_error_set(DT_ERR_INVALID, "optim %s: weight_decay %g must be >= 0", k,
                            c->weight_decay);
    if (c->kind == DT_OPTIM_SGD) {
        if (!(c->momentum >= 0 && isfinite(c->momentum)))
            return dt_error_set(DT_ERR_INVALID, "optim sgd: momentum %g must be >= 0", c->momentum);
        if (!isfinite(c->dampening))
            return dt_error_set(DT_ERR_INVALID, "optim sgd: dampening %g is not finite",
                                c->dampening);
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return dt_error_set(DT_ERR_INVALID,
                                "optim sgd: nesterov needs momentum > 0 and dampening 0 "
                                "(momentum %g, dampening %g)",
                                c->momentum, c->dampening);
    } else {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return dt_error_set(DT_ERR_INVALID, "optim adamw: beta1 %g must be in [0, 1)",
                                c->beta1);
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return dt_error_set(DT_ERR_INVALID, "optim adamw: beta2 %g must be in [0, 1)",
                                c->beta2);
        if (!(c->eps >= 0 && isfinite(c->eps)))
            return dt_error_set(DT_ERR_INVALID, "optim adamw: eps %g must be >= 0", c->eps);
    }
    return DT_OK;
}

/* Intersects the groups with [lo, hi) into o->seg (local indices), merging neighbours that
 * share their settings. */
static dt_status build_segments(dt_optim *o, const dt_optim_group *groups, int n_groups) {
    dt_optim_group all = {0, o->n_total, 1.0f, 1.0f};
    if (!groups || n_groups == 0) {
        groups = &all;
        n_groups = 1;
    }
    size_t prev_end = 0;
    for (int i = 0; i < n_groups; i++) {
        const dt_optim_group *gr = &groups[i];
        if (gr->offset > o->n_total || gr->numel > o->n_total - gr->offset)
            return dt_error_set(DT_ERR_RANGE,
                                "optim: group %d [%zu, %zu) outside the flat buffer of %zu", i,
                                gr->offset, gr->offset + gr->numel, o->n_total);
        if (gr->offset < prev_end)
            return dt_error_set(DT_ERR_INVALID,
                                "optim: group %d at offset %zu overlaps or precedes group %d "
                                "(ends at %zu); groups must be sorted and disjoint",
                                i, gr->offset, i - 1, prev_end);
        if (!(gr->wd_scale >= 0 && isfinite(gr->wd_scale)) ||
            !(gr->lr_scale >= 0 && isfinite(gr->lr_scale)))
            return dt_error_set(DT_ERR_INVALID,
                                "optim: group %d has wd_scale %g, lr_scale %g (must be >= 0)", i,
                                gr->wd_scale, gr->lr_scale);
        prev_end = gr->offset + gr->numel;
    }
    o->seg = malloc((size_t)n_groups * sizeof *o->seg);
    if (!o->seg) return dt_error_set(DT_ERR_NOMEM, "optim: no memory for %d groups", n_groups);
    o->n_seg = 0;
    for (int i = 0; i < n_groups; i++) {
        size_t a = groups[i].offset, b = groups[i].offset + groups[i].numel;
        if (a < o->lo) a = o->lo;
        if (b > o->hi) b = o->hi;
        if (a >= b) continue;
        optim_seg s = {a - o->lo, b - a, o->cfg.weight_decay * groups[i].wd_scale,
                       groups[i].lr_scale};
        optim_seg *last = o->n_seg > 0 ? &o->seg[o->n_seg - 1] : NULL;
        if (last && last->start + last->len == s.start && last->wd == s.wd &&
            last->lr_scale == s.lr_scale)
            last->len += s.len;
        else
            o->seg[o->n_seg++] = s;
    }
    return DT_OK;
}

dt_status dt_optim_init(const dt_optim_config *cfg, size_t n_total, size_t lo, size_t hi,
                        const dt_optim_group *groups, int n_groups, dt_optim **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "optim init: NULL output");
    *out = NULL;
    if (!cfg) return dt_error_set(DT_ERR_INVALID, "optim init: NULL config");
    dt_status st = check_config(cfg);
    if (st != DT_OK) return st;
    if (lo > hi || hi > n_total)
        return dt_error_set(DT_ERR_RANGE, "optim init: slice [%zu, %zu) not within [0, %zu)", lo,
                            hi, n_total);
    if (n_groups < 0 || (n_groups > 0 && !groups))
        return dt_error_set(DT_ERR_INVALID, "optim init: %d groups given as %p", n_groups,
                            (const void *)groups);
    dt_optim *o = calloc(1, sizeof *o);
    if (!o) return dt_error_set(DT_ERR_NOMEM, "optim init: no memory");
    o->cfg = *cfg;
    o->n_total = n_total;
    o->lo = lo;
    o->hi = hi;
    st = build_segments(o, groups, n_groups);
    if (st != DT_OK) {
        dt_optim_free(o);
        return st;
    }
    o->n_buf = cfg->kind == DT_OPTIM_ADAMW ? 2 : (cfg->momentum != 0 ? 1 : 0);
    size_t n = hi - lo, bytes = (n * sizeof(float) + 63) / 64 * 64;
    for (int b = 0; b < o->n_buf && n > 0; b++) {
        o->buf[b] = aligned_alloc(64, bytes);
        if (!o->buf[b]) {
            dt_optim_free(o);
            return dt_error_set(DT_ERR_NOMEM, "optim init: no memory for %zu-element moments", n);
        }
        /* zeroing also touches every page now rather than in the first step */
        memset(o->buf[b], 0, bytes);
    }
    *out = o;
    return DT_OK;
}

void dt_optim_free(dt_optim *opt) {
    if (!opt) return;
    for (int b = 0; b < DT_OPTIM_MAX_BUFFERS; b++) free(opt->buf[b]);
    free(opt->seg);
    free(opt);
}

/* ---- step ------------------------------------------------------------------------------ */

dt_status dt_optim_step(dt_optim *opt, float *params, const float *grads, float lr) {
    if (!opt) return dt_error_set(DT_ERR_INVALID, "optim step: NULL optimizer");
    size_t n = opt->hi - opt->lo;
    if (n > 0 && (!params || !grads))
        return dt_error_set(DT_ERR_INVALID, "optim step: NULL params or grads");
    if (!(lr >= 0 && isfinite(lr)))
        return dt_error_set(DT_ERR_INVALID, "optim step: learning rate %g must be >= 0", lr);
    const dt_optim_config *c = &opt->cfg;
    int64_t t = ++opt->step; /* torch increments the step before using it */
    /* AdamW's bias corrections, in double as torch computes them from Python floats */
    double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    float bc2_sqrt = (float)sqrt(bc2);
    float b1 = (float)c->beta1, b2 = (float)c->beta2;
    float one_m_b1 = (float)(1.0 - c->beta1), one_m_b2 = (float)(1.0 - c->beta2);
#pragma omp parallel if (n >= OPTIM_PAR_MIN)
    for (int s = 0; s < opt->n_seg; s++) {
        const optim_seg *sg = &opt->seg[s];
        double lr_s = (double)lr * sg->lr_scale;
        float *p = params + sg->start;
        const float *g = grads + sg->start;
        if (c->kind == DT_OPTIM_SGD) {
            float *buf = opt->n_buf ? opt->buf[0] + sg->start : NULL;
            sgd_segment(p, g, buf, sg->len, (float)lr_s, (float)sg->wd, (float)c->momentum,
                        (float)c->dampening, c->nesterov, t == 1);
        } else {
            adamw_segment(p, g, opt->buf[0] + sg->start, opt->buf[1] + sg->start, sg->len,
                          (float)(1.0 - lr_s * sg->wd), b1, one_m_b1, b2, one_m_b2, (float)c->eps,
                          (float)(lr_s / bc1), bc2_sqrt);
        }
    }
    return DT_OK;
}

/* ---- state ----------------------------------------------------------------------------- */

dt_status dt_optim_get_state(dt_optim *opt, dt_optim_state *st) {
    if (!opt || !st) return dt_error_set(DT_ERR_INVALID, "optim state: NULL argument");
    memset(st, 0, sizeof *st);
    st->kind = opt->cfg.kind;
    st->step = opt->step;
    st->n_total = opt->n_total;
    st->lo = opt->lo;
    st->hi = opt->hi;
    st->n_buffers = opt->n_buf;
    if (opt->cfg.kind == DT_OPTIM_ADAMW) {
        st->names[0] = "exp_avg";
        st->names[1] = "exp_avg_sq";
    } else if (opt->n_buf) {
        st->names[0] = "momentum_buffer";
    }
    for (int b = 0; b < opt->n_buf; b++) st->buffers[b] = opt->buf[b];
    return DT_OK;
}

dt_status dt_optim_set_step(dt_optim *opt, int64_t step) {
    if (!opt) return dt_error_set(DT_ERR_INVALID, "optim set_step: NULL optimizer");
    if (step < 0) return dt_error_set(DT_ERR_INVALID, "optim set_step: step %ld < 0", (long)step);
    opt->step = step;
    return DT_OK;
}
