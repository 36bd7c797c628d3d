// RMSNorm, SwiGLU and the fused cross-entropy on CUDA (include/dtrain/device_cuda.h), the math
// of src/ops/norm.c, activation.c and softmax.c. One block per row for the row kernels.
#include <math.h>
#include <stdint.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_common.cuh"

#define ROW_THREADS 256
#define RMS_PART_ROWS 64 /* rows per block of the dw partial sums */

// ---- RMSNorm -------------------------------------------------------------------------------

// x, y [rows, D]; w [D] or NULL; rstd [rows] = 1 / sqrt(mean(x^2) + eps). y = w * (x * rstd).
__global__ void rmsnorm_fwd_kernel(float *y, float *rstd, const float *x, const float *w, int64_t D,
                                   float eps) {
    __shared__ float sh[32];
    const float *xr = x + blockIdx.x * D;
    float *yr = y + blockIdx.x * D;
    float s = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += xr[d] * xr[d];
    s = dt_block_sum(s, sh);
    const float rs = 1.0f / sqrtf(s * (1.0f / (float)D) + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
        yr[d] = w ? w[d] * (xr[d] * rs) : xr[d] * rs;
}

// dx = rstd * gw - x * rstd^3 * mean(gw * x), gw = gy * w (gy without w). One block per row.
__global__ void rmsnorm_bwd_dx_kernel(float *dx, const float *gy, const float *x, const float *w,
                                      const float *rstd, int64_t D) {
    __shared__ float sh[32];
    const int64_t off = (int64_t)blockIdx.x * D;
    const float rs = rstd[blockIdx.x];
    float sgx = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
        sgx += (w ? gy[off + d] * w[d] : gy[off + d]) * x[off + d];
    sgx = dt_block_sum(sgx, sh);
    const float k = sgx * (1.0f / (float)D) * rs * rs * rs;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        const float gw = w ? gy[off + d] * w[d] : gy[off + d];
        dx[off + d] = rs * gw - x[off + d] * k;
    }
}

// part [nb, D]: block (cx, rb) sums gy * (x * rstd) over rows [rb*64, rb*64 + 64) for its
// columns; then dw[d] = sum over rb in order (deterministic, no atomics).
__global__ void rmsnorm_bwd_dw_part(float *part, const float *gy, const float *x, const float *rstd,
                                    int64_t rows, int64_t D) {
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    const int64_t r0 = (int64_t)blockIdx.y * RMS_PART_ROWS;
    const int64_t r1 = r0 + RMS_PART_ROWS < rows ? r0 + RMS_PART_ROWS : rows;
    float s = 0.0f;
    for (int64_t r = r0; r < r1; r++) s += gy[r * D + d] * (x[r * D + d] * rstd[r]);
    part[blockIdx.y * D + d] = s;
}

__global__ void rmsnorm_bwd_dw_sum(float *dw, const float *part, int64_t nb, int64_t D) {
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) s += part[b * D + d];
    dw[d] = s;
}

static dt_status rows_check(const char *op, int64_t rows, int64_t D) {
    if (rows < 0 || D < 1 || rows > INT32_MAX)
        return dt_error_set(DT_ERR_SHAPE, "%s: rows %lld, D %lld (need 0 <= rows < 2^31, D >= 1)",
                            op, (long long)rows, (long long)D);
    return DT_OK;
}

extern "C" dt_status dt_cuda_rmsnorm_fwd(dt_stream *s, float *y, float *rstd, const float *x,
                                         const float *w, int64_t rows, int64_t D, float eps) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda rmsnorm fwd", &cs);
    if (st == DT_OK) st = rows_check("cuda rmsnorm fwd", rows, D);
    if (st != DT_OK || rows == 0) return st;
    if (!y || !rstd || !x)
        return dt_error_set(DT_ERR_INVALID, "cuda rmsnorm fwd: NULL y, rstd or x");
    rmsnorm_fwd_kernel<<<(unsigned)rows, ROW_THREADS, 0, cs>>>(y, rstd, x, w, D, eps);
    return dt_cuda_launched(s, "cuda rmsnorm fwd");
}

static int64_t rms_nb(int64_t rows) {
    return (rows + RMS_PART_ROWS - 1) / RMS_PART_ROWS;
}

extern "C" size_t dt_cuda_rmsnorm_bwd_work(int64_t rows, int64_t D) {
    return rows > 0 && D > 0 ? (size_t)(rms_nb(rows) * D) * sizeof(float) : 0;
}

