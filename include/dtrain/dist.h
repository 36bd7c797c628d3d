/* Distributed training: the communicator and data-parallel gradient synchronisation.
 *
 *   dt_comm *c;  dt_comm_open("auto", &argc, &argv, &c);    // MPI under mpirun/srun, else single
 *   ... build and compile the graph; dt_model_init on every rank ...
 *   dt_ddp *d;   dt_ddp_open(g, c, NULL, &d);                // buckets, comm thread
 *   dt_ddp_broadcast_params(d);                              // rank 0's weights to all
 *   for each step:
 *       for each micro-batch m of M:
 *           dt_ddp_set_enabled(d, m == M - 1);               // communicate on the last only
 *           dt_graph_forward(g, 1); dt_graph_backward(g);    // buckets all-reduce as they finish
 *           dt_ddp_wait(d);                                  // then every rank holds the mean
 *       clip, optimizer step (identical on every rank)
 *   dt_ddp_close(d); dt_comm_close(c);
 *
 * Collectives work on flat buffers the caller allocated once; they allocate nothing per call
 * (the MPI library may). All of them must be called by every rank in the same order with the same
 * sizes (MPI's rule). Errors return a dt_status with a message that names the operation, the rank
 * and the MPI error string ("comm broadcast: rank 0 of 3: MPI error 8: MPI_ERR_ROOT: invalid
 * root"). Argument errors are found before any communication, identically on every rank.
 *
 * Clipping: after dt_ddp_wait every rank holds the same full gradient, so dt_grad_clip_norm on
 * it gives every rank the same coefficient. dt_comm_allreduce_f64 sums partial squared norms
 * (dt_grad_sumsq) when each rank holds only a shard (ZeRO-2/3), and loss sums for the log.
 *
 * Threads: a dt_comm may be used from two threads -- the caller's and a dt_ddp's communication
 * thread -- but not for two collectives at once: while a dt_ddp step is in flight (from the first
 * dt_graph_backward that reports gradients to dt_ddp_wait) do not call collectives on the same
 * communicator. MPI is initialised with MPI_THREAD_MULTIPLE when the library offers it, else
 * MPI_THREAD_SERIALIZED (calls are then serialised by a lock; DT_MPI_THREAD=serialized asks for
 * that level). Open MPI is told to yield the core while it waits (mpi_yield_when_idle, unless the
 * environment or mpirun --mca sets it): the communication thread shares cores with compute. */
#ifndef DTRAIN_DIST_H
#define DTRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/graph.h"
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Communicator ------------------------------------------------------------------------ */

typedef struct dt_comm dt_comm;

/* backend: "auto" -- MPI when the process was started by a launcher (mpirun/mpiexec of Open MPI
 * or MPICH, srun: any of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE,
 * SLURM_STEP_NUM_TASKS is set), else "single"; "mpi" -- MPI, and an error (DT_ERR_STATE) naming
 * the fix when there is no launcher or dtrain was built without MPI; "single" -- one process,
 * world size 1, collectives are copies or no-ops. NULL means "auto". argc/argv may be NULL; MPI
 * may consume its own arguments from them. MPI is initialised here unless the program already did
 * (then dt_comm_close leaves it initialised), and finalised by dt_comm_close. One dt_comm per
 * process. */
dt_status dt_comm_open(const char *backend, int *argc, char ***argv, dt_comm **out);
/* Finalises MPI -- except after a failed collective or dt_comm_set_failed: MPI_Finalize waits
 * for every rank, and after an error some may be gone or stuck. The process should then exit
 * nonzero; mpirun/srun notice it and end the other ranks (the job fails; nothing hangs). */
void dt_comm_close(dt_comm *c);
/* Marks the job failed on this rank (e.g. the trainer hit a data error), so dt_comm_close does not
 * wait for the others in MPI_Finalize. */
void dt_comm_set_failed(dt_comm *c);

