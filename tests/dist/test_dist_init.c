/* Choosing the communicator without a launcher (run directly, not under mpirun):
 *   - "mpi" gives a clear error at start (what is missing, how to fix it), not a hang or a crash;
 *   - an unknown backend is an error naming it; "auto" falls back to one process;
 *   - the single-process communicator's collectives are copies/no-ops; dt_ddp works on it;
 *   - dt_ddp over a fake 2-rank backend (test-only vtable): averaging, and a collective failing
 *     on the communication thread comes back from dt_ddp_wait with its message, without a hang,
 *     and the next step works. */
#include <stdlib.h>
#include <string.h>
#include "dist/comm_impl.h"
#include "dtrain/dist.h"
#include "dtrain/ops.h"
#include "dtrain/runtime.h"
#include "harness.h"

static void expect_msg(const char *what, const char *const *words) {
    for (int i = 0; words[i]; i++)
        CHECK(strstr(dt_last_error(), words[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
              dt_last_error(), words[i]);
}

/* A fake backend: "two ranks holding the same data" (a sum doubles), failing on call fail_at. */
static int fake_calls, fake_fail_at;
static dt_status fake_allreduce(dt_comm *c, float *buf, size_t n) {
    if (++fake_calls == fake_fail_at)
        return dt_error_set(DT_ERR_IO, "comm allreduce: rank 0 of 2: MPI error 15: fake failure");
    for (size_t i = 0; i < n; i++) buf[i] *= 2;
    return DT_OK;
}
static dt_status fake_other(dt_comm *c) {
    return DT_OK;
}
static void fake_destroy(dt_comm *c, int finalize) {}

static void ddp_fake_backend(void) {
    static const dt_comm_ops ops = {.name = "fake",
                                    .allreduce_f32 = fake_allreduce,
                                    .barrier = fake_other,
                                    .destroy = fake_destroy};
    dt_comm fake = {.ops = &ops, .rank = 0, .size = 2, .local_size = 2, .thread_level = "-"};
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 3}, 0);
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){2, 3}, 0);
    int bb = dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){2}, 0);
    int r;
    CHECK_OK(dt_graph_compile(g, dt_test_dotloss(g, dt_linear(g, x, w, bb), &r), NULL));
    dt_test_randn(g, x, 1, 1), dt_test_randn(g, w, 2, 1), dt_test_randn(g, r, 3, 1);
    dt_ddp_opts o = dt_ddp_opts_default();
    o.bucket_mb = 1e-6; /* one parameter per bucket */
    dt_ddp *d = NULL;
    CHECK_OK(dt_ddp_open(g, &fake, &o, &d));
    if (!d) return;
    CHECK(dt_ddp_bucket_count(d) == 2, "%d buckets", dt_ddp_bucket_count(d));
    size_t n;
    float *gr = dt_graph_flat_grad(g, &n), keep[8];
    for (int step = 0; step < 3; step++) {
        fake_calls = 0, fake_fail_at = step == 1 ? 1 : 0;
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        memcpy(keep, gr, sizeof keep);
        dt_status s = dt_ddp_wait(d);
        if (step != 1) {
            CHECK(s == DT_OK, "step %d: %s", step, dt_last_error());
            CHECK(!memcmp(keep, gr, sizeof keep), "step %d: mean of 2 equal ranks changed", step);
            CHECK(fake_calls == 2, "step %d: %d all-reduces", step, fake_calls);
        } else {
            CHECK(s == DT_ERR_IO && strstr(dt_last_error(), "ddp: gradient bucket ") &&
                      strstr(dt_last_error(), "fake failure"),
                  "failed collective: %d %s", s, dt_last_error());
            CHECK(fake_calls == 1, "after a failure the other bucket still communicated");
            printf("a failed bucket reads: %s\n", dt_last_error());
        }
    }
    dt_ddp_close(d);
    dt_graph_free(g);
}

/* Tail bucket: the first parameters (the ones backward finishes last) that fit in 1 MiB get a
 * bucket of their own, so the all-reduce after backward's end is small; the others fill 25 MiB
 * buckets from the last parameter back. Parameters (floats): a 1,000, b 100,000 (with a
 * non-trainable state between), c 300,000, d 7,000,000 (28 MB: alone), e 10. Buckets, last
 * parameter first: [e], [d], [c], tail [a, b]. */
