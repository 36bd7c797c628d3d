/* ZeRO sharding (DeepSpeed's stages) on dtrain's flat buffers.
 *
 * Layout: the flat parameter and gradient buffers are padded to world x shard elements; rank r
 * owns [r*shard, (r+1)*shard) (clamped to the n real elements). Buckets (ddp.c) stay the unit of
 * communication: a bucket may span several owners, so its reduce-scatter and all-gather use
 * per-rank counts (dt_comm_*_range).
 *
 * Memory is given back with madvise(MADV_DONTNEED) on the pages that lie entirely inside a
 * released range: the graph keeps its full-size buffers (its tensors are views into them), but
 * released pages cost nothing until written again, and read as zeros. A page shared by two
 * ranges (a bucket edge, the edge of the own shard) is never released, so a release can never
 * drop data another range still holds.
 *
 * Stage 3 follows the schedule: before an entry runs, the buckets holding the parameters it
 * reads are gathered (waiting for the communication thread, which also prefetches the next
 * bucket in first-use order); after the entry that uses a bucket last in this pass (forward, or
 * backward with its recomputed segments) the bucket is released again. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "dist/ddp_impl.h"
#include "dtrain/optim.h"

void dt_zero_release(dt_ddp *d, float *buf, size_t lo, size_t hi) {
    if (!buf || hi <= lo) return;
    uintptr_t a = (uintptr_t)(buf + lo), b = (uintptr_t)(buf + hi), pg = d->page;
    a = (a + pg - 1) / pg * pg;
    b = b / pg * pg;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* The own part of bucket k's parameters is kept; the rest is released. */
static void release_unit(dt_ddp *d, int k) {
    const ddp_bucket *bk = &d->b[k];
    size_t a = bk->lo, b = bk->hi;
    dt_zero_release(d, d->param, a, b < d->own_lo ? b : d->own_lo);
    dt_zero_release(d, d->param, a > d->own_hi ? a : d->own_hi, b);
    d->unit[k] = UNIT_RELEASED;
}

dt_status dt_zero_reduce_bucket(dt_ddp *d, int k) {
    const ddp_bucket *bk = &d->b[k];
    size_t base = (size_t)dt_comm_rank(d->c) * d->shard;
    size_t a = bk->lo > base ? bk->lo : base,
           b = bk->hi < base + d->shard ? bk->hi : base + d->shard;
    /* In place: the reduced own part lands at the bucket's start in the landing buffer, which
     * is released right after; no receive buffer of our own. */
    float *buf = d->grad + bk->lo;
    dt_status st = dt_comm_reduce_scatter_range(d->c, buf, buf, bk->lo, bk->hi, d->shard,
                                                d->average ? DT_COMM_AVG : 0);
    if (st != DT_OK) return st;
    /* gshard [shard] += this bucket's part of the own shard (accumulation over micro-batches) */
    float *dst = d->gshard + (a - base);
    for (size_t i = 0; b > a && i < b - a; i++) dst[i] += buf[i];
    dt_zero_release(d, d->grad, bk->lo, bk->hi);
    return DT_OK;
}

/* ---- stage 3: gather before use, release after ------------------------------------------ */

/* A set of gathered units: the trainable parameters' buckets, or the frozen parameters
 * (one unit each) under dt_ddp_opts.shard_frozen. */
typedef struct unit_set {
    int *state;
    const zero_pass *pass; /* [2] */
    int kind;              /* JOB_GATHER or JOB_GATHER_FROZEN */
    int frozen;
} unit_set;

static void release(dt_ddp *d, const unit_set *us, int u) {
    if (us->frozen)
        dt_zero_frozen_release(d, u);
    else
        release_unit(d, u);
}

/* Waits until unit k is gathered (queueing the gather if nobody did). */
static dt_status ensure(dt_ddp *d, const unit_set *us, int k) {
    pthread_mutex_lock(&d->mu);
    int state = us->state[k];
    pthread_mutex_unlock(&d->mu);
    if (state == UNIT_GATHERED) return DT_OK;
    if (state == UNIT_RELEASED) dt_ddp_enqueue(d, us->kind, k);
    double t0 = dt_ddp_now();
    pthread_mutex_lock(&d->mu);
    while (us->state[k] != UNIT_GATHERED) pthread_cond_wait(&d->done, &d->mu);
    dt_status st = d->err;
    char msg[sizeof d->err_msg];
    memcpy(msg, d->err_msg, sizeof msg);
    pthread_mutex_unlock(&d->mu);
    d->stats.gather_wait_total_s += dt_ddp_now() - t0;
    return st == DT_OK ? DT_OK : dt_error_set(st, "%s", msg);
}

