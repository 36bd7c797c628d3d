/* Static computation graphs with reverse-mode autodiff and planned memory.
 *
 * Life cycle:
 *   dt_graph *g = dt_graph_init();
 *   int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){B, D}, 0);
 *   int w = dt_graph_param(g, "fc.weight", DT_F32, 2, (int64_t[]){O, D}, 0);
 *   int y = dt_linear(g, x, w, -1);  ... int loss = dt_cross_entropy(g, y, labels, ...);
 *   dt_graph_compile(g, loss, &opts);   // derive backward, plan memory, allocate once
 *   fill dt_graph_value(g, x)->data, params ...
 *   dt_graph_forward(g, 1); dt_graph_backward(g);  // gradients land in dt_graph_flat_grad()
 *
 * Nodes are identified by int ids. Builders return a new id (>= 0) or a negative value on
 * error, with the message in dt_last_error(); a builder given a negative input id returns
 * negative at once, so a model can be built without checking every call and checked once.
 *
 * Memory: all trainable parameters live in one flat f32 buffer and their gradients in a second
 * one with the same layout (docs/architecture.md, "flat buffers"); frozen parameters (f32 or bf16)
 * and non-trainable state (batchnorm running statistics) live in their own flat buffers.
 * Activations, activation gradients, saved-for-backward data and scratch are assigned offsets in
 * one arena by a liveness-based planner at compile time; a step allocates nothing. */
#ifndef DTRAIN_GRAPH_H
#define DTRAIN_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/device.h"
#include "dtrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_graph dt_graph;

/* Parameter flags. */
enum {
    DT_PARAM_FROZEN = 1 << 0,   /* no gradient; stored in the frozen buffer */
    DT_PARAM_NO_DECAY = 1 << 1, /* optimizer group without weight decay (norms, biases) */
    DT_PARAM_STATE = 1 << 2,    /* non-trainable state (running stats); saved, never decayed */
};

dt_graph *dt_graph_init(void);
void dt_graph_free(dt_graph *g);

/* Leaves. Inputs get persistent buffers (write the batch there); with requires_grad the
 * gradient w.r.t. the input is kept too (for tests). Params: f32 trainable by default;
 * DT_PARAM_FROZEN may use DT_BF16. */
int dt_graph_input(dt_graph *g, const char *name, dt_dtype dtype, int ndim, const int64_t *shape,
                   int requires_grad);
int dt_graph_param(dt_graph *g, const char *name, dt_dtype dtype, int ndim, const int64_t *shape,
                   unsigned flags);

/* Marks the nodes in (first, last] -- i.e. created after node `first` up to and including
 * `last` -- as one recompute segment: their activations are not kept for backward but
 * recomputed from the segment's inputs when backward reaches the segment. Typical use:
 * int s = last node id before a block; build the block; dt_graph_recompute(g, s, block_out). */
dt_status dt_graph_recompute(dt_graph *g, int first, int last);
/* Keeps a node's value readable after forward (e.g. logits); the loss is always kept. */
dt_status dt_graph_keep(dt_graph *g, int id);

