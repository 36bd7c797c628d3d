/* GEMM-backed ops against raw library GEMM.
 *
 * For each shape (M rows, K in, N out) it prints GFLOP/s of
 *   raw   cblas_sgemm: forward alone, and the three GEMMs of forward + backward
 *         (y = x w^T, dx = g w, dW = g^T x for linear; the matching ones for matmul)
 *   ours  the same through a compiled graph (loss = sum(y)): dt_linear / dt_matmul forward,
 *         forward + backward
 * and ours/raw. Flops: 2*M*N*K per GEMM (forward 1 GEMM, forward + backward 3). The graph's
 * time includes its loss (a sum over y and the fill of dL/dy), which is part of the price of
 * running an op in a graph.
 * For the bf16-weight linear it adds raw oneDNN bf16 matmul (x already bf16) and ours
 * (dt_linear with a frozen bf16 weight: convert x, matmul; backward: convert g, matmul;
 * 2 GEMMs for forward + backward since there is no dW).
 * Times are the best of several repetitions (at least 3, about 0.5 s per figure).
 *
 * usage: bench_gemm [threads=2] [quick]   ("quick": the two smallest shapes only) */
#include <cblas.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/dtrain.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef void (*work_fn)(void *arg);

/* Best time of fn(arg) over at least 3 runs and ~0.5 s, after one warm-up run. */
static double best_time(work_fn fn, void *arg) {
    fn(arg);
    double best = 1e30, start = now();
    for (int i = 0; i < 3 || (now() - start < 0.5 && i < 50); i++) {
        double t = now();
        fn(arg);
        t = now() - t;
        if (t < best) best = t;
    }
    return best;
}

static float *fill(int64_t n, uint64_t seed) {
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    dt_rng_normal(p, n, seed, 0, 0, 0.0f, 1.0f);
    return p;
}

/* ---- raw sgemm ------------------------------------------------------------------------- */

typedef struct raw {
    int M, K, N, linear; /* linear: w is [N, K] (y = x w^T); else b is [K, N] */
    int no_dw;           /* backward without the weight gradient (frozen bf16 weight) */
    int onednn;          /* dnnl_sgemm instead of cblas_sgemm (for comparison only) */
    float *x, *w, *y, *g, *dx, *dw;
} raw;

/* Row-major C [M, N] = op(A) op(B) through the chosen library. */
static void sg(const raw *r, int ta, int tb, int M, int N, int K, const float *A, int lda,
               const float *B, int ldb, float *C, int ldc) {
    if (r->onednn)
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}

static void raw_fwd(void *p) {
    raw *r = p;
    sg(r, 0, r->linear, r->M, r->N, r->K, r->x, r->K, r->w, r->linear ? r->K : r->N, r->y, r->N);
}

static void raw_fwdbwd(void *p) {
    raw *r = p;
    raw_fwd(p);
    if (r->linear) {
        /* dx [M, K] = g [M, N] w [N, K];  dW [N, K] = g^T x */
        sg(r, 0, 0, r->M, r->K, r->N, r->g, r->N, r->w, r->K, r->dx, r->K);
        if (!r->no_dw) sg(r, 1, 0, r->N, r->K, r->M, r->g, r->N, r->x, r->K, r->dw, r->K);
    } else {
        /* dA [M, K] = g [M, N] B^T;  dB [K, N] = A^T g */
        sg(r, 0, 1, r->M, r->K, r->N, r->g, r->N, r->w, r->N, r->dx, r->K);
        sg(r, 1, 0, r->K, r->N, r->M, r->x, r->K, r->g, r->N, r->dw, r->N);
    }
}

/* Best times of forward and forward + backward with cblas_sgemm (raw[0..1]) and, for
 * comparison, oneDNN's dnnl_sgemm (raw[2..3]). */
