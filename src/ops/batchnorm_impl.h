/* Batchnorm internals shared by the plain kernels (batchnorm.c) and the channel-blocked ones
 * (batchnorm_blocked.inc, compiled as batchnorm_c16.c and batchnorm_c8.c). */
#ifndef DTRAIN_OPS_BATCHNORM_IMPL_H
#define DTRAIN_OPS_BATCHNORM_IMPL_H

#include <stdint.h>

/* The node's parameters (batchnorm.c builds them; cnn_cuda.c reads them too). */
enum { BN_MOMENTUM, BN_EPS }; /* node->fp[] */
/* node->ip[]: ids of the running statistics, fused epilogue: ReLU after, residual input present */
enum { BN_RM, BN_RV, BN_RELU, BN_HAS_RES };
enum { BN_X, BN_W, BN_B, BN_RES }; /* inputs (BN_RES only when fused with an add) */

/* x [N, C, P] (P = product of the trailing dims); blk 16 or 8: stored [N, C/blk, P, blk]
 * (nChw16c, nChw8c), blk 0: plain. */
typedef struct bn_geom {
    int64_t N, C, P;
    int blk;
} bn_geom;

/* The fused epilogue of one call (all zero / NULL for plain batchnorm). Forward: y = relu?(bn(x)
 * + res?). Backward: the gradient reaching batchnorm is g = gout * (out > 0 ? 1 : 0) with a ReLU
 * (relu's own backward, so -0.0 and NaN come out as there), else gout; it is formed in place in
 * gout, row by row in the first sweep, so that the rest runs the plain kernels on it (the same
 * bits: the masking inside those loops changes how the compiler contracts and sums them). The
 * residual's gradient is g too, written (bres 0) or added (bres 1) like add's backward. */
typedef struct bn_epi {
    int relu;
    const float *res; /* forward: residual (x's shape and layout), or NULL */
    const float *out; /* backward: the op's output, for the ReLU mask */
    float *gres;      /* backward: residual gradient, or NULL */
    float bres;
} bn_epi;

/* Channel-blocked kernels, dt_bn16_* for blk 16 and dt_bn8_* for blk 8; [c0, c1) are multiples of
 * blk and arrays are indexed from c0. Each channel's sums run over n in order on the calling
 * thread, as in the plain kernels, so results do not depend on the thread count.
 *   block_moments    s = sum x, m = float(s / M), v = sum (x - m)^2 (two passes, M = N * P)
 *   apply            y = epilogue(x * alpha + beta), alpha = rstd * w, beta = b - mean * alpha
 *                    (all channels, parallel over samples and blocks)
 *   block_grad_sums  ReLU mask applied to gy in place (with e->relu), then sg = sum gy,
 *                    sgx = sum gy * (x - mean)
 *   block_gx         gx (+)= k * gy + u * (x - mean) + v (bx 0 or 1; gx may be NULL) and
 *                    e->gres (+)= gy */
#define BN_BLOCKED_DECLARE(p)                                                                      \
    void p##_block_moments(const float *x, const bn_geom *g, int64_t c0, int64_t c1, double *s,    \
                           float *m, double *v);                                                   \
    void p##_apply(float *y, const float *x, const float *mean, const float *rstd, const float *w, \
                   const float *b, const bn_geom *g, const bn_epi *e);                             \
    void p##_block_grad_sums(float *gy, const float *x, const float *mean, const bn_geom *g,       \
                             int64_t c0, int64_t c1, double *sg, double *sgx, const bn_epi *e);    \
    void p##_block_gx(float *gx, float bx, const float *gy, const float *x, const float *mean,     \
                      const float *k, const float *u, const float *v, const bn_geom *g,            \
                      int64_t c0, int64_t c1, const bn_epi *e);
BN_BLOCKED_DECLARE(dt_bn16)
BN_BLOCKED_DECLARE(dt_bn8)
#undef BN_BLOCKED_DECLARE

#endif
