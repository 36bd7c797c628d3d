/* Unit tests of the optimizers, schedules and clipping: hand-computed steps, slices that start
 * and end inside a parameter (bit-identical to the full buffer), thread-count independence,
 * groups, checkpoint state round trip, and bad calls. No reference files needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/optim.h"
#include "dtrain/runtime.h"
#include "harness.h"

/* Hand-computed values are checked to 1e-6 absolute (f32 arithmetic on O(1) numbers). */
#define HAND_TOL 1e-6

static dt_optim *make(dt_optim_config c, size_t n, size_t lo, size_t hi, const dt_optim_group *g,
                      int ng) {
    dt_optim *o = NULL;
    CHECK_OK(dt_optim_init(&c, n, lo, hi, g, ng, &o));
    return o;
}

/* Runs `steps` steps with constant gradient g on p (n elements, one group). */
static void run_const(dt_optim_config c, float *p, const float *g, size_t n, float lr, int steps) {
    dt_optim *o = make(c, n, 0, n, NULL, 0);
    for (int s = 0; o && s < steps; s++) CHECK_OK(dt_optim_step(o, p, g, lr));
    dt_optim_free(o);
}

static void test_sgd_hand(void) {
    const float g[2] = {0.5f, 1.0f};
    /* momentum 0.9, wd 0.1, lr 0.1. Element 0: d = 0.5 + 0.1*1 = 0.6, buf = 0.6, p = 0.94;
     * d = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.594 = 1.134, p = 0.94 - 0.1134 = 0.8266.
     * Element 1: d = 1 - 0.2 = 0.8, p = -2.08; d = 1 - 0.208 = 0.792, buf = 0.72 + 0.792 =
     * 1.512, p = -2.08 - 0.1512 = -2.2312. */
    dt_optim_config c = dt_optim_config_default(DT_OPTIM_SGD);
    c.momentum = 0.9;
    c.weight_decay = 0.1;
    float p[2] = {1.0f, -2.0f};
    run_const(c, p, g, 2, 0.1f, 2);
    dt_check_close("sgd momentum", p, (float[]){0.8266f, -2.2312f}, 2, HAND_TOL, 0);

    /* nesterov: step 1 d = 0.6, buf = 0.6, update 0.6 + 0.54 = 1.14 -> p = 0.886;
     * step 2 d = 0.5 + 0.0886 = 0.5886, buf = 0.54 + 0.5886 = 1.1286,
     * update 0.5886 + 1.01574 = 1.60434 -> p = 0.886 - 0.160434 = 0.725566. */
    c.nesterov = 1;
    p[0] = 1.0f;
    run_const(c, p, g, 1, 0.1f, 2);
    dt_check_close("sgd nesterov", p, (float[]){0.725566f}, 1, HAND_TOL, 0);

    /* dampening 0.5, no decay: buf = 0.5 at step 1 (no dampening on the first step, as torch),
     * p = 0.95; buf = 0.45 + 0.25 = 0.7, p = 0.95 - 0.07 = 0.88. */
    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.momentum = 0.9;
    c.dampening = 0.5;
    p[0] = 1.0f;
    run_const(c, p, g, 1, 0.1f, 2);
    dt_check_close("sgd dampening", p, (float[]){0.88f}, 1, HAND_TOL, 0);

    /* plain SGD with decay: p = 1 - 0.1 * (0.5 + 0.1) = 0.94; 0.94 - 0.1 * (0.5 + 0.094). */
    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.weight_decay = 0.1;
    p[0] = 1.0f;
    run_const(c, p, g, 1, 0.1f, 2);
    dt_check_close("sgd plain", p, (float[]){0.8806f}, 1, HAND_TOL, 0);
}

