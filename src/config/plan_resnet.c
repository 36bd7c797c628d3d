/* Activation memory of a ResNet training step, op by op as dt_resnet_build (src/nn/resnet.c)
 * builds it, walking the architecture's shapes (f32 = 4 bytes):
 *
 *   op                          saved for backward
 *   conv2d                      its input x (scratch: oneDNN's staging and scratchpads, asked
 *                               of the op)
 *   batchnorm2d (+ add + relu)  its input (the conv output), mean/rstd [2C + 1]; with the
 *                               ReLU fused (dt_batchnorm2d_fused), also its output
 *   maxpool2d                   argmax indices, int32 per output
 *   global avgpool  nothing;  linear (fc): its input;  cross entropy: logits, lse
 *
 * So every conv output and every post-ReLU output stays until backward (plus the max-pool output
 * in the stock stem); the downsample's batchnorm output is transient. A convolution's scratch
 * depends on the algorithm oneDNN picks for the shape (Winograd's backward-weights scratchpad is
 * ten times the weights at 4x4 outputs, direct convolution's about one), so it is not guessed:
 * the conv op's own prepare() sizes it on a one-node graph, once per distinct shape. */
#include <string.h>
#include "config/plan_impl.h"
#include "dtrain/ops.h"
#include "graph/op.h"

#define F32 4

typedef struct conv_ws {
    int64_t key[7], f, b;
} conv_ws;

typedef struct rctx {
    ps_graph *g;
    int64_t n; /* batch */
    conv_ws cache[64];
    int n_cache;
    int64_t state; /* batchnorm running mean + var, bytes */
    dt_status st;
} rctx;

typedef struct fmap {
    int id;
    int64_t c, h, w;
} fmap;

static int64_t fm_bytes(int64_t n, fmap f) {
    return n * f.c * f.h * f.w * F32;
}

static int64_t out_side(int64_t in, int k, int stride) {
    int p = k / 2;
    return (in + 2 * p - k) / stride + 1;
}

/* Scratch of conv2d (x [n, C, H, W], w [cout, C, k, k], padding k / 2) as the op sizes it. */
static void conv_scratch(rctx *r, fmap x, int64_t cout, int k, int stride, int64_t *f, int64_t *b) {
    int x_grad = x.id != PS_LEAF;
    int64_t key[7] = {x.c, x.h, x.w, cout, k, stride, x_grad};
    for (int i = 0; i < r->n_cache; i++)
        if (!memcmp(r->cache[i].key, key, sizeof key)) {
            *f = r->cache[i].f, *b = r->cache[i].b;
            return;
        }
    *f = *b = 0;
    if (r->st != DT_OK) return;
    dt_graph *g = dt_graph_init();
    if (!g) {
        r->st = dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
        return;
    }
    int xi = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){r->n, x.c, x.h, x.w}, x_grad);
    int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){cout, x.c, k, k}, 0);
    int y = dt_conv2d(g, xi, w, -1, stride, stride, k / 2, k / 2, 1, 1, 1);
    dt_node *nd = y >= 0 ? dt_graph_node(g, y) : NULL;
    if (!nd)
        r->st = DT_ERR_INTERNAL;
    else if (nd->op->prepare)
        r->st = nd->op->prepare(g, nd);
    if (r->st == DT_OK) *f = (int64_t)nd->ws_fwd, *b = (int64_t)nd->ws_bwd;
    dt_graph_free(g);
    if (r->n_cache < (int)(sizeof r->cache / sizeof r->cache[0])) {
        conv_ws *c = &r->cache[r->n_cache++];
        memcpy(c->key, key, sizeof key);
        c->f = *f, c->b = *b;
    }
}

/* conv (no bias), then the parameters of its batchnorm. */
static fmap conv(rctx *r, fmap x, int64_t cout, int k, int stride) {
    fmap y = {0, cout, out_side(x.h, k, stride), out_side(x.w, k, stride)};
    int64_t wsf, wsb;
    conv_scratch(r, x, cout, k, stride, &wsf, &wsb);
    y.id = dt_ps_add(r->g, fm_bytes(r->n, y), 0, wsf, wsb, PS_BWD_IN(0) | PS_BWD_IN(1), 2, x.id,
                     PS_TRAIN, 0);
    r->state += 2 * cout * F32;
    return y;
}