static dt_status hook_units(dt_ddp *d, const unit_set *us, int k, int after) {
    int units[DT_GRAPH_ENTRY_PARAMS];
    int nu = dt_zero_entry_units(d, k, us->frozen, units);
    const zero_pass *ps = &us->pass[k >= us->pass[1].from];
    for (int i = 0; i < nu; i++) {
        int u = units[i];
        if (after) {
            if (ps->last[u] == k) release(d, us, u);
            continue;
        }
        dt_status st = ensure(d, us, u);
        if (st != DT_OK) return st;
        /* At a unit's first use, prefetch the unit first used next. Only then: a later
         * prefetch could re-gather a unit already released in this pass, which would stay
         * gathered -- and stale after the optimizer step. */
        int next = ps->pos[u] + 1;
        if (ps->first[u] == k && next < ps->n_order) {
            int v = ps->order[next];
            pthread_mutex_lock(&d->mu);
            int idle = us->state[v] == UNIT_RELEASED;
            pthread_mutex_unlock(&d->mu);
            if (idle) dt_ddp_enqueue(d, us->kind, v);
        }
    }
    return DT_OK;
}

static dt_status on_entry(void *ud, int k, int after) {
    dt_ddp *d = ud;
    if (d->stage >= 3 && !d->full) {
        unit_set us = {d->unit, d->pass, JOB_GATHER, 0};
        dt_status st = hook_units(d, &us, k, after);
        if (st != DT_OK) return st;
    }
    if (d->fz_n && !d->fz_full) {
        unit_set us = {d->fz_state, d->fz_pass, JOB_GATHER_FROZEN, 1};
        return hook_units(d, &us, k, after);
    }
    return DT_OK;
}

int dt_zero_entry_units(const dt_ddp *d, int k, int frozen, int *out) {
    int params[DT_GRAPH_ENTRY_PARAMS], n = 0;
    int np =
        frozen ? dt_graph_entry_frozen(d->g, k, params) : dt_graph_entry_params(d->g, k, params);
    const int *of = frozen ? d->fz_of : d->bucket_of;
    for (int i = 0; i < np; i++)
        if (of[params[i]] >= 0) out[n++] = of[params[i]];
    return n;
}

dt_status dt_zero_build_pass(dt_ddp *d, zero_pass *ps, int from, int to, int n, int frozen) {
    int nb = n ? n : 1;
    ps->from = from, ps->to = to;
    ps->first = malloc((size_t)nb * sizeof(int));
    ps->last = malloc((size_t)nb * sizeof(int));
    ps->order = malloc((size_t)nb * sizeof(int));
    ps->pos = malloc((size_t)nb * sizeof(int));
    if (!ps->first || !ps->last || !ps->order || !ps->pos)
        return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    for (int u = 0; u < n; u++) ps->first[u] = ps->last[u] = ps->pos[u] = -1;
    ps->n_order = 0;
    int units[DT_GRAPH_ENTRY_PARAMS];
    for (int k = from; k < to; k++) {
        int nu = dt_zero_entry_units(d, k, frozen, units);
        for (int i = 0; i < nu; i++) {
            int u = units[i];
            if (ps->first[u] < 0) {
                ps->first[u] = k;
                ps->pos[u] = ps->n_order;
                ps->order[ps->n_order++] = u;
            }
            ps->last[u] = k;
        }
    }
    return DT_OK;
}

void dt_zero_free_pass(zero_pass *ps) {
    free(ps->first), free(ps->last), free(ps->order), free(ps->pos);
    ps->first = ps->last = ps->order = ps->pos = NULL;
}

dt_status dt_zero_init(dt_ddp *d) {
    int world = dt_comm_size(d->c), rank = dt_comm_rank(d->c);
    d->page = (size_t)sysconf(_SC_PAGESIZE);
    if (d->fz_asked) {
        dt_status st = dt_zero_frozen_init(d);
        if (st != DT_OK) return st;
    }
    if (d->stage == 0) {
        d->shard = d->n, d->own_lo = 0, d->own_hi = d->n;
        if (d->fz_n) dt_graph_on_entry(d->g, on_entry, d);
        return DT_OK;
    }
    d->shard = dt_comm_shard_size(d->n, world);
    size_t need = (size_t)world * d->shard, cap = dt_graph_flat_capacity(d->g);
    if (cap < need)
        return dt_error_set(DT_ERR_INVALID,
                            "ddp init: ZeRO stage %d over %d ranks needs flat buffers padded to "
                            "%zu elements (compile the graph with dt_graph_opts.flat_capacity = "
                            "%zu; it has %zu)",
                            d->stage, world, need, need, cap);
    size_t base = (size_t)rank * d->shard;
    d->own_lo = base < d->n ? base : d->n;
    d->own_hi = base + d->shard < d->n ? base + d->shard : d->n;
    if (d->stage >= 2) {
        size_t bytes = (d->shard ? d->shard : 1) * sizeof(float);
        d->gshard = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!d->gshard)
            return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory for the gradient shard");
        memset(d->gshard, 0, bytes);
        /* The full-size gradient buffer is only a landing area for backward from now on. */
        dt_zero_release(d, d->grad, 0, dt_graph_flat_capacity(d->g));
    }
    if (d->stage >= 3) {
        d->unit = calloc((size_t)(d->nb ? d->nb : 1), sizeof(int));
        if (!d->unit) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
        int nf = 0, ne = dt_graph_entry_count(d->g, &nf);
        dt_status st = dt_zero_build_pass(d, &d->pass[0], 0, nf, d->nb, 0);
        if (st == DT_OK) st = dt_zero_build_pass(d, &d->pass[1], nf, ne, d->nb, 0);
        if (st != DT_OK) return st;
        d->full = 1; /* parameters are whole until the first dt_ddp_release_params */
        for (int u = 0; u < d->nb; u++) d->unit[u] = UNIT_GATHERED;
    }
    if (d->fz_n || d->stage >= 3) dt_graph_on_entry(d->g, on_entry, d);
    return DT_OK;
}

