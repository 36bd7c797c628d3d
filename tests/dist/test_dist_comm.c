/* Collectives against expected values, run under mpirun with N = 1..4 ranks (and directly: the
 * single-process communicator). Usage: test_dist_comm N  (the world size mpirun was asked for).
 *
 * Sums of small integers are exact in f32, so most checks are exact. Random data checks that
 *   - every rank gets the same bits (native MPI_Allreduce and our ring),
 *   - the ring sums block b in the documented order x_b + x_{b+1} + ... + x_{b-1} (bit-exact),
 *   - the native sum is within the f32 summation error bound (N - 1) eps sum_r |x_r| of a
 *     double-precision sum.
 * Sizes include 1 element, sizes that do not divide by N, and sizes above the ring's segment. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dist/comm_impl.h" /* test-only: calls a backend without the argument checks */
#include "dtrain/dist.h"
#include "dtrain/runtime.h"
#include "harness.h"

static int R, N; /* rank, world size */

static const size_t SIZES[] = {1, 3, 17, 1000, 262147, (1u << 20) + 5};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

/* Rank r's value at i: small integers, so that any summation order is exact. */
static float int_val(int r, size_t i) {
    return (float)((r + 1) * (int)(i % 251 + 1));
}

static void test_allreduce_exact(dt_comm *c, float *buf, float *want) {
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        for (size_t i = 0; i < n; i++) buf[i] = int_val(R, i);
        CHECK_OK(dt_comm_allreduce(c, buf, n, 0));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float w = (float)((int)(i % 251 + 1) * N * (N + 1) / 2);
            bad += buf[i] != w;
        }
        CHECK(bad == 0, "allreduce algo %d n %zu: %d wrong sums", dt_comm_get_algo(c), n, bad);
        /* DT_COMM_AVG: the exact sum times 1/N, as the library computes it */
        for (size_t i = 0; i < n; i++) buf[i] = int_val(R, i);
        CHECK_OK(dt_comm_allreduce(c, buf, n, DT_COMM_AVG));
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            float sum = (float)((int)(i % 251 + 1) * N * (N + 1) / 2);
            want[i] = N > 1 ? sum * (1.0f / (float)N) : sum;
            bad += buf[i] != want[i];
        }
        CHECK(bad == 0, "allreduce avg algo %d n %zu: %d wrong", dt_comm_get_algo(c), n, bad);
    }
}

/* Rank r's random data for the bit-level checks. */
static void rand_val(float *x, size_t n, int r) {
    dt_randn(x, (int64_t)n, 1000 + (uint64_t)r, 1);
}

static void test_allreduce_random(dt_comm *c, float *buf, float *tmp, float *copy) {
    size_t n = 262147 + 1000; /* > one ring segment per block for N <= 2, odd */
    rand_val(buf, n, R);
    CHECK_OK(dt_comm_allreduce(c, buf, n, 0));
    /* the same bits everywhere: rank 0's result broadcast and compared */
    memcpy(copy, buf, n * sizeof(float));
    CHECK_OK(dt_comm_broadcast(c, copy, n * sizeof(float), 0));
    CHECK(!memcmp(copy, buf, n * sizeof(float)), "algo %d: ranks hold different sums",
          dt_comm_get_algo(c));
    /* expected: every rank regenerates all ranks' inputs */
    double *acc = calloc(n, sizeof(double)), *mag = calloc(n, sizeof(double));
    float *fsum = calloc(n, sizeof(float));
    size_t per = (n + (size_t)N - 1) / (size_t)N;
    for (int b = 0; b < N; b++) {
        size_t lo = (size_t)b * per, hi = lo + per < n ? lo + per : n;
        for (int k = 0; k < N; k++) { /* ring order: x_b, x_{b+1}, ..., x_{b-1} */
            int r = (b + k) % N;
            rand_val(tmp, n, r);
            for (size_t i = lo; i < hi; i++) {
                acc[i] += tmp[i];
                mag[i] += fabs(tmp[i]);
                fsum[i] = k == 0 ? tmp[i] : tmp[i] + fsum[i];
            }
        }
    }
    if (dt_comm_get_algo(c) == DT_COMM_ALGO_RING) {
        CHECK(!memcmp(fsum, buf, n * sizeof(float)),
              "ring sum differs from x_b + x_{b+1} + ... in that order");
    }
    /* f32 summation of N terms: error <= (N - 1) eps sum |x_r| (first order) */
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(buf[i] - acc[i]) / (FLT_EPSILON * (N > 1 ? N - 1 : 1) * mag[i] + 1e-30);
        if (e > worst) worst = e;
    }
    CHECK(worst <= 1.0, "algo %d: random sum off by %.3g of the error bound", dt_comm_get_algo(c),
          worst);
    free(acc), free(fsum), free(mag);
}

