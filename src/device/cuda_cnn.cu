// Batchnorm (with the fused residual add and ReLU), pooling and the per-channel bias on CUDA
// (include/dtrain/device_cuda.h), the math of src/ops/batchnorm.c and src/ops/pool.c.
//
// Per-channel reductions over x [N, C, P] are deterministic without float atomics: channel c's
// M = N * P values are cut into S fixed chunks (S depends on the shape only), block (s, c) sums
// its chunk in double with a fixed tree, and a second kernel adds the S partials in order.
// Pool backwards gather instead of scatter: each input element adds, in output order, the
// outputs whose window holds it -- the CPU's order of additions, so the same bits.
#include <math.h>
#include <stdint.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_common.cuh"

#define RED_THREADS 256
#define RED_CHUNK 4096  /* values per reduction block at least, when there are enough */
#define RED_BLOCKS 1024 /* aim: about this many reduction blocks in all (C * S) */

static unsigned ew_blocks(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b > 16384 ? 16384 : b < 1 ? 1 : b);
}

#define EW_LOOP(i, n)                                                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

// Chunks per channel for M values and C channels: a function of the shape only.
static int64_t red_splits(int64_t M, int64_t C) {
    int64_t s = RED_BLOCKS / C, by_size = (M + RED_CHUNK - 1) / RED_CHUNK;
    if (s > by_size) s = by_size;
    return s < 1 ? 1 : s;
}

// The chunk [j0, j1) of s of S over M values.
__device__ inline void chunk_of(int64_t M, int64_t S, int64_t s, int64_t *j0, int64_t *j1) {
    const int64_t L = (M + S - 1) / S;
    *j0 = s * L;
    *j1 = *j0 + L < M ? *j0 + L : M;
}

// The element of channel c at its j-th value (j = n * P + p) in [N, C, P].
__device__ inline int64_t chan_at(int64_t c, int64_t C, int64_t P, int64_t j) {
    return ((j / P) * C + c) * P + j % P;
}

// Sum of x over values [j0, j1) of channel c, by the whole block (every thread gets it); the
// name carries dt_block_sum so the CPU emulation runs the calling kernels threaded.
__device__ inline double dt_block_sum_chan(const float *x, int64_t c, int64_t C, int64_t P,
                                           int64_t j0, int64_t j1) {
    __shared__ double sh[32];
    double a = 0.0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) a += (double)x[chan_at(c, C, P, j)];
    return dt_block_sum(a, sh);
}

// ---- per-channel bias ---------------------------------------------------------------------

__global__ void bias_add_kernel(float *y, const float *b, int64_t C, int64_t P, int64_t n) {
    EW_LOOP(i, n) y[i] += b[(i / P) % C];
}

// One block per channel: db[c] (+)= sum gy over N, P.
__global__ void bias_grad_kernel(float *db, const float *gy, int64_t C, int64_t P, int64_t M,
                                 int accumulate) {
    const int64_t c = blockIdx.x;
    const double t = dt_block_sum_chan(gy, c, C, P, 0, M);
    if (threadIdx.x == 0) db[c] = (accumulate ? db[c] : 0.0f) + (float)t;
}

static dt_status nchw_check(const char *op, int64_t N, int64_t C, int64_t P) {
    if (N < 1 || C < 1 || P < 1 || C > 65535 || N > INT32_MAX / C)
        return dt_error_set(DT_ERR_SHAPE, "%s: N %lld, C %lld, P %lld (need >= 1, C <= 65535)", op,
                            (long long)N, (long long)C, (long long)P);
    return DT_OK;
}

extern "C" dt_status dt_cuda_bias_add(dt_stream *s, float *y, const float *b, int64_t N, int64_t C,
                                      int64_t P) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda bias add", &cs);
    if (st == DT_OK) st = nchw_check("cuda bias add", N, C, P);
    if (st != DT_OK) return st;
    if (!y || !b) return dt_error_set(DT_ERR_INVALID, "cuda bias add: NULL y or b");
    bias_add_kernel<<<ew_blocks(N * C * P), 256, 0, cs>>>(y, b, C, P, N * C * P);
    return dt_cuda_launched(s, "cuda bias add");
}