static void raw_measure(int M, int K, int N, int linear, int no_dw, double t[4]) {
    int64_t mk = (int64_t)M * K, kn = (int64_t)K * N, mn = (int64_t)M * N;
    raw r = {.M = M, .K = K, .N = N, .linear = linear, .no_dw = no_dw};
    r.x = fill(mk, 1), r.w = fill(kn, 2), r.y = fill(mn, 3), r.g = fill(mn, 4);
    r.dx = fill(mk, 5), r.dw = fill(kn, 6);
    for (r.onednn = 0; r.onednn < 2; r.onednn++) {
        t[2 * r.onednn] = best_time(raw_fwd, &r);
        t[2 * r.onednn + 1] = best_time(raw_fwdbwd, &r);
    }
    free(r.x), free(r.w), free(r.y), free(r.g), free(r.dx), free(r.dw);
}

/* ---- raw oneDNN bf16 matmul (x already bf16): the ceiling for the bf16 linear ----------- */

static double dnnl_bf16_measure(int M, int K, int N) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_memory_desc_t src, wei, dst;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t ms, mw, md_;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&st, eng, 0)) return 0;
    dnnl_memory_desc_init_by_strides(&src, 2, (dnnl_dims_t){M, K}, dnnl_bf16, (dnnl_dims_t){K, 1});
    dnnl_memory_desc_init_by_strides(&wei, 2, (dnnl_dims_t){K, N}, dnnl_bf16, (dnnl_dims_t){1, K});
    dnnl_memory_desc_init_by_strides(&dst, 2, (dnnl_dims_t){M, N}, dnnl_f32, (dnnl_dims_t){N, 1});
    if (dnnl_matmul_desc_init(&md, &src, &wei, NULL, &dst) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) || dnnl_primitive_create(&prim, pd))
        return 0;
    void *a = calloc((size_t)M * K, 2), *b = calloc((size_t)K * N, 2),
         *c = calloc((size_t)M * N, 4);
    dnnl_memory_create(&ms, &src, eng, a);
    dnnl_memory_create(&mw, &wei, eng, b);
    dnnl_memory_create(&md_, &dst, eng, c);
    /* small non-zero data: zeros could take shortcuts */
    for (int64_t i = 0; i < (int64_t)M * K; i++)
        ((uint16_t *)a)[i] = dt_bf16_from_f32(0.01f * (float)(i % 97));
    for (int64_t i = 0; i < (int64_t)K * N; i++)
        ((uint16_t *)b)[i] = dt_bf16_from_f32(0.01f * (float)(i % 89));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md_}};
    double best = 1e30, start;
    dnnl_primitive_execute(prim, st, 3, args);
    dnnl_stream_wait(st);
    start = now();
    for (int i = 0; i < 3 || (now() - start < 0.5 && i < 50); i++) {
        double t = now();
        dnnl_primitive_execute(prim, st, 3, args);
        dnnl_stream_wait(st);
        t = now() - t;
        if (t < best) best = t;
    }
    dnnl_memory_destroy(ms), dnnl_memory_destroy(mw), dnnl_memory_destroy(md_);
    dnnl_primitive_destroy(prim), dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
    free(a), free(b), free(c);
    return best;
}

/* ---- ours: through a compiled graph ---------------------------------------------------- */

enum { OP_LINEAR, OP_MATMUL, OP_LINEAR_BF16 };

static void g_fwd(void *p) {
    if (dt_graph_forward(p, 1) != DT_OK) fprintf(stderr, "forward: %s\n", dt_last_error());
}
static void g_fwdbwd(void *p) {
    g_fwd(p);
    if (dt_graph_backward(p) != DT_OK) fprintf(stderr, "backward: %s\n", dt_last_error());
}