static void test_adamw_hand(void) {
    /* With a constant gradient, v_t / (1 - b2^t) = g^2 and m_t / (1 - b1^t) = g, so each step is
     * p = p * (1 - lr * wd) - lr * g / (|g| + eps):  lr 0.1, wd 0.1, g 0.5:
     * 1 -> 0.99 - 0.1 = 0.89 -> 0.8811 - 0.1 = 0.7811 (eps shifts it by ~4e-9). */
    dt_optim_config c = dt_optim_config_default(DT_OPTIM_ADAMW);
    c.weight_decay = 0.1;
    float p[1] = {1.0f}, g[1] = {0.5f};
    run_const(c, p, g, 1, 0.1f, 2);
    dt_check_close("adamw 2 steps", p, (float[]){0.7811f}, 1, HAND_TOL, 0);

    /* Groups: [0,1) decays, [1,2) does not (wd_scale 0), [2,3) half lr, [3,4) in no group. */
    dt_optim_group gr[3] = {{0, 1, 1.0f, 1.0f}, {1, 1, 0.0f, 1.0f}, {2, 1, 1.0f, 0.5f}};
    float q[4] = {1, 1, 1, 1}, gq[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    dt_optim *o = make(c, 4, 0, 4, gr, 3);
    if (o) CHECK_OK(dt_optim_step(o, q, gq, 0.1f));
    /* decay: 0.99 - 0.1; none: 1 - 0.1; half lr: 1 * (1 - 0.005) - 0.05; untouched: 1 */
    dt_check_close("adamw groups", q, (float[]){0.89f, 0.9f, 0.945f, 1.0f}, 4, HAND_TOL, 0);
    dt_optim_free(o);
}

/* Deterministic pseudo-random data in [-1, 1) (no dependence on the harness RNG). */
static void fill(float *x, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) * (1.0 / 8388608.0) - 1.0);
    }
}

/* A slice optimizer computes bit-for-bit what the full one computes on its elements, and the
 * full one does not depend on the thread count. Layout: 5 params, boundaries inside params. */
static void test_slices(dt_optim_kind kind, double momentum, int nesterov, const char *what) {
    enum { N = 70001, STEPS = 4 }; /* over the parallel threshold; odd so tails are exercised */
    const dt_optim_group gr[5] = {{0, 1003, 1, 1},
                                  {1003, 37, 0, 1},
                                  {1040, 40000, 1, 0.5f},
                                  {41040, 28960, 1, 1},
                                  {70000, 1, 0, 1}};
    const size_t cuts[] = {0, 517, 1020, 1040, 23457, 70001}; /* 5 slices */
    dt_optim_config c = dt_optim_config_default(kind);
    c.weight_decay = 0.05;
    c.momentum = momentum;
    c.nesterov = nesterov;
    float *p0 = malloc(N * sizeof(float)), *g = malloc((size_t)STEPS * N * sizeof(float));
    float *pa = malloc(N * sizeof(float)), *pb = malloc(N * sizeof(float));
    float *pc = malloc(N * sizeof(float));
    fill(p0, N, 1);
    fill(g, (size_t)STEPS * N, 2);
    memcpy(pa, p0, N * sizeof(float));
    memcpy(pb, p0, N * sizeof(float));
    memcpy(pc, p0, N * sizeof(float));
    const float lrs[STEPS] = {0.01f, 0.02f, 0.015f, 0.005f};

    int nt = dt_threads_get();
    dt_threads_set(2);
    dt_optim *full = make(c, N, 0, N, gr, 5);
    for (int s = 0; full && s < STEPS; s++) CHECK_OK(dt_optim_step(full, pa, g + s * N, lrs[s]));
    dt_threads_set(1);
    dt_optim *one = make(c, N, 0, N, gr, 5);
    for (int s = 0; one && s < STEPS; s++) CHECK_OK(dt_optim_step(one, pc, g + s * N, lrs[s]));
    dt_threads_set(2);
    dt_optim *sl[5] = {0};
    for (int k = 0; k < 5; k++) sl[k] = make(c, N, cuts[k], cuts[k + 1], gr, 5);
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < 5; k++)
            if (sl[k]) CHECK_OK(dt_optim_step(sl[k], pb + cuts[k], g + s * N + cuts[k], lrs[s]));
    dt_threads_set(nt);

    CHECK(memcmp(pa, pb, N * sizeof(float)) == 0, "%s: slices differ from the full buffer", what);
    CHECK(memcmp(pa, pc, N * sizeof(float)) == 0, "%s: 1 thread differs from 2 threads", what);
    CHECK(memcmp(pa, p0, N * sizeof(float)) != 0, "%s: nothing was updated", what);
    /* moment buffers of each slice equal the full one's [lo, hi) */
    dt_optim_state sf, ss;
    if (full) CHECK_OK(dt_optim_get_state(full, &sf));
    for (int k = 0; full && k < 5; k++) {
        if (!sl[k]) continue;
        CHECK_OK(dt_optim_get_state(sl[k], &ss));
        CHECK(ss.n_buffers == sf.n_buffers && ss.lo == cuts[k] && ss.hi == cuts[k + 1] &&
                  ss.step == STEPS,
              "%s: slice %d state header", what, k);
        for (int b = 0; b < ss.n_buffers; b++)
            CHECK(memcmp(ss.buffers[b], sf.buffers[b] + cuts[k],
                         (cuts[k + 1] - cuts[k]) * sizeof(float)) == 0,
                  "%s: slice %d buffer %s differs", what, k, ss.names[b]);
    }
    dt_optim_free(full);
    dt_optim_free(one);
    for (int k = 0; k < 5; k++) dt_optim_free(sl[k]);
    free(p0);
    free(g);
    free(pa);
    free(pb);
    free(pc);
}

