/* ZeRO sharding and the range collectives at the dt_comm / dt_ddp level, under mpirun with
 * N = 1..4 ranks (and directly: the single-process communicator). Usage: test_dist_zero N
 * (the world size mpirun was asked for). Small and fast, so that the AddressSanitizer pass
 * (label unit) runs it too; the trainer-level checks are in tests/train (train_dist_np*,
 * zero_memory.sh).
 *
 * 1. dt_comm_reduce_scatter_range / dt_comm_allgather_range against a reference every rank
 *    computes: for shard sizes 48, 5 (not a multiple of 16) and dt_comm_shard_size(101, N), and
 *    ranges over the padded buffer of N * shard elements -- empty, inside one shard, straddling
 *    a shard edge, spanning several shards, the whole buffer, ranges where only the first or the
 *    last rank has elements (so the others receive 0, with recv NULL too) -- reduce-scatter out
 *    of place (guard elements around recv must stay untouched) and in place (recv == send),
 *    with and without DT_COMM_AVG, gives each rank the exact sums of its part (small integers:
 *    every summation order is exact); all-gather fills exactly [lo, hi) of a full-size buffer
 *    and leaves the rest untouched. Argument errors (range beyond N * shard, lo > hi, shard 0,
 *    a count beyond MPI's int, NULL or overlapping recv, NULL send) return an error that names
 *    the op, and the communicator still works afterwards.
 * 2. dt_ddp with zero_stage 0..3 on a 3-layer MLP whose flat buffer (9778 elements) divides by
 *    no N > 1, cut into 6 buckets (bucket_mb 0.001), compiled with flat_capacity = N * shard;
 *    each rank takes its rows of a global batch derived from (step, row) only. STEPS steps of
 *    the recipe in dist.h (AdamW on the shard, dt_ddp_clip_grad with clipping active), with 1
 *    and with 2 micro-batches. Checked:
 *      - stage 1 is bit-identical to stage 0 (same all-reduce, elementwise optimizer), and so
 *        are its gradient norms;
 *      - stage 3 is bit-identical to stage 2 (same reduce-scatter; gathered parameters are
 *        copies), parameters after every step and norms;
 *      - stages 2 and 3 are within ATOL + RTOL * |x| of stage 0 (reduce-scatter and sharded
 *        norms sum in another order; see the tolerances below), norms within NORM_RTOL;
 *      - after the final dt_ddp_gather_params every rank holds the same bits, and an eval-mode
 *        forward on them gives stage 1 = stage 0 and stage 3 = stage 2 losses (bits);
 *      - overlap off gives the same bits as overlap on (stages 2, 3 with 2 micro-batches);
 *      - stage 3 memory without RSS: after dt_ddp_broadcast_params, after every step, and after
 *        gather + dt_ddp_release_params, every parameter element outside this rank's shard
 *        that lies on a page entirely inside a bucket's non-own part reads 0.0f (given back),
 *        and the own shard holds the values stage 2 has after the same step (bit-identical);
 *      - a 40-element model on which the last rank of 4 owns an empty shard trains the same.
 *    dt_ddp_open refuses stage >= 1 without padded flat buffers (the message names
 *    flat_capacity) and stages 4 and -1.
 * 3. dt_ddp_allreduce_f64 while buckets are in flight (overlap on): called from a
 *    dt_graph_on_entry hook during forward and backward (stages 0-2; stage 3 owns the hook) and
 *    between backward and dt_ddp_wait (all stages): every call returns the exact sums on every
 *    rank, and the training result is bit-identical to the run without the calls.
 *
 * Tolerances (f32, AdamW lr 0.01, STEPS = 4): reduce-scatter vs all-reduce and the sharded
 * gradient norm round differently in the last bits; Adam's m / sqrt(v) is scale invariant, so a
 * relative rounding error of the gradients of ~1e-7 moves parameters by ~1e-7 * lr per step --
 * except for elements whose gradient is pure rounding noise, which Adam can move by up to lr.
 * So |stage k - stage 0| <= ATOL + RTOL * |stage 0| for all but ADAM_MAX_OUTSIDE of the
 * elements, none off by more than ADAM_LOOSE (a tenth of one lr step: a bucket left unreduced,
 * a stale or zero parameter would move elements by O(lr) or more). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/dist.h"
#include "dtrain/optim.h"
#include "dtrain/runtime.h"
#include "harness.h"

#define ATOL 2e-6
#define RTOL 2e-5
#define ADAM_LOOSE 1e-3
#define ADAM_MAX_OUTSIDE 0.002
#define NORM_RTOL 1e-5
#define LR 0.01f
#define CLIP 0.5f

enum { STEPS = 4, BATCH = 3 };
enum { BIG = 0, TINY = 1 };

static int R, N; /* rank, world size */

