/* CUDA glue (src/ops/ops_cuda.h) of linear (f32 and frozen bf16 weights), add/sub/mul, scale, silu,
 * transpose/permute and dropout: node parameters as the CPU files define them, kernels of
 * include/dtrain/device_cuda.h. gin_beta 0 overwrites a gradient, 1 adds into it. */
#include "dtrain/device_cuda.h"
#include "ops/ops_cuda.h"

/* ---- linear: ip = {R, in, out, has_bias, bf16}; x [R, in], w [out, in], bias [out] (in[2] when
 * has_bias), y [R, out] ---- */

dt_status dt_linear_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->ip[4] = 0; /* bf16_gemm is refused for CUDA graphs */
    n->ws_fwd = n->ws_bwd = 0;
    return DT_OK;
}

dt_status dt_linear_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    /* y = x w^T (+ b: the bias [out] as a per-channel bias of y viewed as [R, out, 1]) */
    dt_status st = dt_cuda_gemm_run(c->run->gemm, s, DT_GEMM_F32, 0, 1, R, out, in, 1.0f,
                                    c->in[0].data, in, c->in[1].data, in, 0.0f, c->out.data, out);
    if (st == DT_OK && ip[3]) st = dt_cuda_bias_add(s, c->out.data, c->in[2].data, R, out, 1);
    return st;
}

/* dx [R, in] = g w (+ dx); dW [out, in] = g^T x (+ dW); db [out] = sum of g over R (+ db). */
dt_status dt_linear_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    dt_status st = DT_OK;
    if (c->gin[0].data)
        st = dt_cuda_gemm_run(c->run->gemm, s, DT_GEMM_F32, 0, 0, R, in, out, 1.0f, c->gout.data,
                              out, c->in[1].data, in, c->gin_beta[0], c->gin[0].data, in);
    if (st == DT_OK && c->gin[1].data)
        st = dt_cuda_gemm_run(c->run->gemm, s, DT_GEMM_F32, 1, 0, out, in, R, 1.0f, c->gout.data,
                              out, c->in[0].data, in, c->gin_beta[1], c->gin[1].data, in);
    if (st == DT_OK && ip[3] && c->gin[2].data)
        st = dt_cuda_bias_grad(s, c->gin[2].data, c->gout.data, R, out, 1, c->gin_beta[2] != 0.0f);
    return st;
}

/* ---- linear_bf16 (src/ops/linear_bf16.c): the frozen bf16 weight of a LoRA base; ip as linear's,
 * w [out, in] bf16 bits, no dW. The CPU op's native path: the f32 operand is rounded to bf16
 * (round-to-nearest-even) into ws, then a bf16 x bf16 GEMM with f32 accumulation and output.
 * ws_fwd: xb [R, in] bf16; ws_bwd: gb [R, out] bf16. ---- */

dt_status dt_linear_bf16_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->ws_fwd = (size_t)(n->ip[0] * n->ip[1]) * sizeof(uint16_t);
    n->ws_bwd = (size_t)(n->ip[0] * n->ip[2]) * sizeof(uint16_t);
    return DT_OK;
}

dt_status dt_linear_bf16_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    uint16_t *xb = c->ws;
    /* y [R, out] = xb [R, in] w^T (+ b) */
    dt_status st = dt_cuda_to_bf16(s, xb, c->in[0].data, R * in);
    if (st == DT_OK)
        st = dt_cuda_gemm_run(c->run->gemm, s, DT_GEMM_BF16, 0, 1, R, out, in, 1.0f, xb, in,
                              c->in[1].data, in, 0.0f, c->out.data, out);
    if (st == DT_OK && ip[3]) st = dt_cuda_bias_add(s, c->out.data, c->in[2].data, R, out, 1);
    return st;
}

/* dx [R, in] = gb [R, out] w (+ dx); db [out] = sum of g over R (+ db). */
dt_status dt_linear_bf16_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    if (c->gin[1].data)
        return dt_error_set(DT_ERR_STATE,
                            "linear: a bf16 weight [%lld, %lld] cannot have a gradient",
                            (long long)out, (long long)in);
    dt_status st = DT_OK;
    if (c->gin[0].data) {
        uint16_t *gb = c->ws;
        st = dt_cuda_to_bf16(s, gb, c->gout.data, R * out);
        if (st == DT_OK)
            st = dt_cuda_gemm_run(c->run->gemm, s, DT_GEMM_BF16, 0, 0, R, in, out, 1.0f, gb, out,
                                  c->in[1].data, in, c->gin_beta[0], c->gin[0].data, in);
    }
    if (st == DT_OK && ip[3] && c->gin[2].data)
        st = dt_cuda_bias_grad(s, c->gin[2].data, c->gout.data, R, out, 1, c->gin_beta[2] != 0.0f);
    return st;
}

/* ---- add / sub / mul: ip[0] = 0 add, 1 sub, 2 mul (src/ops/elementwise.c) ---- */

