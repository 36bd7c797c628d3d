/* The embedding gather and scatter-add on CUDA against the CPU graph op dt_embedding on the same
 * inputs (i32 and i64 ids with many repeats, rows no id names, n not a power of two, D over
 * one block of columns). Both are exact: the gather copies, and the backward adds each row's
 * positions in the CPU's order, so values and gradients must be equal bit for bit (memcmp),
 * the untouched rows +0.0 included. Also: the accumulating backward against a host loop in the
 * same order, a bf16 table against the exact widening, and ids outside [0, V) (first bad
 * position reported, zero row, skipped by the backward). Exit 77 without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "cuda_testutil.h"
#include "harness.h"

/* Skewed ids: every third position is id 1 (a frequent token), the others spread over
 * [0, V / 2): the upper half of the table is never named. */
static int64_t id_of(int64_t i, int64_t V) {
    return i % 3 == 0 ? 1 : (i * 7919) % (V / 2);
}

static void test_embedding(dt_device d, dt_stream *s, int64_t n, int64_t V, int64_t D, int is64) {
    dt_graph *g = dt_graph_init();
    int ids = dt_graph_input(g, "ids", is64 ? DT_I64 : DT_I32, 1, (int64_t[]){n}, 0);
    int tab = dt_graph_param(g, "table", DT_F32, 2, (int64_t[]){V, D}, 0);
    int y = dt_embedding(g, ids, tab), r;
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0, "embedding cpu: %s",
               dt_last_error()))
        return;
    void *iv = dt_graph_value(g, ids)->data;
    for (int64_t i = 0; i < n; i++) {
        if (is64)
            ((int64_t *)iv)[i] = id_of(i, V);
        else
            ((int32_t *)iv)[i] = (int32_t)id_of(i, V);
    }
    if (!CHECK(cuda_test_cpu_step(g) == 0, "embedding cpu: %s", dt_last_error())) return;
    const size_t ob = (size_t)(n * D) * sizeof(float), tb = (size_t)(V * D) * sizeof(float);
    void *di = cuda_test_upload_value(d, g, ids);
    float *dtab = cuda_test_upload_value(d, g, tab), *dr = cuda_test_upload_value(d, g, r);
    float *dout = cuda_test_alloc(d, ob), *dgt = cuda_test_alloc(d, tb);
    int64_t *dbad = cuda_test_alloc(d, sizeof(int64_t)), bad = 0;
    void *work = cuda_test_alloc(d, dt_cuda_embedding_bwd_work(n));
    CHECK_OK(dt_cuda_embedding_fwd(s, dout, dbad, di, is64, dtab, 0, n, V, D));
    CHECK_OK(dt_cuda_embedding_bwd(s, dgt, dr, di, is64, n, V, D, 0, work));
    float *h = malloc(tb > ob ? tb : ob), *want = malloc(tb);
    cuda_test_download(d, s, h, dout, ob);
    cuda_test_download(d, s, &bad, dbad, sizeof bad);
    CHECK(memcmp(h, dt_graph_value(g, y)->data, ob) == 0 && bad == -1,
          "embedding out n=%lld V=%lld D=%lld i64=%d differs from the CPU's (bad %lld)",
          (long long)n, (long long)V, (long long)D, is64, (long long)bad);
    cuda_test_download(d, s, h, dgt, tb);
    const float *cg = dt_graph_grad(g, tab)->data;
    int64_t diff = 0;
    for (int64_t k = 0; k < V * D; k++) diff += memcmp(&h[k], &cg[k], sizeof(float)) != 0;
    CHECK(diff == 0, "embedding dtable n=%lld V=%lld D=%lld: %lld elements differ from the CPU's",
          (long long)n, (long long)V, (long long)D, (long long)diff);
    /* accumulate onto the table's values: the same adds in the same order on the host */
    const float *tv = dt_graph_value(g, tab)->data, *rv = dt_graph_value(g, r)->data;
    memcpy(want, tv, tb);
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < D; c++) want[id_of(i, V) * D + c] += rv[i * D + c];
    CHECK_OK(dt_device_copy(d, dgt, tv, tb, DT_COPY_H2D));
    CHECK_OK(dt_cuda_embedding_bwd(s, dgt, dr, di, is64, n, V, D, 1, work));
    cuda_test_download(d, s, h, dgt, tb);
    CHECK(memcmp(h, want, tb) == 0, "embedding dtable accumulate differs from the host loop");
    /* ids out of range at positions 5 and 9: bad = 5, zero rows, skipped by the backward */
    if (n > 9) {
        int64_t b64[2] = {V, -1};
        int32_t b32[2] = {(int32_t)V, -1};
        const size_t es = is64 ? 8 : 4;
        CHECK_OK(dt_device_copy(d, (char *)di + 5 * es, is64 ? (void *)b64 : (void *)b32, es,
                                DT_COPY_H2D));
        CHECK_OK(dt_device_copy(d, (char *)di + 9 * es, is64 ? (void *)&b64[1] : (void *)&b32[1],
                                es, DT_COPY_H2D));
        CHECK_OK(dt_cuda_embedding_fwd(s, dout, dbad, di, is64, dtab, 0, n, V, D));
        cuda_test_download(d, s, h, dout, ob);
        cuda_test_download(d, s, &bad, dbad, sizeof bad);
        int zero = 1;
        for (int64_t c = 0; c < D; c++) zero &= h[5 * D + c] == 0.0f && h[9 * D + c] == 0.0f;
        CHECK(bad == 5 && zero, "bad ids: first bad position %lld (want 5), rows zero %d",
              (long long)bad, zero);
        CHECK_OK(dt_cuda_embedding_bwd(s, dgt, dr, di, is64, n, V, D, 0, work));
        memset(want, 0, tb);
        for (int64_t i = 0; i < n; i++)
            if (i != 5 && i != 9)
                for (int64_t c = 0; c < D; c++) want[id_of(i, V) * D + c] += rv[i * D + c];
        cuda_test_download(d, s, h, dgt, tb);
        CHECK(memcmp(h, want, tb) == 0, "embedding dtable with bad ids differs from the host loop");
    }
    free(h);
    free(want);
    void *bufs[] = {di, dtab, dr, dout, dgt, dbad, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

/* A bf16 table: out = the bits widened (bf16 << 16), exactly. */
static void test_bf16(dt_device d, dt_stream *s) {
    enum { n = 40, V = 17, D = 33 };
    uint16_t tab[V * D];
    int32_t ids[n];
    for (int k = 0; k < V * D; k++) tab[k] = (uint16_t)(0x3c00 + k * 37 % 0x0800);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(i * 5 % V);
    void *dtab = cuda_test_upload(d, tab, sizeof tab), *di = cuda_test_upload(d, ids, sizeof ids);
    float *dout = cuda_test_alloc(d, n * D * sizeof(float)), h[n * D];
    int64_t *dbad = cuda_test_alloc(d, sizeof(int64_t)), bad = 0;
    CHECK_OK(dt_cuda_embedding_fwd(s, dout, dbad, di, 0, dtab, 1, n, V, D));
    cuda_test_download(d, s, h, dout, sizeof h);
    cuda_test_download(d, s, &bad, dbad, sizeof bad);
    int64_t diff = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < D; c++) {
            uint32_t w = (uint32_t)tab[ids[i] * D + c] << 16;
            float f;
            memcpy(&f, &w, sizeof f);
            diff += memcmp(&f, &h[i * D + c], sizeof f) != 0;
        }
    CHECK(diff == 0 && bad == -1, "bf16 table: %lld elements differ (bad %lld)", (long long)diff,
          (long long)bad);
    void *bufs[] = {dtab, di, dout, dbad};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_embedding", &s);
    test_embedding(d, s, 5000, 300, 300, 0);
    test_embedding(d, s, 777, 64, 8, 1);
    test_embedding(d, s, 1, 3, 5, 0);
    test_bf16(d, s);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_embedding");
}
