/* PyTorch parity for the nn family (references: tests/ref/ref_nn.py, Debian PyTorch 1.13).
 *
 * Each case builds the op on leaves loaded from the reference, adds loss = sum(out * R), runs
 * forward + backward and compares the output and every input/weight gradient. Every case runs
 * twice more:
 *   - "acc_in": loss + sum(x * Q) for each input x with a gradient, Q random and the extra term
 *     built after the op, so the op's backward runs second and must ADD to x's gradient
 *     (gin_beta = 1); expected gradient = reference + Q.
 *   - "acc_param": a second backward with dt_graph_set_accumulate(g, 1) must double every
 *     parameter gradient (gin_beta = 1 for weights).
 * Tolerances (|ours - ref| <= atol + rtol |ref|):
 *   layernorm / rmsnorm:    out atol 1e-5 rtol 1e-5; grads atol 5e-5 rtol 1e-4 (f32 row sums
 *                           of up to 200 terms and weight sums over up to 100 rows, in another
 *                           order than PyTorch)
 *   activations:            atol 1e-5 rtol 1e-5 (our exp is ~1 ulp; GELU's erf is the same
 *                           Abramowitz-Stegun formula PyTorch vectorises, 1.5e-7 absolute)
 *   softmax:                out atol 1e-6 rtol 1e-5; grad atol 1e-5 rtol 1e-4
 *   cross-entropy:          loss atol 1e-5 rtol 1e-5; grad atol 1e-6 rtol 1e-4 (entries ~1/N)
 *   transpose/permute/concat/narrow/split: exact (copies; a duplicated input's gradient is
 *                           one f32 addition, as in PyTorch) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"

typedef struct tol {
    double oa, orr; /* output atol, rtol */
    double ga, gr;  /* gradient atol, rtol */
} tol;

static const tol TOL_NORM = {1e-5, 1e-5, 5e-5, 1e-4};
static const tol TOL_ACT = {1e-5, 1e-5, 1e-5, 1e-5};
static const tol TOL_SM = {1e-6, 1e-5, 1e-5, 1e-4};
static const tol TOL_CE = {1e-5, 1e-5, 1e-6, 1e-4};
static const tol TOL_EXACT = {0, 0, 0, 0};

enum { IN_GRAD, IN_NOGRAD, PARAM };
typedef struct leaf {
    const char *key;  /* reference tensor name (after "<case>.") */
    int kind;         /* IN_GRAD: input with a gradient; IN_NOGRAD; PARAM: trainable */
    const char *gkey; /* reference gradient name, or NULL */
} leaf;

typedef int (*build_fn)(dt_graph *g, const int *ids, const void *arg);

static dt_ref *ref;

/* Fills the gradient buffer of leaf `id` with NaN: a backward that should overwrite it
 * (gin_beta 0) but leaves some of it alone, or adds to it, then shows NaN. */
static void poison_grad(dt_graph *g, int id) {
    const dt_tensor *t = dt_graph_grad(g, id);
    if (!t || !t->data) return;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) ((float *)t->data)[i] = NAN;
}

static const dt_tensor *get(const char *cs, const char *key, int raw) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, key);
    const dt_tensor *t = raw ? dt_ref_raw(ref, name) : dt_ref_get(ref, name);
    CHECK(t != NULL, "reference %s missing", name);
    return t;
}

