/* Finite-difference gradient checks for the CNN family: conv2d (stride 2, padding, dilation 2,
 * groups 2, depthwise, 1x1, rectangular), batchnorm2d (train and eval), max/avg pooling and
 * global average pooling; plus batchnorm under recompute (running statistics counted once), and
 * dt_batchnorm2d_fused against batchnorm2d, add and relu as separate ops, bit for bit.
 *
 * Tolerances: the harness defaults (eps 1e-2, atol 1e-2, rtol 5e-2). conv2d and the pools are
 * linear in each input (max pooling piecewise linear: its inputs are distinct values at least
 * 0.05 apart, so a step of 1e-2 never changes a window's argmax), so central differences are
 * exact up to f32 rounding of the loss. batchnorm is smooth; with ~25 values per channel and
 * unit variance the O(eps^2) truncation error stays far below the tolerance. */
#include <stdlib.h>
#include <string.h>
#include "graph/op.h"
#include "harness.h"

/* Fills every leaf except R: N(0, 1), except running_var (state params named "rv*") which gets
 * 0.5 + |N(0, 1)| (a variance), and running_mean 0.5 * N(0, 1). */
static void fill_leaves(dt_graph *g, int r) {
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *p = dt_graph_param_info(g, i);
        dt_test_randn(g, p->id, 1000 + (uint64_t)p->id, 1.0f);
        if (p->flags & DT_PARAM_STATE) {
            float *v = dt_graph_value(g, p->id)->data;
            for (size_t k = 0; k < p->numel; k++)
                v[k] =
                    strncmp(p->name, "rv", 2) == 0 ? 0.5f + (v[k] < 0 ? -v[k] : v[k]) : 0.5f * v[k];
        }
    }
    for (int id = 0; id < dt_graph_node_count(g); id++) {
        const dt_node *n = dt_graph_node(g, id);
        if (n->kind == DT_NODE_INPUT && id != r) dt_test_randn(g, id, 2000 + (uint64_t)id, 1.0f);
    }
    dt_test_randn(g, r, 7, 1.0f);
}

static void check_graph(dt_graph *g, int out, const char *what, int training) {
    int r;
    CHECK(out >= 0, "%s: build: %s", what, dt_last_error());
    if (out < 0) return;
    int loss = dt_test_dotloss(g, out, &r);
    dt_status s = dt_graph_compile(g, loss, NULL);
    CHECK(s == DT_OK, "%s: compile: %s", what, dt_last_error());
    if (s != DT_OK) return;
    fill_leaves(g, r);
    dt_gradcheck_opts o = {.training = training};
    int bad = dt_gradcheck(g, loss, &o);
    CHECK(bad == 0, "%s: %d tensors failed the gradient check", what, bad);
}

typedef struct conv_cfg {
    const char *name;
    int N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups, bias;
} conv_cfg;

static void fd_conv(const conv_cfg *c) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){c->N, c->C, c->H, c->W}, 1);
    int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){c->O, c->C / c->groups, c->KH, c->KW}, 0);
    int b = c->bias ? dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){c->O}, 0) : -1;
    int y = dt_conv2d(g, x, w, b, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->groups);
    check_graph(g, y, c->name, 1);
    dt_graph_free(g);
}

/* x and w each feed two convolutions: the second backward of each accumulates (gin_beta 1)
 * into dx and dw through the oneDNN add-reorders. */
static void fd_conv_shared(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, 6, 6}, 1);
    int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){4, 3, 3, 3}, 0);
    int y1 = dt_conv2d(g, x, w, -1, 1, 1, 1, 1, 1, 1, 1);
    int y2 = dt_conv2d(g, x, w, -1, 1, 1, 2, 2, 2, 2, 1); /* same size: dilation 2, pad 2 */
    check_graph(g, dt_add(g, y1, y2), "conv2d shared x and w (accumulating)", 1);
    dt_graph_free(g);
}

