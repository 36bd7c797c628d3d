/* The MPI communicator (Open MPI or MPICH). Works on a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN, so a failed call comes back as a dt_status whose message names the op, the
 * rank and MPI's error string instead of aborting the job from inside MPI. */
#include "dist/comm_impl.h"

#ifndef DT_HAVE_MPI

dt_status dt_comm_mpi_open(dt_comm *c, int *argc, char ***argv) {
    return dt_error_set(DT_ERR_STATE, "comm init: dtrain was built without MPI");
}

#else

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "dist/comm_mpi.h"
#include "dtrain/runtime.h"

/* MPI counts are ints: larger buffers go in pieces of this many elements. */
#define MPI_PIECE ((size_t)1 << 30)

static dt_mpi *state(dt_comm *c) {
    return (dt_mpi *)c->impl;
}

dt_status dt_mpi_fail(dt_comm *c, const char *op, int err) {
    char s[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, s, &len) != MPI_SUCCESS) len = 0;
    s[len] = 0;
    return dt_error_set(DT_ERR_IO, "comm %s: rank %d of %d: MPI error %d: %s", op, c->rank, c->size,
                        err, len ? s : "(no message)");
}

static dt_status mpi_broadcast(dt_comm *c, void *buf, size_t bytes, int root) {
    dt_mpi *m = state(c);
    int err = MPI_SUCCESS;
    dt_mpi_lock(m);
    for (size_t off = 0; off < bytes && err == MPI_SUCCESS; off += MPI_PIECE) {
        size_t k = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        err = MPI_Bcast((char *)buf + off, (int)k, MPI_BYTE, root, m->comm);
    }
    dt_mpi_unlock(m);
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, "broadcast", err);
}

/* MPI_Allreduce in place on buf [n] elements of esz bytes, in pieces of MPI_PIECE (counts are
 * ints). The caller holds the lock. */
int dt_mpi_allreduce_pieces(MPI_Comm comm, void *buf, size_t n, size_t esz, MPI_Datatype t,
                            MPI_Op op) {
    int err = MPI_SUCCESS;
    for (size_t off = 0; off < n && err == MPI_SUCCESS; off += MPI_PIECE) {
        size_t k = n - off < MPI_PIECE ? n - off : MPI_PIECE;
        err = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * esz, (int)k, t, op, comm);
    }
    return err;
}

static dt_status mpi_allreduce_f32(dt_comm *c, float *buf, size_t n) {
    dt_mpi *m = state(c);
    dt_mpi_lock(m);
    dt_status st = DT_OK;
    if (c->algo == DT_COMM_ALGO_RING) {
        st = dt_mpi_ring_allreduce(c, m, buf, n);
    } else {
        int err = dt_mpi_allreduce_pieces(m->comm, buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM);
        if (err != MPI_SUCCESS) st = dt_mpi_fail(c, "allreduce", err);
    }
    dt_mpi_unlock(m);
    return st;
}

/* The same under the lock, as a dt_status naming op. */
static dt_status allreduce_locked(dt_comm *c, void *buf, size_t n, size_t esz, MPI_Datatype t,
                                  MPI_Op op, const char *name) {
    dt_mpi *m = state(c);
    dt_mpi_lock(m);
    int err = dt_mpi_allreduce_pieces(m->comm, buf, n, esz, t, op);
    dt_mpi_unlock(m);
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, name, err);
}

static dt_status mpi_allreduce_f64(dt_comm *c, double *buf, size_t n) {
    return allreduce_locked(c, buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM, "allreduce_f64");
}

static dt_status mpi_allreduce_or(dt_comm *c, uint64_t *buf, size_t n) {
    return allreduce_locked(c, buf, n, sizeof *buf, MPI_UINT64_T, MPI_BOR, "allreduce_or");
}

/* send [size * shard] -> recv [shard]. The shard is one MPI count, so it must fit an int. */
static dt_status mpi_reduce_scatter(dt_comm *c, const float *send, float *recv, size_t shard) {
    if (shard > INT_MAX)
        return dt_error_set(DT_ERR_RANGE,
                            "comm reduce_scatter: rank %d of %d: shard of %zu elements exceeds "
                            "MPI's int count",
                            c->rank, c->size, shard);
    dt_mpi *m = state(c);
    dt_mpi_lock(m);
    int err = MPI_Reduce_scatter_block(send, recv, (int)shard, MPI_FLOAT, MPI_SUM, m->comm);
    dt_mpi_unlock(m);
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, "reduce_scatter", err);
}

