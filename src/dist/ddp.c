/* Data-parallel gradient synchronisation with overlap (PyTorch DDP's reducer, on flat buffers).
 *
 * The flat gradient buffer is cut into buckets: contiguous slices following the parameters in
 * reverse order, because backward finishes the last layers first. Backward reports parameters
 * as their gradients become final (dt_graph_on_grad_ready); when a bucket's last parameter is
 * reported, the backward thread puts the bucket on a queue and a communication thread
 * all-reduces it while backward goes on with earlier layers. dt_ddp_wait then waits for the
 * tail. Every rank runs the same graph, so buckets complete -- and are all-reduced -- in the same
 * order on every rank, which MPI's collective matching needs.
 *
 * Nothing is allocated per step: the queue holds at most one entry per bucket per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dist/ddp_impl.h"

double dt_ddp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: the comm thread's share of its rank's cores. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The watchdog's name for what a job's collectives move (dt_comm_set_timeout's line). */
static const char *job_unit(const ddp_job *j) {
    return j->kind == JOB_F64             ? NULL
           : j->kind == JOB_GATHER        ? "parameter bucket"
           : j->kind == JOB_GATHER_FROZEN ? "frozen parameter"
                                          : "gradient bucket";
}

static dt_status run_job(dt_ddp *d, const ddp_job *j) {
    if (j->kind == JOB_F64) return dt_comm_allreduce_f64(d->c, j->f64, j->n);
    if (j->kind == JOB_GATHER_FROZEN) return dt_zero_frozen_gather(d, j->bucket);
    const ddp_bucket *bk = &d->b[j->bucket];
    if (j->kind == JOB_GATHER)
        return dt_comm_allgather_range(d->c, d->param + bk->lo, bk->lo, bk->hi, d->shard);
    if (bk->mask) return dt_ddp_sparse_reduce(d, j->bucket);
    d->sent += bk->hi - bk->lo;
    if (d->stage >= 2) return dt_zero_reduce_bucket(d, j->bucket);
    unsigned flags = d->average ? DT_COMM_AVG : 0;
    if (d->shared) return dt_comm_allreduce_shared(d->shared, bk->lo, bk->hi, flags);
    return dt_comm_allreduce(d->c, d->grad + bk->lo, bk->hi - bk->lo, flags);
}

dt_status dt_ddp_run_job(dt_ddp *d, const ddp_job *j) {
    dt_watch_unit(d->c, job_unit(j), j->bucket);
    dt_status st = run_job(d, j);
    dt_watch_unit(d->c, NULL, -1);
    return st;
}

/* The communication thread: runs queued jobs in queue order until told to quit. After a
 * failure it keeps draining the queue without communicating, so waiters return. */
static void *comm_main(void *arg) {
    dt_ddp *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->q_head == d->q_tail && !d->quit) pthread_cond_wait(&d->work, &d->mu);
        if (d->q_head == d->q_tail) break; /* quit with an empty queue */
        ddp_job j = d->queue[d->q_head++ % d->qcap];
        int skip = d->err != DT_OK;
        pthread_mutex_unlock(&d->mu);

        double t0 = dt_ddp_now(), c0 = thread_cpu();
        dt_status st = skip ? DT_OK : dt_ddp_run_job(d, &j);
        double t = dt_ddp_now() - t0, cpu = thread_cpu() - c0;

        pthread_mutex_lock(&d->mu);
        d->comm_s += t, d->comm_cpu_s += cpu;
        if (st != DT_OK && d->err == DT_OK) {
            /* dt_last_error() is per thread: carry the message to the waiting thread. */
            d->err = st;
            if (j.kind == JOB_F64) {
                snprintf(d->err_msg, sizeof d->err_msg, "ddp: sum of %zu values: %s", j.n,
                         dt_last_error());
            } else if (j.kind == JOB_GATHER_FROZEN) {
                const dt_param_info *pi = NULL;
                for (int p = 0; p < d->n_params && !pi; p++)
                    if (d->fz_of[p] == j.bucket) pi = dt_graph_param_info(d->g, p);
                snprintf(d->err_msg, sizeof d->err_msg, "ddp: gathering frozen '%s': %s",
                         pi ? pi->name : "?", dt_last_error());
            } else {
                const ddp_bucket *bk = &d->b[j.bucket];
                snprintf(d->err_msg, sizeof d->err_msg, "ddp: %s bucket %d [%zu, %zu): %s",
                         j.kind == JOB_GATHER ? "parameter" : "gradient", j.bucket, bk->lo, bk->hi,
                         dt_last_error());
            }
        }
        if (j.kind == JOB_GATHER) d->unit[j.bucket] = UNIT_GATHERED;
        if (j.kind == JOB_GATHER_FROZEN) d->fz_state[j.bucket] = UNIT_GATHERED;
        d->n_done++;
        pthread_cond_broadcast(&d->done);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

