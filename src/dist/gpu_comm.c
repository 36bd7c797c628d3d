/* Gradient all-reduce between device ranks (include/dtrain/gpu_comm.h): the choice between NCCL
 * and host staging, agreed over the communicator, and the host-staged path (device -> pinned
 * host buffer -> dt_comm_allreduce -> device). NCCL itself is src/device/cuda_nccl.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/gpu_comm.h"

struct dt_gpu_comm {
    dt_comm *c;
    dt_device d;
    dt_gpu_comm_kind kind;
    float *host; /* host way: the pinned staging buffer [n] */
    size_t n;
    dt_nccl *nccl;   /* nccl way */
    dt_event *start; /* recorded where the stream reaches the all-reduce: the wait starts there */
    double wait_s;
    char note[256];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *plural(int k) {
    return k == 1 ? "" : "s";
}

/* Why the ranks of a host may share a GPU, into buf[n]: "share 1 GPU", or "are given GPUs by
 * index (train.device=cuda:N)". */
static const char *share_note(const dt_gpu_comm_facts *f, char *buf, size_t n) {
    if (f->local_ranks > f->devices)
        snprintf(buf, n, "share %d GPU%s", f->devices, plural(f->devices));
    else
        snprintf(buf, n, "are given GPUs by index (train.device=cuda:N)");
    return buf;
}

dt_status dt_gpu_comm_choose(dt_gpu_comm_kind want, const dt_gpu_comm_facts *f,
                             dt_gpu_comm_kind *out, char *note, size_t n) {
    if (!f || !out || !note || !n) return dt_error_set(DT_ERR_INVALID, "gpu comm: NULL argument");
    if (want != DT_GPU_COMM_AUTO && want != DT_GPU_COMM_NCCL && want != DT_GPU_COMM_HOST)
        return dt_error_set(DT_ERR_INVALID, "dist.gpu_comm: value %d (expected auto, nccl or host)",
                            (int)want);
    const char *why = f->nccl_why && f->nccl_why[0] ? f->nccl_why : "unknown reason";
    int shared = f->local_ranks > f->devices || f->by_index;
    *out = DT_GPU_COMM_HOST;
    if (!f->cuda || f->cpu_ranks) {
        if (want == DT_GPU_COMM_NCCL)
            return dt_error_set(DT_ERR_INVALID,
                                "dist.gpu_comm: nccl needs CUDA devices on every rank (%s train "
                                "on the CPU device; use dist.gpu_comm=host or auto)",
                                f->cuda ? "some ranks" : "the ranks");
        snprintf(note, n, "host (%s)", f->cuda ? "GPU and CPU ranks" : "the CPU device");
        return DT_OK;
    }
    if (want == DT_GPU_COMM_HOST) {
        snprintf(note, n, "host (dist.gpu_comm=host)");
        return DT_OK;
    }
    if (want == DT_GPU_COMM_NCCL) {
        if (!f->nccl_ok)
            return dt_error_set(DT_ERR_INVALID, "dist.gpu_comm: nccl: NCCL not loaded: %s", why);
        if (shared)
            return dt_error_set(DT_ERR_INVALID,
                                "dist.gpu_comm: nccl: %d ranks on a host %s (NCCL needs one "
                                "GPU per rank; use dist.gpu_comm=host)",
                                f->local_ranks, share_note(f, note, n));
        *out = DT_GPU_COMM_NCCL;
        snprintf(note, n, "nccl (dist.gpu_comm=nccl, %d ranks)", f->ranks);
        return DT_OK;
    }
    if (f->devices <= 0)
        snprintf(note, n, "host (no CUDA device visible)");
    else if (shared) {
        char what[128];
        snprintf(note, n, "host (%d ranks %s)", f->local_ranks, share_note(f, what, sizeof what));
    } else if (!f->nccl_ok)
        snprintf(note, n, "host (NCCL not loaded: %s)", why);
    else {
        *out = DT_GPU_COMM_NCCL;
        snprintf(note, n, "nccl (%d ranks, one GPU each)", f->ranks);
    }
    return DT_OK;
}

