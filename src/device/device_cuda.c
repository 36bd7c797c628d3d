/* The CUDA device backend over the CUDA runtime API (built with -DDT_CUDA=ON). Streams are
 * non-blocking cudaStream_t (they do not synchronise with the legacy default stream); events
 * carry timing. Each call sets its device first, so threads need no set-up. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "device/device_impl.h"
#include "device/cuda_util.h"

int dt_cuda_lib_load(const char *dir, const char *lib, int n, const char *const *names,
                     void **const *slots, char *err, size_t en) {
    void *h = NULL;
    if (dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, lib);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, en, "cannot load %s: %s", lib, e ? e : "?");
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!(*slots[i] = dlsym(h, names[i]))) {
            snprintf(err, en, "%s has no %s", lib, names[i]);
            return 0;
        }
    return 1;
}

dt_status dt_cuda_check(cudaError_t e, int index, const char *op) {
    if (e == cudaSuccess) return DT_OK;
    (void)cudaGetLastError(); /* clear the sticky-free error so the next call starts clean */
    dt_status st = e == cudaErrorMemoryAllocation ? DT_ERR_NOMEM : DT_ERR_INTERNAL;
    return dt_error_set(st, "device cuda:%d: %s: %s (%s)", index, op, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

static int cached_count = -1;

static dt_status cu_count(int *n) {
    if (cached_count < 0) {
        int c = 0;
        /* No driver, no device, or a driver older than the runtime all mean: no usable GPU. */
        if (cudaGetDeviceCount(&c) != cudaSuccess) c = 0;
        (void)cudaGetLastError();
        cached_count = c;
    }
    *n = cached_count;
    return DT_OK;
}

static dt_status cu_use(int index) {
    return dt_cuda_check(cudaSetDevice(index), index, "set device");
}

static dt_status cu_query(int index, dt_device_info *info) {
    struct cudaDeviceProp p;
    dt_status st = dt_cuda_check(cudaGetDeviceProperties(&p, index), index, "query");
    if (st != DT_OK) return st;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->multiprocessors = p.multiProcessorCount;
    size_t fr = 0, tot = 0;
    st = cu_use(index);
    if (st == DT_OK) st = dt_cuda_check(cudaMemGetInfo(&fr, &tot), index, "memory info");
    info->free_bytes = fr;
    info->total_bytes = tot ? tot : p.totalGlobalMem;
    return st;
}

static dt_status cu_alloc(int index, size_t bytes, void **ptr) {
    dt_status st = cu_use(index);
    if (st != DT_OK) return st;
    char op[64];
    snprintf(op, sizeof op, "alloc of %zu bytes", bytes);
    return dt_cuda_check(cudaMalloc(ptr, bytes), index, op);
}

static void cu_free(int index, void *ptr) {
    if (cu_use(index) == DT_OK) (void)cudaFree(ptr);
}

static dt_status cu_memset(int index, void *ptr, int value, size_t bytes) {
    dt_status st = cu_use(index);
    return st == DT_OK ? dt_cuda_check(cudaMemset(ptr, value, bytes), index, "memset") : st;
}

static dt_status cu_host_alloc(int index, size_t bytes, void **ptr) {
    dt_status st = cu_use(index);
    if (st != DT_OK) return st;
    char op[64];
    snprintf(op, sizeof op, "pinned alloc of %zu bytes", bytes);
    return dt_cuda_check(cudaMallocHost(ptr, bytes), index, op);
}

static void cu_host_free(int index, void *ptr) {
    (void)index;
    (void)cudaFreeHost(ptr);
}

static dt_status cu_copy(int index, void *dst, const void *src, size_t bytes, dt_copy_kind k,
                         void *stream) {
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyDeviceToDevice};
    static const char *names[] = {"copy host->device", "copy device->host", "copy device->device"};
    dt_status st = cu_use(index);
    if (st != DT_OK) return st;
    cudaError_t e = stream ? cudaMemcpyAsync(dst, src, bytes, kinds[k], (cudaStream_t)stream)
                           : cudaMemcpy(dst, src, bytes, kinds[k]);
    return dt_cuda_check(e, index, names[k]);
}