/* Save the state after 3 steps, restore it into a fresh optimizer, continue: bit-identical. */
static void test_state_roundtrip(dt_optim_kind kind) {
    enum { N = 300, STEPS = 6, CUT = 3 };
    dt_optim_config c = dt_optim_config_default(kind);
    c.momentum = 0.9;
    float p[N], q[N], g[STEPS][N];
    fill(p, N, 7);
    memcpy(q, p, sizeof p);
    fill(&g[0][0], (size_t)STEPS * N, 8);
    dt_optim *a = make(c, N, 0, N, NULL, 0);
    dt_optim *b = make(c, N, 0, N, NULL, 0);
    if (!a || !b) return;
    for (int s = 0; s < STEPS; s++) dt_optim_step(a, p, g[s], 0.01f);
    for (int s = 0; s < CUT; s++) dt_optim_step(b, q, g[s], 0.01f);
    dt_optim_state sb, sb2;
    CHECK_OK(dt_optim_get_state(b, &sb));
    CHECK(sb.step == CUT, "step %ld", (long)sb.step);
    CHECK(sb.n_buffers == (kind == DT_OPTIM_ADAMW ? 2 : 1), "n_buffers %d", sb.n_buffers);
    CHECK(strcmp(sb.names[0], kind == DT_OPTIM_ADAMW ? "exp_avg" : "momentum_buffer") == 0,
          "name %s", sb.names[0]);
    float saved[2][N];
    for (int k = 0; k < sb.n_buffers; k++) memcpy(saved[k], sb.buffers[k], sizeof saved[k]);
    dt_optim_free(b);
    dt_optim *r = make(c, N, 0, N, NULL, 0);
    if (!r) return;
    CHECK_OK(dt_optim_get_state(r, &sb2));
    for (int k = 0; k < sb2.n_buffers; k++) memcpy(sb2.buffers[k], saved[k], sizeof saved[k]);
    CHECK_OK(dt_optim_set_step(r, CUT));
    for (int s = CUT; s < STEPS; s++) dt_optim_step(r, q, g[s], 0.01f);
    CHECK(memcmp(p, q, sizeof p) == 0, "%s: restored run differs",
          kind == DT_OPTIM_ADAMW ? "adamw" : "sgd");
    dt_optim_free(a);
    dt_optim_free(r);
}

