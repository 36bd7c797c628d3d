// Causal (or full) scaled-dot-product attention with grouped-query heads on CUDA
// (include/dtrain/device_cuda.h), the math of src/ops/attention.c, flash-style: key tiles of
// KT keys pass through shared memory with an online softmax, so no T x T matrix exists.
//   q, out, gout, dq [B, Hq, T, D]   k, v, dk, dv [B, Hkv, T, D]   lse, Drow [B, Hq, T]
//   head h reads kv head h / (Hq / Hkv); D <= MAXD.
// Forward: one warp per query row (WARPS rows of one head per block); lane j scores key
// k0 + j of the tile, lane e owns output columns e, e + 32, ... Backward recomputes
// P = exp(scale q.k - lse): a dQ kernel shaped like the forward, and a dK/dV kernel with one
// warp per KT keys (lane j owns key j's dK, dV rows in shared memory) walking every query row
// of the group's heads that sees them. Each output element has exactly one writer and a fixed
// summation order: no atomics, the same bits on every run.
#include <math.h>
#include <stdint.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_common.cuh"

#define KT 32    /* keys per tile (one per lane) */
#define WARPS 8  /* query rows per block (forward, dQ) */
#define MAXD 128 /* head dim limit: 4 output columns per lane */
#define MAXE (MAXD / 32)
#define KSTRIDE                                                                                    \
    (MAXD + 1) /* padded rows: lane j reading row j, column d hits bank (j + d) % 32               \
                */

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// An input element as f32: f32 as is, bf16 (its bits) widened exactly.
__device__ inline float ldf(const float *p, int64_t i) {
    return p[i];
}
__device__ inline float ldf(const uint16_t *p, int64_t i) {
    return __uint_as_float((uint32_t)p[i] << 16);
}

// Keys of the tile at k0 (nk of them) that query row i may see.
__device__ inline int visible(int causal, int64_t i, int64_t k0, int nk) {
    if (!causal) return nk;
    const int64_t n = i - k0 + 1;
    return n <= 0 ? 0 : (n < nk ? (int)n : nk);
}

// Ks, Vs [KT][KSTRIDE] = rows k0..k0+nk of K, V ([T, D] of one kv head), by the whole block.
template <typename TI>
__device__ inline void load_tile(float (*Ks)[KSTRIDE], float (*Vs)[KSTRIDE], const TI *K,
                                 const TI *V, int64_t k0, int nk, int D) {
    for (int idx = threadIdx.x; idx < nk * D; idx += blockDim.x) {
        const int j = idx / D, d = idx % D;
        Ks[j][d] = ldf(K, (k0 + j) * D + d);
        Vs[j][d] = ldf(V, (k0 + j) * D + d);
    }
}

// acc[e] += sum_{j < nv} w_j tile[j][lane + 32 e], w_j held by lane j (a row times a tile).
__device__ inline void warp_axpy(float acc[MAXE], float w, const float (*tile)[KSTRIDE], int nv,
                                 int D, int lane) {
    for (int j = 0; j < nv; j++) {
        const float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
        for (int e = 0; e < MAXE; e++)
            if (lane + 32 * e < D) acc[e] += wj * tile[j][lane + 32 * e];
    }
}

// Grid (ceil(T / WARPS), B * Hq), WARPS warps.
template <typename TI>
__global__ void attn_fwd_kernel(float *out, float *lse, const TI *q, const TI *k, const TI *v,
                                int64_t Hq, int64_t Hkv, int64_t T, int D, int G, int causal,
                                float scale) {
    __shared__ float Ks[KT][KSTRIDE], Vs[KT][KSTRIDE], Qs[WARPS][MAXD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t bh = blockIdx.y, b = bh / Hq, g = bh % Hq / G;
    const int64_t q0 = (int64_t)blockIdx.x * WARPS, i = q0 + warp;
    const int active = i < T; /* warp-uniform */
    const TI *K = k + (b * Hkv + g) * T * D, *V = v + (b * Hkv + g) * T * D;
    if (active)
        for (int d = lane; d < D; d += 32) Qs[warp][d] = ldf(q, (bh * T + i) * D + d);
    float m = -INFINITY, l = 0.0f, o[MAXE];
#pragma unroll
    for (int e = 0; e < MAXE; e++) o[e] = 0.0f;
    const int64_t kend = causal ? (q0 + WARPS < T ? q0 + WARPS : T) : T;
    for (int64_t k0 = 0; k0 < kend; k0 += KT) {
        const int nk = kend - k0 < KT ? (int)(kend - k0) : KT;
        __syncthreads(); /* the previous tile is no longer read (and Qs is written) */
        load_tile(Ks, Vs, K, V, k0, nk, D);
        __syncthreads();
        const int nv = active ? visible(causal, i, k0, nk) : 0;
        if (nv == 0) continue;
        float sc = -INFINITY;
        if (lane < nv) {
            float a = 0.0f;
            for (int d = 0; d < D; d++) a += Qs[warp][d] * Ks[lane][d];
            sc = scale * a;
        }
        const float mn = fmaxf(m, warp_max(sc));
        const float p = lane < nv ? expf(sc - mn) : 0.0f;
        const float corr = expf(m - mn); /* 0 on the first visible tile (m = -inf) */
        l = l * corr + warp_sum(p);
        m = mn;
#pragma unroll
        for (int e = 0; e < MAXE; e++) o[e] *= corr;
        warp_axpy(o, p, Vs, nv, D, lane); /* o += P V */
    }
    if (!active) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int e = 0; e < MAXE; e++)
        if (lane + 32 * e < D) out[(bh * T + i) * D + lane + 32 * e] = o[e] * inv;
    if (lane == 0) lse[bh * T + i] = m + logf(l);
}