typedef struct dt_graph_opts {
    int no_backward; /* plan forward only (inference) */
    int no_reuse;    /* give every buffer its own memory (for debugging the planner) */
    /* Before each op runs, fill what it is about to overwrite (its output; in backward, the
     * input gradients it writes with beta 0) with NaN bytes, so a kernel that reads memory it
     * should only write shows up as NaN instead of silently using whatever the planner's
     * reused memory held. For tests; also set by the environment variable DT_GRAPH_POISON=1. */
    int poison;
    /* Allocate the flat parameter and gradient buffers with at least this many elements
     * (0: exactly the trainable parameters). ZeRO pads them to world x shard elements so that
     * the shards are equal slices; the extra elements are zero and belong to no parameter. */
    size_t flat_capacity;
    /* Keep every activation in its plain layout (NCHW) instead of letting chains of
     * convolutions, batchnorms and pools pass channel-blocked ones (the default where the CPU
     * has AVX2 or AVX-512; the results agree to rounding). For tests and A/B measurements; also
     * set by DT_GRAPH_PLAIN=1, and on CPUs without AVX2 (DT_GRAPH_PLAIN=0 blocks anyway: tests
     * of the blocked kernels). */
    int plain_layout;
    /* Channels per block of blocked activations: 0 for the CPU's convolutions' own (16 with
     * AVX-512, nChw16c; 8 with AVX2, nChw8c), or 8 or 16 (tests, A/B runs; 0 also takes
     * DT_GRAPH_BLOCK=8|16 from the environment). Any other value fails compile. Both widths
     * give the same bits on one machine (the convolutions' kernels are the CPU's either way). */
    int layout_block;
    /* Plan and stop: run every op's prepare (workspace and saved-data sizes), the schedule and
     * the memory planner, and allocate nothing -- no arena, no flat buffers, no bindings -- as
     * ggml's allocator measures a graph before reserving it. dt_graph_memory then reports the
     * figures a real compile of the same graph would give; the graph cannot run or be compiled
     * again (build a new one). What `dtrain plan` reads its activation figures from. */
    int measure_only;
    /* Leave the frozen buffer's pages untouched at compile (it is then zero until loaded): the
     * caller points most frozen parameters at memory of its own (dt_graph_param_external: a
     * read-only mapping of the model file that the workers of a host share), so only the rest
     * ever get pages here. Without it they are touched like every other buffer. */
    int frozen_untouched;
    /* bf16 mixed precision (train.precision: bf16): every GEMM and convolution (linear, matmul,
     * conv2d; forward and both backward products) takes its operands -- activations, weights,
     * incoming gradients -- rounded to bf16 (round to nearest even) and accumulates in f32;
     * parameters, gradients, optimizer state, norms, softmax and the loss stay f32 (docs/ops.md,
     * "Precision modes"). Needs a CPU with bf16 instructions (compile fails with one line
     * otherwise) or DT_CPU_BF16=emulate, which runs the exact f32 emulation on any CPU. */
    int bf16_gemm;
    /* Where the graph runs: the CPU (the default, {0}) or a CUDA device. For a CUDA device the
     * arena, the inputs and the flat parameter/gradient/frozen/state buffers are device memory
     * (allocated once, zeroed), every op runs its CUDA kernel on the graph's stream
     * (dt_graph_stream) and compile fails with one line naming the first op that has none
     * ("graph: conv2d has no CUDA kernel yet"; checked before anything is allocated, so also
     * where no GPU is visible). What runs on CUDA today: the Llama graph's ops in f32 (linear
     * without bias, f32 weights), rmsnorm, rope, attention, silu, add/sub/mul without
     * broadcasting, scale, transpose/permute, reshape, embedding (f32 table), dropout and
     * cross-entropy (i32 targets) -- docs/gpu.md. bf16_gemm is refused; measure_only plans
     * for the device (its kernels' workspaces) without allocating anything. */
    dt_device device;
} dt_graph_opts;

/* Derives the backward schedule from `loss` (a scalar), plans memory, allocates every buffer
 * once (and touches it, so first-touch page faults are not paid inside a step). */
dt_status dt_graph_compile(dt_graph *g, int loss, const dt_graph_opts *opts);

/* Runs forward. training=1: batch statistics and dropout; 0: eval mode. */
dt_status dt_graph_forward(dt_graph *g, int training);
/* Runs backward from the loss (seed gradient `dt_graph_set_loss_scale`, default 1). Parameter
 * gradients overwrite the flat gradient buffer, or add to it after
 * dt_graph_set_accumulate(g, 1) (gradient accumulation over micro-batches). */
dt_status dt_graph_backward(dt_graph *g);
void dt_graph_set_accumulate(dt_graph *g, int on);
/* Called during dt_graph_backward each time parameters' gradients become final (their last
 * writer has run), with their indices in the param table (dt_graph_param_info). Data-parallel
 * training starts the all-reduce of a gradient bucket from here while backward goes on. Every
 * trainable parameter is reported exactly once per backward. */
typedef void (*dt_grad_ready_fn)(void *ud, const int *params, int n);
void dt_graph_on_grad_ready(dt_graph *g, dt_grad_ready_fn fn, void *ud);
void dt_graph_set_loss_scale(dt_graph *g, float s);

/* The compiled schedule, for ZeRO-3 (parameters gathered just before use and released after):
 * entries [0, n_forward) are the forward pass, [n_forward, count) backward (including
 * recomputed forward segments). dt_graph_entry_params writes the param-table indices of the
 * trainable parameters entry k reads (through views too), at most DT_GRAPH_ENTRY_PARAMS, and
 * returns how many. */
#define DT_GRAPH_ENTRY_PARAMS 8
int dt_graph_entry_count(const dt_graph *g, int *n_forward);
int dt_graph_entry_params(const dt_graph *g, int k, int *params);
/* The same for the frozen parameters entry k reads (a LoRA base sharded across ranks). */
int dt_graph_entry_frozen(const dt_graph *g, int k, int *params);
/* The op entry k runs ("conv2d", "matmul", ...; NULL when k is out of range) and how:
 * *phase = 0 forward, 1 backward, 2 recomputed forward. For profilers (bench_ddp --profile). */
