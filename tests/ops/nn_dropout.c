/* Dropout: mask statistics, backward consistent with the forward mask, determinism in
 * (key, step, node id), eval mode, p = 0 / 1, and a recomputed forward (activation
 * checkpointing) drawing the same mask.
 *
 * Statistics: with n = 64000 elements and p = 0.3 the dropped fraction has standard deviation
 * sqrt(p (1 - p) / n) = 0.0018; we allow 0.01 (5.5 sigma; per 16000-element lane 0.02). Two
 * independent masks differ in a fraction 2 p (1 - p) = 0.42 of positions; allowed 0.02.
 * Kept values must be exactly x * (1 / (1 - p)) and gradients exactly R * (1 / (1 - p)).
 * test_contract checks the mask element by element against dt_philox4x32 itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/rng.h"
#include "harness.h"

enum { ROWS = 64, COLS = 1000, N = ROWS * COLS };
static const float P = 0.3f;

typedef struct dgraph {
    dt_graph *g;
    int x, y, r, loss;
} dgraph;

static dgraph make(float p) {
    dgraph d;
    d.g = dt_graph_init();
    d.x = dt_graph_input(d.g, "x", DT_F32, 2, (int64_t[]){ROWS, COLS}, 1);
    d.y = dt_dropout(d.g, d.x, p);
    CHECK_OK(dt_graph_keep(d.g, d.y));
    d.loss = dt_test_dotloss(d.g, d.y, &d.r);
    CHECK_OK(dt_graph_compile(d.g, d.loss, NULL));
    dt_test_randn(d.g, d.x, 1, 1.0f);
    dt_test_randn(d.g, d.r, 2, 1.0f);
    return d;
}

static const float *val(dgraph *d, int id) {
    return dt_graph_value(d->g, id)->data;
}

/* Checks y against x under the mask y != 0, and the gradient against R under the same mask;
 * returns the dropped fraction. */
static double check_consistent(dgraph *d, float p, const char *what) {
    const float *x = val(d, d->x), *y = val(d, d->y), *r = val(d, d->r);
    const float *gx = dt_graph_grad(d->g, d->x)->data;
    const float scale = 1.0f / (1.0f - p);
    int64_t dropped = 0, bad_y = 0, bad_g = 0;
    for (int64_t i = 0; i < N; i++) {
        const int keep = y[i] != 0.0f;
        dropped += !keep;
        if (keep && y[i] != x[i] * scale) bad_y++;
        if (gx[i] != (keep ? r[i] * scale : 0.0f)) bad_g++;
    }
    CHECK(bad_y == 0, "%s: %lld kept values are not x / (1 - p)", what, (long long)bad_y);
    CHECK(bad_g == 0, "%s: %lld gradients disagree with the forward mask", what, (long long)bad_g);
    return (double)dropped / N;
}