dt_status dt_ew_cuda_prepare(dt_graph *g, dt_node *n) {
    const dt_tensor *a = &dt_graph_node(g, n->in[0])->t, *b = &dt_graph_node(g, n->in[1])->t;
    int64_t m = dt_tensor_numel(&n->t);
    if (dt_tensor_numel(a) != m || dt_tensor_numel(b) != m) {
        const dt_tensor *ts[2] = {a, b};
        dt_shape_error(n->op->name, "broadcasting has no CUDA kernel yet", 2, ts);
        return DT_ERR_STATE;
    }
    return DT_OK;
}

dt_status dt_ew_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    return dt_cuda_ew(s, c->out.data, c->in[0].data, c->in[1].data, dt_tensor_numel(&c->out),
                      (int)c->node->ip[0], 0.0f);
}

dt_status dt_ew_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    int64_t n = dt_tensor_numel(&c->out);
    int kind = (int)c->node->ip[0];
    dt_status st = DT_OK;
    for (int j = 0; j < 2 && st == DT_OK; j++) {
        if (!c->gin[j].data) continue;
        if (kind == 2) /* d(a b)/da = g b, d/db = g a */
            st = dt_cuda_ew(s, c->gin[j].data, c->gout.data, c->in[1 - j].data, n, 2,
                            c->gin_beta[j]);
        else
            st = dt_cuda_axpby(s, c->gin[j].data, c->gout.data, n,
                               kind == 1 && j == 1 ? -1.0f : 1.0f, c->gin_beta[j]);
    }
    return st;
}

/* ---- scale: y = fp[0] x ---- */

dt_status dt_scale_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g, (void)n;
    return DT_OK;
}

dt_status dt_scale_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    return dt_cuda_axpby(s, c->out.data, c->in[0].data, dt_tensor_numel(&c->out), c->node->fp[0],
                         0.0f);
}

dt_status dt_scale_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    return dt_cuda_axpby(s, c->gin[0].data, c->gout.data, dt_tensor_numel(&c->out), c->node->fp[0],
                         c->gin_beta[0]);
}

/* ---- silu ---- */

dt_status dt_silu_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g, (void)n;
    return DT_OK;
}

dt_status dt_silu_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    return dt_cuda_silu_fwd(s, c->out.data, c->in[0].data, dt_tensor_numel(&c->out));
}

dt_status dt_silu_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    return dt_cuda_silu_bwd(s, c->gin[0].data, c->gout.data, c->in[0].data,
                            dt_tensor_numel(&c->out), c->gin_beta[0]);
}

/* ---- transpose / permute: ip[0..nd-1] = perm, out.shape[i] = x.shape[perm[i]] ---- */

static void strides_of(const dt_tensor *t, int64_t *str) {
    int64_t s = 1;
    for (int j = t->ndim - 1; j >= 0; j--) str[j] = s, s *= t->shape[j];
}

dt_status dt_permute_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g, (void)n;
    return DT_OK;
}

dt_status dt_permute_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    int nd = c->out.ndim;
    int64_t xstr[DT_MAX_DIMS], sstr[DT_MAX_DIMS];
    strides_of(&c->in[0], xstr);
    for (int i = 0; i < nd; i++) sstr[i] = xstr[c->node->ip[i]];
    return dt_cuda_strided_copy(s, c->out.data, c->in[0].data, nd, c->out.shape, sstr, 0.0f);
}

/* gin (x's shape): x dim perm[i] reads gout dim i. */
dt_status dt_permute_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    int nd = c->out.ndim;
    int64_t ostr[DT_MAX_DIMS], sstr[DT_MAX_DIMS];
    strides_of(&c->out, ostr);
    for (int i = 0; i < nd; i++) sstr[c->node->ip[i]] = ostr[i];
    return dt_cuda_strided_copy(s, c->gin[0].data, c->gout.data, nd, c->in[0].shape, sstr,
                                c->gin_beta[0]);
}

/* ---- dropout: fp[0] = p; the counter-based mask of the CPU op, regenerated in backward ---- */

dt_status dt_dropout_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g, (void)n;
    return DT_OK;
}

static dt_status dropout_run(const dt_op_ctx *c, dt_stream *s, float *y, const float *x,
                             float beta) {
    int64_t n = dt_tensor_numel(&c->out);
    float p = c->node->fp[0];
    if (!c->run->training || p == 0.0f) return dt_cuda_axpby(s, y, x, n, 1.0f, beta);
    return dt_cuda_dropout(s, y, x, n, p, c->run->key, c->run->step, c->run->step_dev,
                           (uint32_t)c->node->id, beta != 0.0f);
}

dt_status dt_dropout_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    return dropout_run(c, s, c->out.data, c->in[0].data, 0.0f);
}

dt_status dt_dropout_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    return dropout_run(c, s, c->gin[0].data, c->gout.data, c->gin_beta[0]);
}
