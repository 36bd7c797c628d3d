/* 2-D convolution (NCHW, PyTorch semantics) on oneDNN primitives.
 *
 * Graph tensors: x [N, C, H, W], w [O, C/groups, KH, KW], bias [O], y [N, O, OH, OW].
 * oneDNN's fast kernels want blocked layouts (AVX-512: nChw16c activations, OIhw16i16o weights;
 * AVX2: nChw8c, OIhw8i8o),
 * so the primitives are created with "any" layouts and a tensor whose layout differs from the
 * chosen one is reordered into the op's ws on the way in and back on the way out. Activations
 * that the graph keeps channel-blocked (DT_LAYOUT_C16 / C8; src/graph/layout.c) usually match and
 * pass straight through; plain ones (the image batch, weights) are reordered, as PyTorch (ideep)
 * does for every NCHW tensor.
 * At ResNet shapes it measured 1.3-2.4x faster (forward + backward, batch 32, 2 threads) than
 * oneDNN's plain-layout path, which is im2col + sgemm ("gemm:jit"), so no im2col code is kept.
 * The primitives, reorders and memory objects are created once in prepare (node->state);
 * scratchpads are user-managed and live in ws, so a step allocates nothing.
 *
 * Backward: diff_src and diff_weights primitives overwrite their outputs; gin_beta == 1 is
 * handled by staging into ws and a reorder with a sum post-op (gin += staged). The bias
 * gradient is a plain per-channel sum over gy (own kernel), so it also works with a frozen
 * weight. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/ops_cnn.h"
#include "dtrain/ops_linear.h"
#include "graph/op.h"
#include "ops/bf16.h"
#include "ops/conv_impl.h"
#include "ops/dnnl_util.h"
#include "ops/ops_cuda.h"

/* Sizes of one convolution, read from the node. */
typedef struct conv_shape {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int64_t sh, sw, ph, pw, dh, dw, groups;
    int has_bias;
} conv_shape;

typedef struct conv_state {
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dt_dnnl_arg f_src, f_wei, f_dst; /* forward */
    dnnl_memory_t f_bias;            /* plain [O], read in place */
    dt_dnnl_buf f_scr;
    dt_dnnl_arg d_ddst, d_wei, d_dsrc; /* backward data */
    dt_dnnl_buf d_scr;
    dt_dnnl_arg w_src, w_ddst, w_dwei; /* backward weights */
    dt_dnnl_buf w_scr;
    int share_ddst; /* bwd_weights wants gy in bwd_data's layout: stage it once */
    int bf16;       /* dt_graph_opts.bf16_gemm: CONV_BF16_EMULATE or CONV_BF16_NATIVE */
} conv_state;

/* bf16 mode. Emulated (a CPU without bf16 kernels, DT_CPU_BF16=emulate): every primitive input
 * is rounded to bf16 in ws and kept as f32, and the f32 primitives run. Native (AVX-512 BF16 /
 * AMX): the primitives are oneDNN's bf16 convolutions with f32 outputs -- forward src, weights
 * bf16 -> dst f32 (bias f32); backward-data diff_dst, weights bf16 -> diff_src f32;
 * backward-weights src, diff_dst bf16 -> diff_weights f32 -- and each input's staging reorder
 * converts it to bf16 (round to nearest even) on its way into ws, so the copies are half the
 * size. Where oneDNN has no bf16 primitive for a shape, the whole op falls back to emulation. */
enum { CONV_BF16_EMULATE = 1, CONV_BF16_NATIVE = 2 };

/* In emulated bf16 mode, input argument a reads a bf16-rounded copy (dt_dnnl_arg_round_bf16). */
static void round_in(const conv_state *s, dt_dnnl_arg *a, size_t *ws) {
    if (s->bf16 == CONV_BF16_EMULATE) dt_dnnl_arg_round_bf16(a, ws);
}

static const char *OP = "conv2d";

static void conv_shape_of(const dt_graph *g, const dt_node *n, conv_shape *s) {
    const dt_tensor *x = dt_graph_shape(g, n->in[0]), *w = dt_graph_shape(g, n->in[1]);
    s->N = x->shape[0], s->C = x->shape[1], s->H = x->shape[2], s->W = x->shape[3];
    s->O = w->shape[0], s->KH = w->shape[2], s->KW = w->shape[3];
    s->OH = n->t.shape[2], s->OW = n->t.shape[3];
    s->sh = n->ip[CV_SH], s->sw = n->ip[CV_SW], s->ph = n->ip[CV_PH], s->pw = n->ip[CV_PW];
    s->dh = n->ip[CV_DH], s->dw = n->ip[CV_DW], s->groups = n->ip[CV_GROUPS];
    s->has_bias = n->n_in > 2;
}

