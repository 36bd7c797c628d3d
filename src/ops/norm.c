/* Normalisation over the last dim: LayerNorm (PyTorch nn.LayerNorm) and RMSNorm (Hugging Face
 * LlamaRMSNorm), forward and backward, f32.
 *
 * Rows are independent, so forward and the input gradient run OpenMP-parallel over rows. The
 * weight/bias gradients are sums over all rows: each of a fixed number of row blocks (NB, chosen
 * at prepare time, independent of the thread count) sums its rows into its own partial vector in
 * ws, and a second pass adds the partials in block order. That keeps results bit-identical for
 * any number of threads, and needs no atomics. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "dtrain/ops_nn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

#define NORM_PAR_MIN 16384 /* elements below which a parallel region costs more than it saves */
#define NORM_MAX_BLOCKS 32 /* row blocks for the parameter-gradient reduction */

/* Number of row blocks for the parameter-gradient partial sums. */
static int64_t norm_blocks(int64_t rows) {
    return rows < NORM_MAX_BLOCKS ? rows : NORM_MAX_BLOCKS;
}

/* dst [D] = beta * dst + sum_b part[b * stride + d], blocks added in order b = 0, 1, ...
 * beta 0 never reads dst (it may hold garbage). Parallel over chunks of D. */
static void norm_reduce_partials(float *dst, const float *part, int64_t nb, int64_t stride,
                                 int64_t D, float beta) {
    const int64_t CH = 1024;
#pragma omp parallel for if (nb * D > NORM_PAR_MIN) schedule(static)
    for (int64_t d0 = 0; d0 < D; d0 += CH) {
        const int64_t d1 = d0 + CH < D ? d0 + CH : D;
        if (beta == 0.0f) memset(dst + d0, 0, (size_t)(d1 - d0) * sizeof(float));
        for (int64_t b = 0; b < nb; b++) {
            const float *pb = part + b * stride;
#pragma omp simd
            for (int64_t d = d0; d < d1; d++) dst[d] += pb[d];
        }
    }
}

/* dst [D] = (beta ? dst + v : v); beta 0 never reads dst. */
static void norm_store_row(float *dst, const float *v, int64_t D, float beta) {
    if (beta == 0.0f) {
        memcpy(dst, v, (size_t)D * sizeof(float));
    } else {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) dst[d] += v[d];
    }
}

/* t [D] = gout * w, or gout when w is NULL. */
static void norm_gw_row(float *t, const float *g, const float *w, int64_t D) {
    if (w) {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) t[d] = g[d] * w[d];
    } else {
        memcpy(t, g, (size_t)D * sizeof(float));
    }
}

/* ---------------------------------------------------------------- LayerNorm kernels */

/* x, y [rows, D]; w, b [D] or NULL; mean, rstd [rows] (saved for backward). */
static void layernorm_forward_f32(float *y, float *mean, float *rstd, const float *x,
                                  const float *w, const float *b, int64_t rows, int64_t D,
                                  float eps) {
    const float invD = 1.0f / (float)D;
#pragma omp parallel for if (rows * D > NORM_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *yr = y + r * D;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < D; d++) s += xr[d];
        const float m = s * invD;
        /* Two passes (mean, then squared deviations) avoid the cancellation of E[x^2]-m^2. */
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int64_t d = 0; d < D; d++) {
            const float t = xr[d] - m;
            v += t * t;
        }
        const float rs = 1.0f / sqrtf(v * invD + eps);
        mean[r] = m;
        rstd[r] = rs;
#pragma omp simd
        for (int64_t d = 0; d < D; d++) yr[d] = (xr[d] - m) * rs;
        if (w) {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) yr[d] *= w[d];
        }
        if (b) {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) yr[d] += b[d];
        }
    }
}

/* gout, x [rows, D]; w [D] or NULL; mean, rstd [rows]; dx [rows, D] or NULL (beta bx);
 * part [nb, 3, D] scratch: per block, partial sums of gout * xhat (dw) and gout (db), and a row
 * buffer. With xhat = (x - mean) * rstd and gw = gout * w:
 *   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)). */
