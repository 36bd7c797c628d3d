/* Batched matrix multiply: C = op_a(A) op_b(B), f32 through the family's sgemm (oneDNN, or
 * OpenBLAS with DT_SGEMM=openblas: see linear.c).
 *
 * Shapes (per batch entry; `batch` = product of the leading dims):
 *   A: [M, K], or [K, M] with trans_a        B: [K, N], or [N, K] with trans_b
 *   C, G = dL/dC: [M, N]
 * B may be 2-D and shared by the whole batch ("shared"). Then, when A is not transposed, the
 * batch is one tall matrix [batch*M, K] and each product is a single large GEMM, which runs
 * near peak where many small ones would not.
 *
 * Backward, from dC = G:  d op_a(A) = G op_b(B)^T  and  d op_b(B) = op_a(A)^T G, i.e.
 *   dA = G op_b(B)^T          (trans_a = 0)      dA = op_b(B) G^T        (trans_a = 1)
 *   dB = op_a(A)^T G          (trans_b = 0)      dB = G^T op_a(A)        (trans_b = 1)
 * with beta = gin_beta; a shared dB sums over the batch (beta = 1 after the first entry). */
#include <omp.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "graph/op.h"
#include "ops/bf16.h"

/* linear.c */
int dt_linear_dtype_error(const char *op, const char *what, int n, const char *const *names,
                          const dt_tensor *const *ts);
int dt_linear_use_openblas(void);
dt_status dt_linear_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                          int64_t ldc);

enum { P_TA, P_TB, P_M, P_K, P_N, P_BATCH, P_SHARED, P_BF16 };

/* Many small products (attention heads: batch 64 of 256 x 64 x 256) run one per thread, each
 * GEMM single-threaded (oneDNN does so inside a parallel region): a threaded GEMM of that size
 * spends its time synchronising. Large products use all threads inside each GEMM. Not with
 * OpenBLAS, whose own threads would be started from every OpenMP thread. */
static int per_thread(int64_t batch, int64_t M, int64_t N, int64_t K) {
    return batch >= 2 * omp_get_max_threads() && M * N * K <= (1 << 24) &&
           !dt_linear_use_openblas();
}

/* One product of the batch loop: which = 0 forward, 1 dA, 2 dB (not shared). */
static dt_status product(const dt_op_ctx *c, int which, int64_t i) {
    const int64_t *p = c->node->ip;
    int ta = (int)p[P_TA], tb = (int)p[P_TB];
    int64_t M = p[P_M], K = p[P_K], N = p[P_N], lda = ta ? M : K, ldb = tb ? K : N;
    int64_t sa = M * K, sb = p[P_SHARED] ? 0 : K * N, sc = M * N;
    const float *A = (const float *)c->in[0].data + i * sa,
                *B = (const float *)c->in[1].data + i * sb;
    if (which == 0) /* C [M, N] = op_a(A) op_b(B) */
        return dt_linear_sgemm(ta, tb, M, N, K, A, lda, B, ldb, 0.0f, (float *)c->out.data + i * sc,
                               N);
    const float *G = (const float *)c->gout.data + i * sc;
    if (which == 1) {
        float *dA = (float *)c->gin[0].data + i * sa;
        if (!ta) /* dA [M, K] = G [M, N] op_b(B)^T [N, K] */
            return dt_linear_sgemm(0, !tb, M, K, N, G, N, B, ldb, c->gin_beta[0], dA, K);
        /* dA [K, M] = op_b(B) [K, N] G^T [N, M] */
        return dt_linear_sgemm(tb, 1, K, M, N, B, ldb, G, N, c->gin_beta[0], dA, M);
    }
    /* dB of a shared B accumulates over the batch: beta = 1 after the first entry */
    float *dB = (float *)c->gin[1].data + i * sb;
    float beta = p[P_SHARED] && i > 0 ? 1.0f : c->gin_beta[1];
    if (!tb) /* dB [K, N] = op_a(A)^T [K, M] G [M, N] */
        return dt_linear_sgemm(!ta, 0, K, N, M, A, lda, G, N, beta, dB, N);
    /* dB [N, K] = G^T [N, M] op_a(A) [M, K] */
    return dt_linear_sgemm(1, ta, N, K, M, G, N, A, lda, beta, dB, K);
}

/* Runs product(which, i) for every batch entry; in parallel over entries when they are many
 * and small (and independent: never for a shared dB). */
static dt_status batch_loop(const dt_op_ctx *c, int which) {
    const int64_t *p = c->node->ip;
    int64_t batch = p[P_BATCH];
    if (per_thread(batch, p[P_M], p[P_N], p[P_K]) && !(which == 2 && p[P_SHARED])) {
        int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < batch; i++) bad |= product(c, which, i) != DT_OK;
        if (bad) /* the worker's message stayed on its thread */
            return dt_error_set(DT_ERR_INTERNAL, "matmul: sgemm failed in a batch of %lld",
                                (long long)batch);
        return DT_OK;
    }
    for (int64_t i = 0; i < batch; i++) {
        dt_status st = product(c, which, i);
        if (st) return st;
    }
    return DT_OK;
}

/* Forward: C_i = op_a(A_i) op_b(B_i) for each batch entry i. */
static dt_status matmul_forward(const dt_op_ctx *c) {
    const int64_t *p = c->node->ip;
    int64_t batch = p[P_BATCH], M = p[P_M], K = p[P_K], N = p[P_N];
    if (p[P_SHARED] && !p[P_TA]) /* one tall GEMM: A as [batch*M, K] */
        return dt_linear_sgemm(0, (int)p[P_TB], batch * M, N, K, c->in[0].data, K, c->in[1].data,
                               p[P_TB] ? K : N, 0.0f, c->out.data, N);
    return batch_loop(c, 0);
}

