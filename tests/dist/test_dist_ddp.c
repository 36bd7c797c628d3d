/* Data-parallel training under mpirun with N ranks. Usage: test_dist_ddp N [--die-at STEP]
 *
 * Every run trains 10 steps from the same initial weights -- each rank initialises with its own
 * seed and dt_ddp_broadcast_params must replace them with rank 0's -- on a global batch of N * b
 * rows of which rank r takes rows [r b, (r + 1) b). Checked:
 *   (b) an MLP (SGD with momentum and AdamW with clipping) and a small Llama (SGD, AdamW) on N
 *       ranks end with parameters equal, within the tolerances below, to one process training on
 *       the whole batch of N * b (computed by every rank with the single-process communicator);
 *       every rank holds the same bits; our ring all-reduce gives the same within tolerance;
 *   (c) overlap off gives the same bits as overlap on;
 *   (d) a repeat run in the same process gives the same bits (run to run across processes:
 *       run_twice.sh compares the "params-hash" lines rank 0 prints);
 *   (e) 2 accumulation micro-steps of b rows with communication on the last only equal one step
 *       of 2 b rows (within tolerance: the same sums in another order);
 *   (h) the host's ranks all-reduce through shared memory by default (dt_comm_share): the same
 *       bits as MPI_Allreduce on 2 ranks, within tolerance on more (DT_COMM_NODE_SIZE=2 on 4
 *       ranks: two "hosts" of 2, the hierarchical path);
 *   (g) the Llama's embedding gradient sends only the rows some rank looked up (dt_ddp_opts.sparse,
 *       on in every run above): fewer bytes, and the same parameters as sending it dense;
 *   (i) a sharded frozen embedding is gathered by the rows the ranks look up (frozen_rows);
 *   the bucket table tiles the flat buffer in reverse parameter order; wait statistics count;
 *   dt_ddp_broadcast_state / _params give every rank rank 0's state buffers / parameters.
 * --die-at S: the last rank kills itself (SIGKILL) at step S; the others must not hang (the
 * test driver expect_fail.sh checks that mpirun fails within a time limit).
 *
 * Tolerances (f32; the sums over the batch and over ranks are grouped differently, and 10 steps
 * amplify the rounding): |ddp - single| <= ATOL + RTOL * |single| for every element, except
 * AdamW: there a few elements (measured: up to 50 of 22688 in the Llama, 3 ranks) whose gradient
 * is mathematically ~0 (e.g. attention keys seen by a single query) carry pure rounding noise,
 * and Adam's normalisation m / sqrt(v) turns noise of either sign into steps of up to lr: so for
 * AdamW at most ADAM_MAX_OUTSIDE of the elements may leave the tight tolerance, and none may be
 * off by more than ADAM_LOOSE (a tenth of one lr step; a bucket left unreduced moves parameters
 * by O(lr) per step). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dist.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/runtime.h"
#include "harness.h"

#define SGD_ATOL 2e-6
#define SGD_RTOL 1e-5
#define ADAM_ATOL 2e-5
#define ADAM_RTOL 1e-4
#define ADAM_LOOSE 1e-3        /* lr 0.01 */
#define ADAM_MAX_OUTSIDE 0.005 /* fraction of elements */

enum { MLP = 0, LLAMA = 1 };
enum { D_IN = 16, D_H = 32, D_OUT = 10, SEQ = 8, VOCAB = 64, STEPS = 10 };

static int R, N;

static dt_llama_config llama_cfg(void) {
    dt_llama_config c = {.vocab_size = VOCAB,
                         .hidden_size = 32,
                         .intermediate_size = 64,
                         .num_hidden_layers = 2,
                         .num_attention_heads = 4,
                         .num_key_value_heads = 2,
                         .head_dim = 8,
                         .max_position_embeddings = 64,
                         .rms_norm_eps = 1e-5f,
                         .rope_theta = 10000.0f,
                         .bos_token_id = 1};
    return c;
}

typedef struct model {
    dt_graph *g;
    int kind, batch, x, y, loss;
} model;

