/* Internal state of dt_ddp, shared by ddp.c (buckets, the communication thread, all-reduce)
 * and zero.c (ZeRO shards: reduce-scatter into the owner's shard, parameter gather/release). */
#ifndef DT_DIST_DDP_IMPL_H
#define DT_DIST_DDP_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include "dist/comm_impl.h"

typedef struct ddp_bucket {
    size_t lo, hi; /* flat elements [lo, hi) */
    int n_params;  /* parameters in it */
    int pending;   /* parameters not yet reported in this backward */
    int queued;    /* handed to the comm thread in this step */
    /* Row-sparse gradient (an embedding table alone in the bucket; ddp_sparse.c): rows of
     * `row` elements, and mask [ceil(rows / 64)], the rows some rank touched. row 0: dense. */
    size_t row, rows;
    uint64_t *mask;
} ddp_bucket;

/* A job of the communication thread. Jobs run strictly in queue order, and every rank queues
 * the same jobs in the same order (they come from the same schedule), as MPI's collective
 * matching needs. */
enum { JOB_REDUCE = 0, JOB_GATHER = 1, JOB_F64 = 2, JOB_GATHER_FROZEN = 3 };
typedef struct ddp_job {
    int kind, bucket;
    double *f64; /* JOB_F64: buf [n] summed over ranks in place */
    size_t n;
} ddp_job;

/* ZeRO-3 gather state of a bucket's parameters (compute thread reads it under mu). */
enum { UNIT_RELEASED = 0, UNIT_QUEUED = 1, UNIT_GATHERED = 2 };

/* Per-pass use of the buckets' parameters by the schedule (ZeRO-3). */
typedef struct zero_pass {
    int from, to;      /* entries [from, to) */
    int *first, *last; /* [nb] entry of first / last use, -1 if unused in this pass */
    int *order;        /* [nb] buckets by first use (unused ones left out) */
    int n_order;
    int *pos; /* [nb] position of a bucket in order, -1 if unused */
} zero_pass;

/* A frozen unit that only row lookups with input ids read (dt_param_info.sparse_row, an
 * untied embedding table): gathered by the rows the ranks' ids name (zero_frozen_rows.c). */
#define FZ_ROW_IDS 4
typedef struct fz_rows {
    size_t row, rows; /* floats per row, rows; row 0: the unit is gathered whole */
    int n_ids;
    const dt_tensor *ids[FZ_ROW_IDS]; /* the distinct ids inputs of its lookups */
} fz_rows;

struct dt_ddp {
    dt_graph *g;
    dt_comm *c;
    float *grad, *param;
    size_t n;
    int n_params;   /* size of the graph's param table */
    int *bucket_of; /* [n_params] bucket of each trainable parameter, -1 for others */
    ddp_bucket *b;
    int nb;
    int enabled, overlap, average, sparse;
    dt_comm_shared *shared; /* the gradient buffer shared with this host's ranks, or NULL */
    int shm_asked;          /* dt_ddp_opts.shm: shared memory was asked for */
    /* ZeRO: stage, this rank's shard [own_lo, own_hi) of the flat buffers (clamped to n),
     * shard size (padded layout: rank r owns [r*shard, (r+1)*shard)). */
    int stage;
    size_t shard, own_lo, own_hi;
    float *gshard; /* stage >= 2: [shard] reduced gradients of the own shard */
    size_t page;
    int *unit;         /* stage 3: [nb] UNIT_* */
    int full;          /* stage 3: all parameters gathered (evaluation, export): hooks idle */
    zero_pass pass[2]; /* forward, backward */
    /* Frozen parameters sharded (dt_ddp_opts.shard_frozen; zero_frozen.c): one unit per frozen
     * parameter, its bytes seen as fz_len[u] floats at fz_base + fz_lo[u] (slots are 64-byte
     * aligned), rank r keeping [r*fz_shard[u], (r+1)*fz_shard[u]) of them. fz_n 0: not sharded. */
    int fz_asked, fz_n;
    int *fz_of; /* [n_params] unit of each frozen parameter, -1 for others */
    float *fz_base;
    size_t *fz_lo, *fz_len, *fz_shard;
    fz_rows *fz_rw;       /* [fz_n] row gathers (zero_frozen_rows.c) */
    size_t fz_gathered;   /* comm thread: frozen bytes gathered since init (whole or rows) */
    int *fz_state;        /* [fz_n] UNIT_* */
    int fz_full;          /* every frozen unit gathered (evaluation): hooks idle for them */
    zero_pass fz_pass[2]; /* forward, backward */
    /* Backward thread only (no lock): buckets complete in this step, misuse seen. */
    int n_complete, twice;
    /* Shared with the communication thread, under mu. */
    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    ddp_job *queue; /* ring of qcap jobs; q_head/q_tail/n_done count jobs since init */
    long qcap, q_head, q_tail, n_done;
    int quit;
    dt_status err;
    char err_msg[1024];
    double comm_s;     /* time in collectives since the last dt_ddp_wait */
    double comm_cpu_s; /* the comm thread's CPU time in them */
    size_t sent;       /* comm thread: gradient elements reduced since the last dt_ddp_wait */
    double gather_wait_s;
    dt_ddp_stats stats;
};