/* variant 0: plain; 1: acc_in (extra sum(x * Q) terms); 2: acc_param (second backward). */
static void run_variant(const char *cs, int nleaf, const leaf *lv, build_fn build, const void *arg,
                        tol t, int variant) {
    static const char *vname[] = {"", " acc_in", " acc_param"};
    char what[192];
    dt_graph *g = dt_graph_init();
    int ids[8], q[8], r = -1;
    for (int i = 0; i < nleaf; i++) {
        const dt_tensor *x = get(cs, lv[i].key, 1);
        if (!x) goto done;
        if (lv[i].kind == PARAM)
            ids[i] = dt_graph_param(g, lv[i].key, x->dtype, x->ndim, x->shape, 0);
        else
            ids[i] =
                dt_graph_input(g, lv[i].key, x->dtype, x->ndim, x->shape, lv[i].kind == IN_GRAD);
    }
    int out = build(g, ids, arg);
    if (!CHECK(out >= 0, "%s: build failed: %s", cs, dt_last_error())) goto done;
    CHECK_OK(dt_graph_keep(g, out));
    int loss = dt_test_dotloss(g, out, &r);
    if (variant == 1) {
        for (int i = 0; i < nleaf; i++) {
            if (lv[i].kind != IN_GRAD) continue;
            const dt_tensor *s = dt_graph_shape(g, ids[i]);
            char qn[16];
            snprintf(qn, sizeof qn, "Q%d", i);
            q[i] = dt_graph_input(g, qn, DT_F32, s->ndim, s->shape, 0);
            loss = dt_add(g, loss, dt_sum(g, dt_mul(g, ids[i], q[i])));
        }
    }
    if (!CHECK(loss >= 0, "%s: loss build failed: %s", cs, dt_last_error())) goto done;
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    for (int i = 0; i < nleaf; i++) dt_test_set(g, ids[i], get(cs, lv[i].key, 1));
    dt_test_set(g, r, get(cs, "R", 0));
    if (variant == 1)
        for (int i = 0; i < nleaf; i++)
            if (lv[i].kind == IN_GRAD) dt_test_randn(g, q[i], 100 + (uint64_t)i, 1.0f);
    for (int i = 0; i < nleaf; i++) poison_grad(g, ids[i]);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    if (variant == 2) {
        dt_graph_set_accumulate(g, 1);
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
    }
    const dt_tensor *ro = get(cs, "out", 0);
    const dt_tensor *mo = dt_graph_value(g, out);
    snprintf(what, sizeof what, "%s out%s", cs, vname[variant]);
    if (ro && isnan(((const float *)ro->data)[0]) && dt_tensor_numel(ro) == 1)
        CHECK(isnan(((const float *)mo->data)[0]), "%s: expected NaN, got %g", what,
              ((const float *)mo->data)[0]);
    else
        dt_check_tensor(what, mo, ro, t.oa, t.orr);
    for (int i = 0; i < nleaf; i++) {
        if (!lv[i].gkey) continue;
        const dt_tensor *rg = get(cs, lv[i].gkey, 0), *mg = dt_graph_grad(g, ids[i]);
        if (!rg || !CHECK(mg && mg->data, "%s: no gradient for %s", cs, lv[i].key)) continue;
        int64_t n = dt_tensor_numel(rg);
        float *want = malloc((size_t)n * sizeof(float) + 4);
        memcpy(want, rg->data, (size_t)n * sizeof(float));
        if (variant == 1 && lv[i].kind == IN_GRAD) {
            const float *qv = dt_graph_value(g, q[i])->data;
            for (int64_t j = 0; j < n; j++) want[j] += qv[j];
        }
        if (variant == 2 && lv[i].kind == PARAM)
            for (int64_t j = 0; j < n; j++) want[j] *= 2.0f;
        snprintf(what, sizeof what, "%s %s%s", cs, lv[i].gkey, vname[variant]);
        /* The added Q term costs one rounding of the sum: allow an ulp when exact. */
        const double ga = t.ga, gr = variant && t.gr == 0 ? 1.2e-7 : t.gr;
        if (dt_tensor_numel(mg) == n)
            dt_check_close(what, mg->data, want, n, variant == 2 ? 2 * ga : ga, gr);
        else
            CHECK(0, "%s: gradient has %lld elements, reference %lld", what,
                  (long long)dt_tensor_numel(mg), (long long)n);
        free(want);
    }
done:
    dt_graph_free(g);
}

static void run_case(const char *cs, int nleaf, const leaf *lv, build_fn build, const void *arg,
                     tol t) {
    for (int v = 0; v < 3; v++) run_variant(cs, nleaf, lv, build, arg, t, v);
}

/* ---------------------------------------------------------------- builders */

