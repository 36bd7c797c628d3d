/* Bad calls to the linear family return an error (never crash) whose message names the op and
 * the shapes; out-of-range embedding ids make forward fail with DT_ERR_RANGE naming the op, the
 * id, its position and V. */
#include <string.h>
#include "harness.h"

/* The builder result must be -1 and the message must contain every string in `want`. */
static int in(dt_graph *g, const char *name, dt_dtype dt, int ndim, const int64_t *shape) {
    return dt_graph_input(g, name, dt, ndim, shape, 0);
}

static void matmul_errors(void) {
    dt_graph *g = dt_graph_init();
    int a23 = in(g, "a23", DT_F32, 2, (int64_t[]){2, 3});
    int b45 = in(g, "b45", DT_F32, 2, (int64_t[]){4, 5});
    int a234 = in(g, "a234", DT_F32, 3, (int64_t[]){2, 3, 4});
    int b345 = in(g, "b345", DT_F32, 3, (int64_t[]){3, 4, 5});
    int v3 = in(g, "v3", DT_F32, 1, (int64_t[]){3});
    int i34 = in(g, "i34", DT_I32, 2, (int64_t[]){3, 4});
    int h34 = in(g, "h34", DT_BF16, 2, (int64_t[]){3, 4});
    int b35 = in(g, "b35", DT_F32, 2, (int64_t[]){3, 5});
    EXPECT_FAIL(dt_matmul(g, a23, b45, 0, 0), "matmul", "[2, 3]", "[4, 5]");
    EXPECT_FAIL(dt_matmul(g, a234, b345, 0, 0), "matmul", "batch", "[2, 3, 4]", "[3, 4, 5]");
    EXPECT_FAIL(dt_matmul(g, v3, b35, 0, 0), "matmul", "[3]");
    EXPECT_FAIL(dt_matmul(g, b35, a234, 0, 0), "matmul", "[3, 5]", "[2, 3, 4]");
    EXPECT_FAIL(dt_matmul(g, a23, i34, 0, 0), "matmul", "f32", "i32", "[3, 4]");
    EXPECT_FAIL(dt_matmul(g, h34, b45, 0, 0), "matmul", "bf16", "[3, 4]");
    /* transposes change which dims must agree */
    EXPECT_FAIL(dt_matmul(g, a23, b35, 1, 0), "matmul", "[2, 3]", "[3, 5]");
    EXPECT_FAIL(dt_matmul(g, a23, b35, 0, 1), "matmul", "[2, 3]", "[3, 5]");
    CHECK(dt_matmul(g, a23, b35, 0, 0) >= 0, "valid matmul rejected: %s", dt_last_error());
    EXPECT_FAIL(dt_matmul(g, 999, b35, 0, 0), "matmul");
    /* a failed earlier builder (-1) propagates */
    CHECK(dt_matmul(g, -1, b35, 0, 0) < 0, "matmul accepted id -1");
    dt_graph_free(g);
}

static void linear_errors(void) {
    dt_graph *g = dt_graph_init();
    int x = in(g, "x", DT_F32, 3, (int64_t[]){2, 4, 8});
    int xi = in(g, "xi", DT_I64, 2, (int64_t[]){4, 8});
    int w57 = dt_graph_param(g, "w57", DT_F32, 2, (int64_t[]){5, 7}, 0);
    int w58 = dt_graph_param(g, "w58", DT_F32, 2, (int64_t[]){5, 8}, 0);
    int w3 = dt_graph_param(g, "w3", DT_F32, 3, (int64_t[]){1, 5, 8}, 0);
    int wi = in(g, "wi", DT_I32, 2, (int64_t[]){5, 8});
    int b6 = dt_graph_param(g, "b6", DT_F32, 1, (int64_t[]){6}, 0);
    int b5 = dt_graph_param(g, "b5", DT_F32, 1, (int64_t[]){5}, 0);
    int b5h = dt_graph_param(g, "b5h", DT_BF16, 1, (int64_t[]){5}, DT_PARAM_FROZEN);
    EXPECT_FAIL(dt_linear(g, x, w57, -1), "linear", "[2, 4, 8]", "[5, 7]");
    EXPECT_FAIL(dt_linear(g, x, w58, b6), "linear", "bias", "[5, 8]", "[6]");
    EXPECT_FAIL(dt_linear(g, xi, w58, b5), "linear", "i64", "[4, 8]");
    EXPECT_FAIL(dt_linear(g, x, w3, -1), "linear", "[1, 5, 8]");
    EXPECT_FAIL(dt_linear(g, x, wi, -1), "linear", "i32", "[5, 8]");
    EXPECT_FAIL(dt_linear(g, x, w58, b5h), "linear", "bf16", "[5]");
    CHECK(dt_linear(g, x, w58, b5) >= 0, "valid linear rejected: %s", dt_last_error());
    dt_graph_free(g);
}

