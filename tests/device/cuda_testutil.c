#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_testutil.h"
#include "dtrain/ops.h"
#include "harness.h"

static void die(const char *what) {
    fprintf(stderr, "FAIL: %s: %s\n", what, dt_last_error());
    exit(1);
}

dt_device cuda_test_device(const char *test, dt_stream **s) {
    int n = 0;
    if (dt_device_count(DT_DEVICE_CUDA, &n) != DT_OK) die("device count");
    if (!dt_device_cuda_built() || n == 0) {
        printf("%s: skipped: %s\n", test,
               dt_device_cuda_built() ? "no CUDA device visible" : "built without CUDA");
        exit(77);
    }
    dt_device d = {DT_DEVICE_CUDA, 0};
    dt_device_info info;
    if (dt_device_query(d, &info) != DT_OK) die("device query");
    printf("%s: on %s (sm_%d%d, %d SMs, %.1f GiB)\n", test, info.name, info.cc_major, info.cc_minor,
           info.multiprocessors, (double)info.total_bytes / (1 << 30));
    if (dt_stream_create(d, s) != DT_OK) die("stream create");
    return d;
}

void *cuda_test_upload(dt_device d, const void *host, size_t n) {
    void *p = NULL;
    if (dt_device_alloc(d, n, &p) != DT_OK) die("alloc");
    if (dt_device_copy(d, p, host, n, DT_COPY_H2D) != DT_OK) die("upload");
    return p;
}

void *cuda_test_alloc(dt_device d, size_t n) {
    void *p = NULL;
    if (dt_device_alloc(d, n, &p) != DT_OK) die("alloc");
    if (dt_device_memset(d, p, 0xff, n) != DT_OK) die("memset");
    return p;
}

void cuda_test_download(dt_device d, dt_stream *s, void *host, const void *dev, size_t n) {
    if (dt_stream_sync(s) != DT_OK) die("stream sync");
    if (dt_device_copy(d, host, dev, n, DT_COPY_D2H) != DT_OK) die("download");
}

int cuda_test_cpu_compile(dt_graph *g, int out, int *r) {
    if (dt_graph_keep(g, out) != DT_OK) return -1;
    int loss = dt_test_dotloss(g, out, r);
    if (loss < 0 || dt_graph_compile(g, loss, NULL) != DT_OK) return -1;
    for (int id = 0; id < dt_graph_node_count(g); id++) {
        const char *nm = dt_graph_name(g, id);
        if (nm && dt_graph_find(g, nm) == id && dt_graph_shape(g, id)->dtype == DT_F32)
            dt_test_randn(g, id, 500 + (uint64_t)id, 1.0f);
    }
    return 0;
}

int cuda_test_cpu_step(dt_graph *g) {
    return dt_graph_forward(g, 1) == DT_OK && dt_graph_backward(g) == DT_OK ? 0 : -1;
}

void *cuda_test_upload_value(dt_device d, dt_graph *g, int id) {
    const dt_tensor *t = dt_graph_value(g, id);
    return cuda_test_upload(d, t->data, dt_tensor_numel(t) * dt_dtype_size(t->dtype));
}

void cuda_test_check(dt_device d, dt_stream *s, const char *what, const char *name,
                     const float *dev, const float *want, int64_t n, double atol, double rtol) {
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) die("malloc");
    char m[256];
    snprintf(m, sizeof m, "%s: %s", what, name);
    cuda_test_download(d, s, h, dev, (size_t)n * sizeof *h);
    dt_check_close(m, h, want, n, atol, rtol);
    free(h);
}

void cuda_test_same(dt_device d, dt_stream *s, const char *what, const char *name, const void *dev,
                    const void *want, size_t n) {
    char *h = malloc(n);
    if (!h) die("malloc");
    cuda_test_download(d, s, h, dev, n);
    CHECK(memcmp(h, want, n) == 0, "%s: %s: not bit-identical", what, name);
    free(h);
}

void cuda_test_steps(const char *what, int steps, const double *gl, const double *cl,
                     const double *gn, const double *cn) {
    for (int k = 0; k < steps; k++) {
        printf("%s step %d: loss cuda %.7f cpu %.7f, |g| cuda %.6g cpu %.6g\n", what, k + 1, gl[k],
               cl[k], gn[k], cn[k]);
        CHECK(isfinite(cl[k]) && cl[k] > 0, "%s step %d: cpu loss %g", what, k + 1, cl[k]);
        CHECK(fabs(gl[k] - cl[k]) <= 2e-4 * (1 + fabs(cl[k])),
              "%s step %d: loss cuda %.8g cpu %.8g", what, k + 1, gl[k], cl[k]);
        CHECK(fabs(gn[k] - cn[k]) <= 2e-3 * cn[k], "%s step %d: gradient norm cuda %.8g cpu %.8g",
              what, k + 1, gn[k], cn[k]);
    }
    /* training moved the loss: the comparison is of runs that learn */
    CHECK(cl[steps - 1] < cl[0] - 0.02, "%s: cpu loss %g -> %g (did not train)", what, cl[0],
          cl[steps - 1]);
}