/* ---- 1. range collectives ---------------------------------------------------------------- */

/* Rank r's element i: small integers, so sums over ranks are exact in any order. */
static float rs_val(int r, size_t i) {
    return (float)((r + 1) * (int)(i % 97 + 1));
}

static float rs_sum(size_t i, unsigned flags) {
    float s = (float)((int)(i % 97 + 1) * N * (N + 1) / 2);
    return (flags & DT_COMM_AVG) && N > 1 ? s * (1.0f / (float)N) : s; /* as the library scales */
}

/* This rank's part [*a, *a + count) of [lo, hi). */
static size_t my_part(size_t lo, size_t hi, size_t shard, size_t *a) {
    size_t s = (size_t)R * shard, e = s + shard;
    if (s < lo) s = lo;
    if (e > hi) e = hi;
    *a = s;
    return e > s ? e - s : 0;
}

static void range_case(dt_comm *c, size_t lo, size_t hi, size_t shard) {
    size_t len = hi - lo, total = (size_t)N * shard, a, cnt = my_part(lo, hi, shard, &a);
    enum { G = 4 };
    const float SENT = -7.5f;
    float *send = malloc((len ? len : 1) * sizeof(float));
    float *guard = malloc((cnt + 2 * G) * sizeof(float)), *recv = guard + G;
    for (unsigned flags = 0; flags <= DT_COMM_AVG; flags += DT_COMM_AVG) {
        /* out of place */
        for (size_t j = 0; j < len; j++) send[j] = rs_val(R, lo + j);
        for (size_t j = 0; j < cnt + 2 * G; j++) guard[j] = SENT;
        CHECK_OK(dt_comm_reduce_scatter_range(c, send, recv, lo, hi, shard, flags));
        int bad = 0, guards = 0, touched = 0;
        for (size_t j = 0; j < cnt; j++) bad += recv[j] != rs_sum(a + j, flags);
        for (size_t j = 0; j < G; j++) guards += guard[j] != SENT || recv[cnt + j] != SENT;
        for (size_t j = 0; j < len; j++) touched += send[j] != rs_val(R, lo + j);
        CHECK(bad == 0 && guards == 0 && touched == 0,
              "reduce_scatter_range [%zu, %zu) shard %zu flags %u rank %d: %d of %zu wrong, %d "
              "guards overwritten, %d send elements changed",
              lo, hi, shard, flags, R, bad, cnt, guards, touched);
        /* a rank with nothing to receive may pass recv NULL (every rank takes part in the
         * collective: the others receive into recv again) */
        for (size_t j = 0; j < cnt + 2 * G; j++) guard[j] = SENT;
        CHECK_OK(dt_comm_reduce_scatter_range(c, send, cnt ? recv : NULL, lo, hi, shard, flags));
        bad = 0;
        for (size_t j = 0; j < cnt; j++) bad += recv[j] != rs_sum(a + j, flags);
        CHECK(bad == 0, "reduce_scatter_range (recv NULL where empty) [%zu, %zu): %d wrong", lo, hi,
              bad);
        /* in place: the result lands at send[0, cnt) */
        for (size_t j = 0; j < len; j++) send[j] = rs_val(R, lo + j);
        CHECK_OK(dt_comm_reduce_scatter_range(c, send, send, lo, hi, shard, flags));
        bad = 0;
        for (size_t j = 0; j < cnt; j++) bad += send[j] != rs_sum(a + j, flags);
        CHECK(bad == 0, "reduce_scatter_range in place [%zu, %zu) shard %zu flags %u: %d wrong", lo,
              hi, shard, flags, bad);
    }
    /* all-gather into a full-size buffer (with guards): only [lo, hi) may change */
    float *full = malloc((total + 2 * G) * sizeof(float)), *f = full + G;
    for (size_t i = 0; i < total + 2 * G; i++) full[i] = SENT;
    for (size_t i = lo; i < hi; i++)
        f[i] = i / shard == (size_t)R ? (float)(R * 10000 + (int)i) : -1;
    CHECK_OK(dt_comm_allgather_range(c, f + lo, lo, hi, shard));
    int bad = 0, outside = 0;
    for (size_t i = lo; i < hi; i++) bad += f[i] != (float)((int)(i / shard) * 10000 + (int)i);
    for (size_t i = 0; i < total + 2 * G; i++)
        outside += (i < G + lo || i >= G + hi) && full[i] != SENT;
    CHECK(bad == 0 && outside == 0,
          "allgather_range [%zu, %zu) shard %zu: %d wrong inside, %d changed outside", lo, hi,
          shard, bad, outside);
    free(send), free(guard), free(full);
}