static void fd_bn(const char *what, int ndim, const int64_t *shape, int training) {
    dt_graph *g = dt_graph_init();
    int64_t C = shape[1];
    int x = dt_graph_input(g, "x", DT_F32, ndim, shape, 1);
    int w = dt_graph_param(g, "w", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    int b = dt_graph_param(g, "b", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    check_graph(g, dt_batchnorm2d(g, x, w, b, rm, rv, 0.1f, 1e-5f), what, training);
    dt_graph_free(g);
}

/* Overwrites x with a shuffled ladder of values 0.05 apart (distinct window maxima). */
static void distinct_values(dt_graph *g, int x) {
    const dt_tensor *v = dt_graph_value(g, x);
    int64_t n = dt_tensor_numel(v);
    float *p = v->data;
    for (int64_t i = 0; i < n; i++) p[i] = 0.05f * (float)(i - n / 2);
    uint64_t s = 12345;
    for (int64_t i = n - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t)((s >> 33) % (uint64_t)(i + 1));
        float t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

static void fd_pool(const char *what, int max, int H, int W, int kh, int kw, int sh, int sw, int ph,
                    int pw) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, H, W}, 1);
    int y = (max ? dt_maxpool2d : dt_avgpool2d)(g, x, kh, kw, sh, sw, ph, pw);
    CHECK(y >= 0, "%s: build: %s", what, dt_last_error());
    /* flattened: dt_mul's gradient is wrong for operands whose last dim is 1 (a core issue) */
    int r, loss = dt_test_dotloss(g, dt_reshape(g, y, 1, (int64_t[]){-1}), &r);
    if (CHECK(dt_graph_compile(g, loss, NULL) == DT_OK, "%s: %s", what, dt_last_error())) {
        fill_leaves(g, r);
        distinct_values(g, x);
        CHECK(dt_gradcheck(g, loss, NULL) == 0, "%s: gradient check failed", what);
    }
    dt_graph_free(g);
}

static void fd_gap(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, 4, 5}, 1);
    check_graph(g, dt_global_avgpool(g, x), "global_avgpool", 1);
    dt_graph_free(g);
}

/* conv -> bn -> gap, once plainly and once with conv+bn in a recompute segment: outputs,
 * gradients and running statistics must be identical (the recomputed forward must not update
 * the running statistics a second time). */
static void bn_recompute(void) {
    float *state[2], *grad[2], loss_v[2];
    size_t ns = 0, ng = 0;
    dt_graph *gs[2];
    for (int rc = 0; rc < 2; rc++) {
        dt_graph *g = gs[rc] = dt_graph_init();
        int64_t C = 4;
        int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){3, 2, 5, 5}, 0);
        int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){4, 2, 3, 3}, 0);
        int gm = dt_graph_param(g, "g", DT_F32, 1, &C, 0);
        int bt = dt_graph_param(g, "b", DT_F32, 1, &C, 0);
        int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
        int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
        int first = rv;
        int h = dt_conv2d(g, x, w, -1, 1, 1, 1, 1, 1, 1, 1);
        h = dt_batchnorm2d(g, h, gm, bt, rm, rv, 0.1f, 1e-5f);
        if (rc) CHECK_OK(dt_graph_recompute(g, first, h));
        int y = dt_global_avgpool(g, h);
        int r, loss = dt_test_dotloss(g, y, &r);
        CHECK_OK(dt_graph_compile(g, loss, NULL));
        fill_leaves(g, r);
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        state[rc] = dt_graph_flat_state(g, &ns);
        grad[rc] = dt_graph_flat_grad(g, &ng);
        loss_v[rc] = ((const float *)dt_graph_value(g, loss)->data)[0];
    }
    CHECK(loss_v[0] == loss_v[1], "bn recompute: loss %g vs %g", loss_v[0], loss_v[1]);
    dt_check_close("bn recompute: running stats updated once", state[1], state[0], (int64_t)ns, 0,
                   0);
    dt_check_close("bn recompute: gradients", grad[1], grad[0], (int64_t)ng, 1e-6, 1e-6);
    dt_graph_free(gs[0]);
    dt_graph_free(gs[1]);
}

/* One configuration of dt_batchnorm2d_fused against the separate ops. */
typedef struct fused_case {
    const char *name;
    int ndim;
    int64_t shape[4];
    int relu, res; /* the epilogue; res 2: the residual is x itself */
    int reuse;     /* x and the residual also feed a later add: their gradients accumulate */
    int mode;      /* 0 eval, 1 training, 2 training with synchronised statistics */
    int recompute; /* the op in a recompute segment */
} fused_case;

/* One worker's "all-reduce": the sums stay as they are, but the synchronised code paths run. */
static dt_status sync_alone(void *ud, double *buf, size_t n) {
    (void)ud, (void)buf, (void)n;
    return DT_OK;
}

