/* Synchronised batch normalisation (dt_graph_set_sync_batchnorm) under mpirun with N ranks.
 * Usage: test_syncbn N   (N = the expected world size; 1 when run without mpirun)
 *
 * A global batch of N * b rows is generated from one seed on every rank; rank r takes rows
 * [r b, (r + 1) b). Every rank also builds the same model with batch N * b and runs it alone
 * (the single-process full-batch reference). Models:
 *   CONV:  x [B, 2, 5, 5] -> conv3x3 -> bn1 -> gelu -> conv3x3 -> bn2 -> gelu -> global avgpool
 *          -> linear -> cross entropy; b = 3 rows per rank; also with conv2..gelu as a
 *          recompute segment (the recomputed forward all-reduces again, must not count the
 *          batch twice in the running statistics);
 *   MLP1:  x [B, 5] -> linear -> bn1 -> gelu -> linear -> cross entropy with b = 1 row per rank
 *          (N >= 3): per-rank statistics are impossible (one value per channel), synchronised
 *          ones work. (With N = 2 the normalised output is +-1 whatever x is, and the input
 *          gradient is pure rounding.)
 * GELU rather than ReLU: no kinks for the finite differences to straddle.
 * Each rank's loss is the mean over its b rows (DDP's convention), so the global loss, the mean
 * over all N * b rows, is (1/N) sum_r loss_r. Checked with the reducer dt_comm_allreduce_f64:
 *   sync on:  each rank's bn1 (and bn2) output rows, the running statistics, the parameter
 *            gradients summed over ranks / N, the input gradient / N (dL_global/dx) and the
 *            global loss equal the full-batch run within TOL; the reducer is called once per
 *            batchnorm and pass with 2C + 1 (forward) / 2C (backward) doubles;
 *   sync off: (N > 1) the same quantities differ by far more than TOL (so the checks can fail);
 *            MLP1 fails with the per-rank "more than 1 value per channel" error;
 *   finite differences: the synchronised input and weight gradients against central differences
 *            of the global loss (each probe is a forward on all ranks);
 *   single process: a failing reducer makes dt_graph_forward / dt_graph_backward return its
 *            status with a message naming batchnorm2d and what failed; eval mode never calls it
 *            and gives the same bits as without it; a reducer removed between forward and
 *            backward is an error.
 *
 * TOL (f32; the reference sums the same numbers in another grouping): every element satisfies
 *   |a - ref| <= REL * (|ref| + max|ref|),  REL = 1e-5.
 * Finite differences (f32 forwards, step FD_EPS): |analytic - numeric| <= FD_ATOL + FD_RTOL |num|.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dist.h"
#include "dtrain/runtime.h"
#include "harness.h"

#define REL 1e-5
#define OFF_FACTOR 100.0 /* sync off must miss TOL by this factor somewhere */
#define FD_EPS 1e-2f
#define FD_ATOL 2e-4
#define FD_RTOL 2e-2

enum { CONV = 0, MLP1 = 1 };
enum { CIN = 2, HW = 5, CH = 4, F_IN = 5, CH_MLP = 6, K = 3 };

static int R, N, verbose; /* verbose: SYNCBN_VERBOSE set (prints every probe and margin) */

typedef struct model {
    dt_graph *g;
    int kind, batch, recompute;
    int x, y, loss, bn[2], n_bn, w1;
    int64_t row; /* input elements per row */
} model;

static int bn_block(dt_graph *g, const char *name, int h, int C) {
    char s[64];
    snprintf(s, sizeof s, "%s.weight", name);
    int w = dt_graph_param(g, s, DT_F32, 1, (int64_t[]){C}, DT_PARAM_NO_DECAY);
    snprintf(s, sizeof s, "%s.bias", name);
    int b = dt_graph_param(g, s, DT_F32, 1, (int64_t[]){C}, DT_PARAM_NO_DECAY);
    snprintf(s, sizeof s, "%s.running_mean", name);
    int rm = dt_graph_param(g, s, DT_F32, 1, (int64_t[]){C}, DT_PARAM_STATE);
    snprintf(s, sizeof s, "%s.running_var", name);
    int rv = dt_graph_param(g, s, DT_F32, 1, (int64_t[]){C}, DT_PARAM_STATE);
    return dt_batchnorm2d(g, h, w, b, rm, rv, 0.1f, 1e-5f);
}