/* send [shard] -> recv [size * shard] */
static dt_status mpi_allgather(dt_comm *c, const float *send, float *recv, size_t shard) {
    if (shard > INT_MAX)
        return dt_error_set(DT_ERR_RANGE,
                            "comm allgather: rank %d of %d: shard of %zu elements exceeds MPI's "
                            "int count",
                            c->rank, c->size, shard);
    dt_mpi *m = state(c);
    const void *s = send == recv + (size_t)c->rank * shard ? MPI_IN_PLACE : (const void *)send;
    dt_mpi_lock(m);
    int err = MPI_Allgather(s, (int)shard, MPI_FLOAT, recv, (int)shard, MPI_FLOAT, m->comm);
    dt_mpi_unlock(m);
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, "allgather", err);
}

static dt_status mpi_reduce_scatterv(dt_comm *c, const float *send, float *recv,
                                     const int *counts) {
    dt_mpi *m = state(c);
    dt_mpi_lock(m);
    /* recv == send: in place, the result lands at the start of the buffer */
    const void *sb = send == recv ? MPI_IN_PLACE : (const void *)send;
    int err = MPI_Reduce_scatter(sb, recv, counts, MPI_FLOAT, MPI_SUM, m->comm);
    dt_mpi_unlock(m);
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, "reduce_scatter_range", err);
}

static dt_status mpi_allgatherv(dt_comm *c, float *buf, const int *counts, const int *displs) {
    dt_mpi *m = state(c);
    dt_mpi_lock(m);
    int err =
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, m->comm);
    dt_mpi_unlock(m);
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, "allgather_range", err);
}

/* A rank that waits here (for a slower rank, for rank 0's checkpoint) sleeps rather than spin:
 * Open MPI's MPI_Barrier polls at full speed, a core's worth of CPU taken from whatever else
 * runs there (the other workers of a host, our own communication thread). MPI_Ibarrier, then
 * MPI_Test with 20 us sleeps after the first 32 polls; the lock is held per call only, so the
 * communication thread can go on meanwhile. */
static dt_status mpi_barrier(dt_comm *c) {
    dt_mpi *m = state(c);
    MPI_Request rq;
    dt_mpi_lock(m);
    int err = MPI_Ibarrier(m->comm, &rq), done = 0;
    dt_mpi_unlock(m);
    for (int k = 0; err == MPI_SUCCESS && !done; k++) {
        if (k >= 32) nanosleep(&(struct timespec){0, 20000}, NULL);
        dt_mpi_lock(m);
        err = MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        dt_mpi_unlock(m);
    }
    return err == MPI_SUCCESS ? DT_OK : dt_mpi_fail(c, "barrier", err);
}

static void mpi_destroy(dt_comm *c, int finalize) {
    dt_mpi *m = state(c);
    if (!m) return;
    int fin = 0;
    MPI_Finalized(&fin);
    /* After an error a peer may be dead or blocked in a collective: freeing the communicator and
     * MPI_Finalize could wait for it forever. Leave both to process exit. */
    if (finalize && !fin) {
        MPI_Comm_free(&m->comm);
        if (m->we_init) MPI_Finalize();
    }
    if (!m->multiple) pthread_mutex_destroy(&m->lock);
    free(m->scratch);
    free(m);
    c->impl = NULL;
}

/* The collective board of this host's ranks (board.c): local rank 0 creates it and broadcasts
 * its name; once every local rank has mapped it (the barrier), the name is unlinked. A rank that
 * cannot map it goes without (its watchdog line then names no rank); the collectives here are
 * the same on every rank either way. */
static int open_board(dt_comm *c, MPI_Comm local) {
    char name[64] = "";
    if (c->local_rank == 0) c->board = dt_board_create(name, sizeof name, c->local_size);
    if (c->local_rank == 0 && !c->board) name[0] = '\0';
    int err = MPI_Bcast(name, sizeof name, MPI_CHAR, 0, local);
    if (err == MPI_SUCCESS && c->local_rank != 0)
        c->board = dt_board_attach(name, c->local_size, c->local_rank);
    dt_board_join(c->board, c->rank);
    if (err == MPI_SUCCESS) err = MPI_Barrier(local);
    if (c->local_rank == 0) dt_board_unlink(name);
    return err;
}

/* For the hang handler (dt_comm_set_hang_handler): MPI_Abort from the watchdog thread while
 * another thread is blocked in a collective is allowed under MPI_THREAD_MULTIPLE only; under
 * SERIALIZED no other thread may enter MPI. */