/* Builds, runs one forward and backward, and returns the graph; ids: x, r (or -1), y, loss. */
static dt_graph *fused_run(const fused_case *c, int fused, int ids[4]) {
    dt_graph *g = dt_graph_init();
    int64_t C = c->shape[1];
    int x = dt_graph_input(g, "x", DT_F32, c->ndim, c->shape, 1);
    int r = c->res == 1   ? dt_graph_input(g, "r", DT_F32, c->ndim, c->shape, 1)
            : c->res == 2 ? x
                          : -1;
    int w = dt_graph_param(g, "w", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    int b = dt_graph_param(g, "b", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    int y;
    if (fused) {
        y = dt_batchnorm2d_fused(g, x, w, b, rm, rv, 0.1f, 1e-5f, r, c->relu);
    } else {
        y = dt_batchnorm2d(g, x, w, b, rm, rv, 0.1f, 1e-5f);
        if (c->res) y = dt_add(g, y, r);
        if (c->relu) y = dt_relu(g, y);
    }
    if (c->recompute) CHECK_OK(dt_graph_recompute(g, rv, y));
    int z = y;
    if (c->reuse) z = dt_add(g, dt_add(g, z, x), c->res ? r : x);
    CHECK_OK(dt_graph_keep(g, y));
    int rr, loss = dt_test_dotloss(g, z, &rr);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    fill_leaves(g, rr);
    if (c->mode == 2) dt_graph_set_sync_batchnorm(g, sync_alone, NULL);
    CHECK_OK(dt_graph_forward(g, c->mode != 0));
    CHECK_OK(dt_graph_backward(g));
    ids[0] = x, ids[1] = r, ids[2] = y, ids[3] = loss;
    return g;
}

/* memcmp of two tensors' bytes, one check. */
static void same_bits(const char *cs, const char *what, const dt_tensor *a, const dt_tensor *b) {
    int ok = a && b && a->data && b->data && dt_tensor_numel(a) == dt_tensor_numel(b) &&
             !memcmp(a->data, b->data, (size_t)dt_tensor_numel(a) * sizeof(float));
    CHECK(ok, "%s: %s differs between fused and separate ops", cs, what);
}

static void fused_vs_separate(const fused_case *c) {
    int a[4], f[4];
    dt_graph *ga = fused_run(c, 0, a), *gf = fused_run(c, 1, f);
    same_bits(c->name, "loss", dt_graph_value(ga, a[3]), dt_graph_value(gf, f[3]));
    same_bits(c->name, "output", dt_graph_value(ga, a[2]), dt_graph_value(gf, f[2]));
    same_bits(c->name, "x gradient", dt_graph_grad(ga, a[0]), dt_graph_grad(gf, f[0]));
    if (c->res)
        same_bits(c->name, "residual gradient", dt_graph_grad(ga, a[1]), dt_graph_grad(gf, f[1]));
    size_t na, nf;
    float *pa = dt_graph_flat_grad(ga, &na), *pf = dt_graph_flat_grad(gf, &nf);
    CHECK(na == nf && !memcmp(pa, pf, na * sizeof *pa), "%s: weight/bias gradients differ",
          c->name);
    pa = dt_graph_flat_state(ga, &na), pf = dt_graph_flat_state(gf, &nf);
    CHECK(na == nf && !memcmp(pa, pf, na * sizeof *pa), "%s: running statistics differ", c->name);
    dt_graph_free(ga);
    dt_graph_free(gf);
}

/* The fused op's own gradients, by finite differences, where it is smooth (no ReLU). */
static void fd_fused_residual(void) {
    dt_graph *g = dt_graph_init();
    int64_t sh[4] = {3, 4, 3, 3}, C = 4;
    int x = dt_graph_input(g, "x", DT_F32, 4, sh, 1);
    int r = dt_graph_input(g, "r", DT_F32, 4, sh, 1);
    int w = dt_graph_param(g, "w", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    int b = dt_graph_param(g, "b", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    int rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    int rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    check_graph(g, dt_batchnorm2d_fused(g, x, w, b, rm, rv, 0.1f, 1e-5f, r, 0),
                "batchnorm2d_fused + residual train", 1);
    dt_graph_free(g);
    g = dt_graph_init();
    x = dt_graph_input(g, "x", DT_F32, 4, sh, 1);
    w = dt_graph_param(g, "w", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    b = dt_graph_param(g, "b", DT_F32, 1, &C, DT_PARAM_NO_DECAY);
    rm = dt_graph_param(g, "rm", DT_F32, 1, &C, DT_PARAM_STATE);
    rv = dt_graph_param(g, "rv", DT_F32, 1, &C, DT_PARAM_STATE);
    check_graph(g, dt_batchnorm2d_fused(g, x, w, b, rm, rv, 0.1f, 1e-5f, x, 0),
                "batchnorm2d_fused + x itself as the residual, train", 1);
    dt_graph_free(g);
}

int main(void) {
    static const conv_cfg convs[] = {
        {"conv2d 3x3 s1 p1 bias", 2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {"conv2d 3x3 stride 2 pad 1", 2, 3, 6, 6, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
        {"conv2d dilation 2 pad 2", 2, 2, 7, 7, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0},
        {"conv2d groups 2", 2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1},
        {"conv2d depthwise", 2, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, 0},
        {"conv2d 1x1", 2, 5, 4, 4, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0},
        {"conv2d 1x1 stride 2", 2, 5, 6, 6, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1},
        {"conv2d rect 3x2 s(2,1) p(1,0) d(1,2)", 2, 3, 7, 8, 4, 3, 2, 2, 1, 1, 0, 1, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) fd_conv(&convs[i]);
    fd_conv_shared();
    fd_bn("batchnorm2d train", 4, (int64_t[]){3, 4, 3, 3}, 1);
    fd_bn("batchnorm2d eval", 4, (int64_t[]){3, 4, 3, 3}, 0);
    fd_bn("batchnorm2d train [N, C]", 2, (int64_t[]){6, 3}, 1);
    fd_pool("maxpool2d 3x3 s2 p1", 1, 7, 7, 3, 3, 2, 2, 1, 1);
    fd_pool("maxpool2d 2x2 s2", 1, 6, 6, 2, 2, 2, 2, 0, 0);
    fd_pool("maxpool2d 3x3 s1 p1 on 3x1 (taps past both edges)", 1, 3, 1, 3, 3, 1, 1, 1, 1);
    fd_pool("avgpool2d 3x3 s2 p1", 0, 7, 7, 3, 3, 2, 2, 1, 1);
    fd_pool("avgpool2d 3x3 s1 p1 on 3x1", 0, 3, 1, 3, 3, 1, 1, 1, 1);
    fd_pool("avgpool2d 3x2 s(2,1) p(1,1)", 0, 7, 6, 3, 2, 2, 1, 1, 1);
    fd_gap();
    bn_recompute();
    /* P = 9 and 25 leave SIMD remainders, C = 70 spans two channel blocks, [N, C] has P = 1. */
    static const fused_case fc[] = {
        {"fused relu train", 4, {3, 4, 3, 3}, 1, 0, 0, 1, 0},
        {"fused relu eval", 4, {3, 4, 3, 3}, 1, 0, 0, 0, 0},
        {"fused relu sync", 4, {3, 4, 3, 3}, 1, 0, 0, 2, 0},
        {"fused add train", 4, {2, 5, 4, 4}, 0, 1, 0, 1, 0},
        {"fused add+relu train", 4, {2, 5, 4, 4}, 1, 1, 0, 1, 0},
        {"fused add+relu eval", 4, {2, 5, 4, 4}, 1, 1, 0, 0, 0},
        {"fused add+relu sync", 4, {2, 5, 4, 4}, 1, 1, 0, 2, 0},
        {"fused add+relu, gradients accumulate", 4, {2, 5, 4, 4}, 1, 1, 1, 1, 0},
        {"fused add+relu sync, gradients accumulate", 4, {2, 5, 4, 4}, 1, 1, 1, 2, 0},
        {"fused relu, gradients accumulate", 4, {3, 4, 3, 3}, 1, 0, 1, 1, 0},
        {"fused add+relu recomputed", 4, {2, 5, 4, 4}, 1, 1, 0, 1, 1},
        {"fused add+relu 70 channels", 4, {2, 70, 5, 5}, 1, 1, 0, 1, 0},
        {"fused relu [N, C]", 2, {16, 3}, 1, 0, 0, 1, 0},
        {"fused add+relu [N, C] sync", 2, {16, 3}, 1, 1, 1, 2, 0},
        /* relu(bn(x) + x): x's one gradient buffer gets both contributions */
        {"fused add x itself + relu train", 4, {2, 5, 4, 4}, 1, 2, 0, 1, 0},
        {"fused add x itself sync", 4, {2, 5, 4, 4}, 0, 2, 0, 2, 0},
    };
    for (size_t i = 0; i < sizeof fc / sizeof fc[0]; i++) fused_vs_separate(&fc[i]);
    fd_fused_residual();
    return dt_test_finish("cnn_fd");
}