/* Builds and compiles; parameters get values from `seed` (the same for any batch). */
static int model_build(model *m, int kind, int batch, int recompute) {
    memset(m, 0, sizeof *m);
    m->kind = kind, m->batch = batch, m->recompute = recompute;
    dt_graph *g = m->g = dt_graph_init();
    int logits;
    if (kind == CONV) {
        m->row = CIN * HW * HW;
        m->x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){batch, CIN, HW, HW}, 1);
        m->w1 = dt_graph_param(g, "conv1.weight", DT_F32, 4, (int64_t[]){CH, CIN, 3, 3}, 0);
        int w2 = dt_graph_param(g, "conv2.weight", DT_F32, 4, (int64_t[]){CH, CH, 3, 3}, 0);
        int fw = dt_graph_param(g, "fc.weight", DT_F32, 2, (int64_t[]){K, CH}, 0);
        int fb = dt_graph_param(g, "fc.bias", DT_F32, 1, (int64_t[]){K}, DT_PARAM_NO_DECAY);
        m->bn[0] = bn_block(g, "bn1", dt_conv2d(g, m->x, m->w1, -1, 1, 1, 1, 1, 1, 1, 1), CH);
        int h = dt_gelu(g, m->bn[0], 0);
        int first = h;
        m->bn[1] = bn_block(g, "bn2", dt_conv2d(g, h, w2, -1, 1, 1, 1, 1, 1, 1, 1), CH);
        h = dt_gelu(g, m->bn[1], 0);
        if (recompute && h >= 0) CHECK_OK(dt_graph_recompute(g, first, h));
        m->n_bn = 2;
        logits = dt_linear(g, dt_global_avgpool(g, h), fw, fb);
    } else {
        m->row = F_IN;
        m->x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){batch, F_IN}, 1);
        m->w1 = dt_graph_param(g, "fc1.weight", DT_F32, 2, (int64_t[]){CH_MLP, F_IN}, 0);
        int fw = dt_graph_param(g, "fc2.weight", DT_F32, 2, (int64_t[]){K, CH_MLP}, 0);
        m->bn[0] = bn_block(g, "bn1", dt_linear(g, m->x, m->w1, -1), CH_MLP);
        m->n_bn = 1;
        logits = dt_linear(g, dt_gelu(g, m->bn[0], 0), fw, -1);
    }
    m->y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){batch}, 0);
    m->loss = dt_cross_entropy(g, logits, m->y, 0.0f, DT_IGNORE_INDEX_DEFAULT);
    if (!CHECK(m->loss >= 0, "building model %d: %s", kind, dt_last_error())) return -1;
    CHECK_OK(dt_graph_keep(g, m->bn[0]));
    if (!recompute && m->n_bn > 1) CHECK_OK(dt_graph_keep(g, m->bn[1]));
    dt_status s = dt_graph_compile(g, m->loss, NULL);
    if (!CHECK(s == DT_OK, "compile: %s", dt_last_error())) return -1;
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        float *p = dt_graph_value(g, pi->id)->data;
        const char *dot = strrchr(pi->name, '.');
        if (!strcmp(dot, ".running_mean")) {
            memset(p, 0, pi->numel * sizeof(float));
        } else if (!strcmp(dot, ".running_var")) {
            for (size_t k = 0; k < pi->numel; k++) p[k] = 1.0f;
        } else if (!strncmp(pi->name, "bn", 2) && !strcmp(dot, ".weight")) {
            dt_test_randn(g, pi->id, 100 + (uint64_t)i, 0.2f);
            for (size_t k = 0; k < pi->numel; k++) p[k] += 1.0f;
        } else {
            dt_test_randn(g, pi->id, 100 + (uint64_t)i, 0.5f);
        }
    }
    return 0;
}

