/* Channel-blocked activations (DT_LAYOUT_C16 and DT_LAYOUT_C8, src/graph/layout.c). Everything
 * below runs for both block widths (dt_graph_opts.layout_block 16 and 8, whatever the CPU's own):
 *
 * - choice: which values a compile blocks (4-D f32 with C a multiple of the block between ops
 *   that read and write the layout), and what turns it off: a plain consumer, a kept value
 *   (user-visible), batchnorm's tie of x, residual and output, the plain_layout option; a bad
 *   layout_block is an error;
 * - equivalence: the same network compiled blocked and plain gives the same loss, gradients
 *   and running statistics to rounding (the batchnorm and global-pool sums run in another
 *   order), in training, eval and with synchronised batchnorm, also with poisoned buffers;
 *   through convolutions and max pooling only, the gradients are the same bits;
 * - finite differences on a blocked network (convolutions, batchnorm with and without a
 *   residual, global pooling), in training and eval mode;
 * - the two widths against each other: the whole network's loss, gradients and running
 *   statistics are the same bits (the convolutions run the CPU's kernels either way, the
 *   blocked batchnorm and pool kernels make the same additions per channel). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "graph/graph_impl.h"
#include "harness.h"

static int BLOCK;   /* the block width under test: 16 or 8 */
static int BLAYOUT; /* its layout: DT_LAYOUT_C16 or DT_LAYOUT_C8 */

static dt_graph_opts opts(int plain, int poison) {
    return (dt_graph_opts){.plain_layout = plain, .poison = poison, .layout_block = BLOCK};
}

typedef struct net {
    int x, a, b, c, d, e, f, gg, h, i, j, r, loss;
} net;

/* Batchnorm parameters named <nm>.{w,b,rm,rv}: ids in p[4]. */
static void bn_params(dt_graph *g, const char *nm, int64_t C, int p[4]) {
    static const char *suf[4] = {"w", "b", "rm", "rv"};
    static const unsigned fl[4] = {DT_PARAM_NO_DECAY, DT_PARAM_NO_DECAY, DT_PARAM_STATE,
                                   DT_PARAM_STATE};
    char s[64];
    for (int k = 0; k < 4; k++) {
        snprintf(s, sizeof s, "%s.%s", nm, suf[k]);
        p[k] = dt_graph_param(g, s, DT_F32, 1, &C, fl[k]);
    }
}

static int conv(dt_graph *g, const char *nm, int x, int64_t O, int64_t C, int k) {
    int w = dt_graph_param(g, nm, DT_F32, 4, (int64_t[]){O, C, k, k}, 0);
    return dt_conv2d(g, x, w, -1, 1, 1, k / 2, k / 2, 1, 1, 1);
}

static int bn(dt_graph *g, const char *nm, int x, int64_t C, int res, int relu, int plain_op) {
    int p[4];
    bn_params(g, nm, C, p);
    if (plain_op) return dt_batchnorm2d(g, x, p[0], p[1], p[2], p[3], 0.1f, 1e-5f);
    return dt_batchnorm2d_fused(g, x, p[0], p[1], p[2], p[3], 0.1f, 1e-5f, res, relu);
}

/* x [N, 3, HW, HW] -> conv a (16) -> bn b (relu) -> conv c (16) -> bn d (+ b, relu) -> maxpool e
 * -> conv f (20 channels: stays plain) -> bn gg -> conv h (32) -> bn i (relu) -> global pool j
 * [N, 32] -> loss. relu 0 and pool 0 (for finite differences): no ReLU, no max pooling. */