static void test_f64(dt_comm *c) {
    double v[3] = {R + 0.5, 1e-300, (double)(1 << 20) * R};
    CHECK_OK(dt_comm_allreduce_f64(c, v, 3));
    CHECK(v[0] == N * (N - 1) / 2.0 + 0.5 * N, "f64 sum %.17g", v[0]);
    CHECK(fabs(v[1] - 1e-300 * N) <= 1e-315, "f64 tiny %.17g", v[1]);
    CHECK(v[2] == (double)(1 << 20) * N * (N - 1) / 2, "f64 big %.17g", v[2]);
}

/* Bitwise OR of row bitmaps (row-sparse gradients): rank r sets bit r of word 0, bit 63 - r of
 * word 2, and word 1 only on the last rank. */
static void test_or(dt_comm *c) {
    uint64_t w[3] = {(uint64_t)1 << R, R == N - 1 ? 0xf0f0ull : 0, (uint64_t)1 << (63 - R)};
    CHECK_OK(dt_comm_allreduce_or(c, w, 3));
    uint64_t all = N >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << N) - 1);
    CHECK(w[0] == all && w[1] == 0xf0f0ull && w[2] == all << (64 - N), "or: %llx %llx %llx",
          (unsigned long long)w[0], (unsigned long long)w[1], (unsigned long long)w[2]);
}

/* dt_comm_allgather_blocks: rank r's block of r % 3 * 5 + 1 elements (rank 1 none: 0), back to
 * back in rank order, in place; the bits of every block arrive unchanged (a -0.0, a NaN
 * payload: bf16 pairs seen as floats). */
static void test_blocks(dt_comm *c) {
    size_t counts[64] = {0}, at = 0, mine = 0, total = 0;
    for (int r = 0; r < N && r < 64; r++) {
        counts[r] = r == 1 ? 0 : (size_t)(r % 3 * 5 + 1);
        if (r < R) at += counts[r];
        total += counts[r];
    }
    mine = counts[R];
    uint32_t *buf = malloc((total ? total : 1) * sizeof *buf);
    for (size_t i = 0; i < total; i++) buf[i] = 0xdeadbeefu; /* others' places: overwritten */
    for (size_t i = 0; i < mine; i++)
        buf[at + i] = i == 0 ? 0x80000000u : 0x7fc0a000u + (uint32_t)(R * 64 + i);
    CHECK_OK(dt_comm_allgather_blocks(c, (float *)buf, counts));
    int bad = 0;
    for (int r = 0, o = 0; r < N && r < 64; o += (int)counts[r], r++)
        for (size_t i = 0; i < counts[r]; i++)
            bad += buf[o + i] != (i == 0 ? 0x80000000u : 0x7fc0a000u + (uint32_t)(r * 64 + i));
    CHECK(bad == 0, "allgather_blocks: %d wrong elements of %zu", bad, total);
    free(buf);
}

