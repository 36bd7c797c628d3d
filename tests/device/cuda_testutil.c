#include <stdio.h>
#include <stdlib.h>
#include "cuda_testutil.h"
#include "harness.h"

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

int cuda_test_cpu_compile(dt_graph *g, int out, int *r) {
    if (dt_graph_keep(g, out) != DT_OK) return -1;
    int loss = dt_test_dotloss(g, out, r);
    if (loss < 0 || dt_graph_compile(g, loss, NULL) != DT_OK) return -1;
    for (int id = 0; id < dt_graph_node_count(g); id++) {
        const char *nm = dt_graph_name(g, id);
        if (nm && dt_graph_find(g, nm) == id && dt_graph_shape(g, id)->dtype == DT_F32)
            dt_test_randn(g, id, 500 + (uint64_t)id, 1.0f);
    }
    return 0;
}

int cuda_test_cpu_step(dt_graph *g) {
    return dt_graph_forward(g, 1) == DT_OK && dt_graph_backward(g) == DT_OK ? 0 : -1;
}

void *cuda_test_upload_value(dt_device d, dt_graph *g, int id) {
    const dt_tensor *t = dt_graph_value(g, id);
    return cuda_test_upload(d, t->data, dt_tensor_numel(t) * dt_dtype_size(t->dtype));
}