/* The global batch [rows, row] and labels: row i's values depend on i only; each channel
 * (feature) has its own offset so that the statistics are not all alike. */
static void global_batch(const model *m, int rows, float *x, int32_t *y) {
    dt_randn(x, rows * m->row, 7, 1.5f);
    int64_t per_ch = m->kind == CONV ? HW * HW : 1;
    for (int64_t i = 0; i < rows * m->row; i++) x[i] += 0.3f * (float)((i / per_ch) % CIN) + 0.5f;
    for (int i = 0; i < rows; i++) y[i] = (int32_t)((i * 7 + 2) % K);
}

/* Writes rows [row0, row0 + m->batch) of the global batch into m's inputs. */
static void set_rows(model *m, const float *gx, const int32_t *gy, int row0) {
    memcpy(dt_graph_value(m->g, m->x)->data, gx + (int64_t)row0 * m->row,
           (size_t)(m->batch * m->row) * sizeof(float));
    memcpy(dt_graph_value(m->g, m->y)->data, gy + row0, (size_t)m->batch * sizeof(int32_t));
}

/* max_i |a_i - ref_i| / (REL * (|ref_i| + max|ref|)): <= 1 is within TOL. */
static double excess(const float *a, const float *ref, int64_t n, int64_t *worst) {
    double mx = 0.0, e = 0.0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]) / (REL * (fabs(ref[i]) + mx) + 1e-30);
        if (!(d <= e)) e = d, *worst = i; /* NaN counts as worst */
    }
    return e;
}

/* sync: must be within TOL; off: must be far outside it somewhere. */
static void compare(const char *what, const char *tag, int sync, const float *a, const float *ref,
                    int64_t n) {
    int64_t w;
    double e = excess(a, ref, n, &w);
    if (verbose && R == 0) printf("%s %s: %.3g x TOL\n", tag, what, e);
    if (sync)
        CHECK(e <= 1.0, "rank %d/%d %s %s: element %lld is %g vs %g (%.3g x TOL)", R, N, tag, what,
              (long long)w, (double)a[w], (double)ref[w], e);
    else
        CHECK(e > OFF_FACTOR, "rank %d/%d %s %s without sync: only %.3g x TOL off (want > %g)", R,
              N, tag, what, e, OFF_FACTOR);
}

typedef struct reducer {
    dt_comm *c;
    int calls, fail_at; /* fail_at >= 0: that call (0-based) fails */
    size_t sizes[16];
} reducer;

static dt_status comm_reduce(void *ud, double *buf, size_t n) {
    reducer *r = ud;
    if (r->calls < 16) r->sizes[r->calls] = n;
    if (r->calls++ == r->fail_at) return dt_error_set(DT_ERR_IO, "fake reducer: link down");
    return r->c ? dt_comm_allreduce_f64(r->c, buf, n) : DT_OK; /* NULL: one worker */
}

static float loss_of(model *m) {
    return *(const float *)dt_graph_value(m->g, m->loss)->data;
}

/* Global loss (1/N) sum_r loss_r after a forward on every rank. */
static double global_loss(dt_comm *c, model *m) {
    double l = loss_of(m);
    CHECK_OK(dt_comm_allreduce_f64(c, &l, 1));
    return l / N;
}

/* Central differences of the global loss for a few input and first-layer weight elements,
 * against the synchronised analytic gradients (gx / N on the owning rank; sum_r gw_r / N). */