static void test_mask(void) {
    dgraph d = make(P);
    dt_graph_set_rng(d.g, 42, 5, 0);
    CHECK_OK(dt_graph_forward(d.g, 1));
    CHECK_OK(dt_graph_backward(d.g));
    double frac = check_consistent(&d, P, "step 5");
    CHECK(fabs(frac - P) < 0.01, "dropped fraction %.4f, want %.2f +- 0.01", frac, P);
    /* every lane of a Philox block (i % 4) is used */
    const float *y = val(&d, d.y);
    for (int lane = 0; lane < 4; lane++) {
        int64_t z = 0;
        for (int64_t i = lane; i < N; i += 4) z += y[i] == 0.0f;
        CHECK(fabs((double)z / (N / 4) - P) < 0.02, "lane %d dropped fraction %.4f", lane,
              (double)z / (N / 4));
    }
    float *first = malloc(N * sizeof(float));
    memcpy(first, y, N * sizeof(float));

    /* same step: the same mask */
    CHECK_OK(dt_graph_forward(d.g, 1));
    CHECK(memcmp(first, val(&d, d.y), N * sizeof(float)) == 0, "same step, different mask");

    /* another step (also only the high 32 bits changed): another mask, still consistent */
    const uint64_t steps[2] = {6, 5 + (1ull << 32)};
    for (int k = 0; k < 2; k++) {
        dt_graph_set_rng(d.g, 42, steps[k], 0);
        CHECK_OK(dt_graph_forward(d.g, 1));
        CHECK_OK(dt_graph_backward(d.g));
        char what[64];
        snprintf(what, sizeof what, "step %llu", (unsigned long long)steps[k]);
        frac = check_consistent(&d, P, what);
        CHECK(fabs(frac - P) < 0.01, "%s: dropped fraction %.4f", what, frac);
        int64_t diff = 0;
        for (int64_t i = 0; i < N; i++) diff += (first[i] == 0.0f) != (val(&d, d.y)[i] == 0.0f);
        const double want = 2 * P * (1 - P);
        CHECK(fabs((double)diff / N - want) < 0.02,
              "%s: masks differ at %.4f of positions, want %.2f", what, (double)diff / N, want);
    }

    /* another seed (key): another mask */
    dt_graph_set_rng(d.g, 43, 5, 0);
    CHECK_OK(dt_graph_forward(d.g, 1));
    int64_t diff = 0;
    for (int64_t i = 0; i < N; i++) diff += (first[i] == 0.0f) != (val(&d, d.y)[i] == 0.0f);
    CHECK(fabs((double)diff / N - 2 * P * (1 - P)) < 0.02, "another key: differ at %.4f",
          (double)diff / N);

    /* eval mode: identity forward and backward */
    CHECK_OK(dt_graph_forward(d.g, 0));
    CHECK_OK(dt_graph_backward(d.g));
    CHECK(memcmp(val(&d, d.x), val(&d, d.y), N * sizeof(float)) == 0, "eval: y != x");
    CHECK(memcmp(val(&d, d.r), dt_graph_grad(d.g, d.x)->data, N * sizeof(float)) == 0,
          "eval: dx != R");
    free(first);
    dt_graph_free(d.g);
}

/* Two dropout nodes on the same input draw different masks (the node id is in the counter). */
static void test_two_nodes(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 1, (int64_t[]){N}, 1);
    int a = dt_dropout(g, x, P), b = dt_dropout(g, x, P);
    CHECK_OK(dt_graph_keep(g, a));
    CHECK_OK(dt_graph_keep(g, b));
    int loss = dt_add(g, dt_sum(g, a), dt_sum(g, b));
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    float *xv = dt_graph_value(g, x)->data;
    for (int64_t i = 0; i < N; i++) xv[i] = 1.0f;
    dt_graph_set_rng(g, 9, 1, 0);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    const float *av = dt_graph_value(g, a)->data, *bv = dt_graph_value(g, b)->data;
    const float *gx = dt_graph_grad(g, x)->data, scale = 1.0f / (1.0f - P);
    int64_t diff = 0, bad = 0;
    for (int64_t i = 0; i < N; i++) {
        diff += (av[i] == 0.0f) != (bv[i] == 0.0f);
        /* x's gradient: one node overwrote, the other added (both masks) */
        const float want = (av[i] != 0.0f ? scale : 0.0f) + (bv[i] != 0.0f ? scale : 0.0f);
        bad += gx[i] != want;
    }
    CHECK(fabs((double)diff / N - 2 * P * (1 - P)) < 0.02, "two nodes: masks differ at %.4f",
          (double)diff / N);
    CHECK(bad == 0, "two nodes: %lld gradients disagree with the two masks", (long long)bad);
    dt_graph_free(g);
}

static void test_extremes(void) {
    dgraph d = make(0.0f);
    CHECK_OK(dt_graph_forward(d.g, 1));
    CHECK_OK(dt_graph_backward(d.g));
    CHECK(memcmp(val(&d, d.x), val(&d, d.y), N * sizeof(float)) == 0, "p = 0: y != x");
    dt_graph_free(d.g);

    d = make(1.0f);
    CHECK_OK(dt_graph_forward(d.g, 1));
    CHECK_OK(dt_graph_backward(d.g));
    const float *y = val(&d, d.y), *gx = dt_graph_grad(d.g, d.x)->data;
    int64_t nz = 0;
    for (int64_t i = 0; i < N; i++) nz += y[i] != 0.0f || gx[i] != 0.0f;
    CHECK(nz == 0, "p = 1: %lld nonzero outputs or gradients", (long long)nz);
    dt_graph_free(d.g);
}

