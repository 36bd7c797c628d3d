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
#include <stdlib.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "graph/op.h"
#include "ops/bf16.h"
#include "ops/gemm_bf16.h"

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

/* bf16 mode (dt_graph_opts.bf16_gemm), ip[P_BF16] = BF16_EMULATE or BF16_NATIVE.
 * Emulated (a CPU without bf16 kernels, DT_CPU_BF16=emulate): A and B rounded to bf16 and kept
 * as f32 in ws for forward; A, B and G for backward; then the f32 products above.
 * ws: [Ar | Br | Gr], each the operand's whole size.
 * Native (AVX-512 BF16 / AMX): the operands packed to bf16 in ws and each product (forward, dA,
 * dB) one batched oneDNN bf16 x bf16 -> f32 matmul (gemm_bf16.c), planned at prepare: the same
 * exact products, only the order of the f32 sums differs. Shapes as the f32 path: a shared B
 * with A not transposed is one tall GEMM; a shared B with A transposed is broadcast over the
 * batch, except its dB, which sums over the batch: one 2-D plan run per entry, accumulating
 * after the first. ws forward: [Ab | Bb | scratch]; backward: [Ab | Bb | Gb | scratch]. */
enum { BF16_EMULATE = 1, BF16_NATIVE = 2 };
enum { OP_A, OP_B, OP_G };

/* One native product: dst (+)= op(src) op(wei), as dt_gemm_bf16_create_batched's arguments;
 * src and wei name operands (OP_*). loop: run the 2-D plan `batch` times, src and wei advancing
 * by ss / sw, dst fixed (a shared dB). */
typedef struct mm_spec {
    int ta, tb, src, wei, loop;
    int64_t batch, M, N, K, lds, ldw, ldd, ss, sw, sd;
} mm_spec;

/* The product `which` (0 forward, 1 dA, 2 dB) as in matmul_forward / product / matmul_backward. */
static mm_spec mm_spec_of(const int64_t *p, int which) {
    int ta = (int)p[P_TA], tb = (int)p[P_TB], sh = (int)p[P_SHARED];
    int64_t M = p[P_M], K = p[P_K], N = p[P_N], B = p[P_BATCH], lda = ta ? M : K, ldb = tb ? K : N;
    int64_t sA = M * K, sB = sh ? 0 : K * N, sG = M * N;
    if (sh && !ta) { /* tall: A, dA [B*M, K], G [B*M, N] */
        int64_t MT = B * M;
        if (which == 0) return (mm_spec){0, tb, OP_A, OP_B, 0, 1, MT, N, K, K, ldb, N, 0, 0, 0};
        if (which == 1) return (mm_spec){0, !tb, OP_G, OP_B, 0, 1, MT, K, N, N, ldb, K, 0, 0, 0};
        if (!tb) return (mm_spec){1, 0, OP_A, OP_G, 0, 1, K, N, MT, K, N, N, 0, 0, 0};
        return (mm_spec){1, 0, OP_G, OP_A, 0, 1, N, K, MT, N, K, K, 0, 0, 0};
    }
    if (which == 0) /* C [M, N] = op_a(A) op_b(B) */
        return (mm_spec){ta, tb, OP_A, OP_B, 0, B, M, N, K, lda, ldb, N, sA, sB, sG};
    if (which == 1 && !ta) /* dA [M, K] = G op_b(B)^T */
        return (mm_spec){0, !tb, OP_G, OP_B, 0, B, M, K, N, N, ldb, K, sG, sB, sA};
    if (which == 1) /* dA [K, M] = op_b(B) G^T */
        return (mm_spec){tb, 1, OP_B, OP_G, 0, B, K, M, N, ldb, N, M, sB, sG, sA};
    if (!tb) /* dB [K, N] = op_a(A)^T G */
        return (mm_spec){!ta, 0, OP_A, OP_G, sh, B, K, N, M, lda, N, N, sA, sG, sB};
    /* dB [N, K] = G^T op_a(A) */
    return (mm_spec){1, ta, OP_G, OP_A, sh, B, N, K, M, N, lda, K, sG, sA, sB};
}

static void matmul_destroy(dt_node *n) {
    dt_gemm_bf16 **gp = n->state;
    if (!gp) return;
    for (int k = 0; k < 3; k++) dt_gemm_bf16_free(gp[k]);
    free(gp);
    n->state = NULL;
}

/* The three plans (forward, dA, dB) and the ws sizes. */
static dt_status native_prepare(dt_node *n) {
    const int64_t *p = n->ip;
    dt_gemm_bf16 **gp = n->state = calloc(3, sizeof *gp);
    if (!gp) return dt_error_set(DT_ERR_NOMEM, "matmul: out of memory for bf16 GEMM plans");
    size_t sp[3];
    for (int k = 0; k < 3; k++) {
        mm_spec s = mm_spec_of(p, k);
        dt_status st =
            dt_gemm_bf16_create_batched(&gp[k], s.loop ? 1 : s.batch, s.ta, s.tb, s.M, s.N, s.K,
                                        s.lds, s.ldw, s.ldd, s.ss, s.sw, s.sd, "matmul");
        if (st) return st;
        sp[k] = dt_gemm_bf16_scratch(gp[k]);
    }
    int64_t B = p[P_BATCH], M = p[P_M], K = p[P_K], N = p[P_N];
    size_t ab = dt_bf16_pack_bytes(B * M * K),
           bb = dt_bf16_pack_bytes((p[P_SHARED] ? 1 : B) * K * N);
    n->ws_fwd = ab + bb + sp[0];
    n->ws_bwd = ab + bb + dt_bf16_pack_bytes(B * M * N) + (sp[1] > sp[2] ? sp[1] : sp[2]);
    return DT_OK;
}