/* Plain layouts of the graph tensors and "any" layouts for the primitives to choose: f32 for
 * the outputs, *_in for the inputs (bf16 in native bf16 mode, else f32). */
typedef struct conv_mds {
    dnnl_memory_desc_t x, w, b, y;          /* plain */
    dnnl_memory_desc_t x_any, w_any, y_any; /* format_tag_any */
    dnnl_memory_desc_t x_in, w_in, y_in;    /* format_tag_any, inputs */
    dnnl_dims_t strides, dil, pad_l, pad_r;
} conv_mds;

/* oneDNN's tag for a graph layout. */
static dnnl_format_tag_t act_tag(int layout) {
    int b = dt_layout_block(layout);
    return b == 16 ? dnnl_nChw16c : b == 8 ? dnnl_nChw8c : dnnl_nchw;
}

static dt_status conv_mds_init(conv_mds *m, const conv_shape *s, int x_layout, int y_layout,
                               int bf16_in) {
    dnnl_dims_t xd = {s->N, s->C, s->H, s->W}, yd = {s->N, s->O, s->OH, s->OW}, bd = {s->O};
    /* Grouped weights are 5-D [G, O/G, C/G, KH, KW]: the same bytes as PyTorch's 4-D layout. */
    int g = s->groups > 1, wn = g ? 5 : 4;
    dnnl_dims_t wd = {s->O, s->C, s->KH, s->KW};
    if (g) {
        dnnl_dims_t w5 = {s->groups, s->O / s->groups, s->C / s->groups, s->KH, s->KW};
        memcpy(wd, w5, sizeof w5);
    }
    dnnl_status_t e = dnnl_memory_desc_init_by_tag(&m->x, 4, xd, dnnl_f32, act_tag(x_layout));
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->y, 4, yd, dnnl_f32, act_tag(y_layout));
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->b, 1, bd, dnnl_f32, dnnl_a);
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->w, wn, wd, dnnl_f32, g ? dnnl_goihw : dnnl_oihw);
    dnnl_format_tag_t any = dnnl_format_tag_any;
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->x_any, 4, xd, dnnl_f32, any);
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->y_any, 4, yd, dnnl_f32, any);
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->w_any, wn, wd, dnnl_f32, any);
    dnnl_data_type_t in = bf16_in ? dnnl_bf16 : dnnl_f32;
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->x_in, 4, xd, in, any);
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->y_in, 4, yd, in, any);
    if (!e) e = dnnl_memory_desc_init_by_tag(&m->w_in, wn, wd, in, any);
    memset(m->strides, 0, sizeof m->strides);
    memset(m->dil, 0, sizeof m->dil);
    memset(m->pad_l, 0, sizeof m->pad_l);
    memset(m->pad_r, 0, sizeof m->pad_r);
    m->strides[0] = s->sh, m->strides[1] = s->sw;
    m->dil[0] = s->dh - 1, m->dil[1] = s->dw - 1; /* oneDNN counts dilation from 0 */
    m->pad_l[0] = s->ph, m->pad_l[1] = s->pw;
    /* Right padding actually used by the last output (may be < pad_l, even negative, when
     * PyTorch's floor drops a partial window): oneDNN wants it exact. */
    m->pad_r[0] = (s->OH - 1) * s->sh + (s->KH - 1) * s->dh + 1 - s->H - s->ph;
    m->pad_r[1] = (s->OW - 1) * s->sw + (s->KW - 1) * s->dw + 1 - s->W - s->pw;
    return dt_dnnl_check(e, OP, "memory descriptor");
}

