/* bf16 mixed precision for the GEMM ops (dt_graph_opts.bf16_gemm): linear, matmul and conv2d
 * take their operands rounded to bf16 and accumulate in f32.
 *
 * How: each operand a product reads (x and w forward; g and w for dx; g and x for dW) is
 * rounded to bf16 into the op's ws and kept as f32, and the op's f32 kernel runs on the
 * copies. A product of two bf16 values has at most 16 significant bits, so it is exact in f32:
 * the result is what a bf16 x bf16 -> f32 kernel computes, up to the order of the f32 sums. The
 * values the graph keeps (activations, gradients, the f32 master weights) are never rounded
 * in place, so the next op, the optimizer and the norms see f32.
 *
 * Which CPUs: dt_bf16_gemm_mode. The mode is meant for CPUs with bf16 instructions (where
 * linear, matmul and conv2d run oneDNN's native bf16 kernels instead: gemm_bf16.c, conv.c, and
 * this emulation only for a shape oneDNN has no bf16 kernel for); elsewhere it is refused in one
 * line, except with DT_CPU_BF16=emulate (tests on AVX2 machines). */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "dtrain/tensor.h"
#include "ops/bf16.h"

int dt_bf16_gemm_mode(void) {
    const char *e = getenv("DT_CPU_BF16");
    if (e && !strcmp(e, "emulate")) return DT_BF16_EMULATE;
    if (e && !strcmp(e, "none")) return DT_BF16_NONE;
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ? DT_BF16_NATIVE
                                                                                  : DT_BF16_NONE;
}

dt_status dt_bf16_gemm_check(const char *who) {
    if (dt_bf16_gemm_mode() != DT_BF16_NONE) return DT_OK;
    return dt_error_set(DT_ERR_INVALID,
                        "%s: this CPU has no bf16 instructions (AVX-512 BF16/AMX); use fp32", who);
}

dt_status dt_bf16_gemm_prepare_check(const dt_graph *g, const char *op) {
    if (dt_graph_measuring(g)) return DT_OK; /* `dtrain plan` sizes a bf16 run on any CPU */
    char who[64];
    snprintf(who, sizeof who, "%s: bf16 operands (dt_graph_opts.bf16_gemm)", op);
    return dt_bf16_gemm_check(who);
}

void dt_bf16_round_f32(float *dst, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(dt_bf16_from_f32(x[i]));
}

size_t dt_bf16_ws_bytes(int64_t n) {
    return ((size_t)n * sizeof(float) + 63) & ~(size_t)63;
}

/* The operand numbered k (0..3: in[k], 4: gout) of node n. */
static const dt_tensor *operand_shape(const dt_graph *g, const dt_node *n, int k) {
    return k < 4 ? dt_graph_shape(g, n->in[k]) : &n->t;
}

size_t dt_bf16_rounded_bytes(const dt_graph *g, const dt_node *n, unsigned which) {
    size_t b = 0;
    for (int k = 0; k <= 4; k++)
        if (which & (1u << k)) b += dt_bf16_ws_bytes(dt_tensor_numel(operand_shape(g, n, k)));
    return b;
}

dt_status dt_bf16_run_rounded(const dt_op_ctx *c, unsigned which,
                              dt_status (*kernel)(const dt_op_ctx *)) {
    dt_op_ctx r = *c;
    char *ws = c->ws;
    for (int k = 0; k <= 4; k++) {
        if (!(which & (1u << k))) continue;
        dt_tensor *t = k < 4 ? &r.in[k] : &r.gout;
        int64_t n = dt_tensor_numel(t);
        dt_bf16_round_f32((float *)ws, t->data, n);
        t->data = ws;
        ws += dt_bf16_ws_bytes(n);
    }
    r.ws = ws;
    return kernel(&r);
}