double dt_ddp_now(void);
/* Hands a job to the communication thread (compute thread). */
void dt_ddp_enqueue(dt_ddp *d, int kind, int bucket);
/* The same for any job; returns its sequence number (done when n_done exceeds it). */
long dt_ddp_enqueue_job(dt_ddp *d, ddp_job j);
/* Runs one job on the communication thread (no lock held). */
dt_status dt_ddp_run_job(dt_ddp *d, const ddp_job *j);

/* ddp_sparse.c */
/* 1 when parameter p is sent row-sparse: opts.sparse, stage < 2, world > 1, a row-sparse
 * table (dt_param_info.sparse_row) of at least 64 rows. make_buckets gives it its own bucket. */
int dt_ddp_sparse_alone(const dt_ddp *d, const dt_param_info *p);
/* Allocates the row masks of the buckets that hold such a table. */
dt_status dt_ddp_sparse_init(dt_ddp *d);
void dt_ddp_sparse_free(dt_ddp *d);
/* Comm thread: all-reduces the rows of sparse bucket k that some rank touched; adds the
 * elements sent to d->sent. */
dt_status dt_ddp_sparse_reduce(dt_ddp *d, int k);

/* zero.c */
dt_status dt_zero_init(dt_ddp *d);
void dt_zero_free(dt_ddp *d);
/* Gives pages entirely inside buf[lo, hi) back to the OS (they read as zero afterwards). */
void dt_zero_release(dt_ddp *d, float *buf, size_t lo, size_t hi);
/* Stage >= 2, comm thread: reduce-scatter bucket k into the own shard, release its pages. */
dt_status dt_zero_reduce_bucket(dt_ddp *d, int k);
/* The units (buckets, or frozen units when `frozen`) entry k reads: writes at most
 * DT_GRAPH_ENTRY_PARAMS indices into out, returns how many (duplicates possible). */
int dt_zero_entry_units(const dt_ddp *d, int k, int frozen, int *out);
/* Fills ps with the first/last use and first-use order of n units over entries [from, to). */
dt_status dt_zero_build_pass(dt_ddp *d, zero_pass *ps, int from, int to, int n, int frozen);
void dt_zero_free_pass(zero_pass *ps);

/* zero_frozen.c */
/* Collective on no rank (local): units, shards; the frozen buffer's pages outside the own
 * shards are given back. Needs the frozen parameters loaded. */
dt_status dt_zero_frozen_init(dt_ddp *d);
void dt_zero_frozen_free(dt_ddp *d);
/* Gives back frozen unit u's bytes outside the own shard (compute thread). */
void dt_zero_frozen_release(dt_ddp *d, int u);
/* Comm thread: all-gathers frozen unit u in place: a row-gathered unit only the rows of the
 * current ids (zero_frozen_rows.c), any other whole. */
dt_status dt_zero_frozen_gather(dt_ddp *d, int u);
dt_status dt_zero_frozen_gather_whole(dt_ddp *d, int u);
size_t dt_zero_frozen_own_lo(const dt_ddp *d, int u);
size_t dt_zero_frozen_own_hi(const dt_ddp *d, int u);

/* zero_frozen_rows.c */
/* Fills d->fz_rw[u] for every frozen unit (row 0 where it is gathered whole). Local. */
dt_status dt_zero_rows_init(dt_ddp *d);
/* Comm thread: the rows of unit u that any rank's ids name, in place (collective). */
dt_status dt_zero_rows_gather(dt_ddp *d, int u);
/* Every frozen unit whole until dt_zero_frozen_release_all (compute thread, comm idle). */
dt_status dt_zero_frozen_whole(dt_ddp *d);
void dt_zero_frozen_release_all(dt_ddp *d);

#endif
