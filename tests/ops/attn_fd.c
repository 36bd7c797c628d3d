/* Finite-difference checks for the attention family, and the memory bound of the tiled
 * attention.
 *
 * Gradchecks: loss = sum(out * R) with R ~ N(0, 1); central differences with eps 1e-2 in f32,
 * tolerance |analytic - numeric| <= 1e-2 + 5e-2 |numeric| (the f32 loss sums a few hundred
 * terms of size ~1, so its rounding noise divided by 2 eps is ~1e-3). Sizes are small and T is
 * never a multiple of the 64-row tile; T = 70 spans two tiles (one ragged).
 *
 * Memory: the planned arena of forward + backward at T = 1024 must be about twice that at
 * T = 512 (a stored T x T score matrix would make it ~4x), and smaller than one head's T x T
 * f32 score matrix. */
#include <stdio.h>
#include <string.h>
#include "harness.h"

static const dt_gradcheck_opts FD = {.eps = 1e-2, .atol = 1e-2, .rtol = 5e-2, .max_per_tensor = 24};

/* need: bit i set when input i (q, k, v) requires a gradient (the others get gin NULL). */
static void fd_attention_need(int B, int Hq, int Hkv, int T, int D, int causal, float scale,
                              int need) {
    dt_graph *g = dt_graph_init();
    int64_t qs[4] = {B, Hq, T, D}, ks[4] = {B, Hkv, T, D};
    int q = dt_graph_input(g, "q", DT_F32, 4, qs, need & 1);
    int k = dt_graph_input(g, "k", DT_F32, 4, ks, (need >> 1) & 1);
    int v = dt_graph_input(g, "v", DT_F32, 4, ks, (need >> 2) & 1);
    int o = dt_attention(g, q, k, v, causal, scale);
    int r = -1, loss = dt_test_dotloss(g, o, &r);
    if (!CHECK(loss >= 0, "attention build: %s", dt_last_error())) {
        dt_graph_free(g);
        return;
    }
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, q, 11, 1.0f);
    dt_test_randn(g, k, 12, 1.0f);
    dt_test_randn(g, v, 13, 1.0f);
    dt_test_randn(g, r, 14, 1.0f);
    int bad = dt_gradcheck(g, loss, &FD);
    CHECK(bad == 0,
          "attention B=%d Hq=%d Hkv=%d T=%d D=%d causal=%d scale=%g need=%d: %d tensors off", B, Hq,
          Hkv, T, D, causal, (double)scale, need, bad);
    dt_graph_free(g);
}

static void fd_attention(int B, int Hq, int Hkv, int T, int D, int causal, float scale) {
    fd_attention_need(B, Hq, Hkv, T, D, causal, scale, 7);
}

/* pos_kind: 0 none, 1 [T] i32, 2 [B, T] i64. table: NULL for theta's defaults. */
static void fd_rope(int B, int H, int T, int D, int pos_kind, float theta, const float *table) {
    dt_graph *g = dt_graph_init();
    int64_t xs[4] = {B, H, T, D};
    int x = dt_graph_input(g, "x", DT_F32, 4, xs, 1), p = -1;
    if (pos_kind == 1) p = dt_graph_input(g, "pos", DT_I32, 1, (int64_t[]){T}, 0);
    if (pos_kind == 2) p = dt_graph_input(g, "pos", DT_I64, 2, (int64_t[]){B, T}, 0);
    int y = dt_rope(g, x, p, theta, table);
    int r = -1, loss = dt_test_dotloss(g, y, &r);
    if (!CHECK(loss >= 0, "rope build: %s", dt_last_error())) {
        dt_graph_free(g);
        return;
    }
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, x, 21, 1.0f);
    dt_test_randn(g, r, 22, 1.0f);
    if (p >= 0) {
        const dt_tensor *pv = dt_graph_value(g, p);
        for (int64_t i = 0; i < dt_tensor_numel(pv); i++)
            dt_tensor_set((dt_tensor *)pv, i, (double)((i * 37 + 5) % 1000)); /* scrambled */
    }
    int bad = dt_gradcheck(g, loss, &FD);
    CHECK(bad == 0, "rope B=%d H=%d T=%d D=%d pos=%d: %d tensors off", B, H, T, D, pos_kind, bad);
    dt_graph_free(g);
}

/* Arena bytes of forward + backward attention (q, k, v with gradients) at sequence length T. */
static size_t attention_arena(int T) {
    dt_graph *g = dt_graph_init();
    int64_t s[4] = {1, 2, T, 16};
    int q = dt_graph_input(g, "q", DT_F32, 4, s, 1);
    int k = dt_graph_input(g, "k", DT_F32, 4, s, 1);
    int v = dt_graph_input(g, "v", DT_F32, 4, s, 1);
    int r = -1, loss = dt_test_dotloss(g, dt_attention(g, q, k, v, 1, 0.0f), &r);
    dt_graph_mem m = {0};
    if (CHECK(loss >= 0, "build: %s", dt_last_error())) {
        CHECK_OK(dt_graph_compile(g, loss, NULL));
        dt_graph_memory(g, &m);
        /* and it runs at that length */
        dt_test_randn(g, q, 1, 1.0f), dt_test_randn(g, k, 2, 1.0f);
        dt_test_randn(g, v, 3, 1.0f), dt_test_randn(g, r, 4, 1.0f);
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
    }
    dt_graph_free(g);
    return m.arena_bytes;
}

int main(void) {
    /* attention: MHA and GQA, causal and not, default and explicit scale */
    fd_attention(1, 2, 2, 5, 8, 1, 0.0f);
    fd_attention(1, 4, 2, 13, 8, 1, 0.0f);
    fd_attention(2, 4, 2, 7, 16, 0, 0.0f);
    fd_attention(1, 3, 1, 19, 12, 0, 0.4f);
    fd_attention(1, 2, 1, 70, 8, 1, 0.0f); /* two query and key tiles, ragged */
    fd_attention(1, 2, 2, 70, 8, 0, 0.0f);
    /* only some inputs need a gradient (frozen keys/values, or only v) */
    fd_attention_need(1, 4, 2, 70, 8, 1, 0.0f, 1);
    fd_attention_need(2, 2, 1, 9, 8, 1, 0.0f, 4);
    fd_attention_need(1, 2, 1, 70, 8, 0, 0.0f, 6);
    /* rope: default frequencies, positions [T] i32 and [B, T] i64, a llama3 table */
    fd_rope(2, 2, 9, 8, 0, 10000.0f, NULL);
    fd_rope(1, 3, 11, 16, 1, 10000.0f, NULL);
    float tab[8];
    CHECK_OK(dt_rope_llama3_inv_freq(tab, 16, 500000.0f, 8.0f, 1.0f, 4.0f, 8192));
    fd_rope(2, 2, 6, 16, 2, 500000.0f, tab);

    size_t a512 = attention_arena(512), a1024 = attention_arena(1024);
    double ratio = a512 ? (double)a1024 / (double)a512 : 0;
    printf("attention arena: T=512 %zu bytes, T=1024 %zu bytes (x%.2f)\n", a512, a1024, ratio);
    CHECK(ratio > 1.0 && ratio < 2.5, "arena grows x%.2f from T=512 to T=1024 (want ~2)", ratio);
    CHECK(a1024 < (size_t)1024 * 1024 * sizeof(float),
          "arena %zu bytes at T=1024 is not below one T x T score matrix", a1024);
    return dt_test_finish("attn_fd");
}