static void fd_check(dt_comm *c, model *m, const char *tag) {
    int64_t nloc = m->batch * m->row, nglob = nloc * N;
    float *x = dt_graph_value(m->g, m->x)->data;
    float *gx = malloc((size_t)nloc * sizeof(float));
    memcpy(gx, dt_graph_grad(m->g, m->x)->data, (size_t)nloc * sizeof(float));
    const dt_tensor *wt = dt_graph_value(m->g, m->w1);
    int64_t nw = dt_tensor_numel(wt);
    float *w = wt->data, *gw = malloc((size_t)nw * sizeof(float));
    memcpy(gw, dt_graph_grad(m->g, m->w1)->data, (size_t)nw * sizeof(float));
    CHECK_OK(dt_comm_allreduce(c, gw, (size_t)nw, 0));
    int bad = 0, probes = 0;
    double worst = 0.0;
    for (int k = 0; k < 12; k++) {
        int on_w = k >= 8; /* 8 input elements, 4 weight elements */
        int64_t j = on_w ? (k * 13 + 5) % nw : (k * 997 + 11) % nglob;
        int owner = on_w ? R : (int)(j / nloc);
        float *p = on_w ? &w[j] : &x[j - (int64_t)R * nloc];
        double ana = on_w ? gw[j] / N : (owner == R ? gx[j - (int64_t)R * nloc] / N : 0.0);
        if (!on_w) CHECK_OK(dt_comm_allreduce_f64(c, &ana, 1)); /* from the owning rank */
        float orig = owner == R ? *p : 0.0f;
        double lp, lm, h = 0.0;
        if (owner == R) *p = orig + FD_EPS, h = (double)*p - orig;
        CHECK_OK(dt_graph_forward(m->g, 1));
        lp = global_loss(c, m);
        if (owner == R) *p = orig - FD_EPS, h += orig - (double)*p;
        CHECK_OK(dt_graph_forward(m->g, 1));
        lm = global_loss(c, m);
        if (owner == R) *p = orig;
        if (!on_w) CHECK_OK(dt_comm_allreduce_f64(c, &h, 1));
        double num = (lp - lm) / h, err = fabs(ana - num) / (FD_ATOL + FD_RTOL * fabs(num));
        probes++;
        if (verbose && R == 0)
            printf("%s[%lld] ana %g num %g err %.3g\n", on_w ? "w1" : "x", (long long)j, ana, num,
                   err);
        if (err > 1.0) {
            bad++;
            printf("rank %d/%d %s fd: %s[%lld] analytic %g numeric %g\n", R, N, tag,
                   on_w ? "w1" : "x", (long long)j, ana, num);
        }
        worst = fmax(worst, err);
    }
    CHECK(bad == 0, "rank %d/%d %s: %d of %d finite-difference probes off (worst %.3g x tol)", R, N,
          tag, bad, probes, worst);
    free(gx), free(gw);
}