static void test_groups_from_graph(void) {
    dt_graph *g = dt_graph_init();
    int w1 = dt_graph_param(g, "fc1.weight", DT_F32, 2, (int64_t[]){4, 3}, 0);
    int b1 = dt_graph_param(g, "fc1.bias", DT_F32, 1, (int64_t[]){4}, DT_PARAM_NO_DECAY);
    int n1 = dt_graph_param(g, "norm.weight", DT_F32, 1, (int64_t[]){4}, DT_PARAM_NO_DECAY);
    int w2 = dt_graph_param(g, "fc2.weight", DT_F32, 2, (int64_t[]){2, 4}, 0);
    int fr = dt_graph_param(g, "frozen", DT_F32, 1, (int64_t[]){5}, DT_PARAM_FROZEN);
    CHECK(w1 >= 0 && b1 >= 0 && n1 >= 0 && w2 >= 0 && fr >= 0, "params: %s", dt_last_error());
    int np = dt_graph_param_count(g), ng = -1;
    CHECK_OK(dt_optim_groups_from_graph(g, NULL, 0, &ng));
    CHECK(ng == 3, "expected 3 groups (decay, no-decay merged, decay), got %d", ng);
    dt_optim_group gr[8];
    CHECK_OK(dt_optim_groups_from_graph(g, gr, np, &ng));
    if (ng == 3) {
        /* offsets follow the graph's layout, whatever it is: look them up */
        const dt_param_info *pw1 = NULL, *pb1 = NULL, *pw2 = NULL;
        for (int i = 0; i < np; i++) {
            const dt_param_info *pi = dt_graph_param_info(g, i);
            if (pi->id == w1) pw1 = pi;
            if (pi->id == b1) pb1 = pi;
            if (pi->id == w2) pw2 = pi;
        }
        CHECK(pw1 && gr[0].offset == pw1->offset && gr[0].numel == 12 && gr[0].wd_scale == 1,
              "group 0 {%zu, %zu, %g}", gr[0].offset, gr[0].numel, gr[0].wd_scale);
        CHECK(pb1 && gr[1].offset == pb1->offset && gr[1].numel == 8 && gr[1].wd_scale == 0,
              "group 1 {%zu, %zu, %g}", gr[1].offset, gr[1].numel, gr[1].wd_scale);
        CHECK(pw2 && gr[2].offset == pw2->offset && gr[2].numel == 8 && gr[2].wd_scale == 1,
              "group 2 {%zu, %zu, %g}", gr[2].offset, gr[2].numel, gr[2].wd_scale);
    }
    CHECK(dt_optim_groups_from_graph(g, gr, 2, &ng) != DT_OK, "cap 2 must fail");
    CHECK(strstr(dt_last_error(), "optim") != NULL, "message: %s", dt_last_error());
    dt_graph_free(g);
}

