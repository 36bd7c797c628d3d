/* dt_gpu_comm (include/dtrain/gpu_comm.h) without a GPU: the choice between NCCL and host
 * staging from given facts, NCCL's loader with a library that does not exist, and the host
 * way's all-reduce on the CPU device (its pinned buffer is plain memory, its stream completes
 * at once) over the single-process communicator or N MPI ranks (argv[1] = N):
 *   - exact: rank r's element i is (r + 1) / 4 + (i mod 13) - 6, all sums exact in f32, so the
 *     expected value is the formula summed over ranks here (and halved etc. for DT_COMM_AVG);
 *   - bits: pseudo-random floats give the same bits as dt_comm_allreduce on a copy (the CPU
 *     ranks' DDP reduction). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "dtrain/gpu_comm.h"
#include "harness.h"

static int has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

static void test_choose(void) {
    char note[256];
    dt_gpu_comm_kind k = DT_GPU_COMM_NCCL;
    dt_gpu_comm_facts f = {.cuda = 1, .nccl_ok = 1, .ranks = 2, .local_ranks = 2, .devices = 2};
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_NCCL && has(note, "nccl"), "2 ranks, 2 GPUs: %d %s", k, note);
    f.devices = 1; /* two ranks share the GPU */
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && !strcmp(note, "host (2 ranks share 1 GPU)"), "shared: %d %s", k,
          note);
    CHECK(dt_gpu_comm_choose(DT_GPU_COMM_NCCL, &f, &k, note, sizeof note) == DT_ERR_INVALID &&
              has(dt_last_error(), "dist.gpu_comm") && has(dt_last_error(), "share 1 GPU"),
          "explicit nccl on a shared GPU: %s", dt_last_error());
    f.devices = 2, f.by_index = 1; /* enough GPUs, but cuda:N may put both ranks on one */
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && has(note, "by index"), "cuda:N: %d %s", k, note);
    f.by_index = 0, f.devices = 0;
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && has(note, "no CUDA device"), "0 devices: %d %s", k, note);
    f = (dt_gpu_comm_facts){.cuda = 1,
                            .nccl_ok = 0,
                            .nccl_why = "cannot load libnccl.so.2: x",
                            .ranks = 2,
                            .local_ranks = 1,
                            .devices = 1};
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && has(note, "NCCL not loaded") && has(note, "libnccl.so.2: x"),
          "nccl absent: %d %s", k, note);
    CHECK(dt_gpu_comm_choose(DT_GPU_COMM_NCCL, &f, &k, note, sizeof note) == DT_ERR_INVALID &&
              has(dt_last_error(), "NCCL not loaded"),
          "explicit nccl, absent: %s", dt_last_error());
    f.nccl_ok = 1; /* an explicit host is taken even where NCCL would work */
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_HOST, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && has(note, "dist.gpu_comm=host"), "host: %d %s", k, note);
    f.cpu_ranks = 1; /* GPU ranks beside CPU ranks: host, whatever NCCL could do */
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && !strcmp(note, "host (GPU and CPU ranks)"), "mixed: %d %s", k,
          note);
    CHECK(dt_gpu_comm_choose(DT_GPU_COMM_NCCL, &f, &k, note, sizeof note) == DT_ERR_INVALID &&
              has(dt_last_error(), "some ranks train on the CPU device"),
          "explicit nccl, mixed: %s", dt_last_error());
    f.cuda = 0;
    CHECK_OK(dt_gpu_comm_choose(DT_GPU_COMM_AUTO, &f, &k, note, sizeof note));
    CHECK(k == DT_GPU_COMM_HOST && has(note, "CPU device"), "cpu device: %d %s", k, note);
    CHECK(dt_gpu_comm_choose((dt_gpu_comm_kind)7, &f, &k, note, sizeof note) == DT_ERR_INVALID,
          "an unknown kind is refused");
}

static float exact_val(int r, size_t i) {
    return (float)(r + 1) * 0.25f + (float)(i % 13) - 6.0f;
}

