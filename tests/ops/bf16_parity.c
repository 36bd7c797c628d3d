/* bf16 mixed precision of the GEMM ops (dt_graph_opts.bf16_gemm) against PyTorch CPU autocast
 * (references: tests/ref/ref_bf16.py): linear (with bias), batched matmul (b transposed),
 * conv2d (blocked-layout and plain stem shapes), forward and backward. Run with
 * DT_CPU_BF16=emulate (the exact f32 emulation, on any CPU), and as bf16_parity_native
 * (DT_TEST_BF16=native) with the CPU's own mode: linear, matmul and conv2d through oneDNN's bf16
 * kernels, which must meet the same bounds; skipped (77) on a CPU without bf16 kernels. The
 * native run also checks that the native plan was taken for each op: its ws (bf16 copies) makes
 * the arena smaller than the emulation's (f32 copies of the rounded operands). And it checks
 * every matmul variant (trans_a, trans_b, a shared 2-D b) with both inputs used twice (the
 * second use accumulates gradients, gin_beta = 1) against the exact emulation: the same exact
 * products, only the order of the f32 sums differs, |d| <= 1e-4 max|emulated| + 1e-4 |emulated|;
 * each native matmul node holds its oneDNN bf16 plans (node state), the emulated ones none
 * (with a shared b, oneDNN's scratchpads can outweigh the halved copies, so the arena cannot
 * tell).
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
#include "graph/graph_impl.h"
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

/* The planned arena of a bf16 op with its backward, as the CPU's mode compiles it:
 * 0 linear [256, 512] x [384, 512]^T, 1 matmul [8, 64, 128] x [8, 96, 128]^T,
 * 2 conv2d 3x3 pad 1 of x [4, 16, 16, 16] with w [32, 16, 3, 3]. */
static size_t op_arena(int kind) {
    dt_graph *g = dt_graph_init();
    int y;
    if (kind == 0) {
        int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){256, 512}, 1);
        int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){384, 512}, 0);
        y = dt_linear(g, x, w, -1);
    } else if (kind == 1) {
        int a = dt_graph_input(g, "a", DT_F32, 3, (int64_t[]){8, 64, 128}, 1);
        int b = dt_graph_param(g, "b", DT_F32, 3, (int64_t[]){8, 96, 128}, 0);
        y = dt_matmul(g, a, b, 0, 1);
    } else {
        int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){4, 16, 16, 16}, 1);
        int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){32, 16, 3, 3}, 0);
        y = dt_conv2d(g, x, w, -1, 1, 1, 1, 1, 1, 1, 1);
    }
    int r;
    dt_graph_mem m = {0};
    if (dt_graph_compile(g, dt_test_dotloss(g, y, &r), &(dt_graph_opts){.bf16_gemm = 1}) == DT_OK)
        dt_graph_memory(g, &m);
    dt_graph_free(g);
    return m.arena_bytes;
}

static void native_taken(void) {
    static const char *names[] = {"linear", "matmul", "conv2d"};
    for (int k = 0; k < 3; k++) {
        size_t native = op_arena(k);
        setenv("DT_CPU_BF16", "emulate", 1);
        size_t emulated = op_arena(k);
        unsetenv("DT_CPU_BF16");
        CHECK(native > 0 && native < emulated,
              "native bf16 %s: arena %zu bytes, emulated %zu (the native plan packs bf16)",
              names[k], native, emulated);
        printf("  native bf16 %s: arena %zu bytes (emulated %zu)\n", names[k], native, emulated);
    }
}

/* out = matmul(a, b) + matmul(a, b) (two nodes: a's and b's gradients accumulate) with
 * a [2, 3, M, K] (trans_a: [2, 3, K, M]), b [2, 3, K, N] or shared [K, N] (trans_b: [.., N, K]),
 * run in the CPU's mode; returns the graph (values of out, a, b kept) and their ids. */