void cuda_test_close_most(const char *what, const float *got, const float *want, size_t n,
                          double cap) {
    double mx = 0, worst = 0;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    if (cap == 0) cap = 1e-2 * mx;
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-4 * mx + 1e-3 * fabs(want[i]), e = fabs((double)got[i] - want[i]);
        if (!(e <= tol) && !bad++) first = i;
        if (!(e <= worst)) worst = e;
    }
    CHECK(mx > 0, "%s: all zero on the CPU (the test checks nothing)", what);
    CHECK(bad * 1000 <= n, "%s: %zu of %zu elements off, first [%zu] cuda %.8g cpu %.8g", what, bad,
          n, first, got[first], want[first]);
    CHECK(worst <= cap, "%s: an element is %g off (> %g)", what, worst, cap);
    printf("%s: %zu of %zu elements beyond the element tolerance, largest error %.3g\n", what, bad,
           n, worst);
}

dt_llama_config cuda_lm_tiny(int vocab, int tied, int recompute) {
    return (dt_llama_config){.vocab_size = vocab,
                             .hidden_size = 64,
                             .intermediate_size = 160,
                             .num_hidden_layers = 2,
                             .num_attention_heads = 4,
                             .num_key_value_heads = 2,
                             .head_dim = 16,
                             .rms_norm_eps = 1e-5f,
                             .rope_theta = 10000.0f,
                             .max_position_embeddings = 64,
                             .tie_word_embeddings = tied,
                             .recompute = recompute};
}

int cuda_lm_build(cuda_lm *m, const dt_llama_config *lc, int64_t B, int64_t T, dt_device d) {
    m->g = dt_graph_init();
    m->ids = dt_graph_input(m->g, "ids", DT_I32, 2, (int64_t[]){B, T}, 0);
    m->tg = dt_graph_input(m->g, "targets", DT_I32, 1, (int64_t[]){B * T}, 0);
    int lg =
        dt_reshape(m->g, dt_llama_build(m->g, lc, m->ids), 2, (int64_t[]){B * T, lc->vocab_size});
    m->loss = dt_cross_entropy(m->g, lg, m->tg, 0.0f, -100);
    dt_graph_opts o = {.device = d};
    return m->loss >= 0 && dt_graph_compile(m->g, m->loss, &o) == DT_OK ? 0 : -1;
}

int cuda_lm_pair(const char *what, cuda_lm *cpu, cuda_lm *cu, const dt_llama_config *lc, int64_t B,
                 int64_t T, dt_device d) {
    if (!CHECK(cuda_lm_build(cpu, lc, B, T, (dt_device){DT_DEVICE_CPU, 0}) == 0, "%s cpu: %s", what,
               dt_last_error())) {
        dt_graph_free(cpu->g);
        return -1;
    }
    if (!CHECK(cuda_lm_build(cu, lc, B, T, d) == 0, "%s cuda: %s", what, dt_last_error())) {
        dt_graph_free(cpu->g);
        dt_graph_free(cu->g);
        return -1;
    }
    return 0;
}

int cuda_lm_step(cuda_lm *m, int accumulate) {
    dt_graph_set_accumulate(m->g, accumulate);
    return dt_graph_forward(m->g, 1) == DT_OK && dt_graph_backward(m->g) == DT_OK ? 0 : -1;
}

float *cuda_lm_compare(const char *what, cuda_lm *cpu, cuda_lm *cu, double loss_rtol, double gabs,
                       double grel) {
    float lc = *(const float *)dt_graph_value(cpu->g, cpu->loss)->data, lg = NAN;
    CHECK_OK(dt_graph_download(cu->g, &lg, dt_graph_value(cu->g, cu->loss)->data, sizeof lg));
    CHECK(fabs((double)lg - lc) <= loss_rtol * (1.0 + fabs(lc)), "%s: loss cuda %.8g cpu %.8g",
          what, lg, lc);
    size_t n = 0;
    const float *gc = dt_graph_flat_grad(cpu->g, &n);
    float *gg = malloc(n * sizeof(float));
    if (!gg) die("out of memory");
    CHECK_OK(dt_graph_download(cu->g, gg, dt_graph_flat_grad(cu->g, NULL), n * sizeof(float)));
    double worst = 0.0;
    const char *worst_name = "";
    for (int k = 0; k < dt_graph_param_count(cpu->g); k++) {
        const dt_param_info *pi = dt_graph_param_info(cpu->g, k);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        const float *a = gc + pi->offset, *b = gg + pi->offset;
        double mx = 0.0;
        for (size_t i = 0; i < pi->numel; i++) mx = fmax(mx, fabs(a[i]));
        CHECK(mx > 0.0, "%s: %s has an all-zero CPU gradient (the test checks nothing)", what,
              pi->name);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < pi->numel; i++) {
            double tol = gabs * mx + grel * fabs(a[i]), e = fabs((double)b[i] - a[i]);
            if (!(e <= tol) && !bad++) first = i;
            if (e / tol > worst) worst = e / tol, worst_name = pi->name;
        }
        CHECK(!bad, "%s: %s: %zu of %zu gradient elements off, first [%zu] cuda %.8g cpu %.8g",
              what, pi->name, bad, pi->numel, first, b[first], a[first]);
    }
    printf("%s: loss cuda %.7f cpu %.7f; worst gradient error %.3f of its tolerance (%s)\n", what,
           lg, lc, worst, worst_name);
    return gg;
}
