/* Devices: where tensors live and kernels run (docs/gpu.md).
 *
 * One interface over two backends: the CPU (plain host memory; every operation completes on the
 * calling thread before it returns) and CUDA (built when the CUDA toolkit is found, -DDT_CUDA=ON).
 * A dt_device names a backend and an index ("cpu", "cuda:1"). Memory, copies, pinned host
 * buffers, streams and events go through the device they belong to; a stream or event of one
 * device cannot be used with another.
 *
 * Semantics shared by both backends:
 *   - an operation issued on a stream runs after every operation issued before it on that
 *     stream; dt_stream_sync waits for all of them;
 *   - dt_event_record marks the point of the stream reached so far; dt_event_sync waits for it,
 *     dt_stream_wait_event makes later work on a stream wait for it;
 *   - synchronous copies (dt_device_copy) are complete when they return.
 * On the CPU a stream is the calling thread: work issued on it is already done when the call
 * returns, so every event is complete as soon as it is recorded.
 *
 * Having no GPU is a normal answer (dt_device_count gives 0), not an error. */
#ifndef DTRAIN_DEVICE_H
#define DTRAIN_DEVICE_H

#include <stddef.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_device_kind { DT_DEVICE_CPU = 0, DT_DEVICE_CUDA = 1 } dt_device_kind;

typedef struct dt_device {
    dt_device_kind kind;
    int index; /* 0 for the CPU */
} dt_device;

#define DT_DEVICE_NAME_MAX 32

/* 1 when this build has the CUDA backend (-DDT_CUDA=ON with the toolkit found), else 0. */
int dt_device_cuda_built(void);

/* Number of devices of a kind: 1 for the CPU; for CUDA the GPUs this process can see (0 when
 * there is none, no driver, or no CUDA backend in this build). Never an error for "none". */
dt_status dt_device_count(dt_device_kind kind, int *n);

/* "cpu", "cuda:0", ... into buf (DT_DEVICE_NAME_MAX suffices); returns buf. */
const char *dt_device_name(dt_device d, char *buf, size_t n);

/* Parses a device spec: "auto" (*is_auto = 1, *out = cpu), "cpu", "cuda" (index -1: the local
 * rank's GPU, chosen by dt_device_resolve) or "cuda:N". Syntax only: nothing is queried.
 * is_auto may be NULL. The message names the spec and what is accepted. */
dt_status dt_device_parse(const char *spec, dt_device *out, int *is_auto);

/* The device a process uses for `spec`, `what` naming the source in messages (e.g.
 * "train.device"). local_rank is this process's rank on its host (dt_device_local_rank()):
 *   auto     -> cuda:local_rank when this build has CUDA and a GPU is visible, else cpu
 *               (with several GPUs but fewer than local_rank + 1: an error, not a silent cpu)
 *   cpu      -> cpu
 *   cuda     -> cuda:local_rank, which must exist
 *   cuda:N   -> cuda:N, which must exist
 * Errors are one line, e.g. "train.device: cuda:1: 1 CUDA device visible" or
 * "train.device: cuda: this dtrain was built without CUDA (-DDT_CUDA=OFF)". */
dt_status dt_device_resolve(const char *spec, const char *what, int local_rank, dt_device *out);

/* This process's rank among the processes of its host: OMPI_COMM_WORLD_LOCAL_RANK (Open MPI),
 * else MPI_LOCALRANKID (MPICH), else SLURM_LOCALID, else LOCAL_RANK, else 0. */
int dt_device_local_rank(void);

typedef struct dt_device_info {
    char name[256];         /* "NVIDIA H200", or "cpu" */
    size_t total_bytes;     /* device memory (CUDA) or physical memory (CPU) */
    size_t free_bytes;      /* free now */
    int cc_major, cc_minor; /* compute capability (CUDA); 0 on the CPU */
    int multiprocessors;    /* SMs (CUDA) or online cores (CPU) */
} dt_device_info;

/* Properties of a device; an index that does not exist is an error naming how many do. */
dt_status dt_device_query(dt_device d, dt_device_info *info);

/* Makes d the current device of the calling thread (cudaSetDevice; nothing on the CPU). Each
 * call below takes its device explicitly and sets it itself, so this is only needed before
 * launching kernels of include/dtrain/device_cuda.h from a new thread. */
