/* bf16 mixed precision of the GEMM ops (dt_graph_opts.bf16_gemm) against PyTorch CPU autocast
 * (references: tests/ref/ref_bf16.py): linear (with bias), batched matmul (b transposed),
 * conv2d (blocked-layout and plain stem shapes), forward and backward. Run with
 * DT_CPU_BF16=emulate (the exact f32 emulation, on any CPU), and as bf16_parity_native
 * (DT_TEST_BF16=native) with the CPU's own mode: linear through oneDNN's bf16 kernels, which
 * must meet the same bounds; skipped (77) on a CPU without bf16 kernels. The native run also
 * checks that the native plan was taken: a bf16 linear's scratch (bf16 copies) is smaller
 * than the emulation's (f32 copies of the rounded operands).
 *
 * Per output and gradient, with loss = sum(out * R):
 *   vs *_exact (bf16-rounded operands, float64 products): |d| <= 1e-4 + 1e-4 |ref| -- products
 *     of bf16 values are exact in f32, only the f32 summation order differs;
 *   vs *_ac (autocast): ||d|| <= 1e-2 ||ref|| (autocast also rounds its outputs and the
 *     gradients between its ops to bf16: relative error up to 2^-8 per element);
 *   vs *_f32: must differ by more than 1e-4 max|ref| somewhere (the mode does round).
 * The bias gradient is sum(R) in f32 (atol 1e-5). Finally the refusal: with DT_CPU_BF16=none
 * compile fails with the one-line message naming the op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"

static dt_ref *ref;

static const dt_tensor *get(const char *cs, const char *key) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, key);
    return dt_ref_get(ref, name);
}

/* mine against the three references "<key>_exact", "<key>_ac", "<key>_f32" of case cs. */
static void check3(const char *cs, const char *key, const dt_tensor *mine) {
    char k[64], what[128];
    snprintf(k, sizeof k, "%s_exact", key);
    snprintf(what, sizeof what, "%s %s", cs, k);
    dt_check_tensor(what, mine, get(cs, k), 1e-4, 1e-4);
    snprintf(k, sizeof k, "%s_ac", key);
    const dt_tensor *ac = get(cs, k);
    snprintf(k, sizeof k, "%s_f32", key);
    const dt_tensor *f = get(cs, k);
    if (!mine || !mine->data || !ac || !f) return;
    int64_t n = dt_tensor_numel(ac);
    CHECK(dt_tensor_numel(mine) == n, "%s %s: %lld elements, reference %lld", cs, key,
          (long long)dt_tensor_numel(mine), (long long)n);
    const float *m = mine->data, *a = ac->data, *r = f->data;
    double d2 = 0, a2 = 0, dmax = 0, fmax = dt_max_abs(f);
    for (int64_t i = 0; i < n; i++) {
        d2 += (m[i] - (double)a[i]) * (m[i] - (double)a[i]);
        a2 += (double)a[i] * a[i];
        double e = fabs(m[i] - (double)r[i]);
        dmax = e > dmax ? e : dmax;
    }
    double rel = sqrt(d2 / (a2 > 0 ? a2 : 1));
    printf("  %s %s: relative distance from autocast %.3g, largest from f32 %.3g\n", cs, key, rel,
           dmax);
    CHECK(rel <= 1e-2, "%s %s: relative distance from autocast %.3g > 1e-2", cs, key, rel);
    CHECK(dmax > 1e-4 * fmax, "%s %s: equals the f32 result (largest difference %.3g): not rounded",
          cs, key, dmax);
}

/* Builds out = op(in0, in1) (+ bias for linear) with loss = sum(out * R), compiled in bf16 mode. */
typedef struct bcase {
    const char *cs;
    int kind; /* 0 linear, 1 matmul (b transposed), 2 conv2d 3x3 pad 1 */
    const char *in0, *in1;
} bcase;

static dt_graph *build(const bcase *c, int *ids, int *out, int *r, dt_status *st) {
    dt_graph *g = dt_graph_init();
    const dt_tensor *t0 = get(c->cs, c->in0), *t1 = get(c->cs, c->in1);
    if (!t0 || !t1) return g;
    ids[0] = dt_graph_input(g, c->in0, DT_F32, t0->ndim, t0->shape, 1);
    ids[1] = dt_graph_param(g, c->in1, DT_F32, t1->ndim, t1->shape, 0);
    ids[2] = -1;
    if (c->kind == 0) {
        const dt_tensor *tb = get(c->cs, "b");
        ids[2] = dt_graph_param(g, "b", DT_F32, 1, tb->shape, DT_PARAM_NO_DECAY);
        *out = dt_linear(g, ids[0], ids[1], ids[2]);
    } else if (c->kind == 1) {
        *out = dt_matmul(g, ids[0], ids[1], 0, 1);
    } else {
        int s = (int)((const float *)get(c->cs, "cfg")->data)[0];
        *out = dt_conv2d(g, ids[0], ids[1], -1, s, s, 1, 1, 1, 1, 1);
    }
    CHECK(*out >= 0, "%s: build: %s", c->cs, dt_last_error());
    if (*out < 0) return g;
    CHECK_OK(dt_graph_keep(g, *out));
    int loss = dt_test_dotloss(g, *out, r);
    *st = dt_graph_compile(g, loss, &(dt_graph_opts){.bf16_gemm = 1});
    return g;
}

