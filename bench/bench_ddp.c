/* Data-parallel training step of a whole model with dt_ddp, for weak scaling
 * (bench/bench_scaling.sh): run under mpirun with 1, 2, ... ranks at a fixed per-rank batch;
 * weak-scaling efficiency is step_time(1 rank) / step_time(N ranks). Measured as
 * bench/peers/bench_ddp.py measures PyTorch DDP: a barrier before and after each step, the median
 * step time on rank 0.
 *
 *   mpirun -np N bench_ddp [--model resnet18|llama56m] [--batch B] [--steps K] [--warmup W]
 *                          [--overlap 0|1] [--bucket-mb MB] [--threads T] [--broadcast-buffers 0|1]
 *                          [--sparse 0|1] [--shm 0|1] [--plain 1] [--profile 1] [--alternate 1]
 *
 * Models (the configurations of bench/bench_models.sh):
 *   resnet18  small stem, x [B, 3, 32, 32], 10 classes, SGD momentum 0.9 wd 5e-4; default B 64
 *   llama56m  dim 512, 8 layers, 8 heads, 4 KV heads, ffn 1408, vocab 32000, ids [B, 256],
 *             AdamW wd 0.1; default B 8
 * Each rank trains on its own synthetic batch (seeded by rank), made once; as in dtrain's trainer
 * the loss is scaled by 1/world and dt_ddp sums, so gradients arrive averaged. One step = forward,
 * backward (buckets all-reduce while backward runs when overlap is on), dt_ddp_wait, optimizer;
 * rank 0 also prints the median time of each phase and of the wait at the closing barrier, and
 * the compute thread's CPU time in forward and backward (fwd_cpu_ms, bwd_cpu_ms): where it equals
 * the wall time the thread ran throughout, and a slower phase executed slower (shared caches and
 * memory, or this process's draw of pages), rather than waiting.
 * Batchnorm buffers are broadcast from rank 0 before each forward, as torch DDP does by default
 * (broadcast_buffers=True); --broadcast-buffers 0 turns that off. Threads per rank: 1 unless
 * --threads says otherwise. --sparse 0 sends the embedding's gradient dense (dt_ddp_opts.sparse).
 * --shm 0: MPI_Allreduce instead of the host's shared memory (dt_ddp_opts.shm; shm=1 in the
 * output when the shared path is in use).
 * --plain 1: no dt_ddp at all. With one process, the step dtrain's trainer runs on a single
 * worker, the baseline of weak scaling (bench_ddp.py --plain is the peer's). With N processes,
 * N independent trainings kept in lockstep by the barriers around each step and exchanging
 * nothing: what N workers cost each other by sharing this machine (memory bandwidth, caches),
 * which separates that from what the gradient exchange costs (DDP at N against this).
 * --profile 1: each rank also prints, per op and pass, the wall time its entries took per
 * measured step ("profile rank=R op=conv2d pass=bwd ms=..."), sorted by time: which kernels a
 * second worker slows down.
 * --alternate 1 (DDP only): weak-scaling efficiency from paired steps, immune to the slow drifts
 * of a shared VM's speed (+-10% over minutes here) that separate runs of 1 and N ranks see.
 * Each measured step becomes a pair: a "solo" step, in which rank 0 trains a second, plain copy
 * of the model (no dt_ddp) while every other rank sleeps in the barrier, and a DDP step on every
 * rank, in alternating order; efficiency = solo / DDP step time per pair (median over pairs:
 * eff_paired=), the same definition as step_time(1 worker) / step_time(N ranks).
 * BENCH_DEBUG=1 in the environment: every rank prints every measured step's times to stderr
 * ("rank R step I ... bwd S bwd_cpu S ..."): a backward whose wall time exceeds its CPU time
 * lost the core (to the comm thread, or to the VM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "bench_util.h"

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return v[n / 2];
}

typedef struct args {
    const char *model;
    int batch, steps, warmup, overlap, threads, bcast_buffers, sparse, shm, plain, profile,
        alternate;
    double bucket_mb;
} args;

static int usage(void) {
    fprintf(stderr, "usage: bench_ddp [--model resnet18|llama56m] [--batch B] [--steps K] "
                    "[--warmup W] [--overlap 0|1] [--bucket-mb MB] [--threads T] "
                    "[--broadcast-buffers 0|1] [--sparse 0|1] [--shm 0|1] [--plain 1] "
                    "[--profile 1] [--alternate 1]\n");
    return 2;
}

/* 0 on success, 2 on a bad command line (message printed). */
static int parse(int argc, char **argv, args *a) {
    *a = (args){.model = "resnet18",
                .batch = 0,
                .steps = 6,
                .warmup = 2,
                .overlap = 1,
                .threads = 1,
                .bcast_buffers = 1,
                .sparse = 1,
                .shm = 1,
                .bucket_mb = 25.0};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(k, "--model"))
            a->model = v;
        else if (!strcmp(k, "--batch"))
            a->batch = atoi(v);
        else if (!strcmp(k, "--steps"))
            a->steps = atoi(v);
        else if (!strcmp(k, "--warmup"))
            a->warmup = atoi(v);
        else if (!strcmp(k, "--overlap"))
            a->overlap = atoi(v);
        else if (!strcmp(k, "--threads"))
            a->threads = atoi(v);
        else if (!strcmp(k, "--broadcast-buffers"))
            a->bcast_buffers = atoi(v);
        else if (!strcmp(k, "--sparse"))
            a->sparse = atoi(v);
        else if (!strcmp(k, "--shm"))
            a->shm = atoi(v);
        else if (!strcmp(k, "--plain"))
            a->plain = atoi(v);
        else if (!strcmp(k, "--profile"))
            a->profile = atoi(v);
        else if (!strcmp(k, "--alternate"))
            a->alternate = atoi(v);
        else if (!strcmp(k, "--bucket-mb"))
            a->bucket_mb = atof(v);
        else
            return usage();
        i++;
    }
    int resnet = !strcmp(a->model, "resnet18"), llama = !strcmp(a->model, "llama56m");
    if (!resnet && !llama) {
        fprintf(stderr, "bench_ddp: --model %s: expected resnet18 or llama56m\n", a->model);
        return 2;
    }
    if (a->batch <= 0) a->batch = resnet ? 64 : 8;
    if (a->steps < 1 || a->warmup < 0 || a->threads < 1 || !(a->bucket_mb > 0) ||
        (a->alternate && a->plain))
        return usage();
    return 0;
}