extern "C" dt_status dt_cuda_rmsnorm_bwd(dt_stream *s, float *dx, float *dw, const float *gy,
                                         const float *x, const float *w, const float *rstd,
                                         int64_t rows, int64_t D, void *work) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda rmsnorm bwd", &cs);
    if (st == DT_OK) st = rows_check("cuda rmsnorm bwd", rows, D);
    if (st != DT_OK) return st;
    const int want_w = dw && w;
    if (rows == 0) {
        if (want_w)
            return dt_cuda_check(cudaMemsetAsync(dw, 0, (size_t)D * sizeof(float), cs),
                                 dt_stream_device(s).index, "cuda rmsnorm bwd");
        return DT_OK;
    }
    if (!gy || !x || !rstd || (want_w && !work))
        return dt_error_set(DT_ERR_INVALID, "cuda rmsnorm bwd: NULL gy, x, rstd or work");
    if (dx) rmsnorm_bwd_dx_kernel<<<(unsigned)rows, ROW_THREADS, 0, cs>>>(dx, gy, x, w, rstd, D);
    if (want_w) {
        const int64_t nb = rms_nb(rows);
        const unsigned cx = (unsigned)((D + 255) / 256);
        rmsnorm_bwd_dw_part<<<dim3(cx, (unsigned)nb), 256, 0, cs>>>((float *)work, gy, x, rstd,
                                                                    rows, D);
        rmsnorm_bwd_dw_sum<<<cx, 256, 0, cs>>>(dw, (const float *)work, nb, D);
    }
    return dt_cuda_launched(s, "cuda rmsnorm bwd");
}

// ---- SwiGLU --------------------------------------------------------------------------------

__device__ inline float sigmoidf_(float v) {
    return 1.0f / (1.0f + expf(-v));
}

// y = silu(a) * b = a * sigmoid(a) * b.
__global__ void swiglu_fwd_kernel(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] * sigmoidf_(a[i]) * b[i];
}

// da = gy * b * s (1 + a (1 - s)), db = gy * a * s, s = sigmoid(a).
__global__ void swiglu_bwd_kernel(float *da, float *db, const float *gy, const float *a,
                                  const float *b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float sg = sigmoidf_(a[i]);
        if (da) da[i] = gy[i] * b[i] * (sg * (1.0f + a[i] * (1.0f - sg)));
        if (db) db[i] = gy[i] * (a[i] * sg);
    }
}

static unsigned ew_blocks(int64_t n) {
    int64_t b = (n + 1023) / 1024;
    return (unsigned)(b > 8192 ? 8192 : b < 1 ? 1 : b);
}

extern "C" dt_status dt_cuda_swiglu_fwd(dt_stream *s, float *y, const float *a, const float *b,
                                        int64_t n) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda swiglu fwd", &cs);
    if (st != DT_OK || n <= 0) return st;
    if (!y || !a || !b) return dt_error_set(DT_ERR_INVALID, "cuda swiglu fwd: NULL y, a or b");
    swiglu_fwd_kernel<<<ew_blocks(n), 256, 0, cs>>>(y, a, b, n);
    return dt_cuda_launched(s, "cuda swiglu fwd");
}

extern "C" dt_status dt_cuda_swiglu_bwd(dt_stream *s, float *da, float *db, const float *gy,
                                        const float *a, const float *b, int64_t n) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda swiglu bwd", &cs);
    if (st != DT_OK || n <= 0 || (!da && !db)) return st;
    if (!gy || !a || !b) return dt_error_set(DT_ERR_INVALID, "cuda swiglu bwd: NULL gy, a or b");
    swiglu_bwd_kernel<<<ew_blocks(n), 256, 0, cs>>>(da, db, gy, a, b, n);
    return dt_cuda_launched(s, "cuda swiglu bwd");
}

// ---- fused cross-entropy -------------------------------------------------------------------

// stats[1] holds the first bad row while the rows run; INT64_MAX = none yet.
__global__ void ce_init_kernel(int64_t *stats) {
    stats[0] = 0;
    stats[1] = INT64_MAX;
}

// One block per row: lse[i] = m + log(sum exp(x - m)); row_loss[i] = lse - (1-ls) x[t] - ls/C sum x
// (0 when ignored or out of range; an out-of-range row is recorded in stats[1]).
__global__ void ce_fwd_rows(float *lse, float *row_loss, int64_t *stats, const float *logits,
                            const int32_t *targets, int64_t C, int64_t ignore, float ls) {
    __shared__ float sh[32];
    const int64_t i = blockIdx.x;
    const float *xr = logits + i * C;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = dt_block_max(m, sh);
    float se = 0.0f, sx = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        se += expf(xr[c] - m);
        sx += xr[c];
    }
    se = dt_block_sum(se, sh);
    sx = dt_block_sum(sx, sh);
    if (threadIdx.x != 0) return;
    const float l = m + logf(se);
    lse[i] = l;
    const int64_t t = targets[i];
    if (t == ignore) {
        row_loss[i] = 0.0f;
    } else if (t < 0 || t >= C) {
        row_loss[i] = 0.0f;
        atomicMin((unsigned long long *)&stats[1], (unsigned long long)i);
    } else {
        row_loss[i] = l - (1.0f - ls) * xr[t] - (ls / (float)C) * sx;
    }
}