long dt_ddp_enqueue_job(dt_ddp *d, ddp_job j) {
    if (j.kind == JOB_REDUCE) d->b[j.bucket].queued = 1;
    pthread_mutex_lock(&d->mu);
    if (j.kind == JOB_GATHER) d->unit[j.bucket] = UNIT_QUEUED;
    if (j.kind == JOB_GATHER_FROZEN) d->fz_state[j.bucket] = UNIT_QUEUED;
    long seq = d->q_tail++;
    d->queue[seq % d->qcap] = j;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->mu);
    return seq;
}

void dt_ddp_enqueue(dt_ddp *d, int kind, int k) {
    dt_ddp_enqueue_job(d, (ddp_job){.kind = kind, .bucket = k});
}

dt_status dt_ddp_allreduce_f64(dt_ddp *d, double *buf, size_t n) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp allreduce_f64: ddp is NULL");
    long seq = dt_ddp_enqueue_job(d, (ddp_job){.kind = JOB_F64, .f64 = buf, .n = n});
    pthread_mutex_lock(&d->mu);
    while (d->n_done <= seq) pthread_cond_wait(&d->done, &d->mu);
    dt_status st = d->err;
    char msg[sizeof d->err_msg];
    memcpy(msg, d->err_msg, sizeof msg);
    pthread_mutex_unlock(&d->mu);
    return st == DT_OK ? DT_OK : dt_error_set(st, "%s", msg);
}

/* dt_graph_on_grad_ready callback, on the backward thread. */
static void on_ready(void *ud, const int *params, int n) {
    dt_ddp *d = ud;
    if (!d->enabled) return;
    for (int i = 0; i < n; i++) {
        int p = params[i];
        int k = p >= 0 && p < d->n_params ? d->bucket_of[p] : -1;
        if (k < 0) continue;
        if (d->b[k].pending == 0) {
            d->twice = 1; /* a second backward before dt_ddp_wait */
            continue;
        }
        if (--d->b[k].pending == 0) {
            d->n_complete++;
            if (d->overlap) dt_ddp_enqueue(d, JOB_REDUCE, k);
        }
    }
}

dt_ddp_opts dt_ddp_opts_default(void) {
    dt_ddp_opts o = {
        .bucket_mb = 25.0, .overlap = 1, .average = 1, .zero_stage = 0, .sparse = 1, .shm = 1};
    return o;
}

static int trainable(const dt_param_info *p) {
    return !(p->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE));
}

/* The tail bucket: the leading parameters (the first layers, whose gradients backward finishes
 * last) that fit in DDP_TAIL_BYTES (or in cap, if smaller) get a bucket of their own, so that
 * the all-reduce nothing can overlap -- the one after backward's last gradient -- is small. With
 * 25 MiB buckets a ResNet-18's last bucket was 17.6 MiB (the stem, layers 1-3 and part of 4) and
 * the step waited ~8 ms for it; the rest of that bucket is final while layer 1's backward still
 * runs. PyTorch DDP makes its *first* bucket small (1 MiB) so that communication starts early;
 * here the comm thread starts with the first bucket anyway, and the exposed end is the cost.
 * Returns the index of the first parameter after it (0: no tail bucket: the first parameter alone
 * exceeds it, or every parameter fits, so one bucket would hold them all anyway). */