static dt_status cu_stream_create(int index, void **h) {
    dt_status st = cu_use(index);
    if (st != DT_OK) return st;
    cudaStream_t s;
    st =
        dt_cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), index, "stream create");
    *h = st == DT_OK ? (void *)s : NULL;
    return st;
}

static void cu_stream_destroy(int index, void *h) {
    if (cu_use(index) == DT_OK) (void)cudaStreamDestroy((cudaStream_t)h);
}

static dt_status cu_stream_sync(int index, void *h) {
    return dt_cuda_check(cudaStreamSynchronize((cudaStream_t)h), index, "stream sync");
}

static dt_status cu_event_create(int index, void **h) {
    dt_status st = cu_use(index);
    if (st != DT_OK) return st;
    cudaEvent_t e;
    st = dt_cuda_check(cudaEventCreate(&e), index, "event create");
    *h = st == DT_OK ? (void *)e : NULL;
    return st;
}

static void cu_event_destroy(int index, void *h) {
    if (cu_use(index) == DT_OK) (void)cudaEventDestroy((cudaEvent_t)h);
}

static dt_status cu_event_record(int index, void *e, void *stream) {
    dt_status st = cu_use(index);
    return st == DT_OK ? dt_cuda_check(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)stream), index,
                                       "event record")
                       : st;
}

static dt_status cu_stream_wait(int index, void *stream, void *e) {
    return dt_cuda_check(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)e, 0), index,
                         "stream wait");
}

static dt_status cu_event_sync(int index, void *e) {
    return dt_cuda_check(cudaEventSynchronize((cudaEvent_t)e), index, "event sync");
}

static dt_status cu_event_query(int index, void *e, int *done) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaErrorNotReady) {
        *done = 0;
        return DT_OK;
    }
    *done = r == cudaSuccess;
    return dt_cuda_check(r, index, "event query");
}

static dt_status cu_event_elapsed(int index, void *a, void *b, float *ms) {
    return dt_cuda_check(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b), index,
                         "event elapsed");
}

/* Thread-local mode: a call of the capturing thread that may allocate or synchronise fails
 * (and invalidates the capture) instead of silently leaving the region; other threads'
 * CUDA work is not affected. */
static dt_status cu_capture_begin(int index, void *stream) {
    dt_status st = cu_use(index);
    return st == DT_OK ? dt_cuda_check(cudaStreamBeginCapture((cudaStream_t)stream,
                                                              cudaStreamCaptureModeThreadLocal),
                                       index, "stream capture begin")
                       : st;
}

static dt_status cu_capture_end(int index, void *stream, void **exec) {
    *exec = NULL;
    dt_status st = cu_use(index);
    if (st != DT_OK) return st;
    cudaGraph_t g = NULL;
    /* ends the capture even when it was invalidated by a call inside the region */
    st = dt_cuda_check(cudaStreamEndCapture((cudaStream_t)stream, &g), index, "stream capture end");
    if (st == DT_OK && !g)
        st = dt_error_set(DT_ERR_INTERNAL, "device cuda:%d: stream capture end: no graph", index);
    cudaGraphExec_t x = NULL;
    if (st == DT_OK) st = dt_cuda_check(cudaGraphInstantiate(&x, g, 0), index, "graph instantiate");
    if (g) (void)cudaGraphDestroy(g); /* the instantiated graph keeps what it needs */
    *exec = st == DT_OK ? (void *)x : NULL;
    return st;
}

static dt_status cu_graph_launch(int index, void *exec, void *stream) {
    dt_status st = cu_use(index);
    return st == DT_OK ? dt_cuda_check(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream),
                                       index, "graph launch")
                       : st;
}

static void cu_graph_destroy(int index, void *exec) {
    if (exec && cu_use(index) == DT_OK) (void)cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

static const dt_device_backend cuda_backend = {
    .count = cu_count,
    .query = cu_query,
    .use = cu_use,
    .alloc = cu_alloc,
    .free = cu_free,
    .memset = cu_memset,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy = cu_copy,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_sync = cu_stream_sync,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait = cu_stream_wait,
    .event_sync = cu_event_sync,
    .event_query = cu_event_query,
    .event_elapsed = cu_event_elapsed,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
};

const dt_device_backend *dt_device_cuda_backend(void) {
    return &cuda_backend;
}