static void expect_err(dt_status st, const char *what, const char *w1, const char *w2) {
    const char *m = dt_last_error();
    CHECK(st != DT_OK && strstr(m, w1) && (!w2 || strstr(m, w2)),
          "%s: status %d, message '%s' (expected '%s'%s%s)", what, (int)st, m, w1, w2 ? ", " : "",
          w2 ? w2 : "");
}

static void range_errors(dt_comm *c) {
    size_t shard = 32, total = (size_t)N * shard;
    float *buf = calloc(total + 1, sizeof(float)), *out = calloc(total + 1, sizeof(float));
    const char *RS = "reduce_scatter_range", *AG = "allgather_range";
    expect_err(dt_comm_reduce_scatter_range(c, buf, out, 0, total + 1, shard, 0),
               "rs beyond the buffer", RS, "range");
    expect_err(dt_comm_reduce_scatter_range(c, buf, out, 5, 3, shard, 0), "rs lo > hi", RS,
               "range");
    expect_err(dt_comm_allgather_range(c, buf, total, total + 1, shard), "ag beyond the buffer", AG,
               "range");
    expect_err(dt_comm_allgather_range(c, buf, 9, 2, shard), "ag lo > hi", AG, "range");
    /* a count beyond MPI's int: refused before the (never allocated) buffer is read */
    size_t big = (size_t)INT_MAX + 1, bshard = (big + (size_t)N - 1) / (size_t)N;
    expect_err(dt_comm_reduce_scatter_range(c, buf, buf, 0, big, bshard, 0), "rs > INT_MAX", RS,
               "int");
    expect_err(dt_comm_allgather_range(c, buf, 0, big, bshard), "ag > INT_MAX", AG, "int");
    if (N > 1) {
        expect_err(dt_comm_reduce_scatter_range(c, buf, out, 0, 0, 0, 0), "rs shard 0", RS,
                   "range");
        expect_err(dt_comm_allgather_range(c, buf, 0, 0, 0), "ag shard 0", AG, "range");
    } else {
        CHECK_OK(dt_comm_reduce_scatter_range(c, buf, out, 0, 0, 0, 0));
        CHECK_OK(dt_comm_allgather_range(c, buf, 0, 0, 0));
    }
    /* buffer errors, made the same way on every rank (every rank has elements here) */
    expect_err(dt_comm_reduce_scatter_range(c, NULL, out, 0, total, shard, 0), "rs send NULL", RS,
               "NULL");
    expect_err(dt_comm_reduce_scatter_range(c, buf, NULL, 0, total, shard, 0), "rs recv NULL", RS,
               "NULL");
    expect_err(dt_comm_reduce_scatter_range(c, buf, buf + 1, 0, total, shard, 0),
               "rs recv overlaps", RS, "overlap");
    expect_err(dt_comm_allgather_range(c, NULL, 0, total, shard), "ag NULL", AG, "NULL");
    expect_err(dt_comm_reduce_scatter_range(NULL, buf, out, 0, 1, shard, 0), "rs comm NULL", RS,
               NULL);
    /* nothing was sent: the ranks are still in step and the communicator works */
    CHECK_OK(dt_comm_barrier(c));
    range_case(c, 0, total, shard);
    free(buf), free(out);
}

static void test_ranges(dt_comm *c) {
    size_t shards[3] = {48, 5, dt_comm_shard_size(101, N)};
    for (int si = 0; si < 3; si++) {
        size_t s = shards[si], t = (size_t)N * s;
        size_t r[][2] = {
            {0, 0},             /* empty, at the start */
            {s, s},             /* empty, on a shard edge */
            {t, t},             /* empty, at the end */
            {1, s - 1},         /* inside shard 0 */
            {t - s + 1, t - 1}, /* inside the last shard */
            {s - 2, s + 2},     /* straddles the first edge (N = 1: clamped below) */
            {s / 2, t - s / 2}, /* spans every shard, partly */
            {0, t},             /* the whole buffer */
            {0, s},             /* only rank 0 has elements */
            {t - s, t},         /* only the last rank has elements */
            {2, 3},             /* one element */
        };
        for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
            size_t lo = r[k][0], hi = r[k][1] < t ? r[k][1] : t;
            if (lo > hi) continue;
            range_case(c, lo, hi, s);
        }
    }
    range_errors(c);
}