static int b_layernorm(dt_graph *g, const int *ids, const void *arg) {
    const int *a = arg; /* {has_w, has_b} */
    const float eps = a[2] ? 1e-6f : 1e-5f;
    return dt_layernorm(g, ids[0], a[0] ? ids[1] : -1, a[1] ? ids[1 + a[0]] : -1, eps);
}
static int b_rmsnorm(dt_graph *g, const int *ids, const void *arg) {
    const int *a = arg; /* {has_w, eps_is_1e-6} */
    return dt_rmsnorm(g, ids[0], a[0] ? ids[1] : -1, a[1] ? 1e-6f : 1e-5f);
}
static int b_act(dt_graph *g, const int *ids, const void *arg) {
    const char *name = arg;
    if (!strcmp(name, "relu")) return dt_relu(g, ids[0]);
    if (!strcmp(name, "gelu")) return dt_gelu(g, ids[0], 0);
    if (!strcmp(name, "gelu_tanh")) return dt_gelu(g, ids[0], 1);
    return dt_silu(g, ids[0]);
}
static int b_softmax(dt_graph *g, const int *ids, const void *arg) {
    return dt_softmax(g, ids[0]);
}
typedef struct ce_arg {
    float ls;
    int64_t ii;
} ce_arg;
static int b_ce(dt_graph *g, const int *ids, const void *arg) {
    const ce_arg *a = arg;
    return dt_cross_entropy(g, ids[0], ids[1], a->ls, a->ii);
}
static int b_transpose(dt_graph *g, const int *ids, const void *arg) {
    const int *a = arg;
    return dt_transpose(g, ids[0], a[0], a[1]);
}
static int b_permute(dt_graph *g, const int *ids, const void *arg) {
    return dt_permute(g, ids[0], arg);
}
static int b_concat(dt_graph *g, const int *ids, const void *arg) {
    const int *a = arg; /* {n, dim, dup} */
    if (a[2]) return dt_concat(g, 2, (int[]){ids[0], ids[0]}, a[1]);
    return dt_concat(g, a[0], ids, a[1]);
}
static int b_narrow(dt_graph *g, const int *ids, const void *arg) {
    return dt_narrow(g, ids[0], 1, 2, 4);
}

/* split cases: pieces compared to out0..; loss = sum of sum(piece_i * R_i) over used pieces
 * (+ sum(x * Rx) when `with_x`). */
static void split_case(const char *cs, int dim, int n, const int64_t *sizes, const int *used,
                       int with_x) {
    char what[128], key[16];
    dt_graph *g = dt_graph_init();
    const dt_tensor *xr = get(cs, "x", 0);
    if (!xr) return;
    int x = dt_graph_input(g, "x", DT_F32, xr->ndim, xr->shape, 1);
    int loss = -1, rx = -1, rid[8], pid[8];
    if (with_x) {
        rx = dt_graph_input(g, "Rx", DT_F32, xr->ndim, xr->shape, 0);
        loss = dt_sum(g, dt_mul(g, x, rx));
    }
    CHECK(dt_split(g, x, dim, n, sizes, pid) == 0, "%s: split failed: %s", cs, dt_last_error());
    for (int i = 0; i < n; i++) {
        CHECK_OK(dt_graph_keep(g, pid[i]));
        if (!used[i]) continue;
        const dt_tensor *s = dt_graph_shape(g, pid[i]);
        snprintf(key, sizeof key, "R%d", i);
        rid[i] = dt_graph_input(g, key, DT_F32, s->ndim, s->shape, 0);
        int term = dt_sum(g, dt_mul(g, pid[i], rid[i]));
        loss = loss < 0 ? term : dt_add(g, loss, term);
    }
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_set(g, x, xr);
    if (with_x) dt_test_set(g, rx, get(cs, "Rx", 0));
    for (int i = 0; i < n; i++) {
        if (!used[i]) continue;
        snprintf(key, sizeof key, "R%d", i);
        dt_test_set(g, rid[i], get(cs, key, 0));
    }
    poison_grad(g, x);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "out%d", i);
        snprintf(what, sizeof what, "%s %s", cs, key);
        dt_check_tensor(what, dt_graph_value(g, pid[i]), get(cs, key, 0), 0, 0);
    }
    snprintf(what, sizeof what, "%s gx", cs);
    dt_check_tensor(what, dt_graph_grad(g, x), get(cs, "gx", 0), 0, 1.2e-7);
    dt_graph_free(g);
}