static void ddp_tail_bucket(dt_comm *c) {
    dt_graph *g = dt_graph_init();
    static const int64_t sz[] = {1000, 100000, 300000, 7000000, 10};
    static const char *nm[] = {"a", "b", "c", "d", "e"};
    int x = dt_graph_input(g, "x", DT_F32, 1, (int64_t[]){1}, 0), p[5], sum = -1;
    for (int i = 0; i < 5; i++) {
        p[i] = dt_graph_param(g, nm[i], DT_F32, 1, &sz[i], 0);
        if (i == 1) dt_graph_param(g, "state", DT_F32, 1, (int64_t[]){8}, DT_PARAM_STATE);
        int t = dt_sum(g, dt_mul(g, p[i], x));
        sum = sum < 0 ? t : dt_add(g, sum, t);
    }
    CHECK_OK(dt_graph_compile(g, sum, NULL));
    dt_ddp *d = NULL;
    CHECK_OK(dt_ddp_open(g, c, NULL, &d));
    if (d) {
        size_t lo[4], hi[4], n;
        dt_graph_flat_grad(g, &n);
        int nb = dt_ddp_bucket_count(d);
        CHECK(nb == 4, "%d buckets, expected 4: e, d (larger than 25 MiB), c, tail a + b", nb);
        for (int k = 0; k < nb && k < 4; k++) dt_ddp_bucket_range(d, k, &lo[k], &hi[k]);
        if (nb == 4) {
            const dt_param_info *pb = dt_graph_param_info(g, 1), *pc = dt_graph_param_info(g, 3);
            CHECK(lo[3] == 0 && hi[3] == pb->offset + pb->numel,
                  "tail bucket [%zu, %zu) holds exactly a and b", lo[3], hi[3]);
            CHECK(lo[2] == pc->offset && hi[2] == pc->offset + pc->numel && hi[0] == n,
                  "c alone before the tail, e first");
        }
        dt_ddp_close(d);
    }
    /* A model that fits the tail whole keeps one bucket. */
    dt_ddp_opts o = dt_ddp_opts_default();
    o.bucket_mb = 0.5; /* below the tail size: the tail shrinks to it */
    CHECK_OK(dt_ddp_open(g, c, &o, &d));
    if (d) {
        size_t lo, hi;
        dt_ddp_bucket_range(d, dt_ddp_bucket_count(d) - 1, &lo, &hi);
        CHECK(lo == 0 && (hi - lo) * sizeof(float) <= (size_t)(0.5 * 1048576),
              "tail bucket of %zu floats within a 0.5 MiB bucket size", hi - lo);
        dt_ddp_close(d);
    }
    dt_graph_free(g);
}