dt_status dt_device_use(dt_device d);

/* Device memory: 256-byte aligned, uninitialised. bytes == 0 gives NULL and DT_OK. */
dt_status dt_device_alloc(dt_device d, size_t bytes, void **ptr);
void dt_device_free(dt_device d, void *ptr);
dt_status dt_device_memset(dt_device d, void *ptr, int value, size_t bytes);

/* Host memory the device can copy from and to asynchronously (page-locked for CUDA; plain
 * 64-byte-aligned memory for the CPU). bytes == 0 gives NULL and DT_OK. */
dt_status dt_host_alloc_pinned(dt_device d, size_t bytes, void **ptr);
void dt_host_free_pinned(dt_device d, void *ptr);

typedef enum dt_copy_kind {
    DT_COPY_H2D = 0, /* host -> device */
    DT_COPY_D2H = 1, /* device -> host */
    DT_COPY_D2D = 2, /* device -> same device */
} dt_copy_kind;

typedef struct dt_stream dt_stream;
typedef struct dt_event dt_event;

/* Copies bytes and returns when they are in place. */
dt_status dt_device_copy(dt_device d, void *dst, const void *src, size_t bytes, dt_copy_kind k);
/* Issues the copy on stream s (of device d); complete after dt_stream_sync or an event recorded
 * after it. For an overlap with compute, the host side should be pinned (dt_host_alloc_pinned):
 * CUDA copies from pageable memory are staged and may not overlap. */
dt_status dt_device_copy_async(dt_device d, void *dst, const void *src, size_t bytes,
                               dt_copy_kind k, dt_stream *s);

/* Streams: ordered queues of work on one device. */
dt_status dt_stream_create(dt_device d, dt_stream **out);
void dt_stream_destroy(dt_stream *s);
dt_status dt_stream_sync(dt_stream *s);
dt_device dt_stream_device(const dt_stream *s);
/* The backend's handle (a cudaStream_t for CUDA, NULL on the CPU), for kernel launches. */
void *dt_stream_handle(const dt_stream *s);

/* Events: points in a stream, with timing. */
dt_status dt_event_create(dt_device d, dt_event **out);
void dt_event_destroy(dt_event *e);
dt_status dt_event_record(dt_event *e, dt_stream *s);
/* Later work on s waits until e is reached. e must have been recorded. */
dt_status dt_stream_wait_event(dt_stream *s, dt_event *e);
dt_status dt_event_sync(dt_event *e);
/* *done = 1 when e has been reached, 0 while work before it is still running. */
dt_status dt_event_query(dt_event *e, int *done);
/* Milliseconds from a to b (both recorded and reached, same device). */
dt_status dt_event_elapsed_ms(dt_event *a, dt_event *b, float *ms);

/* Stream capture: the work issued on a stream between dt_stream_capture_begin and
 * dt_stream_capture_end is recorded instead of run, and becomes a graph that
 * dt_stream_graph_launch replays as one launch (cudaStreamBeginCapture / EndCapture /
 * cudaGraphInstantiate / cudaGraphLaunch). A replay issues the same kernels with the same
 * arguments and copies between the same addresses: what changes per replay must be read from
 * device memory (or a pinned host buffer a captured copy reads). Inside the region the calling
 * thread must not allocate or wait for the device (CUDA's thread-local capture mode: such a
 * call fails, and so does the end of the capture). Only CUDA streams capture: the CPU device
 * runs work as it is issued, so it refuses with one line. */
typedef struct dt_stream_graph dt_stream_graph;

dt_status dt_stream_capture_begin(dt_stream *s);
/* Ends the capture begun on s and instantiates its graph into *out. Always ends the capture
 * (the stream is usable again afterwards); on failure *out is NULL and the message says why
 * (e.g. a call in the region that the capture does not allow). */
dt_status dt_stream_capture_end(dt_stream *s, dt_stream_graph **out);
/* Issues one replay of g on s (a stream of g's device). */
dt_status dt_stream_graph_launch(dt_stream_graph *g, dt_stream *s);
void dt_stream_graph_destroy(dt_stream_graph *g);

#ifdef __cplusplus
}
#endif
#endif
