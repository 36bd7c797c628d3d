/* GEMM-backed ops against raw library GEMM.
 *
 * For each shape (M rows, K in, N out) it prints GFLOP/s of
 *   cblas   raw cblas_sgemm (OpenBLAS): forward alone, and the three GEMMs of forward +
 *           backward (y = x w^T, dx = g w, dW = g^T x for linear; the matching ones for matmul)
 *   onednn  the same with raw dnnl_sgemm (oneDNN's f32 GEMM, which our ops use by default;
 *           DT_SGEMM=openblas switches them to cblas_sgemm)
 *   ours    the same through a compiled graph (loss = sum(y)): dt_linear / dt_matmul forward,
 *           forward + backward
 * and ours/cblas, ours/onednn. Flops: 2*M*N*K per GEMM (forward 1 GEMM, forward + backward 3).
 * The graph's time includes its loss (a sum over y and the fill of dL/dy): part of the price of
 * running an op in a graph.
 * For the bf16-weight linear (dt_linear with a frozen bf16 weight: convert x, bf16 matmul;
 * backward: convert g, bf16 matmul; 2 GEMMs for forward + backward since there is no dW) the
 * onednn column is oneDNN's raw bf16 matmul with x already in bf16 (forward only).
 * "bf16 mode" rows are dt_linear with an f32 weight compiled with dt_graph_opts.bf16_gemm (the
 * trainer's train.precision: bf16): on a CPU with bf16 instructions x, w and g are packed to bf16
 * and the three products run oneDNN's bf16 matmuls, elsewhere (or with DT_CPU_BF16=emulate)
 * the f32 emulation; cblas and onednn there are the raw f32 GEMMs (ours/onednn > 1: faster than
 * the f32 GEMMs themselves). The same for a batched dt_matmul ("batched": 64 products of
 * 256x64->256, an attention-sized batch; raw GEMMs one product at a time) and, last, a ResNet
 * conv2d 3x3 in fp32 against bf16 mode (native: oneDNN's bf16 convolutions) through graphs.
 * Times are the best of several repetitions (at least 3, and about SECONDS per figure: on a
 * shared machine the best of a longer window filters out other processes' interference).
 *
 * usage: bench_gemm [threads=2] [all|quick|bf16] [SECONDS=0.5]   (quick: the two smallest
 * shapes; bf16: the bf16-mode rows, their batched f32 counterpart and the conv2d) */
#include <cblas.h>
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "bench_util.h"

typedef void (*work_fn)(void *arg);

static double window = 0.5; /* seconds of repetitions per figure */

/* Best times of n workloads, run in turns (one warm-up each, then rounds of one run each,
 * at least 3 rounds and about n * window seconds) so that interference from other processes
 * hits them alike. Only workloads on the same threads (OpenMP: oneDNN and ours) share rounds:
 * after a cblas_sgemm, OpenBLAS's own worker threads keep spinning for a while and would slow
 * whatever OpenMP work follows; cblas_sgemm is timed in its own call, followed by settle(). */
static void best_times(int n, work_fn *fn, void **arg, double *best) {
    for (int k = 0; k < n; k++) fn[k](arg[k]), best[k] = 1e30;
    double start = bench_now();
    for (int i = 0; i < 3 || (bench_now() - start < n * window && i < 1000); i++) {
        for (int k = 0; k < n; k++) {
            double t = bench_now();
            fn[k](arg[k]);
            t = bench_now() - t;
            if (t < best[k]) best[k] = t;
        }
    }
}

/* Lets OpenBLAS's worker threads stop spinning (they sleep after a timeout). */
static void settle(void) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
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
    int batch;           /* matmul: `batch` independent products, one after the other */
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