/* ---- 2. ZeRO stages on a small MLP ------------------------------------------------------- */

/* BIG: 11 -> 61 -> 131 -> 7, flat sizes 671, 61, 7991, 131, 917, 7 = 9778 (not a multiple of
 * 16 or of any N > 1). bucket_mb 0.001 (262 floats) gives 6 buckets: fc3.bias, fc3.weight,
 * fc2.bias, fc2.weight (alone: larger than a bucket), fc1.bias, fc1.weight. fc2.weight spans
 * several shards for N = 2..4 and leaves every rank >= 2 whole pages outside its shard.
 * TINY: 7 -> 5, 40 elements: with 4 ranks (shard 16) the last rank owns nothing. */
typedef struct model {
    dt_graph *g;
    int kind, din, dout, x, y, loss;
} model;

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int model_build(model *m, int kind, size_t capacity) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    dt_graph *g = m->g = dt_graph_init();
    m->din = kind == BIG ? 11 : 7, m->dout = kind == BIG ? 7 : 5;
    m->x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){BATCH, m->din}, 0);
    m->y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){BATCH}, 0);
    int logits;
    if (kind == BIG) {
        int w1 = dt_graph_param(g, "fc1.weight", DT_F32, 2, (int64_t[]){61, 11}, 0);
        int b1 = dt_graph_param(g, "fc1.bias", DT_F32, 1, (int64_t[]){61}, DT_PARAM_NO_DECAY);
        int w2 = dt_graph_param(g, "fc2.weight", DT_F32, 2, (int64_t[]){131, 61}, 0);
        int b2 = dt_graph_param(g, "fc2.bias", DT_F32, 1, (int64_t[]){131}, DT_PARAM_NO_DECAY);
        int w3 = dt_graph_param(g, "fc3.weight", DT_F32, 2, (int64_t[]){7, 131}, 0);
        int b3 = dt_graph_param(g, "fc3.bias", DT_F32, 1, (int64_t[]){7}, DT_PARAM_NO_DECAY);
        int h = dt_gelu(g, dt_linear(g, m->x, w1, b1), 0);
        h = dt_gelu(g, dt_linear(g, h, w2, b2), 0);
        logits = dt_linear(g, h, w3, b3);
    } else {
        int w = dt_graph_param(g, "fc.weight", DT_F32, 2, (int64_t[]){5, 7}, 0);
        int b = dt_graph_param(g, "fc.bias", DT_F32, 1, (int64_t[]){5}, DT_PARAM_NO_DECAY);
        logits = dt_linear(g, m->x, w, b);
    }
    m->loss = dt_cross_entropy(g, logits, m->y, 0.0f, DT_IGNORE_INDEX_DEFAULT);
    if (!CHECK(m->loss >= 0, "building model %d: %s", kind, dt_last_error())) return -1;
    dt_graph_opts o = {.flat_capacity = capacity};
    dt_status s = dt_graph_compile(g, m->loss, &o);
    return CHECK(s == DT_OK, "compile: %s", dt_last_error()) ? 0 : -1;
}

/* Rows [row0, row0 + BATCH) of step s's global batch; a row depends only on (s, row). */
static void model_set_batch(model *m, int s, int row0) {
    int32_t *y = dt_graph_value(m->g, m->y)->data;
    float *x = dt_graph_value(m->g, m->x)->data;
    for (int i = 0; i < BATCH; i++) {
        uint64_t key = (uint64_t)s << 32 | (uint64_t)(row0 + i);
        dt_randn(x + (size_t)i * (size_t)m->din, m->din, mix(key), 1.0f);
        y[i] = (int32_t)(mix(key ^ 0x5a5a) % (uint64_t)m->dout);
    }
}

typedef struct run_cfg {
    int kind, stage, accum;
    int hook;        /* 3.: dt_ddp_allreduce_f64 from an entry hook and before dt_ddp_wait */
    int overlap_off; /* all buckets in dt_ddp_wait instead of during backward */
} run_cfg;

typedef struct run_out {
    float *p;    /* final parameters after dt_ddp_gather_params [n] */
    float *snap; /* [STEPS][n]: parameters after each step (stage 3: as resident) */
    double norm[STEPS];
    size_t n, lo, hi;
    int n_buckets, clipped;
    size_t released_checked; /* stage 3: elements verified to read 0 */
    float eval_loss;         /* eval-mode forward on the gathered parameters after training */
} run_out;