/* Highest and lowest set bit of a 64-bit map (k < 64 encoded as 1 << k). */
static int top_bit(uint64_t m) {
    int k = 0;
    for (int i = 0; i < 64; i++)
        if (m >> i & 1) k = i;
    return k;
}
static int low_bit(uint64_t m) {
    for (int i = 0; i < 64; i++)
        if (m >> i & 1) return i;
    return 0;
}
static uint64_t bit_of(int k) {
    return 1ull << (k < 0 ? 0 : k > 63 ? 63 : k);
}

/* Every rank's facts, agreed with one OR: [0] bit 0 = NCCL failed here (or not tried: a CPU
 * rank), bit 1 = a GPU given by index here, bit 2 = this rank trains on the CPU device;
 * [1] 1 << local ranks (the top bit is the most on a host); [2] 1 << devices, from the CUDA ranks
 * only (the low bit is the fewest). */
static dt_status gather_facts(dt_comm *c, dt_device d, dt_gpu_comm_facts *f, char *why, size_t wn) {
    int cuda = d.kind == DT_DEVICE_CUDA, devices = 0, ok = 0;
    why[0] = 0;
    if (cuda) {
        if (dt_device_count(DT_DEVICE_CUDA, &devices) != DT_OK) devices = 0;
        ok = dt_nccl_load(why, wn);
    }
    int local = dt_comm_local_size(c);
    /* cuda resolves to the local rank's GPU; an index that is not the local rank came from
     * cuda:N, which may give two ranks of a host the same GPU */
    int by_index = cuda && local > 1 && d.index != dt_comm_local_rank(c);
    uint64_t m[3] = {(ok ? 0u : 1u) | (by_index ? 2u : 0u) | (cuda ? 0u : 4u), bit_of(local),
                     cuda ? bit_of(devices) : 0};
    dt_status st = dt_comm_allreduce_or(c, m, 3);
    if (st != DT_OK) return st;
    if (ok && (m[0] & 1))
        snprintf(why, wn, "%s",
                 (m[0] & 4) ? "another rank trains on the CPU device"
                            : "NCCL did not load on another rank");
    *f = (dt_gpu_comm_facts){.cuda = cuda,
                             .nccl_ok = !(m[0] & 1),
                             .nccl_why = why,
                             .ranks = dt_comm_size(c),
                             .local_ranks = top_bit(m[1]),
                             .devices = low_bit(m[2]),
                             .by_index = (m[0] & 2) != 0,
                             .cpu_ranks = (m[0] & 4) != 0};
    return DT_OK;
}

/* Rank 0's unique id to every rank, with whether rank 0 could make one (so that a failure
 * there is every rank's error, not a hang in NCCL's init). */
static dt_status open_nccl(dt_gpu_comm *gc) {
    struct {
        int32_t ok;
        char id[DT_NCCL_ID_BYTES];
        char why[256];
    } msg;
    memset(&msg, 0, sizeof msg);
    int rank = dt_comm_rank(gc->c);
    if (rank == 0) {
        msg.ok = dt_nccl_unique_id(msg.id) == DT_OK;
        if (!msg.ok) snprintf(msg.why, sizeof msg.why, "%s", dt_last_error());
    }
    dt_status st = dt_comm_broadcast(gc->c, &msg, sizeof msg, 0);
    if (st != DT_OK) return st;
    if (!msg.ok) return dt_error_set(DT_ERR_STATE, "gpu comm: nccl: rank 0: %s", msg.why);
    /* NCCL's init waits for every rank: under the hang watchdog, so that a rank whose init
     * failed (or that stopped) ends the job instead of leaving the others waiting in theirs */
    dt_comm_watch_begin(gc->c, "NCCL init");
    st = dt_nccl_open(msg.id, dt_comm_size(gc->c), rank, gc->d, &gc->nccl);
    dt_comm_watch_end(gc->c);
    return st;
}