static dt_graph *build(net *m, int N, int HW, int relu, int pool, int keep_b) {
    dt_graph *g = dt_graph_init();
    m->x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){N, 3, HW, HW}, 1);
    m->a = conv(g, "a", m->x, 16, 3, 3);
    m->b = bn(g, "bn_b", m->a, 16, -1, relu, 0);
    m->c = conv(g, "c", m->b, 16, 16, 3);
    m->d = bn(g, "bn_d", m->c, 16, m->b, relu, 0);
    m->e = pool ? dt_maxpool2d(g, m->d, 2, 2, 2, 2, 0, 0) : m->d;
    m->f = conv(g, "f", m->e, 20, 16, 1);
    m->gg = bn(g, "bn_g", m->f, 20, -1, 0, 1);
    m->h = conv(g, "h", m->gg, 32, 20, 3);
    m->i = bn(g, "bn_i", m->h, 32, -1, relu, 0);
    m->j = dt_global_avgpool(g, m->i);
    m->loss = dt_test_dotloss(g, m->j, &m->r);
    CHECK(m->loss >= 0, "build: %s", dt_last_error());
    if (keep_b) CHECK_OK(dt_graph_keep(g, m->b));
    CHECK_OK(dt_graph_keep(g, m->j));
    return g;
}

/* Deterministic leaves: N(0, 1); running variances 0.5 + |N(0, 1)|. */
static void fill(dt_graph *g, const net *m) {
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *p = dt_graph_param_info(g, i);
        dt_test_randn(g, p->id, 100 + (uint64_t)i, p->flags & DT_PARAM_STATE ? 0.5f : 0.3f);
        if (strstr(p->name, ".rv")) {
            float *v = dt_graph_value(g, p->id)->data;
            for (size_t k = 0; k < p->numel; k++) v[k] = 0.5f + fabsf(v[k]);
        }
    }
    dt_test_randn(g, m->x, 7, 1.0f);
    dt_test_randn(g, m->r, 8, 1.0f);
}

static int layout(dt_graph *g, int id) {
    return dt_graph_node_(g, id)->layout;
}

static const char *layout_name(int l) {
    return l == DT_LAYOUT_C16 ? "C16" : l == DT_LAYOUT_C8 ? "C8" : "plain";
}

/* want: 1 blocked (in the width under test), 0 plain */
static void expect(dt_graph *g, const char *cs, const char *name, int id, int want) {
    int w = want ? BLAYOUT : DT_LAYOUT_PLAIN;
    CHECK(layout(g, id) == w, "block %d: %s: %s is %s, expected %s", BLOCK, cs, name,
          layout_name(layout(g, id)), layout_name(w));
}

/* Expected layout (1: blocked) of each value of build()'s network, by default and with b kept.
 * Keeping b (user-visible) makes it plain, and with it everything tied to it: the bn that
 * produces it (and so conv a's output), the bn that adds it (d, so conv c's output) and the
 * max pool tied to d. */
static const struct {
    const char *name;
    size_t off;
    int dflt, b_kept;
} WANT[] = {
    {"input x", offsetof(net, x), 0, 0},
    {"conv a", offsetof(net, a), 1, 0},
    {"bn b", offsetof(net, b), 1, 0},
    {"conv c", offsetof(net, c), 1, 0},
    {"bn d (residual b)", offsetof(net, d), 1, 0},
    {"maxpool e", offsetof(net, e), 1, 0},
    {"conv f (20 channels)", offsetof(net, f), 0, 0},
    {"bn gg (20 channels)", offsetof(net, gg), 0, 0},
    {"conv h", offsetof(net, h), 1, 1},
    {"bn i", offsetof(net, i), 1, 1},
    {"global pool j (2-D, kept)", offsetof(net, j), 0, 0},
};

