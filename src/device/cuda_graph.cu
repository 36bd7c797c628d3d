// Small kernels the graph executor needs on CUDA (include/dtrain/device_cuda.h, "graph
// helpers"): stream memset, y = alpha x + beta y, f32 -> bf16, elementwise add/sub/mul, SiLU, ReLU
// and a strided copy for transpose/permute. Arithmetic follows src/ops/elementwise.c, activation.c
// and shape.c element by element; beta 0 never reads the output (it may hold NaN poison).
#include <math.h>
#include <stdint.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_common.cuh"

static unsigned grid_of(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

#define GRID_LOOP(k, n)                                                                            \
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < (n);                      \
         k += (int64_t)gridDim.x * blockDim.x)

dt_status dt_cuda_memset(dt_stream *s, void *p, int value, size_t bytes) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda memset", &cs);
    if (st != DT_OK || bytes == 0) return st;
    return dt_cuda_check(cudaMemsetAsync(p, value, bytes, cs), dt_stream_device(s).index,
                         "cuda memset");
}

__global__ void axpby_kernel(float *y, const float *x, int64_t n, float alpha, float beta) {
    GRID_LOOP(k, n) y[k] = beta == 0.0f ? alpha * x[k] : beta * y[k] + alpha * x[k];
}

dt_status dt_cuda_axpby(dt_stream *s, float *y, const float *x, int64_t n, float alpha,
                        float beta) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda axpby", &cs);
    if (st != DT_OK || n <= 0) return st;
    axpby_kernel<<<grid_of(n, 256), 256, 0, cs>>>(y, x, n, alpha, beta);
    return dt_cuda_launched(s, "cuda axpby");
}

// f32 -> bf16 bits, round-to-nearest-even with NaN kept quiet: dt_bf16_from_f32 bit for bit.
__global__ void to_bf16_kernel(uint16_t *y, const float *x, int64_t n) {
    GRID_LOOP(k, n) {
        uint32_t u = __float_as_uint(x[k]);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            y[k] = (uint16_t)((u >> 16) | 0x40);
        else
            y[k] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

dt_status dt_cuda_to_bf16(dt_stream *s, uint16_t *y, const float *x, int64_t n) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda f32 to bf16", &cs);
    if (st != DT_OK || n <= 0) return st;
    to_bf16_kernel<<<grid_of(n, 256), 256, 0, cs>>>(y, x, n);
    return dt_cuda_launched(s, "cuda f32 to bf16");
}

// op 0: a + b, 1: a - b, 2: a * b; y = op(a, b) + beta y.
__global__ void ew_kernel(float *y, const float *a, const float *b, int64_t n, int op, float beta) {
    GRID_LOOP(k, n) {
        float v = op == 0 ? a[k] + b[k] : op == 1 ? a[k] - b[k] : a[k] * b[k];
        y[k] = beta == 0.0f ? v : y[k] + v;
    }
}

dt_status dt_cuda_ew(dt_stream *s, float *y, const float *a, const float *b, int64_t n, int op,
                     float beta) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda elementwise", &cs);
    if (st != DT_OK || n <= 0) return st;
    if (op < 0 || op > 2)
        return dt_error_set(DT_ERR_INVALID, "cuda elementwise: op %d is not 0, 1 or 2", op);
    ew_kernel<<<grid_of(n, 256), 256, 0, cs>>>(y, a, b, n, op, beta);
    return dt_cuda_launched(s, "cuda elementwise");
}

// silu(x) = x sigmoid(x); d/dx = sigmoid(x) (1 + x (1 - sigmoid(x))) (src/ops/activation.c).
__device__ inline float sigm(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__global__ void silu_fwd_kernel(float *y, const float *x, int64_t n) {
    GRID_LOOP(k, n) y[k] = x[k] * sigm(x[k]);
}

__global__ void silu_bwd_kernel(float *gx, const float *gy, const float *x, int64_t n, float beta) {
    GRID_LOOP(k, n) {
        const float sg = sigm(x[k]), v = gy[k] * (sg * (1.0f + x[k] * (1.0f - sg)));
        gx[k] = beta == 0.0f ? v : gx[k] + v;
    }
}

dt_status dt_cuda_silu_fwd(dt_stream *s, float *y, const float *x, int64_t n) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda silu", &cs);
    if (st != DT_OK || n <= 0) return st;
    silu_fwd_kernel<<<grid_of(n, 256), 256, 0, cs>>>(y, x, n);
    return dt_cuda_launched(s, "cuda silu");
}

