/* Batch normalization over channel 1 (PyTorch BatchNorm1d/2d/3d semantics; built for 2d).
 *
 * x [N, C, *] is viewed as [N, C, P] with P the product of the trailing dims; statistics are per
 * channel over M = N * P values. Training mode normalises with the batch mean and biased
 * variance, and updates the running statistics in place (they are DT_PARAM_STATE params living
 * in the graph's state buffer) with PyTorch's rule
 *   running_mean = (1 - momentum) * running_mean + momentum * mean
 *   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)   (unbiased)
 * except in a recomputed forward, which must not count the batch twice. Eval mode normalises with
 * the running statistics. aux keeps the mean and 1/sqrt(var + eps) actually used (and the mode),
 * so backward is exact for both modes.
 *
 * Own OpenMP kernels rather than oneDNN: this is a per-channel streaming reduction that is
 * memory-bound either way, and oneDNN would bring its own running-statistics handling. Sums are
 * per-row float SIMD partials accumulated in double. Values that the graph keeps channel-blocked
 * (DT_LAYOUT_C16 / C8, between convolutions) go through the same code with the sweeps in
 * batchnorm_blocked.inc, dispatched per channel block; x, the residual and the output share a
 * layout.
 *
 * Synchronised statistics (dt_graph_set_sync_batchnorm, torch.nn.SyncBatchNorm) in training:
 * forward all-reduces per-channel [sum x, sum x^2, count] (2C + 1 doubles, one call) and
 * normalises with the global mean and biased variance; running_var gets the unbiased variance
 * with the global count. Backward all-reduces [sum dy, sum dy * xhat] (2C doubles, one call)
 * for the input gradient; weight/bias gradients stay local (the gradient average sums them).
 * The scratch for these sums is the node's ws; the global count is saved in aux for backward.
 * Without a reducer, and in eval mode, the code below is the unsynchronised one, unchanged.
 *
 * Fused epilogue (dt_batchnorm2d_fused): y = relu?(batchnorm(x) + residual?) in the same pass
 * that writes the normalised values, the way ResNet uses batchnorm (conv -> bn -> relu, and
 * conv -> bn -> add shortcut -> relu). Separate ops would write the batchnorm output, read it
 * back for the add and again for the ReLU, and in backward write and re-read two more gradients:
 * counting passes over an activation-sized array, bn + relu take 11 instead of 14 and bn + add +
 * relu 13 instead of 20, and the intermediate arrays are never allocated. Backward applies the
 * ReLU mask (out > 0, as relu's own backward) to gout in place as its first sweep reads each
 * row, and writes the residual's gradient in the second. Every value is computed by the same
 * expressions, in the same order, as dt_batchnorm2d, dt_add and dt_relu one after the other, so
 * the results are the same bits (tests/ops/cnn_fd.c checks). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/ops_cnn.h"
#include "graph/op.h"
#include "ops/batchnorm_impl.h"
#include "ops/ops_cuda.h"

/* The fused ReLU's compares and selects: under the default -ftrapping-math GCC keeps them as
 * branches, and a loop with a data-dependent branch neither vectorises nor predicts well (the
 * masking loop ran 14 times slower than the sums after it). Values do not change: nothing in
 * dtrain reads FP exception flags (see src/ops/activation.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

static const char *OP = "batchnorm2d";

/* The running statistics are not node inputs: a node has at most DT_MAX_IN (4) inputs and
 * batchnorm has five. They are DT_PARAM_STATE params, whose values stay at fixed addresses in
 * the graph's state buffer, so prepare keeps the graph in node->state and the kernel looks
 * them up with dt_graph_value(). */
static float *bn_running(const dt_op_ctx *c, int which) {
    return dt_graph_value(c->node->state, (int)c->node->ip[which])->data;
}

/* Sum of p[0..n) (float SIMD partials; the caller accumulates rows in double). */
static inline float row_sum(const float *p, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += p[i];
    return s;
}

/* Sum of (p[i] - m)^2. */
static inline float row_sqdev(const float *p, int64_t n, float m) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (p[i] - m) * (p[i] - m);
    return s;
}