static dt_status native_run(const dt_op_ctx *c, int which, uint16_t *const *ops, void *sp) {
    dt_gemm_bf16 *plan = ((dt_gemm_bf16 **)c->node->state)[which];
    mm_spec s = mm_spec_of(c->node->ip, which);
    float *dst = which == 0 ? c->out.data : c->gin[which - 1].data;
    float beta = which == 0 ? 0.0f : c->gin_beta[which - 1];
    if (!s.loop) return dt_gemm_bf16_run(plan, ops[s.src], ops[s.wei], beta, dst, sp);
    for (int64_t i = 0; i < s.batch; i++) { /* dB of a shared B: beta 1 after the first entry */
        dt_status st = dt_gemm_bf16_run(plan, ops[s.src] + i * s.ss, ops[s.wei] + i * s.sw,
                                        i > 0 ? 1.0f : beta, dst, sp);
        if (st) return st;
    }
    return DT_OK;
}

/* Packs the operands in `need` (bit OP_*) into ws; returns the scratch pointer after them. */
static void *native_pack(const dt_op_ctx *c, unsigned need, int with_g, uint16_t **ops) {
    const int64_t *p = c->node->ip;
    int64_t B = p[P_BATCH], M = p[P_M], K = p[P_K], N = p[P_N];
    int64_t n[3] = {B * M * K, (p[P_SHARED] ? 1 : B) * K * N, B * M * N};
    const float *src[3] = {c->in[0].data, c->in[1].data, c->gout.data};
    char *ws = c->ws;
    for (int k = 0; k < 2 + with_g; k++) {
        ops[k] = (uint16_t *)ws;
        if (need & (1u << k)) dt_bf16_pack(ops[k], src[k], n[k]);
        ws += dt_bf16_pack_bytes(n[k]);
    }
    return ws;
}

static dt_status native_forward(const dt_op_ctx *c) {
    uint16_t *ops[3];
    void *sp = native_pack(c, 1u << OP_A | 1u << OP_B, 0, ops);
    return native_run(c, 0, ops, sp);
}

static dt_status native_backward(const dt_op_ctx *c) {
    int dA = c->gin[0].data != NULL, dB = c->gin[1].data != NULL;
    unsigned need = 1u << OP_G | (dA ? 1u << OP_B : 0) | (dB ? 1u << OP_A : 0);
    uint16_t *ops[3];
    void *sp = native_pack(c, need, 1, ops);
    dt_status st = dA ? native_run(c, 1, ops, sp) : DT_OK;
    if (!st && dB) st = native_run(c, 2, ops, sp);
    return st;
}

static dt_status matmul_prepare(dt_graph *g, dt_node *n) {
    matmul_destroy(n); /* a compile retried after a failure starts afresh */
    n->ip[P_BF16] = 0;
    if (!dt_graph_bf16_gemm(g)) return DT_OK;
    dt_status st = dt_bf16_gemm_prepare_check(g, "matmul");
    if (st) return st;
    if (dt_bf16_gemm_mode() == DT_BF16_NATIVE) {
        n->ip[P_BF16] = BF16_NATIVE;
        st = native_prepare(n);
        if (st != DT_ERR_DTYPE) return st;
        matmul_destroy(n); /* oneDNN has no bf16 kernel for this shape: emulate it */
        dt_error_clear();
    }
    n->ip[P_BF16] = BF16_EMULATE;
    n->ws_fwd = dt_bf16_rounded_bytes(g, n, 3u);
    n->ws_bwd = dt_bf16_rounded_bytes(g, n, 3u | DT_BF16_GOUT);
    return DT_OK;
}

static dt_status matmul_forward_any(const dt_op_ctx *c) {
    switch (c->node->ip[P_BF16]) {
    case BF16_NATIVE:
        return native_forward(c);
    case BF16_EMULATE:
        return dt_bf16_run_rounded(c, 3u, matmul_forward);
    default:
        return matmul_forward(c);
    }
}

static dt_status matmul_backward_any(const dt_op_ctx *c) {
    switch (c->node->ip[P_BF16]) {
    case BF16_NATIVE:
        return native_backward(c);
    case BF16_EMULATE:
        return dt_bf16_run_rounded(c, 3u | DT_BF16_GOUT, matmul_backward);
    default:
        return matmul_backward(c);
    }
}

static const dt_op_def matmul_op = {
    .name = "matmul",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
    .prepare = matmul_prepare,
    .forward = matmul_forward_any,
    .backward = matmul_backward_any,
    .destroy = matmul_destroy,
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