enum { DDP_TAIL_BYTES = 1 << 20 };
static int tail_params(const dt_ddp *d, size_t cap) {
    size_t tail = DDP_TAIL_BYTES / sizeof(float), acc = 0;
    if (cap < tail) tail = cap;
    for (int i = 0; i < d->n_params; i++) {
        const dt_param_info *p = dt_graph_param_info(d->g, i);
        if (!trainable(p)) continue;
        if (acc + p->numel > tail) return i;
        acc += p->numel;
    }
    return 0;
}

/* Buckets over the trainable parameters, last parameter first. A bucket is closed when the
 * next parameter would take it past `cap` elements, so a parameter larger than cap sits alone;
 * so does a row-sparse table (dt_ddp_sparse_alone), whatever its size, so that it can be sent
 * sparse; and one is closed before the tail bucket's parameters (tail_params). The buckets tile
 * [0, n) exactly: bucket k is [lo, previous bucket's lo). */
static dt_status make_buckets(dt_ddp *d, size_t cap) {
    int np = d->n_params, t = tail_params(d, cap);
    d->bucket_of = malloc((size_t)(np ? np : 1) * sizeof(int));
    d->b = malloc((size_t)(np ? np : 1) * sizeof(ddp_bucket));
    if (!d->bucket_of || !d->b) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    size_t hi = d->n, size = 0, lo = d->n;
    int cnt = 0, in_tail = 0;
    d->nb = 0;
    for (int i = np - 1; i >= 0; i--) {
        const dt_param_info *p = dt_graph_param_info(d->g, i);
        d->bucket_of[i] = -1;
        if (!trainable(p)) continue;
        int alone = dt_ddp_sparse_alone(d, p), enter_tail = i < t && !in_tail;
        if (i < t) in_tail = 1;
        if (cnt > 0 && (size + p->numel > cap || alone || enter_tail)) {
            d->b[d->nb++] = (ddp_bucket){.lo = lo, .hi = hi, .n_params = cnt};
            hi = lo, size = 0, cnt = 0;
        }
        d->bucket_of[i] = d->nb;
        cnt++, size += p->numel, lo = p->offset;
        if (alone && i > 0) { /* close it: the next parameter starts a new bucket */
            d->b[d->nb++] = (ddp_bucket){.lo = lo, .hi = hi, .n_params = cnt};
            hi = lo, size = 0, cnt = 0;
        }
    }
    if (cnt > 0) d->b[d->nb++] = (ddp_bucket){.lo = 0, .hi = hi, .n_params = cnt};
    for (int k = 0; k < d->nb; k++) d->b[k].pending = d->b[k].n_params;
    /* Outstanding jobs: at most one reduce per bucket plus a few parameter gathers. */
    d->qcap = 2L * d->nb + 8;
    d->queue = malloc((size_t)d->qcap * sizeof(ddp_job));
    if (!d->queue) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    return DT_OK;
}

void dt_ddp_close(dt_ddp *d) {
    if (!d) return;
    if (d->have_thread) {
        pthread_mutex_lock(&d->mu);
        d->quit = 1;
        pthread_cond_signal(&d->work);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        pthread_cond_destroy(&d->work), pthread_cond_destroy(&d->done);
        pthread_mutex_destroy(&d->mu);
    }
    if (d->g) dt_graph_on_grad_ready(d->g, NULL, NULL);
    dt_comm_unshare(d->shared);
    dt_zero_free(d);
    dt_ddp_sparse_free(d);
    free(d->bucket_of), free(d->b), free(d->queue);
    free(d);
}

