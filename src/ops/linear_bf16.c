/* nn.Linear with a frozen bf16 weight (LoRA base): y = bf16(x) w^T + b through oneDNN's
 * bf16 x bf16 -> f32 matmul, which runs AVX-512 bf16 kernels at about twice the f32 GEMM rate.
 *
 * Shapes: x [R, in] f32, w [out, in] bf16 (no gradient), b [out] f32 (optional), y [R, out] f32.
 * Forward:  xb = bf16(x) (oneDNN reorder, round-to-nearest-even, into ws); y = xb w^T + b.
 * Backward: gb = bf16(g) (into ws); dx = gb w (f32 out, added to dx with a sum post-op when
 *           gin_beta = 1); db = sum_r g. There is no dW: the weight is frozen.
 * All primitives are created once in prepare (node->state) with a user-managed scratchpad that
 * lives in the node's workspace, so a step allocates nothing.
 *
 * Without bf16 matmul kernels (oneDNN 2.6 has none for AVX2-only CPUs such as AMD Zen 3; its
 * matmul then reports dnnl_unimplemented) -- or with DT_LINEAR_BF16=f32 -- the same products
 * run as f32 GEMMs: xr = x rounded to bf16 and kept as f32 (in ws), the weight widened to f32
 * a block of FB_ROWS rows at a time (exact), y = xr w^T + b; backward dx = gr w over the same
 * blocks (g rounded per block of columns). Every product of two bf16 values is exact in f32, so
 * only the summation order differs from the bf16 kernels (tests/ops/linear_parity checks both
 * against PyTorch). */
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "dtrain/tensor.h"
#include "graph/op.h"
#include "ops/bf16.h"
#include "ops/dnnl_util.h"
#include "ops/ops_cuda.h"

/* linear.c */
void dt_linear_bias_grad(float *db, const float *g, int64_t R, int64_t O, float beta);
dt_status dt_linear_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                          int64_t ldc);

enum { CVT_X, FWD, CVT_G, BWD, BWD_ACC, NPRIM };

typedef struct lin_bf16 {
    dnnl_engine_t eng; /* the process's engine and stream (dnnl_util.c); not owned */
    dnnl_primitive_t prim[NPRIM];
    dnnl_memory_t sp[NPRIM]; /* each primitive's scratchpad, bound to the workspace */
    size_t sp_bytes[NPRIM];
    /* memory objects without buffers; handles are set at execution */
    dnnl_memory_t x, xb, wt, bias, y, g, gb, w, dx;
    int64_t fb_rows; /* > 0: the f32 fallback, widening this many weight rows at a time */
} lin_bf16;

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

static void lin_bf16_destroy(dt_node *n) {
    lin_bf16 *s = n->state;
    if (!s) return;
    for (int i = 0; i < NPRIM; i++) {
        if (s->prim[i]) dnnl_primitive_destroy(s->prim[i]);
        if (s->sp[i]) dnnl_memory_destroy(s->sp[i]);
    }
    dnnl_memory_t *m[] = {&s->x, &s->xb, &s->wt, &s->bias, &s->y, &s->g, &s->gb, &s->w, &s->dx};
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
        if (*m[i]) dnnl_memory_destroy(*m[i]);
    free(s);
    n->state = NULL;
}

