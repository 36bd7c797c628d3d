/* RMSNorm, SwiGLU and the fused cross-entropy on CUDA against the CPU graph ops (dt_rmsnorm,
 * dt_silu x dt_mul, dt_cross_entropy) on the same random inputs, forward and backward.
 * Tolerances (f32, reductions in other orders, the GPU's expf vs the CPU's vectorised exp):
 * |gpu - cpu| <= 1e-5 + 1e-4 |cpu| (values and gradients); the loss relative 1e-5.
 * Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "cuda_testutil.h"
#include "harness.h"

#define ATOL 1e-5
#define RTOL 1e-4

static float *val(dt_graph *g, int id) {
    return dt_graph_value(g, id)->data;
}
static float *grad(dt_graph *g, int id) {
    return dt_graph_grad(g, id)->data;
}

/* Runs forward + backward of loss = sum(out * R) with every f32 leaf random. */
static int cpu_run(dt_graph *g, int out, int *r) {
    return cuda_test_cpu_compile(g, out, r) == 0 ? cuda_test_cpu_step(g) : -1;
}

static void test_rmsnorm(dt_device d, dt_stream *s, int64_t rows, int64_t D, int with_w) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){rows, D}, 1);
    int w = with_w ? dt_graph_param(g, "w", DT_F32, 1, (int64_t[]){D}, 0) : -1;
    int y = dt_rmsnorm(g, x, w, 1e-5f), r;
    if (!CHECK(cpu_run(g, y, &r) == 0, "rmsnorm cpu: %s", dt_last_error())) return;
    const size_t nb = (size_t)(rows * D) * sizeof(float);
    float *dx = cuda_test_upload(d, val(g, x), nb), *dr = cuda_test_upload(d, val(g, r), nb);
    float *dw = with_w ? cuda_test_upload(d, val(g, w), (size_t)D * sizeof(float)) : NULL;
    float *dy = cuda_test_alloc(d, nb), *dgx = cuda_test_alloc(d, nb);
    float *dgw = cuda_test_alloc(d, (size_t)D * sizeof(float));
    float *drs = cuda_test_alloc(d, (size_t)rows * sizeof(float));
    void *work = cuda_test_alloc(d, dt_cuda_rmsnorm_bwd_work(rows, D) + 4);
    CHECK_OK(dt_cuda_rmsnorm_fwd(s, dy, drs, dx, dw, rows, D, 1e-5f));
    CHECK_OK(dt_cuda_rmsnorm_bwd(s, dgx, with_w ? dgw : NULL, dr, dx, dw, drs, rows, D, work));
    float *h = malloc(nb);
    char what[64];
    snprintf(what, sizeof what, "rmsnorm y [%lld, %lld] w=%d", (long long)rows, (long long)D,
             with_w);
    cuda_test_download(d, s, h, dy, nb);
    dt_check_close(what, h, val(g, y), rows * D, ATOL, RTOL);
    snprintf(what, sizeof what, "rmsnorm dx [%lld, %lld] w=%d", (long long)rows, (long long)D,
             with_w);
    cuda_test_download(d, s, h, dgx, nb);
    dt_check_close(what, h, grad(g, x), rows * D, ATOL, RTOL);
    if (with_w) {
        cuda_test_download(d, s, h, dgw, (size_t)D * sizeof(float));
        dt_check_close("rmsnorm dw", h, grad(g, w), D, ATOL * (double)rows, RTOL);
    }
    free(h);
    void *bufs[] = {dx, dr, dw, dy, dgx, dgw, drs, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

static void test_swiglu(dt_device d, dt_stream *s, int64_t n) {
    dt_graph *g = dt_graph_init();
    int a = dt_graph_input(g, "a", DT_F32, 1, (int64_t[]){n}, 1);
    int b = dt_graph_input(g, "b", DT_F32, 1, (int64_t[]){n}, 1);
    int y = dt_mul(g, dt_silu(g, a), b), r;
    if (!CHECK(cpu_run(g, y, &r) == 0, "swiglu cpu: %s", dt_last_error())) return;
    const size_t nb = (size_t)n * sizeof(float);
    float *da = cuda_test_upload(d, val(g, a), nb), *db = cuda_test_upload(d, val(g, b), nb);
    float *dr = cuda_test_upload(d, val(g, r), nb), *dy = cuda_test_alloc(d, nb);
    float *dga = cuda_test_alloc(d, nb), *dgb = cuda_test_alloc(d, nb);
    CHECK_OK(dt_cuda_swiglu_fwd(s, dy, da, db, n));
    CHECK_OK(dt_cuda_swiglu_bwd(s, dga, dgb, dr, da, db, n));
    float *h = malloc(nb);
    cuda_test_download(d, s, h, dy, nb);
    dt_check_close("swiglu y", h, val(g, y), n, ATOL, RTOL);
    cuda_test_download(d, s, h, dga, nb);
    dt_check_close("swiglu da", h, grad(g, a), n, ATOL, RTOL);
    cuda_test_download(d, s, h, dgb, nb);
    dt_check_close("swiglu db", h, grad(g, b), n, ATOL, RTOL);
    free(h);
    void *bufs[] = {da, db, dr, dy, dga, dgb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

/* logits [N, C] ~ N(0, 2^2); every 7th row ignored (-100); in_place: dx over the logits. */
static void test_ce(dt_device d, dt_stream *s, int64_t N, int64_t C, float ls, int in_place) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "logits", DT_F32, 2, (int64_t[]){N, C}, 1);
    int t = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){N}, 0);
    int loss = dt_cross_entropy(g, x, t, ls, -100);
    if (!CHECK(loss >= 0 && dt_graph_compile(g, loss, NULL) == DT_OK, "ce build: %s",
               dt_last_error()))
        return;
    dt_test_randn(g, x, 77, 2.0f);
    int32_t *tg = dt_graph_value(g, t)->data;
    for (int64_t i = 0; i < N; i++) tg[i] = i % 7 == 3 ? -100 : (int32_t)((i * 2654435761u) % C);
    if (!CHECK(dt_graph_forward(g, 1) == DT_OK && dt_graph_backward(g) == DT_OK, "ce cpu: %s",
               dt_last_error()))
        return;
    const size_t nb = (size_t)(N * C) * sizeof(float);
    float *dx = cuda_test_upload(d, val(g, x), nb);
    int32_t *dt = cuda_test_upload(d, tg, (size_t)N * sizeof(int32_t));
    float one = 1.0f;
    float *dgl = cuda_test_upload(d, &one, sizeof one), *dloss = cuda_test_alloc(d, sizeof(float));
    float *dlse = cuda_test_alloc(d, (size_t)N * sizeof(float));
    int64_t *dstats = cuda_test_alloc(d, 2 * sizeof(int64_t));
    void *work = cuda_test_alloc(d, dt_cuda_ce_work(N));
    float *dgx = in_place ? dx : cuda_test_alloc(d, nb);
    CHECK_OK(dt_cuda_ce_fwd(s, dloss, dlse, dstats, dx, dt, N, C, -100, ls, work));
    CHECK_OK(dt_cuda_ce_bwd(s, dgx, dx, dt, dlse, dstats, dgl, N, C, -100, ls));
    float hl;
    int64_t st[2];
    cuda_test_download(d, s, &hl, dloss, sizeof hl);
    cuda_test_download(d, s, st, dstats, sizeof st);
    const float cl = *val(g, loss);
    int64_t valid = 0;
    for (int64_t i = 0; i < N; i++) valid += tg[i] != -100;
    CHECK(fabsf(hl - cl) <= 1e-5f * fabsf(cl), "ce loss N=%lld C=%lld: gpu %.8g cpu %.8g",
          (long long)N, (long long)C, hl, cl);
    CHECK(st[0] == valid && st[1] == -1, "ce stats %lld %lld (valid %lld)", (long long)st[0],
          (long long)st[1], (long long)valid);
    float *h = malloc(nb);
    cuda_test_download(d, s, h, dgx, nb);
    char what[80];
    snprintf(what, sizeof what, "ce dlogits [%lld, %lld] ls %g%s", (long long)N, (long long)C, ls,
             in_place ? " in place" : "");
    dt_check_close(what, h, grad(g, x), N * C, ATOL / (double)valid, RTOL);
    /* a target outside [0, C): loss NaN, the first bad row reported */
    int32_t bad[2] = {(int32_t)C, -5};
    CHECK_OK(dt_device_copy(d, dt + 5, bad, sizeof bad, DT_COPY_H2D));
    CHECK_OK(dt_cuda_ce_fwd(s, dloss, dlse, dstats, dx, dt, N, C, -100, ls, work));
    cuda_test_download(d, s, &hl, dloss, sizeof hl);
    cuda_test_download(d, s, st, dstats, sizeof st);
    CHECK(isnan(hl) && st[1] == 5, "bad target: loss %g, first bad row %lld", hl, (long long)st[1]);
    free(h);
    void *bufs[] = {dx, dt, dgl, dloss, dlse, dstats, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    if (!in_place) dt_device_free(d, dgx);
    dt_graph_free(g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_nn", &s);
    test_rmsnorm(d, s, 37, 2048, 1);
    test_rmsnorm(d, s, 300, 100, 1);
    test_rmsnorm(d, s, 5, 7, 0);
    test_swiglu(d, s, 1000003);
    test_ce(d, s, 64, 32000, 0.0f, 0);
    test_ce(d, s, 33, 1000, 0.1f, 1);
    test_ce(d, s, 9, 3, 0.0f, 0);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_nn");
}