/* One training step on N ranks (rows [R b, (R + 1) b)) vs the full batch on this rank. */
static void dist_case(dt_comm *c, int kind, int b, int recompute, int sync) {
    char tag[64];
    snprintf(tag, sizeof tag, "%s b=%d%s sync=%s", kind == CONV ? "conv" : "mlp", b,
             recompute ? " recompute" : "", sync ? "on" : "off");
    model loc, full;
    if (model_build(&loc, kind, b, recompute) || model_build(&full, kind, N * b, 0)) return;
    int rows = N * b;
    float *gxs = malloc((size_t)(rows * loc.row) * sizeof(float));
    int32_t *gys = malloc((size_t)rows * sizeof(int32_t));
    global_batch(&loc, rows, gxs, gys);
    set_rows(&loc, gxs, gys, R * b);
    set_rows(&full, gxs, gys, 0);
    reducer red = {.c = c, .fail_at = -1};
    if (sync) dt_graph_set_sync_batchnorm(loc.g, comm_reduce, &red);

    CHECK_OK(dt_graph_forward(full.g, 1));
    CHECK_OK(dt_graph_backward(full.g));
    dt_status st = dt_graph_forward(loc.g, 1);
    if (kind == MLP1 && !sync && b == 1) {
        /* One value per channel on this rank: per-rank statistics cannot work. */
        CHECK(st == DT_ERR_SHAPE && strstr(dt_last_error(), "more than 1 value per channel"),
              "%s: forward gave %d: %s", tag, (int)st, dt_last_error());
        goto done;
    }
    CHECK(st == DT_OK, "%s: forward: %s", tag, dt_last_error());
    CHECK_OK(dt_graph_backward(loc.g));

    /* The reducer: once per batchnorm in forward (again in the recomputed forward) and in
     * backward, 2C + 1 doubles forward, 2C backward (both BNs have C channels). */
    int C = kind == CONV ? CH : CH_MLP;
    if (sync) {
        int want = 2 * loc.n_bn + (recompute ? 1 : 0);
        CHECK(red.calls == want, "%s: reducer called %d times, want %d", tag, red.calls, want);
        CHECK(red.sizes[0] == (size_t)(2 * C + 1), "%s: forward reduces %zu doubles, want %d", tag,
              red.sizes[0], 2 * C + 1);
        CHECK(red.sizes[red.calls - 1] == (size_t)(2 * C),
              "%s: backward reduces %zu doubles, want %d", tag, red.sizes[red.calls - 1], 2 * C);
    }

    /* Batchnorm outputs of this rank's rows. */
    for (int i = 0; i < loc.n_bn; i++) {
        if (i == 1 && recompute) break; /* not kept inside a recompute segment */
        const dt_tensor *a = dt_graph_value(loc.g, loc.bn[i]);
        const dt_tensor *f = dt_graph_value(full.g, full.bn[i]);
        int64_t n = dt_tensor_numel(a);
        compare(i ? "bn2 output" : "bn1 output", tag, sync, a->data, (float *)f->data + R * n, n);
    }
    /* Running statistics (updated once per step, also with recompute). */
    size_t ns, nsf;
    float *sl = dt_graph_flat_state(loc.g, &ns), *sf = dt_graph_flat_state(full.g, &nsf);
    CHECK(ns == nsf, "%s: state sizes %zu vs %zu", tag, ns, nsf);
    compare("running statistics", tag, sync, sl, sf, (int64_t)ns);

    /* The global loss and parameter gradients: (1/N) sum over ranks. */
    double l = global_loss(c, &loc);
    float lf = loss_of(&full);
    if (sync)
        CHECK(fabs(l - lf) <= REL * 2 * fabs(lf), "rank %d/%d %s: global loss %.9g vs full %.9g", R,
              N, tag, l, (double)lf);
    size_t np;
    float *g = dt_graph_flat_grad(loc.g, &np), *gf = dt_graph_flat_grad(full.g, NULL);
    float *sum = malloc(np * sizeof(float));
    memcpy(sum, g, np * sizeof(float));
    CHECK_OK(dt_comm_allreduce(c, sum, np, DT_COMM_AVG));
    compare("parameter gradients", tag, sync, sum, gf, (int64_t)np);
    /* Input gradient: dL_global/dx of this rank's rows = gx / N. */
    int64_t nx = loc.batch * loc.row;
    float *gx = malloc((size_t)nx * sizeof(float));
    const float *gl = dt_graph_grad(loc.g, loc.x)->data;
    for (int64_t i = 0; i < nx; i++) gx[i] = gl[i] / (float)N;
    compare("input gradient", tag, sync, gx,
            (const float *)dt_graph_grad(full.g, full.x)->data + R * nx, nx);
    free(sum), free(gx);
    if (sync && !recompute) fd_check(c, &loc, tag);
done:
    free(gxs), free(gys);
    dt_graph_free(loc.g), dt_graph_free(full.g);
}

