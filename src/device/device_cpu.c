/* The CPU device: plain host memory, and a "stream" that is the calling thread, so every
 * operation is finished when it returns and an event is reached when it is recorded (its time
 * is the CLOCK_MONOTONIC reading at the record). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "device/device_impl.h"
#include "core/meminfo.h"

typedef struct cpu_event {
    double ms; /* CLOCK_MONOTONIC at the record, in milliseconds */
} cpu_event;

static dt_status cpu_count(int *n) {
    *n = 1;
    return DT_OK;
}

static dt_status cpu_query(int index, dt_device_info *info) {
    (void)index;
    strcpy(info->name, "cpu");
    /* MemAvailable, not MemFree: what a new allocation can get without swapping */
    int64_t avail = -1, total = -1;
    if (dt_mem_meminfo("/proc/meminfo", &avail, &total) != DT_OK) avail = total = -1;
    info->total_bytes = total > 0 ? (size_t)total : 0;
    info->free_bytes = avail > 0 ? (size_t)avail : 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    info->multiprocessors = cores > 0 ? (int)cores : 1;
    return DT_OK;
}

static dt_status cpu_use(int index) {
    (void)index;
    return DT_OK;
}

/* Rounded up to the alignment, as aligned_alloc requires. */
static dt_status cpu_alloc_aligned(size_t align, size_t bytes, void **ptr, const char *what) {
    if (bytes > SIZE_MAX - align)
        return dt_error_set(DT_ERR_NOMEM, "device cpu: %s of %zu bytes: too large", what, bytes);
    *ptr = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!*ptr) return dt_error_set(DT_ERR_NOMEM, "device cpu: %s of %zu bytes failed", what, bytes);
    return DT_OK;
}

static dt_status cpu_alloc(int index, size_t bytes, void **ptr) {
    (void)index;
    return cpu_alloc_aligned(256, bytes, ptr, "alloc");
}

static void cpu_free(int index, void *ptr) {
    (void)index;
    free(ptr);
}

static dt_status cpu_memset(int index, void *ptr, int value, size_t bytes) {
    (void)index;
    memset(ptr, value, bytes);
    return DT_OK;
}

static dt_status cpu_host_alloc(int index, size_t bytes, void **ptr) {
    (void)index;
    return cpu_alloc_aligned(64, bytes, ptr, "pinned alloc");
}

static dt_status cpu_copy(int index, void *dst, const void *src, size_t bytes, dt_copy_kind k,
                          void *stream) {
    (void)index, (void)k, (void)stream;
    memmove(dst, src, bytes);
    return DT_OK;
}

static dt_status cpu_stream_create(int index, void **h) {
    (void)index;
    *h = NULL;
    return DT_OK;
}

static void cpu_stream_destroy(int index, void *h) {
    (void)index, (void)h;
}

static dt_status cpu_stream_sync(int index, void *h) {
    (void)index, (void)h;
    return DT_OK;
}

static dt_status cpu_event_create(int index, void **h) {
    (void)index;
    *h = calloc(1, sizeof(cpu_event));
    return *h ? DT_OK : dt_error_set(DT_ERR_NOMEM, "device cpu: event create: no memory");
}

static void cpu_event_destroy(int index, void *h) {
    (void)index;
    free(h);
}

static dt_status cpu_event_record(int index, void *e, void *stream) {
    (void)index, (void)stream;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ((cpu_event *)e)->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
    return DT_OK;
}

static dt_status cpu_stream_wait(int index, void *stream, void *e) {
    (void)index, (void)stream, (void)e;
    return DT_OK; /* the event's work is already done */
}

static dt_status cpu_event_sync(int index, void *e) {
    (void)index, (void)e;
    return DT_OK;
}

static dt_status cpu_event_query(int index, void *e, int *done) {
    (void)index, (void)e;
    *done = 1;
    return DT_OK;
}

static dt_status cpu_event_elapsed(int index, void *a, void *b, float *ms) {
    (void)index;
    *ms = (float)(((cpu_event *)b)->ms - ((cpu_event *)a)->ms);
    return DT_OK;
}

/* A CPU stream runs its work as it is issued: there is nothing to record for a replay. */
static dt_status cpu_capture_refused(void) {
    return dt_error_set(DT_ERR_STATE,
                        "device cpu: stream capture: the CPU device runs work as it is issued "
                        "and has no graphs to capture (CUDA devices only)");
}

static dt_status cpu_capture_begin(int index, void *stream) {
    (void)index, (void)stream;
    return cpu_capture_refused();
}

static dt_status cpu_capture_end(int index, void *stream, void **exec) {
    (void)index, (void)stream;
    *exec = NULL;
    return cpu_capture_refused();
}

static dt_status cpu_graph_launch(int index, void *exec, void *stream) {
    (void)index, (void)exec, (void)stream;
    return cpu_capture_refused();
}

static void cpu_graph_destroy(int index, void *exec) {
    (void)index, (void)exec; /* a CPU device never made one */
}

const dt_device_backend dt_device_cpu_backend = {
    .count = cpu_count,
    .query = cpu_query,
    .use = cpu_use,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset = cpu_memset,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .copy = cpu_copy,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .event_query = cpu_event_query,
    .event_elapsed = cpu_event_elapsed,
    .capture_begin = cpu_capture_begin,
    .capture_end = cpu_capture_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
};