/* Batchnorm on y with its fused epilogue relu?(. + res?) (res NULL: none). */
static fmap bn(rctx *r, fmap y, const fmap *res, int relu) {
    unsigned fl = PS_BWD_IN(0) | PS_BWD_IN(1);
    if (relu || res) fl |= PS_BWD_OUT;
    y.id = dt_ps_add(r->g, fm_bytes(r->n, y), (2 * y.c + 1) * F32, 0, 0, fl, res ? 3 : 2, y.id,
                     PS_TRAIN, res ? res->id : 0);
    return y;
}

static fmap block(rctx *r, fmap x, int bottleneck, int64_t planes, int stride) {
    int64_t out = bottleneck ? planes * 4 : planes;
    fmap h;
    if (bottleneck) {
        h = bn(r, conv(r, x, planes, 1, 1), NULL, 1);
        h = bn(r, conv(r, h, planes, 3, stride), NULL, 1);
        h = conv(r, h, out, 1, 1);
    } else {
        h = bn(r, conv(r, x, planes, 3, stride), NULL, 1);
        h = conv(r, h, planes, 3, 1);
    }
    fmap sc = x;
    if (stride != 1 || x.c != out) sc = bn(r, conv(r, x, out, 1, stride), NULL, 0);
    return bn(r, h, &sc, 1);
}

dt_status dt_plan_resnet_activations(const dt_resnet_config *c, const plan_opts *o,
                                     ps_result *res) {
    static const int blocks[5][4] = {
        {2, 2, 2, 2}, {3, 4, 6, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}, {3, 8, 36, 3}};
    int di = c->depth == 18    ? 0
             : c->depth == 34  ? 1
             : c->depth == 50  ? 2
             : c->depth == 101 ? 3
             : c->depth == 152 ? 4
                               : -1;
    if (di < 0)
        return dt_error_set(DT_ERR_INVALID,
                            "plan: ResNet depth %d (expected 18, 34, 50, 101 or 152)", c->depth);
    if (o->image_size <= 0)
        return dt_error_set(DT_ERR_INVALID, "plan: ResNet needs the image size (data.image_size)");
    ps_graph g = {.seg = -1};
    rctx r = {.g = &g, .n = o->batch};
    fmap h = {PS_LEAF, c->in_channels, o->image_size, o->image_size};
    if (c->small_stem) {
        h = bn(&r, conv(&r, h, c->width, 3, 1), NULL, 1);
    } else {
        h = bn(&r, conv(&r, h, c->width, 7, 2), NULL, 1);
        fmap p = {0, h.c, (h.h + 2 - 3) / 2 + 1, (h.w + 2 - 3) / 2 + 1};
        int64_t pb = fm_bytes(r.n, p);
        p.id = dt_ps_add(&g, pb, pb, 0, 0, 0, 1, h.id, 0, 0); /* aux: int32 argmax per output */
        h = p;
    }
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < blocks[di][s]; i++) {
            dt_ps_seg_begin(&g, o->recompute);
            h = block(&r, h, c->depth >= 50, (int64_t)c->width << s, (s > 0 && i == 0) ? 2 : 1);
            dt_ps_seg_end(&g);
        }
    int pooled = dt_ps_add(&g, r.n * h.c * F32, 0, 0, 0, 0, 1, h.id, 0, 0);
    int logits = dt_ps_add(&g, r.n * c->num_classes * F32, 0, 0, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2,
                           pooled, PS_TRAIN, 0);
    dt_ps_add(&g, F32, (r.n * F32 + 7) / 8 * 8 + 8, r.n * F32, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2,
              logits, PS_LEAF, 0);
    dt_status st = r.st != DT_OK ? r.st : dt_ps_run(&g, res);
    res->state = r.state;
    dt_ps_free(&g);
    return st;
}