static int model_build(model *m, int kind, int batch) {
    memset(m, 0, sizeof *m);
    m->kind = kind, m->batch = batch;
    dt_graph *g = m->g = dt_graph_init();
    int logits;
    if (kind == MLP) {
        m->x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){batch, D_IN}, 0);
        m->y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){batch}, 0);
        int w1 = dt_graph_param(g, "fc1.weight", DT_F32, 2, (int64_t[]){D_H, D_IN}, 0);
        int b1 = dt_graph_param(g, "fc1.bias", DT_F32, 1, (int64_t[]){D_H}, DT_PARAM_NO_DECAY);
        int w2 = dt_graph_param(g, "fc2.weight", DT_F32, 2, (int64_t[]){D_H, D_H}, 0);
        int b2 = dt_graph_param(g, "fc2.bias", DT_F32, 1, (int64_t[]){D_H}, DT_PARAM_NO_DECAY);
        int w3 = dt_graph_param(g, "fc3.weight", DT_F32, 2, (int64_t[]){D_OUT, D_H}, 0);
        int b3 = dt_graph_param(g, "fc3.bias", DT_F32, 1, (int64_t[]){D_OUT}, DT_PARAM_NO_DECAY);
        int h = dt_gelu(g, dt_linear(g, m->x, w1, b1), 0);
        h = dt_relu(g, dt_linear(g, h, w2, b2));
        logits = dt_linear(g, h, w3, b3);
    } else {
        dt_llama_config c = llama_cfg();
        m->x = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){batch, SEQ}, 0);
        m->y = dt_graph_input(g, "targets", DT_I32, 2, (int64_t[]){batch, SEQ}, 0);
        logits = dt_llama_build(g, &c, m->x);
    }
    m->loss = dt_cross_entropy(g, logits, m->y, 0.0f, DT_IGNORE_INDEX_DEFAULT);
    if (!CHECK(m->loss >= 0, "building model %d: %s", kind, dt_last_error())) return -1;
    dt_status s = dt_graph_compile(g, m->loss, NULL);
    return CHECK(s == DT_OK, "compile: %s", dt_last_error()) ? 0 : -1;
}

static dt_status model_init(model *m, uint64_t seed) {
    if (m->kind == LLAMA) return dt_llama_init(m->g, seed);
    for (int i = 0; i < dt_graph_param_count(m->g); i++)
        dt_test_randn(m->g, dt_graph_param_info(m->g, i)->id, seed * 16 + (uint64_t)i, 0.3f);
    return DT_OK;
}

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Rows [row0, row0 + batch) of step s's global batch; a row depends only on (s, row). */
static void model_set_batch(model *m, int s, int row0) {
    int32_t *y = dt_graph_value(m->g, m->y)->data;
    for (int i = 0; i < m->batch; i++) {
        uint64_t key = (uint64_t)s << 32 | (uint64_t)(row0 + i);
        if (m->kind == MLP) {
            float *x = (float *)dt_graph_value(m->g, m->x)->data + (size_t)i * D_IN;
            dt_randn(x, D_IN, mix(key), 1.0f);
            y[i] = (int32_t)(mix(key ^ 0x5a5a) % D_OUT);
        } else {
            int32_t *ids = (int32_t *)dt_graph_value(m->g, m->x)->data + (size_t)i * SEQ;
            for (int t = 0; t < SEQ; t++) {
                ids[t] = (int32_t)(mix(key * 131 + (uint64_t)t) % VOCAB);
                y[i * SEQ + t] = (int32_t)(mix(key * 131 + (uint64_t)t + 1) % VOCAB);
            }
        }
    }
}

typedef struct run_cfg {
    int kind, adamw, batch, accum, overlap, dense; /* dense: dt_ddp_opts.sparse = 0 */
    int prescale; /* the loss scaled by 1/N and the gradients summed (as the trainer), not
                   * averaged after the all-reduce */
    int mpi_only; /* dt_ddp_opts.shm = 0: MPI_Allreduce, not the host's shared memory */
    dt_comm_algo algo;
    double bucket_mb;
    float clip;
    int die_at;
} run_cfg;

typedef struct run_out {
    float *p; /* final flat parameters */
    size_t n;
    int n_buckets;
    dt_ddp_stats stats;
} run_out;

