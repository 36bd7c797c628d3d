/* Batched matrix multiply: C = op_a(A) op_b(B), f32 through cblas_sgemm.
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
#include <cblas.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "graph/op.h"

int dt_linear_dtype_error(const char *op, const char *what, int n, const char *const *names,
                          const dt_tensor *const *ts); /* linear.c */

enum { P_TA, P_TB, P_M, P_K, P_N, P_BATCH, P_SHARED };

static CBLAS_TRANSPOSE tr(int t) {
    return t ? CblasTrans : CblasNoTrans;
}

/* Forward: C_i = op_a(A_i) op_b(B_i) for each batch entry i. */
static dt_status matmul_forward(const dt_op_ctx *c) {
    const int64_t *p = c->node->ip;
    int ta = (int)p[P_TA], tb = (int)p[P_TB], M = (int)p[P_M], K = (int)p[P_K], N = (int)p[P_N];
    int64_t batch = p[P_BATCH];
    int lda = ta ? M : K, ldb = tb ? K : N;
    const float *A = c->in[0].data, *B = c->in[1].data;
    float *C = c->out.data;
    if (p[P_SHARED] && !ta) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tr(tb), (int)(batch * M), N, K, 1.0f, A, K, B, ldb,
                    0.0f, C, N);
        return DT_OK;
    }
    int64_t sa = (int64_t)M * K, sb = p[P_SHARED] ? 0 : (int64_t)K * N, sc = (int64_t)M * N;
    for (int64_t i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), M, N, K, 1.0f, A + i * sa, lda, B + i * sb, ldb,
                    0.0f, C + i * sc, N);
    return DT_OK;
}

static dt_status matmul_backward(const dt_op_ctx *c) {
    const int64_t *p = c->node->ip;
    int ta = (int)p[P_TA], tb = (int)p[P_TB], M = (int)p[P_M], K = (int)p[P_K], N = (int)p[P_N];
    int64_t batch = p[P_BATCH];
    int shared = (int)p[P_SHARED];
    int lda = ta ? M : K, ldb = tb ? K : N;
    const float *A = c->in[0].data, *B = c->in[1].data, *G = c->gout.data;
    float *dA = c->gin[0].data, *dB = c->gin[1].data;
    int64_t sa = (int64_t)M * K, sb = shared ? 0 : (int64_t)K * N, sc = (int64_t)M * N;
    if (shared && !ta) {
        /* One tall GEMM each: A, dA, G as [batch*M, K] / [batch*M, N]. */
        int MT = (int)(batch * M);
        if (dA) /* dA [MT, K] = G [MT, N] op_b(B)^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, tr(!tb), MT, K, N, 1.0f, G, N, B, ldb,
                        c->gin_beta[0], dA, K);
        if (dB && !tb) /* dB [K, N] = A^T [K, MT] G [MT, N] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, MT, 1.0f, A, K, G, N,
                        c->gin_beta[1], dB, N);
        if (dB && tb) /* dB [N, K] = G^T [N, MT] A [MT, K] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, MT, 1.0f, G, N, A, K,
                        c->gin_beta[1], dB, K);
        return DT_OK;
    }
    for (int64_t i = 0; i < batch; i++) {
        const float *Ai = A + i * sa, *Bi = B + i * sb, *Gi = G + i * sc;
        if (dA) {
            float *dAi = dA + i * sa;
            if (!ta) /* dA [M, K] = G [M, N] op_b(B)^T [N, K] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, tr(!tb), M, K, N, 1.0f, Gi, N, Bi, ldb,
                            c->gin_beta[0], dAi, K);
            else /* dA [K, M] = op_b(B) [K, N] G^T [N, M] */
                cblas_sgemm(CblasRowMajor, tr(tb), CblasTrans, K, M, N, 1.0f, Bi, ldb, Gi, N,
                            c->gin_beta[0], dAi, M);
        }
        if (dB) {
            float *dBi = dB + i * sb;
            float beta = shared && i > 0 ? 1.0f : c->gin_beta[1];
            if (!tb) /* dB [K, N] = op_a(A)^T [K, M] G [M, N] */
                cblas_sgemm(CblasRowMajor, tr(!ta), CblasNoTrans, K, N, M, 1.0f, Ai, lda, Gi, N,
                            beta, dBi, N);
            else /* dB [N, K] = G^T [N, M] op_a(A) [M, K] */
                cblas_sgemm(CblasRowMajor, CblasTrans, tr(ta), N, K, M, 1.0f, Gi, N, Ai, lda, beta,
                            dBi, K);
        }
    }
    return DT_OK;
}

static const dt_op_def matmul_op = {
    .name = "matmul",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .forward = matmul_forward,
    .backward = matmul_backward,
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
    int64_t ip[7] = {trans_a != 0, trans_b != 0, M, K, N, batch, shared};
    return dt_node_add(g, &matmul_op, 2, ids, DT_F32, na, shape, ip, 7, NULL, 0);
}