extern "C" dt_status dt_cuda_bias_grad(dt_stream *s, float *db, const float *gy, int64_t N,
                                       int64_t C, int64_t P, int accumulate) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda bias grad", &cs);
    if (st == DT_OK) st = nchw_check("cuda bias grad", N, C, P);
    if (st != DT_OK) return st;
    if (!db || !gy) return dt_error_set(DT_ERR_INVALID, "cuda bias grad: NULL db or gy");
    bias_grad_kernel<<<(unsigned)C, RED_THREADS, 0, cs>>>(db, gy, C, P, N * P, accumulate);
    return dt_cuda_launched(s, "cuda bias grad");
}

// ---- batchnorm ----------------------------------------------------------------------------

// work: part [C, S, 2] doubles, then k, u, v [C] floats (backward).
extern "C" size_t dt_cuda_bn_work(int64_t N, int64_t C, int64_t P) {
    if (N < 1 || C < 1 || P < 1) return 0;
    const int64_t S = red_splits(N * P, C);
    return (size_t)(C * S * 2) * sizeof(double) + (size_t)(3 * C) * sizeof(float);
}

// part[c, s, 0] = sum of x over chunk s of channel c (grid (S, C)).
__global__ void bn_part_sum(double *part, const float *x, int64_t C, int64_t P, int64_t M) {
    const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
    int64_t j0, j1;
    chunk_of(M, S, s, &j0, &j1);
    const double t = dt_block_sum_chan(x, c, C, P, j0, j1);
    if (threadIdx.x == 0) part[(c * S + s) * 2] = t;
}

// mean[c] = float(sum x / M), the partials added in order (one thread per channel).
__global__ void bn_mean_kernel(float *mean, const double *part, int64_t C, int64_t S, int64_t M) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double t = 0.0;
    for (int64_t s = 0; s < S; s++) t += part[(c * S + s) * 2];
    mean[c] = (float)(t / (double)M);
}

// part[c, s, 1] = sum of (x - mean)^2 over chunk s of channel c, each square a float as the
// CPU's row partials have it.
__global__ void bn_part_sqdev(double *part, const float *x, const float *mean, int64_t C, int64_t P,
                              int64_t M) {
    __shared__ double sh[32];
    const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
    int64_t j0, j1;
    chunk_of(M, S, s, &j0, &j1);
    const float m = mean[c];
    double a = 0.0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        const float d = x[chan_at(c, C, P, j)] - m;
        a += (double)(d * d);
    }
    a = dt_block_sum(a, sh);
    if (threadIdx.x == 0) part[(c * S + s) * 2 + 1] = a;
}

// var = float(sum sqdev / M); running statistics (update_running); rstd = 1 / sqrtf(var + eps).
__global__ void bn_train_stats(float *rstd, float *rm, float *rv, const float *mean,
                               const double *part, int64_t C, int64_t S, int64_t M, float mom,
                               float eps, int update_running) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double t = 0.0;
    for (int64_t s = 0; s < S; s++) t += part[(c * S + s) * 2 + 1];
    const float var = (float)(t / (double)M);
    if (update_running) {
        rm[c] = (1.0f - mom) * rm[c] + mom * mean[c];
        rv[c] = (1.0f - mom) * rv[c] + mom * (float)((double)var * (double)M / (double)(M - 1));
    }
    rstd[c] = 1.0f / sqrtf(var + eps);
}

__global__ void bn_eval_stats(float *mean, float *rstd, const float *rm, const float *rv, int64_t C,
                              float eps) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    mean[c] = rm[c];
    rstd[c] = 1.0f / sqrtf(rv[c] + eps);
}

