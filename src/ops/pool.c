/* Pooling (NCHW, PyTorch semantics with ceil_mode=False, dilation 1):
 *   maxpool2d       y [N, C, OH, OW], argmax saved in aux for backward (padding acts as -inf)
 *   avgpool2d       count_include_pad=True: every window divides by KH * KW
 *   global_avgpool  y [N, C] = mean over H, W (torchvision ResNet's AdaptiveAvgPool2d(1) + flatten)
 * OH = (H + 2 * PH - KH) / SH + 1. Like PyTorch, padding may be at most half the kernel, so
 * every window holds at least one real element.
 *
 * Own OpenMP kernels, parallel over the N * C planes: pooling is memory-bound and runs once or
 * twice per ResNet, so plain loops on the NCHW tensors beat reordering for oneDNN. maxpool2d and
 * global_avgpool also read channel-blocked activations (DT_LAYOUT_C16 / C8, [N, C/L, H, W, L]
 * with L = 16 / 8), which is how a ResNet's stem and last stage reach them; maxpool then
 * computes the same values and gradients as in NCHW, bit for bit, with the L channels of a block
 * in SIMD lanes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/ops_cnn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

enum { PL_KH, PL_KW, PL_SH, PL_SW, PL_PH, PL_PW }; /* node->ip[] */

/* Window geometry shared by the kernels. */
typedef struct pool_geom {
    int64_t planes, H, W, OH, OW, kh, kw, sh, sw, ph, pw;
} pool_geom;

/* Window of output index o along one axis (stride st, padding pad, kernel k) clipped to the
 * input [0, n): [*lo, *hi). */
static inline void pool_span(int64_t o, int64_t st, int64_t pad, int64_t k, int64_t n, int64_t *lo,
                             int64_t *hi) {
    int64_t a = o * st - pad, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > n ? n : b;
}

static void pool_geom_of(const dt_op_ctx *c, pool_geom *p) {
    const dt_tensor *x = &c->in[0];
    const int64_t *ip = c->node->ip;
    p->planes = x->shape[0] * x->shape[1], p->H = x->shape[2], p->W = x->shape[3];
    p->OH = c->node->t.shape[2], p->OW = c->node->t.shape[3];
    p->kh = ip[PL_KH], p->kw = ip[PL_KW], p->sh = ip[PL_SH], p->sw = ip[PL_SW];
    p->ph = ip[PL_PH], p->pw = ip[PL_PW];
}

/* y [planes, OH, OW] = max over windows of x [planes, H, W]; arg [planes, OH, OW] = h * W + w
 * of the max (the first one in window order; a NaN wins over numbers and a later NaN over an
 * earlier one, like PyTorch). Loop order: for each output row, window tap by tap with the
 * outputs innermost, so the compares are independent and vectorise with selects instead of a
 * chain of unpredictable branches (measured 10.8 -> 2.9 ms on one thread at [32, 64, 32, 32],
 * 3x3 stride 2). */
static void maxpool_forward_kernel(float *y, int32_t *arg, const float *x, const pool_geom *p) {
    const int64_t H = p->H, W = p->W, OH = p->OH, OW = p->OW, kh = p->kh, kw = p->kw;
    const int64_t sh = p->sh, sw = p->sw, ph = p->ph, pw = p->pw;
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < p->planes; pl++) {
        const float *xp = x + pl * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            float *yr = y + (pl * OH + oh) * OW;
            int32_t *ar = arg + (pl * OH + oh) * OW;
            int64_t h0 = oh * sh - ph, h1 = h0 + kh;
            if (h0 < 0) h0 = 0;
            if (h1 > H) h1 = H;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0 = ow * sw - pw;
                yr[ow] = -INFINITY;
                ar[ow] = (int32_t)(h0 * W + (w0 < 0 ? 0 : w0));
            }
            for (int64_t h = h0; h < h1; h++) {
                const float *row = xp + h * W;
                for (int64_t k = 0; k < kw; k++) {
                    /* outputs whose tap k lands inside the row: 0 <= ow*sw - pw + k < W */
                    if (W - 1 + pw - k < 0) continue;
                    int64_t lo = pw - k > 0 ? (pw - k + sw - 1) / sw : 0;
                    int64_t hi = (W - 1 + pw - k) / sw + 1;
                    if (hi > OW) hi = OW;
                    const int32_t base = (int32_t)(h * W - pw + k);
#pragma omp simd
                    for (int64_t ow = lo; ow < hi; ow++) {
                        float v = row[ow * sw - pw + k], cur = yr[ow];
                        int take = (v > cur) | isnan(v);
                        yr[ow] = take ? v : cur;
                        ar[ow] = take ? base + (int32_t)(ow * sw) : ar[ow];
                    }
                }
            }
        }
    }
}

