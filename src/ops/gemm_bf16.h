/* Native bf16 GEMMs (internal to src/ops/): row-major C [M, N] (f32) = op(A) op(B) (+ C), A and
 * B bf16 (optionally batched: C_i = op(A_i) op(B_i)), accumulated in f32 by oneDNN's matmul kernels
 * (AVX-512 BF16 / AMX). Used by the GEMM ops' bf16 mode (dt_graph_opts.bf16_gemm) on CPUs with bf16
 * instructions; see src/ops/bf16.c for the mode and its emulation elsewhere.
 *
 * A plan is made once per shape at prepare time (two primitives: overwrite and accumulate) and
 * run allocation-free with a caller-given scratchpad of dt_gemm_bf16_scratch bytes. */
#ifndef DTRAIN_OPS_GEMM_BF16_H
#define DTRAIN_OPS_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

typedef struct dt_gemm_bf16 dt_gemm_bf16;

/* op(A) is [M, K]: A stored [M, K] with row stride lda, or with ta [K, M] (row stride lda);
 * op(B) is [K, N]: B stored [K, N] (ldb), or with tb [N, K] (ldb); C [M, N] with row stride
 * ldc. `op` names the caller in errors. DT_ERR_DTYPE where oneDNN has no bf16 kernel for it. */
dt_status dt_gemm_bf16_create(dt_gemm_bf16 **out, int ta, int tb, int64_t M, int64_t N, int64_t K,
                              int64_t lda, int64_t ldb, int64_t ldc, const char *op);
/* The batched form: `batch` products C_i = op(A_i) op(B_i) (+ C_i) in one oneDNN call, entry i
 * of A at A + i * sa elements (likewise sb, sc). sa = 0 or sb = 0: that operand is one matrix
 * shared by every entry (broadcast; never both). batch 1 is dt_gemm_bf16_create. */
dt_status dt_gemm_bf16_create_batched(dt_gemm_bf16 **out, int64_t batch, int ta, int tb, int64_t M,
                                      int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                                      int64_t sa, int64_t sb, int64_t sc, const char *op);
/* Scratchpad bytes a run needs (the larger of the two primitives'), a multiple of 64. */
size_t dt_gemm_bf16_scratch(const dt_gemm_bf16 *p);
/* C = op(A) op(B) + beta C, beta 0 or 1 (C is not read with beta 0). */
dt_status dt_gemm_bf16_run(dt_gemm_bf16 *p, const uint16_t *A, const uint16_t *B, float beta,
                           float *C, void *scratch);
void dt_gemm_bf16_free(dt_gemm_bf16 *p);

/* dst[i] = bf16(src[i]) (nearest even, NaN stays NaN) for i < n, over the OpenMP pool. */
void dt_bf16_pack(uint16_t *dst, const float *src, int64_t n);
/* Bytes of ws for a bf16 copy of n values, a multiple of 64 (regions stay aligned). */
size_t dt_bf16_pack_bytes(int64_t n);

#endif
