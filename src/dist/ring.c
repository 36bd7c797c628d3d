/* Our own ring all-reduce (DT_COMM_ALGO_RING): reduce-scatter then all-gather around the ring
 * rank -> rank + 1, over MPI_Sendrecv. Its summation order depends only on the world size, not
 * on the MPI library or its tuning: block b's sum is x_b + x_{b+1} + ... + x_{b-1} (mod N),
 * added in that order, computed once and copied to every rank, so all ranks hold the same bits.
 * Each rank sends and receives 2 (N-1)/N of the buffer, the minimum for an all-reduce. */
#ifdef DT_HAVE_MPI
#include "dist/comm_mpi.h"

#define RING_TAG 0x6474 /* "dt"; our duplicate communicator keeps it apart from user traffic */

/* Block b of n elements split N ways: [b * per, min(n, (b + 1) * per)), per = ceil(n / N);
 * the last blocks may be shorter or empty. */
static void ring_block(size_t n, int nb, int b, size_t *lo, size_t *len) {
    size_t per = (n + (size_t)nb - 1) / (size_t)nb, a = (size_t)b * per;
    if (a > n) a = n;
    size_t e = a + per < n ? a + per : n;
    *lo = a, *len = e - a;
}

static int wrap(int r, int n) {
    return ((r % n) + n) % n;
}

/* Sends sb [ls] to `to` while receiving rb [lr] from `from`; add = 1 adds the received values
 * into rb (rb[i] = rb[i] + in[i]), add = 0 stores them. Both go in DT_RING_SEG segments: a
 * block is cut the same way by its sender and its receiver, so the messages match. */
static int ring_exchange(dt_mpi *m, const float *sb, size_t ls, int to, float *rb, size_t lr,
                         int from, int add) {
    size_t ns = (ls + DT_RING_SEG - 1) / DT_RING_SEG, nr = (lr + DT_RING_SEG - 1) / DT_RING_SEG;
    size_t nk = ns > nr ? ns : nr;
    for (size_t k = 0; k < nk; k++) {
        size_t so = k * DT_RING_SEG, ro = k * DT_RING_SEG;
        int sc = k < ns ? (int)(ls - so < DT_RING_SEG ? ls - so : DT_RING_SEG) : 0;
        int rc = k < nr ? (int)(lr - ro < DT_RING_SEG ? lr - ro : DT_RING_SEG) : 0;
        float *in = add ? m->scratch : rb + ro;
        int err = MPI_Sendrecv(sb + so, sc, MPI_FLOAT, k < ns ? to : MPI_PROC_NULL, RING_TAG, in,
                               rc, MPI_FLOAT, k < nr ? from : MPI_PROC_NULL, RING_TAG, m->comm,
                               MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) return err;
        if (add) {
            float *restrict d = rb + ro;
            const float *restrict s = m->scratch;
#pragma omp simd
            for (int i = 0; i < rc; i++) d[i] = d[i] + s[i];
        }
    }
    return MPI_SUCCESS;
}

dt_status dt_mpi_ring_allreduce(dt_comm *c, dt_mpi *m, float *buf, size_t n) {
    int N = c->size, r = c->rank, right = wrap(r + 1, N), left = wrap(r - 1, N);
    if (N == 1) return DT_OK;
    size_t slo, sl, rlo, rl;
    /* Reduce-scatter: at step s rank r passes on its partial sum of block r - s and adds its
     * own values to block r - s - 1; after N - 1 steps it holds the full sum of block r + 1. */
    for (int s = 0; s < N - 1; s++) {
        ring_block(n, N, wrap(r - s, N), &slo, &sl);
        ring_block(n, N, wrap(r - s - 1, N), &rlo, &rl);
        int err = ring_exchange(m, buf + slo, sl, right, buf + rlo, rl, left, 1);
        if (err != MPI_SUCCESS) return dt_mpi_fail(c, "allreduce (ring reduce-scatter)", err);
    }
    /* All-gather: at step s rank r passes on the finished block r + 1 - s and receives r - s. */
    for (int s = 0; s < N - 1; s++) {
        ring_block(n, N, wrap(r + 1 - s, N), &slo, &sl);
        ring_block(n, N, wrap(r - s, N), &rlo, &rl);
        int err = ring_exchange(m, buf + slo, sl, right, buf + rlo, rl, left, 0);
        if (err != MPI_SUCCESS) return dt_mpi_fail(c, "allreduce (ring all-gather)", err);
    }
    return DT_OK;
}

#else
typedef int dt_ring_unused; /* ISO C forbids an empty translation unit */
#endif