static void test_broadcast(dt_comm *c) {
    unsigned char bytes[13];
    for (int root = 0; root < N; root++) {
        for (int i = 0; i < 13; i++) bytes[i] = (unsigned char)(R == root ? 7 * i + root : 0xee);
        CHECK_OK(dt_comm_broadcast(c, bytes, sizeof bytes, root));
        int bad = 0;
        for (int i = 0; i < 13; i++) bad += bytes[i] != (unsigned char)(7 * i + root);
        CHECK(bad == 0, "broadcast from root %d: %d wrong bytes", root, bad);
    }
}

/* A padded flat buffer of n = 1001 elements: shard = ceil(n / N) rounded up to 16. */
static void test_shards(dt_comm *c) {
    size_t n = 1001, shard = dt_comm_shard_size(n, N);
    CHECK(shard % 16 == 0 && shard * (size_t)N >= n && (shard - 16) * (size_t)N < n,
          "shard size %zu for n %zu over %d", shard, n, N);
    float *send = calloc(shard * (size_t)N, sizeof(float)), *recv = calloc(shard, sizeof(float));
    float *all = calloc(shard * (size_t)N, sizeof(float));
    for (size_t i = 0; i < n; i++) send[i] = (float)((R + 1) * (int)(i + 1));
    for (unsigned flags = 0; flags <= DT_COMM_AVG; flags += DT_COMM_AVG) {
        CHECK_OK(dt_comm_reduce_scatter(c, send, recv, shard, flags));
        int bad = 0;
        for (size_t j = 0; j < shard; j++) {
            size_t gi = (size_t)R * shard + j;
            float w = gi < n ? (float)((int)(gi + 1) * N * (N + 1) / 2) : 0.0f;
            if (flags && N > 1) w *= 1.0f / (float)N;
            bad += recv[j] != w;
        }
        CHECK(bad == 0, "reduce_scatter flags %u: %d wrong of shard %zu", flags, bad, shard);
    }
    /* all-gather: rank r's shard holds r * 10000 + j; out of place, then in place */
    for (size_t j = 0; j < shard; j++) recv[j] = (float)(R * 10000 + (int)j);
    for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t i = 0; i < shard * (size_t)N; i++) all[i] = -1;
        if (inplace) memcpy(all + (size_t)R * shard, recv, shard * sizeof(float));
        CHECK_OK(dt_comm_allgather(c, inplace ? all + (size_t)R * shard : recv, all, shard));
        int bad = 0;
        for (int r = 0; r < N; r++)
            for (size_t j = 0; j < shard; j++)
                bad += all[(size_t)r * shard + j] != (float)(r * 10000 + (int)j);
        CHECK(bad == 0, "allgather (in place %d): %d wrong", inplace, bad);
    }
    free(send), free(recv), free(all);
}

/* Bad calls fail on every rank alike, before communicating, naming the op and the rank. */
static void test_errors(dt_comm *c) {
    float x[4] = {0};
    dt_status s = dt_comm_broadcast(c, x, sizeof x, N);
    CHECK(s == DT_ERR_RANGE && strstr(dt_last_error(), "broadcast") &&
              strstr(dt_last_error(), "root"),
          "broadcast to root N: %d %s", s, dt_last_error());
    s = dt_comm_allreduce(c, NULL, 5, 0);
    CHECK(s == DT_ERR_INVALID && strstr(dt_last_error(), "allreduce") &&
              strstr(dt_last_error(), "rank"),
          "allreduce NULL: %d %s", s, dt_last_error());
    s = dt_comm_reduce_scatter(c, x, x + N - 1, 1, 0); /* recv inside send */
    CHECK(s == DT_ERR_INVALID && strstr(dt_last_error(), "reduce_scatter"),
          "overlapping reduce_scatter: %d %s", s, dt_last_error());
    s = dt_comm_set_algo(c, (dt_comm_algo)7);
    CHECK(s == DT_ERR_INVALID, "set_algo 7 accepted");
    /* An error inside MPI (here: an invalid root that only MPI's own checks see, on every rank)
     * comes back as a status whose message names the op, the rank and MPI's error string. */
    if (!strcmp(dt_comm_backend(c), "mpi")) {
        s = c->ops->broadcast(c, x, sizeof x, N + 3);
        char want[64];
        snprintf(want, sizeof want, "rank %d of %d", R, N);
        CHECK(s == DT_ERR_IO && strstr(dt_last_error(), "comm broadcast") &&
                  strstr(dt_last_error(), want) && strstr(dt_last_error(), "MPI error") &&
                  strstr(dt_last_error(), "root"),
              "MPI error: %d %s", s, dt_last_error());
        if (R == 0) printf("an MPI error reads: %s\n", dt_last_error());
    }
    CHECK_OK(dt_comm_allreduce(c, x, 0, 0)); /* empty is fine */
    CHECK_OK(dt_comm_barrier(c));            /* and the ranks are still in step */
}