// y = relu?(x * alpha + beta + res?), alpha = rstd w, beta = b - mean alpha (the CPU's order).
__global__ void bn_apply_kernel(float *y, const float *x, const float *res, const float *mean,
                                const float *rstd, const float *w, const float *b, int relu,
                                int64_t C, int64_t P, int64_t n) {
    EW_LOOP(i, n) {
        const int64_t c = (i / P) % C;
        const float alpha = rstd[c] * w[c], beta = b[c] - mean[c] * alpha;
        float t = x[i] * alpha + beta;
        if (res) t = t + res[i];
        y[i] = relu ? (t < 0.0f ? 0.0f : t) : t;
    }
}

static unsigned chan_blocks(int64_t C) {
    return (unsigned)((C + 127) / 128);
}

extern "C" dt_status dt_cuda_bn_fwd(dt_stream *s, float *y, float *mean, float *rstd, float *rm,
                                    float *rv, const float *x, const float *w, const float *b,
                                    const float *res, int relu, int64_t N, int64_t C, int64_t P,
                                    float momentum, float eps, int mode, void *work) {
    const char *op = "cuda batchnorm fwd";
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st == DT_OK) st = nchw_check(op, N, C, P);
    if (st != DT_OK) return st;
    if (mode != DT_CUDA_BN_EVAL && mode != DT_CUDA_BN_TRAIN && mode != DT_CUDA_BN_RECOMPUTE)
        return dt_error_set(DT_ERR_INVALID, "%s: unknown mode %d", op, mode);
    if (!y || !mean || !rstd || !rm || !rv || !x || !w || !b || (mode != DT_CUDA_BN_EVAL && !work))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL argument", op);
    const int64_t M = N * P, n = N * C * P;
    if (mode == DT_CUDA_BN_EVAL) {
        bn_eval_stats<<<chan_blocks(C), 128, 0, cs>>>(mean, rstd, rm, rv, C, eps);
    } else {
        if (M < 2)
            return dt_error_set(DT_ERR_SHAPE,
                                "%s: training needs more than 1 value per channel (N %lld, P %lld)",
                                op, (long long)N, (long long)P);
        const int64_t S = red_splits(M, C);
        double *part = (double *)work;
        const dim3 grid((unsigned)S, (unsigned)C);
        bn_part_sum<<<grid, RED_THREADS, 0, cs>>>(part, x, C, P, M);
        bn_mean_kernel<<<chan_blocks(C), 128, 0, cs>>>(mean, part, C, S, M);
        bn_part_sqdev<<<grid, RED_THREADS, 0, cs>>>(part, x, mean, C, P, M);
        bn_train_stats<<<chan_blocks(C), 128, 0, cs>>>(rstd, rm, rv, mean, part, C, S, M, momentum,
                                                       eps, mode == DT_CUDA_BN_TRAIN);
    }
    bn_apply_kernel<<<ew_blocks(n), 256, 0, cs>>>(y, x, res, mean, rstd, w, b, relu, C, P, n);
    return dt_cuda_launched(s, op);
}

// The backward's first sweep over chunk s of channel c: gy masked in place by out > 0 (relu),
// part[c, s] = {sum gy, sum gy (x - mean)}.
__global__ void bn_bwd_part(double *part, float *gy, const float *x, const float *out,
                            const float *mean, int relu, int64_t C, int64_t P, int64_t M) {
    __shared__ double sh[32];
    const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
    int64_t j0, j1;
    chunk_of(M, S, s, &j0, &j1);
    const float m = mean[c];
    double a = 0.0, d = 0.0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        const int64_t k = chan_at(c, C, P, j);
        float g = gy[k];
        if (relu) {
            g = g * (out[k] > 0.0f ? 1.0f : 0.0f);
            gy[k] = g;
        }
        a += (double)g;
        d += (double)(g * (x[k] - m));
    }
    a = dt_block_sum(a, sh);
    d = dt_block_sum(d, sh);
    if (threadIdx.x == 0) {
        part[(c * S + s) * 2] = a;
        part[(c * S + s) * 2 + 1] = d;
    }
}