static int mpi_abort_ok(const dt_comm *c) {
    const dt_mpi *m = c->impl;
    return m && m->multiple;
}

static const dt_comm_ops mpi_ops = {
    .name = "mpi",
    .broadcast = mpi_broadcast,
    .allreduce_f32 = mpi_allreduce_f32,
    .allreduce_f64 = mpi_allreduce_f64,
    .allreduce_or = mpi_allreduce_or,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .reduce_scatterv = mpi_reduce_scatterv,
    .allgatherv = mpi_allgatherv,
    .barrier = mpi_barrier,
    .share = dt_mpi_share,
    .allreduce_shared = dt_mpi_allreduce_shared,
    .shared_fence = dt_mpi_shared_fence,
    .unshare = dt_mpi_unshare,
    .destroy = mpi_destroy,
    .abort_ok = mpi_abort_ok,
};

dt_status dt_comm_mpi_open(dt_comm *c, int *argc, char ***argv) {
    int inited = 0, fin = 0, provided = 0;
    MPI_Finalized(&fin);
    if (fin) return dt_error_set(DT_ERR_STATE, "comm init: MPI was already finalized");
    /* Open MPI keeps freed scratch buffers of large messages only if malloc does not hand them
     * back to the OS; otherwise every all-reduce above ~32 MiB pays first-touch page faults
     * (measured: 5-6 GB/s fell to 0.3 GB/s). */
    dt_runtime_tune_malloc();
    MPI_Initialized(&inited);
    int we_init = !inited;
    if (we_init) {
        /* A rank runs its compute threads plus our communication thread, which waits inside
         * blocking collectives. Open MPI busy-polls there unless it thinks the node is
         * oversubscribed, taking a core away from backward: measured with 2 ranks on 2 cores,
         * 110 ms/step waiting instead of 0.6. Yielding costs microseconds of latency. Only the
         * default: a value set by the user (environment or mpirun --mca) wins. */
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        /* DT_MPI_THREAD=serialized asks for less (MULTIPLE makes some MPI builds lock every
         * call; it also lets the tests cover the serialised path). */
        const char *lv = getenv("DT_MPI_THREAD");
        int want = lv && !strcmp(lv, "serialized") ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
        int err = MPI_Init_thread(argc, argv, want, &provided);
        if (err != MPI_SUCCESS)
            return dt_error_set(DT_ERR_STATE,
                                "comm init: MPI_Init_thread failed (error %d); is "
                                "the MPI runtime installed and the job launched "
                                "with mpirun?",
                                err);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        /* A communication thread needs at least SERIALIZED; fail here, not mid-training. */
        if (we_init) MPI_Finalize();
        return dt_error_set(DT_ERR_STATE,
                            "comm init: the MPI library offers thread level %d only; dtrain's "
                            "communication thread needs MPI_THREAD_SERIALIZED or higher",
                            provided);
    }
    dt_mpi *m = calloc(1, sizeof *m);
    if (!m) return dt_error_set(DT_ERR_NOMEM, "comm init: out of memory");
    m->we_init = we_init;
    m->multiple = provided >= MPI_THREAD_MULTIPLE;
    if (!m->multiple) pthread_mutex_init(&m->lock, NULL);
    c->impl = m;
    c->ops = &mpi_ops;
    c->thread_level = m->multiple ? "multiple" : "serialized";
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    MPI_Comm local = MPI_COMM_NULL;
    if (err == MPI_SUCCESS) err = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    if (err == MPI_SUCCESS) err = MPI_Comm_rank(m->comm, &c->rank);
    if (err == MPI_SUCCESS) err = MPI_Comm_size(m->comm, &c->size);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    if (err == MPI_SUCCESS) err = MPI_Comm_rank(local, &c->local_rank);
    if (err == MPI_SUCCESS) err = MPI_Comm_size(local, &c->local_size);
    if (err == MPI_SUCCESS && c->size > 1) err = open_board(c, local);
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    if (err == MPI_SUCCESS && !(m->scratch = malloc(DT_RING_SEG * sizeof(float)))) {
        dt_board_close(c->board), c->board = NULL;
        mpi_destroy(c, 1);
        return dt_error_set(DT_ERR_NOMEM, "comm init: out of memory");
    }
    if (err != MPI_SUCCESS) {
        dt_status st = dt_mpi_fail(c, "init", err);
        dt_board_close(c->board), c->board = NULL;
        mpi_destroy(c, 0);
        return st;
    }
    memset(m->scratch, 0, DT_RING_SEG * sizeof(float)); /* fault the pages in now */
    return DT_OK;
}

#endif