dt_status dt_gpu_comm_open(dt_comm *c, dt_device d, dt_gpu_comm_kind want, size_t n,
                           dt_gpu_comm **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "gpu comm open: out is NULL");
    *out = NULL;
    if (!c) return dt_error_set(DT_ERR_INVALID, "gpu comm open: comm is NULL");
    char why[256];
    dt_gpu_comm_facts f;
    dt_status st = gather_facts(c, d, &f, why, sizeof why);
    dt_gpu_comm *gc = calloc(1, sizeof *gc);
    if (!gc) return dt_error_set(DT_ERR_NOMEM, "gpu comm open: out of memory");
    gc->c = c, gc->d = d, gc->n = n;
    if (st == DT_OK) st = dt_gpu_comm_choose(want, &f, &gc->kind, gc->note, sizeof gc->note);
    if (st == DT_OK && gc->kind == DT_GPU_COMM_HOST)
        st = dt_host_alloc_pinned(d, n * sizeof(float), (void **)&gc->host);
    if (st == DT_OK && gc->kind == DT_GPU_COMM_NCCL) st = open_nccl(gc);
    if (st == DT_OK) st = dt_event_create(d, &gc->start);
    if (st != DT_OK) {
        dt_gpu_comm_close(gc);
        return st;
    }
    *out = gc;
    return DT_OK;
}

dt_status dt_gpu_comm_allreduce(dt_gpu_comm *gc, float *buf, size_t count, unsigned flags,
                                dt_stream *s) {
    if (!gc || !s || (count && !buf))
        return dt_error_set(DT_ERR_INVALID, "gpu comm allreduce: NULL argument");
    if (count > gc->n)
        return dt_error_set(DT_ERR_INVALID,
                            "gpu comm allreduce: %zu elements, more than the %zu it was opened for",
                            count, gc->n);
    if (!count) return DT_OK;
    /* the wait is counted from where the stream reaches this call (its backward done) */
    dt_status st = dt_event_record(gc->start, s);
    if (st != DT_OK) return st;
    if (gc->kind == DT_GPU_COMM_NCCL) {
        /* NCCL runs on the stream; the host waits for it here, under the hang watchdog, not at
         * the next download (a peer that stopped would hold that wait forever). It costs one
         * host sync per step before the optimizer's kernels are issued. */
        st = dt_nccl_allreduce(gc->nccl, buf, count, (flags & DT_COMM_AVG) != 0, s);
        if (st == DT_OK) st = dt_event_sync(gc->start);
        if (st != DT_OK) return st;
        double t0 = now_s();
        dt_comm_watch_begin(gc->c, "NCCL all-reduce");
        st = dt_stream_sync(s);
        dt_comm_watch_end(gc->c);
        gc->wait_s += now_s() - t0;
        return st;
    }
    size_t bytes = count * sizeof(float);
    /* after the stream's backward: the copy out waits for it, the sync for the copy */
    st = dt_event_sync(gc->start);
    double t0 = now_s();
    if (st == DT_OK) st = dt_device_copy_async(gc->d, gc->host, buf, bytes, DT_COPY_D2H, s);
    if (st == DT_OK) st = dt_stream_sync(s);
    if (st == DT_OK) st = dt_comm_allreduce(gc->c, gc->host, count, flags);
    gc->wait_s += now_s() - t0;
    /* the copy back is queued: later work on s (clipping, the optimizer) runs after it, and the
     * next call's copy out -- the next write of the host buffer is after its sync */
    if (st == DT_OK) st = dt_device_copy_async(gc->d, buf, gc->host, bytes, DT_COPY_H2D, s);
    return st;
}

double dt_gpu_comm_wait_s(const dt_gpu_comm *gc) {
    return gc ? gc->wait_s : 0;
}

dt_gpu_comm_kind dt_gpu_comm_kind_of(const dt_gpu_comm *gc) {
    return gc ? gc->kind : DT_GPU_COMM_HOST;
}

const char *dt_gpu_comm_note(const dt_gpu_comm *gc) {
    return gc ? gc->note : "";
}

void dt_gpu_comm_close(dt_gpu_comm *gc) {
    if (!gc) return;
    if (gc->host) dt_host_free_pinned(gc->d, gc->host);
    dt_event_destroy(gc->start);
    dt_nccl_close(gc->nccl);
    free(gc);
}
