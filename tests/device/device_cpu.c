/* The device interface on the CPU backend, and the paths every build runs: spec parsing and
 * resolution, the device count (0 GPUs is an answer, not an error), memory, synchronous and
 * stream copies, pinned buffers, streams and events, and the one-line errors. Runs on any
 * machine: the expectations for CUDA follow from dt_device_count, so this test passes the
 * same way with or without a GPU and with or without the CUDA backend. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device.h"
#include "dtrain/device_cuda.h"
#include "harness.h"

static const dt_device CPU = {DT_DEVICE_CPU, 0};

static void test_parse(void) {
    dt_device d;
    int a;
    CHECK_OK(dt_device_parse("auto", &d, &a));
    CHECK(a == 1, "auto flagged");
    CHECK_OK(dt_device_parse("cpu", &d, &a));
    CHECK(a == 0 && d.kind == DT_DEVICE_CPU, "cpu");
    CHECK_OK(dt_device_parse("cuda", &d, NULL));
    CHECK(d.kind == DT_DEVICE_CUDA && d.index == -1, "cuda: the local rank's");
    CHECK_OK(dt_device_parse("cuda:3", &d, NULL));
    CHECK(d.kind == DT_DEVICE_CUDA && d.index == 3, "cuda:3 -> %d", d.index);
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CPU", "", "cuda:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_status s = dt_device_parse(bad[i], &d, NULL);
        CHECK(s == DT_ERR_INVALID && strstr(dt_last_error(), "expected auto, cpu, cuda or cuda:N"),
              "'%s' refused: %d %s", bad[i], (int)s, dt_last_error());
    }
    char nm[DT_DEVICE_NAME_MAX];
    dt_device c7 = {DT_DEVICE_CUDA, 7};
    CHECK(!strcmp(dt_device_name(c7, nm, sizeof nm), "cuda:7"), "name %s", nm);
    CHECK(!strcmp(dt_device_name(CPU, nm, sizeof nm), "cpu"), "name %s", nm);
}

static void test_count_resolve(void) {
    int n = -1;
    CHECK_OK(dt_device_count(DT_DEVICE_CPU, &n));
    CHECK(n == 1, "one cpu: %d", n);
    n = -1;
    CHECK_OK(dt_device_count(DT_DEVICE_CUDA, &n));
    CHECK(n >= 0, "cuda count %d", n);
    if (!dt_device_cuda_built()) CHECK(n == 0, "no CUDA backend: count %d", n);
    printf("CUDA backend built: %d, CUDA devices visible: %d\n", dt_device_cuda_built(), n);

    dt_device d;
    CHECK_OK(dt_device_resolve("cpu", "train.device", 0, &d));
    CHECK(d.kind == DT_DEVICE_CPU, "cpu resolves to cpu");
    CHECK_OK(dt_device_resolve("auto", "train.device", 0, &d));
    CHECK(d.kind == (n > 0 ? DT_DEVICE_CUDA : DT_DEVICE_CPU), "auto -> kind %d with %d GPUs",
          (int)d.kind, n);
    /* one past the last GPU is refused with the count */
    char spec[32];
    snprintf(spec, sizeof spec, "cuda:%d", n);
    dt_status s = dt_device_resolve(spec, "train.device", 0, &d);
    if (!dt_device_cuda_built()) {
        CHECK(s == DT_ERR_STATE && strstr(dt_last_error(), "built without CUDA") &&
                  strstr(dt_last_error(), "train.device: cuda:0"),
              "no backend: %s", dt_last_error());
    } else if (n == 0) {
        CHECK(s == DT_ERR_RANGE &&
                  !strcmp(dt_last_error(), "train.device: cuda:0: no CUDA device visible"),
              "no GPU: '%s'", dt_last_error());
    } else {
        char want[96];
        snprintf(want, sizeof want, "train.device: cuda:%d: %d CUDA device%s visible", n, n,
                 n == 1 ? "" : "s");
        CHECK(s == DT_ERR_RANGE && !strcmp(dt_last_error(), want), "'%s' vs '%s'", dt_last_error(),
              want);
    }
    /* "cuda" takes the local rank's GPU: local rank n does not exist */
    s = dt_device_resolve("cuda", "train.device", n, &d);
    CHECK(s != DT_OK, "cuda with local rank %d refused: %s", n, dt_last_error());
    if (dt_device_cuda_built() && n > 0) {
        CHECK(strstr(dt_last_error(), "the local rank's GPU"), "names the local rank: %s",
              dt_last_error());
        CHECK_OK(dt_device_resolve("cuda", "train.device", n - 1, &d));
        CHECK(d.index == n - 1, "cuda -> cuda:%d", d.index);
    }
    s = dt_device_resolve("tpu", "train.device", 0, &d);
    CHECK(s == DT_ERR_INVALID && strstr(dt_last_error(), "train.device: device 'tpu'"), "%s",
          dt_last_error());

    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    CHECK(dt_device_local_rank() == 3, "local rank from Open MPI");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
    setenv("SLURM_LOCALID", "2", 1);
    CHECK(dt_device_local_rank() == 2, "malformed Open MPI var skipped, Slurm's used");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("SLURM_LOCALID");
}

