/* Dropout on CUDA against the CPU graph op dt_dropout: the same (key, step, node id) must give
 * the same mask bit for bit, so forward values and gradients are compared with memcmp (both
 * sides compute one rounded product x * (1 / (1 - p)) or x * 0). n = 64001 (not a multiple of
 * 4: the CPU's tail block), a 64-bit key and a step above 2^32 (both counter words), p = 0.3,
 * 1 (all dropped) and 0 (identity); the accumulating form against the host sum x + dx_cpu,
 * exact too (the GPU adds the rounded product); the step read from device memory instead of
 * the argument gives the same values. Exit 77 without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { ROWS = 7, COLS = 9143, N = ROWS * COLS };
static const uint64_t SEED = 0x0123456789abcdefull, STEP = (1ull << 32) + 5;

static void test_dropout(dt_device d, dt_stream *s, float p) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){ROWS, COLS}, 1);
    int y = dt_dropout(g, x, p), r;
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0, "dropout cpu: %s", dt_last_error()))
        return;
    dt_graph_set_rng(g, SEED, STEP, 0); /* rank 0: the run key is the seed */
    if (!CHECK(cuda_test_cpu_step(g) == 0, "dropout cpu: %s", dt_last_error())) return;
    const size_t nb = N * sizeof(float);
    float *dx = cuda_test_upload_value(d, g, x), *dr = cuda_test_upload_value(d, g, r);
    float *dy = cuda_test_alloc(d, nb), *dgx = cuda_test_alloc(d, nb);
    CHECK_OK(dt_cuda_dropout(s, dy, dx, N, p, SEED, STEP, NULL, (uint32_t)y, 0));
    CHECK_OK(dt_cuda_dropout(s, dgx, dr, N, p, SEED, STEP, NULL, (uint32_t)y, 0));
    float *h = malloc(nb), *want = malloc(nb);
    const float *cy = dt_graph_value(g, y)->data, *cgx = dt_graph_grad(g, x)->data;
    cuda_test_download(d, s, h, dy, nb);
    int64_t diff = 0, dropped = 0;
    for (int64_t i = 0; i < N; i++) {
        diff += memcmp(&h[i], &cy[i], sizeof(float)) != 0;
        dropped += cy[i] == 0.0f;
    }
    CHECK(diff == 0, "dropout p=%g: %lld of %d values differ from the CPU's", p, (long long)diff,
          N);
    if (p > 0.0f && p < 1.0f) /* the mask is not trivial: about p N dropped (sd 0.0018 N) */
        CHECK(dropped > (p - 0.02) * N && dropped < (p + 0.02) * N, "dropped %lld of %d",
              (long long)dropped, N);
    cuda_test_download(d, s, h, dgx, nb);
    CHECK(memcmp(h, cgx, nb) == 0, "dropout p=%g: the gradient differs from the CPU's", p);
    /* the step read from device memory (dt_graph_rng_on_device) gives the same mask as the
     * argument, whatever the argument says */
    uint64_t *dstep = cuda_test_alloc(d, sizeof(uint64_t));
    CHECK_OK(dt_device_copy(d, dstep, &STEP, sizeof STEP, DT_COPY_H2D));
    CHECK_OK(dt_cuda_dropout(s, dy, dx, N, p, SEED, 7, dstep, (uint32_t)y, 0));
    cuda_test_download(d, s, h, dy, nb);
    CHECK(memcmp(h, cy, nb) == 0, "dropout p=%g, step from device memory: differs from the CPU's",
          p);
    dt_device_free(d, dstep);
    /* accumulate: dx = x + dropout(R) */
    const float *xv = dt_graph_value(g, x)->data;
    for (int64_t i = 0; i < N; i++) want[i] = xv[i] + cgx[i];
    CHECK_OK(dt_cuda_dropout(s, dx, dr, N, p, SEED, STEP, NULL, (uint32_t)y, 1));
    cuda_test_download(d, s, h, dx, nb);
    CHECK(memcmp(h, want, nb) == 0, "dropout p=%g accumulate differs from x + dx_cpu", p);
    /* another step or node: another mask */
    if (p > 0.0f && p < 1.0f) {
        CHECK_OK(dt_cuda_dropout(s, dy, dr, N, p, SEED, STEP + 1, NULL, (uint32_t)y, 0));
        cuda_test_download(d, s, h, dy, nb);
        int64_t same = 0;
        for (int64_t i = 0; i < N; i++) same += (h[i] == 0.0f) == (cgx[i] == 0.0f);
        /* independent masks agree on a fraction 1 - 2 p (1 - p); allowed up to 1 - p (1 - p) */
        CHECK(same < (1.0 - p * (1.0 - p)) * N,
              "step + 1 gave nearly the same mask (%lld of %d agree)", (long long)same, N);
    }
    free(h);
    free(want);
    void *bufs[] = {dx, dr, dy, dgx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_dropout", &s);
    test_dropout(d, s, 0.3f);
    test_dropout(d, s, 0.9f);
    test_dropout(d, s, 1.0f);
    test_dropout(d, s, 0.0f);
    CHECK(dt_cuda_dropout(s, NULL, NULL, 4, 1.5f, 0, 0, NULL, 0, 0) == DT_ERR_INVALID,
          "p 1.5 accepted");
    dt_stream_destroy(s);
    return dt_test_finish("cuda_dropout");
}
