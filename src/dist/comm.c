/* The communicator's public face: backend choice, argument checks (done before any
 * communication, so every rank refuses a bad call the same way), averaging, failure state. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/comm_impl.h"

/* Variables that mpirun/mpiexec (Open MPI, MPICH's hydra) or srun set in every process they
 * start; a shell inside an sbatch allocation has SLURM_NTASKS but not SLURM_STEP_NUM_TASKS. */
static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", NULL};

const char *dt_comm_launcher_env(void) {
    for (int i = 0; launcher_vars[i]; i++)
        if (getenv(launcher_vars[i])) return launcher_vars[i];
    return NULL;
}

int dt_comm_have_mpi(void) {
#ifdef DT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

dt_status dt_comm_open(const char *backend, int *argc, char ***argv, dt_comm **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "comm init: out is NULL");
    *out = NULL;
    if (!backend) backend = "auto";
    int want_mpi;
    const char *env = dt_comm_launcher_env();
    if (!strcmp(backend, "auto")) {
        want_mpi = env != NULL;
        if (want_mpi && !dt_comm_have_mpi())
            return dt_error_set(DT_ERR_STATE,
                                "comm init: started by an MPI launcher (%s is set) but dtrain was "
                                "built without MPI; install libopenmpi-dev and rebuild, or run "
                                "without mpirun",
                                env);
    } else if (!strcmp(backend, "mpi")) {
        want_mpi = 1;
        if (!dt_comm_have_mpi())
            return dt_error_set(DT_ERR_STATE, "comm init: dist.backend=mpi but dtrain was built "
                                              "without MPI (install libopenmpi-dev and rebuild)");
        if (!env)
            return dt_error_set(DT_ERR_STATE,
                                "comm init: dist.backend=mpi but no MPI launcher started this "
                                "process (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, "
                                "PMI_SIZE, SLURM_STEP_NUM_TASKS is set); run it under "
                                "'mpirun -np N' or 'srun', or set dist.backend=single");
    } else if (!strcmp(backend, "single")) {
        want_mpi = 0;
    } else {
        return dt_error_set(DT_ERR_INVALID,
                            "comm init: unknown backend '%s' (expected auto, mpi or single)",
                            backend);
    }
    dt_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_error_set(DT_ERR_NOMEM, "comm init: out of memory");
    dt_status st = want_mpi ? dt_comm_mpi_open(c, argc, argv) : dt_comm_single_open(c);
    if (st != DT_OK) {
        free(c);
        return st;
    }
    c->counts = calloc((size_t)c->size, sizeof(int));
    c->displs = calloc((size_t)c->size, sizeof(int));
    if (!c->counts || !c->displs) {
        c->ops->destroy(c, 1);
        dt_board_close(c->board);
        free(c->counts), free(c->displs), free(c);
        return dt_error_set(DT_ERR_NOMEM, "comm init: out of memory");
    }
    const char *algo = getenv("DT_COMM_ALGO");
    if (algo && *algo) {
        if (!strcmp(algo, "ring")) {
            c->algo = DT_COMM_ALGO_RING;
        } else if (strcmp(algo, "native")) {
            c->ops->destroy(c, 1);
            dt_board_close(c->board);
            free(c->counts), free(c->displs), free(c);
            return dt_error_set(DT_ERR_INVALID,
                                "comm init: DT_COMM_ALGO='%s' (expected native or ring)", algo);
        }
    }
    c->step = -1;
    *out = c;
    return DT_OK;
}

void dt_comm_close(dt_comm *c) {
    if (!c) return;
    /* MPI_Finalize waits for every rank: a peer that is stuck would keep this one here */
    dt_watch_enter(c, "MPI_Finalize");
    dt_watch_final(c);
    c->ops->destroy(c, !c->failed);
    dt_watch_leave(c);
    dt_watch_stop(c);
    dt_board_close(c->board);
    free(c->counts), free(c->displs);
    free(c);
}

dt_status dt_comm_set_timeout(dt_comm *c, double seconds) {
    if (!c) return dt_error_set(DT_ERR_INVALID, "comm set_timeout: comm is NULL");
    if (!(seconds >= 0) || seconds > 1e9)
        return dt_error_set(DT_ERR_RANGE,
                            "comm set_timeout: %g s (expected 0 = off, or a positive number of "
                            "seconds)",
                            seconds);
    dt_watch_stop(c);
    c->timeout_s = seconds;
    /* one process never waits for another */
    if (seconds == 0 || c->size < 2) return DT_OK;
    return dt_watch_start(c, seconds, c->step);
}