static void test_memory(void) {
    dt_device_info info;
    CHECK_OK(dt_device_query(CPU, &info));
    CHECK(!strcmp(info.name, "cpu") && info.total_bytes > 0 && info.multiprocessors >= 1,
          "cpu info: %s %zu %d", info.name, info.total_bytes, info.multiprocessors);
    dt_device cpu1 = {DT_DEVICE_CPU, 1};
    void *p = (void *)1;
    CHECK(dt_device_alloc(cpu1, 16, &p) == DT_ERR_INVALID && p == NULL &&
              strstr(dt_last_error(), "device cpu: alloc: the CPU device has index 0 only"),
          "cpu index 1: %s", dt_last_error());
    CHECK_OK(dt_device_alloc(CPU, 0, &p));
    CHECK(p == NULL, "0 bytes: NULL");
    CHECK(dt_device_alloc(CPU, SIZE_MAX - 8, &p) == DT_ERR_NOMEM && p == NULL &&
              strstr(dt_last_error(), "device cpu: alloc of"),
          "huge alloc refused: %s", dt_last_error());

    const size_t n = 1000;
    float *src = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) src[i] = (float)i * 0.5f - 7.0f;
    float *dev = NULL, *dev2 = NULL;
    CHECK_OK(dt_device_alloc(CPU, n * sizeof(float), (void **)&dev));
    CHECK_OK(dt_device_alloc(CPU, n * sizeof(float), (void **)&dev2));
    CHECK(((uintptr_t)dev & 255) == 0, "256-byte aligned");
    CHECK_OK(dt_device_copy(CPU, dev, src, n * sizeof(float), DT_COPY_H2D));
    CHECK_OK(dt_device_copy(CPU, dev2, dev, n * sizeof(float), DT_COPY_D2D));
    CHECK_OK(dt_device_copy(CPU, back, dev2, n * sizeof(float), DT_COPY_D2H));
    CHECK(!memcmp(back, src, n * sizeof(float)), "round trip h2d, d2d, d2h");
    CHECK_OK(dt_device_memset(CPU, dev2, 0, n * sizeof(float)));
    CHECK_OK(dt_device_copy(CPU, back, dev2, n * sizeof(float), DT_COPY_D2H));
    CHECK(back[0] == 0.0f && back[n - 1] == 0.0f, "memset");
    CHECK(dt_device_copy(CPU, NULL, src, 4, DT_COPY_H2D) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "copy of 4 bytes: NULL destination"),
          "NULL dst: %s", dt_last_error());
    CHECK(dt_device_copy(CPU, dev, src, 4, (dt_copy_kind)7) == DT_ERR_INVALID, "bad kind");

    /* pinned buffers + a stream: copies issued in order, complete after the sync */
    float *pin = NULL;
    CHECK_OK(dt_host_alloc_pinned(CPU, n * sizeof(float), (void **)&pin));
    CHECK(((uintptr_t)pin & 63) == 0, "pinned 64-byte aligned");
    dt_stream *s = NULL, *s2 = NULL;
    CHECK_OK(dt_stream_create(CPU, &s));
    CHECK_OK(dt_stream_create(CPU, &s2));
    CHECK(dt_stream_device(s).kind == DT_DEVICE_CPU, "stream's device");
    dt_event *e0 = NULL, *e1 = NULL, *never = NULL;
    CHECK_OK(dt_event_create(CPU, &e0));
    CHECK_OK(dt_event_create(CPU, &e1));
    CHECK_OK(dt_event_create(CPU, &never));
    int done = 7;
    CHECK(dt_event_query(never, &done) == DT_ERR_STATE && done == 0 &&
              strstr(dt_last_error(), "never recorded"),
          "unrecorded event: %s", dt_last_error());
    CHECK(dt_stream_wait_event(s, never) == DT_ERR_STATE, "waiting on an unrecorded event");
    CHECK_OK(dt_event_record(e0, s));
    for (size_t i = 0; i < n; i++) pin[i] = src[i] * 2.0f;
    CHECK_OK(dt_device_copy_async(CPU, dev, pin, n * sizeof(float), DT_COPY_H2D, s));
    CHECK_OK(dt_event_record(e1, s));
    CHECK_OK(dt_stream_wait_event(s2, e1)); /* s2's work after the upload */
    CHECK_OK(dt_device_copy_async(CPU, back, dev, n * sizeof(float), DT_COPY_D2H, s2));
    CHECK_OK(dt_stream_sync(s2));
    CHECK_OK(dt_event_sync(e1));
    CHECK_OK(dt_event_query(e1, &done));
    CHECK(done == 1, "recorded event done");
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= back[i] == src[i] * 2.0f;
    CHECK(ok, "stream copies in order");
    float ms = -1;
    CHECK_OK(dt_event_elapsed_ms(e0, e1, &ms));
    CHECK(ms >= 0.0f && ms < 10000.0f, "elapsed %g ms", ms);
    CHECK(dt_device_copy_async(CPU, dev, pin, 4, DT_COPY_H2D, NULL) == DT_ERR_INVALID,
          "NULL stream refused");

    dt_event_destroy(e0);
    dt_event_destroy(e1);
    dt_event_destroy(never);
    dt_stream_destroy(s);
    dt_stream_destroy(s2);
    dt_host_free_pinned(CPU, pin);
    dt_device_free(CPU, dev);
    dt_device_free(CPU, dev2);
    free(src);
    free(back);
}

