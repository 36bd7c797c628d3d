/* All-reduce bus bandwidth: raw MPI_Allreduce against dt_comm_allreduce (native: the same
 * MPI_Allreduce behind our vtable and checks; ring: our own reduce-scatter + all-gather), on the
 * same buffers, 1 MiB .. 256 MiB of f32. Run under mpirun (bench/bench_comm.sh).
 *
 * Bus bandwidth (nccl-tests' definition) = bytes * 2 (N - 1) / N / time: the data each rank must
 * send and receive at least, so figures compare across world sizes. Each figure is the median of
 * ROUNDS rounds; a round times `reps` back-to-back calls between two barriers; the three variants
 * take turns within a round, so a slow phase of the machine hits all of them alike.
 *
 * Then one data-parallel training step with overlap on and off: an MLP of 6 x 1024 x 1024 layers
 * (25 MiB of gradients in 4 MiB buckets), batch 64 per rank, SGD; step time, the time waited
 * after backward (dt_ddp_stats.wait_s) and the time the comm thread spent in all-reduces.
 * Usage: bench_comm [MAX_MIB=256] [ROUNDS=5] [DDP_STEPS=20] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/dist.h"
#include "dtrain/ops.h"
#include "dtrain/optim.h"
#include "dtrain/runtime.h"
#include "bench_util.h"

enum { RAW = 0, NATIVE = 1, RING = 2, N_VAR = 3 };
static const char *VAR_NAME[N_VAR] = {"raw MPI_Allreduce", "dt_comm native", "dt_comm ring"};

static int run(dt_comm *c, int var, float *buf, size_t n) {
    if (var == RAW)
        return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
               MPI_SUCCESS;
    dt_comm_set_algo(c, var == RING ? DT_COMM_ALGO_RING : DT_COMM_ALGO_NATIVE);
    return dt_comm_allreduce(c, buf, n, 0) != DT_OK;
}

/* ---- DDP step: overlap on vs off ---------------------------------------------------------- */

enum { MLP_B = 64, MLP_D = 1024, MLP_LAYERS = 6, MLP_OUT = 10 };

static dt_graph *mlp_graph(int *x, int *y) {
    dt_graph *g = dt_graph_init();
    *x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){MLP_B, MLP_D}, 0);
    *y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){MLP_B}, 0);
    int h = *x;
    char name[32];
    for (int l = 0; l <= MLP_LAYERS; l++) {
        int out = l == MLP_LAYERS ? MLP_OUT : MLP_D;
        snprintf(name, sizeof name, "fc%d.weight", l);
        int w = dt_graph_param(g, name, DT_F32, 2, (int64_t[]){out, MLP_D}, 0);
        snprintf(name, sizeof name, "fc%d.bias", l);
        int b = dt_graph_param(g, name, DT_F32, 1, (int64_t[]){out}, DT_PARAM_NO_DECAY);
        h = dt_linear(g, h, w, b);
        if (l < MLP_LAYERS) h = dt_relu(g, h);
    }
    int loss = dt_cross_entropy(g, h, *y, 0.0f, DT_IGNORE_INDEX_DEFAULT);
    if (loss < 0 || dt_graph_compile(g, loss, NULL) != DT_OK) {
        dt_graph_free(g);
        return NULL;
    }
    return g;
}

static int bench_ddp(dt_comm *c, int steps) {
    int rank = dt_comm_rank(c), x, y;
    dt_graph *g = mlp_graph(&x, &y);
    if (!g) return 1;
    size_t n;
    float *p = dt_graph_flat_param(g, &n), *gr = dt_graph_flat_grad(g, NULL);
    for (size_t i = 0; i < n; i++) p[i] = (float)((int)(i % 13) - 6) * 1e-3f;
    float *xv = dt_graph_value(g, x)->data;
    int32_t *yv = dt_graph_value(g, y)->data;
    for (size_t i = 0; i < (size_t)MLP_B * MLP_D; i++) xv[i] = (float)((i * 7 + rank) % 11) * 0.1f;
    for (int i = 0; i < MLP_B; i++) yv[i] = (i + rank) % MLP_OUT;
    dt_optim_config oc = dt_optim_config_default(DT_OPTIM_SGD);
    dt_optim *opt;
    dt_ddp_opts o = dt_ddp_opts_default();
    o.bucket_mb = 4;
    dt_ddp *d;
    if (dt_optim_init(&oc, n, 0, n, NULL, 0, &opt) != DT_OK) return 1;
    if (dt_ddp_open(g, c, &o, &d) != DT_OK) return 1;
    if (rank == 0)
        printf("\nDDP step, MLP %d x %dx%d (%.1f MiB of gradients, %d buckets), batch %d per "
               "rank, %d steps after 3 warm-up\n",
               MLP_LAYERS, MLP_D, MLP_D, (double)n * 4 / 1048576, dt_ddp_bucket_count(d), MLP_B,
               steps);
    int failed = 0;
    for (int overlap = 1; overlap >= 0 && !failed; overlap--) {
        dt_ddp_set_overlap(d, overlap);
        double t_step = 0, t_wait = 0, t_comm = 0;
        for (int s = 0; s < steps + 3 && !failed; s++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now();
            failed |= dt_graph_forward(g, 1) != DT_OK || dt_graph_backward(g) != DT_OK ||
                      dt_ddp_wait(d) != DT_OK || dt_optim_step(opt, p, gr, 1e-3f) != DT_OK;
            double t = bench_now() - t0;
            dt_ddp_stats st;
            dt_ddp_get_stats(d, &st);
            if (s >= 3) t_step += t, t_wait += st.wait_s, t_comm += st.comm_s;
        }
        if (rank == 0 && !failed)
            printf("  overlap %-3s  step %7.1f ms   waiting after backward %6.1f ms   in "
                   "all-reduce %6.1f ms\n",
                   overlap ? "on" : "off", 1e3 * t_step / steps, 1e3 * t_wait / steps,
                   1e3 * t_comm / steps);
    }
    dt_ddp_close(d);
    dt_optim_free(opt);
    dt_graph_free(g);
    return failed;
}