void dt_zero_free(dt_ddp *d) {
    if ((d->stage >= 3 || d->fz_n) && d->g) dt_graph_on_entry(d->g, NULL, NULL);
    free(d->gshard), free(d->unit);
    for (int p = 0; p < 2; p++) dt_zero_free_pass(&d->pass[p]);
    dt_zero_frozen_free(d);
}

/* ---- public ------------------------------------------------------------------------------ */

float *dt_ddp_shard(dt_ddp *d, size_t *lo, size_t *hi) {
    if (lo) *lo = d ? d->own_lo : 0;
    if (hi) *hi = d ? d->own_hi : 0;
    if (!d) return NULL;
    /* gshard[0] is element rank*shard, which is own_lo whenever the shard is not empty */
    return d->stage >= 2 ? d->gshard : d->grad + d->own_lo;
}

void dt_ddp_zero_grad(dt_ddp *d) {
    if (d && d->stage >= 2) memset(d->gshard, 0, d->shard * sizeof(float));
}

dt_status dt_ddp_clip_grad(dt_ddp *d, float max_norm, double *norm) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp clip_grad: ddp is NULL");
    if (d->stage < 2) {
        /* Every rank holds the whole averaged gradient: the same norm everywhere. */
        double nrm = max_norm > 0 ? dt_grad_clip_norm(d->grad, d->n, max_norm)
                                  : sqrt(dt_grad_sumsq(d->grad, d->n));
        if (norm) *norm = nrm;
        return DT_OK;
    }
    size_t lo, hi;
    float *g = dt_ddp_shard(d, &lo, &hi);
    double ss = dt_grad_sumsq(g, hi - lo);
    dt_status st = dt_comm_allreduce_f64(d->c, &ss, 1);
    if (st != DT_OK) return st;
    double nrm = sqrt(ss);
    float coef = dt_grad_clip_coef(nrm, max_norm);
    if (coef < 1.0f) dt_grad_scale(g, hi - lo, coef);
    if (norm) *norm = nrm;
    return DT_OK;
}

dt_status dt_ddp_gather_params(dt_ddp *d) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp gather_params: ddp is NULL");
    if (d->stage == 0) return DT_OK;
    int rank = dt_comm_rank(d->c);
    dt_status st = dt_comm_allgather(d->c, d->param + (size_t)rank * d->shard, d->param, d->shard);
    if (st != DT_OK || d->stage < 3) return st;
    d->full = 1;
    for (int u = 0; u < d->nb; u++) d->unit[u] = UNIT_GATHERED;
    return DT_OK;
}

dt_status dt_ddp_release_params(dt_ddp *d) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp release_params: ddp is NULL");
    dt_zero_frozen_release_all(d);
    if (d->stage < 3) return DT_OK;
    for (int u = 0; u < d->nb; u++) release_unit(d, u);
    d->full = 0;
    return DT_OK;
}

/* ---- the policy the trainer asks for (include/dtrain/dist.h) ---------------------------- */

dt_status dt_ddp_step_end(dt_ddp *d) {
    return d && (d->stage == 1 || d->stage == 2) ? dt_ddp_gather_params(d) : DT_OK;
}

dt_status dt_ddp_params_whole(dt_ddp *d) {
    dt_status st = d ? dt_zero_frozen_whole(d) : DT_OK;
    return st == DT_OK && d && d->stage >= 3 ? dt_ddp_gather_params(d) : st;
}

int dt_ddp_accumulates(const dt_ddp *d) {
    return !d || d->stage < 2;
}

int dt_ddp_shards_optimizer(const dt_ddp *d) {
    return d && d->stage >= 1;
}

int dt_ddp_shards_params(const dt_ddp *d) {
    return d && d->stage >= 3;
}

int dt_ddp_zero_stage(const dt_ddp *d) {
    return d ? d->stage : 0;
}

const char *dt_ddp_zero_name(const dt_ddp *d) {
    static const char *names[] = {"", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    int s = dt_ddp_zero_stage(d);
    return s >= 0 && s <= 3 ? names[s] : "ZeRO-?";
}

const char *dt_ddp_exchange_note(const dt_ddp *d) {
    if (!d) return "none (one worker)";
    if (d->shared) return dt_comm_share_note(d->c);
    if (d->stage >= 2) return "MPI reduce-scatter (ZeRO-2/3)";
    if (!d->shm_asked) return "MPI (dist.shared_memory=false)";
    return dt_comm_share_note(d->c); /* why it fell back to MPI */
}

size_t dt_ddp_flat_capacity(size_t n, int world, int stage) {
    return world > 1 && stage > 0 ? (size_t)world * dt_comm_shard_size(n, world) : 0;
}