/* Dropout inside a recompute segment: backward re-runs its forward, which must draw the same
 * mask as the first forward. o = d * d with d = dropout(2 x): mul's backward reads the
 * recomputed d, and the kept o shows the first forward's mask. */
static void test_recompute(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){ROWS, COLS}, 1);
    int h = dt_scale(g, x, 2.0f);
    int dr = dt_dropout(g, h, P);
    int o = dt_mul(g, dr, dr);
    CHECK_OK(dt_graph_recompute(g, x, o));
    CHECK_OK(dt_graph_keep(g, o));
    int r;
    int loss = dt_test_dotloss(g, o, &r);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, x, 3, 1.0f);
    dt_test_randn(g, r, 4, 1.0f);
    dt_graph_set_rng(g, 77, 11, 1);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    const float *xv = dt_graph_value(g, x)->data, *ov = dt_graph_value(g, o)->data;
    const float *rv = dt_graph_value(g, r)->data, *gx = dt_graph_grad(g, x)->data;
    const float scale = 1.0f / (1.0f - P);
    int64_t bad = 0, dropped = 0;
    for (int64_t i = 0; i < N; i++) {
        const int keep = ov[i] != 0.0f;
        dropped += !keep;
        /* d(o)/dx = 2 d * (mask * scale) * 2 with d = 2 x * scale where kept */
        const float d = 2.0f * xv[i] * scale;
        const float want = keep ? 2.0f * rv[i] * d * scale * 2.0f : 0.0f;
        bad += !(fabsf(gx[i] - want) <= 1e-6f * (1.0f + fabsf(want)));
    }
    CHECK(bad == 0, "recompute: %lld gradients disagree with the first forward's mask",
          (long long)bad);
    CHECK(fabs((double)dropped / N - P) < 0.01, "recompute: dropped fraction %.4f",
          (double)dropped / N);
    dt_graph_free(g);
}

/* The mask is exactly the documented function of (key, step, node id, i): element i is kept
 * iff dt_rng_u01(word i % 4 of dt_philox4x32(key, {step lo, step hi, node, i / 4})) >= p.
 * 1003 elements: also the partial last block. */
static void test_contract(void) {
    const int64_t n = 1003;
    const uint64_t seed = 0x1234567887654321ull, step = 3 + (5ull << 32);
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 1, (int64_t[]){n}, 1);
    int y = dt_dropout(g, x, P);
    CHECK_OK(dt_graph_keep(g, y));
    CHECK_OK(dt_graph_compile(g, dt_sum(g, y), NULL));
    float *xv = dt_graph_value(g, x)->data;
    for (int64_t i = 0; i < n; i++) xv[i] = 1.0f + (float)i;
    dt_graph_set_rng(g, seed, step, 0); /* rank 0: key = seed */
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    const float *yv = dt_graph_value(g, y)->data, *gx = dt_graph_grad(g, x)->data;
    const float scale = 1.0f / (1.0f - P);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t r[4];
        const uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), (uint32_t)y,
                                 (uint32_t)(i / 4)};
        dt_philox4x32(seed, ctr, r);
        const int keep = dt_rng_u01(r[i % 4]) >= P;
        bad += yv[i] != (keep ? xv[i] * scale : 0.0f) || gx[i] != (keep ? scale : 0.0f);
    }
    CHECK(bad == 0, "contract: %lld elements differ from the dt_philox4x32 mask", (long long)bad);
    dt_graph_free(g);
}

int main(void) {
    test_contract();
    test_mask();
    test_two_nodes();
    test_extremes();
    test_recompute();
    return dt_test_finish("nn_dropout");
}
