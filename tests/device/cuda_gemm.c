/* The cuBLASLt GEMM wrapper against a double-precision product of the same inputs, in the
 * three modes and all four transposes, with odd shapes, row strides above the width and
 * beta = 0.5 (C read and scaled), each twice (the second from the handle's cached plan: same
 * bits), and operands only 4 or 8 bytes aligned. Tolerances on |gpu - exact| <= tol * sqrt(K) *
 * max|a| max|b|: f32: 1e-6, TF32 (10-bit mantissa inputs): 2e-3, bf16 inputs (rounded here, so the
 * exact product is of the bf16 values; f32 accumulation): 1e-5. Then the speed of a large square
 * bf16 and TF32 product (printed; scripts/gpu-check.sh collects it). Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "cuda_testutil.h"
#include "harness.h"

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The operands start `off` elements into their buffers (off 1: f32 operands 4-byte aligned
 * only, which cuBLASLt must be told of); the call is made twice, the second from the handle's
 * cached plan, and must give the same bits. */
static void check_case(dt_device d, dt_stream *s, dt_cuda_gemm *h, dt_gemm_mode mode, int ta,
                       int tb, int64_t M, int64_t N, int64_t K, int64_t off) {
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    /* strides above the widths, rounded to 8 elements (16 bytes for bf16: what cuBLASLt's
     * tensor-core kernels want); the padding must stay untouched */
    const int64_t lda = (ac + 3 + 7) / 8 * 8, ldb = (bc + 1 + 7) / 8 * 8, ldc = (N + 2 + 7) / 8 * 8;
    float *a = malloc((size_t)(ar * lda) * sizeof(float)),
          *b = malloc((size_t)(br * ldb) * sizeof(float));
    float *c = malloc((size_t)(M * ldc) * sizeof(float)),
          *out = malloc((size_t)(M * ldc) * sizeof(float));
    dt_randn(a, ar * lda, 1 + (uint64_t)mode, 1.0f);
    dt_randn(b, br * ldb, 2 + (uint64_t)mode, 1.0f);
    dt_randn(c, M * ldc, 3, 1.0f);
    const size_t esz = mode == DT_GEMM_BF16 ? 2 : 4;
    const size_t na = (size_t)(off + ar * lda), nb = (size_t)(off + br * ldb);
    const size_t nc = (size_t)(M * ldc) * sizeof(float);
    char *ha = calloc(na, esz), *hb = calloc(nb, esz);
    if (mode == DT_GEMM_BF16) {
        for (int64_t i = 0; i < ar * lda; i++)
            a[i] = from_bf16(((uint16_t *)ha)[off + i] = to_bf16(a[i]));
        for (int64_t i = 0; i < br * ldb; i++)
            b[i] = from_bf16(((uint16_t *)hb)[off + i] = to_bf16(b[i]));
    } else {
        memcpy(ha + off * 4, a, (size_t)(ar * lda) * 4);
        memcpy(hb + off * 4, b, (size_t)(br * ldb) * 4);
    }
    char *da = cuda_test_upload(d, ha, na * esz), *db = cuda_test_upload(d, hb, nb * esz);
    char *dcb = cuda_test_alloc(d, nc + (size_t)off * sizeof(float));
    float *dc = (float *)(dcb + off * 4);
    const float alpha = 1.5f, beta = 0.5f;
    float *again = malloc(nc);
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(dt_device_copy(d, dc, c, nc, DT_COPY_H2D));
        CHECK_OK(dt_cuda_gemm_run(h, s, mode, ta, tb, M, N, K, alpha, da + off * esz, lda,
                                  db + off * esz, ldb, beta, dc, ldc));
        cuda_test_download(d, s, rep ? again : out, dc, nc);
    }
    CHECK(!memcmp(out, again, nc),
          "gemm mode %d ta %d tb %d off %lld: the cached plan's bits differ", (int)mode, ta, tb,
          (long long)off);
    free(again);
    static const double tols[] = {1e-6, 2e-3, 1e-5};
    const double bound = tols[mode] * sqrt((double)K) * 4.5 * 4.5 * alpha + 1e-6;
    double worst = 0;
    int pad_ok = 1;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double e = 0;
            for (int64_t k = 0; k < K; k++) {
                double x = ta ? a[k * lda + i] : a[i * lda + k];
                double y = tb ? b[j * ldb + k] : b[k * ldb + j];
                e += x * y;
            }
            e = alpha * e + beta * (double)c[i * ldc + j];
            double err = fabs(out[i * ldc + j] - e);
            if (err > worst) worst = err;
        }
        for (int64_t j = N; j < ldc; j++) pad_ok &= out[i * ldc + j] == c[i * ldc + j];
    }
    CHECK(worst <= bound && pad_ok,
          "gemm mode %d ta %d tb %d off %lld [%lld x %lld x %lld]: worst %g > %g or padding "
          "written (%d)",
          (int)mode, ta, tb, (long long)off, (long long)M, (long long)N, (long long)K, worst, bound,
          pad_ok);
    dt_device_free(d, da);
    dt_device_free(d, db);
    dt_device_free(d, dcb);
    free(a), free(b), free(c), free(out), free(ha), free(hb);
}

