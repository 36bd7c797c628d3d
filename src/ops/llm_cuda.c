/* CUDA glue (src/ops/ops_cuda.h) of rmsnorm, rope, attention, embedding and cross-entropy:
 * node parameters as the CPU files define them, aux/ws sized for the CUDA kernels of
 * include/dtrain/device_cuda.h. gin_beta 0 overwrites a gradient, 1 adds into it; where a
 * kernel can only overwrite, the glue writes into ws and adds. */
#include <stdio.h>
#include "dtrain/device_cuda.h"
#include "ops/ops_cuda.h"
#include "ops/rope_impl.h"

static size_t al256(size_t x) {
    return (x + 255) / 256 * 256;
}

static int64_t last_dim(const dt_tensor *t) {
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

/* ---- rmsnorm: ip[0] = weight's input index or -1, fp[0] = eps; x, y [rows, D] ---- */

/* aux: rstd [rows]; ws_bwd: [kernel scratch | dx [rows, D] | dw [D]] (the last two take the
 * kernel's output when it must be added into an existing gradient). */
dt_status dt_rmsnorm_cuda_prepare(dt_graph *g, dt_node *n) {
    const dt_tensor *x = &dt_graph_node(g, n->in[0])->t;
    int64_t D = last_dim(x), rows = dt_tensor_numel(x) / D;
    n->aux_bytes = (size_t)rows * sizeof(float);
    n->ws_fwd = 0;
    n->ws_bwd = al256(dt_cuda_rmsnorm_bwd_work(rows, D)) +
                al256((size_t)(rows * D) * sizeof(float)) + (size_t)D * sizeof(float);
    return DT_OK;
}

dt_status dt_rmsnorm_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const dt_node *n = c->node;
    int64_t D = last_dim(&c->in[0]), rows = dt_tensor_numel(&c->in[0]) / D;
    const float *w = n->ip[0] >= 0 ? c->in[n->ip[0]].data : NULL;
    return dt_cuda_rmsnorm_fwd(s, c->out.data, c->aux, c->in[0].data, w, rows, D, n->fp[0]);
}

dt_status dt_rmsnorm_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const dt_node *n = c->node;
    int64_t D = last_dim(&c->in[0]), rows = dt_tensor_numel(&c->in[0]) / D;
    int64_t iw = n->ip[0];
    const float *w = iw >= 0 ? c->in[iw].data : NULL;
    char *ws = c->ws;
    size_t o1 = al256(dt_cuda_rmsnorm_bwd_work(rows, D));
    float *tdx = (float *)(ws + o1), *tdw = (float *)(ws + o1 + al256((size_t)(rows * D) * 4));
    float *dx = c->gin[0].data, *dw = iw >= 0 ? c->gin[iw].data : NULL;
    int add_dx = dx && c->gin_beta[0] != 0.0f, add_dw = dw && c->gin_beta[iw] != 0.0f;
    if (!dx && !dw) return DT_OK;
    dt_status st = dt_cuda_rmsnorm_bwd(s, add_dx ? tdx : dx, add_dw ? tdw : dw, c->gout.data,
                                       c->in[0].data, w, c->aux, rows, D, ws);
    if (st == DT_OK && add_dx) st = dt_cuda_axpby(s, dx, tdx, rows * D, 1.0f, 1.0f);
    if (st == DT_OK && add_dw) st = dt_cuda_axpby(s, dw, tdw, D, 1.0f, 1.0f);
    return st;
}

/* ---- rope: x, y [B, H, T, 2 half]; in[1] positions [Bc, T] when ip[IP_HAS_POS] ---- */

dt_status dt_rope_cuda_prepare(dt_graph *g, dt_node *n) {
    rope_state *st = n->state;
    n->ws_fwd = n->ws_bwd = 0;
    if (dt_graph_measuring(g)) return DT_OK;
    st->cuda_inv_freq = dt_graph_device_const(g, st->inv_freq, (size_t)st->half * sizeof(float));
    return st->cuda_inv_freq ? DT_OK : DT_ERR_NOMEM;
}

static dt_status rope_run(const dt_op_ctx *c, dt_stream *s, float *y, const float *x, int bwd,
                          int acc) {
    const rope_state *st = c->node->state;
    const dt_tensor *t = &c->in[0];
    int64_t B = t->shape[0], H = t->shape[1], T = t->shape[2], Bc = 1;
    const void *pos = NULL;
    int i64 = 0;
    if (c->node->ip[IP_HAS_POS]) {
        pos = c->in[1].data;
        i64 = c->in[1].dtype == DT_I64;
        Bc = dt_tensor_numel(&c->in[1]) / (T ? T : 1);
    }
    if (!bwd) return dt_cuda_rope_fwd(s, y, x, st->cuda_inv_freq, pos, i64, Bc, B, H, T, st->half);
    return dt_cuda_rope_bwd(s, y, x, st->cuda_inv_freq, pos, i64, Bc, B, H, T, st->half, acc);
}

