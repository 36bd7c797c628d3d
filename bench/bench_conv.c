/* conv2d forward and forward+backward (dx and dw) at ResNet-like shapes, NCHW f32.
 *
 * usage: bench_conv [--batch N] [--threads T] [--reps R] [--warmup W]
 * Prints one line per shape: name fwd_ms fwdbwd_ms (medians over R runs). The shape list must
 * match SHAPES in bench/conv_peer.py (the PyTorch side); bench/bench_conv.sh runs both.
 *
 * Each shape is a compiled graph x -> conv2d -> loss; the conv node's own forward and backward
 * kernels are timed (through the compiled schedule's entries), so the loss ops are not counted,
 * matching the peer, which times F.conv2d and y.backward(gy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/dtrain.h"
#include "graph/graph_impl.h"
#include "bench_util.h"

typedef struct shape {
    const char *name;
    int C, H, W, O, K, stride, pad;
} shape;

/* name, C, H, W, O, K, stride, pad (same order and values as conv_peer.py) */
static const shape SHAPES[] = {
    {"stem3x3_3-64_32", 3, 32, 32, 64, 3, 1, 1},   {"3x3_64_32", 64, 32, 32, 64, 3, 1, 1},
    {"3x3_128_16", 128, 16, 16, 128, 3, 1, 1},     {"3x3_256_8", 256, 8, 8, 256, 3, 1, 1},
    {"3x3_512_4", 512, 4, 4, 512, 3, 1, 1},        {"3x3s2_64-128_32", 64, 32, 32, 128, 3, 2, 1},
    {"1x1_256-64_8", 256, 8, 8, 64, 1, 1, 0},      {"1x1_64-256_8", 64, 8, 8, 256, 1, 1, 0},
    {"1x1s2_64-128_32", 64, 32, 32, 128, 1, 2, 0},
};

static int cmp_double(const void *a, const void *b) {
    double d = *(const double *)a - *(const double *)b;
    return d < 0 ? -1 : d > 0;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The schedule entry running node `id` in `phase` (DT_PH_FWD or DT_PH_BWD). */
static dt_entry *entry_of(dt_graph *g, int id, int phase) {
    for (int k = 0; k < g->n_entries; k++)
        if (g->entries[k].node == id && g->entries[k].phase == phase) return &g->entries[k];
    return NULL;
}

static void fill(float *p, int64_t n, uint64_t seed) {
    dt_rng_normal(p, n, seed, 1, 0, 0.0f, 1.0f);
}

static int bench_shape(const shape *s, int N, int reps, int warmup) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){N, s->C, s->H, s->W}, 1);
    int w = dt_graph_param(g, "w", DT_F32, 4, (int64_t[]){s->O, s->C, s->K, s->K}, 0);
    int y = dt_conv2d(g, x, w, -1, s->stride, s->stride, s->pad, s->pad, 1, 1, 1);
    int loss = dt_sum(g, y);
    if (loss < 0 || dt_graph_compile(g, loss, NULL) != DT_OK) {
        fprintf(stderr, "%s: %s\n", s->name, dt_last_error());
        dt_graph_free(g);
        return 1;
    }
    fill(dt_graph_value(g, x)->data, dt_tensor_numel(dt_graph_value(g, x)), 1);
    fill(dt_graph_value(g, w)->data, dt_tensor_numel(dt_graph_value(g, w)), 2);
    /* one full step binds the run state (training mode) and leaves gy filled */
    if (dt_graph_forward(g, 1) != DT_OK || dt_graph_backward(g) != DT_OK) {
        fprintf(stderr, "%s: %s\n", s->name, dt_last_error());
        dt_graph_free(g);
        return 1;
    }
    dt_entry *ef = entry_of(g, y, DT_PH_FWD), *eb = entry_of(g, y, DT_PH_BWD);
    const dt_op_def *op = g->nodes[y].op;
    double *tf = calloc((size_t)reps, sizeof *tf), *tfb = calloc((size_t)reps, sizeof *tfb);
    int rc = !ef || !eb;
    for (int r = -warmup; r < reps && !rc; r++) {
        double t0 = bench_now();
        rc |= op->forward(&ef->ctx) != DT_OK;
        double t1 = bench_now();
        rc |= op->backward(&eb->ctx) != DT_OK;
        double t2 = bench_now();
        if (r >= 0) tf[r] = t1 - t0, tfb[r] = t2 - t0;
    }
    if (rc)
        fprintf(stderr, "%s: %s\n", s->name, dt_last_error());
    else
        printf("%s %.3f %.3f\n", s->name, 1e3 * median(tf, reps), 1e3 * median(tfb, reps));
    fflush(stdout);
    free(tf), free(tfb);
    dt_graph_free(g);
    return rc;
}

int main(int argc, char **argv) {
    int batch = 32, threads = 2, reps = 10, warmup = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--batch N] [--threads T] [--reps R] [--warmup W]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    dt_threads_set(threads);
    int rc = 0;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
        rc |= bench_shape(&SHAPES[i], batch, reps, warmup);
    return rc;
}