/* DT_ERR_DTYPE (for the fallback to emulation) where native bf16 mode finds no primitive. */
static dt_status pd_create(const conv_state *s, dnnl_primitive_desc_t *pd, const void *desc,
                           dnnl_primitive_t *p, const_dnnl_primitive_desc_t hint,
                           const char *what) {
    dnnl_primitive_attr_t attr;
    dt_status st = dt_dnnl_check(dnnl_primitive_attr_create(&attr), OP, "attr create");
    if (st) return st;
    /* Scratchpads go into our ws (sized at prepare), never allocated by oneDNN at run time. */
    st = dt_dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), OP,
                       "scratchpad mode");
    dnnl_status_t e =
        st ? dnnl_success : dnnl_primitive_desc_create(pd, desc, attr, dt_dnnl_engine(), hint);
    if (e == dnnl_unimplemented && s->bf16 == CONV_BF16_NATIVE)
        st = dt_error_set(DT_ERR_DTYPE, "%s: no oneDNN bf16 %s for this shape", OP, what);
    else if (!st)
        st = dt_dnnl_check(e, OP, what);
    dnnl_primitive_attr_destroy(attr);
    if (!st) st = dt_dnnl_check(dnnl_primitive_create(p, *pd), OP, what);
    return st;
}

/* Direct convolution, except that 3x3 stride-1 convolutions with enough channels let oneDNN pick
 * Winograd F(4x4, 3x3) ("auto") where its heuristic expects it to be faster. Measured at batch
 * 32 (2 threads, per primitive): forward and backward-data are ~2x faster with Winograd at 8x8
 * to 32x32 outputs, but not at 4x4 (backward-data 5.3 vs 4.2 ms at 512 channels), where only
 * backward-weights gains (4.1 vs 6.5 ms). Below 16 channels (the stem) oneDNN's Winograd
 * measured 4x slower. Results stay within ~1e-6 relative RMS of direct convolution. The choice
 * depends only on the shape (and oneDNN's deterministic heuristic), never on timings, so a run
 * and its resumption compute the same bits. */
enum { PRIM_FWD, PRIM_BWD_DATA, PRIM_BWD_WEIGHTS };
static dnnl_alg_kind_t conv_alg(const conv_shape *s, int prim) {
    int wino_ok = s->KH == 3 && s->KW == 3 && s->sh == 1 && s->sw == 1 && s->dh == 1 &&
                  s->dw == 1 && s->groups == 1 && s->C >= 16 && s->O >= 16;
    if (prim != PRIM_BWD_WEIGHTS && (s->OH < 8 || s->OW < 8)) wino_ok = 0;
    return wino_ok ? dnnl_convolution_auto : dnnl_convolution_direct;
}

static const dnnl_memory_desc_t *q(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static void conv_destroy(dt_node *n) {
    if (n->ip[CV_CUDA]) {
        dt_conv2d_cuda_destroy(n);
        return;
    }
    conv_state *s = n->state;
    if (!s) return;
    if (s->fwd) dnnl_primitive_destroy(s->fwd);
    if (s->bwd_data) dnnl_primitive_destroy(s->bwd_data);
    if (s->bwd_weights) dnnl_primitive_destroy(s->bwd_weights);
    if (s->f_bias) dnnl_memory_destroy(s->f_bias);
    dt_dnnl_arg *args[] = {&s->f_src,  &s->f_wei, &s->f_dst,  &s->d_ddst, &s->d_wei,
                           &s->d_dsrc, &s->w_src, &s->w_ddst, &s->w_dwei};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) dt_dnnl_arg_free(args[i]);
    dt_dnnl_buf_free(&s->f_scr);
    dt_dnnl_buf_free(&s->d_scr);
    dt_dnnl_buf_free(&s->w_scr);
    free(s);
    n->state = NULL;
}

static dt_status prepare_fwd(conv_state *s, const conv_shape *sh, const conv_mds *m,
                             dnnl_primitive_desc_t *pd, size_t *ws) {
    dnnl_convolution_desc_t d;
    dt_status st = dt_dnnl_check(dnnl_dilated_convolution_forward_desc_init(
                                     &d, dnnl_forward_training, conv_alg(sh, PRIM_FWD), &m->x_in,
                                     &m->w_in, sh->has_bias ? &m->b : NULL, &m->y_any, m->strides,
                                     m->dil, m->pad_l, m->pad_r),
                                 OP, "forward descriptor");
    if (!st) st = pd_create(s, pd, &d, &s->fwd, NULL, "forward primitive");
    if (!st) st = dt_dnnl_arg_init(&s->f_src, &m->x, q(*pd, dnnl_query_src_md), DT_DNNL_IN, ws, OP);
    if (!st) round_in(s, &s->f_src, ws);
    if (!st)
        st = dt_dnnl_arg_init(&s->f_wei, &m->w, q(*pd, dnnl_query_weights_md), DT_DNNL_IN, ws, OP);
    if (!st) round_in(s, &s->f_wei, ws);
    if (!st)
        st = dt_dnnl_arg_init(&s->f_dst, &m->y, q(*pd, dnnl_query_dst_md), DT_DNNL_OUT, ws, OP);
    if (!st && sh->has_bias)
        st =
            dt_dnnl_check(dnnl_memory_create(&s->f_bias, &m->b, dt_dnnl_engine(), DNNL_MEMORY_NONE),
                          OP, "memory create");
    if (!st) st = dt_dnnl_scratch_init(&s->f_scr, *pd, ws, OP);
    return st;
}