/* 3.: the hook's context. */
typedef struct hook_ctx {
    dt_ddp *d;
    int calls, bad;
    dt_status st;
} hook_ctx;

static void f64_check(hook_ctx *h, int tag) {
    double v[3] = {R + 1.0, (double)tag * (R + 1), 0.25 * R};
    dt_status st = dt_ddp_allreduce_f64(h->d, v, 3);
    if (st != DT_OK && h->st == DT_OK) h->st = st;
    h->calls++;
    double s = N * (N + 1) / 2.0;
    h->bad += v[0] != s || v[1] != (double)tag * s || v[2] != 0.25 * (N * (N - 1) / 2.0);
}

static dt_status entry_hook(void *ud, int entry, int after) {
    hook_ctx *h = ud;
    if (after && entry % 3 == 1) f64_check(h, entry);
    return DT_OK;
}

/* Stage 3: elements outside [lo, hi) on pages entirely inside a bucket's non-own part read 0
 * (dist.h: memory given back reads as zeros). Returns how many were checked. */
static size_t check_released(dt_ddp *d, const float *p, const char *what) {
    size_t lo, hi, pg = (size_t)sysconf(_SC_PAGESIZE), checked = 0, nonzero = 0;
    dt_ddp_shard(d, &lo, &hi);
    for (int k = 0; k < dt_ddp_bucket_count(d); k++) {
        size_t blo, bhi;
        dt_ddp_bucket_range(d, k, &blo, &bhi);
        size_t part[2][2] = {{blo, bhi < lo ? bhi : lo}, {blo > hi ? blo : hi, bhi}};
        for (int j = 0; j < 2; j++) {
            uintptr_t a = (uintptr_t)(p + part[j][0]), b = (uintptr_t)(p + part[j][1]);
            if (part[j][1] <= part[j][0]) continue;
            a = (a + pg - 1) / pg * pg, b = b / pg * pg;
            for (const float *q = (const float *)a; (uintptr_t)q < b; q++)
                checked++, nonzero += *q != 0.0f;
        }
    }
    CHECK(nonzero == 0, "%s: rank %d: %zu of %zu released parameter elements are not 0", what, R,
          nonzero, checked);
    return checked;
}

static void same_bits(const char *what, const float *a, const float *b, size_t n) {
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) first = i;
    CHECK(first == n, "%s: rank %d: not bit-identical (first at %zu: %.9g vs %.9g)", what, R, first,
          first < n ? a[first] : 0.0, first < n ? b[first] : 0.0);
}

