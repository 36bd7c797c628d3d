/* Finite-difference gradient checks for the nn family: layernorm, rmsnorm, relu, gelu (both
 * forms), silu, softmax, cross-entropy (label smoothing + ignored rows), dropout (training
 * mode, fixed step, so every forward draws the same mask), transpose, permute, concat, narrow
 * and split.
 *
 * Tolerances: the harness defaults (central differences with eps 1e-2 in f32 forward passes,
 * atol 1e-2, rtol 5e-2): the second-order error of a central difference at that step is far
 * below them for these smooth ops. ReLU's inputs are moved at least 0.1 away from its kink so
 * that no probe crosses it. Every leaf that feeds two consumers (the "reuse" graphs) also
 * exercises the accumulate (gin_beta = 1) path of the op's backward. */
#include <math.h>
#include <string.h>
#include "harness.h"

/* loss = sum(out * R); fills every f32 leaf with N(0, 1), then calls `fix` (may be NULL) to
 * adjust values, and runs the gradient check. */
static void check_graph(dt_graph *g, int out, const char *what, const dt_gradcheck_opts *o,
                        void (*fix)(dt_graph *g, void *arg), void *arg) {
    if (!CHECK(out >= 0, "%s: build: %s", what, dt_last_error())) return;
    int r;
    int loss = dt_test_dotloss(g, out, &r);
    dt_status s = dt_graph_compile(g, loss, NULL);
    if (!CHECK(s == DT_OK, "%s: compile: %s", what, dt_last_error())) return;
    for (int id = 0; id < dt_graph_node_count(g); id++) {
        const char *nm = dt_graph_name(g, id);
        if (!nm || dt_graph_find(g, nm) != id) continue; /* ops */
        if (dt_graph_shape(g, id)->dtype == DT_F32) dt_test_randn(g, id, 1000 + (uint64_t)id, 1.0f);
    }
    if (fix) fix(g, arg);
    int bad = dt_gradcheck(g, loss, o);
    CHECK(bad == 0, "%s: %d tensors failed the gradient check", what, bad);
}

static void fd_layernorm(int has_w, int has_b) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 3, (int64_t[]){2, 3, 16}, 1);
    int w = has_w ? dt_graph_param(g, "w", DT_F32, 1, (int64_t[]){16}, DT_PARAM_NO_DECAY) : -1;
    int b = has_b ? dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){16}, DT_PARAM_NO_DECAY) : -1;
    char what[64];
    snprintf(what, sizeof what, "layernorm w=%d b=%d", has_w, has_b);
    check_graph(g, dt_layernorm(g, x, w, b, 1e-5f), what, NULL, NULL, NULL);
    dt_graph_free(g);
}

static void fd_rmsnorm(int has_w) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){5, 16}, 1);
    int w = has_w ? dt_graph_param(g, "w", DT_F32, 1, (int64_t[]){16}, DT_PARAM_NO_DECAY) : -1;
    check_graph(g, dt_rmsnorm(g, x, w, 1e-6f), has_w ? "rmsnorm" : "rmsnorm without weight", NULL,
                NULL, NULL);
    dt_graph_free(g);
}

/* Moves every element of leaf *arg at least 0.1 away from 0 (ReLU's kink). */
static void fix_away_from_zero(dt_graph *g, void *arg) {
    const dt_tensor *t = dt_graph_value(g, *(int *)arg);
    float *v = t->data;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) v[i] += v[i] >= 0 ? 0.1f : -0.1f;
}

/* kind: 0 relu, 1 gelu erf, 2 gelu tanh, 3 silu. x also feeds the sum directly (reuse). */
static void fd_act(int kind) {
    static const char *names[] = {"relu", "gelu (erf)", "gelu (tanh)", "silu"};
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 9}, 1);
    int y = kind == 0 ? dt_relu(g, x) : kind == 3 ? dt_silu(g, x) : dt_gelu(g, x, kind == 2);
    check_graph(g, dt_add(g, dt_scale(g, x, 0.5f), y), names[kind], NULL,
                kind == 0 ? fix_away_from_zero : NULL, &x);
    dt_graph_free(g);
}

