/* Element-wise activations: ReLU, GELU (erf and tanh forms, as torch.nn.functional.gelu) and
 * SiLU, forward and backward, f32.
 *
 * glibc's vector math (libmvec) is only declared under -ffast-math, so a loop calling expf()
 * stays scalar. The exp/erf/tanh below are plain arithmetic and selects that GCC vectorises
 * inside `omp simd` loops. Accuracy: exp about 2 ulp (Cephes polynomial), tanh about 2 ulp,
 * erf 1.5e-7 absolute (Abramowitz & Stegun 7.1.26: the same formula PyTorch's vectorised CPU
 * erf uses, so GELU matches PyTorch closely). The exponential is dt_vexpf (ops/vmath.h). */
#include <math.h>
#include "dtrain/ops_nn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

/* The clamps and selects in dt_vexpf (ops/vmath.h) and friends are FP compares; under the default
 * -ftrapping-math GCC will not if-convert the branches that jump threading makes of them, and
 * then no loop here vectorises. Nothing in dtrain reads FP exception flags, so trapping math
 * buys nothing (values are unchanged: IEEE results are the same either way). */
#if defined(__GNUC__) && !defined(__clang__) /* clang if-converts these anyway */
#pragma GCC optimize("no-trapping-math")
#endif

#include "ops/vmath.h"

#define ACT_PAR_MIN 32768 /* elements below which a parallel region costs more than it saves */

/* tanh: Cephes odd polynomial for |x| < 0.625 (no cancellation near 0), else
 * 1 - 2 / (e^(2|x|) + 1) with the sign restored. */
static inline float act_tanhf(float x) {
    const float ax = fabsf(x);
    const float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = p * z * x + x;
    const float e = dt_vexpf(2.0f * (ax > 20.0f ? 20.0f : ax));
    const float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
    return ax < 0.625f ? small : big;
}

/* erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), as PyTorch's Vectorized<float>::erf. */
static inline float act_erff(float x) {
    const float ax = fabsf(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    float r = 1.061405429f;
    r = r * t - 1.453152027f;
    r = r * t + 1.421413741f;
    r = r * t - 0.284496736f;
    r = r * t + 0.254829592f;
    const float y = 1.0f - r * t * dt_vexpf(-ax * ax);
    return copysignf(y, x);
}

static inline float act_sigmoidf(float x) {
    return 1.0f / (1.0f + dt_vexpf(-x));
}

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f
#define GELU_SQRT1_2 0.7071067811865476f
#define GELU_INV_SQRT_2PI 0.3989422804014327f

/* Derivatives, d y / d x. */
/* GELU erf: Phi(x) + x phi(x). */
static inline float gelu_erf_grad(float v) {
    const float cdf = 0.5f * (1.0f + act_erff(v * GELU_SQRT1_2));
    const float pdf = GELU_INV_SQRT_2PI * dt_vexpf(-0.5f * v * v);
    return cdf + v * pdf;
}
/* GELU tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 k1 x^2), t = tanh(u). */
static inline float gelu_tanh_grad(float v) {
    const float v2 = v * v;
    const float t = act_tanhf(GELU_K0 * (v + GELU_K1 * v2 * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * v2);
}
/* SiLU: s (1 + x (1 - s)), s = sigmoid(x). */
static inline float silu_grad(float v) {
    const float s = act_sigmoidf(v);
    return s * (1.0f + v * (1.0f - s));
}

/* ---------------------------------------------------------------- kernels
 * All: x, y, gout, gin [n]. Backward writes gin = beta * gin + contribution; beta 0 never
 * reads gin (it may hold garbage from a reused buffer), so each backward has a store loop and
 * an accumulate loop (a conditional load would also keep GCC from vectorising). */

/* gin [n] (= or +=) gout [n] * EXPR, EXPR using x[i] / y[i]; `beta` selects. */
#define ACT_BACKWARD_LOOP(gin, beta, n, EXPR)                                                      \
    do {                                                                                           \
        if ((beta) == 0.0f) {                                                                      \
            _Pragma(                                                                               \
                "omp parallel for simd if (n > ACT_PAR_MIN) schedule(static)") for (int64_t i = 0; \
                                                                                    i < (n); i++)( \
                gin)[i] = gout[i] * (EXPR);                                                        \
        } else {                                                                                   \
            _Pragma(                                                                               \
                "omp parallel for simd if (n > ACT_PAR_MIN) schedule(static)") for (int64_t i = 0; \
                                                                                    i < (n); i++)( \
                gin)[i] += gout[i] * (EXPR);                                                       \
        }                                                                                          \
    } while (0)

static void relu_forward_f32(float *y, const float *x, int64_t n) {
#pragma omp parallel for simd if (n > ACT_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN passes through */
}

/* Uses the output: y > 0 exactly where x > 0. */
static void relu_backward_f32(float *gin, float beta, const float *gout, const float *y,
                              int64_t n) {
    ACT_BACKWARD_LOOP(gin, beta, n, y[i] > 0.0f ? 1.0f : 0.0f);
}

/* y = x * Phi(x) (erf) or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (tanh). */
static void gelu_forward_f32(float *y, const float *x, int64_t n, int tanh_approx) {
    if (tanh_approx) {
#pragma omp parallel for simd if (n > ACT_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            const float u = GELU_K0 * (v + GELU_K1 * v * v * v);
            y[i] = 0.5f * v * (1.0f + act_tanhf(u));
        }
    } else {
#pragma omp parallel for simd if (n > ACT_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            y[i] = v * 0.5f * (1.0f + act_erff(v * GELU_SQRT1_2));
        }
    }
}

