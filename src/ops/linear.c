/* nn.Linear: y = x w^T + b, as one GEMM over the flattened leading dims of x.
 *
 * The builder picks the kernel pair by the weight's dtype: f32 weights here (one f32 GEMM for
 * forward and one per gradient), bf16 weights (frozen, no gradient) in linear_bf16.c (oneDNN
 * bf16 x bf16 -> f32). The f32 GEMM dispatcher and the bias helpers below are shared with
 * linear_matmul.c and linear_bf16.c.
 *
 * Which f32 GEMM: oneDNN's dnnl_sgemm by default, OpenBLAS's cblas_sgemm with DT_SGEMM=openblas.
 * Measured with bench/bench_gemm (2 threads; M=N=K 512..2048 and the Llama shapes): raw
 * dnnl_sgemm 450-515 GFLOP/s whatever OPENBLAS_CORETYPE says; raw cblas_sgemm 240-260 as this
 * environment runs it (Haswell kernels) and 460-490 with the OPENBLAS variables unset. What
 * decides it is the graph: dnnl_sgemm runs on the same OpenMP threads as every other kernel,
 * while Debian's pthread OpenBLAS has threads of its own that fight libgomp's spinning workers
 * for the two cores after each OpenMP region. With a loss (an OpenMP sum) next to the GEMM,
 * dt_linear on cblas_sgemm reached 0.47-0.86 of raw cblas_sgemm; on dnnl_sgemm 0.88-1.0 of raw
 * dnnl_sgemm (0.99-1.05 without the loss's own time). */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"
#include "ops/bf16.h"
#include "ops/gemm_bf16.h"

extern const dt_op_def dt_linear_bf16_op; /* linear_bf16.c */

/* 1 if DT_SGEMM=openblas, read once (a benign race: every thread computes the same value). */
int dt_linear_use_openblas(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DT_SGEMM");
        v = e && strcmp(e, "openblas") == 0;
    }
    return v;
}

/* Row-major C [M, N] = op(A) [M, K] op(B) [K, N] + beta C; lda/ldb/ldc are row strides. */
dt_status dt_linear_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                          int64_t ldc) {
    if (dt_linear_use_openblas()) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
        return DT_OK;
    }
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        return dt_error_set(DT_ERR_INTERNAL,
                            "sgemm: oneDNN failed (status %d) for M %lld N %lld K %lld", (int)st,
                            (long long)M, (long long)N, (long long)K);
    return DT_OK;
}

/* Columns per block when a loop over rows is split by columns: 16 floats = one cache line, so
 * two threads never write the same line. */
#define COL_BLOCK 16

/* y[r, o] = b[o] for every row: the bias is laid down first so the sgemm can add into it with
 * beta = 1, which costs nothing extra inside the GEMM.  y: [R, O], b: [O]. */
static void bias_fill(float *y, const float *b, int64_t R, int64_t O) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) memcpy(y + r * O, b, (size_t)O * sizeof(float));
}

/* db[o] = beta * db[o] + sum_r g[r, o].  g: [R, O], db: [O].
 * Each thread owns a range of columns and walks all rows in order: every column is summed in
 * the same order whatever the thread count (bitwise reproducible), and reads stay row-contiguous.
 */
void dt_linear_bias_grad(float *db, const float *g, int64_t R, int64_t O, float beta) {
    int64_t nblk = (O + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t o0 = nblk * t / nt * COL_BLOCK, o1 = nblk * (t + 1) / nt * COL_BLOCK;
        if (o1 > O) o1 = O;
        if (o0 < o1) {
            float *d = db + o0;
            int64_t n = o1 - o0;
            if (beta == 0.0f) memset(d, 0, (size_t)n * sizeof(float));
            for (int64_t r = 0; r < R; r++) {
                const float *gr = g + r * O + o0;
                for (int64_t j = 0; j < n; j++) d[j] += gr[j];
            }
        }
    }
}

/* Sets DT_ERR_DTYPE with "op: what (name dtype [shape], ...)" and returns -1; for the builders
 * of this family (matmul and embedding use it too). */
int dt_linear_dtype_error(const char *op, const char *what, int n, const char *const *names,
                          const dt_tensor *const *ts) {
    char buf[512] = "", sh[96];
    size_t o = 0;
    for (int i = 0; i < n && o < sizeof(buf); i++) {
        dt_shape_str(sh, sizeof(sh), ts[i]->ndim, ts[i]->shape);
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s %s %s", i ? ", " : "", names[i],
                              dt_dtype_name(ts[i]->dtype), sh);
    }
    dt_error_set(DT_ERR_DTYPE, "%s: %s (got %s)", op, what, buf);
    return -1;
}

/* Forward.  x: [R, in], w: [out, in], b: [out] (optional) -> y: [R, out]. */
static dt_status linear_forward(const dt_op_ctx *c) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    const float *x = c->in[0].data, *w = c->in[1].data;
    float *y = c->out.data;
    float beta = 0.0f;
    if (ip[3]) {
        bias_fill(y, c->in[2].data, R, out);
        beta = 1.0f;
    }
    /* y = x w^T: w is stored [out, in], exactly the transposed operand sgemm wants. */
    return dt_linear_sgemm(0, 1, R, out, in, x, in, w, in, beta, y, out);
}

