/* Test helpers (see harness.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "dtrain/dist.h"
#include "dtrain/models.h"
#include "dtrain/rng.h"
#include "dtrain/safetensors.h"
#include "harness.h"

static int n_pass, n_fail;

int dt_check_(int ok, const char *file, int line, const char *expr, const char *fmt, ...) {
    if (ok) {
        n_pass++;
        return 1;
    }
    n_fail++;
    fprintf(stderr, "FAIL %s:%d: %s: ", file, line, expr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 0;
}

void dt_expect_fail_(int id, const char *what, const char *const *want) {
    const char *msg = dt_last_error();
    CHECK(id < 0, "%s: builder accepted a bad call (id %d)", what, id);
    for (int i = 0; want[i]; i++)
        CHECK(strstr(msg, want[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, want[i]);
}

int dt_test_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, n_pass, n_fail);
    return n_fail ? 1 : (n_pass ? 0 : 1);
}

struct dt_ref {
    dt_st_file *f;
    int n;
    dt_tensor *t; /* f32 copies */
    char **names;
};

dt_ref *dt_ref_load(const char *file) {
    const char *dir = getenv("DT_REF_DIR");
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "ref", file);
    dt_ref *r = calloc(1, sizeof *r);
    if (dt_st_open(path, &r->f) != DT_OK) {
        CHECK(0, "reference %s: %s", path, dt_last_error());
        free(r);
        return NULL;
    }
    int n = dt_st_count(r->f);
    r->t = calloc((size_t)n, sizeof *r->t);
    r->names = calloc((size_t)n, sizeof *r->names);
    for (int i = 0; i < n; i++) {
        dt_tensor raw, *t = &r->t[i];
        dt_st_get(r->f, dt_st_name(r->f, i), &raw);
        dt_tensor_init(t, malloc((size_t)dt_tensor_numel(&raw) * 4 + 4), DT_F32, raw.ndim,
                       raw.shape);
        for (int64_t k = 0; k < dt_tensor_numel(&raw); k++)
            ((float *)t->data)[k] = (float)dt_tensor_get(&raw, k);
        r->names[i] = strdup(dt_st_name(r->f, i));
    }
    r->n = n;
    return r;
}

const dt_tensor *dt_ref_get(dt_ref *r, const char *name) {
    for (int i = 0; r && i < r->n; i++)
        if (strcmp(r->names[i], name) == 0) return &r->t[i];
    CHECK(0, "reference tensor '%s' missing", name);
    return NULL;
}

const dt_tensor *dt_ref_raw(dt_ref *r, const char *name) {
    static _Thread_local dt_tensor t;
    if (!r || dt_st_get(r->f, name, &t) != DT_OK) return NULL;
    return &t;
}

void dt_ref_free(dt_ref *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->t[i].data), free(r->names[i]);
    free(r->t), free(r->names);
    dt_st_close(r->f);
    free(r);
}

int dt_check_close(const char *what, const float *a, const float *b, int64_t n, double atol,
                   double rtol) {
    int64_t worst = -1, bad = 0;
    double worst_excess = 0, max_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), lim = atol + rtol * fabs((double)b[i]);
        if (d > max_abs) max_abs = d;
        if (!(d <= lim)) { /* NaN counts as bad */
            bad++;
            if (worst < 0 || d - lim > worst_excess || isnan(d)) worst = i, worst_excess = d - lim;
        }
    }
    if (bad)
        return CHECK(
            0, "%s: %lld of %lld elements differ (atol %g, rtol %g); worst [%lld]: %g vs %g", what,
            (long long)bad, (long long)n, atol, rtol, (long long)worst, a[worst], b[worst]);
    if (getenv("DT_TEST_VERBOSE"))
        printf("  ok %s: max |diff| %.3g over %lld\n", what, max_abs, (long long)n);
    return CHECK(1, "%s", what);
}

int dt_check_tensor(const char *what, const dt_tensor *a, const dt_tensor *b, double atol,
                    double rtol) {
    char s1[96], s2[96];
    if (!a || !b || !a->data || !b->data) return CHECK(0, "%s: missing tensor", what);
    if (dt_tensor_numel(a) != dt_tensor_numel(b))
        return CHECK(0, "%s: shape %s vs reference %s", what,
                     dt_shape_str(s1, sizeof s1, a->ndim, a->shape),
                     dt_shape_str(s2, sizeof s2, b->ndim, b->shape));
    int64_t n = dt_tensor_numel(a);
    float *x = malloc((size_t)n * 4 + 4), *y = malloc((size_t)n * 4 + 4);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)dt_tensor_get(a, i), y[i] = (float)dt_tensor_get(b, i);
    int ok = dt_check_close(what, x, y, n, atol, rtol);
    free(x), free(y);
    return ok;
}