/* Batch entry i's forward product (and with bwd its backward ones). */
static void raw_entry(const raw *r, int64_t i, int bwd) {
    int64_t mk = (int64_t)r->M * r->K, kn = (int64_t)r->K * r->N, mn = (int64_t)r->M * r->N;
    const float *x = r->x + i * mk, *w = r->w + i * kn, *g = r->g + i * mn;
    float *y = r->y + i * mn, *dx = r->dx + i * mk, *dw = r->dw + i * kn;
    sg(r, 0, r->linear, r->M, r->N, r->K, x, r->K, w, r->linear ? r->K : r->N, y, r->N);
    if (!bwd) return;
    if (r->linear) {
        /* dx [M, K] = g [M, N] w [N, K];  dW [N, K] = g^T x */
        sg(r, 0, 0, r->M, r->K, r->N, g, r->N, w, r->K, dx, r->K);
        if (!r->no_dw) sg(r, 1, 0, r->N, r->K, r->M, g, r->N, x, r->K, dw, r->K);
    } else {
        /* dA [M, K] = g [M, N] B^T;  dB [K, N] = A^T g */
        sg(r, 0, 1, r->M, r->K, r->N, g, r->N, w, r->N, dx, r->K);
        sg(r, 1, 0, r->K, r->N, r->M, x, r->K, g, r->N, dw, r->N);
    }
}

static void raw_fwd(void *p) {
    const raw *r = p;
    for (int64_t i = 0; i < r->batch; i++) raw_entry(r, i, 0);
}

static void raw_fwdbwd(void *p) {
    const raw *r = p;
    for (int64_t i = 0; i < r->batch; i++) raw_entry(r, i, 1);
}

static void raw_init(raw *r, int batch, int M, int K, int N, int linear, int no_dw, int onednn) {
    int64_t mk = (int64_t)batch * M * K, kn = (int64_t)batch * K * N, mn = (int64_t)batch * M * N;
    *r = (raw){
        .M = M, .K = K, .N = N, .linear = linear, .batch = batch, .no_dw = no_dw, .onednn = onednn};
    r->x = fill(mk, 1), r->w = fill(kn, 2), r->y = fill(mn, 3), r->g = fill(mn, 4);
    r->dx = fill(mk, 5), r->dw = fill(kn, 6);
}

static void raw_free(raw *r) {
    free(r->x), free(r->w), free(r->y), free(r->g), free(r->dx), free(r->dw);
}

/* ---- raw oneDNN bf16 matmul (x already bf16): the ceiling for the bf16 linear ----------- */

typedef struct bf16mm {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t m[3];
    void *buf[3];
} bf16mm;

/* y [M, N] f32 = x [M, K] bf16 @ w^T, w [N, K] bf16. Returns 0 on success. */
static int bf16mm_init(bf16mm *b, int M, int K, int N) {
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t mm;
    memset(b, 0, sizeof *b);
    if (dnnl_engine_create(&b->eng, dnnl_cpu, 0) || dnnl_stream_create(&b->st, b->eng, 0))
        return -1;
    dnnl_memory_desc_init_by_strides(&md[0], 2, (dnnl_dims_t){M, K}, dnnl_bf16,
                                     (dnnl_dims_t){K, 1});
    dnnl_memory_desc_init_by_strides(&md[1], 2, (dnnl_dims_t){K, N}, dnnl_bf16,
                                     (dnnl_dims_t){1, K});
    dnnl_memory_desc_init_by_strides(&md[2], 2, (dnnl_dims_t){M, N}, dnnl_f32, (dnnl_dims_t){N, 1});
    if (dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) ||
        dnnl_primitive_desc_create(&b->pd, &mm, NULL, b->eng, NULL) ||
        dnnl_primitive_create(&b->prim, b->pd))
        return -1;
    size_t n[3] = {(size_t)M * K * 2, (size_t)K * N * 2, (size_t)M * N * 4};
    for (int i = 0; i < 3; i++) {
        b->buf[i] = malloc(n[i]);
        if (!b->buf[i]) return -1;
        dnnl_memory_create(&b->m[i], &md[i], b->eng, b->buf[i]);
    }
    /* small non-zero data: zeros could take shortcuts */
    for (size_t i = 0; i < n[0] / 2; i++)
        ((uint16_t *)b->buf[0])[i] = dt_bf16_from_f32(0.01f * (float)(i % 97));
    for (size_t i = 0; i < n[1] / 2; i++)
        ((uint16_t *)b->buf[1])[i] = dt_bf16_from_f32(0.01f * (float)(i % 89));
    return 0;
}

static void bf16mm_run(void *p) {
    bf16mm *b = p;
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, b->m[0]}, {DNNL_ARG_WEIGHTS, b->m[1]}, {DNNL_ARG_DST, b->m[2]}};
    dnnl_primitive_execute(b->prim, b->st, 3, args);
    dnnl_stream_wait(b->st);
}