/* Trains STEPS steps on communicator c with per-rank micro-batch rc->batch. */
static run_out train(dt_comm *c, const run_cfg *rc) {
    run_out o = {0};
    int r = dt_comm_rank(c), nr = dt_comm_size(c);
    model m;
    if (model_build(&m, rc->kind, rc->batch)) return o;
    CHECK_OK(model_init(&m, 42 + (uint64_t)r)); /* rank 0's weights must win */
    CHECK_OK(dt_comm_set_algo(c, rc->algo));
    dt_ddp_opts dopt = {.bucket_mb = rc->bucket_mb,
                        .overlap = rc->overlap,
                        .average = !rc->prescale,
                        .sparse = !rc->dense,
                        .shm = !rc->mpi_only};
    dt_ddp *d = NULL;
    CHECK_OK(dt_ddp_open(m.g, c, &dopt, &d));
    if (!d) return o;
    CHECK_OK(dt_ddp_broadcast_params(d));
    size_t n;
    float *p = dt_graph_flat_param(m.g, &n), *gr = dt_graph_flat_grad(m.g, NULL);
    int cap = dt_graph_param_count(m.g), ng = 0;
    dt_optim_group *groups = malloc((size_t)cap * sizeof *groups);
    CHECK_OK(dt_optim_groups_from_graph(m.g, groups, cap, &ng));
    dt_optim_config oc = dt_optim_config_default(rc->adamw ? DT_OPTIM_ADAMW : DT_OPTIM_SGD);
    if (!rc->adamw) oc.momentum = 0.9, oc.weight_decay = 1e-4;
    float lr = rc->adamw ? 0.01f : 0.1f;
    dt_optim *opt = NULL;
    CHECK_OK(dt_optim_init(&oc, n, 0, n, groups, ng, &opt));
    for (int s = 0; opt && s < STEPS; s++) {
        dt_graph_set_loss_scale(m.g, 1.0f / (float)(rc->accum * (rc->prescale ? nr : 1)));
        for (int k = 0; k < rc->accum; k++) {
            model_set_batch(&m, s, (r * rc->accum + k) * rc->batch);
            dt_graph_set_accumulate(m.g, k > 0);
            dt_ddp_set_enabled(d, k == rc->accum - 1);
            if (s == rc->die_at && r == nr - 1 && nr > 1) {
                printf("rank %d: dying at step %d (test)\n", r, s);
                fflush(stdout);
                raise(SIGKILL);
            }
            CHECK_OK(dt_graph_forward(m.g, 1));
            CHECK_OK(dt_graph_backward(m.g));
            CHECK_OK(dt_ddp_wait(d));
        }
        if (rc->clip > 0) dt_grad_clip_norm(gr, n, rc->clip);
        CHECK_OK(dt_optim_step(opt, p, gr, lr));
    }
    /* The bucket table: contiguous, reverse order, tiling [0, n). */
    o.n_buckets = dt_ddp_bucket_count(d);
    size_t top = n;
    for (int k = 0; k < o.n_buckets; k++) {
        size_t lo, hi;
        dt_ddp_bucket_range(d, k, &lo, &hi);
        CHECK(hi == top && lo < hi, "bucket %d [%zu, %zu) after %zu", k, lo, hi, top);
        top = lo;
    }
    CHECK(top == 0, "buckets end at %zu, not 0", top);
    dt_ddp_get_stats(d, &o.stats);
    o.p = malloc(n * sizeof(float));
    memcpy(o.p, p, n * sizeof(float));
    o.n = n;
    dt_optim_free(opt);
    free(groups);
    dt_ddp_close(d);
    dt_graph_free(m.g);
    return o;
}