static void embedding_errors(void) {
    dt_graph *g = dt_graph_init();
    int ids = in(g, "ids", DT_I64, 2, (int64_t[]){2, 3});
    int idf = in(g, "idf", DT_F32, 2, (int64_t[]){2, 3});
    int id5 = in(g, "id5", DT_I32, 5, (int64_t[]){1, 1, 1, 2, 3});
    int t1 = dt_graph_param(g, "t1", DT_F32, 1, (int64_t[]){10}, 0);
    int t = dt_graph_param(g, "t", DT_F32, 2, (int64_t[]){10, 4}, 0);
    int ti = in(g, "ti", DT_I32, 2, (int64_t[]){10, 4});
    EXPECT_FAIL(dt_embedding(g, ids, t1), "embedding", "[2, 3]", "[10]");
    EXPECT_FAIL(dt_embedding(g, idf, t), "embedding", "f32", "[2, 3]", "[10, 4]");
    EXPECT_FAIL(dt_embedding(g, ids, ti), "embedding", "i32", "[10, 4]");
    EXPECT_FAIL(dt_embedding(g, id5, t), "embedding", "[1, 1, 1, 2, 3]");
    dt_graph_free(g);
}

/* Out-of-range ids: forward fails with DT_ERR_RANGE; a good batch afterwards works again. */
static void embedding_range(dt_dtype idt) {
    dt_graph *g = dt_graph_init();
    int64_t ishape[2] = {2, 3};
    int ids = in(g, "ids", idt, 2, ishape);
    int t = dt_graph_param(g, "t", DT_F32, 2, (int64_t[]){10, 4}, 0);
    int y = dt_embedding(g, ids, t);
    CHECK_OK(dt_graph_compile(g, dt_sum(g, y), NULL));
    const int64_t cases[3][6] = {
        {1, 2, 3, 10, 0, 0}, /* id 10 at position 3 */
        {1, 2, 3, 4, -1, 0}, /* id -1 at position 4 */
        {9, 0, 0, 0, 0, 9},  /* fine */
    };
    const char *want[3][3] = {{"id 10", "position 3", "= [10, 4]"},
                              {"id -1", "position 4", "= [10, 4]"}};
    for (int c = 0; c < 3; c++) {
        dt_tensor src;
        dt_tensor_init(&src, (void *)cases[c], DT_I64, 2, ishape);
        dt_test_set(g, ids, &src);
        dt_status s = dt_graph_forward(g, 1);
        if (c == 2) {
            CHECK(s == DT_OK, "good ids rejected: %s", dt_last_error());
            continue;
        }
        const char *msg = dt_last_error();
        CHECK(s == DT_ERR_RANGE, "case %d: status %d, want DT_ERR_RANGE", c, (int)s);
        CHECK(strstr(msg, "embedding") != NULL, "message \"%s\" lacks the op name", msg);
        for (int i = 0; i < 3; i++)
            CHECK(strstr(msg, want[c][i]) != NULL, "message \"%s\" lacks \"%s\"", msg, want[c][i]);
    }
    dt_graph_free(g);
}

int main(void) {
    matmul_errors();
    linear_errors();
    embedding_errors();
    embedding_range(DT_I64);
    embedding_range(DT_I32);
    return dt_test_finish("linear_errors");
}
