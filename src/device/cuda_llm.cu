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

// ---- embedding -----------------------------------------------------------------------------

__device__ inline int64_t id_at(const void *ids, int is64, int64_t i) {
    return is64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

// bad[0] holds the first bad position while the rows run; INT64_MAX = none yet.
__global__ void emb_init_kernel(int64_t *bad) {
    bad[0] = INT64_MAX;
}

// One block (x) per position i, threads over the D columns (y blocks of 256): out[i] =
// table[id] (bf16 bits widened exactly to f32); an id outside [0, V) gives a zero row and is
// recorded in bad[0] (the smallest such position, as the CPU reports the first).
__global__ void emb_fwd_kernel(float *out, int64_t *bad, const void *ids, int ids_i64,
                               const void *table, int bf16, int64_t V, int64_t D) {
    const int64_t i = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const int64_t id = id_at(ids, ids_i64, i);
    const int ok = id >= 0 && id < V;
    if (!ok && threadIdx.x == 0 && blockIdx.y == 0)
        atomicMin((unsigned long long *)bad, (unsigned long long)i);
    if (d >= D) return;
    float v = 0.0f;
    if (ok) {
        if (bf16)
            v = __uint_as_float((uint32_t)((const uint16_t *)table)[id * D + d] << 16);
        else
            v = ((const float *)table)[id * D + d];
    }
    out[i * D + d] = v;
}

__global__ void emb_final_kernel(int64_t *bad) {
    if (bad[0] == INT64_MAX) bad[0] = -1;
}

static dt_status emb_check(const char *op, int64_t n, int64_t V, int64_t D) {
    if (n < 0 || n > INT32_MAX || V < 1 || V > INT32_MAX || D < 1 || D > 65535LL * 256)
        return dt_error_set(DT_ERR_SHAPE,
                            "%s: ids [%lld], table [%lld, %lld] (need 0 <= n < 2^31, "
                            "1 <= V < 2^31, 1 <= D <= 16776960)",
                            op, (long long)n, (long long)V, (long long)D);
    return DT_OK;
}

extern "C" dt_status dt_cuda_embedding_fwd(dt_stream *s, float *out, int64_t *bad, const void *ids,
                                           int ids_i64, const void *table, int table_bf16,
                                           int64_t n, int64_t V, int64_t D) {
    cudaStream_t cs;
    const char *op = "cuda embedding fwd";
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st == DT_OK) st = emb_check(op, n, V, D);
    if (st != DT_OK) return st;
    if (!bad || (n > 0 && (!out || !ids || !table)))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL out, bad, ids or table", op);
    emb_init_kernel<<<1, 1, 0, cs>>>(bad);
    if (n > 0)
        emb_fwd_kernel<<<dim3((unsigned)n, (unsigned)((D + 255) / 256)), 256, 0, cs>>>(
            out, bad, ids, ids_i64, table, table_bf16, V, D);
    emb_final_kernel<<<1, 1, 0, cs>>>(bad);
    return dt_cuda_launched(s, op);
}

// The backward sorts the keys (id << 32 | position) -- unique, so any correct sort gives the
// same order -- with a bitonic network over the next power of two N2 >= n (padding keys
// UINT64_MAX; an id outside [0, V) becomes 0xffffffff, beyond every row). After the sort the
// positions of each id are contiguous and in increasing order, and one block column per id
// adds its gradient rows in that order: the CPU's order, no float atomics, the same bits on
// every run.
static int64_t pow2_at_least(int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

extern "C" size_t dt_cuda_embedding_bwd_work(int64_t n) {
    return n > 0 && n <= INT32_MAX ? (size_t)pow2_at_least(n) * sizeof(uint64_t) : 0;
}

__global__ void emb_keys_kernel(uint64_t *keys, const void *ids, int ids_i64, int64_t n, int64_t V,
                                int64_t N2) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N2;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (i >= n) {
            keys[i] = UINT64_MAX;
            continue;
        }
        const int64_t id = id_at(ids, ids_i64, i);
        const uint64_t row = id >= 0 && id < V ? (uint64_t)id : 0xffffffffull;
        keys[i] = row << 32 | (uint64_t)i;
    }
}

// One compare-exchange stage (k, j) of the bitonic sort, ascending.
__global__ void emb_bitonic_kernel(uint64_t *keys, int64_t N2, int64_t k, int64_t j) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N2;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t l = i ^ j;
        if (l <= i) continue;
        const uint64_t a = keys[i], b = keys[l];
        const int up = (i & k) == 0;
        if ((a > b) == up) {
            keys[i] = b;
            keys[l] = a;
        }
    }
}

// Block (s, column block): if sorted key s starts the run of its id, dtable[id] += the
// gradient rows of the run's positions, in increasing position order.
__global__ void emb_bwd_rows(float *dtable, const float *g, const uint64_t *keys, int64_t n,
                             int64_t V, int64_t D) {
    const int64_t sidx = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const uint64_t id = keys[sidx] >> 32;
    if (id >= (uint64_t)V || d >= D || (sidx > 0 && (keys[sidx - 1] >> 32) == id)) return;
    float acc = dtable[id * D + d];
    for (int64_t t = sidx; t < n && (keys[t] >> 32) == id; t++)
        acc += g[(int64_t)(keys[t] & 0xffffffffull) * D + d];
    dtable[id * D + d] = acc;
}

