/* Batchnorm on CUDA (dt_cuda_bn_fwd/bwd) against the CPU graph op dt_batchnorm2d_fused on the
 * same random inputs: training and eval, plain, + ReLU, + residual + ReLU, the residual being x
 * itself; forward (y and the updated running statistics) and backward (x, weight, bias and
 * residual gradients). Tolerances (f32, per-channel sums in another order: double partials on
 * the GPU, float row partials in double on the CPU): y, gx, gres |gpu - cpu| <= 1e-4 + 1e-4
 * |cpu|; gw, gb and the running statistics 1e-5 sqrt(M) + 1e-4 |cpu|. Reruns are bit-identical
 * (a recomputed forward gives the same y and leaves the running statistics alone). Exit 77
 * without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "dtrain/ops_cnn.h"
#include "cuda_testutil.h"
#include "harness.h"

#define ATOL 1e-4
#define RTOL 1e-4

enum { RES_NONE, RES_OTHER, RES_X }; /* the residual: none, another tensor, x itself */

static float *val(dt_graph *g, int id) {
    return dt_graph_value(g, id)->data;
}
static float *grad(dt_graph *g, int id) {
    return dt_graph_grad(g, id)->data;
}

static void test_bn(dt_device d, dt_stream *s, int64_t N, int64_t C, int64_t H, int64_t W, int relu,
                    int res_kind, int train) {
    const int64_t P = H * W, n = N * C * P, M = N * P;
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){N, C, H, W}, 1);
    int res = res_kind == RES_OTHER
                  ? dt_graph_input(g, "res", DT_F32, 4, (int64_t[]){N, C, H, W}, 1)
              : res_kind == RES_X ? x
                                  : -1;
    int w = dt_graph_param(g, "w", DT_F32, 1, &C, 0), b = dt_graph_param(g, "b", DT_F32, 1, &C, 0);
    int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    int y = dt_batchnorm2d_fused(g, x, w, b, rm, rv, 0.1f, 1e-5f, res, relu), r;
    char what[128];
    snprintf(what, sizeof what, "bn [%lld, %lld, %lld, %lld] relu %d res %d train %d", (long long)N,
             (long long)C, (long long)H, (long long)W, relu, res_kind, train);
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0, "%s: cpu: %s", what,
               dt_last_error()))
        return;
    float *hrv = val(g, rv);
    for (int64_t c = 0; c < C; c++) hrv[c] = fabsf(hrv[c]) + 0.5f; /* a variance */
    const size_t nb = (size_t)n * sizeof(float), cb = (size_t)C * sizeof(float);
    float *dx = cuda_test_upload(d, val(g, x), nb), *dgy = cuda_test_upload(d, val(g, r), nb);
    float *dres = res_kind == RES_OTHER ? cuda_test_upload(d, val(g, res), nb)
                  : res_kind == RES_X   ? dx
                                        : NULL;
    float *dw = cuda_test_upload(d, val(g, w), cb), *db = cuda_test_upload(d, val(g, b), cb);
    float *drm = cuda_test_upload(d, val(g, rm), cb), *drv = cuda_test_upload(d, val(g, rv), cb);
    float *dy = cuda_test_alloc(d, nb), *dgx = cuda_test_alloc(d, nb);
    float *dgres = res_kind == RES_OTHER ? cuda_test_alloc(d, nb) : res_kind == RES_X ? dgx : NULL;
    float *dmean = cuda_test_alloc(d, cb), *drstd = cuda_test_alloc(d, cb);
    float *dgw = cuda_test_alloc(d, cb), *dgb = cuda_test_alloc(d, cb);
    void *work = cuda_test_alloc(d, dt_cuda_bn_work(N, C, P));
    if (!CHECK(dt_graph_forward(g, train) == DT_OK && dt_graph_backward(g) == DT_OK, "%s: cpu: %s",
               what, dt_last_error()))
        return;
    const int mode = train ? DT_CUDA_BN_TRAIN : DT_CUDA_BN_EVAL;
    CHECK_OK(dt_cuda_bn_fwd(s, dy, dmean, drstd, drm, drv, dx, dw, db, dres, relu, N, C, P, 0.1f,
                            1e-5f, mode, work));
    /* the residual is x: gx is x's slot (written), the residual's adds to it */
    const int acc = res_kind == RES_X ? DT_CUDA_BN_ACC_GRES : 0;
    CHECK_OK(dt_cuda_bn_bwd(s, dgx, dgw, dgb, dgres, dgy, dx, dy, dmean, drstd, dw, train, relu, N,
                            C, P, acc, work));
    const double satol = 1e-5 * sqrt((double)M);
    cuda_test_check(d, s, what, "y", dy, val(g, y), n, ATOL, RTOL);
    cuda_test_check(d, s, what, "running mean", drm, val(g, rm), C, satol, RTOL);
    cuda_test_check(d, s, what, "running var", drv, val(g, rv), C, satol, RTOL);
    cuda_test_check(d, s, what, "gx", dgx, grad(g, x), n, ATOL, RTOL);
    cuda_test_check(d, s, what, "gw", dgw, grad(g, w), C, satol, RTOL);
    cuda_test_check(d, s, what, "gb", dgb, grad(g, b), C, satol, RTOL);
    if (res_kind == RES_OTHER) {
        cuda_test_check(d, s, what, "gres", dgres, grad(g, res), n, ATOL, RTOL);
    }
    /* reruns: a recomputed forward (same y bits, running statistics untouched), the backward
     * again (the ReLU mask already applied to gy: the same gradients) */
    float *h0 = malloc(nb), *hr0 = malloc(2 * cb), *hgx = malloc(nb), *hgw = malloc(cb);
    cuda_test_download(d, s, h0, dy, nb);
    cuda_test_download(d, s, hr0, drm, cb);
    cuda_test_download(d, s, hr0 + C, drv, cb);
    cuda_test_download(d, s, hgx, dgx, nb);
    cuda_test_download(d, s, hgw, dgw, cb);
    if (train) {
        CHECK_OK(dt_cuda_bn_fwd(s, dy, dmean, drstd, drm, drv, dx, dw, db, dres, relu, N, C, P,
                                0.1f, 1e-5f, DT_CUDA_BN_RECOMPUTE, work));
        cuda_test_same(d, s, what, "recomputed y", dy, h0, nb);
        cuda_test_same(d, s, what, "running mean after a recompute", drm, hr0, cb);
        cuda_test_same(d, s, what, "running var after a recompute", drv, hr0 + C, cb);
    }
    CHECK_OK(dt_cuda_bn_bwd(s, dgx, dgw, dgb, dgres, dgy, dx, dy, dmean, drstd, dw, train, relu, N,
                            C, P, acc, work));
    cuda_test_same(d, s, what, "rerun gx", dgx, hgx, nb);
    cuda_test_same(d, s, what, "rerun gw", dgw, hgw, cb);
    free(h0), free(hr0), free(hgx), free(hgw);
    void *bufs[] = {dx, dgy, dw, db, drm, drv, dy, dgx, dmean, drstd, dgw, dgb, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    if (res_kind == RES_OTHER) dt_device_free(d, dres), dt_device_free(d, dgres);
    dt_graph_free(g);
}