/* Channels are processed in blocks of at most BN_BLOCK, sweeping n outermost: for each sample
 * the block's rows are adjacent in memory, so a pass streams through x instead of visiting C
 * strided rows of P floats one channel at a time (P is 16 at ResNet's last stage, a row 64
 * bytes). Every channel still sums its rows in n order on one thread, so the results do not
 * depend on the block size or the thread count. */
enum { BN_BLOCK = 64 };

/* Block size for C channels: at most BN_BLOCK, small enough to give every thread a block; a
 * multiple of the channel block for blocked values. */
static int64_t bn_block(const bn_geom *g) {
    int64_t t = omp_get_max_threads(), b = (g->C + t - 1) / t;
    if (g->blk) b = (b + g->blk - 1) / g->blk * g->blk;
    return b < 1 ? 1 : b > BN_BLOCK ? BN_BLOCK : b;
}

/* The geometry of node c's x (layout: the node's, which its x and residual share). */
static bn_geom bn_geom_of(const dt_op_ctx *c) {
    const dt_tensor *xt = &c->in[BN_X];
    bn_geom g = {xt->shape[0], xt->shape[1], 0, dt_layout_block(c->node->layout)};
    g.P = dt_tensor_numel(xt) / (g.N * g.C);
    return g;
}

/* Channels [c0, c1) of x [N, C, P] in two passes, like PyTorch: s = sum x, m = float(sum / M),
 * v = sum (x - m)^2, M = N * P (arrays indexed from c0). */
static void bn_block_moments(const float *x, const bn_geom *g, int64_t c0, int64_t c1, double *s,
                             float *m, double *v) {
    if (g->blk) {
        (g->blk == 16 ? dt_bn16_block_moments : dt_bn8_block_moments)(x, g, c0, c1, s, m, v);
        return;
    }
    int64_t N = g->N, C = g->C, P = g->P;
    double M = (double)N * (double)P;
    for (int64_t c = c0; c < c1; c++) s[c - c0] = 0.0, v[c - c0] = 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = c0; c < c1; c++) s[c - c0] += row_sum(x + (n * C + c) * P, P);
    for (int64_t c = c0; c < c1; c++) m[c - c0] = (float)(s[c - c0] / M);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = c0; c < c1; c++) v[c - c0] += row_sqdev(x + (n * C + c) * P, P, m[c - c0]);
}

/* Training statistics of x [N, C, P]: mean[C], biased var[C]. */
static void bn_batch_stats(float *mean, float *var, const float *x, const bn_geom *g) {
    double M = (double)g->N * (double)g->P;
    int64_t B = bn_block(g), C = g->C;
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += B) {
        int64_t c1 = c0 + B < C ? c0 + B : C;
        double s[BN_BLOCK], v[BN_BLOCK];
        bn_block_moments(x, g, c0, c1, s, mean + c0, v);
        for (int64_t c = c0; c < c1; c++) var[c] = (float)(v[c - c0] / M);
    }
}

/* One row of the fused forward: t = x * alpha + beta as the plain loop, + r as add's, then relu's
 * select. RELU and RES are constants at each call, so each variant is its own simple loop. */
static inline void bn_apply_row(float *yp, const float *xp, const float *rp, float alpha,
                                float beta, int64_t P, int relu, int res) {
#pragma omp simd
    for (int64_t i = 0; i < P; i++) {
        float t = xp[i] * alpha + beta;
        if (res) t = t + rp[i];
        yp[i] = relu ? (t < 0.0f ? 0.0f : t) : t;
    }
}

/* y [N, C, P] = epilogue(x * alpha + beta) per channel, alpha = rstd * w, beta = b - mean * alpha
 * (the same association as PyTorch's CPU kernel). */
