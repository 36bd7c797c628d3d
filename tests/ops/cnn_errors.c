/* Bad calls to the CNN family return an error (never crash) whose message names the op and the
 * shapes: mismatched shapes and dtypes, bad strides, dilations, paddings and groups, output
 * sizes <= 0, running statistics that are not DT_PARAM_STATE params; batchnorm in training
 * mode with one value per channel fails at forward time with DT_ERR_SHAPE. */
#include <string.h>
#include "harness.h"

/* The builder result must be -1 and the message must contain every string in `want`. */
static int in(dt_graph *g, const char *name, dt_dtype dt, int ndim, const int64_t *shape) {
    return dt_graph_input(g, name, dt, ndim, shape, 0);
}

static void conv_errors(void) {
    dt_graph *g = dt_graph_init();
    int x = in(g, "x", DT_F32, 4, (int64_t[]){2, 4, 8, 8});
    int x3 = in(g, "x3", DT_F32, 3, (int64_t[]){4, 8, 8});
    int xh = in(g, "xh", DT_BF16, 4, (int64_t[]){2, 4, 8, 8});
    int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){6, 4, 3, 3}, 0);
    int w5 = dt_graph_param(g, "w5", DT_F32, 4, (int64_t[]){6, 5, 3, 3}, 0);
    int wg = dt_graph_param(g, "wg", DT_F32, 4, (int64_t[]){6, 2, 3, 3}, 0);
    int wbig = dt_graph_param(g, "wbig", DT_F32, 4, (int64_t[]){6, 4, 9, 9}, 0);
    int b6 = dt_graph_param(g, "b6", DT_F32, 1, (int64_t[]){6}, 0);
    int b5 = dt_graph_param(g, "b5", DT_F32, 1, (int64_t[]){5}, 0);
    CHECK(dt_conv2d(g, x, w, b6, 1, 1, 1, 1, 1, 1, 1) >= 0, "valid conv2d rejected: %s",
          dt_last_error());
    CHECK(dt_conv2d(g, x, wg, -1, 2, 2, 1, 1, 1, 1, 2) >= 0, "valid grouped conv2d rejected: %s",
          dt_last_error());
    EXPECT_FAIL(dt_conv2d(g, x, w5, -1, 1, 1, 1, 1, 1, 1, 1), "conv2d", "[2, 4, 8, 8]",
                "[6, 5, 3, 3]");
    EXPECT_FAIL(dt_conv2d(g, x3, w, -1, 1, 1, 1, 1, 1, 1, 1), "conv2d", "[4, 8, 8]");
    EXPECT_FAIL(dt_conv2d(g, xh, w, -1, 1, 1, 1, 1, 1, 1, 1), "conv2d", "f32", "bf16");
    EXPECT_FAIL(dt_conv2d(g, x, w, b5, 1, 1, 1, 1, 1, 1, 1), "conv2d", "bias", "[5]");
    EXPECT_FAIL(dt_conv2d(g, x, w, -1, 0, 1, 1, 1, 1, 1, 1), "conv2d", "stride", "[2, 4, 8, 8]");
    EXPECT_FAIL(dt_conv2d(g, x, w, -1, 1, 1, -1, 1, 1, 1, 1), "conv2d", "padding");
    EXPECT_FAIL(dt_conv2d(g, x, w, -1, 1, 1, 1, 1, 0, 1, 1), "conv2d", "dilation");
    EXPECT_FAIL(dt_conv2d(g, x, w, -1, 1, 1, 1, 1, 1, 1, 0), "conv2d", "groups");
    EXPECT_FAIL(dt_conv2d(g, x, wg, -1, 1, 1, 1, 1, 1, 1, 3), "conv2d", "groups 3");
    EXPECT_FAIL(dt_conv2d(g, x, w, -1, 1, 1, 1, 1, 1, 1, 2), "conv2d", "[6, 4, 3, 3]");
    EXPECT_FAIL(dt_conv2d(g, x, wbig, -1, 1, 1, 0, 0, 1, 1, 1), "conv2d", "output size",
                "[6, 4, 9, 9]");
    EXPECT_FAIL(dt_conv2d(g, x, w, -1, 1, 1, 0, 0, 4, 4, 1), "conv2d", "output size");
    EXPECT_FAIL(dt_conv2d(g, x, 999, -1, 1, 1, 1, 1, 1, 1, 1), "conv2d");
    CHECK(dt_conv2d(g, -1, w, -1, 1, 1, 1, 1, 1, 1, 1) < 0, "conv2d accepted id -1");
    dt_graph_free(g);
}

