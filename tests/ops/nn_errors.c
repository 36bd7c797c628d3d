/* Bad calls to the nn family return an error (never crash) whose message names the op and the
 * shapes or values involved: shape and dtype mismatches at build time, an out-of-range
 * cross-entropy target at forward time. */
#include <string.h>
#include "harness.h"

/* Checks that `id` is negative and the last error contains every string in `want` (NULL-ended). */
static void expect_error(int id, const char *what, const char *const *want) {
    const char *msg = dt_last_error();
    if (!CHECK(id < 0, "%s: expected an error, got node %d", what, id)) return;
    for (int i = 0; want[i]; i++)
        CHECK(strstr(msg, want[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, want[i]);
}
#define EXPECT(call, ...) expect_error((call), #call, (const char *const[]){__VA_ARGS__, NULL})

static void build_errors(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 8}, 1);
    int x3 = dt_graph_input(g, "x3", DT_F32, 3, (int64_t[]){2, 3, 5}, 1);
    int w7 = dt_graph_param(g, "w7", DT_F32, 1, (int64_t[]){7}, 0);
    int w8 = dt_graph_param(g, "w8", DT_F32, 1, (int64_t[]){8}, 0);
    int wm = dt_graph_param(g, "wm", DT_F32, 2, (int64_t[]){1, 8}, 0);
    int wbf = dt_graph_param(g, "wbf", DT_BF16, 1, (int64_t[]){8}, DT_PARAM_FROZEN);
    int xi = dt_graph_input(g, "xi", DT_I32, 2, (int64_t[]){4, 8}, 0);
    int s = dt_graph_input(g, "s", DT_F32, 0, (int64_t[]){1}, 0);
    int t4 = dt_graph_input(g, "t4", DT_I64, 1, (int64_t[]){4}, 0);
    int t5 = dt_graph_input(g, "t5", DT_I64, 1, (int64_t[]){5}, 0);
    int tf = dt_graph_input(g, "tf", DT_F32, 1, (int64_t[]){4}, 0);
    int t23 = dt_graph_input(g, "t23", DT_I32, 2, (int64_t[]){3, 2}, 0);

    /* norms: weight/bias shape and dtype */
    EXPECT(dt_layernorm(g, x, w7, -1, 1e-5f), "layernorm", "[4, 8]", "[7]");
    EXPECT(dt_layernorm(g, x, w8, w7, 1e-5f), "layernorm", "bias", "[7]");
    EXPECT(dt_layernorm(g, x, wm, -1, 1e-5f), "layernorm", "[1, 8]");
    EXPECT(dt_layernorm(g, x, wbf, -1, 1e-5f), "layernorm", "bf16", "[4, 8]", "[8]");
    EXPECT(dt_layernorm(g, xi, -1, -1, 1e-5f), "layernorm", "i32", "[4, 8]");
    EXPECT(dt_layernorm(g, x, w8, -1, -1.0f), "layernorm", "eps");
    EXPECT(dt_rmsnorm(g, x, w7, 1e-6f), "rmsnorm", "[4, 8]", "[7]");
    EXPECT(dt_rmsnorm(g, s, -1, 1e-6f), "rmsnorm", "[]");
    /* activations / softmax: dtype and rank */
    EXPECT(dt_relu(g, xi), "relu", "i32", "[4, 8]");
    EXPECT(dt_gelu(g, xi, 1), "gelu", "i32", "[4, 8]");
    EXPECT(dt_silu(g, xi), "silu", "i32", "[4, 8]");
    EXPECT(dt_softmax(g, s), "softmax", "[]");
    EXPECT(dt_softmax(g, xi), "softmax", "i32", "[4, 8]");
    /* cross-entropy: target count, target dtype, logits dtype, label smoothing */
    EXPECT(dt_cross_entropy(g, x, t5, 0.0f, -100), "cross_entropy", "[4, 8]", "[5]");
    EXPECT(dt_cross_entropy(g, x3, t23, 0.0f, -100), "cross_entropy", "[2, 3, 5]", "[3, 2]");
    EXPECT(dt_cross_entropy(g, x, tf, 0.0f, -100), "cross_entropy", "f32", "[4, 8]", "[4]");
    EXPECT(dt_cross_entropy(g, xi, t4, 0.0f, -100), "cross_entropy", "i32", "[4, 8]", "[4]");
    EXPECT(dt_cross_entropy(g, x, t4, 1.5f, -100), "cross_entropy", "label_smoothing");
    /* dropout */
    EXPECT(dt_dropout(g, x, 1.5f), "dropout", "1.5");
    EXPECT(dt_dropout(g, xi, 0.1f), "dropout", "i32", "[4, 8]");
    /* shape ops */
    EXPECT(dt_transpose(g, x, 0, 2), "transpose", "dim 2", "[4, 8]");
    EXPECT(dt_permute(g, x3, (const int[]){0, 0, 1}), "permute", "(0, 0, 1)", "[2, 3, 5]");
    EXPECT(dt_permute(g, x3, (const int[]){0, 3, 1}), "permute", "[2, 3, 5]");
    EXPECT(dt_concat(g, 2, (const int[]){x, x3}, 0), "concat", "[4, 8]", "[2, 3, 5]");
    EXPECT(dt_concat(g, 2, (const int[]){x, w8}, 0), "concat", "[4, 8]", "[8]");
    EXPECT(dt_concat(g, 0, (const int[]){x}, 0), "concat");
    EXPECT(dt_narrow(g, x, 1, 6, 3), "narrow", "[6, 9)", "[4, 8]");
    EXPECT(dt_narrow(g, x, -3, 0, 1), "narrow", "dim -3");
    int ids[3];
    EXPECT(dt_split(g, x, 1, 2, (const int64_t[]){3, 4}, ids), "split", "sum 7", "[4, 8]");
    EXPECT(dt_split(g, x, 1, 2, (const int64_t[]){9, -1}, ids), "split", "[4, 8]");
    /* a failed input propagates: -1 in, -1 out */
    CHECK(dt_softmax(g, -5) < 0, "softmax of a bad id must fail");
    CHECK(dt_relu(g, 1000) < 0 && strstr(dt_last_error(), "relu"), "relu of an unknown id: %s",
          dt_last_error());
    dt_graph_free(g);
}

