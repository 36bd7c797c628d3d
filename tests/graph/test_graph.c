/* Graph core: autodiff of broadcasting element-wise ops (finite differences), gradient
 * accumulation, planner reuse, recomputation (bit-identical gradients, lower peak), no
 * allocation in a step, measure-only compiles (the real figures, nothing allocated), and error
 * messages of bad calls. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static void test_broadcast_fd(void) {
    dt_graph *g = dt_graph_init();
    int a = dt_graph_input(g, "a", DT_F32, 3, (int64_t[]){2, 3, 4}, 1);
    int b = dt_graph_param(g, "b", DT_F32, 2, (int64_t[]){3, 1}, 0);
    int c = dt_graph_param(g, "c", DT_F32, 1, (int64_t[]){4}, 0);
    int d = dt_graph_input(g, "d", DT_F32, 3, (int64_t[]){2, 1, 4}, 1);
    int x = dt_mul(g, dt_add(g, a, b), c);             /* [2,3,4] */
    int y = dt_sub(g, dt_scale(g, x, 0.5f), d);         /* [2,3,4] */
    int z = dt_mul(g, y, y);                            /* same input twice */
    int r = dt_reshape(g, z, 2, (int64_t[]){6, 4});
    int m = dt_mul(g, r, dt_reshape(g, a, 2, (int64_t[]){6, 4}));
    int loss = dt_add(g, dt_mean(g, m), dt_sum(g, x));
    CHECK(loss >= 0, "build: %s", dt_last_error());
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, a, 1, 1.0f), dt_test_randn(g, b, 2, 1.0f);
    dt_test_randn(g, c, 3, 1.0f), dt_test_randn(g, d, 4, 1.0f);
    dt_gradcheck_opts o = {.eps = 1e-2, .atol = 2e-3, .rtol = 1e-2};
    CHECK(dt_gradcheck(g, loss, &o) == 0, "broadcast element-wise gradients");
    dt_graph_free(g);
}

/* Trailing dims of size 1 (e.g. [N, C, 1, 1] activations): every gradient is overwritten, not
 * added to whatever the planner left in the buffer. Checked against the exact values. */
static void test_trailing_ones(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, 1, 1}, 1);
    int b = dt_graph_input(g, "b", DT_F32, 4, (int64_t[]){1, 3, 1, 1}, 1);
    int y = dt_add(g, dt_scale(g, x, 1.0f), b);
    int r, loss = dt_test_dotloss(g, dt_mul(g, y, y), &r);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    float *xv = dt_graph_value(g, x)->data, *bv = dt_graph_value(g, b)->data;
    float *rv = dt_graph_value(g, r)->data;
    for (int i = 0; i < 6; i++) xv[i] = (float)i, rv[i] = 1.0f + (float)i;
    for (int i = 0; i < 3; i++) bv[i] = 0.5f * (float)i;
    for (int rep = 0; rep < 2; rep++) { /* twice: stale buffer contents must not leak in */
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
    }
    const float *gx = dt_graph_grad(g, x)->data, *gb = dt_graph_grad(g, b)->data;
    int ok = 1;
    float gbx[3] = {0, 0, 0};
    for (int i = 0; i < 6; i++) {
        float yv = xv[i] + bv[i % 3], want = 2.0f * yv * rv[i];
        ok &= fabsf(gx[i] - want) <= 1e-5f * fabsf(want);
        gbx[i % 3] += want;
    }
    for (int c = 0; c < 3; c++) ok &= fabsf(gb[c] - gbx[c]) <= 1e-5f * fabsf(gbx[c]);
    CHECK(ok, "gradients with trailing dims of 1 are exact");
    dt_graph_free(g);
}