/* TFLOP/s of a square n^3 product in `mode`, the mean of 10 after 3 warm-ups. */
static double speed(dt_device d, dt_stream *s, dt_cuda_gemm *h, dt_gemm_mode mode, int64_t n) {
    const size_t esz = mode == DT_GEMM_BF16 ? 2 : 4;
    void *a = cuda_test_alloc(d, (size_t)(n * n) * esz),
         *b = cuda_test_alloc(d, (size_t)(n * n) * esz);
    float *c = cuda_test_alloc(d, (size_t)(n * n) * sizeof(float));
    /* small finite values (0x3c00... as bf16 is 0.0078; as f32 bits about 0.0078 too) */
    CHECK_OK(dt_device_memset(d, a, 0x3c, (size_t)(n * n) * esz));
    CHECK_OK(dt_device_memset(d, b, 0x3c, (size_t)(n * n) * esz));
    dt_event *e0, *e1;
    CHECK_OK(dt_event_create(d, &e0));
    CHECK_OK(dt_event_create(d, &e1));
    for (int i = 0; i < 3; i++)
        CHECK_OK(dt_cuda_gemm_run(h, s, mode, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n));
    CHECK_OK(dt_event_record(e0, s));
    for (int i = 0; i < 10; i++)
        CHECK_OK(dt_cuda_gemm_run(h, s, mode, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n));
    CHECK_OK(dt_event_record(e1, s));
    CHECK_OK(dt_event_sync(e1));
    float ms = 0;
    CHECK_OK(dt_event_elapsed_ms(e0, e1, &ms));
    dt_event_destroy(e0);
    dt_event_destroy(e1);
    dt_device_free(d, a);
    dt_device_free(d, b);
    dt_device_free(d, c);
    return ms > 0 ? 2.0 * (double)n * n * n * 10 / (ms * 1e-3) / 1e12 : 0;
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_gemm", &s);
    dt_cuda_gemm *h = NULL;
    CHECK_OK(dt_cuda_gemm_create(d, 0, &h));
    if (!h) return dt_test_finish("cuda_gemm");
    for (int mode = 0; mode < 3; mode++)
        for (int t = 0; t < 4; t++)
            check_case(d, s, h, (dt_gemm_mode)mode, t & 1, t >> 1, 67, 45, 129, 0);
    check_case(d, s, h, DT_GEMM_BF16, 0, 1, 256, 384, 512, 0);
    /* operands at 4-byte (f32) and 8-byte (bf16) alignment: a plan for the aligned case of
     * the same shape would pick kernels that need 16 bytes or more */
    check_case(d, s, h, DT_GEMM_F32, 0, 1, 256, 384, 512, 1);
    check_case(d, s, h, DT_GEMM_TF32, 1, 0, 256, 384, 512, 1);
    check_case(d, s, h, DT_GEMM_BF16, 0, 1, 256, 384, 512, 4);
    CHECK(dt_cuda_gemm_run(h, s, DT_GEMM_F32, 0, 0, 4, 4, 4, 1, h, 2, h, 4, 0, (float *)h, 4) ==
                  DT_ERR_SHAPE &&
              strstr(dt_last_error(), "cuda gemm: strides lda 2"),
          "short stride refused: %s", dt_last_error());
    const int64_t n = getenv("DT_GEMM_BENCH_N") ? atoll(getenv("DT_GEMM_BENCH_N")) : 8192;
    double bf = speed(d, s, h, DT_GEMM_BF16, n), tf = speed(d, s, h, DT_GEMM_TF32, n);
    printf("GEMM %lld^3: bf16 %.1f TFLOP/s, tf32 %.1f TFLOP/s\n", (long long)n, bf, tf);
    CHECK(bf > 0 && tf > 0, "timed");
    dt_cuda_gemm_destroy(h);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_gemm");
}