/* gx [planes, H, W] = beta * gx + scatter-add of gy [planes, OH, OW] at arg. */
static void maxpool_backward_kernel(float *gx, float beta, const float *gy, const int32_t *arg,
                                    const pool_geom *p) {
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < p->planes; pl++) {
        float *gp = gx + pl * p->H * p->W;
        if (beta == 0.0f) memset(gp, 0, (size_t)(p->H * p->W) * sizeof(float));
        const float *g = gy + pl * p->OH * p->OW;
        const int32_t *a = arg + pl * p->OH * p->OW;
        for (int64_t i = 0; i < p->OH * p->OW; i++) gp[a[i]] += g[i];
    }
}

/* for every block b of nb, in parallel: f(args..., b, L) with L = 16 or 8 spelled out in each
 * loop, so that the always-inline kernel below it is compiled for that lane count */
#define FOR_BLOCKS(nb, L, f, ...)                                                                  \
    do {                                                                                           \
        if ((L) == 16) {                                                                           \
            _Pragma("omp parallel for schedule(static)") for (int64_t b = 0; b < (nb); b++)        \
                f(__VA_ARGS__, b, 16);                                                             \
        } else {                                                                                   \
            _Pragma("omp parallel for schedule(static)") for (int64_t b = 0; b < (nb); b++)        \
                f(__VA_ARGS__, b, 8);                                                              \
        }                                                                                          \
    } while (0)

/* Channel-blocked maxpool, block b of L channels (L = 16 for DT_LAYOUT_C16, 8 for C8; a
 * constant at every call, so the lane loops vectorise): x [planes/L, H, W, L] -> y [planes/L,
 * OH, OW, L], arg per lane as in the plain kernel. Each lane visits its window in the plain
 * kernel's order (rows, then taps) with the same compare, so values and argmaxes are the plain
 * ones. */
static inline __attribute__((always_inline)) void
maxpool_blk_forward(float *y, int32_t *arg, const float *x, const pool_geom *p, int64_t b, int L) {
    const int64_t H = p->H, W = p->W, OH = p->OH, OW = p->OW;
    const float *xp = x + b * H * W * L;
    for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t h0 = oh * p->sh - p->ph, h1 = h0 + p->kh;
            int64_t w0 = ow * p->sw - p->pw, w1 = w0 + p->kw;
            h0 = h0 < 0 ? 0 : h0, h1 = h1 > H ? H : h1;
            w0 = w0 < 0 ? 0 : w0, w1 = w1 > W ? W : w1;
            float *yv = y + ((b * OH + oh) * OW + ow) * L;
            int32_t *av = arg + ((b * OH + oh) * OW + ow) * L;
            for (int l = 0; l < L; l++) yv[l] = -INFINITY, av[l] = (int32_t)(h0 * W + w0);
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) {
                    const float *xv = xp + (h * W + w) * L;
                    int32_t at = (int32_t)(h * W + w);
#pragma omp simd
                    for (int l = 0; l < L; l++) {
                        float v = xv[l], cur = yv[l];
                        int take = (v > cur) | isnan(v);
                        yv[l] = take ? v : cur;
                        av[l] = take ? at : av[l];
                    }
                }
        }
}

/* Block b: gx [planes/L, H, W, L] = beta * gx + scatter-add of gy at arg, outputs in the plain
 * order. */