/* The hang watchdog. A rank whose peer stopped making progress (a process stopped or swapped
 * out, a deadlock, a host gone without closing its connections) would wait in a collective
 * forever. With a timeout set, no collective of this communicator -- broadcasts, reductions,
 * gathers, barriers, the shared-memory all-reduce and its fence, the shared-buffer setup, the
 * waits of a dt_ddp's communication thread, MPI_Finalize in dt_comm_close -- waits longer than
 * `seconds`: a watchdog thread (a few checks per timeout, at most one a second) then writes one
 * line to stderr and ends the job with exit status DT_COMM_EXIT_HANG:
 *   dtrain: rank 0 (host a): all-reduce of gradient bucket 3 at step 120 made no progress for
 *   60 s (dist.timeout_s): rank 1 (host a, pid 4242) has not reached it; aborting the job
 *   (exit status 76)
 * -- ended by the program's hang handler (dt_comm_set_hang_handler; `dtrain` installs one that
 * calls MPI_Abort, which makes mpirun end every rank and exit 76 itself, or, where that is not
 * allowed from another thread, ends this process and mpirun ends the others). The library does
 * not end the process: without a handler the line (ending "no hang handler: waiting on") is
 * written once per collective and the collective goes on waiting (the thread inside MPI cannot
 * be returned from, and a collective cannot be cancelled), for the program to decide. The line
 * names the rank that waited and, from the ranks of its host (each counts its collectives in a
 * small shared-memory board, src/dist/board.c), the one that has not reached the collective or
 * is stopped inside it; ranks on other hosts are not seen (the line says how many there are).
 * Collectives run blocking calls as without a timeout (same algorithms, bits and speed; the
 * watchdog costs two clock reads per collective). seconds: 0 = off (the default of a new
 * communicator), else > 0; a single process has no peers and starts no thread. Set it once, before
 * collectives. */
#define DT_COMM_EXIT_HANG 76 /* EX_PROTOCOL: a peer stopped answering */
dt_status dt_comm_set_timeout(dt_comm *c, double seconds);
/* What the handler is told when a collective timed out (its line already written). */
typedef struct dt_comm_hang {
    int rank;
    int code;         /* the exit status to end the job with: DT_COMM_EXIT_HANG */
    int mpi_abort_ok; /* 1: MPI_Abort(MPI_COMM_WORLD, code) may be called from this thread (MPI
                       * under MPI_THREAD_MULTIPLE, not being finalised); 0: only this process
                       * can be ended (mpirun then ends the others) */
} dt_comm_hang;
typedef void (*dt_comm_hang_fn)(void *ud, const dt_comm_hang *h);
/* The process's hang handler (NULL: none), called once, on the watchdog thread. A program that
 * wants a hung job to end installs one before it trains; it normally does not return. */
void dt_comm_set_hang_handler(dt_comm_hang_fn fn, void *ud);
double dt_comm_get_timeout(const dt_comm *c);
/* A wait outside this communicator's collectives under the same watchdog: what another library
 * does between the same ranks (NCCL's init, and the host's wait for a NCCL all-reduce), so that
 * a peer that stopped there ends the job with the same line ("dtrain: rank 0 (host a): NCCL
 * all-reduce at step 12 made no progress for 60 s ...") instead of a hang. Every rank brackets
 * the same waits in the same order (they count as collectives on the host's board); `what` is
 * a string that outlives the wait. No effect without a timeout except the count. */
void dt_comm_watch_begin(dt_comm *c, const char *what);
void dt_comm_watch_end(dt_comm *c);
/* The training step the next collectives belong to, for the watchdog's line ("at step 120");
 * negative: none (startup). A plain store, cheap enough for every step. */
void dt_comm_set_step(dt_comm *c, int64_t step);

int dt_comm_rank(const dt_comm *c);
int dt_comm_size(const dt_comm *c);
int dt_comm_local_rank(const dt_comm *c); /* rank among the processes on this host */
int dt_comm_local_size(const dt_comm *c);
const char *dt_comm_backend(const dt_comm *c); /* "single" or "mpi" */
/* The MPI thread level obtained: "multiple", "serialized" ("-" for single). */
const char *dt_comm_thread_level(const dt_comm *c);
/* 1 when this build can use MPI. */
int dt_comm_have_mpi(void);

