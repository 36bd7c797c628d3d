/* ResNet-18/34/50/101/152 as torchvision builds them (v1.5: the stride sits on the 3x3 conv of
 * a bottleneck), with torchvision's parameter names, plus a small-image stem option. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "dtrain/rng.h"

static int stage_blocks(int depth, int s) {
    static const int b18[4] = {2, 2, 2, 2}, b34[4] = {3, 4, 6, 3}, b101[4] = {3, 4, 23, 3},
                     b152[4] = {3, 8, 36, 3};
    switch (depth) {
    case 18: return b18[s];
    case 34:
    case 50: return b34[s];
    case 101: return b101[s];
    case 152: return b152[s];
    }
    return -1;
}

static int bottleneck(int depth) { return depth >= 50; }

static dt_status check(const dt_resnet_config *c) {
    if (stage_blocks(c->depth, 0) < 0)
        return dt_error_set(DT_ERR_INVALID, "resnet: depth %d (expected 18, 34, 50, 101 or 152)",
                            c->depth);
    if (c->in_channels <= 0 || c->num_classes <= 0 || c->width <= 0)
        return dt_error_set(DT_ERR_INVALID,
                            "resnet: in_channels %d, num_classes %d, width %d must be > 0",
                            c->in_channels, c->num_classes, c->width);
    return DT_OK;
}

/* A batchnorm's parameters, created in torchvision's order (weight, bias, running mean, var). */
typedef struct bn_params {
    int w, b, rm, rv;
} bn_params;

/* conv (no bias) with parameter <prefix>.<conv>.weight, then the parameters of the batchnorm
 * <prefix>.<bn> that follows it (created here so that every parameter keeps its place in the
 * flat buffers whatever is built between the conv and its batchnorm); *y receives the conv. */
static bn_params conv_then_bn_params(dt_graph *g, int x, const char *conv, const char *bn, int cin,
                                     int cout, int k, int stride, int *y) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s.weight", conv);
    int w = dt_graph_param(g, nm, DT_F32, 4, (int64_t[]){cout, cin, k, k}, 0);
    *y = dt_conv2d(g, x, w, -1, stride, stride, k / 2, k / 2, 1, 1, 1);
    int64_t sh[1] = {cout};
    bn_params p;
    snprintf(nm, sizeof nm, "%s.weight", bn);
    p.w = dt_graph_param(g, nm, DT_F32, 1, sh, DT_PARAM_NO_DECAY);
    snprintf(nm, sizeof nm, "%s.bias", bn);
    p.b = dt_graph_param(g, nm, DT_F32, 1, sh, DT_PARAM_NO_DECAY);
    snprintf(nm, sizeof nm, "%s.running_mean", bn);
    p.rm = dt_graph_param(g, nm, DT_F32, 1, sh, DT_PARAM_STATE);
    snprintf(nm, sizeof nm, "%s.running_var", bn);
    p.rv = dt_graph_param(g, nm, DT_F32, 1, sh, DT_PARAM_STATE);
    return p;
}

/* Batchnorm (PyTorch's momentum and eps) with the epilogue relu?(. + residual?) fused into it:
 * the same values as separate batchnorm, add and relu ops, with fewer passes over memory. */
static int bn_act(dt_graph *g, int y, bn_params p, int residual, int relu) {
    return dt_batchnorm2d_fused(g, y, p.w, p.b, p.rm, p.rv, 0.1f, 1e-5f, residual, relu);
}

/* conv (no bias) + batchnorm (+ relu) with names <prefix>.<conv> and <prefix>.<bn>. */
static int conv_bn(dt_graph *g, int x, const char *conv, const char *bn, int cin, int cout, int k,
                   int stride, int relu) {
    int y;
    bn_params p = conv_then_bn_params(g, x, conv, bn, cin, cout, k, stride, &y);
    return bn_act(g, y, p, -1, relu);
}

/* One residual block; *cin is updated to the block's output channels. The last batchnorm takes
 * the shortcut and the ReLU as its epilogue, so the shortcut is built before it. */
static int block(dt_graph *g, const dt_resnet_config *c, int x, const char *p, int *cin,
                 int planes, int stride) {
    char a[128], b[128];
    int exp = bottleneck(c->depth) ? 4 : 1, out = planes * exp, h;
    bn_params last;
#define N2(s1, s2) (snprintf(a, sizeof a, "%s.%s", p, s1), snprintf(b, sizeof b, "%s.%s", p, s2))
    if (bottleneck(c->depth)) {
        N2("conv1", "bn1");
        h = conv_bn(g, x, a, b, *cin, planes, 1, 1, 1);
        N2("conv2", "bn2");
        h = conv_bn(g, h, a, b, planes, planes, 3, stride, 1);
        N2("conv3", "bn3");
        last = conv_then_bn_params(g, h, a, b, planes, out, 1, 1, &h);
    } else {
        N2("conv1", "bn1");
        h = conv_bn(g, x, a, b, *cin, planes, 3, stride, 1);
        N2("conv2", "bn2");
        last = conv_then_bn_params(g, h, a, b, planes, planes, 3, 1, &h);
    }
    int sc = x;
    if (stride != 1 || *cin != out) {
        N2("downsample.0", "downsample.1");
        sc = conv_bn(g, x, a, b, *cin, out, 1, stride, 0);
    }
#undef N2
    *cin = out;
    return bn_act(g, h, last, sc, 1);
}