/* Turns a primitive descriptor into primitive k with a scratchpad memory object; consumes pd. */
static dnnl_status_t make_prim(lin_bf16 *s, int k, dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *spmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_status_t st = dnnl_success;
    s->sp_bytes[k] = spmd ? dnnl_memory_desc_get_size(spmd) : 0;
    if (s->sp_bytes[k]) st = dnnl_memory_create(&s->sp[k], spmd, s->eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_primitive_create(&s->prim[k], pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static dnnl_status_t make_matmul(lin_bf16 *s, int k, const dnnl_memory_desc_t *src,
                                 const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                 const dnnl_memory_desc_t *dst, int accumulate) {
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dt_dnnl_matmul_pd(&pd, src, wei, bias, dst, accumulate);
    return st == dnnl_success ? make_prim(s, k, pd) : st;
}

static dnnl_status_t make_reorder(lin_bf16 *s, int k, const dnnl_memory_desc_t *src,
                                  const dnnl_memory_desc_t *dst) {
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, src, s->eng, dst, s->eng, attr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st == dnnl_success ? make_prim(s, k, pd) : st;
}

static dnnl_status_t md2(dnnl_memory_desc_t *md, int64_t d0, int64_t d1, dnnl_data_type_t dt,
                         int64_t s0, int64_t s1) {
    dnnl_dims_t dims = {d0, d1}, strides = {s0, s1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static dt_status lin_bf16_prepare(dt_graph *g, dt_node *n) {
    int64_t R = n->ip[0], in = n->ip[1], out = n->ip[2], has_bias = n->ip[3];
    lin_bf16 *s = calloc(1, sizeof(*s));
    if (!s) return dt_error_set(DT_ERR_NOMEM, "linear: out of memory for oneDNN state");
    n->state = s;
    dnnl_memory_desc_t x, xb, wt, b, y, gb, w;
    s->eng = dt_dnnl_engine();
    if (!s->eng) {
        lin_bf16_destroy(n);
        return DT_ERR_INTERNAL;
    }
    dnnl_status_t st = md2(&x, R, in, dnnl_f32, in, 1);
    if (!st) st = md2(&xb, R, in, dnnl_bf16, in, 1);
    if (!st) st = md2(&wt, in, out, dnnl_bf16, 1, in); /* w^T as a strided view of w [out, in] */
    if (!st) st = md2(&b, 1, out, dnnl_f32, out, 1);
    if (!st) st = md2(&y, R, out, dnnl_f32, out, 1);
    if (!st) st = md2(&gb, R, out, dnnl_bf16, out, 1);
    if (!st) st = md2(&w, out, in, dnnl_bf16, in, 1);
    if (!st) st = make_reorder(s, CVT_X, &x, &xb);
    if (!st) st = make_matmul(s, FWD, &xb, &wt, has_bias ? &b : NULL, &y, 0);
    if (!st) st = make_reorder(s, CVT_G, &y, &gb);
    if (!st) st = make_matmul(s, BWD, &gb, &w, NULL, &x, 0);
    if (!st) st = make_matmul(s, BWD_ACC, &gb, &w, NULL, &x, 1);
    struct {
        dnnl_memory_t *m;
        const dnnl_memory_desc_t *md;
    } mems[] = {{&s->x, &x}, {&s->xb, &xb}, {&s->wt, &wt}, {&s->bias, &b}, {&s->y, &y},
                {&s->g, &y}, {&s->gb, &gb}, {&s->w, &w},   {&s->dx, &x}};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]) && !st; i++)
        st = dnnl_memory_create(mems[i].m, mems[i].md, s->eng, DNNL_MEMORY_NONE);
    const char *force = getenv("DT_LINEAR_BF16");
    if (st == dnnl_unimplemented || (force && !strcmp(force, "f32"))) {
        /* No bf16 kernels here: the f32 fallback. ws: the rounded copy of x (or g), then the
         * widened weight block of about 1 MiB. */
        lin_bf16_destroy(n);
        if (!(s = calloc(1, sizeof(*s))))
            return dt_error_set(DT_ERR_NOMEM, "linear: out of memory for oneDNN state");
        n->state = s;
        s->fb_rows = in > 0 && (1 << 18) / in > 16 ? (1 << 18) / in : 16;
        if (s->fb_rows > out) s->fb_rows = out > 0 ? out : 1;
        size_t blk = align64((size_t)(s->fb_rows * in) * sizeof(float));
        n->ws_fwd = align64((size_t)(R * in) * sizeof(float)) + blk;
        n->ws_bwd = align64((size_t)(R * s->fb_rows) * sizeof(float)) + blk;
        return DT_OK;
    }
    if (st) {
        lin_bf16_destroy(n);
        return dt_error_set(
            DT_ERR_INTERNAL,
            "linear: oneDNN bf16 matmul setup failed (status %d) for x [%lld, %lld], "
            "w [%lld, %lld]",
            (int)st, (long long)R, (long long)in, (long long)out, (long long)in);
    }
    /* ws: the bf16 copy of x (or of g), then the scratchpad of whichever primitive runs. */
    size_t spf = s->sp_bytes[CVT_X] > s->sp_bytes[FWD] ? s->sp_bytes[CVT_X] : s->sp_bytes[FWD];
    size_t spb = s->sp_bytes[CVT_G];
    if (s->sp_bytes[BWD] > spb) spb = s->sp_bytes[BWD];
    if (s->sp_bytes[BWD_ACC] > spb) spb = s->sp_bytes[BWD_ACC];
    n->ws_fwd = align64((size_t)(R * in) * 2) + spf;
    n->ws_bwd = align64((size_t)(R * out) * 2) + spb;
    (void)g;
    return DT_OK;
}

/* Runs primitive k with the given arguments plus its scratchpad at `sp`. */
static dt_status run(lin_bf16 *s, int k, int nargs, dnnl_exec_arg_t *args, void *sp) {
    dnnl_status_t st = dnnl_success;
    if (s->sp_bytes[k]) {
        st = dnnl_memory_set_data_handle(s->sp[k], sp);
        args[nargs].arg = DNNL_ARG_SCRATCHPAD;
        args[nargs++].memory = s->sp[k];
    }
    if (!st) st = dnnl_primitive_execute(s->prim[k], dt_dnnl_stream(), nargs, args);
    if (!st) st = dnnl_stream_wait(dt_dnnl_stream());
    return dt_dnnl_check(st, "linear", "bf16 matmul execution");
}

/* Fallback forward: y [R, out] = xr [R, in] wf^T (+ b), wf widened fb_rows rows at a time. */
static dt_status fb_forward(const dt_op_ctx *c, const lin_bf16 *s) {
    int64_t R = c->node->ip[0], in = c->node->ip[1], out = c->node->ip[2];
    float *xr = c->ws, *wf = (float *)((char *)c->ws + align64((size_t)(R * in) * sizeof(float)));
    const uint16_t *w = c->in[1].data;
    float *y = c->out.data, beta = 0.0f;
    dt_bf16_round_f32(xr, c->in[0].data, R * in);
    if (c->node->ip[3]) {
        for (int64_t r = 0; r < R; r++) memcpy(y + r * out, c->in[2].data, (size_t)out * 4);
        beta = 1.0f;
    }
    for (int64_t o0 = 0; o0 < out; o0 += s->fb_rows) {
        int64_t k = out - o0 < s->fb_rows ? out - o0 : s->fb_rows;
        dt_bf16_to_f32_n(wf, w + o0 * in, (size_t)(k * in));
        dt_status st = dt_linear_sgemm(0, 1, R, k, in, xr, in, wf, in, beta, y + o0, out);
        if (st) return st;
    }
    return DT_OK;
}

/* Fallback backward: dx [R, in] (+)= gr [R, out] wf [out, in], block by block of wf's rows;
 * gr's matching columns [R, k] are rounded into ws per block (a whole rounded copy of g would
 * be R x out floats: 128 MiB for a 32000-token vocabulary and 1024 rows). */
static dt_status fb_backward(const dt_op_ctx *c, const lin_bf16 *s) {
    int64_t R = c->node->ip[0], in = c->node->ip[1], out = c->node->ip[2];
    float *gr = c->ws;
    float *wf = (float *)((char *)c->ws + align64((size_t)(R * s->fb_rows) * sizeof(float)));
    const uint16_t *w = c->in[1].data;
    const float *g = c->gout.data;
    float beta = c->gin_beta[0] != 0.0f ? 1.0f : 0.0f;
    for (int64_t o0 = 0; o0 < out; o0 += s->fb_rows) {
        int64_t k = out - o0 < s->fb_rows ? out - o0 : s->fb_rows;
        for (int64_t r = 0; r < R; r++) dt_bf16_round_f32(gr + r * k, g + r * out + o0, k);
        dt_bf16_to_f32_n(wf, w + o0 * in, (size_t)(k * in));
        dt_status st = dt_linear_sgemm(0, 0, R, in, k, gr, k, wf, in, beta, c->gin[0].data, in);
        if (st) return st;
        beta = 1.0f;
    }
    if (out == 0 && beta == 0.0f) memset(c->gin[0].data, 0, (size_t)(R * in) * sizeof(float));
    return DT_OK;
}

static dt_status lin_bf16_forward(const dt_op_ctx *c) {
    lin_bf16 *s = c->node->state;
    if (s->fb_rows) return fb_forward(c, s);
    int64_t R = c->node->ip[0], in = c->node->ip[1];
    char *xb = c->ws, *sp = xb + align64((size_t)(R * in) * 2);
    dnnl_memory_set_data_handle(s->x, c->in[0].data);
    dnnl_memory_set_data_handle(s->xb, xb);
    dnnl_memory_set_data_handle(s->wt, c->in[1].data);
    dnnl_memory_set_data_handle(s->y, c->out.data);
    dt_status st =
        run(s, CVT_X, 2, (dnnl_exec_arg_t[3]){{DNNL_ARG_FROM, s->x}, {DNNL_ARG_TO, s->xb}}, sp);
    if (st) return st;
    dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, s->xb}, {DNNL_ARG_WEIGHTS, s->wt}, {DNNL_ARG_DST, s->y}};
    int na = 3;
    if (c->node->ip[3]) {
        dnnl_memory_set_data_handle(s->bias, c->in[2].data);
        a[na].arg = DNNL_ARG_BIAS;
        a[na++].memory = s->bias;
    }
    return run(s, FWD, na, a, sp);
}