/* The all-reduce algorithm of float sums (DT_COMM_ALGO in the environment sets it at init:
 * "native" or "ring").
 *   NATIVE: MPI_Allreduce. Deterministic for a given MPI library, world size and message size:
 *           Open MPI's tuned component picks its algorithm from (ranks, bytes) by fixed rules
 *           and its algorithms give each rank the same bits (float addition is commutative,
 *           and the ring and reduce-scatter algorithms reduce each block at one rank and copy
 *           it; tests/dist checks it for 2-4 ranks). Another MPI build or MCA setting may change
 *           the bits.
 *   RING:   our own reduce-scatter + all-gather ring over MPI_Sendrecv: block b of N is summed
 *           in the fixed order b, b+1, ..., b-1 (mod N) at one rank and copied to the others,
 *           whatever MPI library is underneath, so the bits depend only on the world size. */
typedef enum dt_comm_algo { DT_COMM_ALGO_NATIVE = 0, DT_COMM_ALGO_RING = 1 } dt_comm_algo;
dt_status dt_comm_set_algo(dt_comm *c, dt_comm_algo algo);
dt_comm_algo dt_comm_get_algo(const dt_comm *c);

/* Flags of the float reductions. */
enum { DT_COMM_AVG = 1 << 0 /* multiply the sum by 1/size afterwards */ };

/* buf [bytes] on every rank <- root's. */
dt_status dt_comm_broadcast(dt_comm *c, void *buf, size_t bytes, int root);
/* buf [n] f32 <- sum over ranks of buf (in place); with DT_COMM_AVG times 1/size. */
dt_status dt_comm_allreduce(dt_comm *c, float *buf, size_t n, unsigned flags);
/* buf [n] f64 <- sum over ranks (in place): loss sums, squared gradient norms. */
dt_status dt_comm_allreduce_f64(dt_comm *c, double *buf, size_t n);
/* buf [n] u64 <- bitwise OR over ranks (in place): sets of rows, as bitmaps. */
dt_status dt_comm_allreduce_or(dt_comm *c, uint64_t *buf, size_t n);
/* send [size * shard] f32 (a padded flat buffer: shard r is send[r*shard, (r+1)*shard))
 * -> recv [shard] = sum over ranks of this rank's shard (DT_COMM_AVG: times 1/size).
 * recv must not overlap send. */
dt_status dt_comm_reduce_scatter(dt_comm *c, const float *send, float *recv, size_t shard,
                                 unsigned flags);
/* send [shard] from every rank -> recv [size * shard], rank r's at recv + r*shard. send may be
 * recv + rank*shard (in place). */
dt_status dt_comm_allgather(dt_comm *c, const float *send, float *recv, size_t shard);
/* The same on a range [lo, hi) of a padded flat buffer of size * shard elements (ZeRO works
 * bucket by bucket; a bucket may cover parts of several ranks' shards, or none of this one's):
 *   reduce_scatter_range: send [hi - lo] holds elements [lo, hi) on every rank; recv receives
 *     the sum over ranks of this rank's part, [lo, hi) ∩ [rank*shard, (rank+1)*shard)
 *     (possibly 0 elements; recv may then be NULL). recv must not overlap send, except
 *     recv == send: in place, the result then lands at send[0, count).
 *   allgather_range: buf [hi - lo] holds elements [lo, hi); each rank's part of the range is
 *     sent from its buf to everyone else's, in place.
 * hi - lo must fit an int (one MPI count); callers use bucket-sized ranges. */
dt_status dt_comm_reduce_scatter_range(dt_comm *c, const float *send, float *recv, size_t lo,
                                       size_t hi, size_t shard, unsigned flags);
dt_status dt_comm_allgather_range(dt_comm *c, float *buf, size_t lo, size_t hi, size_t shard);
/* buf [sum of counts] holds the ranks' blocks back to back in rank order, rank r's counts[r]
 * elements (the same counts on every rank); each rank's block is sent from its buf to
 * everyone else's, in place (a packed selection of rows: zero_frozen_rows.c). The sum must fit
 * an int. */
