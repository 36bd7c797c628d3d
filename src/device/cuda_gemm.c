/* Row-major GEMM on CUDA through cuBLASLt (include/dtrain/device_cuda.h). cuBLASLt is
 * column-major: a row-major C [M, N] is a column-major C^T [N, M], so C^T = op(B)^T op(A)^T is
 * computed with the operands swapped. The descriptors and the heuristic's algorithm are made
 * once per (shape, mode, operand alignment) and kept in the handle (plan_get). A handle is used
 * by one thread at a time (its workspace is one buffer).
 *
 * cuBLASLt is loaded with dlopen when the first handle is made, not linked: loading it costs a
 * process ~150 MiB of resident memory and its start-up time, which every CPU-only run (the
 * common case, and every worker of a host) would otherwise pay. The directory of the toolkit
 * it was built against (DT_CUBLASLT_DIR) is tried first, then the loader's search path. */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_util.h"

#define LT_FUNCS(X)                                                                                \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtGetStatusString)                                                                     \
    X(cublasLtMatmul)                                                                              \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmulDescCreate)                                                                    \
    X(cublasLtMatmulDescDestroy)                                                                   \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatrixLayoutCreate)                                                                  \
    X(cublasLtMatrixLayoutDestroy)                                                                 \
    X(cublasLtMatmulPreferenceCreate)                                                              \
    X(cublasLtMatmulPreferenceDestroy)                                                             \
    X(cublasLtMatmulPreferenceSetAttribute)

static struct {
#define LT_FIELD(f) __typeof__(&f) f;
    LT_FUNCS(LT_FIELD)
#undef LT_FIELD
} lt;
static char lt_error[512];
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

#define STR2(x) #x
#define STR(x) STR2(x)
#define LT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static void lt_load(void) {
#define LT_NAME(f) #f,
#define LT_SLOT(f) (void **)&lt.f,
    static const char *const names[] = {LT_FUNCS(LT_NAME)};
    void **const slots[] = {LT_FUNCS(LT_SLOT)};
#undef LT_NAME
#undef LT_SLOT
#ifdef DT_CUBLASLT_DIR
    const char *dir = DT_CUBLASLT_DIR;
#else
    const char *dir = NULL;
#endif
    dt_cuda_lib_load(dir, LT_SONAME, (int)(sizeof names / sizeof names[0]), names, slots, lt_error,
                     sizeof lt_error);
}

/* The library's functions, loaded once; an error names what is missing. */
static dt_status lt_ready(void) {
    pthread_once(&lt_once, lt_load);
    if (lt_error[0]) return dt_error_set(DT_ERR_STATE, "cuda gemm: %s", lt_error);
    return DT_OK;
}

/* The descriptors of one GEMM shape and the algorithm the heuristic chose for it. */
typedef struct gemm_desc {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} gemm_desc;

/* What a cached plan is valid for: the call's shape, mode and the operands' alignment (the
 * heuristic may pick a kernel that needs the alignment it was told about). */
typedef struct gemm_key {
    int64_t M, N, K, lda, ldb, ldc;
    int mode, ta, tb;
    uint32_t align_a, align_b, align_c;
} gemm_key;

typedef struct gemm_plan {
    int used;
    gemm_key key;
    gemm_desc g;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

/* A model's step issues a few dozen GEMM shapes over and over; building cuBLASLt's descriptors
 * and running its heuristic is host work of tens of microseconds per call, so each shape's are
 * made once and kept (replaced round-robin past GEMM_PLANS shapes). */
enum { GEMM_PLANS = 128 };

struct dt_cuda_gemm {
    dt_device dev;
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    gemm_plan plans[GEMM_PLANS];
    int next; /* the slot a new shape takes when all are used */
};

static dt_status lt_check(cublasStatus_t e, const char *op) {
    if (e == CUBLAS_STATUS_SUCCESS) return DT_OK;
    return dt_error_set(e == CUBLAS_STATUS_ALLOC_FAILED ? DT_ERR_NOMEM : DT_ERR_INTERNAL,
                        "cuda gemm: %s: cuBLASLt status %d (%s)", op, (int)e,
                        lt.cublasLtGetStatusString(e));
}

dt_status dt_cuda_gemm_create(dt_device d, size_t workspace_bytes, dt_cuda_gemm **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "cuda gemm create: NULL output");
    *out = NULL;
    if (d.kind != DT_DEVICE_CUDA)
        return dt_error_set(DT_ERR_STATE, "cuda gemm create: not a CUDA device");
    dt_status st = lt_ready();
    if (st == DT_OK) st = dt_device_use(d);
    if (st != DT_OK) return st;
    dt_cuda_gemm *h = calloc(1, sizeof *h);
    if (!h) return dt_error_set(DT_ERR_NOMEM, "cuda gemm create: no memory");
    h->dev = d;
    h->ws_bytes = workspace_bytes ? workspace_bytes : DT_CUDA_GEMM_WORKSPACE_DEFAULT;
    st = lt_check(lt.cublasLtCreate(&h->lt), "create");
    if (st == DT_OK) st = dt_device_alloc(d, h->ws_bytes, &h->ws);
    if (st != DT_OK) {
        dt_cuda_gemm_destroy(h);
        return st;
    }
    *out = h;
    return DT_OK;
}

