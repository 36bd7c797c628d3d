/* Flash-style attention on CUDA against the CPU graph op dt_attention on the same random
 * inputs, forward and backward (dq, dk, dv): causal and full, grouped-query heads (Hkv < Hq,
 * down to one kv head), T not a multiple of any tile (1, 33, 45, 70), head dims 16, 40, 64 and
 * 128, f32 and bf16 inputs. Tolerances (f32; the two sides sum in other orders and use
 * different exp approximations, each within 2 ulp): out |gpu - cpu| <= 1e-5 + 1e-4 |cpu|;
 * gradients 1e-4 + 1e-3 |cpu|. Also: the backward accumulating into dq and dv but not dk, two
 * runs give the same bits, and shape refusals. Exit 77 without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "cuda_testutil.h"
#include "harness.h"

#define ATOL_Y 1e-5
#define RTOL_Y 1e-4
#define ATOL_G 1e-4
#define RTOL_G 1e-3

/* A device copy of node id's values: f32, or their bf16 bits (values already bf16-exact). */
static void *upload_in(dt_device d, dt_graph *g, int id, int bf16) {
    if (!bf16) return cuda_test_upload_value(d, g, id);
    const dt_tensor *t = dt_graph_value(g, id);
    const int64_t n = dt_tensor_numel(t);
    uint16_t *b = malloc((size_t)n * sizeof(uint16_t));
    dt_bf16_from_f32_n(b, t->data, (size_t)n);
    void *p = cuda_test_upload(d, b, (size_t)n * sizeof(uint16_t));
    free(b);
    return p;
}

/* bf16: q, k, v are rounded to bf16 before the CPU runs, so both sides see the same values
 * (the GPU reads the bf16 bits) and the f32 tolerances apply. */
