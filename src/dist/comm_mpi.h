/* State of the MPI communicator, shared by comm_mpi.c and the ring all-reduce (ring.c). */
#ifndef DT_DIST_COMM_MPI_H
#define DT_DIST_COMM_MPI_H

#include <mpi.h>
#include <pthread.h>
#include "dist/comm_impl.h"

/* Ring messages go in segments of this many floats (1 MiB): the received segment is added while
 * it is still in cache, and the scratch buffer stays small. */
#define DT_RING_SEG ((size_t)1 << 18)

typedef struct dt_mpi {
    MPI_Comm comm; /* duplicate of MPI_COMM_WORLD, errors return */
    int we_init;   /* we called MPI_Init_thread, so we finalize */
    int multiple;  /* MPI_THREAD_MULTIPLE; else calls are serialised by `lock` */
    pthread_mutex_t lock;
    float *scratch; /* [DT_RING_SEG] receive buffer of the ring */
} dt_mpi;

/* Under MPI_THREAD_SERIALIZED two threads must not be inside MPI at once. */
static inline void dt_mpi_lock(dt_mpi *m) {
    if (!m->multiple) pthread_mutex_lock(&m->lock);
}
static inline void dt_mpi_unlock(dt_mpi *m) {
    if (!m->multiple) pthread_mutex_unlock(&m->lock);
}

/* MPI_Allreduce in place on buf [n] elements of esz bytes over comm, in pieces whose counts fit
 * an int. The caller holds the lock. Returns an MPI error code. */
int dt_mpi_allreduce_pieces(MPI_Comm comm, void *buf, size_t n, size_t esz, MPI_Datatype t,
                            MPI_Op op);

/* Node-local shared buffers (comm_shm.c): the dt_comm_ops of the same names. */
dt_status dt_mpi_share(dt_comm_shared *s);
dt_status dt_mpi_allreduce_shared(dt_comm_shared *s, size_t lo, size_t hi, float mul);
dt_status dt_mpi_shared_fence(dt_comm_shared *s);
void dt_mpi_unshare(dt_comm_shared *s);

/* An MPI error code -> DT_ERR_IO with "comm OP: rank R of N: MPI error E: <MPI's string>". */
dt_status dt_mpi_fail(dt_comm *c, const char *op, int err);
/* buf [n] <- sum over ranks in place, our ring (see ring.c); the caller holds the lock. */
dt_status dt_mpi_ring_allreduce(dt_comm *c, dt_mpi *m, float *buf, size_t n);

#endif