static uint64_t hash_params(const float *p, size_t n) { /* FNV-1a over the bytes */
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Every rank holds rank 0's bits. */
static void check_same_everywhere(dt_comm *c, const run_out *o, const char *what) {
    float *q = malloc(o->n * sizeof(float));
    memcpy(q, o->p, o->n * sizeof(float));
    CHECK_OK(dt_comm_broadcast(c, q, o->n * sizeof(float), 0));
    double differ = memcmp(q, o->p, o->n * sizeof(float)) != 0;
    CHECK_OK(dt_comm_allreduce_f64(c, &differ, 1));
    CHECK(differ == 0, "%s: %g ranks hold parameters different from rank 0's", what, differ);
    free(q);
}

static void compare(const char *what, const run_out *a, const run_out *b, int adamw) {
    double atol = adamw ? ADAM_ATOL : SGD_ATOL, rtol = adamw ? ADAM_RTOL : SGD_RTOL;
    if (!CHECK(a->p && b->p && a->n == b->n, "%s: runs failed", what)) return;
    double worst_abs = 0, worst_ratio = 0;
    size_t outside = 0;
    for (size_t i = 0; i < a->n; i++) {
        double e = fabs((double)a->p[i] - b->p[i]), lim = atol + rtol * fabs(b->p[i]);
        if (e > worst_abs) worst_abs = e;
        if (e / lim > worst_ratio) worst_ratio = e / lim;
        outside += e > lim;
    }
    if (R == 0)
        printf("  %-44s max |diff| %.3g, %.2f of tolerance, %zu of %zu outside\n", what, worst_abs,
               worst_ratio, outside, a->n);
    if (!adamw) {
        dt_check_close(what, a->p, b->p, (int64_t)a->n, atol, rtol);
        return;
    }
    CHECK((double)outside <= ADAM_MAX_OUTSIDE * (double)a->n,
          "%s: %zu of %zu elements outside atol %g rtol %g", what, outside, a->n, atol, rtol);
    CHECK(worst_abs <= ADAM_LOOSE, "%s: max |diff| %.3g > %g", what, worst_abs, ADAM_LOOSE);
}

static void same_bits(const char *what, const run_out *a, const run_out *b) {
    CHECK(a->p && b->p && a->n == b->n && !memcmp(a->p, b->p, a->n * sizeof(float)),
          "%s: not bit-identical", what);
}

static void free_out(run_out *o) {
    free(o->p), o->p = NULL;
}

/* N ranks with batch b vs one process with batch N * b; overlap off; repeat; ring. */
static void equivalence(dt_comm *c, dt_comm *single, run_cfg rc, const char *name) {
    char what[128];
    run_out dist = train(c, &rc);
    run_cfg one = rc;
    one.batch = rc.batch * N;
    run_out ref = train(single, &one);
    snprintf(what, sizeof what, "%s: %d ranks x %d vs 1 x %d", name, N, rc.batch, one.batch);
    compare(what, &dist, &ref, rc.adamw);
    snprintf(what, sizeof what, "%s (native)", name);
    check_same_everywhere(c, &dist, what);
    if (R == 0)
        printf("  params-hash %s np%d %016llx  (%d buckets, wait %.3g ms/step)\n", name, N,
               (unsigned long long)hash_params(dist.p, dist.n), dist.n_buckets,
               1e3 * dist.stats.wait_total_s / (double)(dist.stats.steps ? dist.stats.steps : 1));
    CHECK(dist.stats.steps == STEPS, "%s: %lld communicating steps", name,
          (long long)dist.stats.steps);
    /* one thread's CPU time cannot exceed its wall time (1 ms for the clocks' granularity) */
    CHECK(dist.stats.comm_cpu_s >= 0 && dist.stats.comm_cpu_s <= dist.stats.comm_s + 1e-3,
          "%s: comm thread CPU %.6f s in %.6f s of collectives", name, dist.stats.comm_cpu_s,
          dist.stats.comm_s);
    CHECK(dist.stats.comm_cpu_total_s >= dist.stats.comm_cpu_s &&
              dist.stats.comm_cpu_total_s <= dist.stats.comm_total_s + STEPS * 1e-3,
          "%s: comm thread CPU %.6f s in all, %.6f s of collectives", name,
          dist.stats.comm_cpu_total_s, dist.stats.comm_total_s);

    run_cfg off = rc;
    off.overlap = 0;
    run_out o2 = train(c, &off);
    snprintf(what, sizeof what, "%s: overlap off vs on", name);
    same_bits(what, &o2, &dist);
    run_out o3 = train(c, &rc);
    snprintf(what, sizeof what, "%s: repeat run", name);
    same_bits(what, &o3, &dist);

    run_cfg ring = rc;
    ring.algo = DT_COMM_ALGO_RING;
    run_out o4 = train(c, &ring);
    snprintf(what, sizeof what, "%s: ring, %d ranks vs 1", name, N);
    compare(what, &o4, &ref, rc.adamw);
    snprintf(what, sizeof what, "%s (ring)", name);
    check_same_everywhere(c, &o4, what);

    /* Shared memory (the default on one host) vs MPI_Allreduce: each element is a + b either
     * way with 2 ranks; with more, sums in local rank order vs MPI's grouping. */
    run_cfg mpi = rc;
    mpi.mpi_only = 1;
    run_out o5 = train(c, &mpi);
    int want_shared =
        N > 1 && !(getenv("DT_COMM_NODE_SIZE") && atoi(getenv("DT_COMM_NODE_SIZE")) == 1);
    CHECK(dist.stats.shared == want_shared && !o5.stats.shared && !o4.stats.shared,
          "%s: shared memory used %d (expected %d), with shm off %d, with the ring %d", name,
          dist.stats.shared, want_shared, o5.stats.shared, o4.stats.shared);
    snprintf(what, sizeof what, "%s: shared memory vs MPI_Allreduce", name);
    if (N <= 2)
        same_bits(what, &dist, &o5);
    else
        compare(what, &dist, &o5, rc.adamw);
    free_out(&dist), free_out(&ref), free_out(&o2), free_out(&o3), free_out(&o4), free_out(&o5);
}

/* The Llama's embedding table (64 rows, alone in its bucket) sends only the rows some rank
 * looked up (at most 8 per rank and step): fewer bytes than the gradient, the same parameters
 * as the dense all-reduce -- bit for bit on 2 ranks, where each element is a + b either way;
 * within fp32 rounding on more, where MPI may group a longer message's sums differently. */
static void sparse_rows(dt_comm *c, run_cfg rc, const char *name) {
    char what[128];
    run_out sp = train(c, &rc);
    run_cfg dn = rc;
    dn.dense = 1;
    run_out de = train(c, &dn);
    CHECK(de.stats.sent_bytes == de.stats.bytes_per_step, "%s dense: sent %zu of %zu B", name,
          de.stats.sent_bytes, de.stats.bytes_per_step);
    size_t table = (size_t)VOCAB * llama_cfg().hidden_size * sizeof(float);
    if (N > 1)
        CHECK(sp.stats.sent_bytes + table / 2 <= sp.stats.bytes_per_step,
              "%s sparse: sent %zu of %zu B (table %zu B)", name, sp.stats.sent_bytes,
              sp.stats.bytes_per_step, table);
    else
        CHECK(sp.stats.sent_bytes == sp.stats.bytes_per_step, "%s: 1 rank sent %zu of %zu B", name,
              sp.stats.sent_bytes, sp.stats.bytes_per_step);
    snprintf(what, sizeof what, "%s: sparse vs dense embedding rows", name);
    if (N <= 2)
        same_bits(what, &sp, &de);
    else
        compare(what, &sp, &de, rc.adamw);
    if (R == 0)
        printf("  %s: embedding rows sent %zu of %zu gradient bytes in the last step\n", name,
               sp.stats.sent_bytes, sp.stats.bytes_per_step);
    free_out(&sp), free_out(&de);
}

/* Gradients divided by N through the loss and summed vs summed and then divided: the same bits
 * when N is a power of two (scaling by 2^-k is exact in every op of backward, barring
 * underflow), within fp32 rounding otherwise. */
static void prescaled(dt_comm *c, run_cfg rc, const char *name) {
    char what[128];
    run_out avg = train(c, &rc);
    rc.prescale = 1;
    run_out pre = train(c, &rc);
    snprintf(what, sizeof what, "%s: loss scaled by 1/N and summed vs averaged", name);
    if ((N & (N - 1)) == 0)
        same_bits(what, &pre, &avg);
    else
        compare(what, &pre, &avg, rc.adamw);
    check_same_everywhere(c, &pre, what);
    free_out(&avg), free_out(&pre);
}

/* 2 micro-steps of b rows (communicating on the last) vs 1 step of 2 b rows, both on N ranks. */
static void accumulation(dt_comm *c, run_cfg rc) {
    rc.accum = 2;
    run_out acc = train(c, &rc);
    run_cfg whole = rc;
    whole.accum = 1, whole.batch = 2 * rc.batch;
    run_out one = train(c, &whole);
    CHECK(acc.stats.steps == STEPS, "accumulation: %lld communicating waits, expected %d",
          (long long)acc.stats.steps, STEPS);
    compare("accumulation: 2 x b (comm on last) vs 1 x 2b", &acc, &one, rc.adamw);
    check_same_everywhere(c, &acc, "accumulation");
    free_out(&acc), free_out(&one);
}

/* State buffers (batchnorm running statistics) and parameters from rank 0. */
static void broadcast_state(dt_comm *c) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){2, 3}, 0);
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){4, 3}, 0);
    int st = dt_graph_param(g, "bn.running_mean", DT_F32, 1, (int64_t[]){5}, DT_PARAM_STATE);
    int r;
    CHECK(st >= 0, "state param: %s", dt_last_error());
    CHECK_OK(dt_graph_compile(g, dt_test_dotloss(g, dt_linear(g, x, w, -1), &r), NULL));
    dt_ddp *d = NULL;
    CHECK_OK(dt_ddp_open(g, c, NULL, &d));
    size_t n, ns;
    float *p = dt_graph_flat_param(g, &n), *s = dt_graph_flat_state(g, &ns);
    if (!d || !CHECK(ns == 5 && n == 12, "flat sizes %zu, %zu", n, ns)) return;
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++) p[i] = (float)(R * 100 + (int)i);
        for (size_t i = 0; i < ns; i++) s[i] = (float)(R * 1000 + (int)i);
        CHECK_OK(round ? dt_ddp_broadcast_params(d) : dt_ddp_broadcast_state(d));
        int bad = 0;
        for (size_t i = 0; i < ns; i++) bad += s[i] != (float)i;
        for (size_t i = 0; i < n; i++) bad += p[i] != (float)((round ? 0 : R * 100) + (int)i);
        CHECK(bad == 0, "broadcast_%s: %d wrong", round ? "params" : "state", bad);
    }
    dt_ddp_close(d);
    dt_graph_free(g);
}