static void layernorm_backward_f32(float *dx, float bx, float *part, const float *gout,
                                   const float *x, const float *w, const float *mean,
                                   const float *rstd, int64_t rows, int64_t D, int64_t nb,
                                   int want_params) {
    const float invD = 1.0f / (float)D;
#pragma omp parallel for if (rows * D > NORM_PAR_MIN) schedule(static)
    for (int64_t bi = 0; bi < nb; bi++) {
        float *pw = part + bi * 3 * D, *pb = pw + D, *t = pw + 2 * D;
        if (want_params) memset(pw, 0, (size_t)(2 * D) * sizeof(float));
        const int64_t r0 = bi * rows / nb, r1 = (bi + 1) * rows / nb;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = x + r * D, *gr = gout + r * D;
            const float m = mean[r], rs = rstd[r];
            if (want_params) {
#pragma omp simd
                for (int64_t d = 0; d < D; d++) {
                    pw[d] += gr[d] * ((xr[d] - m) * rs);
                    pb[d] += gr[d];
                }
            }
            if (!dx) continue;
            norm_gw_row(t, gr, w, D);
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t d = 0; d < D; d++) {
                sg += t[d];
                sgx += t[d] * ((xr[d] - m) * rs);
            }
            sg *= invD;
            sgx *= invD;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) t[d] = rs * (t[d] - sg - (xr[d] - m) * rs * sgx);
            norm_store_row(dx + r * D, t, D, bx);
        }
    }
}

/* ---------------------------------------------------------------- RMSNorm kernels */

/* x, y [rows, D]; w [D] or NULL; rstd [rows] = 1 / sqrt(mean(x^2) + eps) (saved). */
static void rmsnorm_forward_f32(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                                int64_t D, float eps) {
    const float invD = 1.0f / (float)D;
#pragma omp parallel for if (rows * D > NORM_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *yr = y + r * D;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < D; d++) s += xr[d] * xr[d];
        const float rs = 1.0f / sqrtf(s * invD + eps);
        rstd[r] = rs;
        if (w) {
            /* HF order: (x * rstd) then * weight. */
#pragma omp simd
            for (int64_t d = 0; d < D; d++) yr[d] = w[d] * (xr[d] * rs);
        } else {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) yr[d] = xr[d] * rs;
        }
    }
}

/* gout, x [rows, D]; w [D] or NULL; rstd [rows]; dx [rows, D] or NULL (beta bx);
 * part [nb, 2, D] scratch: per block, partial sums of gout * x * rstd (dw) and a row buffer.
 * With gw = gout * w:  dx = rstd * gw - x * rstd^3 * mean(gw * x). */
static void rmsnorm_backward_f32(float *dx, float bx, float *part, const float *gout,
                                 const float *x, const float *w, const float *rstd, int64_t rows,
                                 int64_t D, int64_t nb, int want_w) {
    const float invD = 1.0f / (float)D;
#pragma omp parallel for if (rows * D > NORM_PAR_MIN) schedule(static)
    for (int64_t bi = 0; bi < nb; bi++) {
        float *pw = part + bi * 2 * D, *t = pw + D;
        if (want_w) memset(pw, 0, (size_t)D * sizeof(float));
        const int64_t r0 = bi * rows / nb, r1 = (bi + 1) * rows / nb;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = x + r * D, *gr = gout + r * D;
            const float rs = rstd[r];
            if (want_w) {
#pragma omp simd
                for (int64_t d = 0; d < D; d++) pw[d] += gr[d] * (xr[d] * rs);
            }
            if (!dx) continue;
            norm_gw_row(t, gr, w, D);
            float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
            for (int64_t d = 0; d < D; d++) sgx += t[d] * xr[d];
            const float k = sgx * invD * rs * rs * rs;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) t[d] = rs * t[d] - xr[d] * k;
            norm_store_row(dx + r * D, t, D, bx);
        }
    }
}

/* ---------------------------------------------------------------- op glue */