const char *dt_graph_entry_op(const dt_graph *g, int k, int *phase);
/* The ids entry k looks up when it is a row lookup (dt_embedding) whose ids are a graph input
 * read on the host: the input's tensor (i32 or i64, any shape), set by the caller before the
 * pass, so it may be read before the entry runs. NULL otherwise (another op, ids computed by
 * the graph, or a graph compiled for a device). */
const dt_tensor *dt_graph_entry_row_ids(const dt_graph *g, int k);
/* Called on the executing thread before (after = 0) and after (after = 1) every entry of
 * forward and backward; a status other than DT_OK stops the pass and is returned by
 * dt_graph_forward/backward. NULL removes it. */
typedef dt_status (*dt_graph_entry_fn)(void *ud, int entry, int after);
void dt_graph_on_entry(dt_graph *g, dt_graph_entry_fn fn, void *ud);
/* RNG key material for dropout etc.: key = seed mixed with rank; counter uses step. */
void dt_graph_set_rng(dt_graph *g, uint64_t seed, uint64_t step, int rank);
/* A graph compiled for CUDA (on = 1): each forward first copies the step of dt_graph_set_rng
 * from pinned host memory into device memory on the graph's stream, and the dropout kernels
 * read it there, so that a step recorded as a CUDA graph draws a new mask at each replay from
 * the step set before it. The host must not set the next step before the forward that reads
 * the last has run (true of a trainer that waits for each step; not of micro-batches issued
 * back to back). on = 0: the step is a launch argument again. Other graphs: DT_ERR_STATE. */
dt_status dt_graph_rng_on_device(dt_graph *g, int on);
/* Synchronised batch normalisation (torch.nn.SyncBatchNorm). In data-parallel training each
 * worker normalises its own rows with statistics of its own batch by default (PyTorch DDP's
 * default), which become noisy when the per-worker batch is small. With a reducer set, every
 * batchnorm node in training mode (forward, recomputed forward and backward) uses statistics of
 * the global batch of all workers instead: forward sums per-channel [sum x (C), sum x^2 (C),
 * element count (1)] -- one call with n = 2C + 1 -- and derives the global mean, the biased
 * variance (to normalise) and the unbiased variance with the global count (for running_var);
 * backward sums [sum dy (C), sum dy * xhat (C)] -- one call with n = 2C -- for the input
 * gradient. weight/bias gradients stay per worker (the data-parallel gradient average sums
 * them), as in PyTorch. Eval mode uses the running statistics and never calls the reducer.
 *
 * fn must sum buf[n] over all workers in place (e.g. dt_comm_allreduce_f64) and return DT_OK,
 * or an error status with a message; the op then fails with "batchnorm2d: ..." naming what
 * failed plus the reducer's message. fn runs in the thread of dt_graph_forward/backward, once
 * per batchnorm node and pass, in schedule order: every worker must run the same graph with the
 * same setting, so the calls match up. The backward calls happen while a dt_ddp gradient
 * all-reduce may be in flight on another thread: a reducer must not start a second concurrent
 * collective on that same communicator (see dtrain/dist.h). fn NULL (the default): per-worker
 * statistics, exactly the unsynchronised computation. May be changed between steps, not between
 * a forward and its backward. */
typedef dt_status (*dt_graph_allreduce_fn)(void *ud, double *buf, size_t n);
void dt_graph_set_sync_batchnorm(dt_graph *g, dt_graph_allreduce_fn fn, void *ud);

/* Access after compile: the node's value / gradient (NULL data if it has none or its memory
 * was reused; values of kept nodes, inputs and params are always valid, and always in the
 * shape's plain row-major layout. Other intermediate 4-D values between convolutions may be
 * stored channel-blocked (nChw16c or nChw8c) under the same shape: keep a node to read it). */
const dt_tensor *dt_graph_value(dt_graph *g, int id);
const dt_tensor *dt_graph_grad(dt_graph *g, int id);
int dt_graph_find(const dt_graph *g, const char *name); /* input/param by name, -1 if none */
const char *dt_graph_name(const dt_graph *g, int id);
int dt_graph_node_count(const dt_graph *g);
/* Shape of a node (valid before compile). */
const dt_tensor *dt_graph_shape(const dt_graph *g, int id);

