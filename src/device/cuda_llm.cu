// RoPE, embedding and dropout on CUDA (include/dtrain/device_cuda.h): the math of
// src/ops/rope.c, embedding.c and dropout.c, element by element.
#include <math.h>
#include <stdint.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_common.cuh"

static unsigned grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

// ---- RoPE ----------------------------------------------------------------------------------

// x, y [B, H, T, 2 half]; one thread per (row r = (b, h, t), i < half) pair (x1[i], x2[i]).
// pos = positions[(Bc == 1 ? 0 : b) * T + t] (i32 or i64), or t without positions. The angle is
// the f32 product pos * inv_freq[i] as on the CPU; sn = dir * sin: dir -1 is the inverse
// rotation (the backward). Each thread reads its pair before writing it, so y may alias x.
__global__ void rope_kernel(float *y, const float *x, const float *inv_freq, const void *positions,
                            int pos_i64, int64_t Bc, int64_t H, int64_t T, int half, int64_t rows,
                            float dir, int accumulate) {
    const int64_t n = rows * half;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / half, t = r % T, b = r / (H * T);
        const int i = (int)(k % half);
        int64_t pos = t;
        if (positions) {
            const int64_t pi = (Bc == 1 ? 0 : b) * T + t;
            pos = pos_i64 ? ((const int64_t *)positions)[pi] : ((const int32_t *)positions)[pi];
        }
        const float a = (float)pos * inv_freq[i];
        const float c = cosf(a), sn = dir * sinf(a);
        const float *x1 = x + r * 2 * half;
        float *y1 = y + r * 2 * half;
        const float u = x1[i], v = x1[half + i];
        const float o1 = u * c - v * sn, o2 = v * c + u * sn;
        if (accumulate) {
            y1[i] += o1;
            y1[half + i] += o2;
        } else {
            y1[i] = o1;
            y1[half + i] = o2;
        }
    }
}

static dt_status rope_launch(dt_stream *s, const char *op, float *y, const float *x,
                             const float *inv_freq, const void *positions, int pos_i64, int64_t Bc,
                             int64_t B, int64_t H, int64_t T, int half, float dir, int accumulate) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st != DT_OK) return st;
    if (B < 0 || H < 0 || T < 0 || half < 1 || (positions && Bc != 1 && Bc != B))
        return dt_error_set(DT_ERR_SHAPE,
                            "%s: x [B, H, T, Dh] = [%lld, %lld, %lld, %d] with positions rows %lld "
                            "(need B, H, T >= 0, Dh = 2 half >= 2, positions rows 1 or B)",
                            op, (long long)B, (long long)H, (long long)T, 2 * half, (long long)Bc);
    const int64_t rows = B * H * T;
    if (rows == 0) return DT_OK;
    if (!y || !x || !inv_freq) return dt_error_set(DT_ERR_INVALID, "%s: NULL y, x or inv_freq", op);
    rope_kernel<<<grid_for(rows * half, 256), 256, 0, cs>>>(y, x, inv_freq, positions, pos_i64, Bc,
                                                            H, T, half, rows, dir, accumulate);
    return dt_cuda_launched(s, op);
}

extern "C" dt_status dt_cuda_rope_fwd(dt_stream *s, float *y, const float *x, const float *inv_freq,
                                      const void *positions, int pos_i64, int64_t Bc, int64_t B,
                                      int64_t H, int64_t T, int half) {
    return rope_launch(s, "cuda rope fwd", y, x, inv_freq, positions, pos_i64, Bc, B, H, T, half,
                       1.0f, 0);
}

extern "C" dt_status dt_cuda_rope_bwd(dt_stream *s, float *gx, const float *gy,
                                      const float *inv_freq, const void *positions, int pos_i64,
                                      int64_t Bc, int64_t B, int64_t H, int64_t T, int half,
                                      int accumulate) {
    return rope_launch(s, "cuda rope bwd", gx, gy, inv_freq, positions, pos_i64, Bc, B, H, T, half,
                       -1.0f, accumulate);
}