/* A CUDA device that does not exist (index = count) is refused by every entry point with the
 * count, whatever this machine has. */
static void test_missing_cuda(void) {
    int n = 0;
    CHECK_OK(dt_device_count(DT_DEVICE_CUDA, &n));
    dt_device d = {DT_DEVICE_CUDA, n};
    void *p = (void *)1;
    dt_status s = dt_device_alloc(d, 64, &p);
    CHECK(s != DT_OK && p == NULL, "alloc on cuda:%d refused", n);
    if (dt_device_cuda_built()) {
        char want[64];
        snprintf(want, sizeof want, "%d CUDA device%s visible", n, n == 1 ? "" : "s");
        CHECK(s == DT_ERR_RANGE && strstr(dt_last_error(), want), "%s", dt_last_error());
    } else {
        CHECK(s == DT_ERR_STATE && strstr(dt_last_error(), "built without CUDA"), "%s",
              dt_last_error());
    }
    dt_stream *st = (dt_stream *)1;
    CHECK(dt_stream_create(d, &st) != DT_OK && st == NULL, "stream on a missing GPU");
    dt_device_info info;
    CHECK(dt_device_query(d, &info) != DT_OK, "query of a missing GPU");
    /* cuBLASLt is loaded on the first handle (not linked): on a missing GPU the handle is still
     * refused for the device, not for want of the library -- the load itself worked */
    dt_cuda_gemm *g = (dt_cuda_gemm *)1;
    s = dt_cuda_gemm_create(d, 0, &g);
    CHECK(s != DT_OK && g == NULL, "gemm handle on a missing GPU refused");
    if (dt_device_cuda_built())
        CHECK(!strstr(dt_last_error(), "cannot load") && strstr(dt_last_error(), "visible"),
              "gemm handle: the device refused, not the library: %s", dt_last_error());
}

int main(void) {
    test_parse();
    test_count_resolve();
    test_memory();
    test_missing_cuda();
    return dt_test_finish("device_cpu");
}