static void bn_apply(float *y, const float *x, const float *mean, const float *rstd, const float *w,
                     const float *b, const bn_geom *g, const bn_epi *e) {
    if (g->blk) {
        (g->blk == 16 ? dt_bn16_apply : dt_bn8_apply)(y, x, mean, rstd, w, b, g, e);
        return;
    }
    int64_t N = g->N, C = g->C, P = g->P;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            float alpha = rstd[c] * w[c], beta = b[c] - mean[c] * alpha;
            int64_t off = (n * C + c) * P;
            const float *xp = x + off, *rp = e->res ? e->res + off : NULL;
            float *yp = y + off;
            if (e->res && e->relu)
                bn_apply_row(yp, xp, rp, alpha, beta, P, 1, 1);
            else if (e->res)
                bn_apply_row(yp, xp, rp, alpha, beta, P, 0, 1);
            else if (e->relu)
                bn_apply_row(yp, xp, NULL, alpha, beta, P, 1, 0);
            else
                bn_apply_row(yp, xp, NULL, alpha, beta, P, 0, 0);
        }
}

/* The epilogue of node c: inputs for forward, mask and residual gradient for backward. */
static bn_epi bn_epi_of(const dt_op_ctx *c) {
    bn_epi e = {0};
    e.relu = (int)c->node->ip[BN_RELU];
    if (c->node->ip[BN_HAS_RES]) {
        e.res = c->in[BN_RES].data;
        e.gres = c->gin[BN_RES].data;
        e.bres = c->gin_beta[BN_RES];
    }
    if (e.relu) e.out = c->out.data;
    return e;
}

/* aux layout: mean [C], rstd [C], mode (1.0 training, 0.0 eval, 2.0 training with synchronised
 * statistics), padding to 8 bytes, then (synchronised only) the global count M as a double. */
static size_t bn_count_off(int64_t C) {
    return ((2 * (size_t)C + 1) * sizeof(float) + 7) / 8 * 8;
}

/* "batchnorm2d: synchronised statistics: <what> failed: <the reducer's message>". */
static dt_status bn_sync_error(dt_status s, const char *what) {
    char m[512];
    snprintf(m, sizeof m, "%s", dt_last_error()); /* copy: the message buffer is reused */
    if (s == DT_OK) s = DT_ERR_INTERNAL;
    return dt_error_set(s, "%s: synchronised statistics: %s failed: %s", OP, what,
                        m[0] ? m : dt_status_name(s));
}

/* Per-channel local sums of x [N, C, P] for synchronised statistics: sum[c] = sum x and
 * sq[c] = sum x^2. sum x^2 is formed around the local mean m (a float) as
 *   sum (x - m)^2 + 2 m (sum x - M m) + M m^2
 * so the variance sq/M - (sum/M)^2 later cancels in double, not in float partials of x^2. */
static void bn_local_sums(double *sum, double *sq, const float *x, const bn_geom *g) {
    double M = (double)g->N * (double)g->P;
    int64_t B = bn_block(g), C = g->C;
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += B) {
        int64_t c1 = c0 + B < C ? c0 + B : C;
        double v[BN_BLOCK];
        float m[BN_BLOCK];
        bn_block_moments(x, g, c0, c1, sum + c0, m, v);
        for (int64_t c = c0; c < c1; c++) {
            double sc = sum[c], mc = m[c - c0];
            sq[c] = v[c - c0] + 2.0 * mc * (sc - M * mc) + M * mc * mc;
        }
    }
}

/* The operands of a forward: x and its geometry, weight and bias [C], the running statistics
 * [C], and in aux (layout: bn_count_off) mean [C], rstd [C] and mode. */
typedef struct bn_fwd {
    const dt_tensor *xt;
    bn_geom gm;
    const float *x, *w, *b;
    float *rm, *rv, *mean, *rstd, *mode;
    float mom, eps;
} bn_fwd;

static bn_fwd bn_fwd_of(const dt_op_ctx *c) {
    bn_fwd f = {.xt = &c->in[BN_X], .gm = bn_geom_of(c)};
    f.x = f.xt->data, f.w = c->in[BN_W].data, f.b = c->in[BN_B].data;
    f.rm = bn_running(c, BN_RM), f.rv = bn_running(c, BN_RV);
    f.mean = c->aux, f.rstd = f.mean + f.gm.C, f.mode = f.rstd + f.gm.C;
    f.mom = c->node->fp[BN_MOMENTUM], f.eps = c->node->fp[BN_EPS];
    return f;
}