int dt_resnet_build(dt_graph *g, const dt_resnet_config *c, int x) {
    if (check(c) != DT_OK) return -1;
    const dt_tensor *xt = dt_graph_shape(g, x);
    if (!xt || xt->ndim != 4 || xt->shape[1] != c->in_channels) {
        char s[96] = "?";
        if (xt) dt_shape_str(s, sizeof s, xt->ndim, xt->shape);
        dt_error_set(DT_ERR_SHAPE, "resnet: input %s, expected [N, %d, H, W]", s, c->in_channels);
        return -1;
    }
    int w = c->width, h;
    if (c->small_stem) {
        h = conv_bn(g, x, "conv1", "bn1", c->in_channels, w, 3, 1, 1);
    } else {
        /* 7x7 stride-2 conv, padding 3 (k / 2), then 3x3 stride-2 max-pool. */
        h = conv_bn(g, x, "conv1", "bn1", c->in_channels, w, 7, 2, 1);
        h = dt_maxpool2d(g, h, 3, 3, 2, 2, 1, 1);
    }
    int cin = w;
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < stage_blocks(c->depth, s); i++) {
            char p[64];
            snprintf(p, sizeof p, "layer%d.%d", s + 1, i);
            int before = dt_graph_node_count(g) - 1;
            h = block(g, c, h, p, &cin, w << s, (s > 0 && i == 0) ? 2 : 1);
            if (c->recompute && h >= 0 && dt_graph_recompute(g, before, h) != DT_OK) return -1;
        }
    }
    h = dt_global_avgpool(g, h);
    int fw = dt_graph_param(g, "fc.weight", DT_F32, 2, (int64_t[]){c->num_classes, cin}, 0);
    int fb = dt_graph_param(g, "fc.bias", DT_F32, 1, (int64_t[]){c->num_classes},
                            DT_PARAM_NO_DECAY);
    return dt_linear(g, h, fw, fb);
}

int64_t dt_resnet_param_count(const dt_resnet_config *c) {
    if (check(c) != DT_OK) return -1;
    int w = c->width, k = c->small_stem ? 3 : 7, exp = bottleneck(c->depth) ? 4 : 1;
    int64_t n = (int64_t)c->in_channels * w * k * k + 2 * w, cin = w;
    for (int s = 0; s < 4; s++) {
        int64_t planes = (int64_t)w << s, out = planes * exp;
        for (int i = 0; i < stage_blocks(c->depth, s); i++) {
            int stride = (s > 0 && i == 0) ? 2 : 1;
            if (exp == 4)
                n += cin * planes + 2 * planes + planes * planes * 9 + 2 * planes + planes * out +
                     2 * out;
            else
                n += cin * planes * 9 + 2 * planes + planes * planes * 9 + 2 * planes;
            if (stride != 1 || cin != out) n += cin * out + 2 * out;
            cin = out;
        }
    }
    return n + cin * c->num_classes + c->num_classes;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

dt_status dt_resnet_init(dt_graph *g, uint64_t seed) {
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        const dt_tensor *t = dt_graph_value(g, pi->id);
        if (!t || !t->data) return dt_error_set(DT_ERR_STATE, "resnet init: graph not compiled");
        float *p = t->data;
        int64_t n = (int64_t)pi->numel;
        if (t->ndim == 4) { /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
            double fan_out = (double)t->shape[0] * t->shape[2] * t->shape[3];
            dt_rng_normal(p, n, seed, (uint32_t)i, 0, 0.0f, (float)sqrt(2.0 / fan_out));
        } else if (t->ndim == 2) { /* nn.Linear default: U(-1/sqrt(in), 1/sqrt(in)) */
            float b = 1.0f / sqrtf((float)t->shape[1]);
            dt_rng_uniform(p, n, seed, (uint32_t)i, 0, -b, b);
        } else if (!strcmp(pi->name, "fc.bias")) {
            const dt_tensor *w = dt_graph_value(g, dt_graph_find(g, "fc.weight"));
            float b = w ? 1.0f / sqrtf((float)w->shape[1]) : 0.0f;
            dt_rng_uniform(p, n, seed, (uint32_t)i, 0, -b, b);
        } else {
            float v = (ends_with(pi->name, "running_var") || ends_with(pi->name, ".weight")) ? 1 : 0;
            for (int64_t k = 0; k < n; k++) p[k] = v;
        }
    }
    return DT_OK;
}
