/* RoPE on CUDA against the CPU graph op dt_rope on the same random inputs, forward and
 * backward: positions 0..T-1, [B, T] i64 positions up to ~9000 with the Llama-3.1 scaled
 * frequencies, [1, T] i32 positions, and the accumulating backward (gx += ...).
 * Tolerance: |gpu - cpu| <= 1e-5 + 1e-5 |cpu|: the angle is the same f32 product on both, but
 * CUDA's cosf/sinf are within 2 ulp of the CPU's, and either side may contract the
 * multiply-adds into FMAs. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include "dtrain/device_cuda.h"
#include "dtrain/ops_attn.h"
#include "cuda_testutil.h"
#include "harness.h"

#define TOL 1e-5

/* pos_mode 0: no positions; 1: [B, T] i64 (start 1000 b + 37, stride 5); 2: [1, T] i32. */
static void test_rope(dt_device d, dt_stream *s, int64_t B, int64_t H, int64_t T, int Dh,
                      int pos_mode, int llama3) {
    const int half = Dh / 2;
    float *inv = malloc((size_t)half * sizeof(float));
    dt_status st = llama3 ? dt_rope_llama3_inv_freq(inv, Dh, 500000.0f, 8.0f, 1.0f, 4.0f, 8192)
                          : dt_rope_default_inv_freq(inv, Dh, 10000.0f);
    CHECK_OK(st);
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){B, H, T, Dh}, 1), p = -1;
    const int64_t Bc = pos_mode == 1 ? B : 1;
    if (pos_mode)
        p = dt_graph_input(g, "pos", pos_mode == 1 ? DT_I64 : DT_I32, 2, (int64_t[]){Bc, T}, 0);
    int y = dt_rope(g, x, p, 10000.0f, inv), r;
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0, "rope cpu: %s", dt_last_error()))
        return;
    if (pos_mode == 1) {
        int64_t *pv = dt_graph_value(g, p)->data;
        for (int64_t i = 0; i < B * T; i++) pv[i] = 1000 * (i / T) + 37 + 5 * (i % T);
    } else if (pos_mode == 2) {
        int32_t *pv = dt_graph_value(g, p)->data;
        for (int64_t i = 0; i < T; i++) pv[i] = (int32_t)(3 * i + 1);
    }
    if (!CHECK(cuda_test_cpu_step(g) == 0, "rope cpu: %s", dt_last_error())) return;
    const int64_t n = B * H * T * Dh;
    const size_t nb = (size_t)n * sizeof(float);
    float *dx = cuda_test_upload_value(d, g, x), *dr = cuda_test_upload_value(d, g, r);
    float *dinv = cuda_test_upload(d, inv, (size_t)half * sizeof(float));
    void *dp = pos_mode ? cuda_test_upload_value(d, g, p) : NULL;
    float *dy = cuda_test_alloc(d, nb), *dgx = cuda_test_alloc(d, nb);
    CHECK_OK(dt_cuda_rope_fwd(s, dy, dx, dinv, dp, pos_mode == 1, Bc, B, H, T, half));
    CHECK_OK(dt_cuda_rope_bwd(s, dgx, dr, dinv, dp, pos_mode == 1, Bc, B, H, T, half, 0));
    float *h = malloc(nb), *want = malloc(nb);
    char what[96];
    snprintf(what, sizeof what, "rope y [%lld, %lld, %lld, %d] pos %d llama3 %d", (long long)B,
             (long long)H, (long long)T, Dh, pos_mode, llama3);
    cuda_test_download(d, s, h, dy, nb);
    dt_check_close(what, h, dt_graph_value(g, y)->data, n, TOL, TOL);
    what[5] = 'g'; /* "rope g" */
    cuda_test_download(d, s, h, dgx, nb);
    dt_check_close(what, h, dt_graph_grad(g, x)->data, n, TOL, TOL);
    /* accumulate: gx = x + rot^-1(R), in place over the uploaded x */
    CHECK_OK(dt_cuda_rope_bwd(s, dx, dr, dinv, dp, pos_mode == 1, Bc, B, H, T, half, 1));
    const float *xv = dt_graph_value(g, x)->data, *gv = dt_graph_grad(g, x)->data;
    for (int64_t i = 0; i < n; i++) want[i] = xv[i] + gv[i];
    cuda_test_download(d, s, h, dx, nb);
    dt_check_close("rope backward accumulate", h, want, n, 2 * TOL, TOL);
    /* the same rotation in place (y over x) */
    CHECK_OK(dt_cuda_rope_fwd(s, dy, dy, dinv, dp, pos_mode == 1, Bc, B, H, T, half));
    CHECK_OK(dt_cuda_rope_bwd(s, dy, dy, dinv, dp, pos_mode == 1, Bc, B, H, T, half, 0));
    cuda_test_download(d, s, h, dy, nb);
    dt_check_close("rope forward then inverse in place", h, dt_graph_value(g, y)->data, n, 3 * TOL,
                   TOL);
    free(h);
    free(want);
    free(inv);
    void *bufs[] = {dx, dr, dinv, dp, dy, dgx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_rope", &s);
    test_rope(d, s, 2, 3, 17, 64, 0, 0);
    test_rope(d, s, 2, 4, 9, 128, 1, 1);
    test_rope(d, s, 3, 2, 33, 6, 2, 0);
    /* bad shapes: one line, no launch */
    CHECK(dt_cuda_rope_fwd(s, NULL, NULL, NULL, (void *)1, 0, 2, 3, 1, 4, 2) == DT_ERR_SHAPE,
          "positions rows 2 for B = 3 accepted");
    dt_stream_destroy(s);
    return dt_test_finish("cuda_rope");
}
