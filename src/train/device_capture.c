/* The step as a CUDA graph: the decision and the buffers (src/train/device_capture.h). */
#include "train/device_capture.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/config.h"
#include "dtrain/device_cuda.h"
#include "dtrain/dtrain.h"
#include "train/train_impl.h"

dt_capture_mode dt_capture_decide(const dt_capture_facts *f, char *why, size_t n) {
    const char *r = NULL;
    if (f->cuda_graph == DT_CFG_CUDA_GRAPH_OFF)
        r = "train.cuda_graph=off";
    else if (f->device.kind != DT_DEVICE_CUDA)
        r = "not a CUDA device";
    else if (f->failed)
        r = "the recording failed";
    else if (f->grad_accum > 1)
        r = "gradient accumulation (each micro-batch is a separate launch)";
    else if (f->allreduce)
        r = "several ranks (the gradient all-reduce is not in the recording)";
    if (why && n) snprintf(why, n, "%s", r ? r : "");
    if (r || f->eager_steps < 1) return DT_CAPTURE_EAGER;
    return f->recorded ? DT_CAPTURE_REPLAY : DT_CAPTURE_RECORD;
}

struct dt_capture {
    dt_device dev;
    size_t block_bytes, batch_bytes;
    void *h_block, *d_block, *h_batch;
    float *h_loss;
    double *h_sumsq;
    dt_stream_graph *graph;
};

dt_status dt_capture_open(dt_device d, size_t block_bytes, size_t batch_bytes, dt_capture **out) {
    *out = NULL;
    dt_capture *c = calloc(1, sizeof *c);
    if (!c) return dt_error_set(DT_ERR_NOMEM, "cuda graph: no memory");
    c->dev = d, c->block_bytes = block_bytes, c->batch_bytes = batch_bytes;
    dt_status st = dt_host_alloc_pinned(d, block_bytes, &c->h_block);
    if (st == DT_OK) st = dt_device_alloc(d, block_bytes, &c->d_block);
    if (st == DT_OK) st = dt_host_alloc_pinned(d, batch_bytes, &c->h_batch);
    if (st == DT_OK) st = dt_host_alloc_pinned(d, sizeof(float), (void **)&c->h_loss);
    if (st == DT_OK) st = dt_host_alloc_pinned(d, sizeof(double), (void **)&c->h_sumsq);
    if (st != DT_OK) {
        dt_capture_close(c);
        return st;
    }
    memset(c->h_block, 0, block_bytes);
    *out = c;
    return DT_OK;
}

void dt_capture_close(dt_capture *c) {
    if (!c) return;
    dt_stream_graph_destroy(c->graph);
    dt_host_free_pinned(c->dev, c->h_block);
    dt_device_free(c->dev, c->d_block);
    dt_host_free_pinned(c->dev, c->h_batch);
    dt_host_free_pinned(c->dev, c->h_loss);
    dt_host_free_pinned(c->dev, c->h_sumsq);
    free(c);
}

void *dt_capture_block_host(dt_capture *c) {
    return c->h_block;
}
void *dt_capture_block_dev(dt_capture *c) {
    return c->d_block;
}
size_t dt_capture_block_bytes(const dt_capture *c) {
    return c->block_bytes;
}
void *dt_capture_batch_host(dt_capture *c) {
    return c->h_batch;
}
float *dt_capture_loss_host(dt_capture *c) {
    return c->h_loss;
}
double *dt_capture_sumsq_host(dt_capture *c) {
    return c->h_sumsq;
}

dt_status dt_capture_push_block(dt_capture *c, dt_stream *s) {
    return dt_device_copy_async(c->dev, c->d_block, c->h_block, c->block_bytes, DT_COPY_H2D, s);
}

dt_status dt_capture_record_begin(dt_capture *c, dt_stream *s) {
    if (c->graph) return dt_error_set(DT_ERR_STATE, "cuda graph: the step was recorded already");
    return dt_stream_capture_begin(s);
}

dt_status dt_capture_record_end(dt_capture *c, dt_stream *s) {
    return dt_stream_capture_end(s, &c->graph);
}

int dt_capture_recorded(const dt_capture *c) {
    return c && c->graph;
}

dt_status dt_capture_launch(dt_capture *c, dt_stream *s) {
    if (!c->graph) return dt_error_set(DT_ERR_STATE, "cuda graph: launch before a recording");
    return dt_stream_graph_launch(c->graph, s);
}

/* ---- the trainer's step (train_impl.h) ---------------------------------------------------- */

/* Issues the whole step on s, reading every per-step value from the capture's buffers: the
 * scalar block and the batch copied in, forward, backward, norm, clipping, the optimizer
 * reading the device block, the loss and the sum of squares copied out. */