/* Backward data; gy's staging (d_ddst) comes first in ws so backward-weights can share it. */
static dt_status prepare_bwd_data(conv_state *s, const conv_shape *sh, const conv_mds *m,
                                  const_dnnl_primitive_desc_t fpd, dnnl_primitive_desc_t *pd,
                                  size_t *ws_shared, size_t *ws) {
    dnnl_convolution_desc_t d;
    dt_status st = dt_dnnl_check(dnnl_dilated_convolution_backward_data_desc_init(
                                     &d, conv_alg(sh, PRIM_BWD_DATA), &m->x_any, &m->w_in, &m->y_in,
                                     m->strides, m->dil, m->pad_l, m->pad_r),
                                 OP, "backward-data descriptor");
    if (!st) st = pd_create(s, pd, &d, &s->bwd_data, fpd, "backward-data primitive");
    if (!st)
        st = dt_dnnl_arg_init(&s->d_ddst, &m->y, q(*pd, dnnl_query_diff_dst_md), DT_DNNL_IN,
                              ws_shared, OP);
    if (!st) round_in(s, &s->d_ddst, ws_shared);
    *ws = *ws_shared;
    if (!st)
        st = dt_dnnl_arg_init(&s->d_wei, &m->w, q(*pd, dnnl_query_weights_md), DT_DNNL_IN, ws, OP);
    if (!st) round_in(s, &s->d_wei, ws);
    if (!st)
        st = dt_dnnl_arg_init(&s->d_dsrc, &m->x, q(*pd, dnnl_query_diff_src_md), DT_DNNL_OUT_ACCUM,
                              ws, OP);
    if (!st) st = dt_dnnl_scratch_init(&s->d_scr, *pd, ws, OP);
    return st;
}

/* Backward weights; `dpd` (NULL if x needs no gradient) tells whether gy can be shared. */
static dt_status prepare_bwd_weights(conv_state *s, const conv_shape *sh, const conv_mds *m,
                                     const_dnnl_primitive_desc_t fpd,
                                     const_dnnl_primitive_desc_t dpd, dnnl_primitive_desc_t *pd,
                                     size_t *ws) {
    dnnl_convolution_desc_t d;
    dt_status st = dt_dnnl_check(dnnl_dilated_convolution_backward_weights_desc_init(
                                     &d, conv_alg(sh, PRIM_BWD_WEIGHTS), &m->x_in, &m->w_any, NULL,
                                     &m->y_in, m->strides, m->dil, m->pad_l, m->pad_r),
                                 OP, "backward-weights descriptor");
    if (!st) st = pd_create(s, pd, &d, &s->bwd_weights, fpd, "backward-weights primitive");
    if (!st) st = dt_dnnl_arg_init(&s->w_src, &m->x, q(*pd, dnnl_query_src_md), DT_DNNL_IN, ws, OP);
    if (!st) round_in(s, &s->w_src, ws);
    if (!st) {
        const dnnl_memory_desc_t *gy = q(*pd, dnnl_query_diff_dst_md);
        s->share_ddst = dpd && dnnl_memory_desc_equal(gy, q(dpd, dnnl_query_diff_dst_md));
        if (!s->share_ddst) st = dt_dnnl_arg_init(&s->w_ddst, &m->y, gy, DT_DNNL_IN, ws, OP);
        if (!st && !s->share_ddst) round_in(s, &s->w_ddst, ws);
    }
    if (!st)
        st = dt_dnnl_arg_init(&s->w_dwei, &m->w, q(*pd, dnnl_query_diff_weights_md),
                              DT_DNNL_OUT_ACCUM, ws, OP);
    if (!st) st = dt_dnnl_scratch_init(&s->w_scr, *pd, ws, OP);
    return st;
}