typedef struct run {
    dt_graph *g;
    dt_optim *opt;
    float *p, *gr;
    size_t n;
    double items; /* images or tokens per rank and step */
    const char *unit;
    char desc[160];
} run;

enum { LLAMA_SEQ = 256, LLAMA_VOCAB = 32000 };

/* Builds and compiles the model with this rank's batch in its inputs and initialised weights
 * (the same on every rank; rank 0's are broadcast anyway). */
static int build(const args *a, int rank, run *r) {
    r->g = dt_graph_init();
    if (!r->g) return -1;
    int B = a->batch, loss;
    dt_optim_config oc;
    if (!strcmp(a->model, "resnet18")) {
        int x = dt_graph_input(r->g, "x", DT_F32, 4, (int64_t[]){B, 3, 32, 32}, 0);
        int y = dt_graph_input(r->g, "y", DT_I64, 1, (int64_t[]){B}, 0);
        dt_resnet_config c = {
            .depth = 18, .in_channels = 3, .num_classes = 10, .small_stem = 1, .width = 64};
        loss = dt_cross_entropy(r->g, dt_resnet_build(r->g, &c, x), y, 0.0f, -100);
        if (loss < 0 || dt_graph_compile(r->g, loss, NULL) != DT_OK) return -1;
        if (dt_resnet_init(r->g, 0) != DT_OK) return -1;
        const dt_tensor *xv = dt_graph_value(r->g, x);
        dt_rng_normal(xv->data, dt_tensor_numel(xv), 1000 + (uint64_t)rank, 0, 0, 0.0f, 1.0f);
        int64_t *yv = dt_graph_value(r->g, y)->data;
        for (int i = 0; i < B; i++) yv[i] = (i * 7 + rank * 3) % 10;
        oc = dt_optim_config_default(DT_OPTIM_SGD);
        oc.momentum = 0.9, oc.weight_decay = 5e-4;
        r->items = B, r->unit = "img";
        snprintf(r->desc, sizeof r->desc, "resnet18 small-stem 3x32x32 SGD");
    } else {
        dt_llama_config c = {.hidden_size = 512,
                             .num_hidden_layers = 8,
                             .num_attention_heads = 8,
                             .num_key_value_heads = 4,
                             .intermediate_size = 1408,
                             .vocab_size = LLAMA_VOCAB,
                             .head_dim = 64,
                             .max_position_embeddings = LLAMA_SEQ,
                             .rms_norm_eps = 1e-5f,
                             .rope_theta = 10000.0f};
        int64_t nt = (int64_t)B * LLAMA_SEQ;
        int ids = dt_graph_input(r->g, "ids", DT_I64, 2, (int64_t[]){B, LLAMA_SEQ}, 0);
        int tg = dt_graph_input(r->g, "targets", DT_I64, 1, (int64_t[]){nt}, 0);
        int logits = dt_llama_build(r->g, &c, ids);
        int flat = dt_reshape(r->g, logits, 2, (int64_t[]){nt, LLAMA_VOCAB});
        loss = dt_cross_entropy(r->g, flat, tg, 0.0f, -100);
        if (loss < 0 || dt_graph_compile(r->g, loss, NULL) != DT_OK) return -1;
        if (dt_llama_init(r->g, 0) != DT_OK) return -1;
        int64_t *iv = dt_graph_value(r->g, ids)->data, *tv = dt_graph_value(r->g, tg)->data;
        uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
        for (int64_t i = 0; i < nt; i++) { /* xorshift64: a different stream per rank */
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            iv[i] = (int64_t)(s % LLAMA_VOCAB);
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            tv[i] = (int64_t)(s % LLAMA_VOCAB);
        }
        oc = dt_optim_config_default(DT_OPTIM_ADAMW);
        oc.weight_decay = 0.1;
        r->items = (double)nt, r->unit = "tok";
        snprintf(r->desc, sizeof r->desc, "llama56m dim512 L8 H8 KV4 ffn1408 V32000 seq%d AdamW",
                 LLAMA_SEQ);
    }
    r->p = dt_graph_flat_param(r->g, &r->n);
    r->gr = dt_graph_flat_grad(r->g, NULL);
    /* the peers decay every parameter: one group */
    return dt_optim_init(&oc, r->n, 0, r->n, NULL, 0, &r->opt) == DT_OK ? 0 : -1;
}