static run_out train(dt_comm *c, const run_cfg *rc) {
    run_out o = {0};
    char what[160];
    size_t n_real = rc->kind == BIG ? 9778 : 40;
    model m;
    size_t cap = rc->stage ? (size_t)N * dt_comm_shard_size(n_real, N) : 0;
    if (model_build(&m, rc->kind, cap)) return o;
    size_t n;
    float *p = dt_graph_flat_param(m.g, &n);
    if (!CHECK(n == n_real, "model %d: %zu parameters, expected %zu", rc->kind, n, n_real))
        return o;
    for (int i = 0; i < dt_graph_param_count(m.g); i++) /* rank 0's weights must win */
        dt_test_randn(m.g, dt_graph_param_info(m.g, i)->id, (42 + (uint64_t)R) * 16 + (uint64_t)i,
                      0.3f);
    dt_ddp_opts dopt = dt_ddp_opts_default();
    dopt.bucket_mb = 0.001, dopt.zero_stage = rc->stage, dopt.overlap = !rc->overlap_off;
    dt_ddp *d = NULL;
    CHECK_OK(dt_ddp_open(m.g, c, &dopt, &d));
    if (!d) {
        dt_graph_free(m.g);
        return o;
    }
    /* what the trainer asks of the ZeRO policy instead of testing the stage */
    static const char *names[] = {"", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    CHECK(dt_ddp_zero_stage(d) == rc->stage && !strcmp(dt_ddp_zero_name(d), names[rc->stage]) &&
              dt_ddp_accumulates(d) == (rc->stage < 2) &&
              dt_ddp_shards_optimizer(d) == (rc->stage >= 1) &&
              dt_ddp_flat_capacity(n_real, N, rc->stage) == (N > 1 ? cap : 0) &&
              strlen(dt_ddp_exchange_note(d)) > 0,
          "stage %d: policy queries (stage %d, '%s', accumulates %d, shards %d, capacity %zu)",
          rc->stage, dt_ddp_zero_stage(d), dt_ddp_zero_name(d), dt_ddp_accumulates(d),
          dt_ddp_shards_optimizer(d), dt_ddp_flat_capacity(n_real, N, rc->stage));
    hook_ctx hk = {.d = d};
    int hook_in_graph = rc->hook && rc->stage < 3; /* stage 3 uses the entry hook itself */
    if (hook_in_graph) dt_graph_on_entry(m.g, entry_hook, &hk);
    CHECK_OK(dt_ddp_broadcast_params(d));
    size_t lo, hi;
    dt_ddp_shard(d, &lo, &hi);
    o.lo = lo, o.hi = hi, o.n = n;
    snprintf(what, sizeof what, "stage %d accum %d kind %d", rc->stage, rc->accum, rc->kind);
    if (rc->stage >= 1) { /* rank r owns [r*shard, (r+1)*shard) clamped to n */
        size_t sh = dt_comm_shard_size(n, N), a = (size_t)R * sh, b = a + sh;
        CHECK(lo == (a < n ? a : n) && hi == (b < n ? b : n), "%s: shard [%zu, %zu) of %zu", what,
              lo, hi, n);
    } else {
        CHECK(lo == 0 && hi == n, "%s: stage 0 slice [%zu, %zu)", what, lo, hi);
    }
    if (rc->stage == 3) o.released_checked += check_released(d, p, "after broadcast_params");

    int cap_g = dt_graph_param_count(m.g), ng = 0;
    dt_optim_group *groups = malloc((size_t)cap_g * sizeof *groups);
    CHECK_OK(dt_optim_groups_from_graph(m.g, groups, cap_g, &ng));
    dt_optim_config oc = dt_optim_config_default(DT_OPTIM_ADAMW);
    oc.weight_decay = 0.01f;
    dt_optim *opt = NULL;
    CHECK_OK(dt_optim_init(&oc, n, lo, hi, groups, ng, &opt));
    o.snap = calloc((size_t)STEPS * n, sizeof(float));
    for (int s = 0; opt && s < STEPS; s++) {
        dt_graph_set_loss_scale(m.g, 1.0f / (float)rc->accum);
        dt_ddp_zero_grad(d);
        for (int k = 0; k < rc->accum; k++) {
            model_set_batch(&m, s, (R * rc->accum + k) * BATCH);
            /* ZeRO-2/3 keep no full gradient: the graph overwrites, dt_ddp adds into the shard */
            dt_graph_set_accumulate(m.g, k > 0 && rc->stage < 2);
            dt_ddp_set_enabled(d, k == rc->accum - 1);
            CHECK_OK(dt_graph_forward(m.g, 1));
            CHECK_OK(dt_graph_backward(m.g));
            if (rc->hook) f64_check(&hk, 1000 + s); /* buckets still in flight */
            CHECK_OK(dt_ddp_wait(d));
        }
        float *g = dt_ddp_shard(d, NULL, NULL);
        CHECK_OK(dt_ddp_clip_grad(d, CLIP, &o.norm[s]));
        o.clipped += o.norm[s] > CLIP;
        CHECK_OK(dt_optim_step(opt, p + lo, g, LR));
        CHECK_OK(dt_ddp_step_end(d)); /* stages 1-2: all-gather the new shards */
        memcpy(o.snap + (size_t)s * n, p, n * sizeof(float));
        if (rc->stage == 3) {
            snprintf(what, sizeof what, "stage 3 accum %d kind %d after step %d", rc->accum,
                     rc->kind, s);
            o.released_checked += check_released(d, p, what);
        }
    }
    CHECK_OK(dt_ddp_params_whole(d)); /* stage 3: gather everything */
    /* evaluation on the gathered parameters (stage 3: the entry hooks stay idle until release) */
    model_set_batch(&m, STEPS, R * BATCH);
    CHECK_OK(dt_graph_forward(m.g, 0));
    o.eval_loss = *(const float *)dt_graph_value(m.g, m.loss)->data;
    o.p = malloc(n * sizeof(float));
    memcpy(o.p, p, n * sizeof(float));
    if (rc->stage == 3) { /* released again: zeros outside, the own shard intact */
        CHECK_OK(dt_ddp_release_params(d));
        o.released_checked += check_released(d, p, "after gather + release_params");
        same_bits("own shard after release_params", p + lo, o.p + lo, hi - lo);
    }
    if (rc->hook) {
        CHECK(hk.st == DT_OK && hk.bad == 0 && hk.calls > STEPS * rc->accum * hook_in_graph,
              "stage %d: dt_ddp_allreduce_f64 in flight: %d of %d calls wrong, status %d",
              rc->stage, hk.bad, hk.calls, (int)hk.st);
        dt_graph_on_entry(m.g, NULL, NULL);
    }
    o.n_buckets = dt_ddp_bucket_count(d);
    dt_optim_free(opt);
    free(groups);
    dt_ddp_close(d);
    dt_graph_free(m.g);
    return o;
}

static void free_out(run_out *o) {
    free(o->p), free(o->snap);
    o->p = o->snap = NULL;
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

static void close_to(const char *what, const float *a, const float *b, size_t n) {
    double worst = 0, worst_ratio = 0;
    size_t outside = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]), lim = ATOL + RTOL * fabs(b[i]);
        if (e > worst) worst = e;
        if (e / lim > worst_ratio) worst_ratio = e / lim;
        outside += e > lim;
    }
    if (R == 0)
        printf("  %-40s max |diff| %.3g, %.2f of tolerance, %zu of %zu outside\n", what, worst,
               worst_ratio, outside, n);
    CHECK((double)outside <= ADAM_MAX_OUTSIDE * (double)n && worst <= ADAM_LOOSE,
          "%s: rank %d: %zu of %zu elements outside atol %g rtol %g, max |diff| %.3g", what, R,
          outside, n, ATOL, RTOL, worst);
}