/* A target outside [0, C) that is not ignore_index fails forward with DT_ERR_RANGE naming the
 * op, the value, its position and C; the ignore_index itself is fine. */
static void range_error(dt_dtype tdt, int64_t bad, int64_t ignore) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 10}, 1);
    int t = dt_graph_input(g, "t", tdt, 1, (int64_t[]){4}, 0);
    int loss = dt_cross_entropy(g, x, t, 0.1f, ignore);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, x, 1, 1.0f);
    dt_tensor tv = *dt_graph_value(g, t);
    const double vals[4] = {1, (double)ignore, (double)bad, 3};
    for (int i = 0; i < 4; i++) dt_tensor_set(&tv, i, vals[i]);
    dt_status s = dt_graph_forward(g, 1);
    char want[64];
    snprintf(want, sizeof want, "target %lld at position 2", (long long)bad);
    const char *msg = dt_last_error();
    CHECK(s == DT_ERR_RANGE, "target %lld (%s): status %d", (long long)bad, dt_dtype_name(tdt), s);
    CHECK(strstr(msg, "cross_entropy") && strstr(msg, want) && strstr(msg, "[0, 10)"),
          "range message: %s", msg);
    /* fixed target: runs */
    dt_tensor_set(&tv, 2, 9);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    dt_graph_free(g);
}

int main(void) {
    build_errors();
    range_error(DT_I64, 10, -100);
    range_error(DT_I64, -5, -100);
    range_error(DT_I32, 12, 3);
    range_error(DT_I32, -100, -1); /* -100 is not ignored when ignore_index is -1 */
    return dt_test_finish("nn_errors");
}