dt_status dt_cuda_silu_bwd(dt_stream *s, float *gx, const float *gy, const float *x, int64_t n,
                           float beta) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda silu backward", &cs);
    if (st != DT_OK || n <= 0) return st;
    silu_bwd_kernel<<<grid_of(n, 256), 256, 0, cs>>>(gx, gy, x, n, beta);
    return dt_cuda_launched(s, "cuda silu backward");
}

// relu as src/ops/activation.c: x < 0 -> 0 (NaN passes through); the backward masks by y > 0.
__global__ void relu_fwd_kernel(float *y, const float *x, int64_t n) {
    GRID_LOOP(k, n) y[k] = x[k] < 0.0f ? 0.0f : x[k];
}

__global__ void relu_bwd_kernel(float *gx, const float *gy, const float *y, int64_t n, float beta) {
    GRID_LOOP(k, n) {
        const float v = gy[k] * (y[k] > 0.0f ? 1.0f : 0.0f);
        gx[k] = beta == 0.0f ? v : gx[k] + v;
    }
}

dt_status dt_cuda_relu_fwd(dt_stream *s, float *y, const float *x, int64_t n) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda relu", &cs);
    if (st != DT_OK || n <= 0) return st;
    relu_fwd_kernel<<<grid_of(n, 256), 256, 0, cs>>>(y, x, n);
    return dt_cuda_launched(s, "cuda relu");
}

dt_status dt_cuda_relu_bwd(dt_stream *s, float *gx, const float *gy, const float *y, int64_t n,
                           float beta) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda relu backward", &cs);
    if (st != DT_OK || n <= 0) return st;
    relu_bwd_kernel<<<grid_of(n, 256), 256, 0, cs>>>(gx, gy, y, n, beta);
    return dt_cuda_launched(s, "cuda relu backward");
}

// dst (contiguous over shape[nd]) element i = src at sum_j idx_j(i) * sstr[j].
struct strided {
    int nd;
    int64_t shape[DT_CUDA_PERMUTE_DIMS], sstr[DT_CUDA_PERMUTE_DIMS];
};

__global__ void strided_kernel(float *dst, const float *src, strided p, int64_t n, float beta) {
    GRID_LOOP(k, n) {
        int64_t r = k, off = 0;
        for (int j = p.nd - 1; j >= 0; j--) {
            off += (r % p.shape[j]) * p.sstr[j];
            r /= p.shape[j];
        }
        dst[k] = beta == 0.0f ? src[off] : dst[k] + src[off];
    }
}

dt_status dt_cuda_strided_copy(dt_stream *s, float *dst, const float *src, int nd,
                               const int64_t *shape, const int64_t *src_strides, float beta) {
    cudaStream_t cs = 0;
    dt_status st = dt_cuda_stream_of(s, "cuda strided copy", &cs);
    if (st != DT_OK) return st;
    if (nd < 1 || nd > DT_CUDA_PERMUTE_DIMS)
        return dt_error_set(DT_ERR_SHAPE, "cuda strided copy: %d dims (1 to %d)", nd,
                            DT_CUDA_PERMUTE_DIMS);
    strided p;
    p.nd = nd;
    int64_t n = 1;
    for (int j = 0; j < nd; j++) p.shape[j] = shape[j], p.sstr[j] = src_strides[j], n *= shape[j];
    if (n <= 0) return DT_OK;
    strided_kernel<<<grid_of(n, 256), 256, 0, cs>>>(dst, src, p, n, beta);
    return dt_cuda_launched(s, "cuda strided copy");
}