double dt_max_abs(const dt_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) m = fmax(m, fabs(dt_tensor_get(t, i)));
    return m;
}

int dt_check_vs_f64(dt_ref *ref, const char *name, const char *key, const dt_tensor *a) {
    char what[256], ek[200];
    snprintf(what, sizeof what, "%s %s", name, key);
    snprintf(ek, sizeof ek, "err.%s", key);
    const dt_tensor *r = dt_ref_get(ref, key), *e = dt_ref_get(ref, ek);
    if (!CHECK(a && r && e, "%s: missing", what)) return 0;
    return dt_check_tensor(what, a, r, 3 * dt_tensor_get(e, 0) + 1e-5 * dt_max_abs(r), 0);
}

void dt_test_set(dt_graph *g, int id, const dt_tensor *src) {
    const dt_tensor *v = dt_graph_value(g, id);
    if (!CHECK(v && v->data && src, "dt_test_set: node %d has no value buffer", id)) return;
    if (!CHECK(dt_tensor_numel(v) == dt_tensor_numel(src), "dt_test_set: node %s size mismatch",
               dt_graph_name(g, id)))
        return;
    dt_tensor dst = *v;
    for (int64_t i = 0; i < dt_tensor_numel(src); i++)
        dt_tensor_set(&dst, i, dt_tensor_get(src, i));
}

void dt_randn(float *x, int64_t n, uint64_t seed, float std) {
    dt_rng_normal(x, n, seed, 0x7e57, 0, 0.0f, std);
}

void dt_test_randn(dt_graph *g, int id, uint64_t seed, float std) {
    const dt_tensor *v = dt_graph_value(g, id);
    int64_t n = dt_tensor_numel(v);
    float *tmp = malloc((size_t)n * 4 + 4);
    dt_randn(tmp, n, seed, std);
    dt_tensor src, dst = *v;
    dt_tensor_init(&src, tmp, DT_F32, v->ndim, v->shape);
    for (int64_t i = 0; i < n; i++) dt_tensor_set(&dst, i, tmp[i]);
    free(tmp);
}

int dt_test_dotloss(dt_graph *g, int out, int *r_id) {
    const dt_tensor *t = dt_graph_shape(g, out);
    if (!t) return -1;
    int r = dt_graph_input(g, "R", DT_F32, t->ndim, t->shape, 0);
    if (r_id) *r_id = r;
    return dt_sum(g, dt_mul(g, out, r));
}

static double loss_at(dt_graph *g, int loss, int training) {
    if (dt_graph_forward(g, training) != DT_OK) {
        CHECK(0, "gradcheck forward: %s", dt_last_error());
        return NAN;
    }
    return ((const float *)dt_graph_value(g, loss)->data)[0];
}

int dt_gradcheck(dt_graph *g, int loss, const dt_gradcheck_opts *o) {
    double eps = o && o->eps > 0 ? o->eps : 1e-2, atol = o && o->atol > 0 ? o->atol : 1e-2;
    double rtol = o && o->rtol > 0 ? o->rtol : 5e-2;
    int maxk = o && o->max_per_tensor > 0 ? o->max_per_tensor : 24, training = o ? o->training : 0;
    int failed = 0;
    if (dt_graph_forward(g, training) != DT_OK || dt_graph_backward(g) != DT_OK) {
        CHECK(0, "gradcheck: %s", dt_last_error());
        return 1;
    }
    for (int id = 0; id < dt_graph_node_count(g); id++) {
        const dt_tensor *gr = dt_graph_grad(g, id);
        const char *name = dt_graph_name(g, id);
        int leaf = dt_graph_find(g, name) == id;
        if (!leaf || !gr || !gr->data || gr->dtype != DT_F32) continue;
        int64_t n = dt_tensor_numel(gr);
        float *an = malloc((size_t)n * 4 + 4);
        memcpy(an, gr->data, (size_t)n * 4);
        float *x = dt_graph_value(g, id)->data;
        int bad = 0;
        double worst = 0;
        int64_t step = n > maxk ? n / maxk : 1;
        for (int64_t i = 0; i < n; i += step) {
            /* Deterministic but spread-out probe positions. */
            int64_t k = (i + (int64_t)(id * 7919) % (step ? step : 1)) % n;
            float x0 = x[k];
            x[k] = x0 + (float)eps;
            double lp = loss_at(g, loss, training);
            x[k] = x0 - (float)eps;
            double lm = loss_at(g, loss, training);
            x[k] = x0;
            double num = (lp - lm) / (2 * eps), d = fabs(num - an[k]);
            if (d > atol + rtol * fabs(num)) {
                if (!bad)
                    fprintf(stderr, "  gradcheck %s[%lld]: analytic %.6g numeric %.6g\n", name,
                            (long long)k, an[k], num);
                bad++;
            }
            if (d > worst) worst = d;
        }
        if (!CHECK(!bad, "gradcheck %s: %d probes off (worst |diff| %.3g)", name, bad, worst))
            failed++;
        free(an);
    }
    loss_at(g, loss, training); /* leave values consistent with unperturbed inputs */
    return failed;
}