/* y = the normalised x (f's mean and rstd), then the epilogue. */
static dt_status bn_fwd_apply(const dt_op_ctx *c, const bn_fwd *f) {
    bn_epi e = bn_epi_of(c);
    bn_apply(c->out.data, f->x, f->mean, f->rstd, f->w, f->b, &f->gm, &e);
    return DT_OK;
}

/* Training forward with statistics over all workers (ws: [2C + 1] doubles). */
static dt_status bn_forward_sync(const dt_op_ctx *c) {
    bn_fwd f = bn_fwd_of(c);
    int64_t N = f.gm.N, C = f.gm.C, P = f.gm.P;
    float *rm = f.rm, *rv = f.rv, *mean = f.mean, *rstd = f.rstd;
    const float mom = f.mom;
    double *buf = c->ws; /* sum x [C], sum x^2 [C], count */
    bn_local_sums(buf, buf + C, f.x, &f.gm);
    buf[2 * C] = (double)N * (double)P;
    dt_status s = c->run->sync_fn(c->run->sync_ud, buf, 2 * (size_t)C + 1);
    if (s != DT_OK) return bn_sync_error(s, "all-reduce of the batch statistics");
    double M = buf[2 * C];
    /* The global count is the same on every worker, so all of them fail here or none does. */
    if (!(M >= 2.0)) {
        char sh[64];
        return dt_error_set(DT_ERR_SHAPE,
                            "%s: training needs more than 1 value per channel over all workers "
                            "(global count %g, x %s on this worker)",
                            OP, M, dt_shape_str(sh, sizeof sh, f.xt->ndim, f.xt->shape));
    }
    for (int64_t k = 0; k < C; k++) {
        double mu = buf[k] / M, var = buf[C + k] / M - mu * mu;
        if (var < 0.0) var = 0.0; /* rounding when the variance is ~0 */
        mean[k] = (float)mu;
        if (!c->recompute) {
            rm[k] = (1.0f - mom) * rm[k] + mom * mean[k];
            rv[k] = (1.0f - mom) * rv[k] + mom * (float)(var * M / (M - 1));
        }
        rstd[k] = 1.0f / sqrtf((float)var + f.eps);
    }
    *f.mode = 2.0f;
    memcpy((char *)c->aux + bn_count_off(C), &M, sizeof M);
    return bn_fwd_apply(c, &f);
}

/* aux layout: see bn_count_off (mode 1.0 training, 0.0 eval here). */
static dt_status bn_forward(const dt_op_ctx *c) {
    if (c->run->training && c->run->sync_fn) return bn_forward_sync(c);
    bn_fwd f = bn_fwd_of(c);
    int64_t C = f.gm.C;
    float *rm = f.rm, *rv = f.rv, *mean = f.mean, *rstd = f.rstd;
    const float mom = f.mom, eps = f.eps;
    if (c->run->training) {
        int64_t M = f.gm.N * f.gm.P;
        if (M < 2) {
            char s[64];
            return dt_error_set(DT_ERR_SHAPE,
                                "%s: training needs more than 1 value per channel (x %s)", OP,
                                dt_shape_str(s, sizeof s, f.xt->ndim, f.xt->shape));
        }
        float *var = rstd; /* computed in place, then turned into rstd */
        bn_batch_stats(mean, var, f.x, &f.gm);
        for (int64_t k = 0; k < C; k++) {
            if (!c->recompute) {
                rm[k] = (1.0f - mom) * rm[k] + mom * mean[k];
                rv[k] = (1.0f - mom) * rv[k] + mom * (float)((double)var[k] * M / (M - 1));
            }
            rstd[k] = 1.0f / sqrtf(var[k] + eps);
        }
        *f.mode = 1.0f;
    } else {
        for (int64_t k = 0; k < C; k++) {
            mean[k] = rm[k];
            rstd[k] = 1.0f / sqrtf(rv[k] + eps);
        }
        *f.mode = 0.0f;
    }
    return bn_fwd_apply(c, &f);
}