double dt_comm_get_timeout(const dt_comm *c) {
    return c ? c->timeout_s : 0;
}

void dt_comm_set_step(dt_comm *c, int64_t step) {
    if (!c) return;
    c->step = (long long)step;
    dt_watch_set_step(c, c->step);
}

void dt_comm_set_failed(dt_comm *c) {
    if (c) c->failed = 1;
}

int dt_comm_rank(const dt_comm *c) {
    return c ? c->rank : 0;
}
int dt_comm_size(const dt_comm *c) {
    return c ? c->size : 1;
}
int dt_comm_local_rank(const dt_comm *c) {
    return c ? c->local_rank : 0;
}
int dt_comm_local_size(const dt_comm *c) {
    return c ? c->local_size : 1;
}
const char *dt_comm_backend(const dt_comm *c) {
    return c ? c->ops->name : "none";
}
const char *dt_comm_thread_level(const dt_comm *c) {
    return c ? c->thread_level : "-";
}

dt_status dt_comm_set_algo(dt_comm *c, dt_comm_algo algo) {
    if (!c) return dt_error_set(DT_ERR_INVALID, "comm set_algo: comm is NULL");
    if (algo != DT_COMM_ALGO_NATIVE && algo != DT_COMM_ALGO_RING)
        return dt_error_set(DT_ERR_INVALID, "comm set_algo: unknown algorithm %d", (int)algo);
    c->algo = algo;
    return DT_OK;
}

dt_comm_algo dt_comm_get_algo(const dt_comm *c) {
    return c ? c->algo : DT_COMM_ALGO_NATIVE;
}

size_t dt_comm_shard_size(size_t n, int world) {
    if (world < 1) world = 1;
    size_t s = (n + (size_t)world - 1) / (size_t)world;
    return (s + 15) & ~(size_t)15;
}

/* Shared checks; the message names the op and the rank. */
static dt_status check(dt_comm *c, const char *op, const void *p, size_t n) {
    if (!c) return dt_error_set(DT_ERR_INVALID, "comm %s: comm is NULL", op);
    if (n && !p)
        return dt_error_set(DT_ERR_INVALID, "comm %s: rank %d of %d: NULL buffer of %zu elements",
                            op, c->rank, c->size, n);
    return DT_OK;
}

/* Every backend call is bracketed: begin(c, what) before, done(c, st) after (the watchdog's
 * view of this rank; the failure state). */
static void begin(dt_comm *c, const char *what) {
    dt_watch_enter(c, what);
}

static dt_status done(dt_comm *c, dt_status st) {
    dt_watch_leave(c);
    if (st != DT_OK) c->failed = 1;
    return st;
}

void dt_comm_watch_begin(dt_comm *c, const char *what) {
    if (c) begin(c, what);
}

void dt_comm_watch_end(dt_comm *c) {
    if (c) done(c, DT_OK);
}

/* buf [n] *= s, for DT_COMM_AVG. A multiply, like torch DDP's division by world size would be
 * for powers of two; for other sizes it differs from a division in the last bit at most. */
static void scale(float *buf, size_t n, float s) {
    for (size_t i = 0; i < n; i++) buf[i] *= s;
}

dt_status dt_comm_broadcast(dt_comm *c, void *buf, size_t bytes, int root) {
    dt_status st = check(c, "broadcast", buf, bytes);
    if (st != DT_OK) return st;
    if (root < 0 || root >= c->size)
        return dt_error_set(DT_ERR_RANGE, "comm broadcast: rank %d of %d: root %d out of range",
                            c->rank, c->size, root);
    if (!bytes) return DT_OK;
    begin(c, "broadcast");
    return done(c, c->ops->broadcast(c, buf, bytes, root));
}

dt_status dt_comm_allreduce(dt_comm *c, float *buf, size_t n, unsigned flags) {
    dt_status st = check(c, "allreduce", buf, n);
    if (st != DT_OK) return st;
    if (!n) return DT_OK;
    begin(c, "all-reduce");
    if ((st = done(c, c->ops->allreduce_f32(c, buf, n))) != DT_OK) return st;
    if ((flags & DT_COMM_AVG) && c->size > 1) scale(buf, n, 1.0f / (float)c->size);
    return DT_OK;
}