int main(int argc, char **argv) {
    int max_mib = argc > 1 ? atoi(argv[1]) : 256, rounds = argc > 2 ? atoi(argv[2]) : 5;
    int ddp_steps = argc > 3 ? atoi(argv[3]) : 20;
    if (max_mib < 1) max_mib = 1;
    if (rounds < 1) rounds = 1;
    dt_threads_set(1);
    dt_comm *c;
    if (dt_comm_open("mpi", &argc, &argv, &c) != DT_OK) {
        fprintf(stderr, "bench_comm: %s\n", dt_last_error());
        return 2;
    }
    int rank = dt_comm_rank(c), N = dt_comm_size(c);
    if (N < 2) {
        fprintf(stderr, "bench_comm: needs 2 or more ranks (mpirun -np 2)\n");
        dt_comm_close(c);
        return 2;
    }
    size_t max_n = (size_t)max_mib << 18;
    float *buf = malloc(max_n * sizeof(float));
    if (!buf) {
        fprintf(stderr, "bench_comm: out of memory\n");
        return 1;
    }
    /* Small values, so that repeated sums stay finite; pages touched before timing. */
    for (size_t i = 0; i < max_n; i++) buf[i] = (float)((i + (size_t)rank) % 7) * 1e-3f;
    if (rank == 0) {
        printf("all-reduce bus bandwidth, %d ranks (%s), f32 sum, median of %d rounds, GB/s\n", N,
               dt_comm_thread_level(c), rounds);
        printf("%9s %6s %18s %18s %10s %18s %10s\n", "size", "reps", VAR_NAME[RAW],
               VAR_NAME[NATIVE], "vs raw", VAR_NAME[RING], "vs raw");
    }
    double *t = malloc((size_t)rounds * N_VAR * sizeof(double)), sum_ratio[N_VAR] = {0};
    int n_sizes = 0, failed = 0;
    for (size_t mib = 1; mib <= (size_t)max_mib && !failed; mib *= 2) {
        size_t n = mib << 18, bytes = n * sizeof(float);
        /* about 0.1 s of traffic per variant and round at 5 GB/s, at least 3 calls */
        int reps = (int)(((size_t)512 << 20) / bytes);
        if (reps < 3) reps = 3;
        for (int v = 0; v < N_VAR; v++) failed |= run(c, v, buf, n); /* warm up */
        for (int r = 0; r < rounds && !failed; r++)
            for (int v = 0; v < N_VAR && !failed; v++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = bench_now();
                for (int k = 0; k < reps && !failed; k++) failed |= run(c, v, buf, n);
                MPI_Barrier(MPI_COMM_WORLD);
                t[v * rounds + r] = (bench_now() - t0) / reps;
            }
        if (failed) break;
        double bw[N_VAR];
        for (int v = 0; v < N_VAR; v++) {
            qsort(t + v * rounds, (size_t)rounds, sizeof(double), bench_cmp_double);
            double med = t[v * rounds + rounds / 2];
            bw[v] = (double)bytes * 2.0 * (N - 1) / N / med / 1e9;
            sum_ratio[v] += bw[v] / bw[RAW];
        }
        n_sizes++;
        if (rank == 0)
            printf("%5zu MiB %6d %18.2f %18.2f %9.1f%% %18.2f %9.1f%%\n", mib, reps, bw[RAW],
                   bw[NATIVE], 100.0 * bw[NATIVE] / bw[RAW], bw[RING], 100.0 * bw[RING] / bw[RAW]);
    }
    if (failed) {
        fprintf(stderr, "bench_comm: rank %d: an all-reduce failed: %s\n", rank, dt_last_error());
        dt_comm_set_failed(c);
    } else if (rank == 0 && n_sizes) {
        printf("mean over sizes: dt_comm native %.1f%% of raw MPI, ring %.1f%%\n",
               100.0 * sum_ratio[NATIVE] / n_sizes, 100.0 * sum_ratio[RING] / n_sizes);
    }
    free(t);
    free(buf);
    if (!failed && ddp_steps > 0 && bench_ddp(c, ddp_steps)) {
        fprintf(stderr, "bench_comm: rank %d: DDP step failed: %s\n", rank, dt_last_error());
        dt_comm_set_failed(c);
        failed = 1;
    }
    dt_comm_close(c);
    return failed;
}