static dt_status matmul_backward(const dt_op_ctx *c) {
    const int64_t *p = c->node->ip;
    int tb = (int)p[P_TB];
    int64_t batch = p[P_BATCH], M = p[P_M], K = p[P_K], N = p[P_N], ldb = tb ? K : N;
    const float *A = c->in[0].data, *B = c->in[1].data, *G = c->gout.data;
    float *dA = c->gin[0].data, *dB = c->gin[1].data;
    dt_status st = DT_OK;
    if (p[P_SHARED] && !p[P_TA]) {
        /* One tall GEMM each: A, dA as [MT, K] and G as [MT, N] with MT = batch*M. */
        int64_t MT = batch * M;
        if (dA) /* dA [MT, K] = G [MT, N] op_b(B)^T */
            st = dt_linear_sgemm(0, !tb, MT, K, N, G, N, B, ldb, c->gin_beta[0], dA, K);
        if (!st && dB && !tb) /* dB [K, N] = A^T [K, MT] G [MT, N] */
            st = dt_linear_sgemm(1, 0, K, N, MT, A, K, G, N, c->gin_beta[1], dB, N);
        if (!st && dB && tb) /* dB [N, K] = G^T [N, MT] A [MT, K] */
            st = dt_linear_sgemm(1, 0, N, K, MT, G, N, A, K, c->gin_beta[1], dB, K);
        return st;
    }
    if (dA) st = batch_loop(c, 1);
    if (!st && dB) st = batch_loop(c, 2);
    return st;
}

/* bf16 mode (dt_graph_opts.bf16_gemm; ip[P_BF16] = 1): A and B rounded to bf16 in ws for
 * forward; A, B and G for backward. ws: [Ar | Br | Gr], each the operand's whole size. */
static dt_status matmul_prepare(dt_graph *g, dt_node *n) {
    n->ip[P_BF16] = dt_graph_bf16_gemm(g);
    if (!n->ip[P_BF16]) return DT_OK;
    dt_status st = dt_bf16_gemm_prepare_check(g, "matmul");
    n->ws_fwd = dt_bf16_rounded_bytes(g, n, 3u);
    n->ws_bwd = dt_bf16_rounded_bytes(g, n, 3u | DT_BF16_GOUT);
    return st;
}

static dt_status matmul_forward_any(const dt_op_ctx *c) {
    return c->node->ip[P_BF16] ? dt_bf16_run_rounded(c, 3u, matmul_forward) : matmul_forward(c);
}

static dt_status matmul_backward_any(const dt_op_ctx *c) {
    return c->node->ip[P_BF16] ? dt_bf16_run_rounded(c, 3u | DT_BF16_GOUT, matmul_backward)
                               : matmul_backward(c);
}

static const dt_op_def matmul_op = {
    .name = "matmul",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .prepare = matmul_prepare,
    .forward = matmul_forward_any,
    .backward = matmul_backward_any,
};

int dt_matmul(dt_graph *g, int a, int b, int trans_a, int trans_b) {
    int ids[2] = {a, b};
    if (dt_ids_bad(g, "matmul", 2, ids)) return -1;
    const dt_tensor *ta = &dt_graph_node(g, a)->t, *tb = &dt_graph_node(g, b)->t;
    const dt_tensor *ts[2] = {ta, tb};
    if (ta->dtype != DT_F32 || tb->dtype != DT_F32) {
        const char *names[2] = {"a", "b"};
        return dt_linear_dtype_error("matmul", "a and b must be f32", 2, names, ts);
    }
    if (ta->ndim < 2 || tb->ndim < 2)
        return dt_shape_error("matmul", "a and b need at least 2 dims", 2, ts);
    int na = ta->ndim, nb = tb->ndim;
    int shared = nb == 2 && na > 2;
    if (!shared && na != nb)
        return dt_shape_error("matmul", "batch dims differ (b may also be 2-D, shared)", 2, ts);
    int64_t batch = 1;
    for (int i = 0; i < na - 2; i++) {
        if (!shared && ta->shape[i] != tb->shape[i])
            return dt_shape_error("matmul", "batch dims differ (b may also be 2-D, shared)", 2, ts);
        batch *= ta->shape[i];
    }
    int64_t M = trans_a ? ta->shape[na - 1] : ta->shape[na - 2];
    int64_t K = trans_a ? ta->shape[na - 2] : ta->shape[na - 1];
    int64_t Kb = trans_b ? tb->shape[nb - 1] : tb->shape[nb - 2];
    int64_t N = trans_b ? tb->shape[nb - 2] : tb->shape[nb - 1];
    if (K != Kb)
        return dt_shape_error("matmul",
                              trans_a || trans_b
                                  ? "inner dims of op(a) and op(b) differ (after transposes)"
                                  : "inner dims differ: a [..., M, K] needs b [..., K, N]",
                              2, ts);
    if (batch == 0 || M == 0 || K == 0 || N == 0)
        return dt_shape_error("matmul", "empty tensors are not supported", 2, ts);
    if (batch * M > INT32_MAX || K > INT32_MAX || N > INT32_MAX)
        return dt_shape_error("matmul", "a GEMM dimension exceeds 2^31 - 1", 2, ts);
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, ta->shape, sizeof(shape));
    shape[na - 2] = M;
    shape[na - 1] = N;
    int64_t ip[8] = {trans_a != 0, trans_b != 0, M, K, N, batch, shared, 0}; /* P_BF16: prepare */
    return dt_node_add(g, &matmul_op, 2, ids, DT_F32, na, shape, ip, 8, NULL, 0);
}