static inline __attribute__((always_inline)) void
maxpool_blk_backward(float *gx, float beta, const float *gy, const int32_t *arg, const pool_geom *p,
                     int64_t b, int L) {
    const int64_t HW = p->H * p->W, OHW = p->OH * p->OW;
    float *gp = gx + b * HW * L;
    if (beta == 0.0f) memset(gp, 0, (size_t)(HW * L) * sizeof(float));
    const float *g = gy + b * OHW * L;
    const int32_t *a = arg + b * OHW * L;
    for (int64_t i = 0; i < OHW * L; i++) gp[(int64_t)a[i] * L + i % L] += g[i];
}

static dt_status maxpool_forward(const dt_op_ctx *c) {
    pool_geom p;
    pool_geom_of(c, &p);
    int L = dt_layout_block(c->node->layout);
    if (L)
        FOR_BLOCKS(p.planes / L, L, maxpool_blk_forward, c->out.data, c->aux, c->in[0].data, &p);
    else
        maxpool_forward_kernel(c->out.data, c->aux, c->in[0].data, &p);
    return DT_OK;
}

static dt_status maxpool_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    pool_geom p;
    pool_geom_of(c, &p);
    int L = dt_layout_block(c->node->layout);
    if (L)
        FOR_BLOCKS(p.planes / L, L, maxpool_blk_backward, c->gin[0].data, c->gin_beta[0],
                   c->gout.data, c->aux, &p);
    else
        maxpool_backward_kernel(c->gin[0].data, c->gin_beta[0], c->gout.data, c->aux, &p);
    return DT_OK;
}

static dt_status maxpool_prepare(dt_graph *g, dt_node *n) {
    n->aux_bytes = (size_t)dt_tensor_numel(&n->t) * sizeof(int32_t);
    return DT_OK;
}

/* Divisor of window (oh, ow) with count_include_pad: the window clipped to the padded input. */
static inline float avg_divisor(const pool_geom *p, int64_t oh, int64_t ow) {
    int64_t h0 = oh * p->sh - p->ph, w0 = ow * p->sw - p->pw;
    int64_t h1 = h0 + p->kh, w1 = w0 + p->kw;
    if (h1 > p->H + p->ph) h1 = p->H + p->ph;
    if (w1 > p->W + p->pw) w1 = p->W + p->pw;
    return (float)((h1 - h0) * (w1 - w0));
}

/* y [planes, OH, OW] = window sums of x [planes, H, W] / divisor. */
static void avgpool_forward_kernel(float *y, const float *x, const pool_geom *p) {
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < p->planes; pl++) {
        const float *xp = x + pl * p->H * p->W;
        float *yp = y + pl * p->OH * p->OW;
        for (int64_t oh = 0; oh < p->OH; oh++) {
            int64_t h0, h1, w0, w1;
            pool_span(oh, p->sh, p->ph, p->kh, p->H, &h0, &h1);
            for (int64_t ow = 0; ow < p->OW; ow++) {
                pool_span(ow, p->sw, p->pw, p->kw, p->W, &w0, &w1);
                float s = 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) s += xp[h * p->W + w];
                yp[oh * p->OW + ow] = s / avg_divisor(p, oh, ow);
            }
        }
    }
}

/* gx [planes, H, W] = beta * gx + each gy / divisor spread over its window. */
static void avgpool_backward_kernel(float *gx, float beta, const float *gy, const pool_geom *p) {
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < p->planes; pl++) {
        float *gp = gx + pl * p->H * p->W;
        if (beta == 0.0f) memset(gp, 0, (size_t)(p->H * p->W) * sizeof(float));
        const float *g = gy + pl * p->OH * p->OW;
        for (int64_t oh = 0; oh < p->OH; oh++) {
            int64_t h0, h1, w0, w1;
            pool_span(oh, p->sh, p->ph, p->kh, p->H, &h0, &h1);
            for (int64_t ow = 0; ow < p->OW; ow++) {
                pool_span(ow, p->sw, p->pw, p->kw, p->W, &w0, &w1);
                float v = g[oh * p->OW + ow] / avg_divisor(p, oh, ow);
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) gp[h * p->W + w] += v;
            }
        }
    }
}

