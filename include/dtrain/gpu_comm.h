/* Gradient all-reduce between ranks that train on devices (train.device=cuda, one process per
 * GPU; docs/gpu.md, docs/distributed.md).
 *
 *   dt_gpu_comm *gc;  dt_gpu_comm_open(comm, device, DT_GPU_COMM_AUTO, n, &gc);  // collective
 *   each step, after backward:  dt_gpu_comm_allreduce(gc, grad, n, 0, stream);    // every rank
 *   dt_gpu_comm_close(gc);
 *
 * Two ways (dist.gpu_comm):
 *   host  the device buffer [n] f32 is copied on the stream into a pinned host buffer [n], the
 *         stream synchronised, the host buffer summed over ranks with dt_comm_allreduce (the
 *         communicator of dtrain/dist.h: MPI, or the single process) and copied back on the
 *         stream. The sum is the communicator's, so the bits are those of the CPU ranks' DDP
 *         for the same f32 gradients (MPI_Allreduce over the whole buffer instead of buckets:
 *         the same bits for 2 ranks; with more, MPI may pick another algorithm by size).
 *   nccl  NCCL, loaded at run time (dlopen of libnccl.so.2: dtrain neither links nor needs it):
 *         rank 0 makes the unique id, the communicator broadcasts it, every rank joins
 *         (ncclCommInitRank on its device) and the all-reduce runs on the stream, without a
 *         host round trip. NCCL sums in its own order (ring or tree): the bits can differ from
 *         the host path's in the last place.
 *   auto  nccl when it loads on every rank and every rank of a host has its own GPU (local
 *         ranks <= visible devices; NCCL refuses two ranks on one GPU), else host.
 * The choice is agreed: every rank takes the same way (an OR over ranks of what each found).
 * dt_gpu_comm_note says which and why, e.g. "host (2 ranks share 1 GPU)".
 *
 * A CPU device (dt_device cpu) takes the host way: its "pinned" buffer is plain memory and its
 * streams complete at once (what the tests without a GPU use, and what the CPU ranks of a job
 * with GPU ranks run: every rank then takes the host way, the same collective). */
#ifndef DTRAIN_GPU_COMM_H
#define DTRAIN_GPU_COMM_H

#include <stddef.h>
#include "dtrain/device.h"
#include "dtrain/dist.h"
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dist.gpu_comm's values, in the config's order (DT_CFG_GPU_COMM_* in dtrain/config.h). */
typedef enum dt_gpu_comm_kind {
    DT_GPU_COMM_AUTO = 0,
    DT_GPU_COMM_NCCL = 1,
    DT_GPU_COMM_HOST = 2
} dt_gpu_comm_kind;

/* What the choice depends on, as seen by all ranks together. */
typedef struct dt_gpu_comm_facts {
    int cuda;             /* 1: the ranks train on CUDA devices (0: the CPU device) */
    int nccl_ok;          /* 1: NCCL loaded on every rank */
    const char *nccl_why; /* when not: why (this rank's dlopen error, or "on another rank") */
    int ranks;            /* world size */
    int local_ranks;      /* the most ranks on one host */
    int devices;          /* the fewest CUDA devices a host's ranks see */
    int by_index;         /* 1: some rank of a host with several was given its GPU by index
                           * (train.device=cuda:N), not by its local rank: ranks may share one */
    int cpu_ranks;        /* 1: some rank trains on the CPU device (a job of both kinds: every
                           * rank takes the host way, which the CPU ranks share) */
} dt_gpu_comm_facts;

/* The way for `want` given the facts (no communication; the tests call it directly): *out is
 * NCCL or HOST, note[n] says why ("nccl (2 ranks, one GPU each)", "host (2 ranks share 1 GPU)",
 * "host (NCCL not loaded: ...)", "host (dist.gpu_comm=host)", "host (the CPU device)", "host
 * (GPU and CPU ranks)").
 * An explicit nccl that cannot work is an error naming dist.gpu_comm and why. */
dt_status dt_gpu_comm_choose(dt_gpu_comm_kind want, const dt_gpu_comm_facts *f,
                             dt_gpu_comm_kind *out, char *note, size_t n);

typedef struct dt_gpu_comm dt_gpu_comm;

/* Collective over c: the facts are gathered and agreed, the way chosen and set up for buffers
 * of up to n floats on device d (host: a pinned buffer of n floats; nccl: the communicator). */
dt_status dt_gpu_comm_open(dt_comm *c, dt_device d, dt_gpu_comm_kind want, size_t n,
                           dt_gpu_comm **out);
/* buf [count] f32 on the device <- the sum over ranks (flags DT_COMM_AVG: times 1/size), issued
 * on stream s of the device; count <= the n given to open. Every rank calls it in the same order
 * with the same count. host: returns after the sum, the copy back queued on s; nccl: returns
 * once the stream has done the all-reduce (the host waits for it under the hang watchdog). */
dt_status dt_gpu_comm_allreduce(dt_gpu_comm *gc, float *buf, size_t count, unsigned flags,
                                dt_stream *s);
/* Seconds the host has waited for the exchange in dt_gpu_comm_allreduce so far, from the point
 * the stream reached the call (backward done) to the sum being there: the copy out, the
 * reduction (host) or NCCL's all-reduce (nccl). Nothing of it overlaps backward, so it is the
 * exposed communication of the trainer's comm-wait. */
double dt_gpu_comm_wait_s(const dt_gpu_comm *gc);
dt_gpu_comm_kind dt_gpu_comm_kind_of(const dt_gpu_comm *gc);
const char *dt_gpu_comm_note(const dt_gpu_comm *gc); /* "host (2 ranks share 1 GPU)" */
void dt_gpu_comm_close(dt_gpu_comm *gc);

/* ---- NCCL loaded at run time (src/device/cuda_nccl.c; refused in builds without CUDA) ---- */

typedef struct dt_nccl dt_nccl;
#define DT_NCCL_ID_BYTES 128 /* ncclUniqueId */

/* Loads libnccl.so.2 once per process (thread-safe); 1 when usable, else 0 and why[n] says
 * why (the loader's message, or "built without CUDA"). DT_NCCL_LIB names another file. */
int dt_nccl_load(char *why, size_t n);
/* Rank 0: a new unique id into id[DT_NCCL_ID_BYTES]. */
dt_status dt_nccl_unique_id(void *id);
/* Joins the NCCL communicator of `ranks` ranks with this id as `rank`, on device d (CUDA).
 * Collective: every rank calls it. */
dt_status dt_nccl_open(const void *id, int ranks, int rank, dt_device d, dt_nccl **out);
/* buf [count] f32 on d <- the sum over ranks (avg: the mean, NCCL's ncclAvg), queued on s. */
dt_status dt_nccl_allreduce(dt_nccl *x, float *buf, size_t count, int avg, dt_stream *s);
void dt_nccl_close(dt_nccl *x);

#ifdef __cplusplus
}
#endif
#endif