static void choice(void) {
    net m;
    for (int kept = 0; kept < 2; kept++) {
        dt_graph *g = build(&m, 2, 8, 1, 1, kept);
        dt_graph_opts o = opts(0, 0);
        CHECK_OK(dt_graph_compile(g, m.loss, &o));
        for (size_t k = 0; k < sizeof WANT / sizeof WANT[0]; k++)
            expect(g, kept ? "b kept" : "default", WANT[k].name,
                   *(const int *)((const char *)&m + WANT[k].off),
                   kept ? WANT[k].b_kept : WANT[k].dflt);
        dt_graph_free(g);
    }

    /* A consumer that reads plain values only (add) keeps its input plain, and batchnorm's tie
     * carries that back to the conv before it. */
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 16, 4, 4}, 1);
    int a = conv(g, "a", x, 16, 16, 3);
    int b = bn(g, "bn", a, 16, -1, 1, 0);
    int s = dt_add(g, b, x), r;
    int loss = dt_test_dotloss(g, dt_global_avgpool(g, s), &r);
    dt_graph_opts o = opts(0, 0);
    CHECK_OK(dt_graph_compile(g, loss, &o));
    expect(g, "add consumer", "conv", a, 0);
    expect(g, "add consumer", "bn", b, 0);
    dt_graph_free(g);

    g = build(&m, 2, 8, 1, 1, 0);
    o = opts(1, 0);
    CHECK_OK(dt_graph_compile(g, m.loss, &o));
    int any = 0;
    for (int i = 0; i < dt_graph_node_count(g); i++) any |= layout(g, i);
    CHECK(!any, "plain_layout: no value is channel-blocked");
    dt_graph_free(g);

    /* A block width oneDNN has no activation layout for is refused, naming the option. */
    g = build(&m, 2, 8, 1, 1, 0);
    CHECK(dt_graph_compile(g, m.loss, &(dt_graph_opts){.layout_block = 4}) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "layout_block 4"),
          "layout_block 4 is an error: %s", dt_last_error());
    dt_graph_free(g);
}

static dt_status sync_alone(void *ud, double *buf, size_t n) {
    (void)ud, (void)buf, (void)n;
    return DT_OK;
}

/* One compiled, filled network after forward (mode 0 eval, 1 training, 2 synchronised) and, in
 * training, backward. */
static dt_graph *run(net *m, int N, int HW, int relu, int pool, int mode, int plain, int poison) {
    dt_graph *g = build(m, N, HW, relu, pool, 0);
    dt_graph_opts o = opts(plain, poison);
    CHECK_OK(dt_graph_compile(g, m->loss, &o));
    fill(g, m);
    if (mode == 2) dt_graph_set_sync_batchnorm(g, sync_alone, NULL);
    CHECK_OK(dt_graph_forward(g, mode != 0));
    if (mode) CHECK_OK(dt_graph_backward(g));
    return g;
}

static void equivalence(int mode, int poison) {
    static const char *modes[] = {"eval", "training", "sync batchnorm"};
    net m, p;
    dt_graph *gb = run(&m, 4, 16, 1, 1, mode, 0, poison), *gp = run(&p, 4, 16, 1, 1, mode, 1, 0);
    char what[160];
    const dt_tensor *jb = dt_graph_value(gb, m.j), *jp = dt_graph_value(gp, p.j);
    snprintf(what, sizeof what, "%s%s: pooled features, blocked vs plain", modes[mode],
             poison ? " (poisoned)" : "");
    dt_check_close(what, jb->data, jp->data, dt_tensor_numel(jb), 1e-5, 1e-4);
    for (int i = 0; i < dt_graph_param_count(gb); i++) {
        const dt_param_info *pi = dt_graph_param_info(gb, i);
        int state = pi->flags & DT_PARAM_STATE;
        if (!state && !mode) continue;
        const dt_tensor *a = state ? dt_graph_value(gb, pi->id) : dt_graph_grad(gb, pi->id);
        const dt_tensor *b = state ? dt_graph_value(gp, pi->id) : dt_graph_grad(gp, pi->id);
        snprintf(what, sizeof what, "%s%s: %s %s, blocked vs plain", modes[mode],
                 poison ? " (poisoned)" : "", pi->name, state ? "value" : "gradient");
        dt_check_close(what, a->data, b->data, (int64_t)pi->numel, 1e-5, 1e-4);
    }
    if (mode) {
        const dt_tensor *a = dt_graph_grad(gb, m.x), *b = dt_graph_grad(gp, p.x);
        snprintf(what, sizeof what, "%s: input gradient, blocked vs plain", modes[mode]);
        dt_check_close(what, a->data, b->data, dt_tensor_numel(a), 1e-5, 1e-4);
    }
    dt_graph_free(gb), dt_graph_free(gp);
}

