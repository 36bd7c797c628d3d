/* Batchnorm kernels for channel-blocked activations (DT_LAYOUT_C16: x [N, C/16, P, 16]).
 *
 * In this layout one sample's block of 16 channels is P consecutive 16-float vectors, so every
 * sweep streams through memory with the 16 channels in the SIMD lanes: no per-channel rows at
 * all. Sums: each (sample, channel) row is summed in float with four interleaved partials (the
 * plain kernels' SIMD reduction has comparable partial lengths), then accumulated over samples
 * in double. The formulas are the plain kernels' (batchnorm.c), so the two layouts agree to
 * rounding; the order of the float sums differs, so not to the bit. */
#include <string.h>

#include "ops/batchnorm_impl.h"

/* The fused ReLU's selects vectorise only without trapping math (see batchnorm.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

enum { L = 16 };

/* Start of sample n's channel block cb (cb counts blocks from 0). */
static inline int64_t blk(const bn_geom *g, int64_t n, int64_t cb) {
    return (n * (g->C / L) + cb) * g->P * L;
}

/* acc[l] = sum over p of f(p, l) for one [P, 16] block, four partials per lane. */
#define BLOCK_SUM(acc, P, EXPR)                                                                    \
    do {                                                                                           \
        float a0[L] = {0}, a1[L] = {0}, a2[L] = {0}, a3[L] = {0};                                  \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 4 <= (P); i_ += 4) {                                                           \
            _Pragma("omp simd") for (int l = 0; l < L; l++) {                                      \
                int64_t p_ = i_;                                                                   \
                a0[l] += (EXPR);                                                                   \
                p_ = i_ + 1;                                                                       \
                a1[l] += (EXPR);                                                                   \
                p_ = i_ + 2;                                                                       \
                a2[l] += (EXPR);                                                                   \
                p_ = i_ + 3;                                                                       \
                a3[l] += (EXPR);                                                                   \
            }                                                                                      \
        }                                                                                          \
        for (; i_ < (P); i_++) {                                                                   \
            _Pragma("omp simd") for (int l = 0; l < L; l++) {                                      \
                int64_t p_ = i_;                                                                   \
                a0[l] += (EXPR);                                                                   \
            }                                                                                      \
        }                                                                                          \
        for (int l = 0; l < L; l++) (acc)[l] = (a0[l] + a1[l]) + (a2[l] + a3[l]);                  \
    } while (0)

void bn16_block_moments(const float *x, const bn_geom *g, int64_t c0, int64_t c1, double *s,
                        float *m, double *v) {
    double M = (double)g->N * (double)g->P;
    int64_t P = g->P;
    for (int64_t c = c0; c < c1; c++) s[c - c0] = 0.0, v[c - c0] = 0.0;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t cb = c0 / L; cb < c1 / L; cb++) {
            const float *xp = x + blk(g, n, cb);
            float acc[L];
            BLOCK_SUM(acc, P, xp[p_ * L + l]);
            for (int l = 0; l < L; l++) s[cb * L + l - c0] += acc[l];
        }
    for (int64_t c = c0; c < c1; c++) m[c - c0] = (float)(s[c - c0] / M);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t cb = c0 / L; cb < c1 / L; cb++) {
            const float *xp = x + blk(g, n, cb), *mb = m + cb * L - c0;
            float acc[L];
            BLOCK_SUM(acc, P, (xp[p_ * L + l] - mb[l]) * (xp[p_ * L + l] - mb[l]));
            for (int l = 0; l < L; l++) v[cb * L + l - c0] += acc[l];
        }
}

/* One [P, 16] block of the fused forward; RELU and RES are constants at each call site. */
static inline void apply_block(float *yp, const float *xp, const float *rp, const float *al,
                               const float *be, int64_t P, int relu, int res) {
    for (int64_t i = 0; i < P; i++) {
#pragma omp simd
        for (int l = 0; l < L; l++) {
            float t = xp[i * L + l] * al[l] + be[l];
            if (res) t = t + rp[i * L + l];
            yp[i * L + l] = relu ? (t < 0.0f ? 0.0f : t) : t;
        }
    }
}

