/* Optimizers (SGD, AdamW), learning-rate schedules and gradient clipping.
 *
 * Everything works on the flat buffers (docs/architecture.md, "flat buffers"): all trainable
 * parameters are one contiguous f32 buffer of n_total elements and the gradients a second one with
 * the same layout (dt_graph_flat_param / dt_graph_flat_grad). An optimizer owns one contiguous
 * slice [lo, hi) of it -- the whole buffer for plain data parallelism, one shard under ZeRO -- and
 * keeps moment buffers for that slice only, allocated once by dt_optim_init. A slice may start
 * or end in the middle of a parameter. dt_optim_step allocates nothing.
 *
 * Typical use:
 *   dt_optim_group groups[NP]; int ng;      // NP >= dt_graph_param_count(g)
 *   dt_optim_groups_from_graph(g, groups, NP, &ng);   // no decay for DT_PARAM_NO_DECAY
 *   size_t n; float *p = dt_graph_flat_param(g, &n); float *gr = dt_graph_flat_grad(g, NULL);
 *   dt_optim_config c = dt_optim_config_default(DT_OPTIM_ADAMW); c.weight_decay = 0.01f;
 *   dt_optim *opt; dt_optim_init(&c, n, 0, n, groups, ng, &opt);
 *   for (step = 0; ...; step++) {
 *       forward/backward ...;
 *       dt_grad_clip_norm(gr, n, 1.0f);
 *       dt_optim_step(opt, p, gr, dt_lr_at(&sched, step));
 *   }
 *   dt_optim_free(opt);
 *
 * The update rules are those of torch.optim.SGD and torch.optim.AdamW (PyTorch 1.13, the
 * single-tensor code path), element for element; tests/optim checks them against PyTorch. */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"
#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Optimizers ---------------------------------------------------------------------- */

typedef enum dt_optim_kind { DT_OPTIM_SGD = 0, DT_OPTIM_ADAMW = 1 } dt_optim_kind;

/* Hyperparameters. The learning rate is not here: it is passed to every dt_optim_step (it comes
 * from a dt_lr_schedule), so the optimizer holds no schedule state of its own.
 *   SGD:   momentum, dampening, nesterov, weight_decay (L2: added to the gradient)
 *   AdamW: beta1, beta2, eps, weight_decay (decoupled: p *= 1 - lr * wd)
 * Fields of the other kind are ignored. Doubles, like the Python floats torch takes: bias
 * corrections and 1 - lr * wd are computed in double and cast to f32 where torch casts them. */
typedef struct dt_optim_config {
    dt_optim_kind kind;
    double weight_decay;
    double momentum;  /* SGD; 0 = plain SGD (no momentum buffer is kept) */
    double dampening; /* SGD */
    int nesterov;     /* SGD; needs momentum > 0 and dampening == 0 (as torch) */
    double beta1;     /* AdamW */
    double beta2;     /* AdamW */
    double eps;       /* AdamW */
} dt_optim_config;

/* torch's defaults: SGD momentum 0, dampening 0, no nesterov, wd 0; AdamW betas (0.9, 0.999),
 * eps 1e-8, wd 0.01. */
dt_optim_config dt_optim_config_default(dt_optim_kind kind);

/* A parameter group: a range [offset, offset + numel) of the flat buffer (absolute offsets,
 * not relative to the slice) with multipliers on the config's weight decay and on the step's
 * learning rate. "No decay on norms and biases" is wd_scale = 0. Groups must be sorted by
 * offset and must not overlap; elements in no group are never touched (e.g. ZeRO padding). */
typedef struct dt_optim_group {
    size_t offset, numel;
    float wd_scale; /* effective weight decay = config.weight_decay * wd_scale */
    float lr_scale; /* effective learning rate = lr * lr_scale */
} dt_optim_group;

/* Groups for every trainable parameter of a graph (offsets are fixed when params are declared,
 * so this works before or after compile), in flat-buffer order: wd_scale 0 for
 * parameters flagged DT_PARAM_NO_DECAY, 1 otherwise; lr_scale 1. Adjacent parameters with the
 * same settings are merged into one group. Frozen and state parameters are skipped (they are
 * not in the trainable buffer). `cap` >= dt_graph_param_count(g) always suffices; with
 * groups == NULL only the count is returned. Errors if cap is too small. */