/* Backward.  g: [R, out].  dx = g w: [R, in];  dW = g^T x: [out, in];  db = sum_r g: [out].
 * beta = gin_beta makes accumulation into an existing gradient free. */
static dt_status linear_backward(const dt_op_ctx *c) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    const float *x = c->in[0].data, *w = c->in[1].data, *g = c->gout.data;
    dt_status st = DT_OK;
    if (c->gin[0].data)
        st = dt_linear_sgemm(0, 0, R, in, out, g, out, w, in, c->gin_beta[0], c->gin[0].data, in);
    if (!st && c->gin[1].data)
        st = dt_linear_sgemm(1, 0, out, in, R, g, out, x, in, c->gin_beta[1], c->gin[1].data, in);
    if (st) return st;
    if (ip[3] && c->gin[2].data) dt_linear_bias_grad(c->gin[2].data, g, R, out, c->gin_beta[2]);
    return DT_OK;
}

/* bf16 mode (dt_graph_opts.bf16_gemm), ip[4] = BF16_EMULATE or BF16_NATIVE.
 * Emulated (a CPU without bf16 kernels, DT_CPU_BF16=emulate): x and w rounded to bf16 and kept
 * as f32 in ws for forward, x, w and g for both backward products, then the f32 GEMMs.
 * ws: [xr [R, in] | wr [out, in] | gr [R, out]].
 * Native (AVX-512 BF16 / AMX): the same operands packed to bf16 in ws and multiplied by
 * oneDNN's bf16 x bf16 -> f32 kernels (gemm_bf16.c); the products are the same exact values,
 * only the order of the f32 sums differs. ws forward: [xb [R, in] | wb [out, in] | scratch];
 * backward: [gb [R, out] | wb | xb | scratch]. The bias and its gradient stay f32. */
enum { BF16_EMULATE = 1, BF16_NATIVE = 2 };
enum { G_FWD, G_DX, G_DW, G_N };

static void linear_destroy(dt_node *n) {
    dt_gemm_bf16 **gp = n->state;
    if (!gp) return;
    for (int k = 0; k < G_N; k++) dt_gemm_bf16_free(gp[k]);
    free(gp);
    n->state = NULL;
}

/* The three plans: y = xb wb^T, dx = gb wb, dW = gb^T xb. */
static dt_status native_prepare(dt_node *n) {
    int64_t R = n->ip[0], in = n->ip[1], out = n->ip[2];
    dt_gemm_bf16 **gp = n->state = calloc(G_N, sizeof *gp);
    if (!gp) return dt_error_set(DT_ERR_NOMEM, "linear: out of memory for bf16 GEMM plans");
    dt_status st = dt_gemm_bf16_create(&gp[G_FWD], 0, 1, R, out, in, in, in, out, "linear");
    if (!st) st = dt_gemm_bf16_create(&gp[G_DX], 0, 0, R, in, out, out, in, in, "linear");
    if (!st) st = dt_gemm_bf16_create(&gp[G_DW], 1, 0, out, in, R, out, in, in, "linear");
    if (st) return st;
    size_t spf = dt_gemm_bf16_scratch(gp[G_FWD]), spb = dt_gemm_bf16_scratch(gp[G_DX]);
    if (dt_gemm_bf16_scratch(gp[G_DW]) > spb) spb = dt_gemm_bf16_scratch(gp[G_DW]);
    size_t xb = dt_bf16_pack_bytes(R * in), wb = dt_bf16_pack_bytes(out * in);
    n->ws_fwd = xb + wb + spf;
    n->ws_bwd = dt_bf16_pack_bytes(R * out) + wb + xb + spb;
    return DT_OK;
}

static dt_status linear_prepare(dt_graph *g, dt_node *n) {
    n->ip[4] = 0;
    if (!dt_graph_bf16_gemm(g)) return DT_OK;
    dt_status st = dt_bf16_gemm_prepare_check(g, "linear");
    if (st) return st;
    if (dt_bf16_gemm_mode() == DT_BF16_NATIVE) {
        n->ip[4] = BF16_NATIVE;
        st = native_prepare(n);
        if (st != DT_ERR_DTYPE) return st;
        linear_destroy(n); /* oneDNN has no bf16 kernel for this shape: emulate it */
        dt_error_clear();
    }
    n->ip[4] = BF16_EMULATE;
    n->ws_fwd = dt_bf16_rounded_bytes(g, n, 3u);
    n->ws_bwd = dt_bf16_rounded_bytes(g, n, 3u | DT_BF16_GOUT);
    return DT_OK;
}

static dt_status native_forward(const dt_op_ctx *c) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    dt_gemm_bf16 **gp = c->node->state;
    uint16_t *xb = c->ws, *wb = (uint16_t *)((char *)xb + dt_bf16_pack_bytes(R * in));
    void *sp = (char *)wb + dt_bf16_pack_bytes(out * in);
    dt_bf16_pack(xb, c->in[0].data, R * in);
    dt_bf16_pack(wb, c->in[1].data, out * in);
    float beta = 0.0f;
    if (ip[3]) {
        bias_fill(c->out.data, c->in[2].data, R, out);
        beta = 1.0f;
    }
    return dt_gemm_bf16_run(gp[G_FWD], xb, wb, beta, c->out.data, sp);
}

