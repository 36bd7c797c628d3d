/* Finite-difference gradient checks for matmul, linear (f32 and bf16 weight) and embedding.
 *
 * Tolerances: the harness defaults (eps 1e-2, atol 1e-2, rtol 5e-2) for the f32 ops, which are
 * linear in each input, so central differences are exact up to f32 rounding of the loss.
 * bf16 linear: x is rounded to bf16 in forward (spacing up to 2^-6 for |x| < 4), so a step of
 * 1e-2 would mostly measure rounding; it uses eps 0.5 and atol/rtol 5e-2, and the analytic dx
 * itself comes from bf16(gout) (relative error 2^-9).
 * The "shared" graphs feed one leaf into two ops, so the second backward accumulates into the
 * first one's gradient (gin_beta = 1). */
#include <string.h>
#include "harness.h"

static void check_graph(dt_graph *g, int out, const char *what, const dt_gradcheck_opts *o) {
    int r;
    int loss = dt_test_dotloss(g, out, &r);
    dt_status s = dt_graph_compile(g, loss, NULL);
    CHECK(s == DT_OK, "%s: compile: %s", what, dt_last_error());
    if (s != DT_OK) return;
    /* leaves: fill every f32 input/param with N(0, 1) from a seed by id */
    for (int id = 0; id < dt_graph_node_count(g); id++) {
        const char *nm = dt_graph_name(g, id);
        if (dt_graph_find(g, nm) != id) continue; /* ops */
        const dt_tensor *t = dt_graph_shape(g, id);
        if (id != r && (t->dtype == DT_F32 || t->dtype == DT_BF16))
            dt_test_randn(g, id, 1000 + (uint64_t)id, 1.0f);
    }
    dt_test_randn(g, r, 7, 1.0f);
    int bad = dt_gradcheck(g, loss, o);
    CHECK(bad == 0, "%s: %d tensors failed the gradient check", what, bad);
}

static void fd_matmul(int ta, int tb, int shared) {
    enum { B0 = 2, B1 = 2, M = 3, K = 4, N = 5 };
    dt_graph *g = dt_graph_init();
    int64_t sa[4] = {B0, B1, ta ? K : M, ta ? M : K};
    int64_t sb[4] = {B0, B1, tb ? N : K, tb ? K : N};
    int a = dt_graph_input(g, "a", DT_F32, 4, sa, 1);
    int b = shared ? dt_graph_param(g, "b", DT_F32, 2, sb + 2, 0)
                   : dt_graph_input(g, "b", DT_F32, 4, sb, 1);
    char what[64];
    snprintf(what, sizeof what, "matmul ta=%d tb=%d %s", ta, tb, shared ? "shared" : "batched");
    int y = dt_matmul(g, a, b, ta, tb);
    CHECK(y >= 0, "%s: %s", what, dt_last_error());
    check_graph(g, y, what, NULL);
    dt_graph_free(g);
}

/* a feeds two matmuls, b one: dA accumulates (gin_beta = 1 on the second). */
static void fd_matmul_reuse(void) {
    dt_graph *g = dt_graph_init();
    int a = dt_graph_input(g, "a", DT_F32, 3, (int64_t[]){2, 3, 4}, 1);
    int b = dt_graph_param(g, "b", DT_F32, 2, (int64_t[]){4, 5}, 0);
    int c = dt_graph_param(g, "c", DT_F32, 2, (int64_t[]){5, 4}, 0);
    int y = dt_add(g, dt_matmul(g, a, b, 0, 0), dt_matmul(g, a, c, 0, 1));
    CHECK(y >= 0, "matmul reuse: %s", dt_last_error());
    check_graph(g, y, "matmul reuse (accumulating dA)", NULL);
    dt_graph_free(g);
}

static void fd_linear(int bias) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 3, (int64_t[]){2, 3, 6}, 1);
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){5, 6}, 0);
    int b = bias ? dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){5}, DT_PARAM_NO_DECAY) : -1;
    int y = dt_linear(g, x, w, b);
    CHECK(y >= 0, "linear: %s", dt_last_error());
    check_graph(g, y, bias ? "linear with bias" : "linear without bias", NULL);
    dt_graph_free(g);
}

/* bf16 weight; x also feeds an f32 linear so the bf16 dx accumulates (gin_beta = 1 ->
 * the oneDNN primitive with a sum post-op) or is accumulated into, depending on order. */
static void fd_linear_bf16(void) {
    dt_gradcheck_opts o = {.eps = 0.5, .atol = 5e-2, .rtol = 5e-2};
    for (int twice = 0; twice < 2; twice++) {
        dt_graph *g = dt_graph_init();
        int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 16}, 1);
        int w = dt_graph_param(g, "w", DT_BF16, 2, (int64_t[]){6, 16}, DT_PARAM_FROZEN);
        int b = dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){6}, 0);
        int y = dt_linear(g, x, w, b);
        if (twice) {
            int w2 = dt_graph_param(g, "w2", DT_BF16, 2, (int64_t[]){6, 16}, DT_PARAM_FROZEN);
            int w3 = dt_graph_param(g, "w3", DT_F32, 2, (int64_t[]){6, 16}, 0);
            y = dt_add(g, dt_add(g, y, dt_linear(g, x, w2, -1)), dt_linear(g, x, w3, -1));
        }
        CHECK(y >= 0, "linear bf16: %s", dt_last_error());
        check_graph(g, y, twice ? "linear bf16 (x shared by three linears)" : "linear bf16", &o);
        dt_graph_free(g);
    }
}

static void fd_embedding(dt_dtype idt) {
    dt_graph *g = dt_graph_init();
    int64_t ishape[2] = {3, 4};
    int ids = dt_graph_input(g, "ids", idt, 2, ishape, 0);
    int tab = dt_graph_param(g, "table", DT_F32, 2, (int64_t[]){6, 5}, 0);
    int y = dt_embedding(g, ids, tab);
    CHECK(y >= 0, "embedding: %s", dt_last_error());
    int r;
    int loss = dt_test_dotloss(g, y, &r);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    /* repeated ids (0 three times, 5 twice), one row (3) never used */
    int64_t v[12] = {0, 5, 2, 0, 1, 4, 5, 0, 2, 2, 1, 4};
    dt_tensor t;
    dt_tensor_init(&t, v, DT_I64, 2, ishape);
    dt_test_set(g, ids, &t);
    dt_test_randn(g, tab, 3, 1.0f);
    dt_test_randn(g, r, 4, 1.0f);
    dt_gradcheck_opts o = {.max_per_tensor = 30}; /* every table element */
    CHECK(dt_gradcheck(g, loss, &o) == 0, "embedding %s: gradient check failed",
          dt_dtype_name(idt));
    dt_graph_free(g);
}

int main(void) {
    for (int shared = 0; shared < 2; shared++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) fd_matmul(ta, tb, shared);
    fd_matmul_reuse();
    fd_linear(1);
    fd_linear(0);
    fd_linear_bf16();
    fd_embedding(DT_I64);
    fd_embedding(DT_I32);
    return dt_test_finish("linear_fd");
}