dt_status dt_comm_allgather_blocks(dt_comm *c, float *buf, const size_t *counts);
dt_status dt_comm_barrier(dt_comm *c);

/* Shared buffers: the ranks on one host read each other's copy of a buffer directly (dt_ddp's
 * gradient buffer): with 2 ranks a ResNet-18 gradient all-reduce costs ~7.5 ms of CPU instead of
 * MPI_Allreduce's ~24. Collective: every rank calls dt_comm_share with its own buffer of the same
 * n. buf must be page-aligned and own the memory up to the next page boundary after buf + n
 * (dt_graph_flat_grad is). Its pages are moved, contents and address unchanged, into shared
 * memory (a memfd, which the other local ranks map through /proc/PID/fd, the access Open MPI's
 * CMA single copy needs as well). *out is NULL -- not an error -- where this cannot be used:
 * single process, one rank per host, hosts with different numbers of ranks, an unaligned
 * buffer, no memfd or no access to the others' (dt_comm_share_note says which, the same on
 * every rank). DT_COMM_NODE_SIZE=k treats every k consecutive ranks of a host as a host of
 * their own (for tests of the several-host path on one machine). */
typedef struct dt_comm_shared dt_comm_shared;
dt_status dt_comm_share(dt_comm *c, float *buf, size_t n, dt_comm_shared **out);
/* "shared memory (2 ranks per host, 1 host)", or "MPI all-reduce (<why not>)". */
const char *dt_comm_share_note(const dt_comm *c);
/* buf [lo, hi) <- sum over ranks (DT_COMM_AVG: times 1/size), in place on every rank; the same
 * rules as dt_comm_allreduce. Each of the L local ranks sums a 1/L slice out of all L buffers in
 * local rank order (then, with several hosts, MPI_Allreduce of the slice across hosts) and copies
 * the others' slices: every rank gets the same bits; on one host they depend only on L, and for
 * L = 2 they equal MPI_Allreduce's. The others may still read this rank's buffer afterwards:
 * call dt_comm_shared_fence before writing into any reduced range again. */
dt_status dt_comm_allreduce_shared(dt_comm_shared *s, size_t lo, size_t hi, unsigned flags);
dt_status dt_comm_shared_fence(dt_comm_shared *s);
/* Local (no communication): the buffer gets private pages again, contents kept. Before freeing
 * the buffer. NULL is fine. */
void dt_comm_unshare(dt_comm_shared *s);
/* Bytes of the other local ranks' shared buffers resident in this process's page tables: its
 * RSS counts them once read, although they are theirs (and counted in their RSS too). Memory
 * reports subtract them. 0 without shared buffers. */
size_t dt_comm_peer_rss(void);

/* Equal shards of a flat buffer of n elements over `world` ranks: shard = ceil(n / world)
 * rounded up to 16 elements (so every shard starts 64-byte aligned), padded = world * shard. No
 * tensor has to divide by the world size. */
size_t dt_comm_shard_size(size_t n, int world);

/* ---- Data parallelism -------------------------------------------------------------------- */

typedef struct dt_ddp dt_ddp;