void bn16_apply(float *y, const float *x, const float *mean, const float *rstd, const float *w,
                const float *b, const bn_geom *g, const bn_epi *e) {
    int64_t CB = g->C / L;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t cb = 0; cb < CB; cb++) {
            float al[L], be[L];
            for (int l = 0; l < L; l++) {
                int64_t c = cb * L + l;
                al[l] = rstd[c] * w[c], be[l] = b[c] - mean[c] * al[l];
            }
            int64_t off = blk(g, n, cb);
            const float *xp = x + off, *rp = e->res ? e->res + off : NULL;
            float *yp = y + off;
            if (e->res && e->relu)
                apply_block(yp, xp, rp, al, be, g->P, 1, 1);
            else if (e->res)
                apply_block(yp, xp, rp, al, be, g->P, 0, 1);
            else if (e->relu)
                apply_block(yp, xp, NULL, al, be, g->P, 1, 0);
            else
                apply_block(yp, xp, NULL, al, be, g->P, 0, 0);
        }
}

/* One 16-lane row of the first backward sweep: gy through the ReLU mask (written back when
 * RELU), a += gy, d += gy * (x - m). */
static inline void grad_sums_row(float *gp, const float *op, const float *xp, const float *mb,
                                 int relu, float *a, float *d) {
#pragma omp simd
    for (int l = 0; l < L; l++) {
        float g = gp[l];
        if (relu) gp[l] = g = g * (op[l] > 0.0f ? 1.0f : 0.0f);
        a[l] += g;
        d[l] += g * (xp[l] - mb[l]);
    }
}

/* One [P, 16] block: the mask and both sums in one pass over memory, with BLOCK_SUM's four
 * partials per lane (the same additions as separate passes would make). */
static inline void grad_sums_block(float *gp, const float *op, const float *xp, const float *mb,
                                   int64_t P, int relu, float *sa, float *sd) {
    float a[4][L] = {{0}}, d[4][L] = {{0}};
    int64_t i = 0;
    for (; i + 4 <= P; i += 4)
        for (int k = 0; k < 4; k++)
            grad_sums_row(gp + (i + k) * L, relu ? op + (i + k) * L : NULL, xp + (i + k) * L, mb,
                          relu, a[k], d[k]);
    for (; i < P; i++)
        grad_sums_row(gp + i * L, relu ? op + i * L : NULL, xp + i * L, mb, relu, a[0], d[0]);
    for (int l = 0; l < L; l++) {
        sa[l] = (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
        sd[l] = (d[0][l] + d[1][l]) + (d[2][l] + d[3][l]);
    }
}

void bn16_block_grad_sums(float *gy, const float *x, const float *mean, const bn_geom *g,
                          int64_t c0, int64_t c1, double *sg, double *sgx, const bn_epi *e) {
    for (int64_t c = c0; c < c1; c++) sg[c - c0] = 0.0, sgx[c - c0] = 0.0;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t cb = c0 / L; cb < c1 / L; cb++) {
            int64_t off = blk(g, n, cb);
            float a[L], d[L];
            if (e->relu) /* relu's backward, in place (each block passes here once) */
                grad_sums_block(gy + off, e->out + off, x + off, mean + cb * L, g->P, 1, a, d);
            else
                grad_sums_block(gy + off, NULL, x + off, mean + cb * L, g->P, 0, a, d);
            for (int l = 0; l < L; l++) sg[cb * L + l - c0] += a[l], sgx[cb * L + l - c0] += d[l];
        }
}

void bn16_block_gx(float *gx, float bx, const float *gy, const float *x, const float *mean,
                   const float *k, const float *u, const float *v, const bn_geom *g, int64_t c0,
                   int64_t c1, const bn_epi *e) {
    int64_t P = g->P;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t cb = c0 / L; cb < c1 / L; cb++) {
            int64_t off = blk(g, n, cb);
            const float *gp = gy + off, *xp = x + off, *mb = mean + cb * L;
            const float *kb = k + cb * L - c0, *ub = u + cb * L - c0, *vb = v + cb * L - c0;
            /* gx before the residual's gradient, which may be the same buffer (batchnorm.c) */
            for (int64_t i = 0; gx && i < P; i++) {
                float *o = gx + off + i * L;
                const float *gi = gp + i * L, *xi = xp + i * L;
                if (bx != 0.0f) {
#pragma omp simd
                    for (int l = 0; l < L; l++)
                        o[l] += kb[l] * gi[l] + ub[l] * (xi[l] - mb[l]) + vb[l];
                } else {
#pragma omp simd
                    for (int l = 0; l < L; l++)
                        o[l] = kb[l] * gi[l] + ub[l] * (xi[l] - mb[l]) + vb[l];
                }
            }
            if (e->gres) {
                float *gr = e->gres + off;
                if (e->bres != 0.0f) {
#pragma omp simd
                    for (int64_t i = 0; i < P * L; i++) gr[i] += gp[i];
                } else {
                    memcpy(gr, gp, (size_t)(P * L) * sizeof *gr);
                }
            }
        }
}
