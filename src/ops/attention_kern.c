/* Tile-level math for the tiled (flash) attention in attention.c: a small register-blocked
 * GEMM, a tile transpose, and a vectorised exp for softmax rows.
 *
 * Why our own GEMM: attention multiplies many small tiles (64 x 64 x Dh) from inside an OpenMP
 * parallel region. The pthread OpenBLAS that Debian ships would either pay its per-call
 * overhead on each tile or start its own threads for tiles above its threshold (64*64*128 is
 * above it) and oversubscribe the cores; a 4 x 16 AVX2/FMA micro-kernel on L1-resident tiles
 * is simple and runs close to the FMA throughput.
 *
 * The functions are declared in attention.c (the only user). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ATTN_AVX2 1
#endif

/* dst[c, r] = src[r, c]; src: [rows, lds] (first cols used), dst: [cols, ldd]. */
void dt_attn_transpose(int rows, int cols, const float *src, int lds, float *dst, int ldd) {
    for (int r0 = 0; r0 < rows; r0 += 8)
        for (int c = 0; c < cols; c++) {
            int r1 = r0 + 8 < rows ? r0 + 8 : rows;
            for (int r = r0; r < r1; r++) dst[(int64_t)c * ldd + r] = src[(int64_t)r * lds + c];
        }
}

#ifdef ATTN_AVX2

/* Lanes < n set (n in 0..8), for masked loads and stores of a ragged last column block. */
static inline __m256i lane_mask(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* C[0:MR, 0:8*NV] = alpha * A[0:MR, 0:k] B[0:k, 0:8*NV] + beta * C. With `tail` > 0 the last
 * vector column holds only `tail` valid lanes (masked loads/stores). MR, NV, and whether tail
 * is used are compile-time constants at each call, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void kern(int MR, int NV, int tail, int k, float alpha,
                                                       const float *A, int lda, const float *B,
                                                       int ldb, float beta, float *C, int ldc) {
    __m256 acc[4][2];
    __m256i m = lane_mask(tail ? tail : 8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) acc[r][v] = _mm256_setzero_ps();
    for (int p = 0; p < k; p++) {
        __m256 b[2];
        const float *bp = B + (int64_t)p * ldb;
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++)
            if (v < NV)
                b[v] = (tail && v == NV - 1) ? _mm256_maskload_ps(bp + 8 * v, m)
                                             : _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= MR) break;
            __m256 a = _mm256_broadcast_ss(A + (int64_t)r * lda + p);
#pragma GCC unroll 2
            for (int v = 0; v < 2; v++)
                if (v < NV) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= MR) break;
        float *cp = C + (int64_t)r * ldc;
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            if (v >= NV) break;
            int masked = tail && v == NV - 1;
            __m256 x = _mm256_mul_ps(va, acc[r][v]);
            if (beta != 0.0f) {
                __m256 c0 =
                    masked ? _mm256_maskload_ps(cp + 8 * v, m) : _mm256_loadu_ps(cp + 8 * v);
                x = _mm256_fmadd_ps(vb, c0, x);
            }
            if (masked)
                _mm256_maskstore_ps(cp + 8 * v, m, x);
            else
                _mm256_storeu_ps(cp + 8 * v, x);
        }
    }
}

/* One block of MR rows across all n columns. */
static inline __attribute__((always_inline)) void rows_block(int MR, int n, int k, float alpha,
                                                             const float *A, int lda,
                                                             const float *B, int ldb, float beta,
                                                             float *C, int ldc) {
    int j = 0;
    for (; j + 16 <= n; j += 16) kern(MR, 2, 0, k, alpha, A, lda, B + j, ldb, beta, C + j, ldc);
    if (n - j > 8)
        kern(MR, 2, n - j - 8, k, alpha, A, lda, B + j, ldb, beta, C + j, ldc);
    else if (n - j == 8)
        kern(MR, 1, 0, k, alpha, A, lda, B + j, ldb, beta, C + j, ldc);
    else if (n - j > 0)
        kern(MR, 1, n - j, k, alpha, A, lda, B + j, ldb, beta, C + j, ldc);
}

/* C[m, n] = alpha * A[m, k] B[k, n] + beta * C, all row-major with leading dims. beta 0 does not
 * read C (it may hold garbage). */
void dt_attn_gemm(int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc) {
    int i = 0;
    for (; i + 4 <= m; i += 4)
        rows_block(4, n, k, alpha, A + (int64_t)i * lda, lda, B, ldb, beta, C + (int64_t)i * ldc,
                   ldc);
    switch (m - i) {
    case 3:
        rows_block(3, n, k, alpha, A + (int64_t)i * lda, lda, B, ldb, beta, C + (int64_t)i * ldc,
                   ldc);
        break;
    case 2:
        rows_block(2, n, k, alpha, A + (int64_t)i * lda, lda, B, ldb, beta, C + (int64_t)i * ldc,
                   ldc);
        break;
    case 1:
        rows_block(1, n, k, alpha, A + (int64_t)i * lda, lda, B, ldb, beta, C + (int64_t)i * ldc,
                   ldc);
        break;
    default:
        break;
    }
}

/* exp(x) for x <= 88, about 2 ulp (Cephes' expf polynomial); x below -87.3 (where exp is
 * below FLT_MIN) gives exactly 0, so masked or far-off scores contribute nothing. */
static inline __m256 exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.33654475f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_GE_OQ); /* false for x < lo and NaN */
    x = _mm256_min_ps(x, hi);
    x = _mm256_max_ps(x, lo);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, under);
}

/* p[j] = exp(s[j] - mx) for j < n; returns the sum. p may alias s. */
float dt_attn_exp_sum(float *p, const float *s, int n, float mx) {
    __m256 vm = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 y = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(p + j, y);
        acc = _mm256_add_ps(acc, y);
    }
    if (j < n) {
        __m256i m = lane_mask(n - j);
        __m256 y = exp256(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), vm));
        y = _mm256_and_ps(y, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(p + j, m, y);
        acc = _mm256_add_ps(acc, y);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#else /* portable fallback */

void dt_attn_gemm(int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < m; i++) {
        float *c = C + (int64_t)i * ldc;
        for (int j = 0; j < n; j++) c[j] = beta != 0.0f ? beta * c[j] : 0.0f;
        for (int p = 0; p < k; p++) {
            float a = alpha * A[(int64_t)i * lda + p];
            const float *b = B + (int64_t)p * ldb;
            for (int j = 0; j < n; j++) c[j] += a * b[j];
        }
    }
}

float dt_attn_exp_sum(float *p, const float *s, int n, float mx) {
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        p[j] = expf(s[j] - mx);
        sum += p[j];
    }
    return sum;
}

#endif

/* max over s[0:n], n >= 1 */
float dt_attn_max(const float *s, int n) {
    float m = s[0];
    int j = 1;
#ifdef ATTN_AVX2
    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + j));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        m = _mm_cvtss_f32(h);
    }
#endif
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}