static dt_status issue_step(dt_trainer *t, dt_capture *c, dt_stream *s) {
    dt_graph *dg = t->dg;
    const dt_tensor *x = dt_graph_value(dg, t->x), *y = dt_graph_value(dg, t->y);
    size_t nx = dt_tensor_nbytes(x), ny = dt_tensor_nbytes(y);
    unsigned char *hb = dt_capture_batch_host(c);
    float *p = dt_graph_flat_param(dg, NULL), *g = dt_graph_flat_grad(dg, NULL);
    float clip = (float)t->v.optim.clip_norm;
    dt_status st = dt_capture_push_block(c, s);
    if (st == DT_OK) st = dt_device_copy_async(t->device, x->data, hb, nx, DT_COPY_H2D, s);
    if (st == DT_OK) st = dt_device_copy_async(t->device, y->data, hb + nx, ny, DT_COPY_H2D, s);
    if (st == DT_OK) st = dt_graph_forward(dg, 1);
    if (st == DT_OK) st = dt_graph_backward(dg);
    if (st == DT_OK) st = dt_cuda_grad_sumsq(s, g, t->n, t->dwork);
    if (st == DT_OK && clip > 0) st = dt_cuda_grad_clip(s, g, t->n, t->dwork, clip);
    if (st == DT_OK) st = dt_optim_step_cuda_dev(t->opt, s, p, g, t->dbuf, dt_capture_block_dev(c));
    if (st == DT_OK)
        st = dt_device_copy_async(t->device, dt_capture_loss_host(c),
                                  dt_graph_value(dg, t->loss)->data, sizeof(float), DT_COPY_D2H, s);
    if (st == DT_OK)
        st = dt_device_copy_async(t->device, dt_capture_sumsq_host(c), t->dwork, sizeof(double),
                                  DT_COPY_D2H, s);
    return st;
}

static dt_status record(dt_trainer *t, dt_capture *c, dt_stream *s) {
    dt_status st = dt_capture_record_begin(c, s);
    if (st != DT_OK) return st;
    st = issue_step(t, c, s);
    char first[256] = "";
    if (st != DT_OK) snprintf(first, sizeof first, "%s", dt_last_error());
    dt_status est = dt_capture_record_end(c, s); /* always ends the capture */
    if (st != DT_OK) return dt_error_set(st, "%s", first);
    return est;
}

static void note(dt_trainer *t, const char *fmt, const char *what) {
    if (t->log && t->rank == 0) {
        fprintf(t->log, fmt, what);
        fflush(t->log);
    }
}

dt_status dt_train_capture_step(dt_trainer *t, float lr, float *loss, double *norm, int *done) {
    *done = 0;
    char why[160];
    dt_capture_facts f = {.cuda_graph = t->v.train.cuda_graph,
                          .device = t->device,
                          .eager_steps = t->cap_eager,
                          .grad_accum = t->v.train.grad_accum,
                          .allreduce = t->gc != NULL,
                          .recorded = dt_capture_recorded(t->cap),
                          .failed = t->cap_failed};
    dt_capture_mode m = dt_capture_decide(&f, why, sizeof why);
    if (m == DT_CAPTURE_EAGER) {
        if (why[0] && !t->cap_noted && f.cuda_graph != DT_CFG_CUDA_GRAPH_OFF && !t->cap_failed)
            note(t, "cuda graph: every step eager (%s)\n", why);
        t->cap_noted = 1;
        return DT_OK;
    }
    dt_status st = DT_OK;
    if (!t->cap) {
        size_t nb = dt_tensor_nbytes(dt_graph_value(t->g, t->x)) +
                    dt_tensor_nbytes(dt_graph_value(t->g, t->y));
        if (dt_capture_open(t->device, dt_optim_cuda_block_bytes(t->opt), nb, &t->cap) != DT_OK) {
            t->cap_failed = 1; /* like a failed recording: the run goes on eagerly */
            note(t, "cuda graph: no buffers for the recording, eager from now on: %s\n",
                 dt_last_error());
            return DT_OK;
        }
    }
    dt_capture *c = t->cap;
    /* this step's values, where the graph reads them */
    const dt_tensor *hx = dt_graph_value(t->g, t->x), *hy = dt_graph_value(t->g, t->y);
    unsigned char *hb = dt_capture_batch_host(c);
    memcpy(hb, hx->data, dt_tensor_nbytes(hx));
    memcpy(hb + dt_tensor_nbytes(hx), hy->data, dt_tensor_nbytes(hy));
    if ((st = dt_optim_cuda_block_fill(t->opt, lr, dt_capture_block_host(c),
                                       dt_capture_block_bytes(c))) != DT_OK)
        return st;
    dt_stream *s = dt_graph_stream(t->dg);
    dt_graph_set_accumulate(t->dg, 0);
    if (m == DT_CAPTURE_RECORD) {
        /* dropout's step from device memory, refreshed by a recorded copy from the pinned
         * slot dt_graph_set_rng writes: each replay draws its own step's mask */
        if ((st = dt_graph_rng_on_device(t->dg, 1)) != DT_OK) return st;
        if ((st = record(t, c, s)) != DT_OK) {
            dt_graph_rng_on_device(t->dg, 0); /* eager as before */
            t->cap_failed = 1;
            note(t, "cuda graph: recording the step failed, eager from now on: %s\n",
                 dt_last_error());
            return DT_OK; /* nothing of the recording ran: this step goes eager */
        }
        note(t, "cuda graph: %s\n", "the step is recorded; one launch per step from now on");
    }
    if ((st = dt_capture_launch(c, s)) != DT_OK || (st = dt_stream_sync(s)) != DT_OK ||
        (st = dt_optim_step_done(t->opt)) != DT_OK)
        return st;
    t->host_stale = 1;
    /* a replayed step has updated the weights before the checks can be read: a bad id or
     * target still stops the run here, before this step's checkpoint */
    if ((st = dt_graph_device_read_checks(t->dg)) != DT_OK) return st;
    *loss = *dt_capture_loss_host(c);
    *norm = sqrt(*dt_capture_sumsq_host(c));
    *done = 1;
    return DT_OK;
}

void dt_train_capture_close(dt_trainer *t) {
    dt_capture_close(t->cap);
    t->cap = NULL;
}
