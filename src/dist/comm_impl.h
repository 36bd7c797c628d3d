/* Internal communicator interface: a small vtable per backend (single process, MPI; a GPU
 * communicator would be a third). comm.c checks arguments, applies DT_COMM_AVG and records
 * failures; a backend only moves and sums data. */
#ifndef DT_DIST_COMM_IMPL_H
#define DT_DIST_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/dist.h"

typedef struct dt_comm_ops {
    const char *name;
    /* buf [bytes] <- root's */
    dt_status (*broadcast)(dt_comm *c, void *buf, size_t bytes, int root);
    /* buf [n] <- sum over ranks, in place, with the algorithm c->algo */
    dt_status (*allreduce_f32)(dt_comm *c, float *buf, size_t n);
    dt_status (*allreduce_f64)(dt_comm *c, double *buf, size_t n);
    /* buf [n] <- bitwise OR over ranks, in place */
    dt_status (*allreduce_or)(dt_comm *c, uint64_t *buf, size_t n);
    /* send [size * shard] -> recv [shard] (sum of this rank's shard) */
    dt_status (*reduce_scatter)(dt_comm *c, const float *send, float *recv, size_t shard);
    /* send [shard] -> recv [size * shard]; send may be recv + rank * shard */
    dt_status (*allgather)(dt_comm *c, const float *send, float *recv, size_t shard);
    /* Variable counts (ZeRO buckets): send [sum counts] -> recv [counts[rank]], the sum of
     * this rank's block (blocks in rank order); buf [sum counts] in place, block r from rank r
     * (at displs[r]). Counts are ints: comm.c checks they fit. */
    dt_status (*reduce_scatterv)(dt_comm *c, const float *send, float *recv, const int *counts);
    dt_status (*allgatherv)(dt_comm *c, float *buf, const int *counts, const int *displs);
    dt_status (*barrier)(dt_comm *c);
    /* Optional (NULL: not offered; single process, a future GPU backend). A buffer that the
     * ranks of one host read from each other's memory (comm_shm.c, dt_comm_share in dist.h):
     * share leaves s->impl NULL, with c->share_note saying why, where it cannot be used. */
    dt_status (*share)(dt_comm_shared *s); /* sets s->impl, or leaves it NULL */
    /* buf [lo, hi) <- sum over ranks times mul (unless mul == 1), in place on every rank */
    dt_status (*allreduce_shared)(dt_comm_shared *s, size_t lo, size_t hi, float mul);
    dt_status (*shared_fence)(dt_comm_shared *s);
    void (*unshare)(dt_comm_shared *s);
    /* Releases the backend; finalize = 0 after an error (see dt_comm_close). */
    void (*destroy)(dt_comm *c, int finalize);
    /* 1 when the job may be ended from any thread now (MPI_Abort under MPI_THREAD_MULTIPLE:
     * the hang watchdog's handler runs on its own thread while another may be blocked in a
     * collective). NULL: never (only the process itself can end). */
    int (*abort_ok)(const dt_comm *c);
} dt_comm_ops;

typedef struct dt_watch dt_watch; /* the hang watchdog (watchdog.c) */
typedef struct dt_board dt_board; /* the local ranks' collective counts (board.c) */

struct dt_comm {
    const dt_comm_ops *ops;
    int rank, size, local_rank, local_size;
    dt_comm_algo algo;
    const char *thread_level;
    int *counts, *displs; /* [size] scratch of the range collectives, allocated at init */
    int failed; /* a collective failed: MPI_Finalize would wait for ranks that may be gone */
    char share_note[160]; /* how the last dt_comm_share went: which path, or why not shared */
    dt_watch *watch;      /* NULL: no timeout (dt_comm_set_timeout) */
    dt_board *board;      /* NULL: none (one process, or shared memory unavailable) */
    double timeout_s;
    long long step; /* dt_comm_set_step; -1: not set */
    void *impl;     /* backend state */
};

/* A shared buffer (dt_comm_share): the caller's buffer and the backend's state. */
struct dt_comm_shared {
    dt_comm *c;
    float *buf; /* [n] */
    size_t n;
    void *impl;
};

/* Backends fill c (ops, rank, size, local_*, thread_level, impl). */
dt_status dt_comm_single_open(dt_comm *c);
dt_status dt_comm_mpi_open(dt_comm *c, int *argc, char ***argv);
/* The hang watchdog (watchdog.c). comm.c brackets every collective with enter/leave (what:
 * a static phrase such as "all-reduce"); a caller that knows more names the unit around its
 * calls (ddp: "gradient bucket", 3; NULL clears). All are no-ops without a watchdog. final: from
 * here on the backend is being torn down, so the hang handler is told MPI_Abort is not safe. */
dt_status dt_watch_start(dt_comm *c, double timeout_s, long long step);
void dt_watch_stop(dt_comm *c);
void dt_watch_enter(dt_comm *c, const char *what);
void dt_watch_leave(dt_comm *c);
void dt_watch_unit(dt_comm *c, const char *unit, int index);
void dt_watch_set_step(dt_comm *c, long long step);
void dt_watch_final(dt_comm *c);

/* The collective board (board.c): local rank 0 creates it (*name, unique, into name[cap]),
 * the other local ranks attach by that name, then 0 unlinks it (all have it mapped); each rank
 * joins its slot. enter/leave bracket every collective (comm.c through dt_watch_enter/leave,
 * with or without a timeout, so the counts of all ranks stay comparable). describe: for the
 * watchdog's line, which local ranks have not reached this rank's current collective. All take
 * NULL (no board). */
dt_board *dt_board_create(char *name, size_t cap, int local_size);
dt_board *dt_board_attach(const char *name, int local_size, int local_rank);
void dt_board_unlink(const char *name);
void dt_board_join(dt_board *b, int rank);
void dt_board_close(dt_board *b);
void dt_board_enter(dt_board *b);
void dt_board_leave(dt_board *b);
void dt_board_describe(const dt_board *b, int world, const char *host, char *out, size_t n);

/* The name of the launcher variable found in the environment, or NULL. */
const char *dt_comm_launcher_env(void);

#endif