/* ---- shared buffers (dt_comm_share) ------------------------------------------------------ */

/* H hosts of L ranks (DT_COMM_NODE_SIZE = L, or all on one): rank r is local rank r % L. */
static int shared_L(void) {
    const char *e = getenv("DT_COMM_NODE_SIZE");
    int k = e && *e ? atoi(e) : 0;
    return k > 0 && k < N ? k : N;
}

/* Expected bits of element i summed over ranks: each host sums its L ranks in local rank order;
 * with 2 hosts MPI adds the two host sums (a + b is commutative: exact). */
static float shared_want(const float *const *x, size_t i, int L) {
    float host[4];
    for (int h = 0; h < N / L; h++) {
        host[h] = x[h * L][i];
        for (int q = 1; q < L; q++) host[h] = host[h] + x[h * L + q][i];
    }
    return N / L == 2 ? host[0] + host[1] : host[0];
}

static void test_shared(dt_comm *c) {
    size_t page = 4096, n = 262147 + 1000, bytes = (n * sizeof(float) + page - 1) / page * page;
    float *buf = aligned_alloc(page, bytes), *x[4];
    for (int r = 0; r < N; r++) {
        x[r] = malloc(n * sizeof(float));
        rand_val(x[r], n, r);
    }
    memcpy(buf, x[R], n * sizeof(float));
    dt_comm_shared *s = NULL;
    CHECK_OK(dt_comm_share(c, buf, n, &s));
    int L = shared_L();
    const char *note = dt_comm_share_note(c);
    if (R == 0) printf("share: %s\n", note);
    if (N == 1 || L == 1) {
        CHECK(s == NULL && strstr(note, N == 1 ? "one process" : "one rank per host"),
              "share with %d ranks, %d per host: handle %p, note '%s'", N, L, (void *)s, note);
        free(buf);
        for (int r = 0; r < N; r++) free(x[r]);
        return;
    }
    CHECK(s != NULL && strstr(note, "shared memory"), "share on %d ranks: no handle, note '%s'", N,
          note);
    if (!s) return;
    CHECK(!memcmp(buf, x[R], n * sizeof(float)), "share changed the buffer's contents");
    /* Ranges: the whole buffer, then odd pieces (slices of 1..L elements, unaligned ends); the
     * elements outside a range must not change. */
    const size_t lo_[] = {0, 5, 1000, 77, n - 3}, hi_[] = {n, 6, 1003, 262147, n};
    for (size_t t = 0; t < sizeof lo_ / sizeof lo_[0]; t++) {
        size_t lo = lo_[t], hi = hi_[t];
        memcpy(buf, x[R], n * sizeof(float));
        CHECK_OK(dt_comm_shared_fence(s)); /* every rank has refilled before anyone reads */
        CHECK_OK(dt_comm_allreduce_shared(s, lo, hi, 0));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float w = i >= lo && i < hi ? shared_want((const float *const *)x, i, L) : x[R][i];
            bad += memcmp(&w, &buf[i], sizeof w) != 0;
        }
        CHECK(bad == 0, "allreduce_shared [%zu, %zu), %d per host: %d elements wrong", lo, hi, L,
              bad);
        CHECK_OK(dt_comm_shared_fence(s));
    }
    /* DT_COMM_AVG, and with 2 ranks the same bits as MPI_Allreduce */
    memcpy(buf, x[R], n * sizeof(float));
    CHECK_OK(dt_comm_shared_fence(s));
    CHECK_OK(dt_comm_allreduce_shared(s, 0, n, DT_COMM_AVG));
    CHECK_OK(dt_comm_shared_fence(s));
    float *ref = malloc(n * sizeof(float));
    memcpy(ref, x[R], n * sizeof(float));
    CHECK_OK(dt_comm_allreduce(c, ref, n, DT_COMM_AVG));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float w = shared_want((const float *const *)x, i, L) * (1.0f / (float)N);
        bad += memcmp(&w, &buf[i], sizeof w) != 0;
    }
    CHECK(bad == 0, "allreduce_shared avg: %d elements wrong", bad);
    if (N == 2) CHECK(!memcmp(ref, buf, n * sizeof(float)), "2 ranks: differs from MPI_Allreduce");
    CHECK(dt_comm_allreduce_shared(s, 5, n + 1, 0) == DT_ERR_RANGE, "range past the buffer");
    /* unshare keeps the contents */
    memcpy(ref, buf, n * sizeof(float));
    dt_comm_unshare(s);
    CHECK(!memcmp(ref, buf, n * sizeof(float)), "unshare changed the buffer's contents");
    buf[0] = (float)R; /* private again: writable, and nobody else maps it */
    /* One rank's buffer is not page-aligned: nobody shares, and everyone says why. */
    CHECK_OK(dt_comm_share(c, R == N - 1 ? buf + 1 : buf, n - 1, &s));
    CHECK(s == NULL && strstr(dt_comm_share_note(c), "page-aligned"),
          "unaligned buffer on rank %d: handle %p, note '%s'", N - 1, (void *)s,
          dt_comm_share_note(c));
    dt_comm_unshare(s);
    free(ref), free(buf);
    for (int r = 0; r < N; r++) free(x[r]);
}

