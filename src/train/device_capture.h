/* The device step as one CUDA graph (train.cuda_graph, docs/gpu.md). After one eager step the
 * trainer records the whole step -- the scalar block's and the batch's copies to the device,
 * forward, backward, the gradient norm, clipping, the optimizer, the loss and norm copies back
 * -- once with stream capture, and replays it for every later step: one launch and one wait
 * per step. Everything that changes per step is read from memory when the graph runs: the
 * optimizer's scalars from a device block copied from a pinned host block the host fills before
 * each launch (dt_optim_cuda_block_fill), the batch from a pinned host buffer. Where the step
 * cannot be captured the trainer stays eager, saying why in one line. */
#ifndef DT_TRAIN_DEVICE_CAPTURE_H
#define DT_TRAIN_DEVICE_CAPTURE_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/device.h"
#include "dtrain/optim.h"

typedef enum dt_capture_mode {
    DT_CAPTURE_EAGER = 0,  /* issue every kernel this step */
    DT_CAPTURE_RECORD = 1, /* record the step into a graph, then launch it */
    DT_CAPTURE_REPLAY = 2, /* launch the recorded graph */
} dt_capture_mode;

/* What the decision for the coming step depends on. */
typedef struct dt_capture_facts {
    int cuda_graph;      /* train.cuda_graph: DT_CFG_CUDA_GRAPH_* */
    dt_device device;    /* where the step runs */
    int64_t eager_steps; /* steps this process has run eagerly so far */
    int64_t grad_accum;  /* micro-batches per step */
    int allreduce;       /* several ranks: the gradients are all-reduced between backward and the
                          * optimizer (dt_gpu_comm), which the recording does not hold */
    int recorded;        /* a graph was recorded */
    int failed;          /* a recording failed: eager for the rest of the run */
} dt_capture_facts;

/* The mode of the coming step; why (when not NULL) the reason for an eager one ("" otherwise).
 * The first step is always eager: it makes what the first calls create lazily (cuBLASLt's
 * handle and workspace), which must not happen inside a capture. */
dt_capture_mode dt_capture_decide(const dt_capture_facts *f, char *why, size_t n);

/* The host side of a captured step: pinned host buffers (the optimizer's scalar block, the
 * batch, the loss and the gradient's sum of squares) and the device scalar block. */
typedef struct dt_capture dt_capture;

/* d: the step's device; block_bytes: dt_optim_cuda_block_bytes; batch_bytes: the bytes of the
 * inputs the step copies in (ids then targets). */
dt_status dt_capture_open(dt_device d, size_t block_bytes, size_t batch_bytes, dt_capture **out);
void dt_capture_close(dt_capture *c);
void *dt_capture_block_host(dt_capture *c); /* fill before each launch */
void *dt_capture_block_dev(dt_capture *c);  /* what the _dev kernels read */
size_t dt_capture_block_bytes(const dt_capture *c);
void *dt_capture_batch_host(dt_capture *c);   /* [batch_bytes]: write the batch here */
float *dt_capture_loss_host(dt_capture *c);   /* the step's loss, after the wait */
double *dt_capture_sumsq_host(dt_capture *c); /* the gradient's sum of squares, after the wait */
/* Issues on s the copy of the host block into the device block (the start of a step). */
dt_status dt_capture_push_block(dt_capture *c, dt_stream *s);

/* Recording: begin capture on s; end it (always ended) keeping the graph. */
dt_status dt_capture_record_begin(dt_capture *c, dt_stream *s);
dt_status dt_capture_record_end(dt_capture *c, dt_stream *s);
int dt_capture_recorded(const dt_capture *c);
dt_status dt_capture_launch(dt_capture *c, dt_stream *s);

#endif