/* Channels [c0, c1) of gy, x [N, C, P]: sg = sum gy, sgx = sum gy * (x - mean) (float partials
 * per row, summed in double; arrays indexed from c0). */
static void bn_block_grad_sums(float *gy, const float *x, const float *mean, const bn_geom *gm,
                               int64_t c0, int64_t c1, double *sg, double *sgx, const bn_epi *e) {
    if (gm->blk) {
        (gm->blk == 16 ? dt_bn16_block_grad_sums : dt_bn8_block_grad_sums)(gy, x, mean, gm, c0, c1,
                                                                           sg, sgx, e);
        return;
    }
    int64_t N = gm->N, C = gm->C, P = gm->P;
    for (int64_t c = c0; c < c1; c++) sg[c - c0] = 0.0, sgx[c - c0] = 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = c0; c < c1; c++) {
            int64_t off = (n * C + c) * P;
            float *g = gy + off;
            const float *xp = x + off;
            float a = 0.0f, d = 0.0f, m = mean[c];
            if (e->relu) { /* relu's backward, in place (each row passes here once) */
                const float *op = e->out + off;
#pragma omp simd
                for (int64_t i = 0; i < P; i++) g[i] = g[i] * (op[i] > 0.0f ? 1.0f : 0.0f);
            }
#pragma omp simd reduction(+ : a, d)
            for (int64_t i = 0; i < P; i++) {
                a += g[i];
                d += g[i] * (xp[i] - m);
            }
            sg[c - c0] += a, sgx[c - c0] += d;
        }
}

/* o [P] (+)= k * g + u * (x - m) + v: one row of an input gradient. */
static inline void bn_gx_row_plain(float *o, const float *g, const float *xp, float k, float u,
                                   float m, float v, float bx, int64_t P) {
    if (bx != 0.0f) {
#pragma omp simd
        for (int64_t i = 0; i < P; i++) o[i] += k * g[i] + u * (xp[i] - m) + v;
    } else {
#pragma omp simd
        for (int64_t i = 0; i < P; i++) o[i] = k * g[i] + u * (xp[i] - m) + v;
    }
}

/* gr [P] (+)= g: the residual's gradient row, as add's backward. */
static inline void bn_gres_row(float *gr, float br, const float *g, int64_t P) {
    if (br != 0.0f) {
#pragma omp simd
        for (int64_t i = 0; i < P; i++) gr[i] += g[i];
    } else {
        memcpy(gr, g, (size_t)P * sizeof *gr);
    }
}

/* Row `off` of the second sweep: the input gradient (when gx) and the residual's (when e->gres),
 * from gy already through the ReLU. */
static inline void bn_gx_row(float *gx, const float *gy, const float *x, int64_t off, float k,
                             float u, float m, float v, float bx, int64_t P, const bn_epi *e) {
    /* gx before the residual's: when the residual is x itself, both are one buffer, which the
     * graph has x's slot write first (beta 0) and the residual's add to (beta 1). */
    if (gx) bn_gx_row_plain(gx + off, gy + off, x + off, k, u, m, v, bx, P);
    if (e->gres) bn_gres_row(e->gres + off, e->bres, gy + off, P);
}

/* The second sweep over channels [c0, c1) (k, u, v indexed from c0): gx (+)= k * gy + u * (x -
 * mean) + v when gx, and the residual's gradient. */
static void bn_block_gx(float *gx, float bx, const float *gy, const float *x, const float *mean,
                        const float *k, const float *u, const float *v, const bn_geom *g,
                        int64_t c0, int64_t c1, const bn_epi *e) {
    if (g->blk) {
        (g->blk == 16 ? dt_bn16_block_gx : dt_bn8_block_gx)(gx, bx, gy, x, mean, k, u, v, g, c0, c1,
                                                            e);
        return;
    }
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t c = c0; c < c1; c++)
            bn_gx_row(gx, gy, x, (n * g->C + c) * g->P, k[c - c0], u[c - c0], mean[c], v[c - c0],
                      bx, g->P, e);
}