static void desc_free(gemm_desc *g);

void dt_cuda_gemm_destroy(dt_cuda_gemm *h) {
    if (!h) return;
    for (int i = 0; i < GEMM_PLANS; i++)
        if (h->plans[i].used) desc_free(&h->plans[i].g);
    dt_device_free(h->dev, h->ws);
    if (h->lt) lt.cublasLtDestroy(h->lt);
    free(h);
}

static void desc_free(gemm_desc *g) {
    if (g->pref) lt.cublasLtMatmulPreferenceDestroy(g->pref);
    if (g->c) lt.cublasLtMatrixLayoutDestroy(g->c);
    if (g->b) lt.cublasLtMatrixLayoutDestroy(g->b);
    if (g->a) lt.cublasLtMatrixLayoutDestroy(g->a);
    if (g->op) lt.cublasLtMatmulDescDestroy(g->op);
}

/* The largest power of two (at most 256) that divides the address: what cuBLASLt is told of
 * an operand's alignment. */
static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

static dt_status pref_align(cublasLtMatmulPreference_t pref,
                            cublasLtMatmulPreferenceAttributes_t which, uint32_t al) {
    return lt_check(lt.cublasLtMatmulPreferenceSetAttribute(pref, which, &al, sizeof al),
                    "alignment");
}

/* Descriptors and algorithm of one call's key, made by the heuristic into g/algo. */
static dt_status plan_make(dt_cuda_gemm *h, const gemm_key *k, gemm_desc *gp,
                           cublasLtMatmulAlgo_t *algo) {
    const int64_t M = k->M, N = k->N, K = k->K;
    const int64_t a_cols = k->ta ? M : K, b_cols = k->tb ? K : N;
    const cudaDataType_t in = k->mode == DT_GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t comp =
        k->mode == DT_GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    /* column-major view: C^T [N, M] = opB' [N, K] x opA' [K, M], where the row-major B is a
     * column-major [b_cols, rows] matrix with leading dimension ldb (and A likewise) */
    const cublasOperation_t tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    gemm_desc g = {0};
    dt_status st = lt_check(lt.cublasLtMatmulDescCreate(&g.op, comp, CUDA_R_32F), "matmul desc");
    if (st == DT_OK)
        st = lt_check(
            lt.cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &tb, sizeof tb),
            "transa");
    if (st == DT_OK)
        st = lt_check(
            lt.cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &ta, sizeof ta),
            "transb");
    /* first operand: B as stored, column-major [b_cols, rows_b] */
    const uint64_t rows_b = (uint64_t)(k->tb ? N : K), rows_a = (uint64_t)(k->ta ? K : M);
    if (st == DT_OK)
        st = lt_check(lt.cublasLtMatrixLayoutCreate(&g.a, in, (uint64_t)b_cols, rows_b, k->ldb),
                      "layout B");
    if (st == DT_OK)
        st = lt_check(lt.cublasLtMatrixLayoutCreate(&g.b, in, (uint64_t)a_cols, rows_a, k->lda),
                      "layout A");
    if (st == DT_OK)
        st = lt_check(
            lt.cublasLtMatrixLayoutCreate(&g.c, CUDA_R_32F, (uint64_t)N, (uint64_t)M, k->ldc),
            "layout C");
    if (st == DT_OK) st = lt_check(lt.cublasLtMatmulPreferenceCreate(&g.pref), "preference");
    if (st == DT_OK)
        st = lt_check(
            lt.cublasLtMatmulPreferenceSetAttribute(
                g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &h->ws_bytes, sizeof h->ws_bytes),
            "workspace");
    /* cuBLASLt's first operand is dtrain's B (the column-major view above) */
    if (st == DT_OK)
        st = pref_align(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k->align_b);
    if (st == DT_OK)
        st = pref_align(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k->align_a);
    if (st == DT_OK)
        st = pref_align(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k->align_c);
    if (st == DT_OK)
        st = pref_align(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k->align_c);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == DT_OK)
        st = lt_check(lt.cublasLtMatmulAlgoGetHeuristic(h->lt, g.op, g.a, g.b, g.c, g.c, g.pref, 1,
                                                        &res, &found),
                      "heuristic");
    if (st == DT_OK && found == 0)
        st = dt_error_set(DT_ERR_INTERNAL,
                          "cuda gemm: cuBLASLt has no algorithm for M %lld N %lld K %lld mode %d",
                          (long long)M, (long long)N, (long long)K, k->mode);
    if (st != DT_OK) {
        desc_free(&g);
        return st;
    }
    *gp = g, *algo = res.algo;
    return DT_OK;
}