static dt_status avgpool_forward(const dt_op_ctx *c) {
    pool_geom p;
    pool_geom_of(c, &p);
    avgpool_forward_kernel(c->out.data, c->in[0].data, &p);
    return DT_OK;
}

static dt_status avgpool_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    pool_geom p;
    pool_geom_of(c, &p);
    avgpool_backward_kernel(c->gin[0].data, c->gin_beta[0], c->gout.data, &p);
    return DT_OK;
}

/* y [planes] = mean of each x [planes, P] row. */
static void gap_forward_kernel(float *y, const float *x, int64_t planes, int64_t P) {
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * P;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < P; i++) s += xp[i];
        y[pl] = s / (float)P;
    }
}

/* gx [planes, P] = beta * gx + gy [planes] / P. */
static void gap_backward_kernel(float *gx, float beta, const float *gy, int64_t planes, int64_t P) {
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        float v = gy[pl] / (float)P, *gp = gx + pl * P;
        if (beta != 0.0f) {
#pragma omp simd
            for (int64_t i = 0; i < P; i++) gp[i] += v;
        } else {
#pragma omp simd
            for (int64_t i = 0; i < P; i++) gp[i] = v;
        }
    }
}

/* Channel-blocked, block b of L channels: y [N, C] = mean over p of x [N, C/L, P, L] (four
 * partial sums per lane, like the SIMD reduction above; the order differs, so plain and blocked
 * agree to rounding, while both block widths make the same additions per channel). */
static inline __attribute__((always_inline)) void gap_blk_forward(float *y, const float *x,
                                                                  int64_t P, int64_t b, int L) {
    const float *xp = x + b * P * L;
    float a[4][16] = {{0}};
    int64_t i = 0;
    for (; i + 4 <= P; i += 4)
        for (int k = 0; k < 4; k++) {
#pragma omp simd
            for (int l = 0; l < L; l++) a[k][l] += xp[(i + k) * L + l];
        }
    for (; i < P; i++) {
#pragma omp simd
        for (int l = 0; l < L; l++) a[0][l] += xp[i * L + l];
    }
    for (int l = 0; l < L; l++)
        y[b * L + l] = ((a[0][l] + a[1][l]) + (a[2][l] + a[3][l])) / (float)P;
}

/* Block b: gx [N, C/L, P, L] = beta * gx + gy [N, C] / P. */
static inline __attribute__((always_inline)) void
gap_blk_backward(float *gx, float beta, const float *gy, int64_t P, int64_t b, int L) {
    float v[16], *gp = gx + b * P * L;
    for (int l = 0; l < L; l++) v[l] = gy[b * L + l] / (float)P;
    for (int64_t i = 0; i < P; i++) {
#pragma omp simd
        for (int l = 0; l < L; l++) gp[i * L + l] = (beta != 0.0f ? gp[i * L + l] : 0.0f) + v[l];
    }
}

static dt_status gap_forward(const dt_op_ctx *c) {
    const dt_tensor *x = &c->in[0];
    int64_t planes = x->shape[0] * x->shape[1], P = x->shape[2] * x->shape[3];
    int L = dt_layout_block(c->in_layout[0]);
    if (L)
        FOR_BLOCKS(planes / L, L, gap_blk_forward, c->out.data, x->data, P);
    else
        gap_forward_kernel(c->out.data, x->data, planes, P);
    return DT_OK;
}

static dt_status gap_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const dt_tensor *x = &c->in[0];
    int64_t planes = x->shape[0] * x->shape[1], P = x->shape[2] * x->shape[3];
    int L = dt_layout_block(c->in_layout[0]);
    if (L)
        FOR_BLOCKS(planes / L, L, gap_blk_backward, c->gin[0].data, c->gin_beta[0], c->gout.data,
                   P);
    else
        gap_backward_kernel(c->gin[0].data, c->gin_beta[0], c->gout.data, planes, P);
    return DT_OK;
}