static void fd_softmax(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 3, (int64_t[]){2, 3, 7}, 1);
    check_graph(g, dt_softmax(g, x), "softmax", NULL, NULL, NULL);
    dt_graph_free(g);
}

/* Targets: row i -> class (3 i) % C, rows 1 and 4 ignored. */
static void fix_targets(dt_graph *g, void *arg) {
    const dt_tensor *t = dt_graph_value(g, *(int *)arg);
    int64_t *v = t->data;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) v[i] = (3 * i) % 5;
    v[1] = v[4] = -100;
}

static void fd_cross_entropy(float ls) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "logits", DT_F32, 2, (int64_t[]){6, 5}, 1);
    int t = dt_graph_input(g, "targets", DT_I64, 1, (int64_t[]){6}, 0);
    char what[64];
    snprintf(what, sizeof what, "cross_entropy ls=%g with ignored rows", ls);
    check_graph(g, dt_cross_entropy(g, x, t, ls, -100), what, NULL, fix_targets, &t);
    dt_graph_free(g);
}

static void fd_dropout(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){8, 16}, 1);
    dt_graph_set_rng(g, 1234, 7, 0);
    dt_gradcheck_opts o = {.training = 1};
    check_graph(g, dt_dropout(g, x, 0.3f), "dropout p=0.3 (training)", &o, NULL, NULL);
    dt_graph_free(g);
}

static void fd_shape(void) {
    {
        dt_graph *g = dt_graph_init();
        int x = dt_graph_input(g, "x", DT_F32, 3, (int64_t[]){3, 4, 5}, 1);
        check_graph(g, dt_transpose(g, x, 0, 2), "transpose", NULL, NULL, NULL);
        dt_graph_free(g);
    }
    {
        dt_graph *g = dt_graph_init();
        int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, 4, 2}, 1);
        check_graph(g, dt_permute(g, x, (const int[]){3, 1, 0, 2}), "permute", NULL, NULL, NULL);
        dt_graph_free(g);
    }
    {
        dt_graph *g = dt_graph_init();
        int a = dt_graph_input(g, "a", DT_F32, 2, (int64_t[]){3, 2}, 1);
        int b = dt_graph_param(g, "b", DT_F32, 2, (int64_t[]){3, 4}, 0);
        check_graph(g, dt_concat(g, 3, (const int[]){a, b, a}, 1), "concat (a, b, a)", NULL, NULL,
                    NULL);
        dt_graph_free(g);
    }
    {
        dt_graph *g = dt_graph_init();
        int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 6}, 1);
        check_graph(g, dt_narrow(g, x, 0, 1, 2), "narrow", NULL, NULL, NULL);
        dt_graph_free(g);
    }
    {
        /* split into 3, piece 1 unused, pieces joined in reverse: x's gradient is written by
         * two narrows (one overwriting, zeros outside its slice, one adding). */
        dt_graph *g = dt_graph_init();
        int x = dt_graph_input(g, "x", DT_F32, 3, (int64_t[]){2, 7, 3}, 1);
        int p[3];
        CHECK(dt_split(g, x, -2, 3, (const int64_t[]){2, 1, 4}, p) == 0, "split: %s",
              dt_last_error());
        check_graph(g, dt_concat(g, 2, (const int[]){p[2], p[0]}, 1), "split (one piece unused)",
                    NULL, NULL, NULL);
        dt_graph_free(g);
    }
}

int main(void) {
    for (int w = 0; w < 2; w++)
        for (int b = 0; b < 2; b++) fd_layernorm(w, b);
    fd_rmsnorm(1);
    fd_rmsnorm(0);
    for (int k = 0; k < 4; k++) fd_act(k);
    fd_softmax();
    fd_cross_entropy(0.0f);
    fd_cross_entropy(0.1f);
    fd_dropout();
    fd_shape();
    return dt_test_finish("nn_fd");
}