// gb, gw and the coefficients kuv [3, C] of gx = k gy + u (x - mean) + v (the CPU's formulas).
__global__ void bn_bwd_coef(float *kuv, float *gw, float *gb, const double *part, const float *rstd,
                            const float *w, int training, int acc, int64_t C, int64_t S,
                            int64_t M) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sg = 0.0, sx = 0.0;
    for (int64_t s = 0; s < S; s++) {
        sg += part[(c * S + s) * 2];
        sx += part[(c * S + s) * 2 + 1];
    }
    const float r = rstd[c], gbc = (float)sg, gwc = (float)(sx * r);
    if (gb) gb[c] = (acc & DT_CUDA_BN_ACC_GB ? gb[c] : 0.0f) + gbc;
    if (gw) gw[c] = (acc & DT_CUDA_BN_ACC_GW ? gw[c] : 0.0f) + gwc;
    const float kc = w[c] * r;
    kuv[c] = kc;
    kuv[C + c] = training ? (float)(-(double)kc * r * r * sx / (double)M) : 0.0f;
    kuv[2 * C + c] = training ? (float)(-(double)kc * sg / (double)M) : 0.0f;
}

// gx (+)= k gy + u (x - mean) + v, then gres (+)= gy: gx first, so that when both are one
// buffer (the residual is x) the residual's gradient adds to the input's, as on the CPU.
__global__ void bn_bwd_apply(float *gx, float *gres, const float *gy, const float *x,
                             const float *mean, const float *kuv, int acc, int64_t C, int64_t P,
                             int64_t n) {
    EW_LOOP(i, n) {
        const int64_t c = (i / P) % C;
        const float g = gy[i];
        if (gx) {
            const float t = kuv[c] * g + kuv[C + c] * (x[i] - mean[c]) + kuv[2 * C + c];
            gx[i] = acc & DT_CUDA_BN_ACC_GX ? gx[i] + t : t;
        }
        if (gres) gres[i] = acc & DT_CUDA_BN_ACC_GRES ? gres[i] + g : g;
    }
}

extern "C" dt_status dt_cuda_bn_bwd(dt_stream *s, float *gx, float *gw, float *gb, float *gres,
                                    float *gy, const float *x, const float *out, const float *mean,
                                    const float *rstd, const float *w, int training, int relu,
                                    int64_t N, int64_t C, int64_t P, int accumulate, void *work) {
    const char *op = "cuda batchnorm bwd";
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st == DT_OK) st = nchw_check(op, N, C, P);
    if (st != DT_OK) return st;
    if (!gy || !x || !mean || !rstd || !w || !work || (relu && !out))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL argument", op);
    const int64_t M = N * P, n = N * C * P, S = red_splits(M, C);
    double *part = (double *)work;
    float *kuv = (float *)(part + C * S * 2);
    bn_bwd_part<<<dim3((unsigned)S, (unsigned)C), RED_THREADS, 0, cs>>>(part, gy, x, out, mean,
                                                                        relu, C, P, M);
    bn_bwd_coef<<<chan_blocks(C), 128, 0, cs>>>(kuv, gw, gb, part, rstd, w, training, accumulate, C,
                                                S, M);
    if (gx || gres)
        bn_bwd_apply<<<ew_blocks(n), 256, 0, cs>>>(gx, gres, gy, x, mean, kuv, accumulate, C, P, n);
    return dt_cuda_launched(s, op);
}

// ---- pooling ------------------------------------------------------------------------------

