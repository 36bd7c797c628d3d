/* The hang watchdog (dt_comm_set_timeout) under mpirun. Usage: test_dist_hang MODE [PIDDIR]
 *
 *   normal   (any world size) a timeout changes no result: the same bits as without one, no
 *            false alarm when a peer is late by less than the timeout, bad timeouts refused;
 *            without a hang handler a peer later than the timeout is reported and the
 *            collective completes when it arrives (the library ends no process).
 *   OP       (2 ranks) rank 1 stops itself (SIGSTOP) just before collective OP; rank 0, with a
 *            2 s timeout, must end the job: exit status DT_COMM_EXIT_HANG and one line naming
 *            rank 0, OP and dist.timeout_s (tests/dist/expect_hang.sh checks the time, the
 *            status, the line and that no rank is left). OP: allreduce, ring, f64, or,
 *            broadcast, barrier, reduce_scatter, allgather, shared, fence, finalize, and
 *            outside: a wait outside the communicator's collectives under dt_comm_watch_begin
 *            (as the NCCL init and all-reduce waits are).
 * Each rank writes its pid to PIDDIR/rank-R.pid (when given), so that the script can check
 * that mpirun left no process behind, stopped ones included. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <mpi.h>
#include "dtrain/dist.h"
#include "harness.h"

static int R, N;

/* The program's hang handler, as `dtrain` installs it (src/cli/main.c): end the job with the
 * watchdog's exit status. The library only reports. */
static void end_hung_job(void *ud, const dt_comm_hang *h) {
    (void)ud;
    if (h->mpi_abort_ok) MPI_Abort(MPI_COMM_WORLD, h->code);
    _exit(h->code);
}