static void expect_err(dt_status s, const char *needle, const char *what) {
    CHECK(s != DT_OK, "%s: expected an error", what);
    CHECK(strstr(dt_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
          dt_last_error(), needle);
}

static void test_errors(void) {
    dt_optim *o = NULL;
    dt_optim_config c = dt_optim_config_default(DT_OPTIM_ADAMW);
    c.beta1 = 1.0;
    expect_err(dt_optim_init(&c, 10, 0, 10, NULL, 0, &o), "beta1", "beta1 = 1");
    CHECK(o == NULL, "no optimizer on error");
    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.nesterov = 1;
    expect_err(dt_optim_init(&c, 10, 0, 10, NULL, 0, &o), "nesterov", "nesterov w/o momentum");
    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.weight_decay = -1;
    expect_err(dt_optim_init(&c, 10, 0, 10, NULL, 0, &o), "weight_decay", "negative wd");
    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.kind = (dt_optim_kind)7;
    expect_err(dt_optim_init(&c, 10, 0, 10, NULL, 0, &o), "optim", "bad kind");
    c = dt_optim_config_default(DT_OPTIM_SGD);
    expect_err(dt_optim_init(&c, 10, 4, 11, NULL, 0, &o), "slice", "slice past end");
    expect_err(dt_optim_init(&c, 10, 5, 4, NULL, 0, &o), "slice", "lo > hi");
    dt_optim_group ov[2] = {{0, 6, 1, 1}, {5, 5, 1, 1}};
    expect_err(dt_optim_init(&c, 10, 0, 10, ov, 2, &o), "overlaps", "overlapping groups");
    dt_optim_group out[1] = {{8, 5, 1, 1}};
    expect_err(dt_optim_init(&c, 10, 0, 10, out, 1, &o), "outside", "group out of range");
    dt_optim_group neg[1] = {{0, 5, -1, 1}};
    expect_err(dt_optim_init(&c, 10, 0, 10, neg, 1, &o), "wd_scale", "negative scale");
    expect_err(dt_optim_init(&c, 10, 0, 10, NULL, 3, &o), "groups", "NULL groups, n 3");
    expect_err(dt_optim_init(NULL, 10, 0, 10, NULL, 0, &o), "optim", "NULL config");
    o = make(c, 10, 0, 10, NULL, 0);
    float p[10] = {0}, g[10] = {0};
    expect_err(dt_optim_step(o, p, g, -0.1f), "learning rate", "negative lr");
    expect_err(dt_optim_step(o, p, g, NAN), "learning rate", "NaN lr");
    expect_err(dt_optim_step(o, NULL, g, 0.1f), "NULL", "NULL params");
    expect_err(dt_optim_set_step(o, -1), "step", "negative step");
    expect_err(dt_optim_step(NULL, p, g, 0.1f), "optim", "NULL optimizer");
    dt_optim_free(o);
    dt_optim_free(NULL);
    /* an empty slice is valid and does nothing */
    o = make(dt_optim_config_default(DT_OPTIM_ADAMW), 10, 4, 4, NULL, 0);
    if (o) CHECK_OK(dt_optim_step(o, NULL, NULL, 0.1f));
    dt_optim_free(o);
}

static void test_clip(void) {
    float g[5] = {3, 4, 0, 0, 0};
    float norm = dt_grad_clip_norm(g, 5, 1.0f);
    CHECK(fabsf(norm - 5.0f) < 1e-6f, "norm %g", norm);
    /* coef = 1 / (5 + 1e-6) as torch */
    dt_check_close("clipped", g, (float[]){0.6f, 0.8f, 0, 0, 0}, 5, 1e-6, 0);
    float h[2] = {3, 4};
    norm = dt_grad_clip_norm(h, 2, 10.0f);
    CHECK(norm == 5.0f && h[0] == 3 && h[1] == 4, "no clip below max_norm");
    norm = dt_grad_clip_norm(h, 2, 0.0f);
    CHECK(norm == 5.0f && h[0] == 3 && h[1] == 4, "max_norm 0 disables clipping");
    float bad[3] = {1, INFINITY, 2};
    norm = dt_grad_clip_norm(bad, 3, 1.0f);
    CHECK(isinf(norm) && bad[0] == 1 && bad[2] == 2, "non-finite norm leaves grads alone");
    CHECK(dt_grad_clip_coef(NAN, 1.0f) == 1.0f, "coef of NaN");
    CHECK(dt_grad_clip_coef(4.0, 2.0f) == (float)(2.0 / (4.0 + 1e-6)), "coef");

    /* large buffer: accurate (vs long double) and independent of the thread count */
    enum { N = 1000003 };
    float *x = malloc(N * sizeof(float));
    fill(x, N, 3);
    long double ref = 0;
    for (size_t i = 0; i < N; i++) ref += (long double)x[i] * x[i];
    int nt = dt_threads_get();
    dt_threads_set(1);
    double s1 = dt_grad_sumsq(x, N);
    dt_threads_set(2);
    double s2 = dt_grad_sumsq(x, N);
    dt_threads_set(nt);
    CHECK(s1 == s2, "sumsq 1 thread %.17g vs 2 threads %.17g", s1, s2);
    CHECK(fabs(s1 - (double)ref) <= 1e-12 * (double)ref, "sumsq %.17g vs %.17Lg", s1, ref);
    dt_grad_scale(x, N, 0.5f);
    CHECK(fabs(dt_grad_sumsq(x, N) - 0.25 * s1) <= 1e-12 * s1, "scale by 0.5");
    free(x);
}

static void test_schedule_hand(void) {
    dt_lr_schedule s = {DT_LR_COSINE, 1.0f, 4, 14, 0.1f, 0, 0};
    CHECK_OK(dt_lr_check(&s));
    /* warmup (step + 1) / (W + 1): 0.2, 0.4, 0.6, 0.8, then 1 at step W */
    CHECK(fabsf(dt_lr_at(&s, 0) - 0.2f) < 1e-7f, "warmup step 0: %g", dt_lr_at(&s, 0));
    CHECK(fabsf(dt_lr_at(&s, 3) - 0.8f) < 1e-7f, "warmup step 3: %g", dt_lr_at(&s, 3));
    CHECK(dt_lr_at(&s, 4) == 1.0f, "step W: %g", dt_lr_at(&s, 4));
    /* halfway through the decay (j = 5 of D = 10): min + (base - min) / 2 = 0.55 */
    CHECK(fabsf(dt_lr_at(&s, 9) - 0.55f) < 1e-7f, "cosine mid: %g", dt_lr_at(&s, 9));
    CHECK(fabsf(dt_lr_at(&s, 14) - 0.1f) < 1e-7f, "cosine end: %g", dt_lr_at(&s, 14));
    CHECK(fabsf(dt_lr_at(&s, 1000) - 0.1f) < 1e-7f, "after the end stays at min_lr");
    s.kind = DT_LR_LINEAR;
    CHECK(fabsf(dt_lr_at(&s, 9) - 0.55f) < 1e-7f, "linear mid: %g", dt_lr_at(&s, 9));
    CHECK(fabsf(dt_lr_at(&s, 100) - 0.1f) < 1e-7f, "linear end: %g", dt_lr_at(&s, 100));
    s.kind = DT_LR_CONSTANT;
    CHECK(dt_lr_at(&s, 100) == 1.0f && fabsf(dt_lr_at(&s, 1) - 0.4f) < 1e-7f, "constant");
    dt_lr_schedule st = {DT_LR_STEP, 1.0f, 0, 0, 0, 3, 0.5f};
    CHECK_OK(dt_lr_check(&st));
    CHECK(dt_lr_at(&st, 2) == 1.0f && dt_lr_at(&st, 3) == 0.5f && dt_lr_at(&st, 7) == 0.25f,
          "step schedule %g %g %g", dt_lr_at(&st, 2), dt_lr_at(&st, 3), dt_lr_at(&st, 7));
    st.step_size = 0;
    expect_err(dt_lr_check(&st), "step_size", "step_size 0");
    dt_lr_schedule bad = {DT_LR_COSINE, 1.0f, 10, 5, 0, 0, 0};
    expect_err(dt_lr_check(&bad), "total_steps", "total <= warmup");
    bad = (dt_lr_schedule){DT_LR_COSINE, 1.0f, 0, 5, 2.0f, 0, 0};
    expect_err(dt_lr_check(&bad), "min_lr", "min_lr > base");
    bad = (dt_lr_schedule){DT_LR_CONSTANT, -1.0f, 0, 0, 0, 0, 0};
    expect_err(dt_lr_check(&bad), "base_lr", "negative base");
}

int main(void) {
    test_sgd_hand();
    test_adamw_hand();
    test_slices(DT_OPTIM_SGD, 0.9, 0, "sgd momentum");
    test_slices(DT_OPTIM_SGD, 0.9, 1, "sgd nesterov");
    test_slices(DT_OPTIM_SGD, 0.0, 0, "sgd plain");
    test_slices(DT_OPTIM_ADAMW, 0.0, 0, "adamw");
    test_state_roundtrip(DT_OPTIM_SGD);
    test_state_roundtrip(DT_OPTIM_ADAMW);
    test_groups_from_graph();
    test_errors();
    test_clip();
    test_schedule_hand();
    return dt_test_finish("test_optim_unit");
}