static void test_attn(dt_device d, dt_stream *s, int64_t B, int64_t Hq, int64_t Hkv, int64_t T,
                      int D, int causal, int bf16) {
    dt_graph *g = dt_graph_init();
    int q = dt_graph_input(g, "q", DT_F32, 4, (int64_t[]){B, Hq, T, D}, 1);
    int k = dt_graph_input(g, "k", DT_F32, 4, (int64_t[]){B, Hkv, T, D}, 1);
    int v = dt_graph_input(g, "v", DT_F32, 4, (int64_t[]){B, Hkv, T, D}, 1);
    int y = dt_attention(g, q, k, v, causal, 0.0f), r;
    if (!CHECK(y >= 0 && cuda_test_cpu_compile(g, y, &r) == 0, "attention cpu: %s",
               dt_last_error()))
        return;
    const int ids[3] = {q, k, v};
    for (int i = 0; bf16 && i < 3; i++) {
        const dt_tensor *t = dt_graph_value(g, ids[i]);
        float *x = t->data;
        for (int64_t e = 0; e < dt_tensor_numel(t); e++)
            x[e] = dt_bf16_to_f32(dt_bf16_from_f32(x[e]));
    }
    if (!CHECK(cuda_test_cpu_step(g) == 0, "attention cpu: %s", dt_last_error())) return;
    const int64_t nq = B * Hq * T * D, nk = B * Hkv * T * D;
    const size_t qb = (size_t)nq * sizeof(float), kb = (size_t)nk * sizeof(float);
    void *dq = upload_in(d, g, q, bf16), *dk = upload_in(d, g, k, bf16);
    void *dv = upload_in(d, g, v, bf16);
    float *dr = cuda_test_upload_value(d, g, r);
    float *dy = cuda_test_alloc(d, qb), *dlse = cuda_test_alloc(d, (size_t)(B * Hq * T) * 4);
    float *gq = cuda_test_alloc(d, qb), *gk = cuda_test_alloc(d, kb), *gv = cuda_test_alloc(d, kb);
    void *work = cuda_test_alloc(d, dt_cuda_attention_bwd_work(B, Hq, T));
    CHECK_OK(dt_cuda_attention_fwd(s, dy, dlse, dq, dk, dv, bf16, B, Hq, Hkv, T, D, causal, 0.0f));
    CHECK_OK(dt_cuda_attention_bwd(s, gq, gk, gv, dr, dq, dk, dv, bf16, dy, dlse, B, Hq, Hkv, T, D,
                                   causal, 0.0f, 0, work));
    float *h = malloc(qb), *h2 = malloc(qb), *want = malloc(qb);
    char what[96];
    float *grads[3] = {gq, gk, gv};
    const int64_t ns[3] = {nq, nk, nk};
    snprintf(what, sizeof what, "attention out B%lld Hq%lld Hkv%lld T%lld D%d causal %d bf16 %d",
             (long long)B, (long long)Hq, (long long)Hkv, (long long)T, D, causal, bf16);
    cuda_test_download(d, s, h, dy, qb);
    dt_check_close(what, h, dt_graph_value(g, y)->data, nq, ATOL_Y, RTOL_Y);
    for (int i = 0; i < 3; i++) {
        char gw[112];
        snprintf(gw, sizeof gw, "d%c of %s", "qkv"[i], what);
        cuda_test_download(d, s, h, grads[i], (size_t)ns[i] * sizeof(float));
        dt_check_close(gw, h, dt_graph_grad(g, ids[i])->data, ns[i], ATOL_G, RTOL_G);
    }
    /* a second run: the same bits (no atomics) */
    cuda_test_download(d, s, h, gk, kb);
    CHECK_OK(dt_cuda_attention_bwd(s, gq, gk, gv, dr, dq, dk, dv, bf16, dy, dlse, B, Hq, Hkv, T, D,
                                   causal, 0.0f, 0, work));
    cuda_test_download(d, s, h2, gk, kb);
    CHECK(memcmp(h, h2, kb) == 0, "attention dk: two runs differ");
    /* accumulate dq and dv, overwrite dk: the buffers holding q, k, v get q + dq, dk, v + dv */
    for (int i = 0; i < 3; i++)
        CHECK_OK(dt_device_copy(d, grads[i], dt_graph_value(g, ids[i])->data,
                                (size_t)ns[i] * sizeof(float), DT_COPY_H2D));
    CHECK_OK(dt_cuda_attention_bwd(s, gq, gk, gv, dr, dq, dk, dv, bf16, dy, dlse, B, Hq, Hkv, T, D,
                                   causal, 0.0f, DT_CUDA_ACC_DQ | DT_CUDA_ACC_DV, work));
    for (int i = 0; i < 3; i++) {
        const float *xv = dt_graph_value(g, ids[i])->data, *gc = dt_graph_grad(g, ids[i])->data;
        for (int64_t e = 0; e < ns[i]; e++) want[e] = (i == 1 ? 0.0f : xv[e]) + gc[e];
        cuda_test_download(d, s, h, grads[i], (size_t)ns[i] * sizeof(float));
        snprintf(what, sizeof what, "attention d%c %s", "qkv"[i],
                 i == 1 ? "overwritten" : "accumulated");
        dt_check_close(what, h, want, ns[i], 2 * ATOL_G, RTOL_G);
    }
    free(h);
    free(h2);
    free(want);
    void *bufs[] = {dq, dk, dv, dr, dy, dlse, gq, gk, gv, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_device_free(d, bufs[i]);
    dt_graph_free(g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_attention", &s);
    test_attn(d, s, 2, 4, 2, 45, 64, 1, 0);
    test_attn(d, s, 1, 3, 1, 70, 128, 1, 0);
    test_attn(d, s, 2, 2, 2, 33, 40, 0, 0);
    test_attn(d, s, 1, 2, 1, 1, 16, 1, 0);
    test_attn(d, s, 2, 4, 2, 45, 64, 1, 1);
    test_attn(d, s, 1, 2, 2, 37, 128, 0, 1);
    float *p = (float *)16; /* never dereferenced: the shapes are refused first */
    CHECK(dt_cuda_attention_fwd(s, p, p, p, p, p, 0, 1, 3, 2, 8, 64, 1, 0.0f) == DT_ERR_SHAPE,
          "Hq 3 with Hkv 2 accepted");
    CHECK(dt_cuda_attention_fwd(s, p, p, p, p, p, 0, 1, 2, 1, 8, 129, 1, 0.0f) == DT_ERR_SHAPE,
          "head dim 129 accepted");
    dt_stream_destroy(s);
    return dt_test_finish("cuda_attention");
}