static void run(const bcase *c) {
    int ids[3], out = -1, r = -1;
    dt_status st = DT_ERR_INVALID;
    dt_graph *g = build(c, ids, &out, &r, &st);
    CHECK(st == DT_OK, "%s: compile: %s", c->cs, dt_last_error());
    if (st == DT_OK) {
        dt_test_set(g, ids[0], get(c->cs, c->in0));
        dt_test_set(g, ids[1], get(c->cs, c->in1));
        if (ids[2] >= 0) dt_test_set(g, ids[2], get(c->cs, "b"));
        dt_test_set(g, r, get(c->cs, "R"));
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        char gk[32];
        if (ids[2] >= 0) { /* the bias adds exactly in f32; gb = sum(R) */
            dt_check_tensor("lin out (with bias) vs exact", dt_graph_value(g, out),
                            get(c->cs, "out_b_exact"), 1e-4, 1e-4);
            dt_check_tensor("lin gb", dt_graph_grad(g, ids[2]), get(c->cs, "gb"), 1e-5, 1e-5);
        } else {
            check3(c->cs, "out", dt_graph_value(g, out));
        }
        snprintf(gk, sizeof gk, "g%s", c->in0);
        check3(c->cs, gk, dt_graph_grad(g, ids[0]));
        snprintf(gk, sizeof gk, "g%s", c->in1);
        check3(c->cs, gk, dt_graph_grad(g, ids[1]));
    }
    dt_graph_free(g);
}

/* The linear output with its bias is checked against the exact reference above; the bias-free
 * product against all three (out_ac / out_f32 carry no bias). */
static void linear_nobias_out(void) {
    bcase c = {"lin", 0, "x", "w"};
    const dt_tensor *tx = get(c.cs, "x"), *tw = get(c.cs, "w");
    if (!tx || !tw) return;
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, tx->ndim, tx->shape, 0);
    int w = dt_graph_param(g, "w", DT_F32, 2, tw->shape, 0);
    int y = dt_linear(g, x, w, -1), r;
    CHECK_OK(dt_graph_keep(g, y));
    CHECK_OK(dt_graph_compile(g, dt_test_dotloss(g, y, &r), &(dt_graph_opts){.bf16_gemm = 1}));
    dt_test_set(g, x, tx);
    dt_test_set(g, w, tw);
    dt_test_set(g, r, get(c.cs, "R"));
    CHECK_OK(dt_graph_forward(g, 1));
    check3(c.cs, "out", dt_graph_value(g, y));
    dt_graph_free(g);
}

/* The planned arena of a bf16 linear [256, 512] x [384, 512]^T with its backward. */
static size_t linear_arena(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){256, 512}, 1);
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){384, 512}, 0);
    int r, y = dt_linear(g, x, w, -1);
    dt_graph_mem m = {0};
    if (dt_graph_compile(g, dt_test_dotloss(g, y, &r), &(dt_graph_opts){.bf16_gemm = 1}) == DT_OK)
        dt_graph_memory(g, &m);
    dt_graph_free(g);
    return m.arena_bytes;
}

int main(void) {
    const char *want = getenv("DT_TEST_BF16");
    if (want && !strcmp(want, "native")) {
        if (dt_bf16_gemm_mode() != DT_BF16_NATIVE) {
            printf("bf16_parity: skipped: this CPU has no bf16 kernels (native mode)\n");
            return 77;
        }
        size_t native = linear_arena();
        setenv("DT_CPU_BF16", "emulate", 1);
        size_t emulated = linear_arena();
        unsetenv("DT_CPU_BF16");
        CHECK(native > 0 && native < emulated,
              "native bf16 linear: arena %zu bytes, emulated %zu (the native plan packs bf16)",
              native, emulated);
        printf("  native bf16 linear: arena %zu bytes (emulated %zu)\n", native, emulated);
    }
    ref = dt_ref_load("bf16.safetensors");
    if (!ref) return dt_test_finish("bf16_parity");
    static const bcase cases[] = {{"lin", 0, "x", "w"},
                                  {"mm", 1, "a", "b"},
                                  {"conv", 2, "x", "w"},
                                  {"conv_stem", 2, "x", "w"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run(&cases[i]);
    linear_nobias_out();

    /* The refusal, as on a CPU without bf16 instructions and without the test hook. */
    setenv("DT_CPU_BF16", "none", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 2) {
        int ids[3], out = -1, r = -1;
        dt_status st = DT_OK;
        dt_graph_free(build(&cases[i], ids, &out, &r, &st));
        CHECK(st != DT_OK && strstr(dt_last_error(), "this CPU has no bf16 instructions") &&
                  !strchr(dt_last_error(), '\n'),
              "%s: compile without bf16 CPU: status %d, message '%s'", cases[i].cs, (int)st,
              dt_last_error());
        printf("  refused: %s\n", dt_last_error());
    }
    dt_ref_free(ref);
    return dt_test_finish("bf16_parity");
}