/* Backward over x, gy [N, C, P] with the mean/rstd used forward. With xhat = (x - mean) * rstd:
 *   gb = sum gy,  gw = sum gy * xhat
 *   training: gx = w * rstd * (gy - gb / M - xhat * gw / M)   (mean and var depend on x)
 *   eval:     gx = w * rstd * gy                               (constants) */
static void bn_backward_kernel(float *gx, float bx, float *gw, float bw, float *gb, float bb,
                               float *gy, const float *x, const float *mean, const float *rstd,
                               const float *w, int training, const bn_geom *g, const bn_epi *e) {
    double M = (double)g->N * (double)g->P;
    int64_t B = bn_block(g), C = g->C;
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += B) {
        int64_t c1 = c0 + B < C ? c0 + B : C;
        double sg[BN_BLOCK], sgx[BN_BLOCK]; /* sum gy, sum gy * (x - mean) */
        float k[BN_BLOCK], u[BN_BLOCK], v[BN_BLOCK];
        bn_block_grad_sums(gy, x, mean, g, c0, c1, sg, sgx, e);
        for (int64_t c = c0; c < c1; c++) {
            double s = sg[c - c0], sx = sgx[c - c0];
            float r = rstd[c], gbc = (float)s, gwc = (float)(sx * r);
            if (gb) gb[c] = (bb != 0.0f ? gb[c] : 0.0f) + gbc;
            if (gw) gw[c] = (bw != 0.0f ? gw[c] : 0.0f) + gwc;
            /* training: gx = k * (gy - gb/M - (x - mean) * r^2 * sgx / M) = k*gy + u*(x - mean)
             * + v */
            float kc = w[c] * r;
            k[c - c0] = kc;
            u[c - c0] = training ? (float)(-(double)kc * r * r * sx / M) : 0.0f;
            v[c - c0] = training ? (float)(-(double)kc * s / M) : 0.0f;
        }
        if (!gx && !e->gres) continue;
        bn_block_gx(gx, bx, gy, x, mean, k, u, v, g, c0, c1, e);
    }
}

/* Backward of a synchronised training forward (ws: [2C] doubles). With xhat = (x - mean) * rstd
 * and M the global count:
 *   gb = sum gy,  gw = sum gy * xhat            (this worker's rows)
 *   gx = w * rstd * (gy - Gb / M - xhat * Gw / M)  with Gb, Gw the sums over all workers. */
static dt_status bn_backward_sync(const dt_op_ctx *c) {
    const dt_tensor *xt = &c->in[BN_X];
    bn_geom gm = bn_geom_of(c);
    int64_t N = gm.N, C = gm.C, P = gm.P;
    const float *mean = c->aux, *rstd = mean + C, *w = c->in[BN_W].data;
    const float *x = xt->data;
    float *gy = c->gout.data, *gx = c->gin[BN_X].data, *gw = c->gin[BN_W].data,
          *gb = c->gin[BN_B].data;
    float bx = c->gin_beta[BN_X], bw = c->gin_beta[BN_W], bb = c->gin_beta[BN_B];
    if (!c->run->sync_fn)
        return dt_error_set(DT_ERR_STATE,
                            "%s: backward of a forward with synchronised statistics, but the "
                            "reducer was removed (dt_graph_set_sync_batchnorm) in between",
                            OP);
    double M;
    memcpy(&M, (const char *)c->aux + bn_count_off(C), sizeof M);
    double *buf = c->ws; /* sum gy [C], sum gy * xhat [C] */
    bn_epi e = bn_epi_of(c);
    int64_t B = bn_block(&gm);
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += B) {
        int64_t c1 = c0 + B < C ? c0 + B : C;
        bn_block_grad_sums(gy, x, mean, &gm, c0, c1, buf + c0, buf + C + c0, &e);
        for (int64_t k = c0; k < c1; k++) {
            buf[C + k] *= rstd[k]; /* sum gy * xhat */
            if (gb) gb[k] = (bb != 0.0f ? gb[k] : 0.0f) + (float)buf[k];
            if (gw) gw[k] = (bw != 0.0f ? gw[k] : 0.0f) + (float)buf[C + k];
        }
    }
    /* No input gradient wanted (the same on every worker: same graph): nothing to exchange. */
    if (!gx) {
        if (e.gres) {
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < N * C; r++) bn_gres_row(e.gres + r * P, e.bres, gy + r * P, P);
        }
        return DT_OK;
    }
    dt_status s = c->run->sync_fn(c->run->sync_ud, buf, 2 * (size_t)C);
    if (s != DT_OK) return bn_sync_error(s, "all-reduce of the gradient sums in backward");
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += B) {
        int64_t c1 = c0 + B < C ? c0 + B : C;
        float kk[BN_BLOCK], u[BN_BLOCK], v[BN_BLOCK];
        for (int64_t k = c0; k < c1; k++) {
            float r = rstd[k];
            /* kk * (gy - Gb/M - (x - mean) * r * Gw / M) = kk*gy + u*(x - mean) + v */
            kk[k - c0] = w[k] * r;
            u[k - c0] = (float)(-(double)kk[k - c0] * r * buf[C + k] / M);
            v[k - c0] = (float)(-(double)kk[k - c0] * buf[k] / M);
        }
        bn_block_gx(gx, bx, gy, x, mean, kk, u, v, &gm, c0, c1, &e);
    }
    return DT_OK;
}