extern "C" dt_status dt_cuda_embedding_bwd(dt_stream *s, float *dtable, const float *g,
                                           const void *ids, int ids_i64, int64_t n, int64_t V,
                                           int64_t D, int accumulate, void *work) {
    cudaStream_t cs;
    const char *op = "cuda embedding bwd";
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st == DT_OK) st = emb_check(op, n, V, D);
    if (st != DT_OK) return st;
    if (!dtable || (n > 0 && (!g || !ids || !work)))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL dtable, g, ids or work", op);
    const int dev = dt_stream_device(s).index;
    if (!accumulate) {
        st =
            dt_cuda_check(cudaMemsetAsync(dtable, 0, (size_t)(V * D) * sizeof(float), cs), dev, op);
        if (st != DT_OK) return st;
    }
    if (n == 0) return DT_OK;
    uint64_t *keys = (uint64_t *)work;
    const int64_t N2 = pow2_at_least(n);
    const unsigned nb = grid_for(N2, 256);
    emb_keys_kernel<<<nb, 256, 0, cs>>>(keys, ids, ids_i64, n, V, N2);
    for (int64_t k = 2; k <= N2; k <<= 1)
        for (int64_t j = k >> 1; j > 0; j >>= 1)
            emb_bitonic_kernel<<<nb, 256, 0, cs>>>(keys, N2, k, j);
    emb_bwd_rows<<<dim3((unsigned)n, (unsigned)((D + 255) / 256)), 256, 0, cs>>>(dtable, g, keys, n,
                                                                                 V, D);
    return dt_cuda_launched(s, op);
}

// ---- dropout -------------------------------------------------------------------------------

// Philox4x32-10, the function of dt_philox4x32 (src/core/rng.c): hi/lo of the 32 x 32 -> 64-bit
// products, the same rounds and key schedule.
__device__ inline void philox4x32(uint32_t k0, uint32_t k1, uint32_t c[4]) {
#pragma unroll
    for (int r = 0; r < 10; r++) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
}

// One thread per block of 4 elements j: the words of Philox(key, {step lo, step hi, node, j})
// decide elements 4j..4j+3; kept iff (word >> 8) >= th. y = x * (scale or 0) -- one rounded
// product as on the CPU, so a dropped inf or NaN gives NaN there too -- or y += that.
// step_dev (device memory, or NULL): the step is read there instead of {s0, s1}.
__global__ void dropout_kernel(float *y, const float *x, int64_t n, uint32_t th, float scale,
                               uint32_t k0, uint32_t k1, uint32_t s0, uint32_t s1,
                               const uint64_t *step_dev, uint32_t node, int accumulate) {
    const int64_t nb = (n + 3) / 4;
    if (step_dev) {
        const uint64_t st = *step_dev;
        s0 = (uint32_t)st, s1 = (uint32_t)(st >> 32);
    }
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nb;
         j += (int64_t)gridDim.x * blockDim.x) {
        uint32_t c[4] = {s0, s1, node, (uint32_t)j};
        philox4x32(k0, k1, c);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int64_t i = 4 * j + q;
            if (i >= n) break;
            const float v = __fmul_rn(x[i], (c[q] >> 8) >= th ? scale : 0.0f);
            y[i] = accumulate ? y[i] + v : v;
        }
    }
}

// p == 0: y = x, or y += x.
__global__ void dropout_identity_kernel(float *y, const float *x, int64_t n, int accumulate) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = accumulate ? y[i] + x[i] : x[i];
}

extern "C" dt_status dt_cuda_dropout(dt_stream *s, float *y, const float *x, int64_t n, float p,
                                     uint64_t key, uint64_t step, const uint64_t *step_dev,
                                     uint32_t node, int accumulate) {
    cudaStream_t cs;
    const char *op = "cuda dropout";
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st != DT_OK) return st;
    if (!(p >= 0.0f && p <= 1.0f))
        return dt_error_set(DT_ERR_INVALID, "%s: p must be in [0, 1], got %g", op, (double)p);
    if (n <= 0) return DT_OK;
    if (!y || !x) return dt_error_set(DT_ERR_INVALID, "%s: NULL y or x", op);
    if (p == 0.0f) {
        dropout_identity_kernel<<<grid_for(n, 256), 256, 0, cs>>>(y, x, n, accumulate);
        return dt_cuda_launched(s, op);
    }
    // The CPU's scalars, computed here in the same f32 operations.
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    const uint32_t th = (uint32_t)ceilf(p * 16777216.0f);
    dropout_kernel<<<grid_for((n + 3) / 4, 256), 256, 0, cs>>>(
        y, x, n, th, scale, (uint32_t)key, (uint32_t)(key >> 32), (uint32_t)step,
        (uint32_t)(step >> 32), step_dev, node, accumulate);
    return dt_cuda_launched(s, op);
}