int main(int argc, char **argv) {
    dt_threads_set(1);
    /* Test-only: make sure no launcher variable leaks in from the environment. */
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                          "SLURM_STEP_NUM_TASKS"};
    for (int i = 0; i < 5; i++) unsetenv(vars[i]);

    dt_comm *c = (dt_comm *)1;
    dt_status s = dt_comm_open("mpi", &argc, &argv, &c);
    CHECK(s == DT_ERR_STATE && c == NULL, "backend mpi without mpirun: status %d", s);
    if (dt_comm_have_mpi())
        expect_msg("mpi without launcher",
                   (const char *[]){"dist.backend=mpi", "mpirun", "dist.backend=single", NULL});
    else
        expect_msg("mpi without MPI", (const char *[]){"without MPI", NULL});
    printf("backend=mpi without a launcher: %s\n", dt_last_error());

    if (!dt_comm_have_mpi()) { /* under mpirun but built without MPI: refuse, not N solo runs */
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        s = dt_comm_open("auto", NULL, NULL, &c);
        CHECK(s == DT_ERR_STATE, "auto under a launcher without MPI: status %d", s);
        expect_msg("auto without MPI",
                   (const char *[]){"OMPI_COMM_WORLD_SIZE", "without MPI", NULL});
        unsetenv("OMPI_COMM_WORLD_SIZE");
    }

    s = dt_comm_open("nccl", NULL, NULL, &c);
    CHECK(s == DT_ERR_INVALID, "unknown backend: status %d", s);
    expect_msg("unknown backend", (const char *[]){"nccl", "auto, mpi or single", NULL});

    setenv("DT_COMM_ALGO", "tree", 1);
    s = dt_comm_open("single", NULL, NULL, &c);
    CHECK(s == DT_ERR_INVALID, "DT_COMM_ALGO=tree: status %d", s);
    expect_msg("bad DT_COMM_ALGO", (const char *[]){"DT_COMM_ALGO", "tree", NULL});
    unsetenv("DT_COMM_ALGO");

    c = NULL;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    if (!c) return dt_test_finish("test_dist_init");
    CHECK(!strcmp(dt_comm_backend(c), "single") && dt_comm_size(c) == 1 && dt_comm_rank(c) == 0,
          "auto without launcher: %s, size %d", dt_comm_backend(c), dt_comm_size(c));
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    CHECK_OK(dt_comm_allreduce(c, a, 5, DT_COMM_AVG));
    CHECK(a[0] == 1 && a[4] == 5, "single allreduce changed data");
    CHECK_OK(dt_comm_reduce_scatter(c, a, b, 5, 0));
    CHECK(!memcmp(a, b, sizeof a), "single reduce_scatter is not a copy");
    CHECK_OK(dt_comm_allgather(c, a, b, 5));
    CHECK_OK(dt_comm_allgather(c, b, b, 5));
    CHECK(!memcmp(a, b, sizeof a), "single allgather is not a copy");
    double d = 2.5;
    CHECK_OK(dt_comm_allreduce_f64(c, &d, 1));
    CHECK(d == 2.5, "single f64");
    CHECK_OK(dt_comm_broadcast(c, a, sizeof a, 0));
    CHECK(dt_comm_broadcast(c, a, sizeof a, 1) == DT_ERR_RANGE, "root 1 of 1 accepted");
    CHECK_OK(dt_comm_barrier(c));

    ddp_tail_bucket(c);

    /* dt_ddp on one process: gradients stay as backward left them. */
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 3}, 0);
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){2, 3}, 0);
    int bb = dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){2}, 0);
    int r;
    int loss = dt_test_dotloss(g, dt_linear(g, x, w, bb), &r);
    dt_ddp *dd = NULL;
    CHECK(dt_ddp_open(g, c, NULL, &dd) == DT_ERR_STATE, "ddp on an uncompiled graph accepted");
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_randn(g, x, 1, 1), dt_test_randn(g, w, 2, 1), dt_test_randn(g, r, 3, 1);
    dt_ddp_opts o = dt_ddp_opts_default();
    o.bucket_mb = 0;
    CHECK(dt_ddp_open(g, c, &o, &dd) == DT_ERR_INVALID, "bucket 0 MiB accepted");
    CHECK_OK(dt_ddp_open(g, c, NULL, &dd));
    if (dd) {
        CHECK(dt_ddp_bucket_count(dd) == 1, "%d buckets", dt_ddp_bucket_count(dd));
        CHECK_OK(dt_ddp_broadcast_params(dd));
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        size_t n;
        float *gr = dt_graph_flat_grad(g, &n), keep[8];
        memcpy(keep, gr, n * sizeof(float));
        CHECK_OK(dt_ddp_wait(dd));
        CHECK(!memcmp(keep, gr, n * sizeof(float)), "ddp on one rank changed the gradients");
        /* wait without a backward since the last one: an error, not a hang */
        s = dt_ddp_wait(dd);
        CHECK(s == DT_ERR_STATE && strstr(dt_last_error(), "buckets"),
              "wait without backward: %d %s", s, dt_last_error());
        /* two backwards without wait */
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        CHECK_OK(dt_graph_backward(g));
        s = dt_ddp_wait(dd);
        CHECK(s == DT_ERR_STATE && strstr(dt_last_error(), "twice"), "double backward: %d %s", s,
              dt_last_error());
        dt_ddp_stats st;
        dt_ddp_get_stats(dd, &st);
        CHECK(st.steps == 3 && st.bytes_per_step == 8 * sizeof(float), "stats: %lld steps, %zu B",
              (long long)st.steps, st.bytes_per_step);
        dt_ddp_close(dd);
    }
    dt_graph_free(g);
    dt_comm_close(c);
    ddp_fake_backend();
    return dt_test_finish("test_dist_init");
}
