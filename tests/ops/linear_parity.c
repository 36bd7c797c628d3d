/* PyTorch parity for the linear family (references: tests/ref/ref_linear.py).
 *
 * Each case builds the op on leaves loaded from the reference, adds loss = sum(out * R),
 * runs forward + backward and compares the output and every input/weight gradient.
 * Tolerances (|ours - ref| <= atol + rtol |ref|):
 *   f32 matmul / linear / embedding:   atol 2e-5, rtol 1e-5 (f32 sums of <= 30 terms of size ~1;
 *                                      the embedding forward is a copy)
 *   embedding with a frozen bf16 table: bit-exact (the widened bf16 rows)
 *   bf16 linear vs exact reference:    atol 1e-4, rtol 1e-4 (bf16 products are exact in f32;
 *                                      only the f32 accumulation order differs)
 *   bf16 linear vs PyTorch's bf16 path: atol 2e-2, rtol 1e-2 (PyTorch rounds its result to
 *                                      bf16: relative error up to 2^-8), plus PyTorch's own
 *                                      distance from the exact reference: on CPUs without
 *                                      AVX-512 bf16 its kernels also round partial sums (seen
 *                                      on AMD Zen 3: 5 bf16 ulps off the exact product)
 * A second backward with dt_graph_set_accumulate(g, 1) must double every parameter gradient
 * (the gin_beta = 1 path of each kernel). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "harness.h"

#define TOL_F32 2e-5, 1e-5
#define TOL_BF16_EXACT 1e-4, 1e-4
#define TOL_BF16_TORCH 2e-2, 1e-2

enum { INPUT, PARAM, FROZEN };
typedef struct leaf {
    const char *key;  /* reference tensor name (after "<case>.") */
    int kind;         /* INPUT (with a gradient if gkey), PARAM (trainable), FROZEN */
    const char *gkey; /* reference gradient name, or NULL */
} leaf;

typedef int (*build_fn)(dt_graph *g, const int *ids, const int *arg);

static dt_ref *ref;

static const dt_tensor *get(const char *cs, const char *key, int raw) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, key);
    const dt_tensor *t = raw ? dt_ref_raw(ref, name) : dt_ref_get(ref, name);
    CHECK(t != NULL, "reference %s missing", name);
    return t;
}

/* mine vs PyTorch's bf16 result `torch`, allowing atol + rtol |torch| plus PyTorch's own
 * distance from the exact reference. */
static void check_vs_torch(const char *what, const dt_tensor *mine, const dt_tensor *torch,
                           const dt_tensor *exact, double atol, double rtol) {
    if (!mine || !torch || !exact) return;
    int64_t n = dt_tensor_numel(torch), bad = 0;
    const float *m = mine->data, *t = torch->data, *e = exact->data;
    double dev = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)t[i] - e[i]);
        dev = d > dev ? d : dev;
        bad += !(fabs((double)m[i] - t[i]) <= atol + rtol * fabs(t[i]) + d);
    }
    CHECK(dt_tensor_numel(mine) == n && bad == 0, "%s: %lld of %lld outside the tolerance", what,
          (long long)bad, (long long)n);
    printf("  %s: PyTorch's largest distance from the exact reference %.3g\n", what, dev);
}

/* Builds the case, runs forward/backward, compares out (against each of outs[]) and grads
 * (gx_keys[] is a second reference for input gradients, with its own tolerance, or NULL). */
