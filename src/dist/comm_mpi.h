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

/* An MPI error code -> DT_ERR_IO with "comm OP: rank R of N: MPI error E: <MPI's string>". */
dt_status dt_mpi_fail(dt_comm *c, const char *op, int err);
/* buf [n] <- sum over ranks in place, our ring (see ring.c); the caller holds the lock. */
dt_status dt_mpi_ring_allreduce(dt_comm *c, dt_mpi *m, float *buf, size_t n);

#endif
