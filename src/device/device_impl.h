/* The backend table behind include/dtrain/device.h. device.c checks arguments, resolves the
 * backend and wraps stream/event handles; a backend only does the work. Every backend function
 * gets the device index and leaves a one-line message on failure. */
#ifndef DT_DEVICE_IMPL_H
#define DT_DEVICE_IMPL_H

#include "dtrain/device.h"

typedef struct dt_device_backend {
    dt_status (*count)(int *n);
    dt_status (*query)(int index, dt_device_info *info);
    dt_status (*use)(int index);
    dt_status (*alloc)(int index, size_t bytes, void **ptr);
    void (*free)(int index, void *ptr);
    dt_status (*memset)(int index, void *ptr, int value, size_t bytes);
    dt_status (*host_alloc)(int index, size_t bytes, void **ptr);
    void (*host_free)(int index, void *ptr);
    /* stream == NULL: synchronous */
    dt_status (*copy)(int index, void *dst, const void *src, size_t bytes, dt_copy_kind k,
                      void *stream);
    dt_status (*stream_create)(int index, void **h);
    void (*stream_destroy)(int index, void *h);
    dt_status (*stream_sync)(int index, void *h);
    dt_status (*event_create)(int index, void **h);
    void (*event_destroy)(int index, void *h);
    dt_status (*event_record)(int index, void *e, void *stream);
    dt_status (*stream_wait)(int index, void *stream, void *e);
    dt_status (*event_sync)(int index, void *e);
    dt_status (*event_query)(int index, void *e, int *done);
    dt_status (*event_elapsed)(int index, void *a, void *b, float *ms);
    /* stream capture (dt_stream_capture_begin): *exec is the instantiated graph */
    dt_status (*capture_begin)(int index, void *stream);
    dt_status (*capture_end)(int index, void *stream, void **exec);
    dt_status (*graph_launch)(int index, void *exec, void *stream);
    void (*graph_destroy)(int index, void *exec);
} dt_device_backend;

extern const dt_device_backend dt_device_cpu_backend;
/* The CUDA backend, or NULL in a build without CUDA (cuda_off.c). */
const dt_device_backend *dt_device_cuda_backend(void);

#endif