/* The refusals: a training forward over one value per channel, an unknown mode. */
static void test_errors(dt_stream *s) {
    float *p = (float *)16; /* never dereferenced: the calls refuse first */
    CHECK(dt_cuda_bn_fwd(s, p, p, p, p, p, p, p, p, NULL, 0, 1, 4, 1, 0.1f, 1e-5f, DT_CUDA_BN_TRAIN,
                         p) == DT_ERR_SHAPE,
          "M = 1 in training: %s", dt_last_error());
    CHECK(dt_cuda_bn_fwd(s, p, p, p, p, p, p, p, p, NULL, 0, 2, 4, 3, 0.1f, 1e-5f, 7, p) ==
              DT_ERR_INVALID,
          "mode 7: %s", dt_last_error());
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_batchnorm", &s);
    test_errors(s);
    test_bn(d, s, 4, 16, 15, 17, 0, RES_NONE, 1); /* plain, odd sizes */
    test_bn(d, s, 3, 8, 7, 7, 1, RES_NONE, 1);    /* bn + relu, ResNet's last stage */
    test_bn(d, s, 2, 24, 9, 11, 1, RES_OTHER, 1); /* bn + shortcut + relu */
    test_bn(d, s, 2, 8, 5, 6, 1, RES_X, 1);       /* the residual is x */
    test_bn(d, s, 2, 16, 6, 5, 1, RES_OTHER, 0);  /* eval */
    test_bn(d, s, 16, 4, 64, 72, 0, RES_NONE, 1); /* several chunks per channel */
    dt_stream_destroy(s);
    return dt_test_finish("cuda_batchnorm");
}