static dt_graph *mm_twice(int ta, int tb, int shared, int *ids, size_t *arena) {
    enum { M = 50, K = 100, N = 70 };
    int64_t as[4] = {2, 3, ta ? K : M, ta ? M : K}, bs[4] = {2, 3, tb ? N : K, tb ? K : N};
    dt_graph *g = dt_graph_init();
    ids[1] = dt_graph_input(g, "a", DT_F32, 4, as, 1);
    ids[2] = shared ? dt_graph_param(g, "b", DT_F32, 2, bs + 2, 0)
                    : dt_graph_input(g, "b", DT_F32, 4, bs, 1);
    ids[0] = dt_add(g, dt_matmul(g, ids[1], ids[2], ta, tb), dt_matmul(g, ids[1], ids[2], ta, tb));
    int r, loss = dt_test_dotloss(g, ids[0], &r);
    CHECK_OK(dt_graph_keep(g, ids[0]));
    dt_status st = dt_graph_compile(g, loss, &(dt_graph_opts){.bf16_gemm = 1});
    CHECK(st == DT_OK, "matmul ta %d tb %d shared %d: compile: %s", ta, tb, shared,
          dt_last_error());
    if (st != DT_OK) {
        dt_graph_free(g);
        return NULL;
    }
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    *arena = m.arena_bytes;
    dt_test_randn(g, ids[1], 11, 1.0f);
    dt_test_randn(g, ids[2], 12, 1.0f);
    dt_test_randn(g, r, 13, 1.0f);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    return g;
}

/* The matmul nodes of g holding native bf16 plans (node state; the emulation keeps none). */
static int matmul_plans(const dt_graph *g) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++)
        k += g->nodes[i].op && !strcmp(g->nodes[i].op->name, "matmul") && g->nodes[i].state;
    return k;
}

static void matmul_native_vs_emulated(void) {
    for (int v = 0; v < 8; v++) {
        int ta = v & 1, tb = v >> 1 & 1, shared = v >> 2, in[3], ie[3];
        size_t an = 0, ae = 0;
        dt_graph *gn = mm_twice(ta, tb, shared, in, &an);
        setenv("DT_CPU_BF16", "emulate", 1);
        dt_graph *ge = mm_twice(ta, tb, shared, ie, &ae);
        unsetenv("DT_CPU_BF16");
        if (gn && ge) {
            char what[96];
            const dt_tensor *n[3] = {dt_graph_value(gn, in[0]), dt_graph_grad(gn, in[1]),
                                     dt_graph_grad(gn, in[2])};
            const dt_tensor *e[3] = {dt_graph_value(ge, ie[0]), dt_graph_grad(ge, ie[1]),
                                     dt_graph_grad(ge, ie[2])};
            static const char *names[] = {"out", "ga", "gb"};
            for (int k = 0; k < 3; k++) {
                snprintf(what, sizeof what, "matmul ta %d tb %d shared %d: native %s", ta, tb,
                         shared, names[k]);
                dt_check_tensor(what, n[k], e[k], e[k] ? 1e-4 * dt_max_abs(e[k]) : 0, 1e-4);
            }
            int pn = matmul_plans(gn), pe = matmul_plans(ge);
            CHECK(pn == 2 && pe == 0,
                  "matmul ta %d tb %d shared %d: %d of 2 native nodes with bf16 plans, %d emulated",
                  ta, tb, shared, pn, pe);
            printf("  matmul ta %d tb %d shared %d: native == emulated (arena %zu, emulated %zu)\n",
                   ta, tb, shared, an, ae);
        }
        dt_graph_free(gn);
        dt_graph_free(ge);
    }
}

int main(void) {
    const char *want = getenv("DT_TEST_BF16");
    if (want && !strcmp(want, "native")) {
        if (dt_bf16_gemm_mode() != DT_BF16_NATIVE) {
            printf("bf16_parity: skipped: this CPU has no bf16 kernels (native mode)\n");
            return 77;
        }
        native_taken();
        matmul_native_vs_emulated();
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
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
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