static void bf16mm_free(bf16mm *b) {
    for (int i = 0; i < 3; i++) {
        if (b->m[i]) dnnl_memory_destroy(b->m[i]);
        free(b->buf[i]);
    }
    if (b->prim) dnnl_primitive_destroy(b->prim);
    if (b->pd) dnnl_primitive_desc_destroy(b->pd);
    if (b->st) dnnl_stream_destroy(b->st);
    if (b->eng) dnnl_engine_destroy(b->eng);
}

/* ---- ours: through a compiled graph ---------------------------------------------------- */

enum { OP_LINEAR, OP_MATMUL, OP_LINEAR_BF16, OP_LINEAR_BF16MODE, OP_MATMUL_BF16MODE };

static void g_fwd(void *p) {
    if (dt_graph_forward(p, 1) != DT_OK) fprintf(stderr, "forward: %s\n", dt_last_error());
}
static void g_fwdbwd(void *p) {
    g_fwd(p);
    if (dt_graph_backward(p) != DT_OK) fprintf(stderr, "backward: %s\n", dt_last_error());
}

/* x [M, K] (with a gradient) -> op -> y [M, N]; loss = sum(y). A matmul with batch > 1:
 * x [batch, M, K], w [batch, K, N] (an input with a gradient). NULL on failure. */
static dt_graph *ours_init(int op, int batch, int M, int K, int N) {
    dt_graph *g = dt_graph_init();
    int mm = op == OP_MATMUL || op == OP_MATMUL_BF16MODE, b3 = mm && batch > 1;
    int x = b3 ? dt_graph_input(g, "x", DT_F32, 3, (int64_t[]){batch, M, K}, 1)
               : dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){M, K}, 1);
    int w, y;
    if (mm) {
        w = b3 ? dt_graph_input(g, "w", DT_F32, 3, (int64_t[]){batch, K, N}, 1)
               : dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){K, N}, 0);
        y = dt_matmul(g, x, w, 0, 0);
    } else {
        int f32w = op != OP_LINEAR_BF16;
        w = dt_graph_param(g, "w", f32w ? DT_F32 : DT_BF16, 2, (int64_t[]){N, K},
                           f32w ? 0 : DT_PARAM_FROZEN);
        y = dt_linear(g, x, w, -1);
    }
    int loss = dt_sum(g, y);
    dt_graph_opts o = {.bf16_gemm = op == OP_LINEAR_BF16MODE || op == OP_MATMUL_BF16MODE};
    if (loss < 0 || dt_graph_compile(g, loss, &o) != DT_OK) {
        fprintf(stderr, "graph: %s\n", dt_last_error());
        dt_graph_free(g);
        return NULL;
    }
    const dt_tensor *xv = dt_graph_value(g, x), *wv = dt_graph_value(g, w);
    dt_rng_normal(xv->data, (int64_t)batch * M * K, 1, 0, 0, 0.0f, 1.0f);
    if (wv->dtype == DT_F32) {
        dt_rng_normal(wv->data, (int64_t)(b3 ? batch : 1) * K * N, 2, 0, 0, 0.0f, 1.0f);
    } else {
        for (int64_t i = 0; i < (int64_t)K * N; i++)
            ((uint16_t *)wv->data)[i] = dt_bf16_from_f32(0.01f * (float)(i % 89));
    }
    return g;
}

/* The loss alone: y [batch * M, N] (an input with a gradient) -> sum. Its time is subtracted
 * from ours for the "op only" figure. */
static dt_graph *loss_init(int64_t M, int N) {
    dt_graph *g = dt_graph_init();
    int y = dt_graph_input(g, "y", DT_F32, 2, (int64_t[]){M, N}, 1);
    if (dt_graph_compile(g, dt_sum(g, y), NULL) != DT_OK) {
        fprintf(stderr, "graph: %s\n", dt_last_error());
        dt_graph_free(g);
        return NULL;
    }
    return g;
}