typedef struct dt_ddp_opts {
    double bucket_mb; /* bucket size in MiB (> 0); dist.bucket_mb. Default 25 */
    int overlap;      /* 1: all-reduce each bucket as soon as backward finished it (default);
                         0: all buckets after backward, in dt_ddp_wait (same numbers) */
    int average;      /* 1: gradients become the mean over ranks (default); 0: the sum. With
                         0 and the loss scaled by 1/world (dt_graph_set_loss_scale), backward
                         makes the gradients already divided and the sum is the mean, without
                         a pass over the reduced gradients on the communication thread -- what
                         dtrain's trainer does (Horovod's prescale). For a power-of-two world
                         the two give the same bits; otherwise they round differently. */
    int zero_stage;   /* ZeRO (dist.zero_stage), as DeepSpeed defines the stages: 0 plain data
                         parallelism; 1 each rank updates only its shard of the parameters
                         (optimizer state for the shard only) and the shards are all-gathered
                         after the step; 2 also gradients: each bucket is reduce-scattered into
                         its owners' shards and its full-size memory given back; 3 also
                         parameters: only the own shard stays resident, each bucket's parameters
                         are all-gathered just before the schedule first reads them and given
                         back after their last use in forward and again in backward. */
    int sparse;       /* 1 (default): a row-sparse gradient (an embedding table of 64 rows or
                         more, dt_param_info.sparse_row; it gets a bucket of its own) sends only
                         the rows some rank touched: a bitmap OR, then the packed rows' all-reduce;
                         bit-identical       to the dense all-reduce on 2 ranks (dist.sparse_embedding).
                         ZeRO       stages 2-3 always send dense buckets. */
    int shm;          /* 1 (default): the ranks of a host all-reduce dense buckets by reading
                         each other's gradient buffers (dt_comm_share; dist.shared_memory);
                         falls back to MPI_Allreduce where that cannot be used. Same bits as
                         MPI_Allreduce with 2 ranks; with more, a fixed summation order that
                         can differ from MPI's in rounding. ZeRO stages 0-1 only. */
    int shard_frozen; /* 1: the frozen parameters (a LoRA base; lora.shard_base) are sharded
                         too, at any ZeRO stage: each rank keeps 1/world of every frozen
                         parameter's bytes in its slot of the frozen buffer (as stored: bf16
                         bytes gathered as they are, so the gathered weight is the same bits);
                         a parameter is all-gathered in place just before the schedule first
                         reads it and released after its last reader, in forward and again in
                         backward (recomputed segments read it there). Loaded on every rank
                         into the graph's frozen buffer, or pointing elsewhere (a mapping of the
                         model file: dt_graph_param_external), in which case dt_ddp_open copies
                         the own shard into the slot and points the parameter back at it (the
                         caller may then drop the mapping's pages). Default 0. */
} dt_ddp_opts;
dt_ddp_opts dt_ddp_opts_default(void);

/* Splits the flat gradient buffer of a compiled graph into buckets: contiguous slices that
 * follow the parameters in reverse order (the order in which backward completes them), each a
 * whole number of parameters of about bucket_mb, a parameter larger than that alone in its own
 * (and so is a table sent row-sparse, opts.sparse); shares the gradient buffer with the other
 * ranks of the host (opts.shm: collective, every rank calls dt_ddp_open with the same opts);
 * registers dt_graph_on_grad_ready on the graph (replacing any other callback) and starts the
 * communication thread. opts NULL: defaults. Every rank must build the same graph. */
dt_status dt_ddp_open(dt_graph *g, dt_comm *c, const dt_ddp_opts *opts, dt_ddp **out);
/* Stops the thread and unregisters the callback. */
void dt_ddp_close(dt_ddp *d);

/* 0: the next backward passes do not communicate (accumulation micro-steps: gradients add up
 * locally with dt_graph_set_accumulate); 1 (default): they do. Set it before dt_graph_backward. */
void dt_ddp_set_enabled(dt_ddp *d, int on);
void dt_ddp_set_overlap(dt_ddp *d, int on);
/* After dt_graph_backward: waits until every bucket is reduced (with overlap off, reduces them
 * now), so the flat gradient buffer holds the mean (or sum) over ranks. Returns at once when
 * communication is disabled. Errors: a failed collective (the message names bucket, op and
 * rank), or a backward that did not report every parameter. */
dt_status dt_ddp_wait(dt_ddp *d);

/* Rank 0's trainable parameters and state buffers (batchnorm running statistics) to every rank.
 * Call once after initialising or loading weights. Frozen parameters (a LoRA base) are not sent:
 * every rank loads them from the same files. */
dt_status dt_ddp_broadcast_params(dt_ddp *d);
/* Rank 0's state buffers only (batchnorm running statistics). Batch statistics in training are
 * per rank (as PyTorch DDP without SyncBatchNorm); calling this before each forward gives
 * torch DDP's default broadcast_buffers=True, before evaluation or export at least makes every
 * rank's model the same. */