/* Leaves without requires_grad (the image batch, a frozen weight) never get a gradient, so
 * their backward primitive is not created. */
static int may_need_grad(dt_graph *g, int id) {
    const dt_node *nd = dt_graph_node(g, id);
    return nd->kind == DT_NODE_OP || nd->requires_grad;
}

/* Creates the primitives and their staging in bf16 mode `bf16` (0: f32); sets ws_fwd / ws_bwd.
 * Backward ws layout: [gy staged for backward-data | backward-data's buffers], and
 * backward-weights' buffers overlapping backward-data's (which are finished by then) right
 * after the staged gy. */
static dt_status conv_prepare_mode(dt_graph *g, dt_node *n, int bf16) {
    conv_shape sh;
    conv_shape_of(g, n, &sh);
    conv_destroy(n); /* a compile retried after a failure starts afresh */
    conv_state *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "conv2d: out of memory");
    n->state = s;
    s->bf16 = bf16;
    conv_mds m;
    dt_status st = conv_mds_init(&m, &sh, dt_graph_node(g, n->in[0])->layout, n->layout,
                                 bf16 == CONV_BF16_NATIVE);
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    size_t wsf = 0, shared = 0, wsd = 0, wsw = 0;
    if (!st) st = prepare_fwd(s, &sh, &m, &fpd, &wsf);
    if (!st && may_need_grad(g, n->in[0]))
        st = prepare_bwd_data(s, &sh, &m, fpd, &dpd, &shared, &wsd);
    wsw = shared;
    if (!st && may_need_grad(g, n->in[1]))
        st = prepare_bwd_weights(s, &sh, &m, fpd, dpd, &wpd, &wsw);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (dpd) dnnl_primitive_desc_destroy(dpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    n->ws_fwd = wsf;
    n->ws_bwd = wsd > wsw ? wsd : wsw;
    return st;
}

static dt_status conv_prepare(dt_graph *g, dt_node *n) {
    if (!dt_dnnl_engine()) return DT_ERR_INTERNAL;
    if (!dt_graph_bf16_gemm(g)) return conv_prepare_mode(g, n, 0);
    dt_status st = dt_bf16_gemm_prepare_check(g, OP);
    if (st) return st;
    if (dt_bf16_gemm_mode() == DT_BF16_NATIVE) {
        st = conv_prepare_mode(g, n, CONV_BF16_NATIVE);
        if (st != DT_ERR_DTYPE) return st;
        dt_error_clear(); /* no bf16 primitive for this shape: emulate it */
    }
    return conv_prepare_mode(g, n, CONV_BF16_EMULATE);
}

/* y [N, O, OH, OW] = conv(x [N, C, H, W], w [O, C/G, KH, KW]) + bias [O] */
static dt_status conv_forward(const dt_op_ctx *c) {
    conv_state *s = c->node->state;
    dnnl_memory_t src = dt_dnnl_arg_in(&s->f_src, c->in[0].data, c->ws, OP);
    dnnl_memory_t wei = src ? dt_dnnl_arg_in(&s->f_wei, c->in[1].data, c->ws, OP) : NULL;
    if (!wei) return DT_ERR_INTERNAL;
    dnnl_memory_t dst = dt_dnnl_arg_out(&s->f_dst, c->out.data, c->ws, 0.0f);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, src},
                               {DNNL_ARG_WEIGHTS, wei},
                               {DNNL_ARG_DST, dst},
                               {DNNL_ARG_SCRATCHPAD, dt_dnnl_buf_bind(&s->f_scr, c->ws)}};
    int na = 4;
    if (s->f_bias) {
        dnnl_memory_set_data_handle(s->f_bias, c->in[2].data);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, s->f_bias};
    }
    dt_status st = dt_dnnl_exec(s->fwd, na, args, OP, "forward");
    if (!st) st = dt_dnnl_arg_done(&s->f_dst, c->out.data, c->ws, 0.0f, OP);
    return st;
}

/* gb [O] = beta * gb + sum over n, p of gy [N, O, P] (P = OH * OW); blocked by L channels
 * (L 16 or 8), gy is stored [N, O/L, P, L] and channel o's values are L floats apart. */