static void nap(double s) {
    nanosleep(&(struct timespec){(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, NULL);
}

/* Sums of random floats (rank-dependent) with the current timeout, into out [n]. */
static void sum_random(dt_comm *c, float *out, size_t n) {
    dt_randn(out, (int64_t)n, 77 + (uint64_t)R, 1);
    CHECK_OK(dt_comm_allreduce(c, out, n, DT_COMM_AVG));
}

static void test_normal(dt_comm *c) {
    CHECK(dt_comm_get_timeout(c) == 0, "a new communicator has no timeout");
    CHECK(dt_comm_set_timeout(c, -1) == DT_ERR_RANGE, "a negative timeout is refused");
    size_t n = 300007;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    sum_random(c, a, n);
    CHECK_OK(dt_comm_set_timeout(c, 600)); /* the trainer's default */
    CHECK(dt_comm_get_timeout(c) == 600, "timeout read back");
    dt_comm_set_step(c, 1);
    sum_random(c, b, n);
    CHECK(!memcmp(a, b, n * sizeof *a), "the same bits with and without the watchdog");
    /* a peer later than the watchdog's period but within the timeout: no alarm */
    CHECK_OK(dt_comm_set_timeout(c, 2.0));
    for (int k = 0; k < 3; k++) {
        if (R == N - 1) nap(0.5);
        double x = R + 1;
        CHECK_OK(dt_comm_allreduce_f64(c, &x, 1));
        CHECK(x == N * (N + 1) / 2.0, "f64 sum %g", x);
        CHECK_OK(dt_comm_barrier(c));
    }
    /* Without a hang handler the library ends nothing: the last rank late by 1.5 timeouts is
     * reported (one line on stderr) and the collective completes when it arrives. */
    if (N >= 2) {
        dt_comm_set_hang_handler(NULL, NULL);
        CHECK_OK(dt_comm_set_timeout(c, 1.0));
        if (R == N - 1) nap(1.6);
        double x = R + 1;
        CHECK_OK(dt_comm_allreduce_f64(c, &x, 1));
        CHECK(x == N * (N + 1) / 2.0, "f64 sum after a late peer, no handler: %g", x);
        CHECK_OK(dt_comm_barrier(c));
        dt_comm_set_hang_handler(end_hung_job, NULL);
    }
    CHECK_OK(dt_comm_set_timeout(c, 0)); /* off again */
    free(a), free(b);
}

/* Rank 1 stops before `op`; rank 0 runs it (and never returns from it). */
static void test_stall(dt_comm *c, const char *op) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 1 << 16;
    float *buf = aligned_alloc(page, (n * sizeof(float) + page - 1) / page * page);
    for (size_t i = 0; i < n; i++) buf[i] = (float)i;
    dt_comm_shared *sh = NULL;
    if (!strcmp(op, "shared") || !strcmp(op, "fence")) {
        CHECK_OK(dt_comm_share(c, buf, n, &sh));
        CHECK(sh != NULL, "shared memory: %s", dt_comm_share_note(c));
        if (!sh) return;
    }
    if (!strcmp(op, "ring")) CHECK_OK(dt_comm_set_algo(c, DT_COMM_ALGO_RING));
    CHECK_OK(dt_comm_set_timeout(c, 2.0));
    dt_comm_set_step(c, 7);
    CHECK_OK(dt_comm_barrier(c)); /* both ranks are here and watched */
    if (strcmp(op, "finalize")) {
        if (R == 1) raise(SIGSTOP);
    } else {
        dt_comm_set_step(c, -1);
        if (R == 1) raise(SIGSTOP);
        dt_comm_close(c); /* MPI_Finalize waits for rank 1 */
        printf("rank %d: MPI_Finalize returned with rank 1 stopped\n", R);
        exit(0);
    }
    double d = 1;
    uint64_t u = 1;
    dt_status st = DT_OK;
    size_t shard = n / 2;
    if (!strcmp(op, "allreduce") || !strcmp(op, "ring"))
        st = dt_comm_allreduce(c, buf, n, 0);
    else if (!strcmp(op, "f64"))
        st = dt_comm_allreduce_f64(c, &d, 1);
    else if (!strcmp(op, "or"))
        st = dt_comm_allreduce_or(c, &u, 1);
    else if (!strcmp(op, "broadcast"))
        st = dt_comm_broadcast(c, buf, n * sizeof(float), 1);
    else if (!strcmp(op, "barrier"))
        st = dt_comm_barrier(c);
    else if (!strcmp(op, "reduce_scatter"))
        st = dt_comm_reduce_scatter_range(c, buf, buf, 0, n, shard, 0);
    else if (!strcmp(op, "allgather"))
        st = dt_comm_allgather_range(c, buf, 0, n, shard);
    else if (!strcmp(op, "shared"))
        st = dt_comm_allreduce_shared(sh, 0, n, 0);
    else if (!strcmp(op, "fence"))
        st = dt_comm_shared_fence(sh);
    else if (!strcmp(op, "outside")) { /* a wait of another library's (NCCL), bracketed */
        dt_comm_watch_begin(c, "NCCL all-reduce");
        for (;;) nap(1); /* never ends: only the watchdog gets out of it */
    } else
        CHECK(0, "unknown mode %s", op);
    /* only reached when the watchdog did not fire */
    CHECK(0, "rank %d: %s returned (status %d) although rank 1 is stopped", R, op, (int)st);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "normal";
    dt_comm_set_hang_handler(end_hung_job, NULL);
    dt_comm *c;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    if (!c) return dt_test_finish("test_dist_hang");
    R = dt_comm_rank(c), N = dt_comm_size(c);
    if (argc > 2) {
        char p[4096];
        snprintf(p, sizeof p, "%s/rank-%d.pid", argv[2], R);
        FILE *f = fopen(p, "w");
        if (f) fprintf(f, "%ld\n", (long)getpid()), fclose(f);
    }
    if (!strcmp(mode, "normal")) {
        test_normal(c);
    } else if (N != 2) {
        CHECK(0, "mode %s needs 2 ranks, got %d", mode, N);
    } else {
        test_stall(c, mode);
        dt_comm_set_failed(c); /* a failed check: do not wait for the stopped rank */
    }
    dt_comm_close(c);
    return dt_test_finish("test_dist_hang");
}