static void slurp_fd(int fd, char *buf, size_t n) {
    size_t k = 0;
    ssize_t r;
    lseek(fd, 0, SEEK_SET);
    while (k + 1 < n && (r = read(fd, buf + k, n - 1 - k)) > 0) k += (size_t)r;
    buf[k] = '\0';
}

int dt_test_capture(int (*fn)(int, char **), int argc, char **argv, char *out, size_t nout,
                    char *err, size_t nerr) {
    char po[] = "/tmp/dt_capture_out_XXXXXX", pe[] = "/tmp/dt_capture_err_XXXXXX";
    int fo = mkstemp(po), fe = mkstemp(pe);
    if (fo < 0 || fe < 0) return -1;
    unlink(po), unlink(pe);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    dup2(fo, 1), dup2(fe, 2);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1), dup2(se, 2);
    close(so), close(se);
    slurp_fd(fo, out, nout);
    slurp_fd(fe, err, nerr);
    close(fo), close(fe);
    return rc;
}

dt_test_lm dt_test_llama_lm(const struct dt_llama_config *c, int64_t B, int64_t T) {
    dt_test_lm m = {.g = dt_graph_init()};
    m.ids = dt_graph_input(m.g, "ids", DT_I64, 2, (int64_t[]){B, T}, 0);
    m.targets = dt_graph_input(m.g, "targets", DT_I64, 1, (int64_t[]){B * T}, 0);
    m.logits = dt_llama_build(m.g, c, m.ids);
    int flat = dt_reshape(m.g, m.logits, 2, (int64_t[]){B * T, c->vocab_size});
    m.loss = dt_cross_entropy(m.g, flat, m.targets, 0.0f, -100);
    if (CHECK(m.loss >= 0, "build llama: %s", dt_last_error())) {
        dt_graph_keep(m.g, m.logits);
        CHECK_OK(dt_graph_compile(m.g, m.loss, NULL));
    }
    return m;
}

char *dt_test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) free(buf), buf = NULL;
    fclose(f);
    if (buf) buf[len] = 0, *n = (size_t)len;
    return buf;
}

cJSON *dt_test_read_json(const char *path) {
    size_t n;
    char *t = dt_test_read_file(path, &n);
    cJSON *o = t ? cJSON_ParseWithLength(t, n) : NULL;
    free(t);
    return o;
}

int dt_test_write_json(const char *path, const cJSON *o) {
    char *js = o ? cJSON_Print(o) : NULL;
    FILE *f = js ? fopen(path, "wb") : NULL;
    int ok = f && fputs(js, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(js);
    CHECK(ok, "cannot write JSON to %s", path);
    return ok ? 0 : -1;
}

void dt_check_same_on_all_ranks(dt_comm *c, const char *what, const float *p, size_t n) {
    float *ref = malloc(n ? n * sizeof(float) : 1);
    int rank = dt_comm_rank(c), w = dt_comm_size(c);
    if (ref && p && rank == 0) memcpy(ref, p, n * sizeof(float));
    /* every rank takes part in both collectives, whatever it holds, so none waits forever */
    dt_status st = ref ? dt_comm_broadcast(c, ref, n * sizeof(float), 0) : DT_ERR_NOMEM;
    double bad[2] = {!p || !ref || st != DT_OK, 0}; /* ranks without values, values differing */
    for (size_t i = 0; !bad[0] && i < n; i++) bad[1] += memcmp(&p[i], &ref[i], sizeof(float)) != 0;
    dt_status st2 = dt_comm_allreduce_f64(c, bad, 2);
    CHECK(st == DT_OK && st2 == DT_OK && bad[0] == 0 && bad[1] == 0,
          "%s: all %d ranks hold rank 0's %zu parameters bit for bit (%.0f ranks without them, "
          "%.0f values differ; %s)",
          what, w, n, bad[0], bad[1], st == DT_OK && st2 == DT_OK ? "ok" : dt_last_error());
    free(ref);
}