// One block: loss = sum row_loss / valid (double sum), stats[0] = valid, stats[1] = bad or -1.
__global__ void ce_fwd_final(float *loss, int64_t *stats, const float *row_loss,
                             const int32_t *targets, int64_t N, int64_t C, int64_t ignore) {
    __shared__ double shd[32];
    __shared__ long long shc[32];
    double sum = 0.0;
    long long valid = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        sum += (double)row_loss[i];
        const int64_t t = targets[i];
        valid += t != ignore && t >= 0 && t < C;
    }
    sum = dt_block_sum(sum, shd);
    valid = dt_block_sum(valid, shc);
    if (threadIdx.x != 0) return;
    const int bad = stats[1] != INT64_MAX;
    stats[0] = valid;
    stats[1] = bad ? stats[1] : -1;
    *loss = valid && !bad ? (float)(sum / (double)valid) : NAN;
}

extern "C" size_t dt_cuda_ce_work(int64_t N) {
    return N > 0 ? (size_t)N * sizeof(float) : 0;
}

extern "C" dt_status dt_cuda_ce_fwd(dt_stream *s, float *loss, float *lse, int64_t *stats,
                                    const float *logits, const int32_t *targets, int64_t N,
                                    int64_t C, int64_t ignore, float label_smoothing, void *work) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda cross_entropy fwd", &cs);
    if (st == DT_OK) st = rows_check("cuda cross_entropy fwd", N, C);
    if (st != DT_OK) return st;
    if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
        return dt_error_set(DT_ERR_INVALID,
                            "cuda cross_entropy fwd: label_smoothing must be in [0, 1], got %g",
                            label_smoothing);
    if (!loss || !stats || (N > 0 && (!lse || !logits || !targets || !work)))
        return dt_error_set(DT_ERR_INVALID, "cuda cross_entropy fwd: NULL argument");
    ce_init_kernel<<<1, 1, 0, cs>>>(stats);
    if (N > 0)
        ce_fwd_rows<<<(unsigned)N, ROW_THREADS, 0, cs>>>(lse, (float *)work, stats, logits, targets,
                                                         C, ignore, label_smoothing);
    ce_fwd_final<<<1, 1024, 0, cs>>>(loss, stats, (const float *)work, targets, N, C, ignore);
    return dt_cuda_launched(s, "cuda cross_entropy fwd");
}

// dx = g exp(x - lse) - g ls / C, minus g (1 - ls) at the target; g = gloss / valid.
// dx may alias logits: each element is read before it is written by the same thread.
__global__ void ce_bwd_rows(float *dx, const float *logits, const int32_t *targets,
                            const float *lse, const int64_t *stats, const float *gloss, int64_t C,
                            int64_t ignore, float ls) {
    const int64_t i = blockIdx.x;
    const int64_t t = targets[i];
    const int64_t valid = stats[0];
    const float g = valid > 0 ? gloss[0] / (float)valid : 0.0f;
    const int skip = t == ignore || t < 0 || t >= C || valid <= 0;
    const float gt = g * (1.0f - ls), ga = g * ls / (float)C, l = lse[i];
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const int64_t k = i * C + c;
        if (skip) {
            dx[k] = 0.0f;
            continue;
        }
        float v = g * expf(logits[k] - l) - ga;
        if (c == t) v -= gt;
        dx[k] = v;
    }
}

extern "C" dt_status dt_cuda_ce_bwd(dt_stream *s, float *dx, const float *logits,
                                    const int32_t *targets, const float *lse, const int64_t *stats,
                                    const float *gloss, int64_t N, int64_t C, int64_t ignore,
                                    float label_smoothing) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda cross_entropy bwd", &cs);
    if (st == DT_OK) st = rows_check("cuda cross_entropy bwd", N, C);
    if (st != DT_OK || N == 0) return st;
    if (!dx || !logits || !targets || !lse || !stats || !gloss)
        return dt_error_set(DT_ERR_INVALID, "cuda cross_entropy bwd: NULL argument");
    ce_bwd_rows<<<(unsigned)N, ROW_THREADS, 0, cs>>>(dx, logits, targets, lse, stats, gloss, C,
                                                     ignore, label_smoothing);
    return dt_cuda_launched(s, "cuda cross_entropy bwd");
}
