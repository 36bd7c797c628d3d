/* Linear algebra ops: batched matrix multiply, nn.Linear (f32, or a frozen bf16 weight) and
 * embedding lookup. All return the new node id, or -1 with a message naming the op and the
 * shapes (dt_last_error()). */
#ifndef DTRAIN_OPS_LINEAR_H
#define DTRAIN_OPS_LINEAR_H

#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Batched matrix product op(a) @ op(b), f32.
 *   a: [..., M, K], or [..., K, M] with trans_a
 *   b: [..., K, N], or [..., N, K] with trans_b
 *   -> [..., M, N]
 * The leading (batch) dims of a and b must be equal, or b may be 2-D and shared by every
 * batch entry (its gradient is then summed over the batch). a and b have at least 2 dims. */
int dt_matmul(dt_graph *g, int a, int b, int trans_a, int trans_b);

/* PyTorch nn.Linear: y = x w^T + bias.
 *   x: [..., in] f32;  w: [out, in] f32, or bf16 when it needs no gradient (a frozen LoRA
 *   base weight: bf16 x bf16 -> f32 through oneDNN, x rounded to bf16);  bias: [out] f32, or -1
 *   -> [..., out] f32 */
int dt_linear(dt_graph *g, int x, int w, int bias);

/* Embedding lookup: ids DT_I32 or DT_I64 of any shape (up to 4 dims), table [V, D] (f32, or a
 * frozen bf16 table) -> [..., D] f32. An id outside [0, V) makes forward return DT_ERR_RANGE.
 * The table gradient is a deterministic scatter-add. */
int dt_embedding(dt_graph *g, int ids, int table);

/* bf16 mixed precision (dt_graph_opts.bf16_gemm) on this CPU. DT_BF16_NATIVE: oneDNN reports
 * bf16 instructions (AVX-512 BF16 or AMX; dnnl_get_effective_cpu_isa, so ONEDNN_MAX_CPU_ISA
 * counts); DT_BF16_EMULATE: DT_CPU_BF16=emulate (tests: the exact f32 emulation on any CPU);
 * DT_BF16_NONE: neither, or DT_CPU_BF16=none (tests: the refusal on any CPU). Both runnable modes
 * multiply the same bf16 values: natively (linear, matmul and conv2d on oneDNN's bf16 kernels)
 * or as f32 GEMMs on bf16-rounded operands (the emulation) (docs/ops.md). */
enum { DT_BF16_NONE = 0, DT_BF16_NATIVE = 1, DT_BF16_EMULATE = 2 };
int dt_bf16_gemm_mode(void);
/* DT_OK if the mode can run here; else DT_ERR_INVALID with
 * "<who>: this CPU has no bf16 instructions (AVX-512 BF16/AMX); use fp32". */
dt_status dt_bf16_gemm_check(const char *who);

#ifdef __cplusplus
}
#endif
#endif