// Drow[r] = sum_d gout[r, d] out[r, d]; one warp per row r of B * Hq * T.
__global__ void attn_drow_kernel(float *drow, const float *gout, const float *out, int64_t rows,
                                 int D) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return; /* warp-uniform */
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += gout[r * D + d] * out[r * D + d];
    s = warp_sum(s);
    if (lane == 0) drow[r] = s;
}

// dQ[i] = scale sum_j P_ij (dP_ij - Drow_i) K_j, dP_ij = dO_i . V_j; grid as the forward.
template <typename TI>
__global__ void attn_dq_kernel(float *dq, const float *gout, const TI *q, const TI *k, const TI *v,
                               const float *lse, const float *drow, int64_t Hq, int64_t Hkv,
                               int64_t T, int D, int G, int causal, float scale, int accumulate) {
    __shared__ float Ks[KT][KSTRIDE], Vs[KT][KSTRIDE], Qs[WARPS][MAXD], Os[WARPS][MAXD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t bh = blockIdx.y, b = bh / Hq, g = bh % Hq / G;
    const int64_t q0 = (int64_t)blockIdx.x * WARPS, i = q0 + warp;
    const int active = i < T;
    const TI *K = k + (b * Hkv + g) * T * D, *V = v + (b * Hkv + g) * T * D;
    float li = 0.0f, dr = 0.0f, a[MAXE];
    if (active) {
        for (int d = lane; d < D; d += 32) {
            Qs[warp][d] = ldf(q, (bh * T + i) * D + d);
            Os[warp][d] = gout[(bh * T + i) * D + d];
        }
        li = lse[bh * T + i];
        dr = drow[bh * T + i];
    }
#pragma unroll
    for (int e = 0; e < MAXE; e++) a[e] = 0.0f;
    const int64_t kend = causal ? (q0 + WARPS < T ? q0 + WARPS : T) : T;
    for (int64_t k0 = 0; k0 < kend; k0 += KT) {
        const int nk = kend - k0 < KT ? (int)(kend - k0) : KT;
        __syncthreads();
        load_tile(Ks, Vs, K, V, k0, nk, D);
        __syncthreads();
        const int nv = active ? visible(causal, i, k0, nk) : 0;
        if (nv == 0) continue;
        float ds = 0.0f;
        if (lane < nv) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < D; d++) {
                s += Qs[warp][d] * Ks[lane][d];
                dp += Os[warp][d] * Vs[lane][d];
            }
            const float p = expf(scale * s - li);
            ds = scale * p * (dp - dr);
        }
        warp_axpy(a, ds, Ks, nv, D, lane); /* dq += dS K */
    }
    if (!active) return;
#pragma unroll
    for (int e = 0; e < MAXE; e++)
        if (lane + 32 * e < D) {
            float *p = dq + (bh * T + i) * D + lane + 32 * e;
            *p = (accumulate & DT_CUDA_ACC_DQ) ? *p + a[e] : a[e];
        }
}