/* Device graphs (dt_graph_opts.device is CUDA). Every pointer the accessors here give --
 * dt_graph_value/grad data, the flat buffers -- is then device memory: the host must not
 * dereference it, but copy with these two (on a CPU graph they are plain memcpy). Forward and
 * backward only issue work on the graph's stream and return; dt_graph_download waits for it
 * (dt_stream_sync) before copying, dt_graph_upload orders its copy after the work issued so far
 * and waits for it. Kernel-side checks (embedding ids, cross-entropy targets outside their
 * range) are recorded by the kernels and reported by dt_graph_device_read_checks after the
 * forward has run (the step itself gives zero rows or a NaN loss). The grad ready callback and
 * dt_graph_on_entry fire when an entry's kernels are issued, not done. */
dt_device dt_graph_device(const dt_graph *g);
/* After a forward has run on a device graph: the first bad input its kernels recorded, as the
 * CPU op's error (DT_ERR_RANGE: an embedding id or a cross-entropy target out of range; a
 * few small downloads, each after the stream's work). DT_OK on a CPU graph, whose ops refuse
 * before they run. */
dt_status dt_graph_device_read_checks(dt_graph *g);
/* The stream the kernels of a device graph run on (NULL on a CPU graph). */
dt_stream *dt_graph_stream(dt_graph *g);
/* Host src -> graph memory dst (a pointer into a value, gradient or flat buffer), bytes. */
dt_status dt_graph_upload(dt_graph *g, void *dst, const void *src, size_t bytes);
/* Graph memory src -> host dst, after the work issued so far has finished. */
dt_status dt_graph_download(dt_graph *g, void *dst, const void *src, size_t bytes);

/* Flat buffers. */
float *dt_graph_flat_param(dt_graph *g, size_t *n);
/* Page-aligned, and its allocation a whole number of pages (dt_ddp shares it with the other
 * ranks of the host: dt_comm_share). */
float *dt_graph_flat_grad(dt_graph *g, size_t *n);
/* Elements allocated in the flat parameter and gradient buffers (>= n; dt_graph_opts). */
size_t dt_graph_flat_capacity(const dt_graph *g);
void *dt_graph_flat_frozen(dt_graph *g, size_t *bytes);
/* Points frozen parameter `id` of a compiled graph at `data` (at least its nbytes, aligned to its
 * element size) instead of its slot in the frozen buffer, with no copy: its value and every op
 * that reads it (through views too) read there from now on, and the slot's whole pages are given
 * back. The graph never writes a frozen parameter (no gradient, no optimizer), so data may be
 * read-only memory (PROT_READ: a mapping of a safetensors file, or a segment another worker of
 * the host filled). It must stay valid, unchanged, until the graph is freed or the parameter is
 * pointed elsewhere. dt_graph_flat_frozen no longer holds that parameter's bytes. */
dt_status dt_graph_param_external(dt_graph *g, int id, const void *data);
float *dt_graph_flat_state(dt_graph *g, size_t *n);

/* Parameters in flat-buffer order (trainable ones first, in declaration order). */
typedef struct dt_param_info {
    const char *name;
    int id;
    unsigned flags;
    size_t offset; /* in elements into its flat buffer (bytes for the frozen buffer) */
    size_t numel;
    /* Set by dt_graph_compile. > 0: only row lookups (dt_embedding) read this parameter, in
     * rows of sparse_row elements (a table [R, D] has sparse_row = D). Trainable: after
     * backward its gradient is exactly +0.0 outside the rows the lookups read, and data
     * parallelism sends only the rows some rank touched. Frozen: a sharded base gathers only
     * the rows looked up (zero_frozen_rows.c). 0: dense (any other use, e.g. a tied lm_head's
     * matrix product). */
    size_t sparse_row;
} dt_param_info;
int dt_graph_param_count(const dt_graph *g);
const dt_param_info *dt_graph_param_info(const dt_graph *g, int i);

/* Planner report. */
typedef struct dt_graph_mem {
    size_t arena_bytes;     /* planned activations + grads + aux + scratch (with reuse) */
    size_t unplanned_bytes; /* the same without reuse: sum of all buffer sizes */
    size_t saved_bytes;     /* of the arena, bytes live when forward ends (kept for backward) */
    size_t param_bytes, grad_bytes, frozen_bytes, state_bytes, input_bytes;
} dt_graph_mem;
void dt_graph_memory(const dt_graph *g, dt_graph_mem *m);

#ifdef __cplusplus
}
#endif
#endif