static void conv_bias_backward(float *gb, const float *gy, int64_t N, int64_t O, int64_t P,
                               float beta, int L) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < O; o++) {
        double acc = 0.0; /* double: P * N can be large, keep the sum exact enough */
        for (int64_t n = 0; n < N; n++) {
            float part = 0.0f;
            if (L) {
                const float *p = gy + ((n * (O / L) + o / L) * P) * L + o % L;
                for (int64_t i = 0; i < P; i++) part += p[L * i];
            } else {
                const float *p = gy + (n * O + o) * P;
#pragma omp simd reduction(+ : part)
                for (int64_t i = 0; i < P; i++) part += p[i];
            }
            acc += part;
        }
        gb[o] = (beta != 0.0f ? gb[o] : 0.0f) + (float)acc;
    }
}

static dt_status conv_backward(const dt_op_ctx *c) {
    conv_state *s = c->node->state;
    dt_status st = DT_OK;
    dnnl_memory_t ddst_d = NULL; /* gy staged for bwd_data (shared with bwd_weights if same) */
    if ((c->gin[0].data && !s->bwd_data) || (c->gin[1].data && !s->bwd_weights))
        return dt_error_set(DT_ERR_INTERNAL, "conv2d: gradient requested for a leaf without "
                                             "requires_grad");
    if (c->gin[0].data) {
        /* gx [N, C, H, W] (+)= conv_backward_data(gy [N, O, OH, OW], w) */
        ddst_d = dt_dnnl_arg_in(&s->d_ddst, c->gout.data, c->ws, OP);
        dnnl_memory_t wei = ddst_d ? dt_dnnl_arg_in(&s->d_wei, c->in[1].data, c->ws, OP) : NULL;
        if (!wei) return DT_ERR_INTERNAL;
        dnnl_memory_t dsrc = dt_dnnl_arg_out(&s->d_dsrc, c->gin[0].data, c->ws, c->gin_beta[0]);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, ddst_d},
                                   {DNNL_ARG_WEIGHTS, wei},
                                   {DNNL_ARG_DIFF_SRC, dsrc},
                                   {DNNL_ARG_SCRATCHPAD, dt_dnnl_buf_bind(&s->d_scr, c->ws)}};
        st = dt_dnnl_exec(s->bwd_data, 4, args, OP, "backward data");
        if (!st) st = dt_dnnl_arg_done(&s->d_dsrc, c->gin[0].data, c->ws, c->gin_beta[0], OP);
        if (st) return st;
    }
    if (c->gin[1].data) {
        /* gw [O, C/G, KH, KW] (+)= conv_backward_weights(x, gy) */
        dnnl_memory_t src = dt_dnnl_arg_in(&s->w_src, c->in[0].data, c->ws, OP);
        dnnl_memory_t ddst = NULL;
        if (s->share_ddst)
            ddst = ddst_d ? ddst_d : dt_dnnl_arg_in(&s->d_ddst, c->gout.data, c->ws, OP);
        else
            ddst = dt_dnnl_arg_in(&s->w_ddst, c->gout.data, c->ws, OP);
        if (!src || !ddst) return DT_ERR_INTERNAL;
        dnnl_memory_t dwei = dt_dnnl_arg_out(&s->w_dwei, c->gin[1].data, c->ws, c->gin_beta[1]);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src},
                                   {DNNL_ARG_DIFF_DST, ddst},
                                   {DNNL_ARG_DIFF_WEIGHTS, dwei},
                                   {DNNL_ARG_SCRATCHPAD, dt_dnnl_buf_bind(&s->w_scr, c->ws)}};
        st = dt_dnnl_exec(s->bwd_weights, 4, args, OP, "backward weights");
        if (!st) st = dt_dnnl_arg_done(&s->w_dwei, c->gin[1].data, c->ws, c->gin_beta[1], OP);
        if (st) return st;
    }
    if (c->node->n_in > 2 && c->gin[2].data) {
        const dt_tensor *y = &c->gout;
        conv_bias_backward(c->gin[2].data, c->gout.data, y->shape[0], y->shape[1],
                           y->shape[2] * y->shape[3], c->gin_beta[2],
                           dt_layout_block(c->node->layout));
    }
    return DT_OK;
}

/* x and y may each be channel-blocked, independently (the primitives convert whatever differs
 * from their own choice); grouped convolutions stay plain. */
static unsigned conv_layouts(const dt_graph *g, const dt_node *n) {
    (void)g;
    return n->ip[CV_GROUPS] == 1 ? DT_LAY_IN(0) | DT_LAY_OUT : 0u;
}