/* Parity with PyTorch for the broadcasting ops (tests/ref/ref_basic.py). */
static void test_basic_parity(void) {
    dt_ref *ref = dt_ref_load("basic.safetensors");
    if (!ref) return;
    dt_graph *g = dt_graph_init();
    int a = dt_graph_input(g, "a", DT_F32, 3, (int64_t[]){4, 3, 5}, 1);
    int b = dt_graph_input(g, "b", DT_F32, 2, (int64_t[]){3, 1}, 1);
    int c = dt_graph_input(g, "c", DT_F32, 3, (int64_t[]){4, 1, 5}, 1);
    int out = dt_scale(g, dt_sub(g, dt_mul(g, dt_add(g, a, b), c), b), 1.5f);
    int rid, loss = dt_test_dotloss(g, out, &rid);
    dt_graph_keep(g, out);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_set(g, a, dt_ref_get(ref, "a"));
    dt_test_set(g, b, dt_ref_get(ref, "b"));
    dt_test_set(g, c, dt_ref_get(ref, "c"));
    dt_test_set(g, rid, dt_ref_get(ref, "R"));
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    /* f32 element-wise: only rounding differs; 1e-6 absolute + 1e-5 relative. */
    dt_check_tensor("basic out", dt_graph_value(g, out), dt_ref_get(ref, "out"), 1e-6, 1e-5);
    dt_check_tensor("basic grad a", dt_graph_grad(g, a), dt_ref_get(ref, "grad_a"), 1e-6, 1e-5);
    dt_check_tensor("basic grad b", dt_graph_grad(g, b), dt_ref_get(ref, "grad_b"), 1e-5, 1e-5);
    dt_check_tensor("basic grad c", dt_graph_grad(g, c), dt_ref_get(ref, "grad_c"), 1e-5, 1e-5);
    dt_graph_free(g);
    dt_ref_free(ref);
}

/* A deep chain of blocks h = h * w_i + s * h on x [rows, 256]; with `recompute` every block is a
 * segment. Returns the loss (the mean). */
static int chain_build(dt_graph *g, int64_t rows, int recompute, int *w0) {
    int h = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){rows, 256}, 0);
    for (int i = 0; i < 8; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "w%d", i);
        int w = dt_graph_param(g, nm, DT_F32, 1, (int64_t[]){256}, 0);
        if (i == 0) *w0 = w;
        int before = dt_graph_node_count(g) - 1;
        int t = dt_mul(g, h, w);
        t = dt_mul(g, t, t);
        h = dt_add(g, dt_scale(g, t, 0.25f), dt_scale(g, h, 0.5f));
        if (recompute) CHECK_OK(dt_graph_recompute(g, before, h));
    }
    return dt_mean(g, h);
}

static dt_graph *chain(int recompute, int no_reuse, int *loss_out, int *w0) {
    dt_graph *g = dt_graph_init();
    *loss_out = chain_build(g, 64, recompute, w0);
    dt_graph_opts o = {.no_reuse = no_reuse};
    CHECK_OK(dt_graph_compile(g, *loss_out, &o));
    dt_test_randn(g, dt_graph_find(g, "x"), 11, 0.5f); /* small: 8 squarings stay finite */
    size_t n;
    float *p = dt_graph_flat_param(g, &n);
    for (size_t i = 0; i < n; i++) p[i] = 1.0f + 0.001f * (float)(i % 97);
    return g;
}