/* Error paths and the unchanged eval mode, on one process (no communication). */
static void single_checks(void) {
    model m, ref;
    if (model_build(&m, CONV, 3, 0) || model_build(&ref, CONV, 3, 0)) return;
    float *xs = malloc((size_t)(3 * m.row) * sizeof(float));
    int32_t ys[3];
    global_batch(&m, 3, xs, ys);
    set_rows(&m, xs, ys, 0);
    set_rows(&ref, xs, ys, 0);

    /* A failing reducer: forward returns its status, the message names the op and the step. */
    reducer red = {.c = NULL, .fail_at = 0};
    dt_graph_set_sync_batchnorm(m.g, comm_reduce, &red);
    dt_status st = dt_graph_forward(m.g, 1);
    const char *e = dt_last_error();
    CHECK(st == DT_ERR_IO, "failing reducer: forward gave %d (%s)", (int)st, e);
    CHECK(strstr(e, "batchnorm2d") && strstr(e, "batch statistics") && strstr(e, "link down"),
          "failing reducer: message '%s'", e);
    CHECK(red.calls == 1, "forward stopped at the first failure (%d calls)", red.calls);

    /* Eval mode never calls the reducer and gives exactly the bits of a graph without it. */
    red.calls = 0;
    CHECK_OK(dt_graph_forward(m.g, 0));
    CHECK_OK(dt_graph_forward(ref.g, 0));
    CHECK(red.calls == 0, "eval mode called the reducer %d times", red.calls);
    const dt_tensor *a = dt_graph_value(m.g, m.bn[1]), *b = dt_graph_value(ref.g, ref.bn[1]);
    CHECK(!memcmp(a->data, b->data, dt_tensor_nbytes(a)) && loss_of(&m) == loss_of(&ref),
          "eval mode with a reducer set differs from without");

    /* Failure in backward (the first backward call comes after the 2 forward calls). */
    red.calls = 0, red.fail_at = 2;
    CHECK_OK(dt_graph_forward(m.g, 1));
    st = dt_graph_backward(m.g);
    e = dt_last_error();
    CHECK(st == DT_ERR_IO && strstr(e, "batchnorm2d") && strstr(e, "gradient sums"),
          "failing reducer in backward: %d '%s'", (int)st, e);

    /* Reducer removed between forward and backward: an error, not silently wrong gradients. */
    red.calls = 0, red.fail_at = -1;
    CHECK_OK(dt_graph_forward(m.g, 1));
    dt_graph_set_sync_batchnorm(m.g, NULL, NULL);
    st = dt_graph_backward(m.g);
    CHECK(st == DT_ERR_STATE && strstr(dt_last_error(), "batchnorm2d"),
          "reducer removed before backward: %d '%s'", (int)st, dt_last_error());

    /* With the reducer off again, training gives the bits of a graph that never had one. */
    CHECK_OK(dt_graph_forward(m.g, 1));
    CHECK_OK(dt_graph_forward(ref.g, 1));
    CHECK(!memcmp(dt_graph_value(m.g, m.bn[0])->data, dt_graph_value(ref.g, ref.bn[0])->data,
                  dt_tensor_nbytes(a)),
          "training without a reducer differs from a graph that never had one");

    /* A global count below 2 is refused after the reduction (the same on every worker). */
    model one;
    if (!model_build(&one, MLP1, 1, 0)) {
        reducer id = {.c = NULL, .fail_at = -1};
        dt_graph_set_sync_batchnorm(one.g, comm_reduce, &id);
        st = dt_graph_forward(one.g, 1);
        CHECK(st == DT_ERR_SHAPE && strstr(dt_last_error(), "over all workers"),
              "global count 1: %d '%s'", (int)st, dt_last_error());
        dt_graph_free(one.g);
    }
    free(xs);
    dt_graph_free(m.g), dt_graph_free(ref.g);
}

int main(int argc, char **argv) {
    dt_threads_set(1);
    verbose = getenv("SYNCBN_VERBOSE") != NULL;
    int want = argc > 1 ? atoi(argv[1]) : 1;
    dt_comm *c = NULL;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    if (!c) return dt_test_finish("test_syncbn");
    R = dt_comm_rank(c), N = dt_comm_size(c);
    CHECK(N == want, "world size %d, expected %d", N, want);
    single_checks();
    /* sync off on one process is the full batch itself: nothing to tell apart. */
    for (int sync = 1; sync >= (N > 1 ? 0 : 1); sync--) {
        dist_case(c, CONV, 3, 0, sync);
        dist_case(c, CONV, 3, 1, sync);
        if (N > 2) dist_case(c, MLP1, 1, 0, sync);
    }
    dt_comm_close(c);
    return dt_test_finish("test_syncbn");
}