dt_status dt_ddp_open(dt_graph *g, dt_comm *c, const dt_ddp_opts *opts, dt_ddp **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "ddp init: out is NULL");
    *out = NULL;
    if (!g || !c) return dt_error_set(DT_ERR_INVALID, "ddp init: graph or comm is NULL");
    dt_ddp_opts o = opts ? *opts : dt_ddp_opts_default();
    if (!(o.bucket_mb > 0) || o.bucket_mb > 1 << 20)
        return dt_error_set(DT_ERR_INVALID, "ddp init: bucket size %g MiB (expected > 0)",
                            o.bucket_mb);
    if (o.zero_stage < 0 || o.zero_stage > 3)
        return dt_error_set(DT_ERR_INVALID, "ddp init: ZeRO stage %d (expected 0, 1, 2 or 3)",
                            o.zero_stage);
    size_t n = 0;
    float *grad = dt_graph_flat_grad(g, &n);
    if (n && !grad)
        return dt_error_set(DT_ERR_STATE, "ddp init: the graph is not compiled (or was compiled "
                                          "without backward): no gradient buffer");
    dt_ddp *d = calloc(1, sizeof *d);
    if (!d) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    d->g = g, d->c = c, d->grad = grad, d->n = n;
    d->param = dt_graph_flat_param(g, NULL);
    d->stage = o.zero_stage;
    d->n_params = dt_graph_param_count(g);
    d->enabled = 1, d->overlap = o.overlap != 0, d->average = o.average != 0;
    d->sparse = o.sparse != 0, d->shm_asked = o.shm != 0;
    d->fz_asked = o.shard_frozen != 0 && dt_comm_size(c) > 1;
    size_t cap = (size_t)(o.bucket_mb * 1048576.0 / sizeof(float));
    dt_status st = make_buckets(d, cap ? cap : 1);
    if (st == DT_OK) st = dt_zero_init(d);
    if (st == DT_OK) st = dt_ddp_sparse_init(d);
    /* Shared memory between the host's ranks for plain all-reduces (ZeRO-2/3 reduce-scatter
     * through MPI; an explicitly chosen ring all-reduce stays the ring). */
    if (st == DT_OK && o.shm && d->stage < 2 && n && dt_comm_get_algo(c) == DT_COMM_ALGO_NATIVE)
        st = dt_comm_share(c, grad, n, &d->shared);
    if (st != DT_OK) {
        dt_ddp_close(d);
        return st;
    }
    d->stats.bytes_per_step = n * sizeof(float);
    d->stats.shared = d->shared != NULL;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->work, NULL), pthread_cond_init(&d->done, NULL);
    if (pthread_create(&d->thread, NULL, comm_main, d) != 0) {
        pthread_cond_destroy(&d->work), pthread_cond_destroy(&d->done);
        pthread_mutex_destroy(&d->mu);
        dt_ddp_close(d);
        return dt_error_set(DT_ERR_STATE, "ddp init: cannot start the communication thread");
    }
    d->have_thread = 1;
    dt_graph_on_grad_ready(g, on_ready, d);
    *out = d;
    return DT_OK;
}

void dt_ddp_set_enabled(dt_ddp *d, int on) {
    /* ZeRO-2/3 keep no full gradient between backward passes: every one communicates. */
    if (d) d->enabled = on != 0 || d->stage >= 2;
}

void dt_ddp_set_overlap(dt_ddp *d, int on) {
    if (d) d->overlap = on != 0;
}

