/* CUDA glue (src/ops/ops_cuda.h) of the ResNet ops: conv2d (cuDNN plans), batchnorm2d and
 * batchnorm2d_fused, maxpool2d, avgpool2d, global_avgpool and relu. Node parameters are the CPU
 * files' (src/ops/conv.c, batchnorm.c, pool.c, activation.c); values are plain NCHW (a device
 * graph picks no channel-blocked layout). gin_beta 0 overwrites a gradient, 1 adds into it. */
#include <stdint.h>
#include "dtrain/device_cuda.h"
#include "ops/batchnorm_impl.h"
#include "ops/conv_impl.h"
#include "ops/ops_cuda.h"

/* ---- conv2d: ip = {sh, sw, ph, pw, dh, dw, groups, CUDA state flag}; x [N, C, H, W],
 * w [O, C/groups, KH, KW], bias [O] (in[2], optional), y [N, O, OH, OW] ---- */

/* The plan is made once here (cuDNN's engine choice for this shape, each direction), with
 * backward-data and backward-filter accumulating: the gradient's beta is only known per entry
 * of the schedule, so where it is 0 the backward zeroes the gradient first (one memset) and
 * adds. ws_fwd = ws_bwd = the plan's workspace, packed into the device arena like any scratch.
 * A measure-only compile makes no plan (it may run where there is no GPU) and counts no cuDNN
 * workspace (docs/gpu.md, Limitations). */
dt_status dt_conv2d_cuda_prepare(dt_graph *g, dt_node *n) {
    const dt_tensor *x = &dt_graph_node(g, n->in[0])->t, *w = &dt_graph_node(g, n->in[1])->t;
    n->aux_bytes = n->ws_fwd = n->ws_bwd = 0;
    if (dt_graph_measuring(g)) return DT_OK;
    dt_cuda_conv_shape sh = {.N = x->shape[0],
                             .C = x->shape[1],
                             .H = x->shape[2],
                             .W = x->shape[3],
                             .O = w->shape[0],
                             .KH = w->shape[2],
                             .KW = w->shape[3],
                             .stride_h = (int)n->ip[CV_SH],
                             .stride_w = (int)n->ip[CV_SW],
                             .pad_h = (int)n->ip[CV_PH],
                             .pad_w = (int)n->ip[CV_PW],
                             .dil_h = (int)n->ip[CV_DH],
                             .dil_w = (int)n->ip[CV_DW],
                             .groups = (int)n->ip[CV_GROUPS]};
    struct dt_cuda_dnn *h = NULL;
    dt_cuda_conv *plan = NULL;
    dt_status st = dt_graph_cuda_dnn(g, &h);
    if (st == DT_OK)
        st = dt_cuda_conv_create(h, &sh, DT_CUDA_CONV_ACC_DX | DT_CUDA_CONV_ACC_DW, 0, &plan);
    if (st != DT_OK) return st;
    n->state = plan;
    n->ip[CV_CUDA] = 1; /* conv.c's destroy: the state is this plan, not oneDNN's primitives */
    n->ws_fwd = n->ws_bwd = dt_cuda_conv_work(plan);
    return DT_OK;
}

void dt_conv2d_cuda_destroy(dt_node *n) {
    dt_cuda_conv_destroy(n->state);
    n->state = NULL;
}

/* cuDNN's plans were made for 16-byte aligned pointers: the arena is 64-byte aligned, but a
 * weight sits at its offset in the flat buffer. */
static dt_status conv_aligned(const dt_op_ctx *c, int n, const void *const *p) {
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16)
            return dt_error_set(DT_ERR_STATE,
                                "graph: conv2d (node %d) on CUDA needs 16-byte aligned operands "
                                "(operand %d is not: a weight at a flat offset not a multiple of "
                                "4 floats)",
                                c->node->id, i);
    return DT_OK;
}

dt_status dt_conv2d_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const float *bias = c->node->n_in > 2 ? c->in[2].data : NULL;
    dt_status st = conv_aligned(c, 3, (const void *[]){c->in[0].data, c->in[1].data, c->out.data});
    if (st != DT_OK) return st;
    return dt_cuda_conv_fwd(c->node->state, s, c->out.data, c->in[0].data, c->in[1].data, bias,
                            c->ws);
}

/* Zeroes gradient j where its beta is 0 (the plan adds into it). */
static dt_status conv_zero(const dt_op_ctx *c, dt_stream *s, int j) {
    if (!c->gin[j].data || c->gin_beta[j] != 0.0f) return DT_OK;
    return dt_cuda_memset(s, c->gin[j].data, 0, dt_tensor_nbytes(&c->gin[j]));
}