static void test_stages(dt_comm *c, int kind, int accum, int hook, run_out ref_out[4]) {
    run_out o[4];
    char what[128];
    for (int st = 0; st < 4; st++) {
        run_cfg rc = {.kind = kind, .stage = st, .accum = accum, .hook = hook};
        o[st] = train(c, &rc);
        if (!CHECK(o[st].p && o[st].snap, "stage %d run failed", st)) goto out;
    }
    size_t n = o[0].n, lo = o[1].lo, hi = o[1].hi;
    const char *kn = kind == BIG ? "mlp" : "tiny";
    CHECK(o[0].clipped > 0, "%s: the gradient norm never exceeded %g (clipping untested)", kn,
          CLIP);
    snprintf(what, sizeof what, "%s accum %d: stage 1 vs 0", kn, accum);
    same_bits(what, o[1].p, o[0].p, n);
    snprintf(what, sizeof what, "%s accum %d: stage 3 vs 2", kn, accum);
    same_bits(what, o[3].p, o[2].p, n);
    CHECK(o[1].eval_loss == o[0].eval_loss && o[3].eval_loss == o[2].eval_loss &&
              fabs(o[2].eval_loss - o[0].eval_loss) <= 1e-5 * fabs(o[0].eval_loss),
          "%s accum %d: eval losses %.9g %.9g %.9g %.9g", kn, accum, o[0].eval_loss, o[1].eval_loss,
          o[2].eval_loss, o[3].eval_loss);
    for (int s = 0; s < STEPS; s++) {
        CHECK(o[1].norm[s] == o[0].norm[s] && o[3].norm[s] == o[2].norm[s],
              "%s accum %d step %d: norms %.17g %.17g %.17g %.17g", kn, accum, s, o[0].norm[s],
              o[1].norm[s], o[2].norm[s], o[3].norm[s]);
        CHECK(fabs(o[2].norm[s] - o[0].norm[s]) <= NORM_RTOL * o[0].norm[s],
              "%s accum %d step %d: stage 2 norm %.9g vs stage 0 %.9g", kn, accum, s, o[2].norm[s],
              o[0].norm[s]);
        /* stage 3 between steps: the resident own shard = stage 2's parameters then */
        snprintf(what, sizeof what, "%s accum %d: stage 3 own shard after step %d", kn, accum, s);
        same_bits(what, o[3].snap + (size_t)s * n + lo, o[2].snap + (size_t)s * n + lo, hi - lo);
    }
    for (int st = 2; st < 4; st++) {
        snprintf(what, sizeof what, "%s accum %d: stage %d vs 0", kn, accum, st);
        close_to(what, o[st].p, o[0].p, n);
    }
    for (int st = 0; st < 4; st++) {
        snprintf(what, sizeof what, "%s accum %d stage %d", kn, accum, st);
        check_same_everywhere(c, &o[st], what);
        CHECK(o[st].n_buckets == (kind == BIG ? 6 : 1), "%s: %d buckets", what, o[st].n_buckets);
    }
    if (kind == BIG && N > 1)
        CHECK(o[3].released_checked > 0,
              "mlp stage 3: no parameter page lies outside rank %d's "
              "shard (the release check checked nothing)",
              R);
    if (R == 0)
        printf("  %s accum %d%s: %zu released elements checked on rank 0, grad norm %.4g -> %.4g\n",
               kn, accum, hook ? " (allreduce_f64 in flight)" : "", o[3].released_checked,
               o[0].norm[0], o[0].norm[STEPS - 1]);
out:
    for (int st = 0; st < 4; st++) {
        if (ref_out) {
            ref_out[st] = o[st];
        } else {
            free_out(&o[st]);
        }
    }
}