static dt_status native_backward(const dt_op_ctx *c) {
    const int64_t *ip = c->node->ip;
    int64_t R = ip[0], in = ip[1], out = ip[2];
    dt_gemm_bf16 **gp = c->node->state;
    uint16_t *gb = c->ws, *wb = (uint16_t *)((char *)gb + dt_bf16_pack_bytes(R * out));
    uint16_t *xb = (uint16_t *)((char *)wb + dt_bf16_pack_bytes(out * in));
    void *sp = (char *)xb + dt_bf16_pack_bytes(R * in);
    dt_bf16_pack(gb, c->gout.data, R * out);
    dt_status st = DT_OK;
    if (c->gin[0].data) {
        dt_bf16_pack(wb, c->in[1].data, out * in);
        st = dt_gemm_bf16_run(gp[G_DX], gb, wb, c->gin_beta[0], c->gin[0].data, sp);
    }
    if (!st && c->gin[1].data) {
        dt_bf16_pack(xb, c->in[0].data, R * in);
        st = dt_gemm_bf16_run(gp[G_DW], gb, xb, c->gin_beta[1], c->gin[1].data, sp);
    }
    return st;
}

static dt_status linear_forward_any(const dt_op_ctx *c) {
    switch (c->node->ip[4]) {
    case BF16_NATIVE:
        return native_forward(c);
    case BF16_EMULATE:
        return dt_bf16_run_rounded(c, 3u, linear_forward);
    default:
        return linear_forward(c);
    }
}

/* The bias gradient is summed from the f32 g (an f32 reduction), the products from bf16 g. */
static dt_status linear_backward_any(const dt_op_ctx *c) {
    if (!c->node->ip[4]) return linear_backward(c);
    dt_op_ctx p = *c;
    p.gin[2].data = NULL;
    dt_status st = c->node->ip[4] == BF16_NATIVE
                       ? native_backward(&p)
                       : dt_bf16_run_rounded(&p, 3u | DT_BF16_GOUT, linear_backward);
    const int64_t *ip = c->node->ip;
    if (!st && ip[3] && c->gin[2].data)
        dt_linear_bias_grad(c->gin[2].data, c->gout.data, ip[0], ip[2], c->gin_beta[2]);
    return st;
}

static const dt_op_def linear_op = {
    .name = "linear",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .prepare = linear_prepare,
    .forward = linear_forward_any,
    .backward = linear_backward_any,
    .destroy = linear_destroy,
    DT_CUDA_OP_ENTRIES(linear),
};

int dt_linear(dt_graph *g, int x, int w, int bias) {
    int ids[3] = {x, w, bias};
    int n_in = bias == -1 ? 2 : 3;
    if (dt_ids_bad(g, "linear", n_in, ids)) return -1;
    const dt_tensor *tx = &dt_graph_node(g, x)->t, *tw = &dt_graph_node(g, w)->t;
    const dt_tensor *tb = n_in == 3 ? &dt_graph_node(g, bias)->t : NULL;
    const dt_tensor *ts[3] = {tx, tw, tb};
    if (tx->dtype != DT_F32 || (tw->dtype != DT_F32 && tw->dtype != DT_BF16) ||
        (tb && tb->dtype != DT_F32)) {
        const char *names[3] = {"x", "w", "bias"};
        return dt_linear_dtype_error("linear", "x must be f32, w f32 or bf16, bias f32", n_in,
                                     names, ts);
    }
    if (tx->ndim < 1 || tw->ndim != 2)
        return dt_shape_error("linear", "x needs >= 1 dim and w must be [out, in]", n_in, ts);
    int64_t in = tw->shape[1], out = tw->shape[0];
    if (tx->shape[tx->ndim - 1] != in)
        return dt_shape_error("linear", "x's last dim must equal w's dim 1 (in)", n_in, ts);
    if (tb && (tb->ndim != 1 || tb->shape[0] != out))
        return dt_shape_error("linear", "bias must be [out] with out = w's dim 0", n_in, ts);
    int64_t R = 1;
    for (int i = 0; i < tx->ndim - 1; i++) R *= tx->shape[i];
    if (R == 0 || in == 0 || out == 0)
        return dt_shape_error("linear", "empty tensors are not supported", n_in, ts);
    if (R > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
        return dt_shape_error("linear", "a GEMM dimension exceeds 2^31 - 1", n_in, ts);
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, tx->shape, sizeof(shape));
    shape[tx->ndim - 1] = out;
    int64_t ip[5] = {R, in, out, tb != NULL, 0}; /* ip[4]: bf16 operands, set by prepare */
    const dt_op_def *def = tw->dtype == DT_BF16 ? &dt_linear_bf16_op : &linear_op;
    return dt_node_add(g, def, n_in, ids, DT_F32, tx->ndim, shape, ip, 5, NULL, 0);
}