static int ours_measure(int op, int M, int K, int N, double *fwd, double *both) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){M, K}, 1);
    int w, y;
    if (op == OP_MATMUL) {
        w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){K, N}, 0);
        y = dt_matmul(g, x, w, 0, 0);
    } else {
        w = dt_graph_param(g, "w", op == OP_LINEAR ? DT_F32 : DT_BF16, 2, (int64_t[]){N, K},
                           op == OP_LINEAR ? 0 : DT_PARAM_FROZEN);
        y = dt_linear(g, x, w, -1);
    }
    int loss = dt_sum(g, y);
    if (loss < 0 || dt_graph_compile(g, loss, NULL) != DT_OK) {
        fprintf(stderr, "graph: %s\n", dt_last_error());
        dt_graph_free(g);
        return -1;
    }
    const dt_tensor *xv = dt_graph_value(g, x), *wv = dt_graph_value(g, w);
    dt_rng_normal(xv->data, (int64_t)M * K, 1, 0, 0, 0.0f, 1.0f);
    if (wv->dtype == DT_F32) {
        dt_rng_normal(wv->data, (int64_t)K * N, 2, 0, 0, 0.0f, 1.0f);
    } else {
        for (int64_t i = 0; i < (int64_t)K * N; i++)
            ((uint16_t *)wv->data)[i] = dt_bf16_from_f32(0.01f * (float)(i % 89));
    }
    *fwd = best_time(g_fwd, g);
    *both = best_time(g_fwdbwd, g);
    dt_graph_free(g);
    return 0;
}

static void row(const char *name, double flop, double t_raw, double t_ours) {
    double gr = flop / t_raw * 1e-9, go = flop / t_ours * 1e-9;
    printf("  %-22s raw %7.1f  ours %7.1f GFLOP/s  ours/raw %.3f\n", name, gr, go, go / gr);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    threads = dt_threads_set(threads);
    const char *ct = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
    printf("bench_gemm: %d threads, OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s\n", threads,
           ct ? ct : "(unset)", l2 ? l2 : "(unset)");
    printf("  OpenBLAS config: %s\n", openblas_get_config());

    static const struct {
        const char *what;
        int op, M, K, N;
    } cases[] = {
        {"square 512", OP_MATMUL, 512, 512, 512},
        {"linear 2048x512->1408", OP_LINEAR, 2048, 512, 1408},
        {"square 1024", OP_MATMUL, 1024, 1024, 1024},
        {"linear 2048x1408->512", OP_LINEAR, 2048, 1408, 512},
        {"square 2048", OP_MATMUL, 2048, 2048, 2048},
        {"linear 2048x2048->2048", OP_LINEAR, 2048, 2048, 2048},
        {"linear 2048x512->32000", OP_LINEAR, 2048, 512, 32000},
        {"bf16 2048x512->1408", OP_LINEAR_BF16, 2048, 512, 1408},
        {"bf16 2048x2048->2048", OP_LINEAR_BF16, 2048, 2048, 2048},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        if (quick && i >= 2) break;
        int M = cases[i].M, K = cases[i].K, N = cases[i].N, op = cases[i].op;
        double flop = 2.0 * M * N * K, of, ob;
        const char *opn = op == OP_MATMUL ? "dt_matmul" : "dt_linear";
        printf("%s (M=%d K=%d N=%d, %s%s)\n", cases[i].what, M, K, N, opn,
               op == OP_LINEAR_BF16 ? ", bf16 weight" : "");
        double t[4];
        raw_measure(M, K, N, op != OP_MATMUL, op == OP_LINEAR_BF16, t);
        if (ours_measure(op, M, K, N, &of, &ob)) continue;
        int nb = op == OP_LINEAR_BF16 ? 2 : 3; /* GEMMs in forward + backward (bf16: no dW) */
        if (op == OP_LINEAR_BF16) {
            double d = dnnl_bf16_measure(M, K, N);
            row("forward vs sgemm", flop, t[0], of);
            if (d > 0) row("forward vs onednn bf16", flop, d, of);
            row("fwd+bwd vs sgemm", nb * flop, t[1], ob);
        } else {
            row("forward", flop, t[0], of);
            row("forward+backward", nb * flop, t[1], ob);
        }
        printf("  (raw dnnl_sgemm f32: forward %.1f, forward+backward %.1f GFLOP/s)\n",
               flop / t[2] * 1e-9, nb * flop / t[3] * 1e-9);
        fflush(stdout);
    }
    return 0;
}
