/* Softmax over the last dim, and cross-entropy with softmax fused in (log-softmax never
 * materialised), forward and backward, f32.
 *
 * Cross-entropy follows torch.nn.functional.cross_entropy(reduction='mean', label_smoothing=ls,
 * ignore_index=ii) with classes in the last dim. Per non-ignored row i with target t:
 *   loss_i = (1 - ls) * (lse_i - x_it) + ls / C * sum_c (lse_i - x_ic)
 *          = lse_i - (1 - ls) * x_it - ls / C * sum_c x_ic,      lse_i = log sum_c e^x_ic
 * and the loss is sum_i loss_i / (number of non-ignored rows): PyTorch divides both the NLL
 * and the smoothing term by that count, and ignored rows add nothing to either. With every row
 * ignored that is 0/0 = NaN, and the gradient is zero (both as in PyTorch).
 * Forward saves lse [N] (and the count) in aux; backward recomputes
 *   d loss / d x_ic = g / n_valid * (e^(x_ic - lse_i) - ls / C - (1 - ls) [c == t])
 * from the logits, which it keeps alive: a probability tensor would cost as much memory and
 * one more full write in forward.
 *
 * Per-row losses go to ws and are summed in row order in double, so the loss does not depend
 * on the number of threads. */
#include <math.h>
#include <string.h>
#include "dtrain/ops_nn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

/* See activation.c: lets GCC if-convert the selects in dt_vexpf so the loops vectorise. */
#if defined(__GNUC__) && !defined(__clang__) /* clang if-converts these anyway */
#pragma GCC optimize("no-trapping-math")
#endif

#include "ops/vmath.h"

#define SM_PAR_MIN 16384 /* elements below which a parallel region costs more than it saves */

/* max_c x[c]; x [C]. -inf for an all -inf row (softmax is then NaN, as in PyTorch). Eight
 * running maxima in a fixed-size inner loop: both GCC and clang turn it into one vector max
 * per 8 elements (neither vectorises a `reduction(max)` over a select without fast-math). */
static inline float sm_row_max(const float *x, int64_t C) {
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                   -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
        for (int k = 0; k < 8; k++) m8[k] = x[c + k] > m8[k] ? x[c + k] : m8[k];
    float m = -INFINITY;
    for (int k = 0; k < 8; k++) m = m8[k] > m ? m8[k] : m;
    for (; c < C; c++) m = x[c] > m ? x[c] : m;
    return m;
}

/* ---------------------------------------------------------------- softmax kernels */

/* x, y [rows, C]. y = e^(x - max) / sum. */
static void softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t C) {
#pragma omp parallel for if (rows * C > SM_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        const float m = sm_row_max(xr, C);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++) {
            yr[c] = dt_vexpf(xr[c] - m);
            s += yr[c];
        }
        const float inv = 1.0f / s;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) yr[c] *= inv;
    }
}

/* gout, y, gin [rows, C]. gin = y * (gout - sum_c gout * y). */
static void softmax_backward_f32(float *gin, float beta, const float *gout, const float *y,
                                 int64_t rows, int64_t C) {
#pragma omp parallel for if (rows * C > SM_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = gout + r * C, *yr = y + r * C;
        float *dr = gin + r * C;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; c++) dot += gr[c] * yr[c];
        if (beta == 0.0f) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) dr[c] = yr[c] * (gr[c] - dot);
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) dr[c] += yr[c] * (gr[c] - dot);
        }
    }
}

/* ---------------------------------------------------------------- cross-entropy kernels */

/* Target of row i as int64, from a DT_I32 or DT_I64 buffer. */
static inline int64_t ce_target(const void *t, int is64, int64_t i) {
    return is64 ? ((const int64_t *)t)[i] : (int64_t)((const int32_t *)t)[i];
}

/* Checks every target (serially: the error must be set on the calling thread); returns the
 * number of non-ignored rows, or -1 with DT_ERR_RANGE set. */
static int64_t ce_check_targets(const void *t, int is64, int64_t N, int64_t C, int64_t ignore) {
    int64_t valid = 0;
    for (int64_t i = 0; i < N; i++) {
        const int64_t v = ce_target(t, is64, i);
        if (v == ignore) continue;
        if (v < 0 || v >= C) {
            dt_error_set(DT_ERR_RANGE,
                         "cross_entropy: target %lld at position %lld outside [0, %lld) "
                         "(ignore_index %lld)",
                         (long long)v, (long long)i, (long long)C, (long long)ignore);
            return -1;
        }
        valid++;
    }
    return valid;
}