dt_status dt_optim_groups_from_graph(const dt_graph *g, dt_optim_group *groups, int cap,
                                     int *n_groups);

typedef struct dt_optim dt_optim;

/* Creates an optimizer for the slice [lo, hi) of a flat buffer of n_total elements, with the
 * given groups (groups == NULL or n_groups == 0: one group over [0, n_total), scales 1).
 * Allocates (and zeroes) the moment buffers for hi - lo elements once. Moments of elements in
 * no group stay 0. Errors (messages start "optim") on bad hyperparameters (negative weight
 * decay, momentum or eps, betas outside [0, 1), nesterov without momentum or with dampening),
 * a slice not within [0, n_total), or groups that are unsorted, overlapping, out of range or
 * have negative scales. */
dt_status dt_optim_init(const dt_optim_config *cfg, size_t n_total, size_t lo, size_t hi,
                        const dt_optim_group *groups, int n_groups, dt_optim **out);
void dt_optim_free(dt_optim *opt);

/* One update of the slice with learning rate `lr` (times each group's lr_scale).
 * `params` and `grads` point at the slice's first element -- element `lo` of the flat buffer,
 * so pass flat_param + lo, flat_grad + lo (or a shard buffer of hi - lo elements that holds
 * the reduce-scattered gradients) -- and hold hi - lo elements. Parallel (OpenMP), allocates
 * nothing, and the result does not depend on the number of threads. */
dt_status dt_optim_step(dt_optim *opt, float *params, const float *grads, float lr);
/* The same step on a CUDA device (src/optim/optim_cuda.c): params, grads and the moment
 * buffers bufs[0..n_buffers) (dt_optim_get_state's count; hi - lo floats each, zeroed before
 * the first step) are device memory of stream s; the kernels are only issued on s. The
 * optimizer's own host buffers are not touched (they are what checkpoints read: the caller
 * downloads the device ones into them). Same segments and scalars as dt_optim_step. */
typedef struct dt_stream dt_stream;
dt_status dt_optim_step_cuda(dt_optim *opt, dt_stream *s, float *params, const float *grads,
                             float *const *bufs, float lr);
/* The step as a CUDA graph (docs/gpu.md): dt_optim_step_cuda_dev issues the same kernels, which
 * read the per-step scalars (learning rates, bias corrections, SGD's first step) from the device
 * block dblock when they run, so a captured launch can be replayed for later steps. Before each
 * run of those kernels the caller fills the block for the coming step on the host
 * (dt_optim_cuda_block_fill: step dt_optim_get_state's step + 1, learning rate lr; the bytes
 * dt_optim_cuda_block_bytes gives) and copies it to dblock on the stream; after each, it counts
 * the step with dt_optim_step_done (dt_optim_step_cuda_dev itself does not advance the step). */
size_t dt_optim_cuda_block_bytes(const dt_optim *opt);
dt_status dt_optim_cuda_block_fill(const dt_optim *opt, float lr, void *block, size_t bytes);
dt_status dt_optim_step_cuda_dev(dt_optim *opt, dt_stream *s, float *params, const float *grads,
                                 float *const *bufs, const void *dblock);
dt_status dt_optim_step_done(dt_optim *opt);

/* State for checkpoints. The buffers are the optimizer's own (hi - lo floats each): a
 * checkpoint writer reads them, a reader writes them and then calls dt_optim_set_step.
 *   SGD with momentum: 1 buffer, "momentum_buffer"; SGD without momentum: none;
 *   AdamW: 2 buffers, "exp_avg" and "exp_avg_sq"  (torch's state names). */