dt_status dt_comm_allreduce_f64(dt_comm *c, double *buf, size_t n) {
    dt_status st = check(c, "allreduce_f64", buf, n);
    if (st != DT_OK) return st;
    if (!n) return DT_OK;
    begin(c, "all-reduce (f64 sum)");
    return done(c, c->ops->allreduce_f64(c, buf, n));
}

dt_status dt_comm_allreduce_or(dt_comm *c, uint64_t *buf, size_t n) {
    dt_status st = check(c, "allreduce_or", buf, n);
    if (st != DT_OK) return st;
    if (!n) return DT_OK;
    begin(c, "all-reduce (bitwise OR)");
    return done(c, c->ops->allreduce_or(c, buf, n));
}

dt_status dt_comm_reduce_scatter(dt_comm *c, const float *send, float *recv, size_t shard,
                                 unsigned flags) {
    dt_status st = check(c, "reduce_scatter", send, shard);
    if (st == DT_OK) st = check(c, "reduce_scatter", recv, shard);
    if (st != DT_OK) return st;
    if (!shard) return DT_OK;
    const float *se = send + (size_t)c->size * shard, *re = recv + shard;
    if (recv < se && send < re)
        return dt_error_set(DT_ERR_INVALID,
                            "comm reduce_scatter: rank %d of %d: recv overlaps send", c->rank,
                            c->size);
    begin(c, "reduce-scatter");
    if ((st = done(c, c->ops->reduce_scatter(c, send, recv, shard))) != DT_OK) return st;
    if ((flags & DT_COMM_AVG) && c->size > 1) scale(recv, shard, 1.0f / (float)c->size);
    return DT_OK;
}

dt_status dt_comm_allgather(dt_comm *c, const float *send, float *recv, size_t shard) {
    dt_status st = check(c, "allgather", send, shard);
    if (st == DT_OK) st = check(c, "allgather", recv, shard);
    if (st != DT_OK) return st;
    if (!shard) return DT_OK;
    const float *mine = recv + (size_t)c->rank * shard;
    if (send != mine && send + shard > recv && send < recv + (size_t)c->size * shard)
        return dt_error_set(DT_ERR_INVALID,
                            "comm allgather: rank %d of %d: send overlaps recv but is not this "
                            "rank's slot (recv + rank * shard)",
                            c->rank, c->size);
    begin(c, "all-gather");
    return done(c, c->ops->allgather(c, send, recv, shard));
}

/* counts[r] = |[lo, hi) ∩ shard r| over the padded layout, displs[r] relative to lo. */
static dt_status range_counts(dt_comm *c, const char *op, size_t lo, size_t hi, size_t shard) {
    if (lo > hi || (c->size > 1 && shard == 0) || hi > (size_t)c->size * shard)
        return dt_error_set(DT_ERR_RANGE,
                            "comm %s: rank %d of %d: range [%zu, %zu) is not within %d shards of "
                            "%zu",
                            op, c->rank, c->size, lo, hi, c->size, shard);
    if (hi - lo > INT_MAX)
        return dt_error_set(DT_ERR_RANGE,
                            "comm %s: rank %d of %d: range of %zu elements exceeds MPI's int "
                            "count",
                            op, c->rank, c->size, hi - lo);
    for (int r = 0; r < c->size; r++) {
        size_t a = (size_t)r * shard, b = a + shard;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        c->counts[r] = b > a ? (int)(b - a) : 0;
        c->displs[r] = b > a ? (int)(a - lo) : 0;
    }
    return DT_OK;
}

dt_status dt_comm_reduce_scatter_range(dt_comm *c, const float *send, float *recv, size_t lo,
                                       size_t hi, size_t shard, unsigned flags) {
    dt_status st = check(c, "reduce_scatter_range", send, hi > lo);
    if (st == DT_OK) st = range_counts(c, "reduce_scatter_range", lo, hi, shard);
    if (st != DT_OK) return st;
    size_t mine = (size_t)c->counts[c->rank];
    if (mine && !recv)
        return dt_error_set(DT_ERR_INVALID,
                            "comm reduce_scatter_range: rank %d of %d: recv is NULL", c->rank,
                            c->size);
    if (mine && recv != send && recv < send + (hi - lo) && send < recv + mine)
        return dt_error_set(DT_ERR_INVALID,
                            "comm reduce_scatter_range: rank %d of %d: recv overlaps send", c->rank,
                            c->size);
    if (hi == lo) return DT_OK;
    float none;
    if (!recv) recv = &none; /* this rank receives 0 elements */
    begin(c, "reduce-scatter");
    if ((st = done(c, c->ops->reduce_scatterv(c, send, recv, c->counts))) != DT_OK) return st;
    if ((flags & DT_COMM_AVG) && c->size > 1) scale(recv, mine, 1.0f / (float)c->size);
    return DT_OK;
}