// dV_j = sum_i P_ij dO_i, dK_j = scale sum_i P_ij (dP_ij - Drow_i) q_i over the query rows i of
// every head of kv head (b, g) that see key j. Grid (ceil(T / KT), B * Hkv), one warp; dynamic
// shared memory: Ks, Vs, dKs, dVs [KT][D + 1], qs, os [D].
template <typename TI>
__global__ void attn_dkdv_kernel(float *dk, float *dv, const float *gout, const TI *q, const TI *k,
                                 const TI *v, const float *lse, const float *drow, int64_t Hq,
                                 int64_t Hkv, int64_t T, int D, int G, int causal, float scale,
                                 int accumulate) {
    extern __shared__ float sm[];
    const int ld = D + 1, lane = threadIdx.x;
    float *Ks = sm, *Vs = Ks + KT * ld, *dKs = Vs + KT * ld, *dVs = dKs + KT * ld;
    float *qs = dVs + KT * ld, *os = qs + D;
    const int64_t bg = blockIdx.y, b = bg / Hkv, g = bg % Hkv, k0 = (int64_t)blockIdx.x * KT;
    const int nk = T - k0 < KT ? (int)(T - k0) : KT;
    const int64_t kv = bg * T * D;
    for (int idx = lane; idx < nk * D; idx += 32) {
        const int j = idx / D, d = idx % D;
        Ks[j * ld + d] = ldf(k, kv + (k0 + j) * D + d);
        Vs[j * ld + d] = ldf(v, kv + (k0 + j) * D + d);
    }
    for (int d = 0; d < D; d++) dKs[lane * ld + d] = dVs[lane * ld + d] = 0.0f;
    const int64_t j = k0 + lane; /* this lane's key */
    for (int64_t h = g * G; h < (g + 1) * G; h++) {
        const int64_t bh = b * Hq + h;
        for (int64_t i = causal ? k0 : 0; i < T; i++) {
            __syncwarp();
            for (int d = lane; d < D; d += 32) {
                qs[d] = ldf(q, (bh * T + i) * D + d);
                os[d] = gout[(bh * T + i) * D + d];
            }
            __syncwarp();
            if (lane >= nk || (causal && j > i)) continue;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < D; d++) {
                s += qs[d] * Ks[lane * ld + d];
                dp += os[d] * Vs[lane * ld + d];
            }
            const float p = expf(scale * s - lse[bh * T + i]);
            const float ds = scale * p * (dp - drow[bh * T + i]);
            for (int d = 0; d < D; d++) {
                dVs[lane * ld + d] += p * os[d];
                dKs[lane * ld + d] += ds * qs[d];
            }
        }
    }
    __syncwarp();
    for (int idx = lane; idx < nk * D; idx += 32) {
        const int jj = idx / D, d = idx % D;
        const int64_t at = kv + (k0 + jj) * D + d;
        if (dk)
            dk[at] = (accumulate & DT_CUDA_ACC_DK) ? dk[at] + dKs[jj * ld + d] : dKs[jj * ld + d];
        if (dv)
            dv[at] = (accumulate & DT_CUDA_ACC_DV) ? dv[at] + dVs[jj * ld + d] : dVs[jj * ld + d];
    }
}

static dt_status attn_check(const char *op, int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int D) {
    if (B < 0 || Hkv < 1 || Hq < Hkv || Hq % Hkv || T < 0 || D < 1 || D > MAXD || B * Hq > 65535 ||
        T > INT32_MAX)
        return dt_error_set(DT_ERR_SHAPE,
                            "%s: q [%lld, %lld, %lld, %d], k, v [%lld, %lld, %lld, %d] (need Hq a "
                            "multiple of Hkv, 1 <= D <= %d, B * Hq <= 65535)",
                            op, (long long)B, (long long)Hq, (long long)T, D, (long long)B,
                            (long long)Hkv, (long long)T, D, MAXD);
    return DT_OK;
}

static float attn_scale(float scale, int D) {
    return scale > 0.0f ? scale : 1.0f / sqrtf((float)D); /* as dt_attention */
}

// The kernels of one call for inputs of type TI (float or bf16 bits).
template <typename TI>
static void fwd_launch(cudaStream_t cs, float *out, float *lse, const void *q, const void *k,
                       const void *v, int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int D,
                       int causal, float scale) {
    attn_fwd_kernel<TI>
        <<<dim3((unsigned)((T + WARPS - 1) / WARPS), (unsigned)(B * Hq)), WARPS * 32, 0, cs>>>(
            out, lse, (const TI *)q, (const TI *)k, (const TI *)v, Hq, Hkv, T, D, (int)(Hq / Hkv),
            causal, scale);
}