/* Node params: ip[0] = input index of weight or -1, ip[1] = input index of bias or -1,
 * fp[0] = eps. */
static int64_t norm_D(const dt_node *n) {
    return n->t.shape[n->t.ndim - 1];
}
static int64_t norm_rows(const dt_node *n) {
    const int64_t D = norm_D(n);
    return D ? dt_tensor_numel(&n->t) / D : 0;
}

static const float *opt_in(const dt_op_ctx *c, int64_t idx) {
    return idx >= 0 ? (const float *)c->in[idx].data : NULL;
}

static dt_status layernorm_prepare(dt_graph *g, dt_node *n) {
    const int64_t rows = norm_rows(n), D = norm_D(n);
    n->aux_bytes = (size_t)(2 * rows) * sizeof(float); /* mean, rstd */
    n->ws_bwd =
        (size_t)(norm_blocks(rows) * 3 * D) * sizeof(float); /* see layernorm_backward_f32 */
    return DT_OK;
}

static dt_status layernorm_forward(const dt_op_ctx *c) {
    const dt_node *n = c->node;
    const int64_t rows = norm_rows(n), D = norm_D(n);
    float *aux = c->aux;
    layernorm_forward_f32(c->out.data, aux, aux + rows, c->in[0].data, opt_in(c, n->ip[0]),
                          opt_in(c, n->ip[1]), rows, D, n->fp[0]);
    return DT_OK;
}

static dt_status layernorm_backward(const dt_op_ctx *c) {
    const dt_node *n = c->node;
    const int64_t rows = norm_rows(n), D = norm_D(n), nb = norm_blocks(rows);
    const float *aux = c->aux;
    const int64_t iw = n->ip[0], ib = n->ip[1];
    float *dw = iw >= 0 ? c->gin[iw].data : NULL;
    float *db = ib >= 0 ? c->gin[ib].data : NULL;
    float *part = c->ws;
    const int want = (dw || db) && rows > 0;
    layernorm_backward_f32(c->gin[0].data, c->gin_beta[0], part, c->gout.data, c->in[0].data,
                           opt_in(c, iw), aux, aux + rows, rows, D, nb, want);
    if (dw && rows > 0) norm_reduce_partials(dw, part, nb, 3 * D, D, c->gin_beta[iw]);
    if (db && rows > 0) norm_reduce_partials(db, part + D, nb, 3 * D, D, c->gin_beta[ib]);
    /* No rows: the parameter gradients are zero sums. */
    if (rows == 0) {
        if (dw && c->gin_beta[iw] == 0.0f) memset(dw, 0, (size_t)D * sizeof(float));
        if (db && c->gin_beta[ib] == 0.0f) memset(db, 0, (size_t)D * sizeof(float));
    }
    return DT_OK;
}

static const dt_op_def layernorm_def = {
    .name = "layernorm",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1), /* x; weight (params are kept anyway) */
    .prepare = layernorm_prepare,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
};

static dt_status rmsnorm_prepare(dt_graph *g, dt_node *n) {
    const int64_t rows = norm_rows(n), D = norm_D(n);
    n->aux_bytes = (size_t)rows * sizeof(float);                     /* rstd */
    n->ws_bwd = (size_t)(norm_blocks(rows) * 2 * D) * sizeof(float); /* see rmsnorm_backward_f32 */
    return DT_OK;
}

static dt_status rmsnorm_forward(const dt_op_ctx *c) {
    const dt_node *n = c->node;
    rmsnorm_forward_f32(c->out.data, c->aux, c->in[0].data, opt_in(c, n->ip[0]), norm_rows(n),
                        norm_D(n), n->fp[0]);
    return DT_OK;
}

