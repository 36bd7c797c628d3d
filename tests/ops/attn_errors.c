/* Bad calls to the attention family return -1 (never crash) with a message that names the op
 * and the shapes involved; bad frequency parameters return an error status. */
#include <string.h>
#include "harness.h"

/* The builder result must be negative and the message must contain every string in `want`. */
static int in(dt_graph *g, const char *name, dt_dtype dt, int ndim, const int64_t *shape) {
    return dt_graph_input(g, name, dt, ndim, shape, 0);
}

static void attention_errors(void) {
    dt_graph *g = dt_graph_init();
    int q = in(g, "q", DT_F32, 4, (int64_t[]){2, 6, 8, 16});
    int k4 = in(g, "k4", DT_F32, 4, (int64_t[]){2, 4, 8, 16});  /* 6 % 4 != 0 */
    int k3 = in(g, "k3", DT_F32, 4, (int64_t[]){2, 3, 8, 16});  /* valid: 6 = 2 * 3 */
    int kb = in(g, "kb", DT_F32, 4, (int64_t[]){1, 3, 8, 16});  /* batch */
    int kt = in(g, "kt", DT_F32, 4, (int64_t[]){2, 3, 9, 16});  /* sequence */
    int kd = in(g, "kd", DT_F32, 4, (int64_t[]){2, 3, 8, 32});  /* head dim */
    int k3d = in(g, "k3d", DT_F32, 3, (int64_t[]){6, 8, 16});   /* rank */
    int kh = in(g, "kh", DT_BF16, 4, (int64_t[]){2, 3, 8, 16}); /* dtype */
    int ki = in(g, "ki", DT_I32, 4, (int64_t[]){2, 3, 8, 16});
    EXPECT_FAIL(dt_attention(g, q, k4, k4, 1, 0), "attention", "multiple", "[2, 6, 8, 16]",
                "[2, 4, 8, 16]");
    EXPECT_FAIL(dt_attention(g, q, kb, kb, 1, 0), "attention", "[2, 6, 8, 16]", "[1, 3, 8, 16]");
    EXPECT_FAIL(dt_attention(g, q, kt, kt, 0, 0), "attention", "[2, 6, 8, 16]", "[2, 3, 9, 16]");
    EXPECT_FAIL(dt_attention(g, q, kd, kd, 0, 0), "attention", "[2, 6, 8, 16]", "[2, 3, 8, 32]");
    EXPECT_FAIL(dt_attention(g, q, k3, kt, 0, 0), "attention", "[2, 3, 8, 16]", "[2, 3, 9, 16]");
    EXPECT_FAIL(dt_attention(g, q, k3d, k3d, 0, 0), "attention", "[6, 8, 16]");
    EXPECT_FAIL(dt_attention(g, q, kh, k3, 0, 0), "attention", "bf16", "[2, 3, 8, 16]");
    EXPECT_FAIL(dt_attention(g, q, k3, ki, 0, 0), "attention", "i32", "[2, 3, 8, 16]");
    EXPECT_FAIL(dt_attention(g, q, k3, 999, 0, 0), "attention");
    CHECK(dt_attention(g, -1, k3, k3, 0, 0) < 0, "attention accepted id -1");
    CHECK(dt_attention(g, q, k3, k3, 1, 0) >= 0, "valid GQA attention rejected: %s",
          dt_last_error());
    CHECK(dt_attention(g, q, q, q, 0, 0.5f) >= 0, "valid self-attention rejected: %s",
          dt_last_error());
    dt_graph_free(g);
}

static void rope_errors(void) {
    dt_graph *g = dt_graph_init();
    int x = in(g, "x", DT_F32, 4, (int64_t[]){2, 3, 5, 8});
    int xodd = in(g, "xodd", DT_F32, 4, (int64_t[]){2, 3, 5, 7});
    int x3 = in(g, "x3", DT_F32, 3, (int64_t[]){3, 5, 8});
    int xh = in(g, "xh", DT_BF16, 4, (int64_t[]){2, 3, 5, 8});
    int p5 = in(g, "p5", DT_I64, 1, (int64_t[]){5});
    int p6 = in(g, "p6", DT_I64, 1, (int64_t[]){6});
    int p35 = in(g, "p35", DT_I32, 2, (int64_t[]){3, 5});
    int p25 = in(g, "p25", DT_I32, 2, (int64_t[]){2, 5});
    int pf = in(g, "pf", DT_F32, 1, (int64_t[]){5});
    EXPECT_FAIL(dt_rope(g, xodd, -1, 10000.0f, NULL), "rope", "[2, 3, 5, 7]");
    EXPECT_FAIL(dt_rope(g, x3, -1, 10000.0f, NULL), "rope", "[3, 5, 8]");
    EXPECT_FAIL(dt_rope(g, xh, -1, 10000.0f, NULL), "rope", "bf16", "[2, 3, 5, 8]");
    EXPECT_FAIL(dt_rope(g, x, p6, 10000.0f, NULL), "rope", "positions", "[2, 3, 5, 8]", "[6]");
    EXPECT_FAIL(dt_rope(g, x, p35, 10000.0f, NULL), "rope", "[2, 3, 5, 8]", "[3, 5]");
    EXPECT_FAIL(dt_rope(g, x, pf, 10000.0f, NULL), "rope", "positions", "f32", "[5]");
    EXPECT_FAIL(dt_rope(g, x, -1, 0.0f, NULL), "rope", "theta");
    EXPECT_FAIL(dt_rope(g, x, 999, 10000.0f, NULL), "rope");
    CHECK(dt_rope(g, -1, -1, 10000.0f, NULL) < 0, "rope accepted id -1");
    CHECK(dt_rope(g, x, p5, 10000.0f, NULL) >= 0, "rope [T] rejected: %s", dt_last_error());
    CHECK(dt_rope(g, x, p25, 10000.0f, NULL) >= 0, "rope [B, T] rejected: %s", dt_last_error());
    /* a table makes theta irrelevant */
    float tab[4] = {1.0f, 0.1f, 0.01f, 0.001f};
    CHECK(dt_rope(g, x, -1, 0.0f, tab) >= 0, "rope with a table rejected: %s", dt_last_error());
    dt_graph_free(g);

    float f[64];
    CHECK(dt_rope_llama3_inv_freq(f, 64, 500000.0f, 8.0f, 4.0f, 1.0f, 8192) == DT_ERR_INVALID,
          "llama3 accepted high_freq_factor < low_freq_factor");
    CHECK(strstr(dt_last_error(), "rope") != NULL, "message lacks the op: %s", dt_last_error());
    CHECK(dt_rope_llama3_inv_freq(f, 63, 500000.0f, 8.0f, 1.0f, 4.0f, 8192) == DT_ERR_INVALID,
          "llama3 accepted an odd head_dim");
    CHECK(dt_rope_llama3_inv_freq(f, 64, 500000.0f, 0.0f, 1.0f, 4.0f, 8192) == DT_ERR_INVALID,
          "llama3 accepted factor 0");
    CHECK(dt_rope_llama3_inv_freq(f, 64, 500000.0f, 8.0f, 1.0f, 4.0f, 0) == DT_ERR_INVALID,
          "llama3 accepted original_max_position_embeddings 0");
    CHECK(dt_rope_default_inv_freq(f, 64, -1.0f) == DT_ERR_INVALID, "default accepted theta -1");
}

int main(void) {
    attention_errors();
    rope_errors();
    return dt_test_finish("attn_errors");
}