dt_status dt_conv2d_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    dt_cuda_conv *plan = c->node->state;
    float *dx = c->gin[0].data, *dw = c->gin[1].data;
    float *db = c->node->n_in > 2 ? c->gin[2].data : NULL;
    dt_status st = conv_aligned(c, 2, (const void *[]){c->gout.data, c->in[0].data});
    if (st == DT_OK && dx) st = conv_aligned(c, 2, (const void *[]){dx, c->in[1].data});
    if (st == DT_OK && dw) st = conv_aligned(c, 1, (const void *[]){dw});
    if (st == DT_OK && dx && (st = conv_zero(c, s, 0)) == DT_OK)
        st = dt_cuda_conv_bwd_data(plan, s, dx, c->gout.data, c->in[1].data, c->ws);
    if (st == DT_OK && (dw || db)) {
        if ((st = conv_zero(c, s, 1)) == DT_OK && db) st = conv_zero(c, s, 2);
        if (st == DT_OK)
            st = dt_cuda_conv_bwd_filter(plan, s, dw, db, c->gout.data, c->in[0].data, c->ws);
    }
    return st;
}

/* ---- batchnorm2d(_fused): ip = {running_mean id, running_var id, relu, has_res},
 * fp = {momentum, eps}; in = {x [N, C, *], weight [C], bias [C], residual (fused, optional)} ----
 */

/* x [N, C, *] as [N, C, P]. */
static void bn_dims(const dt_tensor *x, int64_t *N, int64_t *C, int64_t *P) {
    *N = x->shape[0], *C = x->shape[1];
    *P = dt_tensor_numel(x) / (*N * *C);
}

/* aux: mean [C], rstd [C] (what the forward used, for the backward); ws: the kernels' per-channel
 * partial sums. The running statistics are state params, read through the graph (node->state, as
 * the CPU op: a node has only four inputs). */
dt_status dt_bn_cuda_prepare(dt_graph *g, dt_node *n) {
    int64_t N, C, P;
    bn_dims(&dt_graph_node(g, n->in[BN_X])->t, &N, &C, &P);
    n->aux_bytes = 2 * (size_t)C * sizeof(float);
    n->ws_fwd = n->ws_bwd = dt_cuda_bn_work(N, C, P);
    n->state = g; /* borrowed */
    return DT_OK;
}

static float *bn_running(const dt_op_ctx *c, int which) {
    return dt_graph_value(c->node->state, (int)c->node->ip[which])->data;
}

dt_status dt_bn_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const dt_node *n = c->node;
    int64_t N, C, P;
    bn_dims(&c->in[BN_X], &N, &C, &P);
    int mode = DT_CUDA_BN_EVAL;
    if (c->run->training) {
        if (c->run->sync_fn)
            return dt_error_set(DT_ERR_STATE, "graph: batchnorm2d with synchronised statistics "
                                              "has no CUDA kernel yet");
        if (N * P < 2)
            return dt_error_set(DT_ERR_SHAPE,
                                "batchnorm2d: training needs more than 1 value per channel "
                                "(node %d: N %lld, H * W %lld)",
                                n->id, (long long)N, (long long)P);
        mode = c->recompute ? DT_CUDA_BN_RECOMPUTE : DT_CUDA_BN_TRAIN;
    }
    float *mean = c->aux, *rstd = mean + C;
    const float *res = n->ip[BN_HAS_RES] ? c->in[BN_RES].data : NULL;
    return dt_cuda_bn_fwd(s, c->out.data, mean, rstd, bn_running(c, BN_RM), bn_running(c, BN_RV),
                          c->in[BN_X].data, c->in[BN_W].data, c->in[BN_B].data, res,
                          (int)n->ip[BN_RELU], N, C, P, n->fp[BN_MOMENTUM], n->fp[BN_EPS], mode,
                          c->ws);
}

/* The forward ran in the same step, so its mode is the run's (training: batch statistics). The
 * fused ReLU masks gout in place, as the CPU op. */
