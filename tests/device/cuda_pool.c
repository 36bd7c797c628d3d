/* Pooling on CUDA (dt_cuda_maxpool/avgpool/gap fwd and bwd) against the CPU graph ops
 * dt_maxpool2d, dt_avgpool2d and dt_global_avgpool on the same random inputs. Max and average
 * pooling compute each value with the CPU's operations in the CPU's order (the backward
 * gathers in output order, as the CPU scatters), so values and gradients are compared bit for
 * bit; the global average's sum is a tree (the CPU's a SIMD reduction): 1e-6 + 1e-5 |cpu|, its
 * gradient bit for bit. Accumulating backwards add to what is there: 2x the gradient to 1e-6
 * relative. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "dtrain/ops_cnn.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { MAX, AVG, GAP };

/* Downloads n floats of dev and checks them against 2 * want (an accumulating backward run
 * over the plain one). */
static void check_doubled(dt_device d, dt_stream *s, const char *what, const char *name,
                          const float *dev, const float *want, int64_t n) {
    float *w2 = malloc((size_t)n * sizeof *w2);
    for (int64_t i = 0; i < n; i++) w2[i] = 2.0f * want[i];
    cuda_test_check(d, s, what, name, dev, w2, n, 1e-6, 1e-6);
    free(w2);
}

static void test_pool(dt_device d, dt_stream *s, int kind, int64_t N, int64_t C, int64_t H,
                      int64_t W, int k, int st, int pad) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){N, C, H, W}, 1);
    int y = kind == MAX   ? dt_maxpool2d(g, x, k, k, st, st, pad, pad)
            : kind == AVG ? dt_avgpool2d(g, x, k, k, st, st, pad, pad)
                          : dt_global_avgpool(g, x);
    int r;
    char what[128];
    snprintf(what, sizeof what, "%s [%lld, %lld, %lld, %lld] k %d s %d p %d",
             kind == MAX   ? "maxpool"
             : kind == AVG ? "avgpool"
                           : "global avgpool",
             (long long)N, (long long)C, (long long)H, (long long)W, k, st, pad);
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0 && cuda_test_cpu_step(g) == 0,
               "%s: cpu: %s", what, dt_last_error()))
        return;
    const dt_tensor *yt = dt_graph_value(g, y);
    const int64_t n = N * C * H * W, ny = dt_tensor_numel(yt);
    const float *hx = dt_graph_value(g, x)->data, *hy = yt->data, *hgx = dt_graph_grad(g, x)->data;
    float *dx = cuda_test_upload(d, hx, (size_t)n * 4);
    float *dgy = cuda_test_upload(d, dt_graph_value(g, r)->data, (size_t)ny * 4);
    float *dy = cuda_test_alloc(d, (size_t)ny * 4), *dgx = cuda_test_alloc(d, (size_t)n * 4);
    int32_t *darg = cuda_test_alloc(d, (size_t)ny * 4);
    dt_cuda_pool2d p = {
        N * C, H,   W,  kind == GAP ? 1 : yt->shape[2], kind == GAP ? 1 : yt->shape[3], k, k, st,
        st,    pad, pad};
    for (int acc = 0; acc < 2; acc++) {
        if (kind == MAX) {
            CHECK_OK(dt_cuda_maxpool_fwd(s, dy, darg, dx, &p));
            CHECK_OK(dt_cuda_maxpool_bwd(s, dgx, dgy, darg, &p, acc));
        } else if (kind == AVG) {
            CHECK_OK(dt_cuda_avgpool_fwd(s, dy, dx, &p));
            CHECK_OK(dt_cuda_avgpool_bwd(s, dgx, dgy, &p, acc));
        } else {
            CHECK_OK(dt_cuda_gap_fwd(s, dy, dx, N * C, H * W));
            CHECK_OK(dt_cuda_gap_bwd(s, dgx, dgy, N * C, H * W, acc));
        }
        if (acc) {
            check_doubled(d, s, what, "accumulated gx", dgx, hgx, n);
            continue;
        }
        if (kind == GAP)
            cuda_test_check(d, s, what, "y", dy, hy, ny, 1e-6, 1e-5);
        else
            cuda_test_same(d, s, what, "y", dy, hy, (size_t)ny * 4);
        cuda_test_same(d, s, what, "gx", dgx, hgx, (size_t)n * 4);
    }
    void *bufs[] = {dx, dgy, dy, dgx, darg};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

/* A maxpool of a NaN: the NaN wins its windows (y NaN), as on the CPU. */
static void test_nan(dt_device d, dt_stream *s) {
    float hx[16];
    for (int i = 0; i < 16; i++) hx[i] = (float)i;
    hx[5] = NAN;
    float *dx = cuda_test_upload(d, hx, sizeof hx), *dy = cuda_test_alloc(d, 4 * 4);
    int32_t *darg = cuda_test_alloc(d, 4 * 4), ha[4];
    dt_cuda_pool2d p = {1, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0};
    float hy[4];
    CHECK_OK(dt_cuda_maxpool_fwd(s, dy, darg, dx, &p));
    cuda_test_download(d, s, hy, dy, sizeof hy);
    cuda_test_download(d, s, ha, darg, sizeof ha);
    CHECK(isnan(hy[0]) && ha[0] == 5 && hy[3] == 15.0f && ha[3] == 15,
          "maxpool NaN: y %g (arg %d), %g (arg %d)", hy[0], ha[0], hy[3], ha[3]);
    dt_cuda_pool2d bad = p;
    bad.OH = 3;
    CHECK(dt_cuda_maxpool_fwd(s, dy, darg, dx, &bad) == DT_ERR_SHAPE, "OH 3 accepted: %s",
          dt_last_error());
    dt_device_free(d, dx), dt_device_free(d, dy), dt_device_free(d, darg);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_pool", &s);
    test_nan(d, s);
    test_pool(d, s, MAX, 2, 8, 15, 17, 3, 2, 1); /* ResNet's stem pool, odd sizes */
    test_pool(d, s, MAX, 2, 3, 9, 8, 2, 2, 0);
    test_pool(d, s, MAX, 1, 4, 7, 7, 3, 1, 1); /* overlapping windows */
    test_pool(d, s, AVG, 2, 8, 15, 17, 3, 2, 1);
    test_pool(d, s, AVG, 2, 3, 9, 8, 2, 2, 0);
    test_pool(d, s, GAP, 4, 32, 7, 7, 0, 0, 0); /* ResNet's head */
    test_pool(d, s, GAP, 2, 5, 13, 11, 0, 0, 0);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_pool");
}