static void test_recompute_and_planner(void) {
    int l0, l1, l2, w;
    dt_graph *g0 = chain(0, 0, &l0, &w), *g1 = chain(1, 0, &l1, &w), *g2 = chain(0, 1, &l2, &w);
    dt_graph *gs[3] = {g0, g1, g2};
    int ls[3] = {l0, l1, l2};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(dt_graph_forward(gs[k], 1));
        CHECK_OK(dt_graph_backward(gs[k]));
    }
    size_t n;
    float *gr0 = dt_graph_flat_grad(g0, &n), *gr1 = dt_graph_flat_grad(g1, NULL),
          *gr2 = dt_graph_flat_grad(g2, NULL);
    CHECK(memcmp(gr0, gr1, n * 4) == 0, "recompute gives bit-identical gradients");
    CHECK(memcmp(gr0, gr2, n * 4) == 0, "planned and unplanned memory give identical gradients");
    float nz = 0;
    for (size_t i = 0; i < n; i++) nz += fabsf(gr0[i]);
    CHECK(nz > 0, "gradients are not all zero");
    CHECK(*(float *)dt_graph_value(g0, l0)->data == *(float *)dt_graph_value(g1, ls[1])->data,
          "same loss");
    dt_graph_mem m0, m1, m2;
    dt_graph_memory(g0, &m0), dt_graph_memory(g1, &m1), dt_graph_memory(g2, &m2);
    printf("  arena: plain %zu, recompute %zu, no reuse %zu (sum of buffers %zu)\n",
           m0.arena_bytes, m1.arena_bytes, m2.arena_bytes, m0.unplanned_bytes);
    CHECK(m0.arena_bytes < m0.unplanned_bytes / 2, "planner reuses memory (%zu vs %zu)",
          m0.arena_bytes, m0.unplanned_bytes);
    CHECK(m2.arena_bytes == m2.unplanned_bytes, "no_reuse gives every buffer its own memory");
    CHECK(m1.arena_bytes < m0.arena_bytes * 2 / 3, "recompute lowers peak (%zu vs %zu)",
          m1.arena_bytes, m0.arena_bytes);
    /* Only what backward reads is recomputed: per block the first mul (the second's backward
     * reads its output); the second mul, both scales and the add have no reader in backward
     * (mul's backward needs its inputs, not its output; scale and add need neither). */
    int nf = 0, ne = dt_graph_entry_count(g1, &nf), n_recomp = 0, all_mul = 1;
    for (int k = nf; k < ne; k++) {
        int ph = -1;
        const char *op = dt_graph_entry_op(g1, k, &ph);
        if (ph != 2) continue;
        n_recomp++;
        all_mul &= op && !strcmp(op, "mul");
    }
    CHECK(n_recomp == 8 && all_mul, "one recomputed mul per block (%d recomputed entries)",
          n_recomp);
    /* Accumulation: a second backward with accumulate on doubles the gradient. */
    float *copy = malloc(n * 4);
    memcpy(copy, gr0, n * 4);
    dt_graph_set_accumulate(g0, 1);
    CHECK_OK(dt_graph_forward(g0, 1));
    CHECK_OK(dt_graph_backward(g0));
    float *twice = malloc(n * 4);
    for (size_t i = 0; i < n; i++) twice[i] = 2 * copy[i];
    /* Not bit-exact: a broadcast reduction adds its terms onto the old value one by one. */
    dt_check_close("accumulate adds to the flat gradient", gr0, twice, (int64_t)n, 1e-6, 1e-5);
    free(twice);
    dt_graph_set_accumulate(g0, 0);
    CHECK_OK(dt_graph_forward(g0, 1));
    CHECK_OK(dt_graph_backward(g0));
    CHECK(memcmp(gr0, copy, n * 4) == 0, "without accumulate gradients are overwritten");
    /* Loss scale 1/2 halves every gradient exactly. */
    dt_graph_set_loss_scale(g0, 0.5f);
    CHECK_OK(dt_graph_forward(g0, 1));
    CHECK_OK(dt_graph_backward(g0));
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= gr0[i] == 0.5f * copy[i];
    CHECK(ok, "loss scale scales gradients");
    /* No allocation in a step: after a warm-up step, further steps take no page faults. */
    struct rusage r0, r1;
    CHECK_OK(dt_graph_forward(g1, 1));
    CHECK_OK(dt_graph_backward(g1));
    getrusage(RUSAGE_SELF, &r0);
    for (int s = 0; s < 10; s++) {
        dt_graph_forward(g1, 1);
        dt_graph_backward(g1);
    }
    getrusage(RUSAGE_SELF, &r1);
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow memory and quarantine fault pages of their own */
    CHECK(r1.ru_minflt - r0.ru_minflt == 0 && r1.ru_majflt == r0.ru_majflt,
          "steps after the first take no page faults (%ld)", r1.ru_minflt - r0.ru_minflt);
#endif
    free(copy);
    for (int k = 0; k < 3; k++) dt_graph_free(gs[k]);
}

/* measure_only: the same figures as a real compile of the same graph, nothing allocated, and the
 * graph refuses to run, to compile again or to grow. */
