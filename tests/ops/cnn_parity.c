/* PyTorch parity for the CNN family (references: tests/ref/ref_cnn.py).
 *
 * Each case builds the op on leaves loaded from the reference, adds loss = sum(out * R), runs
 * forward + backward and compares the output and every input/parameter gradient (and, for
 * batchnorm, the updated running statistics). Tolerances, |ours - ref| <= atol + rtol |ref|:
 *   conv2d output and dx:    atol 1e-4, rtol 1e-4 (f32 sums of up to 576 products of size ~1,
 *                            blocked/Winograd summation order differs from PyTorch's)
 *   conv2d dw, db:           atol 1e-3, rtol 1e-4 (sums over N*OH*OW, up to 8192 terms; values
 *                            up to ~100)
 *   batchnorm:               atol 1e-4, rtol 1e-4 for y, dx, running stats;
 *                            atol 1e-3, rtol 1e-4 for dweight/dbias (sums of up to 1024 terms)
 *   pooling:                 atol 1e-5, rtol 1e-5 (max: exact; avg: a few additions)
 *   block (conv-bn-conv-bn + residual, gap): atol 2e-4, rtol 1e-3
 * A second backward with dt_graph_set_accumulate(g, 1) must double every parameter gradient
 * (the gin_beta = 1 path of conv2d's oneDNN reorders with a sum post-op, and of batchnorm). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/op.h"
#include "harness.h"

static dt_ref *ref;

static const dt_tensor *get(const char *cs, const char *key) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, key);
    return dt_ref_get(ref, name);
}

enum { INPUT, PARAM, STATE };

/* Declares a leaf shaped like reference tensor cs.key. */
static int leaf(dt_graph *g, const char *cs, const char *key, int kind) {
    const dt_tensor *t = get(cs, key);
    if (!t) return -1;
    if (kind == INPUT) return dt_graph_input(g, key, DT_F32, t->ndim, t->shape, 1);
    return dt_graph_param(g, key, DT_F32, t->ndim, t->shape, kind == STATE ? DT_PARAM_STATE : 0);
}

/* One comparison: node id's gradient (grad = 1), value (grad = 0) against cs.key. */
typedef struct cmp {
    int id, grad;
    const char *key;
    double atol, rtol;
} cmp;

/* Compiles with loss = sum(out * R), loads every named leaf from the reference, runs forward
 * (training) + backward, and checks `nc` comparisons. Then re-runs backward accumulating and
 * checks that parameter gradients (grad comparisons on params) doubled. */
static void run_as(dt_graph *g, const char *cs, const char *label, int out, int training,
                   const int *leaves, const char *const *keys, int nl, const cmp *c, int nc) {
    char what[160];
    int r = -1;
    if (!CHECK(out >= 0, "%s: build: %s", label, dt_last_error())) return;
    dt_graph_keep(g, out);
    /* The loss reads out flattened: dt_mul's gradient is wrong for operands whose last dims are
     * 1 ([N, C, 1, 1], [N, C, H, 1]), a core issue reported separately. */
    int loss = dt_test_dotloss(g, dt_reshape(g, out, 1, (int64_t[]){-1}), &r);
    dt_status st = dt_graph_compile(g, loss, NULL);
    if (!CHECK(st == DT_OK, "%s: compile: %s", label, dt_last_error())) return;
    for (int i = 0; i < nl; i++) dt_test_set(g, leaves[i], get(cs, keys[i]));
    dt_test_set(g, r, get(cs, "R"));
    CHECK_OK(dt_graph_forward(g, training));
    CHECK_OK(dt_graph_backward(g));
    for (int i = 0; i < nc; i++) {
        snprintf(what, sizeof what, "%s %s", label, c[i].key);
        const dt_tensor *t = c[i].grad ? dt_graph_grad(g, c[i].id) : dt_graph_value(g, c[i].id);
        dt_check_tensor(what, t, get(cs, c[i].key), c[i].atol, c[i].rtol);
    }
    /* accumulate: parameter gradients must double (forward again first: the planner may have
     * reused activation memory during backward) */
    dt_graph_set_accumulate(g, 1);
    CHECK_OK(dt_graph_forward(g, training));
    CHECK_OK(dt_graph_backward(g));
    for (int i = 0; i < nc; i++) {
        const dt_node *nd = dt_graph_node(g, c[i].id);
        if (!c[i].grad || nd->kind != DT_NODE_PARAM) continue;
        const dt_tensor *ref_g = get(cs, c[i].key);
        int64_t n = dt_tensor_numel(ref_g);
        float *twice = malloc((size_t)n * sizeof(float));
        for (int64_t k = 0; k < n; k++) twice[k] = 2.0f * ((const float *)ref_g->data)[k];
        snprintf(what, sizeof what, "%s %s accumulated twice", label, c[i].key);
        dt_check_close(what, dt_graph_grad(g, c[i].id)->data, twice, n, 2 * c[i].atol, c[i].rtol);
        free(twice);
    }
}