// The outputs along one axis whose window (stride st, padding pad, kernel k) holds input i:
// [*lo, *hi) within [0, n_out).
__device__ inline void covering(int64_t i, int st, int pad, int k, int64_t n_out, int64_t *lo,
                                int64_t *hi) {
    const int64_t a = i + pad - k + 1; /* o * st >= a */
    *lo = a <= 0 ? 0 : (a + st - 1) / st;
    int64_t h = (i + pad) / st + 1;
    *hi = h < n_out ? h : n_out;
}

// Output i's plane and window rows [h0, h1), columns [w0, w1) clipped to the input; or, from
// covered_by, input i's plane and the output rows and columns whose windows hold it.
struct pool_win {
    int64_t plane, oh, ow, h0, h1, w0, w1;
};

__device__ inline pool_win window_of(const dt_cuda_pool2d &p, int64_t i) {
    pool_win q;
    q.ow = i % p.OW, q.oh = (i / p.OW) % p.OH, q.plane = i / (p.OW * p.OH);
    const int64_t h0 = q.oh * p.sh - p.ph, w0 = q.ow * p.sw - p.pw;
    q.h0 = h0 < 0 ? 0 : h0, q.h1 = h0 + p.kh > p.H ? p.H : h0 + p.kh;
    q.w0 = w0 < 0 ? 0 : w0, q.w1 = w0 + p.kw > p.W ? p.W : w0 + p.kw;
    return q;
}

__device__ inline pool_win covered_by(const dt_cuda_pool2d &p, int64_t i) {
    pool_win q;
    const int64_t w = i % p.W, h = (i / p.W) % p.H;
    q.plane = i / (p.W * p.H), q.oh = h, q.ow = w;
    covering(h, p.sh, p.ph, p.kh, p.OH, &q.h0, &q.h1);
    covering(w, p.sw, p.pw, p.kw, p.OW, &q.w0, &q.w1);
    return q;
}

__global__ void maxpool_fwd_kernel(float *y, int32_t *arg, const float *x, dt_cuda_pool2d p,
                                   int64_t n) {
    EW_LOOP(i, n) {
        const pool_win q = window_of(p, i);
        const int64_t h0 = q.h0, h1 = q.h1, w0 = q.w0, w1 = q.w1;
        const float *xp = x + q.plane * p.H * p.W;
        float cur = -INFINITY;
        int32_t at = (int32_t)(h0 * p.W + w0);
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
                const float v = xp[h * p.W + w];
                if (v > cur || isnan(v)) cur = v, at = (int32_t)(h * p.W + w);
            }
        y[i] = cur;
        arg[i] = at;
    }
}

__global__ void maxpool_bwd_kernel(float *gx, const float *gy, const int32_t *arg, dt_cuda_pool2d p,
                                   int accumulate, int64_t n) {
    EW_LOOP(i, n) {
        const pool_win q = covered_by(p, i);
        const int64_t oh0 = q.h0, oh1 = q.h1, ow0 = q.w0, ow1 = q.w1, pl = q.plane;
        const int32_t me = (int32_t)(i - pl * p.H * p.W);
        const int64_t base = pl * p.OH * p.OW;
        float acc = accumulate ? gx[i] : 0.0f;
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = ow0; ow < ow1; ow++) {
                const int64_t o = base + oh * p.OW + ow;
                if (arg[o] == me) acc += gy[o];
            }
        gx[i] = acc;
    }
}

// The divisor of window (oh, ow): its extent clipped to the padded input.
__device__ inline float avg_div(const dt_cuda_pool2d &p, int64_t oh, int64_t ow) {
    int64_t h0 = oh * p.sh - p.ph, w0 = ow * p.sw - p.pw, h1 = h0 + p.kh, w1 = w0 + p.kw;
    if (h1 > p.H + p.ph) h1 = p.H + p.ph;
    if (w1 > p.W + p.pw) w1 = p.W + p.pw;
    return (float)((h1 - h0) * (w1 - w0));
}

