/* Native bf16 GEMMs through oneDNN matmul primitives (see gemm_bf16.h).
 *
 * The BLAS-style transposes are strides: op(A) = A^T is the [M, K] view of A [K, M] with strides
 * {1, lda}, so one matmul descriptor covers every case and no operand is copied. Accumulation
 * (beta = 1, a gradient added to) is a second primitive with a sum post-op, made at create time
 * so that a run allocates nothing. */
#include <dnnl.h>
#include <stdlib.h>
#include "dtrain/tensor.h"
#include "ops/dnnl_util.h"
#include "ops/gemm_bf16.h"

struct dt_gemm_bf16 {
    dnnl_primitive_t prim[2]; /* [0]: C = A B, [1]: C += A B */
    size_t sp_bytes[2];
    dnnl_memory_t a, b, c, sp[2]; /* memory objects without buffers: bound at run */
    const char *op;
};

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

size_t dt_bf16_pack_bytes(int64_t n) {
    return align64((size_t)n * sizeof(uint16_t));
}

void dt_bf16_pack(uint16_t *dst, const float *src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = dt_bf16_from_f32(src[i]);
}

/* [d0, d1] with strides {s0, s1}, or with batch > 1 [nb, d0, d1] with strides {sb, s0, s1}; a
 * shared operand (sb = 0) is [1, d0, d1], which oneDNN broadcasts over the batch. */
static dnnl_status_t md3(dnnl_memory_desc_t *md, int64_t batch, int64_t sb, int64_t d0, int64_t d1,
                         dnnl_data_type_t dt, int64_t s0, int64_t s1) {
    if (batch == 1) {
        dnnl_dims_t dims = {d0, d1}, strides = {s0, s1};
        return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
    }
    dnnl_dims_t dims = {sb ? batch : 1, d0, d1}, strides = {sb ? sb : d0 * d1, s0, s1};
    return dnnl_memory_desc_init_by_strides(md, 3, dims, dt, strides);
}

static dnnl_status_t make(dt_gemm_bf16 *p, int k, dnnl_engine_t eng, const dnnl_memory_desc_t *a,
                          const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *c) {
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dt_dnnl_matmul_pd(&pd, a, b, NULL, c, k == 1);
    if (st != dnnl_success) return st;
    const dnnl_memory_desc_t *spmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->sp_bytes[k] = spmd ? dnnl_memory_desc_get_size(spmd) : 0;
    if (p->sp_bytes[k]) st = dnnl_memory_create(&p->sp[k], spmd, eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_primitive_create(&p->prim[k], pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

dt_status dt_gemm_bf16_create(dt_gemm_bf16 **out, int ta, int tb, int64_t M, int64_t N, int64_t K,
                              int64_t lda, int64_t ldb, int64_t ldc, const char *op) {
    return dt_gemm_bf16_create_batched(out, 1, ta, tb, M, N, K, lda, ldb, ldc, 0, 0, 0, op);
}

dt_status dt_gemm_bf16_create_batched(dt_gemm_bf16 **out, int64_t batch, int ta, int tb, int64_t M,
                                      int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                                      int64_t sa, int64_t sb, int64_t sc, const char *op) {
    *out = NULL;
    dnnl_engine_t eng = dt_dnnl_engine();
    if (!eng) return DT_ERR_INTERNAL;
    dt_gemm_bf16 *p = calloc(1, sizeof *p);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory for a bf16 GEMM plan", op);
    p->op = op;
    dnnl_memory_desc_t a, b, c;
    dnnl_status_t st = ta ? md3(&a, batch, sa, M, K, dnnl_bf16, 1, lda)
                          : md3(&a, batch, sa, M, K, dnnl_bf16, lda, 1);
    if (!st)
        st = tb ? md3(&b, batch, sb, K, N, dnnl_bf16, 1, ldb)
                : md3(&b, batch, sb, K, N, dnnl_bf16, ldb, 1);
    if (!st) st = md3(&c, batch, sc, M, N, dnnl_f32, ldc, 1);
    for (int k = 0; k < 2 && !st; k++) st = make(p, k, eng, &a, &b, &c);
    if (!st) st = dnnl_memory_create(&p->a, &a, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&p->b, &b, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&p->c, &c, eng, DNNL_MEMORY_NONE);
    if (st) {
        dt_gemm_bf16_free(p);
        return dt_error_set(
            st == dnnl_unimplemented ? DT_ERR_DTYPE : DT_ERR_INTERNAL,
            "%s: no oneDNN bf16 matmul for %lld x [%lld, %lld] x [%lld, %lld]%s "
            "(status %d)",
            op, (long long)batch, (long long)M, (long long)K, (long long)K, (long long)N,
            st == dnnl_unimplemented ? ": this CPU has no bf16 kernels" : "", (int)st);
    }
    *out = p;
    return DT_OK;
}

size_t dt_gemm_bf16_scratch(const dt_gemm_bf16 *p) {
    return align64(p->sp_bytes[0] > p->sp_bytes[1] ? p->sp_bytes[0] : p->sp_bytes[1]);
}

dt_status dt_gemm_bf16_run(dt_gemm_bf16 *p, const uint16_t *A, const uint16_t *B, float beta,
                           float *C, void *scratch) {
    int k = beta != 0.0f;
    dnnl_status_t st = dnnl_memory_set_data_handle(p->a, (void *)A);
    if (!st) st = dnnl_memory_set_data_handle(p->b, (void *)B);
    if (!st) st = dnnl_memory_set_data_handle(p->c, C);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}, {0, NULL}};
    int nargs = 3;
    if (!st && p->sp_bytes[k]) {
        st = dnnl_memory_set_data_handle(p->sp[k], scratch);
        args[nargs].arg = DNNL_ARG_SCRATCHPAD;
        args[nargs++].memory = p->sp[k];
    }
    if (st) return dt_dnnl_check(st, p->op, "bf16 GEMM binding");
    return dt_dnnl_exec(p->prim[k], nargs, args, p->op, "bf16 GEMM");
}

void dt_gemm_bf16_free(dt_gemm_bf16 *p) {
    if (!p) return;
    for (int k = 0; k < 2; k++) {
        if (p->prim[k]) dnnl_primitive_destroy(p->prim[k]);
        if (p->sp[k]) dnnl_memory_destroy(p->sp[k]);
    }
    if (p->a) dnnl_memory_destroy(p->a);
    if (p->b) dnnl_memory_destroy(p->b);
    if (p->c) dnnl_memory_destroy(p->c);
    free(p);
}