dt_status dt_ddp_broadcast_state(dt_ddp *d);

/* ---- ZeRO -------------------------------------------------------------------------------
 *
 * Shards are equal slices of the flat buffers padded to world x shard elements
 * (dt_comm_shard_size): rank r owns [r*shard, (r+1)*shard), clamped to the n real elements, so
 * no tensor has to divide by the world size. Stage >= 1 needs the graph compiled with
 * dt_graph_opts.flat_capacity >= world * shard (dt_ddp_open checks). A step:
 *   dt_ddp_zero_grad(d);                            // stage >= 2: the shard's gradients = 0
 *   for each micro-batch: forward, backward, dt_ddp_wait(d)   // stage >= 2: every micro-batch
 *                                                   // communicates and adds into the shard;
 *                                                   // keep dt_graph_set_accumulate(g, 0): the
 *                                                   // gradient buffer is reduced in place and
 *                                                   // released, so adding onto it is wrong
 *   float *g = dt_ddp_shard(d, &lo, &hi);           // this rank's slice and its gradients
 *   dt_ddp_clip_grad(d, max_norm, &norm);           // global norm, the same on every rank
 *   dt_optim_step(opt, param + lo, g, lr);          // optimizer created on [lo, hi)
 *   dt_ddp_gather_params(d);                        // stages 1, 2: everyone's new shards
 * Stage 3 keeps parameters gathered only while the schedule needs them (graph entry hooks);
 * dt_ddp_gather_params gathers all of them and keeps them until dt_ddp_release_params -- for
 * evaluation (whose batch count may differ between ranks) and export. Memory given back reads
 * as zeros: page faults return each step (the price of the memory saved). */

/* This rank's slice [lo, hi) of the flat buffers -- [0, n) without ZeRO -- and its gradients
 * (after dt_ddp_wait): flat_grad + lo, or the reduced shard under stage >= 2. */
float *dt_ddp_shard(dt_ddp *d, size_t *lo, size_t *hi);
/* Stage >= 2: zeroes the shard's gradients (each micro-batch's reduced gradients add to them).
 * Other stages: nothing (the graph's accumulate flag does it). */
void dt_ddp_zero_grad(dt_ddp *d);
/* Global L2 norm of the gradients over all ranks' slices (one 8-byte all-reduce under stage
 * >= 2), and clipping of this rank's slice as dt_grad_clip_norm does (max_norm <= 0: none).
 * Every rank gets the same norm and coefficient. */
dt_status dt_ddp_clip_grad(dt_ddp *d, float max_norm, double *norm);
/* Stage 1, 2: all-gathers every rank's updated slice into the full parameter buffer. Stage 3:
 * gathers all parameters and keeps them until dt_ddp_release_params. Stage 0: nothing. */
dt_status dt_ddp_gather_params(dt_ddp *d);
/* Stage 3: gives back the memory of the parameters outside this rank's shard (the default
 * state between steps). Other stages: nothing. With dt_ddp_opts.shard_frozen the frozen
 * parameters too, at any stage (dt_ddp_params_whole had gathered them). */
dt_status dt_ddp_release_params(dt_ddp *d);
/* dt_ddp_opts.shard_frozen: bytes of the frozen buffer this rank keeps between uses (its
 * shards), and the whole frozen parameters' bytes; 0, 0 without. For memory reports. */
void dt_ddp_frozen_bytes(const dt_ddp *d, size_t *kept, size_t *whole);
/* dt_ddp_opts.shard_frozen: how many frozen tables (untied embeddings, read only by lookups of
 * input ids) are gathered by the rows the ranks look up instead of whole; 0 without. */
int dt_ddp_frozen_row_tables(const dt_ddp *d);

