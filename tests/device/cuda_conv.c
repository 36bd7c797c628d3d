/* Convolutions through cuDNN (dt_cuda_conv_*) against the CPU graph op dt_conv2d (oneDNN) on
 * the same random inputs: forward (with and without bias), backward-data and backward-filter
 * (and the bias gradient) on ResNet shapes (the 7x7 stride-2 stem, 3x3, the 1x1 stride-2
 * downsample) and the rest conv2d takes (odd sizes, dilation, groups, depthwise). Plans are
 * f32 without TF32. Tolerances (sums of K = C/groups * KH * KW, or N * OH * OW for the filter
 * gradient, products in other orders): |gpu - cpu| <= 1e-5 sqrt(K) + 1e-4 |cpu|. Reruns are
 * bit-identical (deterministic engines); a plan with the accumulate flags adds to dx and dw
 * (2x to 1e-5 relative). Exit 77 without a GPU, or when the build has no cuDNN. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "dtrain/ops_cnn.h"
#include "cuda_testutil.h"
#include "harness.h"

#define RTOL 1e-4

typedef struct conv_case {
    int64_t N, C, H, W, O, K;
    int stride, pad, dil, groups, bias;
} conv_case;

static void test_conv(dt_device d, dt_stream *s, dt_cuda_dnn *dnn, conv_case k) {
    dt_graph *g = dt_graph_init();
    const int64_t Cg = k.C / k.groups;
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){k.N, k.C, k.H, k.W}, 1);
    int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){k.O, Cg, k.K, k.K}, 0);
    int b = k.bias ? dt_graph_param(g, "b", DT_F32, 1, &k.O, 0) : -1;
    int y = dt_conv2d(g, x, w, b, k.stride, k.stride, k.pad, k.pad, k.dil, k.dil, k.groups), r;
    char what[160];
    snprintf(what, sizeof what,
             "conv x [%lld, %lld, %lld, %lld] w [%lld, %lld, %lld, %lld] s %d "
             "p %d d %d g %d bias %d",
             (long long)k.N, (long long)k.C, (long long)k.H, (long long)k.W, (long long)k.O,
             (long long)Cg, (long long)k.K, (long long)k.K, k.stride, k.pad, k.dil, k.groups,
             k.bias);
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0 && cuda_test_cpu_step(g) == 0,
               "%s: cpu: %s", what, dt_last_error()))
        return;
    dt_cuda_conv_shape sh = {k.N,      k.C,      k.H,   k.W,   k.O,   k.K,   k.K,
                             k.stride, k.stride, k.pad, k.pad, k.dil, k.dil, k.groups};
    dt_cuda_conv *plan = NULL, *acc = NULL;
    dt_status cs = dt_cuda_conv_create(dnn, &sh, 0, 0, &plan);
    if (!CHECK(cs == DT_OK, "%s: plan: %s", what, dt_last_error())) {
        dt_graph_free(g);
        return;
    }
    CHECK_OK(dt_cuda_conv_create(dnn, &sh, DT_CUDA_CONV_ACC_DX | DT_CUDA_CONV_ACC_DW, 0, &acc));
    int64_t ohw[2];
    dt_cuda_conv_out_hw(plan, ohw);
    const dt_tensor *yt = dt_graph_value(g, y);
    CHECK(ohw[0] == yt->shape[2] && ohw[1] == yt->shape[3], "%s: OH, OW %lld, %lld", what,
          (long long)ohw[0], (long long)ohw[1]);
    const int64_t nx = k.N * k.C * k.H * k.W, nw = k.O * Cg * k.K * k.K, ny = dt_tensor_numel(yt);
    size_t ws = dt_cuda_conv_work(plan);
    if (acc && dt_cuda_conv_work(acc) > ws) ws = dt_cuda_conv_work(acc);
    CHECK(ws <= DT_CUDA_CONV_WORKSPACE_CAP, "%s: workspace %zu over the cap", what, ws);
    float *dx = cuda_test_upload(d, dt_graph_value(g, x)->data, (size_t)nx * 4);
    float *dw = cuda_test_upload(d, dt_graph_value(g, w)->data, (size_t)nw * 4);
    float *db = k.bias ? cuda_test_upload(d, dt_graph_value(g, b)->data, (size_t)k.O * 4) : NULL;
    float *dgy = cuda_test_upload(d, dt_graph_value(g, r)->data, (size_t)ny * 4);
    float *dy = cuda_test_alloc(d, (size_t)ny * 4), *dgx = cuda_test_alloc(d, (size_t)nx * 4);
    float *dgw = cuda_test_alloc(d, (size_t)nw * 4), *dgb = cuda_test_alloc(d, (size_t)k.O * 4);
    void *work = ws ? cuda_test_alloc(d, ws) : NULL;
    CHECK_OK(dt_cuda_conv_fwd(plan, s, dy, dx, dw, db, work));
    CHECK_OK(dt_cuda_conv_bwd_data(plan, s, dgx, dgy, dw, work));
    CHECK_OK(dt_cuda_conv_bwd_filter(plan, s, dgw, k.bias ? dgb : NULL, dgy, dx, work));
    const double K = (double)(Cg * k.K * k.K), KW = (double)(k.N * ohw[0] * ohw[1]);
    const double KX = (double)(k.O / k.groups * k.K * k.K);
    cuda_test_check(d, s, what, "y", dy, yt->data, ny, 1e-5 * sqrt(K), RTOL);
    cuda_test_check(d, s, what, "gx", dgx, dt_graph_grad(g, x)->data, nx, 1e-5 * sqrt(KX), RTOL);
    cuda_test_check(d, s, what, "gw", dgw, dt_graph_grad(g, w)->data, nw, 1e-5 * sqrt(KW), RTOL);
    if (k.bias) {
        cuda_test_check(d, s, what, "gb", dgb, dt_graph_grad(g, b)->data, k.O, 1e-5 * sqrt(KW),
                        RTOL);
    }
    /* reruns give the same bits */
    float *h = malloc((size_t)(ny > nw ? (ny > nx ? ny : nx) : (nw > nx ? nw : nx)) * 4);
    cuda_test_download(d, s, h, dy, (size_t)ny * 4);
    CHECK_OK(dt_cuda_conv_fwd(plan, s, dy, dx, dw, db, work));
    cuda_test_same(d, s, what, "rerun y", dy, h, (size_t)ny * 4);
    cuda_test_download(d, s, h, dgw, (size_t)nw * 4);
    CHECK_OK(dt_cuda_conv_bwd_filter(plan, s, dgw, NULL, dgy, dx, work));
    cuda_test_same(d, s, what, "rerun gw", dgw, h, (size_t)nw * 4);
    cuda_test_download(d, s, h, dgx, (size_t)nx * 4);
    CHECK_OK(dt_cuda_conv_bwd_data(plan, s, dgx, dgy, dw, work));
    cuda_test_same(d, s, what, "rerun gx", dgx, h, (size_t)nx * 4);
    /* accumulating plan: dx, dw += the same gradients */
    if (acc) {
        for (int64_t i = 0; i < nx; i++) h[i] *= 2.0f;
        CHECK_OK(dt_cuda_conv_bwd_data(acc, s, dgx, dgy, dw, work));
        cuda_test_check(d, s, what, "accumulated gx", dgx, h, nx, 1e-6, 1e-5);
    }
    /* a misaligned pointer is refused */
    CHECK(dt_cuda_conv_fwd(plan, s, dy + 1, dx, dw, NULL, work) == DT_ERR_INVALID,
          "%s: misaligned y accepted", what);
    free(h);
    void *bufs[] = {dx, dw, db, dgy, dy, dgx, dgw, dgb, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_cuda_conv_destroy(plan);
    dt_cuda_conv_destroy(acc);
    dt_graph_free(g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_conv", &s);
    dt_cuda_dnn *dnn = NULL;
    if (dt_cuda_dnn_create(d, &dnn) != DT_OK) {
        printf("cuda_conv: skipped: %s\n", dt_last_error());
        return 77;
    }
    dt_cuda_conv_shape bad = {1, 3, 4, 4, 8, 7, 7, 1, 1, 0, 0, 1, 1, 1};
    dt_cuda_conv *c = NULL;
    CHECK(dt_cuda_conv_create(dnn, &bad, 0, 0, &c) == DT_ERR_SHAPE && !c,
          "a 7x7 kernel over 4x4 without padding accepted");
    conv_case cases[] = {
        {2, 3, 37, 37, 16, 7, 2, 3, 1, 1, 0},  /* the stem: 7x7 stride 2 pad 3 */
        {2, 16, 15, 15, 16, 3, 1, 1, 1, 1, 0}, /* 3x3 */
        {2, 16, 15, 15, 32, 1, 2, 0, 1, 1, 0}, /* the 1x1 stride-2 downsample */
        {3, 12, 11, 9, 8, 3, 2, 1, 1, 4, 1},   /* groups, bias, odd sizes */
        {2, 8, 13, 13, 8, 3, 1, 2, 2, 1, 1},   /* dilation 2 */
        {2, 16, 10, 10, 16, 3, 1, 1, 1, 16, 0} /* depthwise */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_conv(d, s, dnn, cases[i]);
    dt_cuda_dnn_destroy(dnn);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_conv");
}