template <typename TI>
static cudaError_t bwd_launch(cudaStream_t cs, float *dq, float *dk, float *dv, const float *gout,
                              const void *q, const void *k, const void *v, const float *lse,
                              const float *drow, int64_t B, int64_t Hq, int64_t Hkv, int64_t T,
                              int D, int causal, float sc, int accumulate) {
    const int G = (int)(Hq / Hkv);
    const TI *qi = (const TI *)q, *ki = (const TI *)k, *vi = (const TI *)v;
    if (dq)
        attn_dq_kernel<TI>
            <<<dim3((unsigned)((T + WARPS - 1) / WARPS), (unsigned)(B * Hq)), WARPS * 32, 0, cs>>>(
                dq, gout, qi, ki, vi, lse, drow, Hq, Hkv, T, D, G, causal, sc, accumulate);
    if (!dk && !dv) return cudaSuccess;
    const size_t smem = (size_t)(4 * KT * (D + 1) + 2 * D) * sizeof(float);
    cudaError_t e = cudaFuncSetAttribute(attn_dkdv_kernel<TI>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    attn_dkdv_kernel<TI>
        <<<dim3((unsigned)((T + KT - 1) / KT), (unsigned)(B * Hkv)), 32, smem, cs>>>(
            dk, dv, gout, qi, ki, vi, lse, drow, Hq, Hkv, T, D, G, causal, sc, accumulate);
    return cudaSuccess;
}

extern "C" dt_status dt_cuda_attention_fwd(dt_stream *s, float *out, float *lse, const void *q,
                                           const void *k, const void *v, int in_bf16, int64_t B,
                                           int64_t Hq, int64_t Hkv, int64_t T, int D, int causal,
                                           float scale) {
    cudaStream_t cs = 0;
    const char *op = "cuda attention fwd";
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st == DT_OK) st = attn_check(op, B, Hq, Hkv, T, D);
    if (st != DT_OK || B == 0 || T == 0) return st;
    if (!out || !lse || !q || !k || !v)
        return dt_error_set(DT_ERR_INVALID, "%s: NULL out, lse, q, k or v", op);
    if (in_bf16)
        fwd_launch<uint16_t>(cs, out, lse, q, k, v, B, Hq, Hkv, T, D, causal, attn_scale(scale, D));
    else
        fwd_launch<float>(cs, out, lse, q, k, v, B, Hq, Hkv, T, D, causal, attn_scale(scale, D));
    return dt_cuda_launched(s, op);
}

extern "C" size_t dt_cuda_attention_bwd_work(int64_t B, int64_t Hq, int64_t T) {
    return B > 0 && Hq > 0 && T > 0 ? (size_t)(B * Hq * T) * sizeof(float) : 0;
}

extern "C" dt_status dt_cuda_attention_bwd(dt_stream *s, float *dq, float *dk, float *dv,
                                           const float *gout, const void *q, const void *k,
                                           const void *v, int in_bf16, const float *out,
                                           const float *lse, int64_t B, int64_t Hq, int64_t Hkv,
                                           int64_t T, int D, int causal, float scale,
                                           int accumulate, void *work) {
    cudaStream_t cs = 0;
    const char *op = "cuda attention bwd";
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st == DT_OK) st = attn_check(op, B, Hq, Hkv, T, D);
    if (st != DT_OK || B == 0 || T == 0 || (!dq && !dk && !dv)) return st;
    if (!gout || !q || !k || !v || !out || !lse || !work)
        return dt_error_set(DT_ERR_INVALID, "%s: NULL gout, q, k, v, out, lse or work", op);
    if ((dq && (dq == dk || dq == dv)) || (dk && dk == dv))
        return dt_error_set(DT_ERR_INVALID, "%s: dq, dk and dv must be distinct buffers", op);
    const float sc = attn_scale(scale, D);
    const int64_t rows = B * Hq * T;
    float *drow = (float *)work;
    attn_drow_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, cs>>>(drow, gout, out, rows, D);
    const cudaError_t e = in_bf16 ? bwd_launch<uint16_t>(cs, dq, dk, dv, gout, q, k, v, lse, drow,
                                                         B, Hq, Hkv, T, D, causal, sc, accumulate)
                                  : bwd_launch<float>(cs, dq, dk, dv, gout, q, k, v, lse, drow, B,
                                                      Hq, Hkv, T, D, causal, sc, accumulate);
    st = dt_cuda_check(e, dt_stream_device(s).index, op);
    return st != DT_OK ? st : dt_cuda_launched(s, op);
}