/* One line: GFLOP/s of raw cblas, raw oneDNN (t_dnnl <= 0: not measured) and ours. */
static void row(const char *name, double flop, double t_cblas, double t_dnnl, double t_ours,
                double t_loss) {
    double gc = flop / t_cblas * 1e-9, gd = t_dnnl > 0 ? flop / t_dnnl * 1e-9 : 0;
    /* "op only" subtracts the loss; a loss that took over half the time means interference */
    double go = flop / t_ours * 1e-9;
    double gop = t_loss < 0.5 * t_ours ? flop / (t_ours - t_loss) * 1e-9 : NAN;
    printf("  %-16s cblas %6.1f  onednn %6.1f  ours %6.1f (op only %6.1f) GFLOP/s   ours/cblas "
           "%.2f (%.2f)",
           name, gc, gd, go, gop, go / gc, gop / gc);
    if (gd > 0) printf("  ours/onednn %.2f (%.2f)", go / gd, gop / gd);
    printf("\n");
}

static const char *bf16_mode_name(void) {
    return dt_bf16_gemm_mode() == DT_BF16_NATIVE ? ", bf16 mode: native kernels"
                                                 : ", bf16 mode: emulated";
}

/* conv2d 3x3 pad 1 of x [N, C, S, S] (with a gradient) by w [C, C, 3, 3]; loss = sum(y):
 * fp32 against bf16 mode, forward and forward + backward (data and weights: 3 passes), GFLOP/s
 * of the whole graph (the loss included). */