static void test_measure_only(void) {
    for (int rc = 0; rc <= 1; rc++) {
        int l, w;
        dt_graph *real = chain(rc, 0, &l, &w), *g = dt_graph_init();
        int loss = chain_build(g, 64, rc, &w);
        CHECK_OK(dt_graph_compile(g, loss, &(dt_graph_opts){.measure_only = 1}));
        dt_graph_mem a, b;
        dt_graph_memory(real, &a), dt_graph_memory(g, &b);
        printf("  measure_only (recompute %d): arena %zu, saved %zu; real arena %zu\n", rc,
               b.arena_bytes, b.saved_bytes, a.arena_bytes);
        CHECK(a.arena_bytes == b.arena_bytes && a.unplanned_bytes == b.unplanned_bytes &&
                  a.saved_bytes == b.saved_bytes && a.param_bytes == b.param_bytes &&
                  a.grad_bytes == b.grad_bytes,
              "recompute %d: measured figures are the real compile's", rc);
        CHECK(b.saved_bytes > 0 && b.saved_bytes < b.arena_bytes, "recompute %d: saved %zu of %zu",
              rc, b.saved_bytes, b.arena_bytes);
        CHECK(!dt_graph_flat_param(g, NULL) && !dt_graph_flat_grad(g, NULL) &&
                  !dt_graph_value(g, loss),
              "recompute %d: nothing allocated or bound", rc);
        CHECK(dt_graph_forward(g, 1) == DT_ERR_STATE && strstr(dt_last_error(), "measure_only"),
              "a measured graph does not run: %s", dt_last_error());
        CHECK(dt_graph_compile(g, loss, NULL) == DT_ERR_STATE &&
                  strstr(dt_last_error(), "measure_only"),
              "nor compiles again: %s", dt_last_error());
        CHECK(dt_mean(g, loss) < 0, "nor grows");
        dt_graph_free(real);
        dt_graph_free(g);
    }
    /* 2^24 rows: an arena of tens of GiB is planned, not allocated. */
    int w;
    dt_graph *g = dt_graph_init();
    int loss = chain_build(g, 1 << 24, 1, &w);
    CHECK_OK(dt_graph_compile(g, loss, &(dt_graph_opts){.measure_only = 1}));
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    CHECK(m.arena_bytes > ((size_t)16 << 30), "a %zu-byte arena measured", m.arena_bytes);
    dt_graph_free(g);
}

/* Gradient-ready events: each trainable parameter once per backward, and at that moment its
 * gradient already has its final value (so communication may start on it). */
typedef struct ready_log {
    dt_graph *g;
    int count[64];
    float *snap; /* copy of the flat gradient taken at each param's event */
} ready_log;

static void on_ready(void *ud, const int *params, int n) {
    ready_log *l = ud;
    float *gr = dt_graph_flat_grad(l->g, NULL);
    for (int k = 0; k < n; k++) {
        const dt_param_info *pi = dt_graph_param_info(l->g, params[k]);
        l->count[params[k]]++;
        memcpy(l->snap + pi->offset, gr + pi->offset, pi->numel * 4);
    }
}

static void test_grad_ready(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 8}, 0);
    int w0 = dt_graph_param(g, "w0", DT_F32, 1, (int64_t[]){8}, 0);
    int w1 = dt_graph_param(g, "w1", DT_F32, 1, (int64_t[]){8}, 0);
    int unused = dt_graph_param(g, "unused", DT_F32, 1, (int64_t[]){3}, 0);
    (void)unused;
    /* w0 is used at the start and again at the end (like tied embeddings). */
    int h = dt_mul(g, dt_mul(g, x, w0), w1);
    int loss = dt_sum(g, dt_mul(g, dt_add(g, h, w0), h));
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, x, 1, 1.0f);
    size_t n;
    float *p = dt_graph_flat_param(g, &n);
    for (size_t i = 0; i < n; i++) p[i] = 0.5f + 0.01f * (float)i;
    ready_log l = {.g = g, .snap = calloc(n, 4)};
    dt_graph_on_grad_ready(g, on_ready, &l);
    for (int step = 0; step < 2; step++) {
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
    }
    CHECK(l.count[0] == 2 && l.count[1] == 2 && l.count[2] == 2,
          "each param reported once per backward (%d %d %d)", l.count[0], l.count[1], l.count[2]);
    CHECK(memcmp(l.snap, dt_graph_flat_grad(g, NULL), n * 4) == 0,
          "gradients are final when reported");
    free(l.snap);
    dt_graph_free(g);
}

/* dt_graph_entry_op names each schedule entry's op and pass (what profilers print): forward
 * runs mul then sum, backward the same ops in reverse order. */