dt_status dt_comm_allgather_range(dt_comm *c, float *buf, size_t lo, size_t hi, size_t shard) {
    dt_status st = check(c, "allgather_range", buf, hi > lo);
    if (st == DT_OK) st = range_counts(c, "allgather_range", lo, hi, shard);
    if (st != DT_OK || hi == lo) return st;
    begin(c, "all-gather");
    return done(c, c->ops->allgatherv(c, buf, c->counts, c->displs));
}

dt_status dt_comm_allgather_blocks(dt_comm *c, float *buf, const size_t *counts) {
    dt_status st = check(c, "allgather_blocks", counts, 1);
    if (st != DT_OK) return st;
    size_t sum = 0;
    for (int r = 0; r < c->size; r++) {
        if (counts[r] > INT_MAX - sum)
            return dt_error_set(DT_ERR_RANGE,
                                "comm allgather_blocks: rank %d of %d: blocks of more than %d "
                                "elements in all exceed MPI's int count",
                                c->rank, c->size, INT_MAX);
        c->counts[r] = (int)counts[r];
        c->displs[r] = (int)sum;
        sum += counts[r];
    }
    if ((st = check(c, "allgather_blocks", buf, sum)) != DT_OK || !sum) return st;
    begin(c, "all-gather");
    return done(c, c->ops->allgatherv(c, buf, c->counts, c->displs));
}

dt_status dt_comm_barrier(dt_comm *c) {
    if (!c) return dt_error_set(DT_ERR_INVALID, "comm barrier: comm is NULL");
    begin(c, "barrier");
    return done(c, c->ops->barrier(c));
}

/* ---- shared buffers (comm_shm.c) ---------------------------------------------------------- */

dt_status dt_comm_share(dt_comm *c, float *buf, size_t n, dt_comm_shared **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "comm share: out is NULL");
    *out = NULL;
    dt_status st = check(c, "share", buf, n);
    if (st != DT_OK) return st;
    snprintf(c->share_note, sizeof c->share_note, "MPI all-reduce (%s)",
             c->size < 2 ? "one process" : "the backend has no shared buffers");
    if (c->size < 2 || !c->ops->share || !n) return DT_OK;
    dt_comm_shared *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "comm share: out of memory");
    s->c = c, s->buf = buf, s->n = n;
    begin(c, "shared-buffer setup");
    st = done(c, c->ops->share(s));
    if (st != DT_OK || !s->impl) {
        free(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

const char *dt_comm_share_note(const dt_comm *c) {
    return c && c->share_note[0] ? c->share_note : "MPI all-reduce (not shared)";
}

dt_status dt_comm_allreduce_shared(dt_comm_shared *s, size_t lo, size_t hi, unsigned flags) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "comm allreduce_shared: handle is NULL");
    dt_comm *c = s->c;
    if (lo > hi || hi > s->n)
        return dt_error_set(DT_ERR_RANGE,
                            "comm allreduce_shared: rank %d of %d: range [%zu, %zu) is not within "
                            "the shared buffer of %zu elements",
                            c->rank, c->size, lo, hi, s->n);
    if (hi == lo) return DT_OK;
    /* The backend scales its own slice before the others copy it: afterwards they may still be
     * reading this rank's buffer. */
    float mul = (flags & DT_COMM_AVG) && c->size > 1 ? 1.0f / (float)c->size : 1.0f;
    begin(c, "all-reduce (shared memory)");
    return done(c, c->ops->allreduce_shared(s, lo, hi, mul));
}

dt_status dt_comm_shared_fence(dt_comm_shared *s) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "comm shared_fence: handle is NULL");
    begin(s->c, "shared-memory fence");
    return done(s->c, s->c->ops->shared_fence(s));
}

void dt_comm_unshare(dt_comm_shared *s) {
    if (!s) return;
    s->c->ops->unshare(s);
    free(s);
}