static void conv_rows(int N, int C, int S) {
    printf("conv2d 3x3 x [%d, %d, %d, %d] -> %d channels (dt_conv2d%s)\n", N, C, S, S, C,
           bf16_mode_name());
    dt_graph *g[2];
    for (int k = 0; k < 2; k++) {
        g[k] = dt_graph_init();
        int x = dt_graph_input(g[k], "x", DT_F32, 4, (int64_t[]){N, C, S, S}, 1);
        int w = dt_graph_param(g[k], "w", DT_F32, 4, (int64_t[]){C, C, 3, 3}, 0);
        int y = dt_conv2d(g[k], x, w, -1, 1, 1, 1, 1, 1, 1, 1);
        if (dt_graph_compile(g[k], dt_sum(g[k], y), &(dt_graph_opts){.bf16_gemm = k}) != DT_OK) {
            fprintf(stderr, "graph: %s\n", dt_last_error());
            dt_graph_free(g[0]), dt_graph_free(g[k]);
            return;
        }
        dt_rng_normal(dt_graph_value(g[k], x)->data, (int64_t)N * C * S * S, 1, 0, 0, 0.0f, 1.0f);
        dt_rng_normal(dt_graph_value(g[k], w)->data, (int64_t)C * C * 9, 2, 0, 0, 0.0f, 0.05f);
    }
    double flop = 2.0 * N * C * S * S * C * 9, tf[2], tb[2];
    best_times(2, (work_fn[]){g_fwd, g_fwd}, (void *[]){g[0], g[1]}, tf);
    best_times(2, (work_fn[]){g_fwdbwd, g_fwdbwd}, (void *[]){g[0], g[1]}, tb);
    printf("  forward           fp32 %6.1f  bf16 mode %6.1f GFLOP/s   bf16/fp32 %.2f\n",
           flop / tf[0] * 1e-9, flop / tf[1] * 1e-9, tf[0] / tf[1]);
    printf("  forward+backward  fp32 %6.1f  bf16 mode %6.1f GFLOP/s   bf16/fp32 %.2f\n",
           3 * flop / tb[0] * 1e-9, 3 * flop / tb[1] * 1e-9, tb[0] / tb[1]);
    dt_graph_free(g[0]), dt_graph_free(g[1]);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0;
    if (argc > 3 && atof(argv[3]) > 0) window = atof(argv[3]);
    threads = dt_threads_set(threads);
    const char *ct = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
    const char *be = getenv("DT_SGEMM");
    printf("bench_gemm: %d threads, OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s, ours on %s\n",
           threads, ct ? ct : "(unset)", l2 ? l2 : "(unset)",
           be && strcmp(be, "openblas") == 0 ? "cblas_sgemm" : "dnnl_sgemm");
    printf("  OpenBLAS config: %s\n", openblas_get_config());

    static const struct {
        const char *what;
        int op, M, K, N, batch;
    } cases[] = {
        {"square 512", OP_MATMUL, 512, 512, 512, 1},
        {"linear 2048x512->1408", OP_LINEAR, 2048, 512, 1408, 1},
        {"square 1024", OP_MATMUL, 1024, 1024, 1024, 1},
        {"linear 2048x1408->512", OP_LINEAR, 2048, 1408, 512, 1},
        {"square 2048", OP_MATMUL, 2048, 2048, 2048, 1},
        {"linear 2048x2048->2048", OP_LINEAR, 2048, 2048, 2048, 1},
        {"linear 2048x512->32000", OP_LINEAR, 2048, 512, 32000, 1},
        {"bf16 2048x512->1408", OP_LINEAR_BF16, 2048, 512, 1408, 1},
        {"bf16 2048x2048->2048", OP_LINEAR_BF16, 2048, 2048, 2048, 1},
        {"bf16 mode 2048x512->1408", OP_LINEAR_BF16MODE, 2048, 512, 1408, 1},
        {"bf16 mode 2048x2048->2048", OP_LINEAR_BF16MODE, 2048, 2048, 2048, 1},
        {"bf16 mode 2048x512->32000", OP_LINEAR_BF16MODE, 2048, 512, 32000, 1},
        {"batched 64x 256x64->256", OP_MATMUL, 256, 64, 256, 64},
        {"bf16 mode 64x 256x64->256", OP_MATMUL_BF16MODE, 256, 64, 256, 64},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        if (quick && i >= 2) break;
        if (bf16 && cases[i].op != OP_LINEAR_BF16MODE && cases[i].op != OP_MATMUL_BF16MODE &&
            cases[i].batch == 1)
            continue;
        int M = cases[i].M, K = cases[i].K, N = cases[i].N, op = cases[i].op;
        int B = cases[i].batch;
        int mm = op == OP_MATMUL || op == OP_MATMUL_BF16MODE;
        double flop = 2.0 * B * M * N * K, t[3];
        printf("%s (batch=%d M=%d K=%d N=%d, %s%s)\n", cases[i].what, B, M, K, N,
               mm ? "dt_matmul" : "dt_linear",
               op == OP_LINEAR_BF16                                   ? ", bf16 weight"
               : op == OP_LINEAR_BF16MODE || op == OP_MATMUL_BF16MODE ? bf16_mode_name()
                                                                      : "");
        dt_graph *g = ours_init(op, B, M, K, N), *gl = loss_init((int64_t)B * M, N);
        if (!g || !gl) continue;
        raw rc, rd;
        raw_init(&rc, B, M, K, N, !mm, op == OP_LINEAR_BF16, 0);
        rd = rc;
        rd.onednn = 1;
        double tc[2], tl[2]; /* cblas and the loss alone: forward, forward + backward */
        best_times(1, (work_fn[]){raw_fwd}, (void *[]){&rc}, tc);
        best_times(1, (work_fn[]){raw_fwdbwd}, (void *[]){&rc}, tc + 1);
        settle();
        if (op == OP_LINEAR_BF16) { /* 2 GEMMs in forward + backward: no dW */
            bf16mm b;
            int ok = bf16mm_init(&b, M, K, N) == 0;
            best_times(2 + ok, (work_fn[]){g_fwd, g_fwd, bf16mm_run}, (void *[]){g, gl, &b}, t);
            tl[0] = t[1];
            row("forward", flop, tc[0], ok ? t[2] : 0, t[0], tl[0]);
            best_times(2, (work_fn[]){g_fwdbwd, g_fwdbwd}, (void *[]){g, gl}, t);
            tl[1] = t[1];
            row("forward+backward", 2 * flop, tc[1], 0, t[0], tl[1]);
            bf16mm_free(&b);
        } else {
            best_times(3, (work_fn[]){raw_fwd, g_fwd, g_fwd}, (void *[]){&rd, g, gl}, t);
            tl[0] = t[2];
            row("forward", flop, tc[0], t[0], t[1], tl[0]);
            best_times(3, (work_fn[]){raw_fwdbwd, g_fwdbwd, g_fwdbwd}, (void *[]){&rd, g, gl}, t);
            tl[1] = t[2];
            row("forward+backward", 3 * flop, tc[1], t[0], t[1], tl[1]);
        }
        printf("  (the loss alone, sum over [%d, %d]: forward %.2f ms, forward+backward %.2f ms)\n",
               B * M, N, tl[0] * 1e3, tl[1] * 1e3);
        dt_graph_free(gl);
        raw_free(&rc);
        dt_graph_free(g);
        fflush(stdout);
    }
    if (!quick) conv_rows(32, 64, 28);
    return 0;
}