static dt_status rmsnorm_backward(const dt_op_ctx *c) {
    const dt_node *n = c->node;
    const int64_t rows = norm_rows(n), D = norm_D(n), nb = norm_blocks(rows);
    const int64_t iw = n->ip[0];
    float *dw = iw >= 0 ? c->gin[iw].data : NULL;
    float *part = c->ws;
    rmsnorm_backward_f32(c->gin[0].data, c->gin_beta[0], part, c->gout.data, c->in[0].data,
                         opt_in(c, iw), c->aux, rows, D, nb, dw != NULL && rows > 0);
    if (dw && rows > 0) norm_reduce_partials(dw, part, nb, 2 * D, D, c->gin_beta[iw]);
    if (dw && rows == 0 && c->gin_beta[iw] == 0.0f) memset(dw, 0, (size_t)D * sizeof(float));
    return DT_OK;
}

static const dt_op_def rmsnorm_def = {
    .name = "rmsnorm",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .prepare = rmsnorm_prepare,
    .forward = rmsnorm_forward,
    .backward = rmsnorm_backward,
    DT_CUDA_OP_ENTRIES(rmsnorm),
};

/* ---------------------------------------------------------------- builders */

/* Checks x (f32, ndim >= 1, last dim > 0) and an optional [D] f32 vector p. `what` names p. */
static int norm_check(dt_graph *g, const char *op, int x, int p, const char *what) {
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    if (dt_x_f32_check(op, xt)) return -1;
    if (xt->ndim < 1 || xt->shape[xt->ndim - 1] < 1)
        return dt_shape_error(op, "x needs at least one dim and a non-empty last dim", 1,
                              (const dt_tensor *[]){xt});
    if (p < 0) return 0;
    const dt_tensor *pt = &dt_graph_node(g, p)->t;
    if (pt->dtype != DT_F32) {
        char b0[64], b1[64];
        dt_error_set(DT_ERR_DTYPE, "%s: %s must be f32, got %s (x %s, %s %s)", op, what,
                     dt_dtype_name(pt->dtype), dt_shape_str(b0, sizeof b0, xt->ndim, xt->shape),
                     what, dt_shape_str(b1, sizeof b1, pt->ndim, pt->shape));
        return -1;
    }
    if (pt->ndim != 1 || pt->shape[0] != xt->shape[xt->ndim - 1]) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s must be [D] with D = x's last dim", what);
        return dt_shape_error(op, msg, 2, (const dt_tensor *[]){xt, pt});
    }
    return 0;
}

int dt_layernorm(dt_graph *g, int x, int weight, int bias, float eps) {
    int ids[3] = {x, 0, 0}, n = 1;
    int64_t ip[2] = {-1, -1};
    if (weight != -1) ip[0] = n, ids[n++] = weight;
    if (bias != -1) ip[1] = n, ids[n++] = bias;
    if (dt_ids_bad(g, "layernorm", n, ids)) return -1;
    if (!(eps >= 0.0f) || isinf(eps)) {
        dt_error_set(DT_ERR_INVALID, "layernorm: eps must be finite and >= 0, got %g", eps);
        return -1;
    }
    if (norm_check(g, "layernorm", x, weight >= 0 ? weight : -1, "weight") ||
        norm_check(g, "layernorm", x, bias >= 0 ? bias : -1, "bias"))
        return -1;
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    return dt_node_add(g, &layernorm_def, n, ids, DT_F32, xt->ndim, xt->shape, ip, 2,
                       (const float[]){eps}, 1);
}

int dt_rmsnorm(dt_graph *g, int x, int weight, float eps) {
    int ids[2] = {x, weight}, n = weight != -1 ? 2 : 1;
    if (dt_ids_bad(g, "rmsnorm", n, ids)) return -1;
    if (!(eps >= 0.0f) || isinf(eps)) {
        dt_error_set(DT_ERR_INVALID, "rmsnorm: eps must be finite and >= 0, got %g", eps);
        return -1;
    }
    if (norm_check(g, "rmsnorm", x, n == 2 ? weight : -1, "weight")) return -1;
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    const int64_t ip[1] = {n == 2 ? 1 : -1};
    return dt_node_add(g, &rmsnorm_def, n, ids, DT_F32, xt->ndim, xt->shape, ip, 1,
                       (const float[]){eps}, 1);
}