static void run(dt_graph *g, const char *cs, int out, int training, const int *leaves,
                const char *const *keys, int nl, const cmp *c, int nc) {
    run_as(g, cs, cs, out, training, leaves, keys, nl, c, nc);
}

/* variant 0: all gradients; NO_GX: x without requires_grad (the image batch: no
 * backward-data primitive, backward-weights stages gy itself); FROZEN_W: frozen f32 weight. */
enum { ALL_GRADS, NO_GX, FROZEN_W };

static void conv_case(const char *cs, int variant) {
    const dt_tensor *cf = get(cs, "cfg"), *xr = get(cs, "x"), *wr = get(cs, "w");
    if (!cf || !xr || !wr) return;
    const float *p = cf->data; /* stride h w, pad h w, dilation h w, groups, has_bias */
    int bias = p[7] != 0.0f;
    char name[96];
    snprintf(name, sizeof name, "%s%s", cs,
             variant == NO_GX      ? " (x without grad)"
             : variant == FROZEN_W ? " (frozen w)"
                                   : "");
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, xr->shape, variant != NO_GX);
    int w = dt_graph_param(g, "w", DT_F32, 4, wr->shape, variant == FROZEN_W ? DT_PARAM_FROZEN : 0);
    int b = bias ? leaf(g, cs, "b", PARAM) : -1;
    int y = dt_conv2d(g, x, w, b, (int)p[0], (int)p[1], (int)p[2], (int)p[3], (int)p[4], (int)p[5],
                      (int)p[6]);
    int leaves[3] = {x, w, b};
    const char *keys[3] = {"x", "w", "b"};
    cmp c[4] = {{y, 0, "y", 1e-4, 1e-4}};
    int nc = 1;
    if (variant != NO_GX) c[nc++] = (cmp){x, 1, "gx", 1e-4, 1e-4};
    if (variant != FROZEN_W) c[nc++] = (cmp){w, 1, "gw", 1e-3, 1e-4};
    if (bias) c[nc++] = (cmp){b, 1, "gb", 1e-3, 1e-4};
    run_as(g, cs, name, y, 1, leaves, keys, bias ? 3 : 2, c, nc);
    dt_graph_free(g);
}

static void bn_case(const char *cs) {
    const dt_tensor *cf = get(cs, "cfg");
    if (!cf) return;
    int training = ((const float *)cf->data)[0] != 0.0f;
    dt_graph *g = dt_graph_init();
    int x = leaf(g, cs, "x", INPUT), w = leaf(g, cs, "w", PARAM), b = leaf(g, cs, "b", PARAM);
    int rm = leaf(g, cs, "rm", STATE), rv = leaf(g, cs, "rv", STATE);
    int y = dt_batchnorm2d(g, x, w, b, rm, rv, 0.1f, 1e-5f);
    int leaves[5] = {x, w, b, rm, rv};
    const char *keys[5] = {"x", "w", "b", "rm", "rv"};
    cmp c[6] = {{y, 0, "y", 1e-4, 1e-4},       {x, 1, "gx", 1e-4, 1e-4},
                {w, 1, "gw", 1e-3, 1e-4},      {b, 1, "gb", 1e-3, 1e-4},
                {rm, 0, "rm_new", 1e-5, 1e-5}, {rv, 0, "rv_new", 1e-5, 1e-5}};
    run(g, cs, y, training, leaves, keys, 5, c, 6);
    dt_graph_free(g);
}

static void pool_case(const char *cs, int max) {
    const dt_tensor *cf = get(cs, "cfg");
    if (!cf) return;
    const float *p = cf->data; /* kernel h w, stride h w, pad h w */
    dt_graph *g = dt_graph_init();
    int x = leaf(g, cs, "x", INPUT);
    int y = (max ? dt_maxpool2d : dt_avgpool2d)(g, x, (int)p[0], (int)p[1], (int)p[2], (int)p[3],
                                                (int)p[4], (int)p[5]);
    const char *keys[1] = {"x"};
    cmp c[2] = {{y, 0, "y", 1e-5, 1e-5}, {x, 1, "gx", 1e-5, 1e-5}};
    run(g, cs, y, 1, &x, keys, 1, c, 2);
    dt_graph_free(g);
}