static void gelu_backward_f32(float *gin, float beta, const float *gout, const float *x, int64_t n,
                              int tanh_approx) {
    if (tanh_approx)
        ACT_BACKWARD_LOOP(gin, beta, n, gelu_tanh_grad(x[i]));
    else
        ACT_BACKWARD_LOOP(gin, beta, n, gelu_erf_grad(x[i]));
}

static void silu_forward_f32(float *y, const float *x, int64_t n) {
#pragma omp parallel for simd if (n > ACT_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * act_sigmoidf(x[i]);
}

static void silu_backward_f32(float *gin, float beta, const float *gout, const float *x,
                              int64_t n) {
    ACT_BACKWARD_LOOP(gin, beta, n, silu_grad(x[i]));
}

/* ---------------------------------------------------------------- op glue */

static int64_t act_n(const dt_op_ctx *c) {
    return dt_tensor_numel(&c->out);
}

static dt_status relu_forward(const dt_op_ctx *c) {
    relu_forward_f32(c->out.data, c->in[0].data, act_n(c));
    return DT_OK;
}
static dt_status relu_backward(const dt_op_ctx *c) {
    if (c->gin[0].data)
        relu_backward_f32(c->gin[0].data, c->gin_beta[0], c->gout.data, c->out.data, act_n(c));
    return DT_OK;
}
static const dt_op_def relu_def = {
    .name = "relu",
    .flags = DT_OPF_BWD_OUT,
    .forward = relu_forward,
    .backward = relu_backward,
    DT_CUDA_OP_ENTRIES(relu),
};

/* ip[0]: 1 for the tanh approximation. */
static dt_status gelu_forward(const dt_op_ctx *c) {
    gelu_forward_f32(c->out.data, c->in[0].data, act_n(c), (int)c->node->ip[0]);
    return DT_OK;
}
static dt_status gelu_backward(const dt_op_ctx *c) {
    if (c->gin[0].data)
        gelu_backward_f32(c->gin[0].data, c->gin_beta[0], c->gout.data, c->in[0].data, act_n(c),
                          (int)c->node->ip[0]);
    return DT_OK;
}
static const dt_op_def gelu_def = {
    .name = "gelu",
    .flags = DT_OPF_BWD_IN(0),
    .forward = gelu_forward,
    .backward = gelu_backward,
};

static dt_status silu_forward(const dt_op_ctx *c) {
    silu_forward_f32(c->out.data, c->in[0].data, act_n(c));
    return DT_OK;
}
static dt_status silu_backward(const dt_op_ctx *c) {
    if (c->gin[0].data)
        silu_backward_f32(c->gin[0].data, c->gin_beta[0], c->gout.data, c->in[0].data, act_n(c));
    return DT_OK;
}
static const dt_op_def silu_def = {
    .name = "silu",
    .flags = DT_OPF_BWD_IN(0),
    .forward = silu_forward,
    .backward = silu_backward,
    DT_CUDA_OP_ENTRIES(silu),
};

/* ---------------------------------------------------------------- builders */

static int act_add(dt_graph *g, const dt_op_def *def, int x, int64_t param) {
    if (dt_ids_bad(g, def->name, 1, &x)) return -1;
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    if (dt_x_f32_check(def->name, xt)) return -1;
    return dt_node_add(g, def, 1, &x, DT_F32, xt->ndim, xt->shape, &param, 1, NULL, 0);
}

int dt_relu(dt_graph *g, int x) {
    return act_add(g, &relu_def, x, 0);
}
int dt_gelu(dt_graph *g, int x, int tanh_approx) {
    return act_add(g, &gelu_def, x, tanh_approx ? 1 : 0);
}
int dt_silu(dt_graph *g, int x) {
    return act_add(g, &silu_def, x, 0);
}