static void test_allreduce(dt_comm *c) {
    int R = dt_comm_rank(c), N = dt_comm_size(c);
    dt_device cpu = {DT_DEVICE_CPU, 0};
    dt_stream *s = NULL;
    dt_gpu_comm *gc = NULL;
    enum { n = 100003 }; /* not a multiple of anything the reduction might split by */
    CHECK_OK(dt_stream_create(cpu, &s));
    CHECK_OK(dt_gpu_comm_open(c, cpu, DT_GPU_COMM_AUTO, n, &gc));
    if (!gc || !s) goto out;
    CHECK(dt_gpu_comm_kind_of(gc) == DT_GPU_COMM_HOST &&
              !strcmp(dt_gpu_comm_note(gc), "host (the CPU device)"),
          "kind %d note %s", dt_gpu_comm_kind_of(gc), dt_gpu_comm_note(gc));
    float *buf = NULL, *copy = malloc(n * sizeof(float));
    CHECK_OK(dt_device_alloc(cpu, n * sizeof(float), (void **)&buf));
    for (int avg = 0; avg <= 1 && buf && copy; avg++) {
        for (size_t i = 0; i < n; i++) buf[i] = exact_val(R, i);
        CHECK_OK(dt_gpu_comm_allreduce(gc, buf, n, avg ? DT_COMM_AVG : 0, s));
        CHECK_OK(dt_stream_sync(s));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += exact_val(r, i);
            if (avg) want /= N;
            if ((float)want != buf[i] && bad++ < 3)
                printf("exact avg=%d: element %zu: %g, expected %g\n", avg, i, buf[i], want);
        }
        CHECK(bad == 0, "exact sums (avg %d): %zu of %d elements wrong", avg, bad, n);
    }
    /* the same bits as the communicator's own reduction of the same floats */
    uint32_t x = 12345u + 7919u * (uint32_t)R;
    for (size_t i = 0; i < n && buf && copy; i++) {
        x = x * 1664525u + 1013904223u;
        buf[i] = copy[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e-3f;
    }
    if (buf && copy) {
        size_t part = n - 17; /* a prefix: the rest stays as it was */
        float tail = buf[part];
        CHECK_OK(dt_gpu_comm_allreduce(gc, buf, part, 0, s));
        CHECK_OK(dt_stream_sync(s));
        CHECK_OK(dt_comm_allreduce(c, copy, part, 0));
        CHECK(memcmp(buf, copy, part * sizeof(float)) == 0, "host staging differs in bits from "
                                                            "dt_comm_allreduce");
        CHECK(buf[part] == tail, "an element past count was changed");
        if (N > 1) CHECK(buf[0] != tail || part == 0, "the reduction changed nothing");
    }
    /* the comm-wait counter: a peer 0.3 s late is waited for, and counted, on the others */
    if (N > 1 && buf) {
        double w0 = dt_gpu_comm_wait_s(gc);
        if (R == 0) nanosleep(&(struct timespec){0, 300000000}, NULL);
        CHECK_OK(dt_gpu_comm_allreduce(gc, buf, 1000, 0, s));
        double w = dt_gpu_comm_wait_s(gc) - w0;
        CHECK(R == 0 ? w >= 0 : w >= 0.25, "rank %d: waited %.3f s for a peer 0.3 s late", R, w);
    }
    CHECK(dt_gpu_comm_wait_s(gc) >= 0 && dt_gpu_comm_wait_s(NULL) == 0, "wait counter");
    CHECK(dt_gpu_comm_allreduce(gc, buf, n + 1, 0, s) == DT_ERR_INVALID &&
              has(dt_last_error(), "more than"),
          "a count over n is refused: %s", dt_last_error());
    dt_device_free(cpu, buf);
    free(copy);
    /* nccl on the CPU device: refused on every rank alike (a collective open, no hang) */
    dt_gpu_comm *bad = NULL;
    CHECK(dt_gpu_comm_open(c, cpu, DT_GPU_COMM_NCCL, 4, &bad) == DT_ERR_INVALID && !bad &&
              has(dt_last_error(), "dist.gpu_comm"),
          "nccl on the CPU device: %s", dt_last_error());
out:
    dt_gpu_comm_close(gc);
    dt_stream_destroy(s);
}

int main(int argc, char **argv) {
    dt_threads_set(1);
    int want = argc > 1 ? atoi(argv[1]) : 1;
    /* before anything loads NCCL: a file that does not exist is a reason, not a crash */
    setenv("DT_NCCL_LIB", "/nonexistent/libnccl-test.so.2", 1);
    char why[512];
    CHECK(dt_nccl_load(why, sizeof why) == 0 && why[0], "NCCL from a missing file: loaded?");
    CHECK(!dt_device_cuda_built() || has(why, "libnccl-test.so.2"), "why: %s", why);
    test_choose();
    dt_comm *c = NULL;
    CHECK_OK(dt_comm_open("auto", &argc, &argv, &c));
    if (!c) return dt_test_finish("test_gpu_comm");
    CHECK(dt_comm_size(c) == want, "world size %d, expected %d", dt_comm_size(c), want);
    test_allreduce(c);
    dt_comm_close(c);
    return dt_test_finish("test_gpu_comm");
}