dt_status dt_ddp_wait(dt_ddp *d) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp wait: ddp is NULL");
    if (!d->enabled) return DT_OK;
    double t0 = dt_ddp_now();
    int complete = d->n_complete, twice = d->twice;
    /* Overlap off: every bucket now, in bucket order (the same calls, so the same bits). A
     * bucket already queued (overlap was switched off mid-step) is not reduced twice. */
    for (int k = 0; k < d->nb; k++)
        if (d->b[k].pending == 0 && !d->b[k].queued) dt_ddp_enqueue(d, JOB_REDUCE, k);
    pthread_mutex_lock(&d->mu);
    while (d->n_done < d->q_tail) pthread_cond_wait(&d->done, &d->mu);
    /* The comm thread is idle: the others may still copy from this rank's buffer, and the
     * caller is about to change it (clipping, the next backward). */
    if (d->shared && d->err == DT_OK && (d->err = dt_comm_shared_fence(d->shared)) != DT_OK)
        snprintf(d->err_msg, sizeof d->err_msg, "ddp: %s", dt_last_error());
    dt_status st = d->err;
    char msg[sizeof d->err_msg];
    memcpy(msg, d->err_msg, sizeof msg);
    double comm = d->comm_s, comm_cpu = d->comm_cpu_s;
    size_t sent = d->sent;
    d->stats.frozen_gathered_bytes = d->fz_gathered;
    d->err = DT_OK;
    d->comm_s = 0, d->comm_cpu_s = 0, d->sent = 0;
    pthread_mutex_unlock(&d->mu);
    for (int k = 0; k < d->nb; k++) d->b[k].pending = d->b[k].n_params, d->b[k].queued = 0;
    d->n_complete = 0, d->twice = 0;

    double w = dt_ddp_now() - t0;
    d->stats.wait_s = w, d->stats.comm_s = comm, d->stats.comm_cpu_s = comm_cpu;
    d->stats.sent_bytes = sent * sizeof(float);
    d->stats.shared = d->shared != NULL;
    d->stats.wait_total_s += w, d->stats.comm_total_s += comm;
    d->stats.comm_cpu_total_s += comm_cpu;
    d->stats.steps++;
    if (st != DT_OK) return dt_error_set(st, "%s", msg);
    if (twice)
        return dt_error_set(DT_ERR_STATE,
                            "ddp wait: rank %d: a parameter's gradient was reported "
                            "twice (two backward passes without dt_ddp_wait; use "
                            "dt_ddp_set_enabled(d, 0) for accumulation steps)",
                            dt_comm_rank(d->c));
    for (int k = 0; d->stage >= 3 && !d->full && k < d->nb; k++)
        if (d->unit[k] != UNIT_RELEASED) /* would hold stale parameters after the update */
            return dt_error_set(DT_ERR_STATE,
                                "ddp wait: rank %d: parameter bucket %d is still gathered after "
                                "backward (ZeRO-3 schedule bookkeeping)",
                                dt_comm_rank(d->c), k);
    for (int u = 0; !d->fz_full && u < d->fz_n; u++)
        if (d->fz_state[u] != UNIT_RELEASED)
            return dt_error_set(DT_ERR_STATE,
                                "ddp wait: rank %d: frozen parameter unit %d is still gathered "
                                "after backward (sharded base schedule bookkeeping)",
                                dt_comm_rank(d->c), u);
    if (complete < d->nb)
        return dt_error_set(DT_ERR_STATE,
                            "ddp wait: rank %d: only %d of %d gradient buckets were completed by "
                            "backward (was dt_graph_backward run, with this graph?)",
                            dt_comm_rank(d->c), complete, d->nb);
    return DT_OK;
}

dt_status dt_ddp_broadcast_params(dt_ddp *d) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp broadcast_params: ddp is NULL");
    size_t n = 0, ns = 0;
    float *p = dt_graph_flat_param(d->g, &n);
    float *s = dt_graph_flat_state(d->g, &ns);
    dt_status st = DT_OK;
    if (n && p) st = dt_comm_broadcast(d->c, p, n * sizeof(float), 0);
    if (st == DT_OK && ns && s) st = dt_comm_broadcast(d->c, s, ns * sizeof(float), 0);
    if (st == DT_OK && d->stage >= 3) st = dt_ddp_release_params(d);
    return st;
}

dt_status dt_ddp_broadcast_state(dt_ddp *d) {
    if (!d) return dt_error_set(DT_ERR_INVALID, "ddp broadcast_state: ddp is NULL");
    size_t ns = 0;
    float *s = dt_graph_flat_state(d->g, &ns);
    return ns && s ? dt_comm_broadcast(d->c, s, ns * sizeof(float), 0) : DT_OK;
}

int dt_ddp_bucket_count(const dt_ddp *d) {
    return d ? d->nb : 0;
}

void dt_ddp_bucket_range(const dt_ddp *d, int i, size_t *lo, size_t *hi) {
    int ok = d && i >= 0 && i < d->nb;
    if (lo) *lo = ok ? d->b[i].lo : 0;
    if (hi) *hi = ok ? d->b[i].hi : 0;
}

void dt_ddp_get_stats(const dt_ddp *d, dt_ddp_stats *s) {
    if (!s) return;
    if (!d) {
        memset(s, 0, sizeof *s);
        return;
    }
    *s = d->stats;
}