/* x -> conv (16) -> maxpool -> conv (32) -> global pool: the convolutions and the max pool
 * compute the same bits in either layout, and so do all gradients (the global pool's backward
 * divides by the same P); only the pooled sums (forward) run in another order. */
static void same_bits_through_pool(void) {
    dt_graph *g[2];
    int ids[2][4];
    for (int k = 0; k < 2; k++) {
        dt_graph *h = g[k] = dt_graph_init();
        int x = dt_graph_input(h, "x", DT_F32, 4, (int64_t[]){2, 3, 12, 12}, 1);
        int a = conv(h, "w1", x, 16, 3, 3);
        int e = dt_maxpool2d(h, a, 3, 3, 2, 2, 1, 1);
        int c = conv(h, "w2", e, 32, 16, 3), r;
        int loss = dt_test_dotloss(h, dt_global_avgpool(h, c), &r);
        dt_graph_opts o = opts(k, 0);
        CHECK_OK(dt_graph_compile(h, loss, &o));
        dt_test_randn(h, x, 1, 1.0f), dt_test_randn(h, r, 2, 1.0f);
        dt_test_randn(h, dt_graph_find(h, "w1"), 3, 0.3f);
        dt_test_randn(h, dt_graph_find(h, "w2"), 4, 0.3f);
        CHECK_OK(dt_graph_forward(h, 1));
        CHECK_OK(dt_graph_backward(h));
        ids[k][0] = x, ids[k][1] = dt_graph_find(h, "w1"), ids[k][2] = dt_graph_find(h, "w2");
        ids[k][3] = e;
    }
    CHECK(layout(g[0], ids[0][3]) == BLAYOUT, "the max pool runs channel-blocked");
    static const char *names[3] = {"x", "w1", "w2"};
    for (int k = 0; k < 3; k++) {
        const dt_tensor *a = dt_graph_grad(g[0], ids[0][k]), *b = dt_graph_grad(g[1], ids[1][k]);
        CHECK(memcmp(a->data, b->data, dt_tensor_nbytes(a)) == 0,
              "conv + maxpool: gradient of %s, blocked vs plain: same bits", names[k]);
    }
    dt_graph_free(g[0]), dt_graph_free(g[1]);
}

/* relu(bn(a) + a) on a blocked conv output a: a's one gradient buffer takes both the
 * batchnorm's input gradient and the residual's; blocked vs plain. */
static void residual_is_input(void) {
    dt_graph *g[2];
    int ids[2][3];
    for (int k = 0; k < 2; k++) {
        dt_graph *h = g[k] = dt_graph_init();
        int x = dt_graph_input(h, "x", DT_F32, 4, (int64_t[]){2, 3, 8, 8}, 1);
        int a = conv(h, "w1", x, 16, 3, 3), p[4];
        bn_params(h, "bn", 16, p);
        int d = dt_batchnorm2d_fused(h, a, p[0], p[1], p[2], p[3], 0.1f, 1e-5f, a, 1);
        int c = conv(h, "w2", d, 16, 16, 3), r;
        int loss = dt_test_dotloss(h, dt_global_avgpool(h, c), &r);
        dt_graph_opts o = opts(k, 0);
        CHECK_OK(dt_graph_compile(h, loss, &o));
        for (int i = 0; i < dt_graph_param_count(h); i++) {
            const dt_param_info *pi = dt_graph_param_info(h, i);
            dt_test_randn(h, pi->id, 50 + (uint64_t)i, 0.3f);
            if (strstr(pi->name, ".rv")) {
                float *v = dt_graph_value(h, pi->id)->data;
                for (size_t j = 0; j < pi->numel; j++) v[j] = 0.5f + fabsf(v[j]);
            }
        }
        dt_test_randn(h, x, 1, 1.0f), dt_test_randn(h, r, 2, 1.0f);
        CHECK_OK(dt_graph_forward(h, 1));
        CHECK_OK(dt_graph_backward(h));
        ids[k][0] = x, ids[k][1] = dt_graph_find(h, "w1"), ids[k][2] = a;
    }
    CHECK(layout(g[0], ids[0][2]) == BLAYOUT, "residual = input: a runs channel-blocked");
    static const char *names[2] = {"x", "w1"};
    for (int k = 0; k < 2; k++) {
        const dt_tensor *a = dt_graph_grad(g[0], ids[0][k]), *b = dt_graph_grad(g[1], ids[1][k]);
        char what[96];
        snprintf(what, sizeof what, "residual = input: gradient of %s, blocked vs plain", names[k]);
        dt_check_close(what, a->data, b->data, dt_tensor_numel(a), 1e-5, 1e-4);
    }
    dt_graph_free(g[0]), dt_graph_free(g[1]);
}