dt_status dt_bn_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const dt_node *n = c->node;
    int64_t N, C, P;
    bn_dims(&c->in[BN_X], &N, &C, &P);
    int has_res = (int)n->ip[BN_HAS_RES];
    float *gres = has_res ? c->gin[BN_RES].data : NULL;
    float *gx = c->gin[BN_X].data, *gw = c->gin[BN_W].data, *gb = c->gin[BN_B].data;
    if (!gx && !gw && !gb && !gres) return DT_OK;
    int acc = (gx && c->gin_beta[BN_X] != 0.0f ? DT_CUDA_BN_ACC_GX : 0) |
              (gw && c->gin_beta[BN_W] != 0.0f ? DT_CUDA_BN_ACC_GW : 0) |
              (gb && c->gin_beta[BN_B] != 0.0f ? DT_CUDA_BN_ACC_GB : 0) |
              (gres && c->gin_beta[BN_RES] != 0.0f ? DT_CUDA_BN_ACC_GRES : 0);
    const float *mean = c->aux, *rstd = mean + C;
    return dt_cuda_bn_bwd(s, gx, gw, gb, gres, c->gout.data, c->in[BN_X].data, c->out.data, mean,
                          rstd, c->in[BN_W].data, c->run->training, (int)n->ip[BN_RELU], N, C, P,
                          acc, c->ws);
}

/* ---- maxpool2d / avgpool2d: ip = {kh, kw, sh, sw, ph, pw}; x [N, C, H, W] -> y [N, C, OH, OW] */

static dt_cuda_pool2d pool_of(const dt_op_ctx *c) {
    const dt_tensor *x = &c->in[0];
    const int64_t *ip = c->node->ip;
    dt_cuda_pool2d p = {.planes = x->shape[0] * x->shape[1],
                        .H = x->shape[2],
                        .W = x->shape[3],
                        .OH = c->node->t.shape[2],
                        .OW = c->node->t.shape[3],
                        .kh = (int)ip[0],
                        .kw = (int)ip[1],
                        .sh = (int)ip[2],
                        .sw = (int)ip[3],
                        .ph = (int)ip[4],
                        .pw = (int)ip[5]};
    return p;
}

/* aux: the argmax [N, C, OH, OW] (int32). */
dt_status dt_maxpool_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->aux_bytes = (size_t)dt_tensor_numel(&n->t) * sizeof(int32_t);
    n->ws_fwd = n->ws_bwd = 0;
    return DT_OK;
}

dt_status dt_maxpool_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    dt_cuda_pool2d p = pool_of(c);
    return dt_cuda_maxpool_fwd(s, c->out.data, c->aux, c->in[0].data, &p);
}

dt_status dt_maxpool_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    dt_cuda_pool2d p = pool_of(c);
    return dt_cuda_maxpool_bwd(s, c->gin[0].data, c->gout.data, c->aux, &p, c->gin_beta[0] != 0.0f);
}

dt_status dt_avgpool_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->aux_bytes = n->ws_fwd = n->ws_bwd = 0;
    return DT_OK;
}

dt_status dt_avgpool_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    dt_cuda_pool2d p = pool_of(c);
    return dt_cuda_avgpool_fwd(s, c->out.data, c->in[0].data, &p);
}

dt_status dt_avgpool_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    dt_cuda_pool2d p = pool_of(c);
    return dt_cuda_avgpool_bwd(s, c->gin[0].data, c->gout.data, &p, c->gin_beta[0] != 0.0f);
}

/* ---- global_avgpool: x [N, C, H, W] -> y [N, C] ---- */

dt_status dt_gap_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->aux_bytes = n->ws_fwd = n->ws_bwd = 0;
    return DT_OK;
}

dt_status dt_gap_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    const dt_tensor *x = &c->in[0];
    return dt_cuda_gap_fwd(s, c->out.data, x->data, x->shape[0] * x->shape[1],
                           x->shape[2] * x->shape[3]);
}

dt_status dt_gap_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    const dt_tensor *x = &c->in[0];
    if (!c->gin[0].data) return DT_OK;
    return dt_cuda_gap_bwd(s, c->gin[0].data, c->gout.data, x->shape[0] * x->shape[1],
                           x->shape[2] * x->shape[3], c->gin_beta[0] != 0.0f);
}

/* ---- relu: y = max(x, 0); the backward reads y (DT_OPF_BWD_OUT) ---- */

dt_status dt_relu_cuda_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->aux_bytes = n->ws_fwd = n->ws_bwd = 0;
    return DT_OK;
}

dt_status dt_relu_cuda_forward(const dt_op_ctx *c, dt_stream *s) {
    return dt_cuda_relu_fwd(s, c->out.data, c->in[0].data, dt_tensor_numel(&c->out));
}

dt_status dt_relu_cuda_backward(const dt_op_ctx *c, dt_stream *s) {
    if (!c->gin[0].data) return DT_OK;
    return dt_cuda_relu_bwd(s, c->gin[0].data, c->gout.data, c->out.data, dt_tensor_numel(&c->out),
                            c->gin_beta[0]);
}