int main(void) {
    ref = dt_ref_load("nn.safetensors");
    if (!ref) return dt_test_finish("nn_parity");

    /* layernorm */
    {
        const leaf wb[3] = {{"x", IN_GRAD, "gx"}, {"w", PARAM, "gw"}, {"b", PARAM, "gb"}};
        const leaf none[1] = {{"x", IN_GRAD, "gx"}};
        run_case("ln", 3, wb, b_layernorm, (int[]){1, 1, 0}, TOL_NORM);
        run_case("ln_w", 2, wb, b_layernorm, (int[]){1, 0, 0}, TOL_NORM);
        run_case("ln_none", 1, none, b_layernorm, (int[]){0, 0, 0}, TOL_NORM);
        run_case("ln_big", 3, wb, b_layernorm, (int[]){1, 1, 1}, TOL_NORM);
    }
    /* rmsnorm */
    {
        const leaf w[2] = {{"x", IN_GRAD, "gx"}, {"w", PARAM, "gw"}};
        run_case("rms", 2, w, b_rmsnorm, (int[]){1, 1}, TOL_NORM);
        run_case("rms_now", 1, w, b_rmsnorm, (int[]){0, 0}, TOL_NORM);
        run_case("rms_big", 2, w, b_rmsnorm, (int[]){1, 1}, TOL_NORM);
    }
    /* activations */
    {
        const leaf x[1] = {{"x", IN_GRAD, "gx"}};
        const char *sets[] = {"act", "act_big", "act_ext"};
        const char *acts[] = {"relu", "gelu", "gelu_tanh", "silu"};
        for (int s = 0; s < 3; s++)
            for (int a = 0; a < 4; a++) {
                char cs[64];
                snprintf(cs, sizeof cs, "%s_%s", sets[s], acts[a]);
                run_case(cs, 1, x, b_act, acts[a], TOL_ACT);
            }
    }
    /* softmax */
    {
        const leaf x[1] = {{"x", IN_GRAD, "gx"}};
        run_case("sm", 1, x, b_softmax, NULL, TOL_SM);
        run_case("sm_big", 1, x, b_softmax, NULL, TOL_SM);
        run_case("sm_shift", 1, x, b_softmax, NULL, TOL_SM);
    }
    /* cross-entropy */
    {
        const leaf xt[2] = {{"x", IN_GRAD, "gx"}, {"t", IN_NOGRAD, NULL}};
        run_case("ce_plain", 2, xt, b_ce, &(ce_arg){0.0f, -100}, TOL_CE);
        run_case("ce_ign", 2, xt, b_ce, &(ce_arg){0.0f, -100}, TOL_CE);
        run_case("ce_ls", 2, xt, b_ce, &(ce_arg){0.1f, -100}, TOL_CE);
        run_case("ce_ls_ign", 2, xt, b_ce, &(ce_arg){0.1f, -100}, TOL_CE);
        run_case("ce_ls_ii3", 2, xt, b_ce, &(ce_arg){0.1f, 3}, TOL_CE);
        run_case("ce_i32_3d", 2, xt, b_ce, &(ce_arg){0.2f, -1}, TOL_CE);
        run_case("ce_big", 2, xt, b_ce, &(ce_arg){0.1f, -100}, TOL_CE);
        run_case("ce_all_ign", 2, xt, b_ce, &(ce_arg){0.1f, -100}, TOL_CE);
    }
    /* transpose / permute */
    {
        const leaf x[1] = {{"x", IN_GRAD, "gx"}};
        run_case("tr_a", 1, x, b_transpose, (int[]){0, 2}, TOL_EXACT);
        run_case("tr_b", 1, x, b_transpose, (int[]){1, 2}, TOL_EXACT);
        run_case("tr_big", 1, x, b_transpose, (int[]){-1, -2}, TOL_EXACT);
        run_case("perm", 1, x, b_permute, (int[]){2, 0, 3, 1}, TOL_EXACT);
        run_case("perm_big", 1, x, b_permute, (int[]){0, 2, 1, 3}, TOL_EXACT);
        run_case("perm_rev", 1, x, b_permute, (int[]){4, 3, 2, 1, 0}, TOL_EXACT);
    }
    /* concat / narrow / split */
    {
        const leaf x3[3] = {{"x0", IN_GRAD, "gx0"}, {"x1", IN_GRAD, "gx1"}, {"x2", IN_GRAD, "gx2"}};
        run_case("cat3", 3, x3, b_concat, (int[]){3, 1, 0}, TOL_EXACT);
        const leaf x6[6] = {{"x0", IN_GRAD, "gx0"}, {"x1", IN_GRAD, "gx1"}, {"x2", IN_GRAD, "gx2"},
                            {"x3", IN_GRAD, "gx3"}, {"x4", IN_GRAD, "gx4"}, {"x5", IN_GRAD, "gx5"}};
        run_case("cat6", 6, x6, b_concat, (int[]){6, 0, 0}, TOL_EXACT);
        run_case("cat_dup", 1, x3, b_concat, (int[]){2, -1, 1}, TOL_EXACT);
        const leaf x[1] = {{"x", IN_GRAD, "gx"}};
        run_case("narrow", 1, x, b_narrow, NULL, TOL_EXACT);
        split_case("split", 1, 3, (const int64_t[]){2, 5, 3}, (const int[]){1, 0, 1}, 0);
        split_case("split_res", 0, 3, (const int64_t[]){1, 2, 3}, (const int[]){1, 1, 1}, 1);
    }
    dt_ref_free(ref);
    return dt_test_finish("nn_parity");
}