static void finite_differences(int training) {
    net m;
    dt_graph *g = build(&m, 2, 6, 0, 0, 0);
    dt_graph_opts o = opts(0, 0);
    CHECK_OK(dt_graph_compile(g, m.loss, &o));
    CHECK(layout(g, m.b) == BLAYOUT && layout(g, m.d) == BLAYOUT && layout(g, m.i) == BLAYOUT,
          "finite differences: the batchnorms run channel-blocked");
    fill(g, &m);
    dt_gradcheck_opts go = {.training = training};
    int bad = dt_gradcheck(g, m.loss, &go);
    CHECK(bad == 0, "blocked network (%s): %d tensors failed the gradient check",
          training ? "training" : "eval", bad);
    dt_graph_free(g);
}

/* The network in training (mode 1) or with synchronised batchnorm (2), compiled with blocks of
 * 16 and of 8: loss, pooled features, every gradient and running statistic the same bits. */
static void same_bits_across_blocks(int mode) {
    net m[2];
    dt_graph *g[2];
    for (int k = 0; k < 2; k++) {
        BLOCK = k ? 8 : 16, BLAYOUT = k ? DT_LAYOUT_C8 : DT_LAYOUT_C16;
        g[k] = run(&m[k], 4, 16, 1, 1, mode, 0, 0);
        CHECK(layout(g[k], m[k].d) == BLAYOUT, "block %d: bn d runs blocked", BLOCK);
    }
    int ids[3] = {m[0].loss, m[0].j, m[0].x};
    static const char *names[3] = {"loss", "pooled features", "input gradient"};
    for (int k = 0; k < 3; k++) {
        const dt_tensor *a = k < 2 ? dt_graph_value(g[0], ids[k]) : dt_graph_grad(g[0], ids[k]);
        const dt_tensor *b = k < 2 ? dt_graph_value(g[1], ids[k]) : dt_graph_grad(g[1], ids[k]);
        CHECK(memcmp(a->data, b->data, dt_tensor_nbytes(a)) == 0,
              "mode %d: %s, blocks of 16 vs 8: same bits", mode, names[k]);
    }
    for (int i = 0; i < dt_graph_param_count(g[0]); i++) {
        const dt_param_info *pi = dt_graph_param_info(g[0], i);
        int state = pi->flags & DT_PARAM_STATE;
        const dt_tensor *a = state ? dt_graph_value(g[0], pi->id) : dt_graph_grad(g[0], pi->id);
        const dt_tensor *b = state ? dt_graph_value(g[1], pi->id) : dt_graph_grad(g[1], pi->id);
        CHECK(memcmp(a->data, b->data, dt_tensor_nbytes(a)) == 0,
              "mode %d: %s %s, blocks of 16 vs 8: same bits", mode, pi->name,
              state ? "value" : "gradient");
    }
    dt_graph_free(g[0]), dt_graph_free(g[1]);
}

int main(void) {
    for (int k = 0; k < 2; k++) {
        BLOCK = k ? 8 : 16, BLAYOUT = k ? DT_LAYOUT_C8 : DT_LAYOUT_C16;
        choice();
        for (int mode = 0; mode < 3; mode++) equivalence(mode, 0);
        equivalence(1, 1);
        same_bits_through_pool();
        residual_is_input();
        finite_differences(1);
        finite_differences(0);
    }
    same_bits_across_blocks(1);
    same_bits_across_blocks(2);
    return dt_test_finish("cnn_layout");
}