static void test_entry_ops(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 1, (int64_t[]){4}, 0);
    int w = dt_graph_param(g, "w", DT_F32, 1, (int64_t[]){4}, 0);
    int loss = dt_sum(g, dt_mul(g, x, w));
    CHECK(dt_graph_entry_op(g, 0, NULL) == NULL, "no entries before compile");
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    int nf = 0, n = dt_graph_entry_count(g, &nf), ph = -1;
    CHECK(n == 4 && nf == 2, "4 entries, 2 forward (got %d, %d)", n, nf);
    const char *want[4] = {"mul", "sum", "sum", "mul"};
    for (int k = 0; k < n && k < 4; k++) {
        const char *op = dt_graph_entry_op(g, k, &ph);
        CHECK(op && !strcmp(op, want[k]), "entry %d runs %s (got %s)", k, want[k], op ? op : "-");
        CHECK(ph == (k < nf ? 0 : 1), "entry %d is %s (phase %d)", k, k < nf ? "fwd" : "bwd", ph);
    }
    CHECK(dt_graph_entry_op(g, n, &ph) == NULL && dt_graph_entry_op(g, -1, NULL) == NULL,
          "out-of-range entries give NULL");
    dt_graph_free(g);
}

/* A frozen bf16 table only lookups read is row-read too (a sharded base gathers just the rows):
 * sparse_row D, and dt_graph_entry_row_ids names the ids input of each lookup entry (NULL for
 * other entries); the same table tied into a matrix product is dense. */
static void test_frozen_rows(void) {
    for (int tied = 0; tied < 2; tied++) {
        enum { V = 12, D = 4, T = 3 };
        dt_graph *g = dt_graph_init();
        int ids = dt_graph_input(g, "ids", DT_I32, 1, (int64_t[]){T}, 0);
        int emb = dt_graph_param(g, "emb", DT_BF16, 2, (int64_t[]){V, D}, DT_PARAM_FROZEN);
        int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){5, D}, 0);
        int out = dt_linear(g, dt_embedding(g, ids, emb), tied ? emb : w, -1);
        int r, loss = dt_test_dotloss(g, out, &r);
        CHECK_OK(dt_graph_compile(g, loss, NULL));
        const dt_param_info *pe = NULL;
        for (int i = 0; i < dt_graph_param_count(g); i++)
            if (dt_graph_param_info(g, i)->id == emb) pe = dt_graph_param_info(g, i);
        CHECK(pe && pe->sparse_row == (tied ? 0 : D), "tied %d: frozen sparse_row %zu", tied,
              pe ? pe->sparse_row : 0);
        int n = dt_graph_entry_count(g, NULL), lookups = 0, others = 0;
        for (int k = 0; k < n; k++) {
            const char *op = dt_graph_entry_op(g, k, NULL);
            const dt_tensor *t = dt_graph_entry_row_ids(g, k);
            if (op && !strcmp(op, "embedding"))
                lookups += t && t->data == dt_graph_value(g, ids)->data;
            else
                others += t != NULL;
        }
        CHECK(lookups >= 1 && others == 0, "tied %d: row ids of %d lookups, %d other entries",
              tied, lookups, others);
        CHECK(dt_graph_entry_row_ids(g, n) == NULL && dt_graph_entry_row_ids(g, -1) == NULL,
              "out-of-range entries give no row ids");
        dt_graph_free(g);
    }
}

/* dt_param_info.sparse_row: a table only embedding lookups read (twice, here) is row-sparse with
 * rows of D elements, and its gradient is +0.0 bits in every row no id named; the same table
 * also used in a matrix product (a tied lm_head) is dense, and so is everything else. */