__global__ void avgpool_fwd_kernel(float *y, const float *x, dt_cuda_pool2d p, int64_t n) {
    EW_LOOP(i, n) {
        const pool_win q = window_of(p, i);
        const int64_t h0 = q.h0, h1 = q.h1, w0 = q.w0, w1 = q.w1;
        const float *xp = x + q.plane * p.H * p.W;
        float t = 0.0f;
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) t += xp[h * p.W + w];
        y[i] = t / avg_div(p, q.oh, q.ow);
    }
}

__global__ void avgpool_bwd_kernel(float *gx, const float *gy, dt_cuda_pool2d p, int accumulate,
                                   int64_t n) {
    EW_LOOP(i, n) {
        const pool_win q = covered_by(p, i);
        const int64_t oh0 = q.h0, oh1 = q.h1, ow0 = q.w0, ow1 = q.w1, pl = q.plane;
        const int64_t base = pl * p.OH * p.OW;
        float acc = accumulate ? gx[i] : 0.0f;
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = ow0; ow < ow1; ow++)
                acc += gy[base + oh * p.OW + ow] / avg_div(p, oh, ow);
        gx[i] = acc;
    }
}

// One block per plane: y = (float sum of the row) / P.
__global__ void gap_fwd_kernel(float *y, const float *x, int64_t P) {
    __shared__ float sh[32];
    const float *xp = x + (int64_t)blockIdx.x * P;
    float t = 0.0f;
    for (int64_t i = threadIdx.x; i < P; i += blockDim.x) t += xp[i];
    t = dt_block_sum(t, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = t / (float)P;
}

__global__ void gap_bwd_kernel(float *gx, const float *gy, int64_t P, int accumulate, int64_t n) {
    EW_LOOP(i, n) {
        const float v = gy[i / P] / (float)P;
        gx[i] = accumulate ? gx[i] + v : v;
    }
}

static dt_status pool_check(const char *op, const dt_cuda_pool2d *p) {
    if (!p) return dt_error_set(DT_ERR_INVALID, "%s: NULL geometry", op);
    const int ok = p->planes >= 1 && p->H >= 1 && p->W >= 1 && p->kh >= 1 && p->kw >= 1 &&
                   p->sh >= 1 && p->sw >= 1 && p->ph >= 0 && p->pw >= 0 && 2 * p->ph <= p->kh &&
                   2 * p->pw <= p->kw && p->H + 2 * p->ph >= p->kh && p->W + 2 * p->pw >= p->kw &&
                   p->OH == (p->H + 2 * p->ph - p->kh) / p->sh + 1 &&
                   p->OW == (p->W + 2 * p->pw - p->kw) / p->sw + 1 && p->H * p->W <= INT32_MAX;
    if (!ok)
        return dt_error_set(DT_ERR_SHAPE,
                            "%s: planes %lld, %lldx%lld -> %lldx%lld, kernel %dx%d, stride %dx%d, "
                            "padding %dx%d: not a pool2d geometry (padding at most half the "
                            "kernel, OH = (H + 2 ph - kh) / sh + 1)",
                            op, (long long)p->planes, (long long)p->H, (long long)p->W,
                            (long long)p->OH, (long long)p->OW, p->kh, p->kw, p->sh, p->sw, p->ph,
                            p->pw);
    return DT_OK;
}

// The stream and geometry checks of a pool entry point, and the NULL check of its buffers.
static dt_status pool_begin(dt_stream *s, const char *op, const dt_cuda_pool2d *p, int ok_ptrs,
                            cudaStream_t *cs) {
    dt_status st = dt_cuda_stream_of(s, op, cs);
    if (st == DT_OK) st = pool_check(op, p);
    if (st == DT_OK && !ok_ptrs) st = dt_error_set(DT_ERR_INVALID, "%s: NULL buffer", op);
    return st;
}

extern "C" dt_status dt_cuda_maxpool_fwd(dt_stream *s, float *y, int32_t *arg, const float *x,
                                         const dt_cuda_pool2d *p) {
    cudaStream_t cs;
    dt_status st = pool_begin(s, "cuda maxpool fwd", p, y && arg && x, &cs);
    if (st != DT_OK) return st;
    const int64_t n = p->planes * p->OH * p->OW;
    maxpool_fwd_kernel<<<ew_blocks(n), 256, 0, cs>>>(y, arg, x, *p, n);
    return dt_cuda_launched(s, "cuda maxpool fwd");
}

extern "C" dt_status dt_cuda_maxpool_bwd(dt_stream *s, float *gx, const float *gy,
                                         const int32_t *arg, const dt_cuda_pool2d *p,
                                         int accumulate) {
    cudaStream_t cs;
    dt_status st = pool_begin(s, "cuda maxpool bwd", p, gx && gy && arg, &cs);
    if (st != DT_OK) return st;
    const int64_t n = p->planes * p->H * p->W;
    maxpool_bwd_kernel<<<ew_blocks(n), 256, 0, cs>>>(gx, gy, arg, *p, accumulate, n);
    return dt_cuda_launched(s, "cuda maxpool bwd");
}

extern "C" dt_status dt_cuda_avgpool_fwd(dt_stream *s, float *y, const float *x,
                                         const dt_cuda_pool2d *p) {
    cudaStream_t cs;
    dt_status st = pool_begin(s, "cuda avgpool fwd", p, y && x, &cs);
    if (st != DT_OK) return st;
    const int64_t n = p->planes * p->OH * p->OW;
    avgpool_fwd_kernel<<<ew_blocks(n), 256, 0, cs>>>(y, x, *p, n);
    return dt_cuda_launched(s, "cuda avgpool fwd");
}

extern "C" dt_status dt_cuda_avgpool_bwd(dt_stream *s, float *gx, const float *gy,
                                         const dt_cuda_pool2d *p, int accumulate) {
    cudaStream_t cs;
    dt_status st = pool_begin(s, "cuda avgpool bwd", p, gx && gy, &cs);
    if (st != DT_OK) return st;
    const int64_t n = p->planes * p->H * p->W;
    avgpool_bwd_kernel<<<ew_blocks(n), 256, 0, cs>>>(gx, gy, *p, accumulate, n);
    return dt_cuda_launched(s, "cuda avgpool bwd");
}

static dt_status gap_check(dt_stream *s, const char *op, int64_t planes, int64_t P, int ok_ptrs,
                           cudaStream_t *cs) {
    dt_status st = dt_cuda_stream_of(s, op, cs);
    if (st != DT_OK) return st;
    if (planes < 1 || P < 1 || planes > INT32_MAX)
        return dt_error_set(DT_ERR_SHAPE, "%s: planes %lld, P %lld (need >= 1)", op,
                            (long long)planes, (long long)P);
    return ok_ptrs ? DT_OK : dt_error_set(DT_ERR_INVALID, "%s: NULL buffer", op);
}

extern "C" dt_status dt_cuda_gap_fwd(dt_stream *s, float *y, const float *x, int64_t planes,
                                     int64_t P) {
    cudaStream_t cs;
    dt_status st = gap_check(s, "cuda global avgpool fwd", planes, P, y && x, &cs);
    if (st != DT_OK) return st;
    gap_fwd_kernel<<<(unsigned)planes, 128, 0, cs>>>(y, x, P);
    return dt_cuda_launched(s, "cuda global avgpool fwd");
}

extern "C" dt_status dt_cuda_gap_bwd(dt_stream *s, float *gx, const float *gy, int64_t planes,
                                     int64_t P, int accumulate) {
    cudaStream_t cs;
    dt_status st = gap_check(s, "cuda global avgpool bwd", planes, P, gx && gy, &cs);
    if (st != DT_OK) return st;
    gap_bwd_kernel<<<ew_blocks(planes * P), 256, 0, cs>>>(gx, gy, P, accumulate, planes * P);
    return dt_cuda_launched(s, "cuda global avgpool bwd");
}