/* (i) A sharded frozen bf16 table [V, 8] (dt_ddp_opts.shard_frozen) read only by a lookup of
 * input ids is gathered by the rows some rank looks up: the loss and the trainable gradient
 * are the bits of the unsharded run, and the frozen bytes gathered are the union's rows times
 * the passes that read the table -- or, with more than half the table in the union (V = 40),
 * the whole table. Rank r looks up ids (7 r + 13 i) mod V, i < 16; the test forms the union. */
static void frozen_rows(dt_comm *c) {
    enum { D = 8, T = 16 };
    const int64_t vs[2] = {1000, 40};
    for (int k = 0; k < 2; k++) {
        int64_t V = vs[k];
        float loss[2], grad[2][3 * D];
        size_t gathered = 0;
        int passes = 0;
        for (int sharded = 0; sharded < 2; sharded++) {
            dt_graph *g = dt_graph_init();
            int ids = dt_graph_input(g, "ids", DT_I32, 1, (int64_t[]){T}, 0);
            int emb = dt_graph_param(g, "emb", DT_BF16, 2, (int64_t[]){V, D}, DT_PARAM_FROZEN);
            int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){3, D}, 0);
            int r, lo = dt_test_dotloss(g, dt_linear(g, dt_embedding(g, ids, emb), w, -1), &r);
            CHECK_OK(dt_graph_compile(g, lo, NULL));
            uint16_t *tab = dt_graph_value(g, emb)->data;
            for (int64_t i = 0; i < V * D; i++)
                tab[i] = dt_bf16_from_f32((float)(i % 97) * 0.125f - 6.0f);
            dt_test_randn(g, w, 5, 1.0f), dt_test_randn(g, r, 6, 1.0f);
            int32_t *id = dt_graph_value(g, ids)->data;
            for (int i = 0; i < T; i++) id[i] = (int32_t)((7 * R + 13 * i) % V);
            dt_ddp_opts o = dt_ddp_opts_default();
            o.shard_frozen = sharded;
            dt_ddp *d = NULL;
            CHECK_OK(dt_ddp_open(g, c, &o, &d));
            if (!d) return;
            CHECK_OK(dt_graph_forward(g, 1));
            CHECK_OK(dt_graph_backward(g));
            CHECK_OK(dt_ddp_wait(d));
            loss[sharded] = *(const float *)dt_graph_value(g, lo)->data;
            memcpy(grad[sharded], dt_graph_flat_grad(g, NULL), sizeof grad[0]);
            dt_ddp_stats ds;
            dt_ddp_get_stats(d, &ds);
            gathered = ds.frozen_gathered_bytes;
            /* one rank: nothing to shard */
            CHECK(dt_ddp_frozen_row_tables(d) == (sharded && N > 1),
                  "V %lld: %d row-gathered tables", (long long)V, dt_ddp_frozen_row_tables(d));
            /* the passes that read the table: forward, and backward if any entry there does */
            int nf = 0, ne = dt_graph_entry_count(g, &nf), p[DT_GRAPH_ENTRY_PARAMS], fw = 0, bw = 0;
            for (int e = 0; e < ne; e++)
                for (int j = 0, n = dt_graph_entry_frozen(g, e, p); j < n; j++)
                    if (dt_graph_param_info(g, p[j])->id == emb) *(e < nf ? &fw : &bw) = 1;
            passes = fw + bw;
            dt_ddp_close(d);
            dt_graph_free(g);
        }
        int rows = 0;
        for (int64_t v = 0; v < V; v++) {
            int hit = 0;
            for (int q = 0; q < N && !hit; q++)
                for (int i = 0; i < T && !hit; i++) hit = (7 * q + 13 * i) % V == v;
            rows += hit;
        }
        size_t want = N > 1 ? (size_t)passes * (size_t)(rows > V / 2 ? V : rows) * D * 2 : 0;
        CHECK(!memcmp(&loss[0], &loss[1], sizeof loss[0]) &&
                  !memcmp(grad[0], grad[1], sizeof grad[0]),
              "V %lld: the row-gathered table changes the loss (%g, %g) or the gradient",
              (long long)V, loss[0], loss[1]);
        CHECK(passes >= 1 && gathered == want,
              "V %lld: %zu frozen bytes gathered, expected %zu (%d union rows, %d passes)",
              (long long)V, gathered, want, rows, passes);
    }
}