static void gap_case(const char *cs) {
    dt_graph *g = dt_graph_init();
    int x = leaf(g, cs, "x", INPUT);
    int y = dt_global_avgpool(g, x);
    const char *keys[1] = {"x"};
    cmp c[2] = {{y, 0, "y", 1e-5, 1e-5}, {x, 1, "gx", 1e-5, 1e-5}};
    run(g, cs, y, 1, &x, keys, 1, c, 2);
    dt_graph_free(g);
}

/* gap(bn2(conv2(bn1(conv1(x)))) + x) in training mode, running stats from PyTorch's initial
 * values (0, 1). x feeds conv1 and the residual add, so its gradient accumulates. */
static void block_case(void) {
    const char *cs = "block";
    dt_graph *g = dt_graph_init();
    int x = leaf(g, cs, "x", INPUT);
    int w1 = leaf(g, cs, "w1", PARAM), w2 = leaf(g, cs, "w2", PARAM);
    int g1 = leaf(g, cs, "g1", PARAM), b1 = leaf(g, cs, "b1", PARAM);
    int g2 = leaf(g, cs, "g2", PARAM), b2 = leaf(g, cs, "b2", PARAM);
    int rm1 = leaf(g, cs, "rm1", STATE), rv1 = leaf(g, cs, "rv1", STATE);
    int rm2 = leaf(g, cs, "rm2", STATE), rv2 = leaf(g, cs, "rv2", STATE);
    int h = dt_batchnorm2d(g, dt_conv2d(g, x, w1, -1, 1, 1, 1, 1, 1, 1, 1), g1, b1, rm1, rv1, 0.1f,
                           1e-5f);
    h = dt_batchnorm2d(g, dt_conv2d(g, h, w2, -1, 1, 1, 1, 1, 1, 1, 1), g2, b2, rm2, rv2, 0.1f,
                       1e-5f);
    int y = dt_global_avgpool(g, dt_add(g, h, x));
    int leaves[11] = {x, w1, w2, g1, b1, g2, b2, rm1, rv1, rm2, rv2};
    const char *keys[11] = {"x", "w1", "w2", "g1", "b1", "g2", "b2", "rm1", "rv1", "rm2", "rv2"};
    const double A = 2e-4, Rt = 1e-3;
    cmp c[13] = {
        {y, 0, "y", A, Rt},         {x, 1, "gx", A, Rt},        {w1, 1, "gw1", A, Rt},
        {w2, 1, "gw2", A, Rt},      {g1, 1, "gg1", A, Rt},      {b1, 1, "gb1", A, Rt},
        {g2, 1, "gg2", A, Rt},      {b2, 1, "gb2", A, Rt},      {rm1, 0, "rm1_new", A, Rt},
        {rv1, 0, "rv1_new", A, Rt}, {rm2, 0, "rm2_new", A, Rt}, {rv2, 0, "rv2_new", A, Rt}};
    run(g, cs, y, 1, leaves, keys, 11, c, 12);
    dt_graph_free(g);
}

int main(void) {
    ref = dt_ref_load("cnn.safetensors");
    if (!ref) return dt_test_finish("cnn_parity");
    static const char *convs[] = {"conv_basic", "conv_s2",       "conv_dil2",   "conv_g2",
                                  "conv_dw",    "conv_dw_x2_s2", "conv_1x1",    "conv_1x1_s2",
                                  "conv_rect",  "conv_stem",     "conv_resnet", "conv_resnet_s2",
                                  "conv_wino",  "conv_1px"};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_case(convs[i], ALL_GRADS);
    conv_case("conv_stem", NO_GX);
    conv_case("conv_resnet", NO_GX);
    conv_case("conv_basic", FROZEN_W);
    conv_case("conv_wino", FROZEN_W);
    static const char *bns[] = {"bn_train", "bn_eval", "bn_offset", "bn_resnet", "bn_2d", "bn_1px"};
    for (size_t i = 0; i < sizeof bns / sizeof bns[0]; i++) bn_case(bns[i]);
    pool_case("maxpool_stem", 1);
    pool_case("maxpool_k2", 1);
    pool_case("maxpool_rect", 1);
    pool_case("maxpool_thin", 1);
    pool_case("maxpool_s3", 1);
    pool_case("maxpool_resnet", 1);
    pool_case("avgpool_k3", 0);
    pool_case("avgpool_k2", 0);
    pool_case("avgpool_rect", 0);
    pool_case("avgpool_thin", 0);
    pool_case("avgpool_s3", 0);
    gap_case("gap");
    gap_case("gap_resnet");
    block_case();
    dt_ref_free(ref);
    return dt_test_finish("cnn_parity");
}