static const dt_op_def conv2d_def = {
    .name = "conv2d",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .prepare = conv_prepare,
    .forward = conv_forward,
    .backward = conv_backward,
    .destroy = conv_destroy,
    .layouts = conv_layouts,
    DT_CUDA_OP_ENTRIES(conv2d),
};

/* Builder-side errors: the message names the op, what is wrong and every input shape. */
static int conv_error(dt_status code, int n, const dt_tensor *const *ts, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int conv_error(dt_status code, int n, const dt_tensor *const *ts, const char *fmt, ...) {
    char what[160], shapes[200] = "", b[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    static const char *names[] = {"x", "w", "bias"};
    for (int i = 0; i < n; i++) {
        size_t len = strlen(shapes);
        snprintf(shapes + len, sizeof shapes - len, "%s%s %s %s", i ? ", " : "", names[i],
                 dt_shape_str(b, sizeof b, ts[i]->ndim, ts[i]->shape), dt_dtype_name(ts[i]->dtype));
    }
    dt_error_set(code, "conv2d: %s (%s)", what, shapes);
    return -1;
}

int dt_conv2d(dt_graph *g, int x, int w, int bias, int stride_h, int stride_w, int pad_h, int pad_w,
              int dil_h, int dil_w, int groups) {
    int nin = bias >= 0 ? 3 : 2;
    int ids[3] = {x, w, bias};
    if (dt_ids_bad(g, OP, nin, ids)) return -1;
    const dt_tensor *ts[3] = {dt_graph_shape(g, x), dt_graph_shape(g, w),
                              nin > 2 ? dt_graph_shape(g, bias) : NULL};
    const dt_tensor *X = ts[0], *Wt = ts[1], *B = ts[2];
    for (int i = 0; i < nin; i++)
        if (ts[i]->dtype != DT_F32)
            return conv_error(DT_ERR_DTYPE, nin, ts, "all inputs must be f32");
    if (X->ndim != 4 || Wt->ndim != 4 || (B && B->ndim != 1))
        return conv_error(DT_ERR_SHAPE, nin, ts,
                          "x must be [N, C, H, W], w [O, C/groups, KH, KW], bias [O]");
    if (stride_h < 1 || stride_w < 1 || dil_h < 1 || dil_w < 1 || pad_h < 0 || pad_w < 0)
        return conv_error(DT_ERR_INVALID, nin, ts,
                          "stride %dx%d and dilation %dx%d must be >= 1, padding %dx%d >= 0",
                          stride_h, stride_w, dil_h, dil_w, pad_h, pad_w);
    int64_t N = X->shape[0], C = X->shape[1], H = X->shape[2], Wd = X->shape[3];
    int64_t O = Wt->shape[0], KH = Wt->shape[2], KW = Wt->shape[3];
    if (groups < 1 || C % groups || O % groups)
        return conv_error(DT_ERR_INVALID, nin, ts,
                          "groups %d must be >= 1 and divide in channels %lld and out channels "
                          "%lld",
                          groups, (long long)C, (long long)O);
    if (Wt->shape[1] != C / groups || KH < 1 || KW < 1 || O < 1 || N < 1)
        return conv_error(DT_ERR_SHAPE, nin, ts,
                          "w must be [O, C/groups = %lld, KH, KW] with nonzero sizes",
                          (long long)(C / groups));
    if (B && B->shape[0] != O)
        return conv_error(DT_ERR_SHAPE, nin, ts, "bias must be [O = %lld]", (long long)O);
    int64_t nh = H + 2 * (int64_t)pad_h - (int64_t)dil_h * (KH - 1) - 1;
    int64_t nw = Wd + 2 * (int64_t)pad_w - (int64_t)dil_w * (KW - 1) - 1;
    if (nh < 0 || nw < 0)
        return conv_error(DT_ERR_SHAPE, nin, ts,
                          "output size <= 0 (kernel %lldx%lld, dilation %dx%d, padding %dx%d)",
                          (long long)KH, (long long)KW, dil_h, dil_w, pad_h, pad_w);
    int64_t shape[4] = {N, O, nh / stride_h + 1, nw / stride_w + 1};
    int64_t ip[7] = {stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups};
    return dt_node_add(g, &conv2d_def, nin, ids, DT_F32, 4, shape, ip, 7, NULL, 0);
}