dt_status dt_rope_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    return rope_run(c, s, c->out.data, c->in[0].data, 0, 0);
}

dt_status dt_rope_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    return rope_run(c, s, c->gin[0].data, c->gout.data, 1, c->gin_beta[0] != 0.0f);
}

/* ---- attention: ip[0] = causal, fp[0] = scale; q [B, Hq, T, D], k, v [B, Hkv, T, D] ---- */

dt_status dt_attention_cuda_prepare(dt_graph *g, dt_node *n) {
    const dt_tensor *q = &dt_graph_node(g, n->in[0])->t, *k = &dt_graph_node(g, n->in[1])->t;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3];
    if (D > 128 || B * Hq > 65535)
        return dt_error_set(DT_ERR_STATE,
                            "graph: attention with head dim %lld (at most 128) and B * Hq %lld "
                            "(at most 65535) has no CUDA kernel yet (k heads %lld)",
                            (long long)D, (long long)(B * Hq), (long long)k->shape[1]);
    if (n->in[0] == n->in[1] || n->in[1] == n->in[2] || n->in[0] == n->in[2])
        return dt_error_set(DT_ERR_STATE, "graph: attention with one node as two of q, k, v has "
                                          "no CUDA kernel yet (its gradients must be distinct)");
    n->aux_bytes = (size_t)(B * Hq * T) * sizeof(float); /* lse */
    n->ws_fwd = 0;
    n->ws_bwd = dt_cuda_attention_bwd_work(B, Hq, T);
    return DT_OK;
}

dt_status dt_attention_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const dt_tensor *q = &c->in[0];
    return dt_cuda_attention_fwd(s, c->out.data, c->aux, q->data, c->in[1].data, c->in[2].data, 0,
                                 q->shape[0], q->shape[1], c->in[1].shape[1], q->shape[2],
                                 (int)q->shape[3], (int)c->node->ip[0], c->node->fp[0]);
}

dt_status dt_attention_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const dt_tensor *q = &c->in[0];
    int acc = 0;
    static const int bits[3] = {DT_CUDA_ACC_DQ, DT_CUDA_ACC_DK, DT_CUDA_ACC_DV};
    for (int j = 0; j < 3; j++)
        if (c->gin[j].data && c->gin_beta[j] != 0.0f) acc |= bits[j];
    if (!c->gin[0].data && !c->gin[1].data && !c->gin[2].data) return DT_OK;
    return dt_cuda_attention_bwd(s, c->gin[0].data, c->gin[1].data, c->gin[2].data, c->gout.data,
                                 q->data, c->in[1].data, c->in[2].data, 0, c->out.data, c->aux,
                                 q->shape[0], q->shape[1], c->in[1].shape[1], q->shape[2],
                                 (int)q->shape[3], (int)c->node->ip[0], c->node->fp[0], acc, c->ws);
}

/* ---- embedding: ip = {n, V, D}; ids [n] i32/i64, table [V, D] f32 (or bf16, no grad) ---- */

/* aux: the first bad id's position (int64, -1 when none; read back by the check below). */
dt_status dt_embedding_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->aux_bytes = sizeof(int64_t);
    n->ws_fwd = 0;
    n->ws_bwd = dt_cuda_embedding_bwd_work(n->ip[0]);
    return DT_OK;
}

dt_status dt_embedding_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const int64_t *ip = c->node->ip;
    return dt_cuda_embedding_fwd(s, c->out.data, c->aux, c->in[0].data, c->in[0].dtype == DT_I64,
                                 c->in[1].data, c->in[1].dtype == DT_BF16, ip[0], ip[1], ip[2]);
}

/* The id at device position i of ids (i32 or i64), downloaded into *id; 0 when ids are not a
 * graph input (the value of another node, whose memory later entries may have reused). */
static int id_read(dt_graph *g, const dt_op_ctx *c, int k, int64_t i, int64_t *id) {
    const dt_tensor *ids = &c->in[k];
    if (dt_graph_node(g, c->node->in[k])->kind != DT_NODE_INPUT) return 0;
    if (ids->dtype == DT_I64)
        return dt_graph_download(g, id, (const int64_t *)ids->data + i, 8) == DT_OK;
    int32_t v = 0;
    int ok = dt_graph_download(g, &v, (const int32_t *)ids->data + i, 4) == DT_OK;
    *id = v;
    return ok;
}