/* logits [N, C]; targets [N] (checked); lse [N] out (saved); row_loss [N] out (0 if ignored). */
static void ce_forward_rows_f32(float *lse, float *row_loss, const float *logits, const void *t,
                                int is64, int64_t N, int64_t C, int64_t ignore, float ls) {
    const float w_t = 1.0f - ls, w_all = ls / (float)C;
#pragma omp parallel for if (N * C > SM_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float *xr = logits + i * C;
        const float m = sm_row_max(xr, C);
        /* sum_c x_c (for label smoothing) rides along in the exp pass: one add per element. */
        float s = 0.0f, sx = 0.0f;
#pragma omp simd reduction(+ : s, sx)
        for (int64_t c = 0; c < C; c++) {
            s += dt_vexpf(xr[c] - m);
            sx += xr[c];
        }
        const float l = m + logf(s);
        lse[i] = l;
        const int64_t tg = ce_target(t, is64, i);
        if (tg == ignore) {
            row_loss[i] = 0.0f;
            continue;
        }
        row_loss[i] = l - w_t * xr[tg] - w_all * sx;
    }
}

/* dlogits [N, C] (beta); logits [N, C]; targets [N]; lse [N]; g = gout / n_valid. Ignored rows
 * contribute zero. */
static void ce_backward_f32(float *dx, float beta, const float *logits, const void *t, int is64,
                            const float *lse, int64_t N, int64_t C, int64_t ignore, float ls,
                            float g) {
    const float gt = g * (1.0f - ls), ga = g * ls / (float)C;
#pragma omp parallel for if (N * C > SM_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float *xr = logits + i * C;
        float *dr = dx + i * C;
        const int64_t tg = ce_target(t, is64, i);
        if (tg == ignore) {
            if (beta == 0.0f) memset(dr, 0, (size_t)C * sizeof(float));
            continue;
        }
        const float l = lse[i];
        if (beta == 0.0f) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) dr[c] = g * dt_vexpf(xr[c] - l) - ga;
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) dr[c] += g * dt_vexpf(xr[c] - l) - ga;
        }
        dr[tg] -= gt;
    }
}

/* ---------------------------------------------------------------- op glue */

static int64_t last_dim(const dt_tensor *t) {
    return t->shape[t->ndim - 1];
}
static int64_t rows_of(const dt_tensor *t) {
    const int64_t C = last_dim(t);
    return C ? dt_tensor_numel(t) / C : 0;
}

static dt_status softmax_forward(const dt_op_ctx *c) {
    softmax_forward_f32(c->out.data, c->in[0].data, rows_of(&c->out), last_dim(&c->out));
    return DT_OK;
}
static dt_status softmax_backward(const dt_op_ctx *c) {
    if (c->gin[0].data)
        softmax_backward_f32(c->gin[0].data, c->gin_beta[0], c->gout.data, c->out.data,
                             rows_of(&c->out), last_dim(&c->out));
    return DT_OK;
}
static const dt_op_def softmax_def = {
    .name = "softmax",
    .flags = DT_OPF_BWD_OUT,
    .forward = softmax_forward,
    .backward = softmax_backward,
};

/* aux layout: lse [N] floats, padded to 8 bytes, then the valid-row count (int64). */
static size_t ce_count_offset(int64_t N) {
    return ((size_t)N * sizeof(float) + 7) & ~(size_t)7;
}

/* Node params: ip[0] = ignore_index, fp[0] = label_smoothing. in[0] logits, in[1] targets. */
static dt_status ce_prepare(dt_graph *g, dt_node *n) {
    const dt_node *lg = dt_graph_node(g, n->in[0]);
    const int64_t N = rows_of(&lg->t);
    n->aux_bytes = ce_count_offset(N) + sizeof(int64_t);
    n->ws_fwd = (size_t)N * sizeof(float); /* per-row losses */
    return DT_OK;
}

static dt_status ce_forward(const dt_op_ctx *c) {
    const dt_tensor *x = &c->in[0], *t = &c->in[1];
    const int64_t N = rows_of(x), C = last_dim(x), ignore = c->node->ip[0];
    const int is64 = t->dtype == DT_I64;
    const int64_t valid = ce_check_targets(t->data, is64, N, C, ignore);
    if (valid < 0) return DT_ERR_RANGE;
    float *lse = c->aux, *row_loss = c->ws;
    ce_forward_rows_f32(lse, row_loss, x->data, t->data, is64, N, C, ignore, c->node->fp[0]);
    double sum = 0.0;
    for (int64_t i = 0; i < N; i++) sum += row_loss[i];
    memcpy((char *)c->aux + ce_count_offset(N), &valid, sizeof valid);
    *(float *)c->out.data = valid ? (float)(sum / (double)valid) : NAN;
    return DT_OK;
}

