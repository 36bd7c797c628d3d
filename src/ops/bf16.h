/* bf16 mixed precision for the GEMM ops (internal to src/ops/): rounding operands to bf16 while
 * keeping them as f32, and the ws sizes of those copies. See src/ops/bf16.c. */
#ifndef DTRAIN_OPS_BF16_H
#define DTRAIN_OPS_BF16_H

#include <stddef.h>
#include <stdint.h>
#include "graph/op.h"

/* dst[i] = x[i] rounded to the nearest bf16 (ties to even, NaN stays NaN), kept as f32, for
 * i < n; dst == x rounds in place. Parallel over the OpenMP pool for large n. */
void dt_bf16_round_f32(float *dst, const float *x, int64_t n);
/* Bytes of ws for a rounded copy of n floats, a multiple of 64 (regions stay aligned). */
size_t dt_bf16_ws_bytes(int64_t n);
/* For a GEMM op's prepare under dt_graph_opts.bf16_gemm: DT_OK where the mode may run (a CPU
 * with bf16 instructions, DT_CPU_BF16=emulate, or a measure_only compile), else the one-line
 * refusal naming `op`. */
dt_status dt_bf16_gemm_prepare_check(const dt_graph *g, const char *op);
/* Runs kernel on a copy of c whose operands listed in `which` (bit i: in[i]; DT_BF16_GOUT: gout)
 * point to bf16-rounded copies laid out one after the other at the start of c->ws (each
 * dt_bf16_ws_bytes of its numel), the kernel's own ws (if any) following them. */
dt_status dt_bf16_run_rounded(const dt_op_ctx *c, unsigned which,
                              dt_status (*kernel)(const dt_op_ctx *));
/* The ws bytes dt_bf16_run_rounded takes for `which` of node n before the kernel's own. */
size_t dt_bf16_rounded_bytes(const dt_graph *g, const dt_node *n, unsigned which);
#define DT_BF16_GOUT (1u << 4)

#endif