int64_t dt_embedding_cuda_check_at(dt_graph *g, const dt_node *n) {
    (void)g, (void)n;
    return 0; /* aux is the position alone */
}

dt_status dt_embedding_cuda_check(dt_graph *g, const dt_op_ctx *c, int64_t pos) {
    const int64_t *ip = c->node->ip;
    int64_t id = 0;
    char what[64] = "an id";
    if (id_read(g, c, 0, pos, &id)) snprintf(what, sizeof what, "id %lld", (long long)id);
    return dt_error_set(DT_ERR_RANGE,
                        "embedding: %s at position %lld is outside [0, V) for table [V, D] = "
                        "[%lld, %lld]",
                        what, (long long)pos, (long long)ip[1], (long long)ip[2]);
}

dt_status dt_embedding_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const int64_t *ip = c->node->ip;
    if (!c->gin[1].data) return DT_OK;
    if (c->in[1].dtype != DT_F32)
        return dt_error_set(DT_ERR_STATE,
                            "embedding: a bf16 table [%lld, %lld] cannot have a "
                            "gradient",
                            (long long)ip[1], (long long)ip[2]);
    return dt_cuda_embedding_bwd(s, c->gin[1].data, c->gout.data, c->in[0].data,
                                 c->in[0].dtype == DT_I64, ip[0], ip[1], ip[2],
                                 c->gin_beta[1] != 0.0f, c->ws);
}

/* ---- cross_entropy: ip[0] = ignore_index, fp[0] = label_smoothing; logits [N, C] ---- */

/* aux: [lse [N] f32, padded to 8 bytes | stats [2] int64]; ws_fwd: the kernel's scratch. */
static size_t ce_stats_offset(int64_t N) {
    return ((size_t)N * sizeof(float) + 7) & ~(size_t)7;
}

dt_status dt_ce_cuda_prepare(dt_graph *g, dt_node *n) {
    const dt_tensor *x = &dt_graph_node(g, n->in[0])->t, *t = &dt_graph_node(g, n->in[1])->t;
    int64_t N = dt_tensor_numel(x) / last_dim(x);
    if (t->dtype != DT_I32)
        return dt_error_set(DT_ERR_STATE,
                            "graph: cross_entropy with %s targets has no CUDA "
                            "kernel yet (i32 only)",
                            dt_dtype_name(t->dtype));
    n->aux_bytes = ce_stats_offset(N) + 2 * sizeof(int64_t);
    n->ws_fwd = dt_cuda_ce_work(N);
    n->ws_bwd = 0;
    return DT_OK;
}

dt_status dt_ce_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const dt_tensor *x = &c->in[0];
    int64_t C = last_dim(x), N = dt_tensor_numel(x) / C;
    return dt_cuda_ce_fwd(s, c->out.data, c->aux, (int64_t *)((char *)c->aux + ce_stats_offset(N)),
                          x->data, c->in[1].data, N, C, c->node->ip[0], c->node->fp[0], c->ws);
}

int64_t dt_ce_cuda_check_at(dt_graph *g, const dt_node *n) {
    const dt_tensor *x = &dt_graph_node(g, n->in[0])->t;
    return (int64_t)(ce_stats_offset(dt_tensor_numel(x) / last_dim(x)) + sizeof(int64_t));
}

dt_status dt_ce_cuda_check(dt_graph *g, const dt_op_ctx *c, int64_t pos) {
    int64_t C = last_dim(&c->in[0]), t = 0;
    char what[64] = "a target";
    if (id_read(g, c, 1, pos, &t)) snprintf(what, sizeof what, "target %lld", (long long)t);
    return dt_error_set(DT_ERR_RANGE,
                        "cross_entropy: %s at position %lld outside [0, %lld) (ignore_index %lld)",
                        what, (long long)pos, (long long)C, (long long)c->node->ip[0]);
}

dt_status dt_ce_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const dt_tensor *x = &c->in[0];
    int64_t C = last_dim(x), N = dt_tensor_numel(x) / C;
    if (!c->gin[0].data) return DT_OK;
    if (c->gin_beta[0] != 0.0f)
        return dt_error_set(DT_ERR_STATE, "cross_entropy: adding into an existing logits "
                                          "gradient has no CUDA kernel yet (logits used twice)");
    return dt_cuda_ce_bwd(s, c->gin[0].data, x->data, c->in[1].data, c->aux,
                          (const int64_t *)((const char *)c->aux + ce_stats_offset(N)),
                          c->gout.data, N, C, c->node->ip[0], c->node->fp[0]);
}