int main(int argc, char **argv) {
    dt_threads_set(1);
    int want = argc > 1 ? atoi(argv[1]) : 1;
    dt_comm *c = NULL;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    if (!c) return dt_test_finish("test_dist_comm");
    R = dt_comm_rank(c), N = dt_comm_size(c);
    CHECK(N == want, "world size %d, expected %d", N, want);
    CHECK(R >= 0 && R < N, "rank %d", R);
    CHECK(dt_comm_local_rank(c) == R && dt_comm_local_size(c) == N, "local rank %d of %d",
          dt_comm_local_rank(c), dt_comm_local_size(c));
    const char *be = dt_comm_backend(c);
    CHECK(!strcmp(be, N > 1 || getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "single"), "backend %s",
          be);
    if (R == 0) printf("backend %s, %d ranks, thread level %s\n", be, N, dt_comm_thread_level(c));

    size_t big = SIZES[N_SIZES - 1];
    float *buf = malloc(big * sizeof(float)), *want_b = malloc(big * sizeof(float));
    float *tmp = malloc(big * sizeof(float)), *copy = malloc(big * sizeof(float));
    for (int algo = DT_COMM_ALGO_NATIVE; algo <= DT_COMM_ALGO_RING; algo++) {
        CHECK_OK(dt_comm_set_algo(c, (dt_comm_algo)algo));
        test_allreduce_exact(c, buf, want_b);
        test_allreduce_random(c, buf, tmp, copy);
    }
    CHECK_OK(dt_comm_set_algo(c, DT_COMM_ALGO_NATIVE));
    test_f64(c);
    test_or(c);
    test_blocks(c);
    test_broadcast(c);
    test_shards(c);
    test_errors(c);
    test_shared(c);
    free(buf), free(want_b), free(tmp), free(copy);
    dt_comm_close(c);
    return dt_test_finish("test_dist_comm");
}