static dt_status bn_backward(const dt_op_ctx *c) {
    const dt_tensor *xt = &c->in[BN_X];
    bn_geom gm = bn_geom_of(c);
    const float *mean = c->aux, *rstd = mean + gm.C, *mode = rstd + gm.C;
    if (*mode == 2.0f) return bn_backward_sync(c);
    bn_epi e = bn_epi_of(c);
    bn_backward_kernel(c->gin[BN_X].data, c->gin_beta[BN_X], c->gin[BN_W].data, c->gin_beta[BN_W],
                       c->gin[BN_B].data, c->gin_beta[BN_B], c->gout.data, xt->data, mean, rstd,
                       c->in[BN_W].data, *mode != 0.0f, &gm, &e);
    return DT_OK;
}

static dt_status bn_prepare(dt_graph *g, dt_node *n) {
    size_t C = (size_t)n->t.shape[1];
    /* mean, rstd, mode; the global count for synchronised statistics */
    n->aux_bytes = bn_count_off((int64_t)C) + sizeof(double);
    n->ws_fwd = (2 * C + 1) * sizeof(double); /* synchronised forward's sums */
    n->ws_bwd = 2 * C * sizeof(double);       /* synchronised backward's sums */
    n->state = g;                             /* borrowed, for bn_running(); nothing to destroy */
    return DT_OK;
}

/* x, the residual and the output share one layout: plain or channel-blocked (only for 4-D x;
 * the graph checks the shape). */
static unsigned bn_layouts(const dt_graph *g, const dt_node *n) {
    (void)g;
    return n->t.ndim == 4 ? DT_LAY_IN(BN_X) | DT_LAY_IN(BN_RES) | DT_LAY_OUT | DT_LAY_TIED : 0u;
}

static const dt_op_def bn_def = {
    .name = "batchnorm2d",
    .flags = DT_OPF_BWD_IN(BN_X) | DT_OPF_BWD_IN(BN_W),
    .prepare = bn_prepare,
    .forward = bn_forward,
    .backward = bn_backward,
    .layouts = bn_layouts,
    DT_CUDA_OP_ENTRIES(bn),
};

/* With an epilogue; backward also reads the output (the ReLU mask: it is the next layer's input,
 * kept anyway), but not the residual. */
static const dt_op_def bn_fused_def = {
    .name = "batchnorm2d_fused",
    .flags = DT_OPF_BWD_IN(BN_X) | DT_OPF_BWD_IN(BN_W) | DT_OPF_BWD_OUT,
    .prepare = bn_prepare,
    .forward = bn_forward,
    .backward = bn_backward,
    .layouts = bn_layouts,
    DT_CUDA_OP_ENTRIES(bn),
};

/* Builder error with the op, what is wrong and all five shapes, under status `code`. */
static int bn_error(dt_status code, const char *what, const dt_tensor *const *ts) {
    char m[640];
    dt_shape_error(OP, what, 5, ts);
    snprintf(m, sizeof m, "%s", dt_last_error()); /* copy: the message buffer is reused */
    dt_error_set(code, "%s", m);
    return -1;
}