/* What a trainer asks of the ZeRO policy instead of testing stage numbers (the stage is the
 * communicator's business; a NULL d is one process, which behaves as stage 0):
 *   dt_ddp_step_end        after the optimizer step: the new parameters everywhere they are
 *                          read (stages 1-2 all-gather the shards; 0 and 3: nothing)
 *   dt_ddp_params_whole    every parameter resident until dt_ddp_release_params (stage 3
 *                          gathers, and so does a sharded frozen base, dt_ddp_opts.shard_frozen;
 *                          others hold them anyway) -- for evaluation, export, a save
 *   dt_ddp_accumulates     1: micro-batches may add into the full gradient buffer
 *                          (dt_graph_set_accumulate); 0 under stages 2-3, which reduce every
 *                          micro-batch into the shard
 *   dt_ddp_shards_optimizer 1: each rank holds the optimizer state of its shard only (stage >= 1),
 *                          so each writes its own optimizer file in a checkpoint
 *   dt_ddp_shards_params   1: outside dt_ddp_params_whole each rank holds its shard of the
 *                          parameters only (stage 3): whole weights need every rank
 *   dt_ddp_zero_stage      the stage, for records (trainer_state.json)
 *   dt_ddp_zero_name       "ZeRO-1" .. "ZeRO-3", or "" without ZeRO, for messages
 *   dt_ddp_exchange_note   one phrase naming how gradients travel, for the start line
 * dt_ddp_flat_capacity gives, before a graph is compiled, the flat buffer size that
 * dt_graph_opts.flat_capacity must have for n trainable elements on `world` ranks at `stage`
 * (0: no padding, the graph's own size). */
dt_status dt_ddp_step_end(dt_ddp *d);
dt_status dt_ddp_params_whole(dt_ddp *d);
int dt_ddp_accumulates(const dt_ddp *d);
int dt_ddp_shards_optimizer(const dt_ddp *d);
int dt_ddp_shards_params(const dt_ddp *d);
int dt_ddp_zero_stage(const dt_ddp *d);
const char *dt_ddp_zero_name(const dt_ddp *d);
const char *dt_ddp_exchange_note(const dt_ddp *d);
size_t dt_ddp_flat_capacity(size_t n, int world, int stage);

/* buf [n] f64 <- sum over ranks, run by the communication thread in queue order: safe while a
 * step is in flight, ordered with the bucket reductions the same way on every rank. Collectives
 * called from inside forward/backward (SyncBatchNorm's statistics) must use this rather than
 * dt_comm_allreduce_f64, which could run concurrently with a bucket's all-reduce. */
dt_status dt_ddp_allreduce_f64(dt_ddp *d, double *buf, size_t n);

/* Bucket table: bucket i covers flat gradient elements [lo, hi) (bucket 0 holds the last
 * parameters). */
int dt_ddp_bucket_count(const dt_ddp *d);
void dt_ddp_bucket_range(const dt_ddp *d, int i, size_t *lo, size_t *hi);

typedef struct dt_ddp_stats {
    double wait_s;       /* last communicating step: time in dt_ddp_wait (exposed comm) */
    double comm_s;       /* last communicating step: time the comm thread spent in collectives */
    double comm_cpu_s;   /* last communicating step: CPU time the comm thread used in them (on a
                            rank with one core, CPU taken from backward) */
    double wait_total_s; /* sums over all communicating steps */
    double comm_total_s;
    double comm_cpu_total_s;
    int64_t steps;              /* communicating steps (dt_ddp_wait calls with communication on) */
    size_t bytes_per_step;      /* gradient bytes per step (the flat gradient buffer) */
    size_t sent_bytes;          /* last communicating step: gradient bytes reduced; less than
                                   bytes_per_step when row-sparse buckets sent only touched rows */
    double gather_wait_total_s; /* ZeRO-3: time forward/backward waited for parameters */
    size_t frozen_gathered_bytes; /* shard_frozen: frozen bytes gathered since init (whole
                                     parameters, or a table's looked-up rows) */
    int shared; /* 1: gradients are all-reduced through shared memory (dt_comm_share_note) */
} dt_ddp_stats;
void dt_ddp_get_stats(const dt_ddp *d, dt_ddp_stats *s);

#ifdef __cplusplus
}
#endif
#endif