static dt_status lin_bf16_backward(const dt_op_ctx *c) {
    lin_bf16 *s = c->node->state;
    int64_t R = c->node->ip[0], out = c->node->ip[2];
    if (c->gin[1].data)
        return dt_error_set(DT_ERR_STATE,
                            "linear: a bf16 weight [%lld, %lld] cannot have a gradient",
                            (long long)out, (long long)c->node->ip[1]);
    if (c->gin[0].data && s->fb_rows) {
        dt_status st = fb_backward(c, s);
        if (st) return st;
    } else if (c->gin[0].data) {
        char *gb = c->ws, *sp = gb + align64((size_t)(R * out) * 2);
        dnnl_memory_set_data_handle(s->g, c->gout.data);
        dnnl_memory_set_data_handle(s->gb, gb);
        dnnl_memory_set_data_handle(s->w, c->in[1].data);
        dnnl_memory_set_data_handle(s->dx, c->gin[0].data);
        dt_status st =
            run(s, CVT_G, 2, (dnnl_exec_arg_t[3]){{DNNL_ARG_FROM, s->g}, {DNNL_ARG_TO, s->gb}}, sp);
        if (st) return st;
        dnnl_exec_arg_t a[4] = {
            {DNNL_ARG_SRC, s->gb}, {DNNL_ARG_WEIGHTS, s->w}, {DNNL_ARG_DST, s->dx}};
        st = run(s, c->gin_beta[0] != 0.0f ? BWD_ACC : BWD, 3, a, sp);
        if (st) return st;
    }
    if (c->node->ip[3] && c->gin[2].data)
        dt_linear_bias_grad(c->gin[2].data, c->gout.data, R, out, c->gin_beta[2]);
    return DT_OK;
}

/* Backward reads only w (in[1]); x is not needed since there is no dW. */
const dt_op_def dt_linear_bf16_op = {
    .name = "linear_bf16",
    .flags = DT_OPF_BWD_IN(1),
    .prepare = lin_bf16_prepare,
    .forward = lin_bf16_forward,
    .backward = lin_bf16_backward,
    .destroy = lin_bf16_destroy,
    DT_CUDA_OP_ENTRIES(linear_bf16), /* nn_cuda.c */
};