int main(int argc, char **argv) {
    dt_threads_set(1);
    int want = argc > 1 ? atoi(argv[1]) : 1, die_at = -1;
    if (argc > 3 && !strcmp(argv[2], "--die-at")) die_at = atoi(argv[3]);
    dt_comm *c = NULL, *single = NULL;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    CHECK_OK(dt_comm_open("single", NULL, NULL, &single));
    if (!c || !single) return dt_test_finish("test_dist_ddp");
    R = dt_comm_rank(c), N = dt_comm_size(c);
    CHECK(N == want, "world size %d, expected %d", N, want);
    const char *lv = getenv("DT_MPI_THREAD");
    if (lv && !strcmp(dt_comm_backend(c), "mpi"))
        CHECK(!strcmp(dt_comm_thread_level(c), lv), "thread level %s, asked for %s",
              dt_comm_thread_level(c), lv);
    if (R == 0)
        printf("backend %s, %d ranks, thread level %s\n", dt_comm_backend(c), N,
               dt_comm_thread_level(c));

    run_cfg mlp = {.kind = MLP, .batch = 3, .accum = 1, .overlap = 1, .bucket_mb = 0.002};
    if (die_at >= 0) {
        mlp.die_at = die_at;
        run_out o = train(c, &mlp);
        free_out(&o);
        CHECK(N == 1, "rank %d: training finished although rank %d died", R, N - 1);
        dt_comm_close(c);
        return dt_test_finish("test_dist_ddp --die-at");
    }
    mlp.die_at = -1;
    broadcast_state(c);
    frozen_rows(c);
    /* 0.002 MiB = 524 floats: fc3 (330) + fc2.bias share a bucket, fc2.weight (1024) is larger
     * than a bucket and sits alone, fc1's two parameters take one each. */
    equivalence(c, single, mlp, "mlp sgd");
    run_out probe = train(c, &mlp);
    CHECK(probe.n_buckets == 4, "mlp: %d buckets, expected 4", probe.n_buckets);
    free_out(&probe);
    mlp.adamw = 1, mlp.clip = 1.0f;
    equivalence(c, single, mlp, "mlp adamw+clip");
    accumulation(c, mlp);
    prescaled(c, mlp, "mlp adamw+clip");
    mlp.accum = 2;
    prescaled(c, mlp, "mlp adamw+clip, 2 micro-batches");

    run_cfg llama = {
        .kind = LLAMA, .batch = 1, .accum = 1, .overlap = 1, .bucket_mb = 0.01, .die_at = -1};
    equivalence(c, single, llama, "llama sgd");
    sparse_rows(c, llama, "llama sgd");
    prescaled(c, llama, "llama sgd (sparse embedding rows)");
    /* One 25 MiB bucket would hold the whole model: the table still gets a bucket of its own. */
    run_cfg big = llama;
    big.bucket_mb = 25;
    sparse_rows(c, big, "llama sgd, 25 MiB buckets");
    run_out probe_big = train(c, &big);
    CHECK(probe_big.n_buckets == (N > 1 ? 2 : 1), "llama, 25 MiB: %d buckets", probe_big.n_buckets);
    free_out(&probe_big);
    llama.adamw = 1, llama.clip = 1.0f;
    equivalence(c, single, llama, "llama adamw+clip");
    sparse_rows(c, llama, "llama adamw+clip");
    accumulation(c, llama);

    dt_comm_close(single);
    dt_comm_close(c);
    return dt_test_finish("test_dist_ddp");
}
