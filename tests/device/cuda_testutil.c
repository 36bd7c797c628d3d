#include <stdio.h>
#include <stdlib.h>
#include "cuda_testutil.h"

static void die(const char *what) {
    fprintf(stderr, "FAIL: %s: %s\n", what, dt_last_error());
    exit(1);
}

dt_device cuda_test_device(const char *test, dt_stream **s) {
    int n = 0;
    if (dt_device_count(DT_DEVICE_CUDA, &n) != DT_OK) die("device count");
    if (!dt_device_cuda_built() || n == 0) {
        printf("%s: skipped: %s\n", test,
               dt_device_cuda_built() ? "no CUDA device visible" : "built without CUDA");
        exit(77);
    }
    dt_device d = {DT_DEVICE_CUDA, 0};
    dt_device_info info;
    if (dt_device_query(d, &info) != DT_OK) die("device query");
    printf("%s: on %s (sm_%d%d, %d SMs, %.1f GiB)\n", test, info.name, info.cc_major, info.cc_minor,
           info.multiprocessors, (double)info.total_bytes / (1 << 30));
    if (dt_stream_create(d, s) != DT_OK) die("stream create");
    return d;
}

void *cuda_test_upload(dt_device d, const void *host, size_t n) {
    void *p = NULL;
    if (dt_device_alloc(d, n, &p) != DT_OK) die("alloc");
    if (dt_device_copy(d, p, host, n, DT_COPY_H2D) != DT_OK) die("upload");
    return p;
}

void *cuda_test_alloc(dt_device d, size_t n) {
    void *p = NULL;
    if (dt_device_alloc(d, n, &p) != DT_OK) die("alloc");
    if (dt_device_memset(d, p, 0xff, n) != DT_OK) die("memset");
    return p;
}

void cuda_test_download(dt_device d, dt_stream *s, void *host, const void *dev, size_t n) {
    if (dt_stream_sync(s) != DT_OK) die("stream sync");
    if (dt_device_copy(d, host, dev, n, DT_COPY_D2H) != DT_OK) die("download");
}