static dt_status ce_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const dt_tensor *x = &c->in[0], *t = &c->in[1];
    const int64_t N = rows_of(x), C = last_dim(x);
    int64_t valid;
    memcpy(&valid, (const char *)c->aux + ce_count_offset(N), sizeof valid);
    /* No valid rows: PyTorch's gradient is zero (not NaN); g = 0 with every row skipped. */
    const float g = valid ? *(const float *)c->gout.data / (float)valid : 0.0f;
    ce_backward_f32(c->gin[0].data, c->gin_beta[0], x->data, t->data, t->dtype == DT_I64, c->aux, N,
                    C, c->node->ip[0], c->node->fp[0], g);
    return DT_OK;
}

static const dt_op_def ce_def = {
    .name = "cross_entropy",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .prepare = ce_prepare,
    .forward = ce_forward,
    .backward = ce_backward,
    DT_CUDA_OP_ENTRIES(ce),
    .cuda_check_at = dt_ce_cuda_check_at,
    .cuda_check = dt_ce_cuda_check,
};

/* ---------------------------------------------------------------- builders */

int dt_softmax(dt_graph *g, int x) {
    if (dt_ids_bad(g, "softmax", 1, &x)) return -1;
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    if (dt_x_f32_check("softmax", xt)) return -1;
    if (xt->ndim < 1 || last_dim(xt) < 1)
        return dt_shape_error("softmax", "x needs at least one dim and a non-empty last dim", 1,
                              (const dt_tensor *[]){xt});
    return dt_node_add(g, &softmax_def, 1, &x, DT_F32, xt->ndim, xt->shape, NULL, 0, NULL, 0);
}

int dt_cross_entropy(dt_graph *g, int logits, int targets, float label_smoothing,
                     int64_t ignore_index) {
    const int ids[2] = {logits, targets};
    if (dt_ids_bad(g, "cross_entropy", 2, ids)) return -1;
    const dt_tensor *lt = &dt_graph_node(g, logits)->t, *tt = &dt_graph_node(g, targets)->t;
    const dt_tensor *both[2] = {lt, tt};
    char b0[64], b1[64];
    dt_shape_str(b0, sizeof b0, lt->ndim, lt->shape);
    dt_shape_str(b1, sizeof b1, tt->ndim, tt->shape);
    if (lt->dtype != DT_F32) {
        dt_error_set(DT_ERR_DTYPE,
                     "cross_entropy: logits must be f32, got %s (logits %s, targets %s)",
                     dt_dtype_name(lt->dtype), b0, b1);
        return -1;
    }
    if (tt->dtype != DT_I32 && tt->dtype != DT_I64) {
        dt_error_set(DT_ERR_DTYPE,
                     "cross_entropy: targets must be i32 or i64, got %s (logits %s, targets %s)",
                     dt_dtype_name(tt->dtype), b0, b1);
        return -1;
    }
    if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f)) {
        dt_error_set(DT_ERR_INVALID, "cross_entropy: label_smoothing must be in [0, 1], got %g",
                     label_smoothing);
        return -1;
    }
    if (lt->ndim < 1 || last_dim(lt) < 1)
        return dt_shape_error("cross_entropy", "logits must be [..., C] with C >= 1", 2, both);
    /* Targets: [N] or exactly logits' leading dims. */
    int ok = dt_tensor_numel(tt) == rows_of(lt) && (tt->ndim == 1 || tt->ndim == lt->ndim - 1);
    for (int d = 0; ok && tt->ndim == lt->ndim - 1 && d < tt->ndim; d++)
        ok = tt->shape[d] == lt->shape[d];
    if (!ok)
        return dt_shape_error("cross_entropy",
                              "targets must be [N] or logits' leading dims, logits [..., C]", 2,
                              both);
    const int64_t ip[1] = {ignore_index};
    return dt_node_add(g, &ce_def, 2, ids, DT_F32, 0, (const int64_t[]){1}, ip, 1,
                       (const float[]){label_smoothing}, 1);
}