#define DT_OPTIM_MAX_BUFFERS 2
typedef struct dt_optim_state {
    dt_optim_kind kind;
    int64_t step; /* optimizer steps taken so far (torch's state["step"]) */
    size_t n_total, lo, hi;
    int n_buffers;
    const char *names[DT_OPTIM_MAX_BUFFERS];
    float *buffers[DT_OPTIM_MAX_BUFFERS];
} dt_optim_state;
dt_status dt_optim_get_state(dt_optim *opt, dt_optim_state *st);
/* Sets the step count (after restoring the buffers). With step > 0 an SGD momentum buffer is
 * taken as initialised (torch creates it at the first step). */
dt_status dt_optim_set_step(dt_optim *opt, int64_t step);

/* ---- Learning-rate schedules ---------------------------------------------------------- */

typedef enum dt_lr_kind {
    DT_LR_CONSTANT = 0, /* base_lr (after warmup) */
    DT_LR_LINEAR = 1,   /* linear decay from base_lr to min_lr, reached at total_steps */
    DT_LR_COSINE = 2,   /* cosine decay from base_lr to min_lr, reached at total_steps */
    DT_LR_STEP = 3,     /* base_lr * gamma^floor(j / step_size), j = steps since warmup */
} dt_lr_kind;

typedef struct dt_lr_schedule {
    dt_lr_kind kind;
    float base_lr;
    int64_t warmup_steps; /* W >= 0 */
    int64_t total_steps;  /* LINEAR, COSINE: the step at which min_lr is reached (> W) */
    float min_lr;         /* LINEAR, COSINE */
    int64_t step_size;    /* STEP (> 0) */
    float gamma;          /* STEP */
} dt_lr_schedule;

/* The learning rate for optimizer step `step`, counted from 0: the lr used by the (step+1)-th
 * call of dt_optim_step, i.e. after `step` updates have been made. This is PyTorch's convention
 * with scheduler.step() called after optimizer.step(): with W = warmup_steps and j = step - W,
 *   step < W:   base_lr * (step + 1) / (W + 1)
 *               (torch LinearLR(start_factor = 1/(W+1), end_factor = 1, total_iters = W))
 *   CONSTANT:   base_lr
 *   LINEAR:     base_lr + (min_lr - base_lr) * min(j, D) / D,  D = total_steps - W
 *               (torch LinearLR(start_factor = 1, end_factor = min_lr/base_lr, total_iters = D))
 *   COSINE:     min_lr + (base_lr - min_lr) * (1 + cos(pi * min(j, D) / D)) / 2
 *               (torch CosineAnnealingLR(T_max = D, eta_min = min_lr); stays at min_lr after D)
 *   STEP:       base_lr * gamma^floor(j / step_size)   (torch StepLR(step_size, gamma))
 * each decay joined after the warmup as torch SequentialLR(milestones = [W]) does. The warmup
 * never uses lr 0 and reaches base_lr exactly at step W. Computed in double. */
float dt_lr_at(const dt_lr_schedule *s, int64_t step);
/* Checks a schedule's fields; the message names the field. */
dt_status dt_lr_check(const dt_lr_schedule *s);

/* ---- Gradient clipping ----------------------------------------------------------------- */

/* Global L2-norm clipping like torch.nn.utils.clip_grad_norm_: norm = ||grads||_2 (summed in
 * double); if max_norm / (norm + 1e-6) < 1 the gradients are multiplied by it. Returns the norm
 * before clipping. max_norm <= 0 disables clipping. A non-finite norm leaves the gradients as
 * they are (torch would scale them by NaN) so the caller can skip the step. */
float dt_grad_clip_norm(float *grads, size_t n, float max_norm);

/* The same in pieces, for distributed training: each rank computes the sum of squares of its
 * part, all-reduces it, and every rank applies the same coefficient to its part.
 * dt_grad_sumsq: sum of g[i]^2 in double; deterministic (fixed chunking, independent of the
 * number of threads). dt_grad_clip_coef: min(1, max_norm / (norm + 1e-6)); 1 if max_norm <= 0
 * or norm is not finite. dt_grad_scale: g[i] *= s. */
double dt_grad_sumsq(const float *grads, size_t n);
float dt_grad_clip_coef(double norm, float max_norm);
void dt_grad_scale(float *grads, size_t n, float s);

#ifdef __cplusplus
}
#endif
#endif