static void bn_errors(void) {
    dt_graph *g = dt_graph_init();
    int64_t C = 4, C5 = 5;
    int x = in(g, "x", DT_F32, 4, (int64_t[]){2, 4, 3, 3});
    int x1 = in(g, "x1", DT_F32, 1, (int64_t[]){4});
    int xh = in(g, "xh", DT_BF16, 4, (int64_t[]){2, 4, 3, 3});
    int w = dt_graph_param(g, "w", DT_F32, 1, &C, 0);
    int b = dt_graph_param(g, "b", DT_F32, 1, &C, 0);
    int w5 = dt_graph_param(g, "w5", DT_F32, 1, &C5, 0);
    int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv5 = dt_graph_param(g, "rv5", DT_F32, 1, &C5, DT_PARAM_STATE);
    CHECK(dt_batchnorm2d(g, x, w, b, rm, rv, 0.1f, 1e-5f) >= 0, "valid batchnorm2d rejected: %s",
          dt_last_error());
    EXPECT_FAIL(dt_batchnorm2d(g, x, w5, b, rm, rv, 0.1f, 1e-5f), "batchnorm2d", "[2, 4, 3, 3]",
                "[5]");
    EXPECT_FAIL(dt_batchnorm2d(g, x, w, b, rm, rv5, 0.1f, 1e-5f), "batchnorm2d", "[5]");
    EXPECT_FAIL(dt_batchnorm2d(g, x1, w, b, rm, rv, 0.1f, 1e-5f), "batchnorm2d", "[4]");
    EXPECT_FAIL(dt_batchnorm2d(g, xh, w, b, rm, rv, 0.1f, 1e-5f), "batchnorm2d", "bf16");
    /* running statistics must be state params: a trainable param or an input is refused */
    EXPECT_FAIL(dt_batchnorm2d(g, x, w, b, w, rv, 0.1f, 1e-5f), "batchnorm2d", "DT_PARAM_STATE");
    EXPECT_FAIL(dt_batchnorm2d(g, x, w, b, rm, x1, 0.1f, 1e-5f), "batchnorm2d");
    EXPECT_FAIL(dt_batchnorm2d(g, x, w, b, rm, rv, 1.5f, 1e-5f), "batchnorm2d", "momentum");
    EXPECT_FAIL(dt_batchnorm2d(g, x, w, b, rm, rv, 0.1f, 0.0f), "batchnorm2d", "eps");
    CHECK(dt_batchnorm2d(g, -1, w, b, rm, rv, 0.1f, 1e-5f) < 0, "batchnorm2d accepted id -1");
    dt_graph_free(g);
}

/* One value per channel: PyTorch refuses to train on it; so do we, at forward time. Eval mode
 * works on the same graph. */
static void bn_runtime_error(void) {
    dt_graph *g = dt_graph_init();
    int64_t C = 3;
    int x = in(g, "x", DT_F32, 4, (int64_t[]){1, 3, 1, 1});
    int w = dt_graph_param(g, "w", DT_F32, 1, &C, 0);
    int b = dt_graph_param(g, "b", DT_F32, 1, &C, 0);
    int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    int y = dt_batchnorm2d(g, x, w, b, rm, rv, 0.1f, 1e-5f);
    CHECK_OK(dt_graph_compile(g, dt_sum(g, y), NULL));
    dt_status s = dt_graph_forward(g, 1);
    CHECK(s == DT_ERR_SHAPE, "batchnorm2d trained on 1 value per channel: status %d", (int)s);
    CHECK(strstr(dt_last_error(), "batchnorm2d") && strstr(dt_last_error(), "[1, 3, 1, 1]"),
          "message \"%s\" lacks the op and shape", dt_last_error());
    CHECK_OK(dt_graph_forward(g, 0));
    dt_graph_free(g);
}

static void pool_errors(void) {
    dt_graph *g = dt_graph_init();
    int x = in(g, "x", DT_F32, 4, (int64_t[]){2, 3, 8, 8});
    int x3 = in(g, "x3", DT_F32, 3, (int64_t[]){3, 8, 8});
    int xi = in(g, "xi", DT_I32, 4, (int64_t[]){2, 3, 8, 8});
    int x2 = in(g, "x2", DT_F32, 2, (int64_t[]){2, 3});
    CHECK(dt_maxpool2d(g, x, 3, 3, 2, 2, 1, 1) >= 0, "valid maxpool2d rejected: %s",
          dt_last_error());
    CHECK(dt_avgpool2d(g, x, 2, 2, 2, 2, 0, 0) >= 0, "valid avgpool2d rejected: %s",
          dt_last_error());
    int (*fns[2])(dt_graph *, int, int, int, int, int, int, int) = {dt_maxpool2d, dt_avgpool2d};
    const char *names[2] = {"maxpool2d", "avgpool2d"};
    for (int i = 0; i < 2; i++) {
        const char *op = names[i];
        EXPECT_FAIL(fns[i](g, x3, 2, 2, 2, 2, 0, 0), op, "[3, 8, 8]");
        EXPECT_FAIL(fns[i](g, xi, 2, 2, 2, 2, 0, 0), op, "f32", "i32");
        EXPECT_FAIL(fns[i](g, x, 0, 2, 2, 2, 0, 0), op, "kernel", "[2, 3, 8, 8]");
        EXPECT_FAIL(fns[i](g, x, 2, 2, 0, 2, 0, 0), op, "stride");
        EXPECT_FAIL(fns[i](g, x, 3, 3, 1, 1, 2, 1), op, "padding"); /* pad > kernel / 2 */
        EXPECT_FAIL(fns[i](g, x, 3, 3, 1, 1, -1, 0), op, "padding");
        EXPECT_FAIL(fns[i](g, x, 9, 9, 1, 1, 0, 0), op, "output size", "[2, 3, 8, 8]");
        EXPECT_FAIL(fns[i](g, 999, 2, 2, 2, 2, 0, 0), op);
    }
    EXPECT_FAIL(dt_global_avgpool(g, x2), "global_avgpool", "[2, 3]");
    EXPECT_FAIL(dt_global_avgpool(g, xi), "global_avgpool", "i32");
    CHECK(dt_global_avgpool(g, -1) < 0, "global_avgpool accepted id -1");
    dt_graph_free(g);
}

int main(void) {
    conv_errors();
    bn_errors();
    bn_runtime_error();
    pool_errors();
    return dt_test_finish("cnn_errors");
}