static void test_init_errors(dt_comm *c) {
    model m;
    if (model_build(&m, BIG, 0)) return;
    dt_ddp_opts o = dt_ddp_opts_default();
    static char dummy;
    dt_ddp *d = (dt_ddp *)(void *)&dummy; /* dt_ddp_open must set it to NULL on failure */
    for (int st = 1; st <= 3; st += 2) {
        o.zero_stage = st;
        expect_err(dt_ddp_open(m.g, c, &o, &d), "ddp init without flat_capacity", "flat_capacity",
                   "stage");
        CHECK(d == NULL, "ddp init failed but *out was not set to NULL");
    }
    o.zero_stage = 4;
    expect_err(dt_ddp_open(m.g, c, &o, &d), "ddp init stage 4", "stage 4", NULL);
    o.zero_stage = -1;
    expect_err(dt_ddp_open(m.g, c, &o, &d), "ddp init stage -1", "stage -1", NULL);
    dt_graph_free(m.g);
    /* one element short of N * shard is refused too */
    size_t need = (size_t)N * dt_comm_shard_size(9778, N);
    if (model_build(&m, BIG, need - 1)) return;
    o.zero_stage = 2;
    expect_err(dt_ddp_open(m.g, c, &o, &d), "ddp init capacity - 1", "flat_capacity", NULL);
    dt_graph_free(m.g);
}

int main(int argc, char **argv) {
    dt_threads_set(1);
    int want = argc > 1 ? atoi(argv[1]) : 1;
    dt_comm *c = NULL;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    if (!c) return dt_test_finish("test_dist_zero");
    R = dt_comm_rank(c), N = dt_comm_size(c);
    CHECK(N == want, "world size %d, expected %d", N, want);
    if (R == 0) printf("backend %s, %d ranks\n", dt_comm_backend(c), N);

    test_ranges(c);
    test_init_errors(c);
    /* one process has no dt_ddp: it behaves as stage 0 */
    CHECK(dt_ddp_zero_stage(NULL) == 0 && dt_ddp_accumulates(NULL) == 1 &&
              dt_ddp_shards_optimizer(NULL) == 0 && !strcmp(dt_ddp_zero_name(NULL), "") &&
              dt_ddp_step_end(NULL) == DT_OK && dt_ddp_params_whole(NULL) == DT_OK,
          "policy queries without a dt_ddp");
    run_out plain[4], hooked[4];
    test_stages(c, BIG, 1, 0, plain);
    test_stages(c, BIG, 1, 1, hooked);
    for (int st = 0; st < 4; st++) {
        char what[64];
        snprintf(what, sizeof what, "stage %d: allreduce_f64 in flight vs none", st);
        if (plain[st].p && hooked[st].p) same_bits(what, hooked[st].p, plain[st].p, plain[st].n);
        free_out(&plain[st]), free_out(&hooked[st]);
    }
    /* overlap off: the same collectives in the same order, so the same bits */
    for (int st = 2; st < 4; st++) {
        run_cfg rc = {.kind = BIG, .stage = st, .accum = 2, .overlap_off = 1};
        run_out off = train(c, &rc);
        rc.overlap_off = 0;
        run_out on = train(c, &rc);
        char what[64];
        snprintf(what, sizeof what, "stage %d accum 2: overlap off vs on", st);
        if (CHECK(off.p && on.p, "%s: runs failed", what)) same_bits(what, off.p, on.p, on.n);
        free_out(&off), free_out(&on);
    }
    test_stages(c, BIG, 2, 0, NULL);
    test_stages(c, TINY, 1, 0, NULL);
    test_stages(c, TINY, 2, 0, NULL);

    dt_comm_close(c);
    return dt_test_finish("test_dist_zero");
}