static void run_case(const char *cs, int nleaf, const leaf *lv, build_fn build, const int *arg,
                     const char *out_key, double atol, double rtol, const char *out_key2,
                     const char *gkey2, double atol2, double rtol2) {
    char what[160];
    dt_graph *g = dt_graph_init();
    int ids[4], r = -1;
    for (int i = 0; i < nleaf; i++) {
        const dt_tensor *t = get(cs, lv[i].key, 1);
        if (!t) return;
        if (lv[i].kind == INPUT)
            ids[i] = dt_graph_input(g, lv[i].key, t->dtype, t->ndim, t->shape, lv[i].gkey != NULL);
        else
            ids[i] = dt_graph_param(g, lv[i].key, t->dtype, t->ndim, t->shape,
                                    lv[i].kind == FROZEN ? DT_PARAM_FROZEN : 0);
    }
    int out = build(g, ids, arg);
    CHECK(out >= 0, "%s: build failed: %s", cs, dt_last_error());
    if (out < 0) {
        dt_graph_free(g);
        return;
    }
    CHECK_OK(dt_graph_keep(g, out));
    int loss = dt_test_dotloss(g, out, &r);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    for (int i = 0; i < nleaf; i++) dt_test_set(g, ids[i], get(cs, lv[i].key, 1));
    dt_test_set(g, r, get(cs, "R", 0));
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    snprintf(what, sizeof what, "%s %s", cs, out_key);
    dt_check_tensor(what, dt_graph_value(g, out), get(cs, out_key, 0), atol, rtol);
    if (out_key2) {
        snprintf(what, sizeof what, "%s %s", cs, out_key2);
        check_vs_torch(what, dt_graph_value(g, out), get(cs, out_key2, 0), get(cs, out_key, 0),
                       atol2, rtol2);
    }
    for (int i = 0; i < nleaf; i++) {
        if (!lv[i].gkey) continue;
        snprintf(what, sizeof what, "%s %s", cs, lv[i].gkey);
        int exact_in = lv[i].kind == INPUT && gkey2;
        dt_check_tensor(what, dt_graph_grad(g, ids[i]), get(cs, lv[i].gkey, 0), atol, rtol);
        if (exact_in) {
            snprintf(what, sizeof what, "%s %s", cs, gkey2);
            check_vs_torch(what, dt_graph_grad(g, ids[i]), get(cs, gkey2, 0),
                           get(cs, lv[i].gkey, 0), atol2, rtol2);
        }
    }
    /* Accumulation: a second backward adds the same parameter gradients again. */
    dt_graph_set_accumulate(g, 1);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    for (int i = 0; i < nleaf; i++) {
        if (lv[i].kind != PARAM || !lv[i].gkey) continue;
        const dt_tensor *gr = get(cs, lv[i].gkey, 0);
        const dt_tensor *mine = dt_graph_grad(g, ids[i]);
        int64_t n = dt_tensor_numel(gr);
        float twice[4096];
        if (n > 4096 || !mine || !mine->data) continue;
        for (int64_t j = 0; j < n; j++) twice[j] = 2.0f * ((const float *)gr->data)[j];
        snprintf(what, sizeof what, "%s %s accumulated twice", cs, lv[i].gkey);
        dt_check_close(what, mine->data, twice, n, 2 * atol, rtol);
    }
    dt_graph_free(g);
}

static int build_matmul(dt_graph *g, const int *ids, const int *arg) {
    return dt_matmul(g, ids[0], ids[1], arg[0], arg[1]);
}
static int build_linear(dt_graph *g, const int *ids, const int *arg) {
    return dt_linear(g, ids[0], ids[1], arg[0] ? ids[2] : -1);
}
static int build_embedding(dt_graph *g, const int *ids, const int *arg) {
    return dt_embedding(g, ids[0], ids[1]);
}

/* A frozen bf16 table: the output must be exactly the widened bf16 rows (the reference table
 * rounded to bf16 here, so its f32 image is exact). */