static unsigned maxpool_layouts(const dt_graph *g, const dt_node *n) {
    (void)g, (void)n;
    return DT_LAY_IN(0) | DT_LAY_OUT | DT_LAY_TIED;
}

static unsigned gap_layouts(const dt_graph *g, const dt_node *n) {
    (void)g, (void)n;
    return DT_LAY_IN(0);
}

static const dt_op_def maxpool_def = {
    .name = "maxpool2d",
    .prepare = maxpool_prepare,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
    .layouts = maxpool_layouts,
    DT_CUDA_OP_ENTRIES(maxpool),
};
static const dt_op_def avgpool_def = {
    .name = "avgpool2d",
    .forward = avgpool_forward,
    .backward = avgpool_backward,
    DT_CUDA_OP_ENTRIES(avgpool),
};
static const dt_op_def gap_def = {
    .name = "global_avgpool",
    .forward = gap_forward,
    .backward = gap_backward,
    .layouts = gap_layouts,
    DT_CUDA_OP_ENTRIES(gap),
};

/* Checks x and the window for maxpool2d / avgpool2d and adds the node. */
static int pool_build(dt_graph *g, const dt_op_def *def, int x, int kh, int kw, int sh, int sw,
                      int ph, int pw) {
    const char *op = def->name;
    if (dt_ids_bad(g, op, 1, &x)) return -1;
    const dt_tensor *xt = dt_graph_shape(g, x);
    char what[160];
    if (xt->dtype != DT_F32) {
        dt_shape_error(op, "x must be f32", 1, &xt);
        snprintf(what, sizeof what, "%s", dt_last_error()); /* the message buffer is reused */
        return dt_error_set(DT_ERR_DTYPE, "%s", what), -1;
    }
    if (xt->ndim != 4) return dt_shape_error(op, "x must be [N, C, H, W]", 1, &xt);
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 || 2 * ph > kh || 2 * pw > kw) {
        snprintf(what, sizeof what,
                 "kernel %dx%d and stride %dx%d must be >= 1, padding %dx%d in [0, kernel/2]", kh,
                 kw, sh, sw, ph, pw);
        return dt_shape_error(op, what, 1, &xt);
    }
    int64_t nh = xt->shape[2] + 2 * (int64_t)ph - kh, nw = xt->shape[3] + 2 * (int64_t)pw - kw;
    if (nh < 0 || nw < 0) {
        snprintf(what, sizeof what, "output size <= 0 (kernel %dx%d, padding %dx%d)", kh, kw, ph,
                 pw);
        return dt_shape_error(op, what, 1, &xt);
    }
    int64_t shape[4] = {xt->shape[0], xt->shape[1], nh / sh + 1, nw / sw + 1};
    int64_t ip[6] = {kh, kw, sh, sw, ph, pw};
    return dt_node_add(g, def, 1, &x, DT_F32, 4, shape, ip, 6, NULL, 0);
}

int dt_maxpool2d(dt_graph *g, int x, int kh, int kw, int sh, int sw, int ph, int pw) {
    return pool_build(g, &maxpool_def, x, kh, kw, sh, sw, ph, pw);
}

int dt_avgpool2d(dt_graph *g, int x, int kh, int kw, int sh, int sw, int ph, int pw) {
    return pool_build(g, &avgpool_def, x, kh, kw, sh, sw, ph, pw);
}

int dt_global_avgpool(dt_graph *g, int x) {
    const char *op = "global_avgpool";
    if (dt_ids_bad(g, op, 1, &x)) return -1;
    const dt_tensor *xt = dt_graph_shape(g, x);
    if (xt->dtype != DT_F32) {
        char m[256];
        dt_shape_error(op, "x must be f32", 1, &xt);
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_DTYPE, "%s", m), -1;
    }
    if (xt->ndim != 4 || xt->shape[2] < 1 || xt->shape[3] < 1)
        return dt_shape_error(op, "x must be [N, C, H, W] with H, W >= 1", 1, &xt);
    int64_t shape[2] = {xt->shape[0], xt->shape[1]};
    return dt_node_add(g, &gap_def, 1, &x, DT_F32, 2, shape, NULL, 0, NULL, 0);
}