static void test_sparse_rows(void) {
    for (int tied = 0; tied < 2; tied++) {
        enum { V = 10, D = 6, T = 4 };
        dt_graph *g = dt_graph_init();
        int ids = dt_graph_input(g, "ids", DT_I32, 1, (int64_t[]){T}, 0);
        int ids2 = dt_graph_input(g, "ids2", DT_I32, 1, (int64_t[]){T}, 0);
        int emb = dt_graph_param(g, "emb", DT_F32, 2, (int64_t[]){V, D}, 0);
        int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){3, D}, 0);
        int h = dt_add(g, dt_embedding(g, ids, emb), dt_embedding(g, ids2, emb));
        int out = dt_linear(g, h, tied ? emb : w, -1);
        int r, loss = dt_test_dotloss(g, out, &r);
        CHECK_OK(dt_graph_compile(g, loss, NULL));
        const dt_param_info *pe = dt_graph_param_info(g, 0), *pw = dt_graph_param_info(g, 1);
        CHECK(pe->sparse_row == (tied ? 0 : D) && pw->sparse_row == 0,
              "tied %d: sparse_row emb %zu w %zu", tied, pe->sparse_row, pw->sparse_row);
        int32_t *a = dt_graph_value(g, ids)->data, *b = dt_graph_value(g, ids2)->data;
        for (int i = 0; i < T; i++) a[i] = 2 * i, b[i] = (2 * i + 2) % 8; /* rows 0..6 even */
        dt_test_randn(g, emb, 1, 1.0f), dt_test_randn(g, w, 2, 1.0f), dt_test_randn(g, r, 3, 1.0f);
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        const float *ge = dt_graph_flat_grad(g, NULL) + pe->offset;
        int nonzero_odd = 0, zero_even = 0;
        for (int v = 0; v < V; v++) {
            uint32_t acc = 0;
            for (int j = 0; j < D; j++) {
                uint32_t u;
                memcpy(&u, ge + v * D + j, 4);
                acc |= u;
            }
            if (v % 2 == 1 || v == 8) nonzero_odd += acc != 0;
            else zero_even += acc == 0;
        }
        if (!tied)
            CHECK(nonzero_odd == 0 && zero_even == 0,
                  "untouched rows not +0.0 (%d) or touched rows zero (%d)", nonzero_odd,
                  zero_even);
        dt_graph_free(g);
    }
}

static void test_errors(void) {
    dt_graph *g = dt_graph_init();
    int a = dt_graph_input(g, "a", DT_F32, 2, (int64_t[]){2, 3}, 0);
    int b = dt_graph_input(g, "b", DT_F32, 2, (int64_t[]){4, 3}, 0);
    int c = dt_add(g, a, b);
    CHECK(c < 0, "mismatched broadcast fails");
    CHECK(strstr(dt_last_error(), "add") && strstr(dt_last_error(), "[2, 3]") &&
              strstr(dt_last_error(), "[4, 3]"),
          "message names op and shapes: %s", dt_last_error());
    int d = dt_mul(g, dt_scale(g, c, 2.0f), a); /* errors propagate through builders */
    CHECK(d < 0 && strstr(dt_last_error(), "add"), "first error kept: %s", dt_last_error());
    int i = dt_graph_input(g, "i", DT_I64, 1, (int64_t[]){3}, 0);
    CHECK(dt_add(g, i, i) < 0 && strstr(dt_last_error(), "i64"), "int operands rejected: %s",
          dt_last_error());
    CHECK(dt_graph_param(g, "p", DT_BF16, 1, (int64_t[]){3}, 0) < 0, "trainable bf16 rejected");
    CHECK(dt_graph_param(g, "a", DT_F32, 1, (int64_t[]){3}, 0) < 0, "duplicate name rejected");
    CHECK(dt_graph_input(g, "bad", DT_F32, 6, (int64_t[]){1, 1, 1, 1, 1, 1}, 0) < 0, "6 dims");
    CHECK(dt_graph_compile(g, a, NULL) == DT_ERR_SHAPE, "non-scalar loss rejected");
    CHECK(strstr(dt_last_error(), "'a'"), "names the loss: %s", dt_last_error());
    CHECK(dt_graph_compile(g, 99, NULL) == DT_ERR_INVALID, "unknown loss id");
    CHECK(dt_graph_forward(g, 1) == DT_ERR_STATE, "forward before compile");
    dt_graph_free(g);
}

int main(void) {
    dt_threads_set(2);
    test_broadcast_fd();
    test_trailing_ones();
    test_basic_parity();
    test_recompute_and_planner();
    test_measure_only();
    test_grad_ready();
    test_entry_ops();
    test_sparse_rows();
    test_frozen_rows();
    test_errors();
    return dt_test_finish("test_graph");
}