static void embedding_bf16(void) {
    const dt_tensor *ids = get("emb_i64", "ids", 1), *tab = get("emb_i64", "table", 0);
    if (!ids || !tab) return;
    int64_t V = tab->shape[0], D = tab->shape[1], n = dt_tensor_numel(ids);
    dt_graph *g = dt_graph_init();
    int id = dt_graph_input(g, "ids", ids->dtype, ids->ndim, ids->shape, 0);
    int t = dt_graph_param(g, "table", DT_BF16, 2, tab->shape, DT_PARAM_FROZEN);
    int y = dt_embedding(g, id, t);
    CHECK(y >= 0, "embedding bf16: %s", dt_last_error());
    CHECK_OK(dt_graph_keep(g, y));
    CHECK_OK(dt_graph_compile(g, dt_sum(g, y), &(dt_graph_opts){.no_backward = 1}));
    dt_test_set(g, id, ids);
    dt_test_set(g, t, tab); /* rounds to bf16 */
    CHECK_OK(dt_graph_forward(g, 0));
    const float *out = dt_graph_value(g, y)->data;
    const uint16_t *tb = dt_graph_value(g, t)->data;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = (int64_t)dt_tensor_get(ids, i);
        for (int64_t d = 0; d < D && row < V; d++)
            bad += out[i * D + d] != dt_bf16_to_f32(tb[row * D + d]);
    }
    CHECK(bad == 0, "embedding bf16: %d elements differ from the bf16 table rows", bad);
    dt_graph_free(g);
}

int main(void) {
    ref = dt_ref_load("linear.safetensors");
    if (!ref) return dt_test_finish("linear_parity");

    /* matmul: inputs a, b with gradients; b as a trainable parameter in the shared case (the
     * way a model shares a weight across the batch). */
    const char *combos[] = {"nn", "nt", "tn", "tt"};
    for (int shared = 0; shared < 2; shared++) {
        for (int c = 0; c < 4; c++) {
            char cs[32];
            snprintf(cs, sizeof cs, "mm_%s_%c", combos[c], shared ? 's' : 'b');
            leaf lv[2] = {{"a", INPUT, "ga"}, {"b", shared ? PARAM : INPUT, "gb"}};
            int arg[2] = {combos[c][0] == 't', combos[c][1] == 't'};
            run_case(cs, 2, lv, build_matmul, arg, "out", TOL_F32, NULL, NULL, 0, 0);
        }
    }
    {
        leaf lv[2] = {{"a", INPUT, "ga"}, {"b", PARAM, "gb"}};
        run_case("mm_2d", 2, lv, build_matmul, (int[]){0, 0}, "out", TOL_F32, NULL, NULL, 0, 0);
    }

    /* linear f32 */
    {
        leaf lv[3] = {{"x", INPUT, "gx"}, {"w", PARAM, "gw"}, {"b", PARAM, "gb"}};
        run_case("lin_bias", 3, lv, build_linear, (int[]){1}, "out", TOL_F32, NULL, NULL, 0, 0);
        run_case("lin_nobias", 2, lv, build_linear, (int[]){0}, "out", TOL_F32, NULL, NULL, 0, 0);
    }

    /* linear with a frozen bf16 weight: exact references at a tight tolerance, PyTorch's own
     * bf16 results at a bf16 tolerance. The bias gradient is f32 throughout. */
    {
        leaf lv[3] = {{"x", INPUT, "gx_exact"}, {"w", FROZEN, NULL}, {"b", PARAM, "gb"}};
        run_case("lin_bf16", 3, lv, build_linear, (int[]){1}, "out_exact", TOL_BF16_EXACT,
                 "out_torch", "gx_torch", TOL_BF16_TORCH);
    }

    /* embedding with repeated ids, i64 and i32 */
    {
        leaf lv[2] = {{"ids", INPUT, NULL}, {"table", PARAM, "gtable"}};
        run_case("emb_i64", 2, lv, build_embedding, NULL, "out", TOL_F32, NULL, NULL, 0, 0);
        run_case("emb_i32", 2, lv, build_embedding, NULL, "out", TOL_F32, NULL, NULL, 0, 0);
    }
    embedding_bf16();
    dt_ref_free(ref);
    return dt_test_finish("linear_parity");
}