/* The cached plan of this call's key, made on first use. */
static dt_status plan_get(dt_cuda_gemm *h, dt_gemm_mode mode, int ta, int tb, int64_t M, int64_t N,
                          int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                          const float *C, int64_t ldc, gemm_plan **out) {
    gemm_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: no stray padding bytes */
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    k.mode = (int)mode, k.ta = !!ta, k.tb = !!tb;
    k.align_a = align_of(A), k.align_b = align_of(B), k.align_c = align_of(C);
    for (int i = 0; i < GEMM_PLANS; i++)
        if (h->plans[i].used && !memcmp(&h->plans[i].key, &k, sizeof k)) {
            *out = &h->plans[i];
            return DT_OK;
        }
    gemm_desc g;
    cublasLtMatmulAlgo_t algo;
    dt_status st = plan_make(h, &k, &g, &algo);
    if (st != DT_OK) return st;
    gemm_plan *p = &h->plans[h->next];
    h->next = (h->next + 1) % GEMM_PLANS;
    if (p->used) desc_free(&p->g);
    p->used = 1, p->key = k, p->g = g, p->algo = algo;
    *out = p;
    return DT_OK;
}

dt_status dt_cuda_gemm_run(dt_cuda_gemm *h, dt_stream *s, dt_gemm_mode mode, int trans_a,
                           int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                           int64_t lda, const void *B, int64_t ldb, float beta, float *C,
                           int64_t ldc) {
    if (!h || !s) return dt_error_set(DT_ERR_INVALID, "cuda gemm: NULL handle or stream");
    dt_device d = dt_stream_device(s);
    if (d.kind != h->dev.kind || d.index != h->dev.index)
        return dt_error_set(DT_ERR_INVALID, "cuda gemm: the stream is not on the handle's device");
    if (mode != DT_GEMM_F32 && mode != DT_GEMM_TF32 && mode != DT_GEMM_BF16)
        return dt_error_set(DT_ERR_INVALID, "cuda gemm: unknown mode %d", (int)mode);
    if (M < 0 || N < 0 || K < 0)
        return dt_error_set(DT_ERR_SHAPE, "cuda gemm: negative shape M %lld N %lld K %lld",
                            (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return DT_OK;
    /* row strides: A's rows hold K (or M when transposed) elements, B's N (or K), C's N */
    const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
    if (lda < a_cols || ldb < b_cols || ldc < N)
        return dt_error_set(DT_ERR_SHAPE,
                            "cuda gemm: strides lda %lld ldb %lld ldc %lld below the rows "
                            "(%lld, %lld, %lld) of M %lld N %lld K %lld",
                            (long long)lda, (long long)ldb, (long long)ldc, (long long)a_cols,
                            (long long)b_cols, (long long)N, (long long)M, (long long)N,
                            (long long)K);
    if (!A || !B || !C) return dt_error_set(DT_ERR_INVALID, "cuda gemm: NULL operand");
    dt_status st = dt_device_use(d);
    if (st != DT_OK) return st;
    gemm_plan *p = NULL;
    st = plan_get(h, mode, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, &p);
    if (st == DT_OK)
        st = lt_check(lt.cublasLtMatmul(h->lt, p->g.op, &alpha, B, p->g.a, A, p->g.b, &beta, C,
                                        p->g.c, C, p->g.c, &p->algo, h->ws, h->ws_bytes,
                                        (cudaStream_t)dt_stream_handle(s)),
                      "matmul");
    return st;
}