/* --profile: wall time per schedule entry, summed over the measured steps. */
typedef struct prof {
    dt_graph *g;
    double *sum, t0;
    int on;
} prof;

static dt_status prof_entry(void *ud, int k, int after) {
    prof *p = ud;
    if (!after)
        p->t0 = bench_now();
    else if (p->on)
        p->sum[k] += bench_now() - p->t0;
    return DT_OK;
}

typedef struct prof_row {
    const char *op;
    int pass;
    double s;
} prof_row;

static int prof_cmp(const void *a, const void *b) {
    double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* One line per (op, pass) in decreasing time, ms per step; then the total. */
static void prof_print(const prof *p, int rank, int steps) {
    int n = dt_graph_entry_count(p->g, NULL), m = 0;
    prof_row *rows = calloc((size_t)n + 1, sizeof *rows);
    if (!rows) return;
    double total = 0;
    for (int k = 0; k < n; k++) {
        int pass = 0;
        const char *op = dt_graph_entry_op(p->g, k, &pass);
        int j = 0;
        while (j < m && !(rows[j].pass == pass && !strcmp(rows[j].op, op))) j++;
        if (j == m) rows[m++] = (prof_row){op, pass, 0};
        rows[j].s += p->sum[k];
        total += p->sum[k];
    }
    qsort(rows, (size_t)m, sizeof *rows, prof_cmp);
    static const char *pass_name[] = {"fwd", "bwd", "recomp"};
    for (int j = 0; j < m; j++)
        printf("profile rank=%d op=%s pass=%s ms=%.2f\n", rank, rows[j].op,
               pass_name[rows[j].pass < 3 ? rows[j].pass : 0], 1e3 * rows[j].s / steps);
    printf("profile rank=%d op=all pass=all ms=%.2f\n", rank, 1e3 * total / steps);
    fflush(stdout);
    free(rows);
}

/* Phase times of one step (seconds): where a 2-rank step spends what a 1-rank one does not. */
enum { PH_FWD, PH_BWD, PH_WAIT, PH_OPT, PH_BAR, PH_FWD_CPU, PH_BWD_CPU, PH_N };

static int step(run *r, dt_ddp *d, int bcast, double ph[PH_N]);

/* --alternate: rank 0 trains the plain copy s alone, the others wait in the barriers (which
 * sleep: dt_comm_barrier); *t = rank 0's step time, measured as a DDP step is. */
static int solo_step(run *s, dt_comm *c, double *t) {
    double ph[PH_N];
    if (dt_comm_barrier(c) != DT_OK) return -1;
    double t0 = bench_now();
    if (s->g && step(s, NULL, 0, ph)) return -1;
    if (dt_comm_barrier(c) != DT_OK) return -1;
    *t = bench_now() - t0;
    return 0;
}

static int step(run *r, dt_ddp *d, int bcast, double ph[PH_N]) {
    double t0 = bench_now(), c0 = bench_thread_cpu();
    if (d && bcast && dt_ddp_broadcast_state(d) != DT_OK) return -1;
    if (dt_graph_forward(r->g, 1) != DT_OK) return -1;
    double t1 = bench_now(), c1 = bench_thread_cpu();
    if (dt_graph_backward(r->g) != DT_OK) return -1;
    double t2 = bench_now(), c2 = bench_thread_cpu();
    /* CPU time of this (the compute) thread: wall time above it is time the thread did not run */
    ph[PH_FWD_CPU] = c1 - c0, ph[PH_BWD_CPU] = c2 - c1;
    if (d && dt_ddp_wait(d) != DT_OK) return -1;
    double t3 = bench_now();
    if (dt_optim_step(r->opt, r->p, r->gr, 1e-3f) != DT_OK) return -1;
    ph[PH_FWD] = t1 - t0, ph[PH_BWD] = t2 - t1, ph[PH_WAIT] = t3 - t2;
    ph[PH_OPT] = bench_now() - t3;
    return 0;
}

int main(int argc, char **argv) {
    dt_comm *c = NULL;
    if (dt_comm_open("auto", &argc, &argv, &c) != DT_OK) {
        fprintf(stderr, "bench_ddp: %s\n", dt_last_error());
        return 2;
    }
    args a;
    int rc = parse(argc, argv, &a);
    if (rc) {
        dt_comm_close(c);
        return rc;
    }
    dt_threads_set(a.threads);
    int rank = dt_comm_rank(c), world = dt_comm_size(c);
    run r = {0}, solo = {0};
    prof pr = {0};
    dt_ddp *d = NULL;
    /* per step: total, ddp wait, comm-thread time and CPU time, then PH_N phase times, then
     * (--alternate) the solo step and the solo / DDP ratio */
    double *ts = calloc((size_t)a.steps * (6 + PH_N), sizeof *ts), *wait = ts + a.steps,
           *comm = ts + 2 * a.steps, *comm_cpu = ts + 3 * a.steps, *phase = ts + 4 * a.steps,
           *ts_solo = phase + PH_N * a.steps, *eff = ts_solo + a.steps;
    double ph[PH_N], sent_mib = 0;
    const char *what = "build";
    if (!ts || build(&a, rank, &r)) goto fail;
    dt_ddp_opts o = dt_ddp_opts_default();
    o.bucket_mb = a.bucket_mb, o.overlap = a.overlap, o.sparse = a.sparse, o.shm = a.shm;
    /* as dtrain's trainer: the loss scaled by 1/world and the gradients summed (the mean) */
    o.average = 0;
    if (!a.plain) dt_graph_set_loss_scale(r.g, 1.0f / (float)world);
    what = "ddp init";
    if (!a.plain && (dt_ddp_open(r.g, c, &o, &d) != DT_OK || dt_ddp_broadcast_params(d) != DT_OK))
        goto fail;
    int bcast = a.bcast_buffers && dt_graph_flat_state(r.g, NULL) != NULL;
    what = "build (solo copy)";
    if (a.alternate && rank == 0 && build(&a, rank, &solo)) goto fail;
    pr.g = r.g;
    if (a.profile) {
        what = "profile";
        if (!(pr.sum = calloc((size_t)dt_graph_entry_count(r.g, NULL) + 1, sizeof *pr.sum)))
            goto fail;
        dt_graph_on_entry(r.g, prof_entry, &pr);
    }

    what = "warm-up step";
    double t0 = bench_now();
    for (int i = 0; i < a.warmup; i++)
        if (step(&r, d, bcast, ph) || (solo.g && step(&solo, NULL, 0, ph))) goto fail;
    double tw = bench_now() - t0;
    what = "step";
    pr.on = 1;
    for (int i = 0; i < a.steps; i++) {
        /* --alternate: the solo step first in even pairs, second in odd ones */
        if (a.alternate && !(i & 1) && solo_step(&solo, c, ts_solo + i)) goto fail;
        if (dt_comm_barrier(c) != DT_OK) goto fail;
        double t = bench_now();
        if (step(&r, d, bcast, ph)) goto fail;
        double tb = bench_now();
        if (dt_comm_barrier(c) != DT_OK) goto fail;
        ts[i] = bench_now() - t;
        ph[PH_BAR] = ts[i] - (tb - t); /* waiting for the slower rank at the end of the step */
        for (int k = 0; k < PH_N; k++) phase[k * a.steps + i] = ph[k];
        dt_ddp_stats st;
        dt_ddp_get_stats(d, &st); /* zeros without d */
        wait[i] = st.wait_s, comm[i] = st.comm_s, comm_cpu[i] = st.comm_cpu_s;
        sent_mib = (double)st.sent_bytes / 1048576.0;
        if (a.alternate && (i & 1) && solo_step(&solo, c, ts_solo + i)) goto fail;
        if (a.alternate) eff[i] = ts_solo[i] / ts[i];
        if (getenv("BENCH_DEBUG")) /* every step of every rank */
            fprintf(stderr,
                    "rank %d step %d solo %.4f step %.4f fwd %.4f bwd %.4f bwd_cpu %.4f wait %.4f "
                    "comm %.4f comm_cpu %.4f barrier %.4f\n",
                    rank, i, a.alternate ? ts_solo[i] : 0.0, ts[i], ph[PH_FWD], ph[PH_BWD],
                    ph[PH_BWD_CPU], wait[i], comm[i], comm_cpu[i], ph[PH_BAR]);
    }
    double anon_mib, thp_mib;
    bench_anon_mib(&anon_mib, &thp_mib);
    dt_ddp_stats fin;
    dt_ddp_get_stats(d, &fin);
    int shared = fin.shared;
    if (rank == 0) {
        double med = median(ts, a.steps), mn = ts[0];
        printf(
            "dtrain %s %s world=%d threads/rank=%d batch/rank=%d overlap=%d bucket_mb=%g "
            "buckets=%d grad_MiB=%.1f steps=%d warmup_s=%.2f median_step_s=%.4f "
            "min_step_s=%.4f total_%s_per_s=%.1f per_rank_%s_per_s=%.1f ddp_wait_ms=%.1f "
            "ddp_comm_ms=%.1f comm_cpu_ms=%.1f mpi_thread=%s fwd_ms=%.1f bwd_ms=%.1f wait_ms=%.1f "
            "opt_ms=%.1f "
            "barrier_ms=%.1f fwd_cpu_ms=%.1f bwd_cpu_ms=%.1f sparse=%d sent_MiB=%.1f anon_MiB=%.0f "
            "thp_MiB=%.0f shm=%d",
            a.plain ? "plain" : "DDP", r.desc, world, a.threads, a.batch, a.overlap, a.bucket_mb,
            dt_ddp_bucket_count(d), (double)r.n * 4 / 1048576.0, a.steps, tw, med, mn, r.unit,
            world * r.items / med, r.unit, r.items / med, 1e3 * median(wait, a.steps),
            1e3 * median(comm, a.steps), 1e3 * median(comm_cpu, a.steps), dt_comm_thread_level(c),
            1e3 * median(phase, a.steps), 1e3 * median(phase + a.steps, a.steps),
            1e3 * median(phase + 2 * a.steps, a.steps), 1e3 * median(phase + 3 * a.steps, a.steps),
            1e3 * median(phase + 4 * a.steps, a.steps), 1e3 * median(phase + 5 * a.steps, a.steps),
            1e3 * median(phase + 6 * a.steps, a.steps), a.sparse, sent_mib, anon_mib, thp_mib,
            shared);
        if (a.alternate) { /* the pairs in order first: median() sorts */
            printf(" eff_pairs=");
            for (int i = 0; i < a.steps; i++) printf("%s%.3f", i ? "," : "", eff[i]);
            printf(" solo_step_s=%.4f eff_paired=%.4f", median(ts_solo, a.steps),
                   median(eff, a.steps));
        }
        printf("\n");
        fflush(stdout);
    }
    /* ranks in turn, so their lines do not interleave */
    for (int q = 0; a.profile && q < world; q++) {
        if (q == rank) prof_print(&pr, rank, a.steps);
        if (dt_comm_barrier(c) != DT_OK) goto fail;
    }
    free(pr.sum);
    dt_optim_free(solo.opt);
    dt_graph_free(solo.g);
    dt_ddp_close(d);
    dt_optim_free(r.opt);
    dt_graph_free(r.g);
    free(ts);
    dt_comm_close(c);
    return 0;

fail:
    fprintf(stderr, "bench_ddp: rank %d of %d: %s failed: %s\n", rank, world, what,
            dt_last_error());
    dt_comm_set_failed(c);
    free(pr.sum);
    dt_optim_free(solo.opt);
    dt_graph_free(solo.g);
    dt_ddp_close(d);
    dt_optim_free(r.opt);
    dt_graph_free(r.g);
    free(ts);
    dt_comm_close(c);
    return 1;
}