/* Is id a DT_PARAM_STATE parameter (the kernel writes running statistics into it)? */
static int is_state_param(dt_graph *g, int id) {
    const dt_node *nd = dt_graph_node(g, id);
    if (!nd || nd->kind != DT_NODE_PARAM || nd->param < 0) return 0;
    const dt_param_info *pi = dt_graph_param_info(g, nd->param);
    return pi && (pi->flags & DT_PARAM_STATE);
}

/* Builds plain (residual < 0, relu 0) or fused batchnorm; see the public builders. */
static int bn_build(dt_graph *g, int x, int weight, int bias, int running_mean, int running_var,
                    float momentum, float eps, int residual, int relu) {
    int ids[5] = {x, weight, bias, running_mean, running_var};
    if (dt_ids_bad(g, OP, 5, ids)) return -1;
    const dt_tensor *ts[5];
    for (int i = 0; i < 5; i++) ts[i] = dt_graph_shape(g, ids[i]);
    for (int i = 0; i < 5; i++)
        if (ts[i]->dtype != DT_F32)
            return bn_error(DT_ERR_DTYPE, "x, weight, bias, running_mean, running_var must be f32",
                            ts);
    if (ts[0]->ndim < 2 || ts[0]->shape[0] < 1 || ts[0]->shape[1] < 1)
        return dt_shape_error(OP, "x must be [N, C, ...] with N, C >= 1", 5, ts);
    int64_t C = ts[0]->shape[1];
    for (int i = 1; i < 5; i++)
        if (ts[i]->ndim != 1 || ts[i]->shape[0] != C)
            return dt_shape_error(OP, "weight, bias, running_mean, running_var must be [C]", 5, ts);
    if (!is_state_param(g, running_mean) || !is_state_param(g, running_var))
        return bn_error(DT_ERR_INVALID,
                        "running_mean/running_var must be params created with DT_PARAM_STATE", ts);
    if (!(momentum >= 0.0f && momentum <= 1.0f) || !(eps > 0.0f)) {
        char what[96];
        snprintf(what, sizeof what, "momentum %g must be in [0, 1] and eps %g > 0",
                 (double)momentum, (double)eps);
        return bn_error(DT_ERR_INVALID, what, ts);
    }
    const dt_tensor *xt = ts[0];
    float fp[2] = {momentum, eps};
    if (residual < 0 && !relu) {
        int64_t ip[2] = {running_mean, running_var};
        return dt_node_add(g, &bn_def, 3, ids, DT_F32, xt->ndim, xt->shape, ip, 2, fp, 2);
    }
    int in[4] = {x, weight, bias, residual};
    if (residual >= 0) {
        if (dt_ids_bad(g, OP, 1, &residual)) return -1;
        const dt_tensor *rt = dt_graph_shape(g, residual);
        if (rt->dtype != DT_F32 || rt->ndim != xt->ndim ||
            memcmp(rt->shape, xt->shape, (size_t)xt->ndim * sizeof *xt->shape))
            return dt_shape_error(OP, "residual must be f32 of x's shape", 2,
                                  (const dt_tensor *[]){xt, rt});
    }
    int64_t ip[4] = {running_mean, running_var, relu != 0, residual >= 0};
    return dt_node_add(g, &bn_fused_def, residual >= 0 ? 4 : 3, in, DT_F32, xt->ndim, xt->shape, ip,
                       4, fp, 2);
}

int dt_batchnorm2d(dt_graph *g, int x, int weight, int bias, int running_mean, int running_var,
                   float momentum, float eps) {
    return bn_build(g, x, weight, bias, running_mean, running_var, momentum, eps, -1, 0);
}

int dt_batchnorm2d_fused(dt_graph *g, int x, int weight, int bias, int running_mean,
                         int running_var, float momentum, float eps, int residual, int relu) {
    return bn_build(g, x, weight, bias, running_mean, running_var, momentum, eps, residual, relu);
}
