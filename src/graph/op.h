/* The op interface (internal): how a family of ops plugs into the graph.
 *
 * An op is a dt_op_def with forward and backward kernels. A public builder (e.g. dt_linear in
 * src/ops/linear.c) checks its inputs' shapes, computes the output shape and calls
 * dt_node_add(). At compile time the graph calls def->prepare (optional) so the op can size its
 * saved-for-backward buffer (aux) and scratch (ws) and create library primitives (oneDNN); then
 * every buffer gets a planned address and the executor calls forward/backward with a fully
 * bound dt_op_ctx. Kernels never allocate.
 *
 * Gradient convention: backward receives gout (dL/dout) and writes dL/din_i into gin[i] as
 *   gin[i] = gin_beta[i] * gin[i] + (contribution)      (gin_beta is 0 or 1, like BLAS beta)
 * gin[i].data == NULL means input i needs no gradient (labels, indices, frozen weights): skip.
 * An op that can only accumulate sets DT_OPF_ACCUM_ONLY and the executor zeroes for it. */
#ifndef DTRAIN_GRAPH_OP_H
#define DTRAIN_GRAPH_OP_H

#include <stdint.h>
#include "dtrain/device.h"
#include "dtrain/graph.h"

#define DT_MAX_IN 4
#define DT_NIP 8 /* integer params per node */
#define DT_NFP 4 /* float params per node */

typedef struct dt_op_def dt_op_def;

/* Runtime state shared by all kernels during one step. */
typedef struct dt_run {
    int training;  /* 1: train mode (batch stats, dropout) */
    uint64_t key;  /* RNG key: seed mixed with rank */
    uint64_t step; /* RNG counter part */
    /* Device graphs under dt_graph_rng_on_device: the counter in device memory, which the
     * kernels read instead of step (a recorded step then replays with the value set before
     * each replay); NULL: kernels take step as their argument. */
    const uint64_t *step_dev;
    /* Synchronised batchnorm (dt_graph_set_sync_batchnorm): sums statistics over workers;
     * NULL: per-worker statistics. */
    dt_graph_allreduce_fn sync_fn;
    void *sync_ud;
    /* Device graphs: the graph's device and its cuBLASLt handle (linear's GEMMs); the stream
     * is the kernels' argument. */
    dt_device device;
    struct dt_cuda_gemm *gemm;
} dt_run;

typedef struct dt_node {
    const dt_op_def *op; /* NULL for leaves (inputs, params) */
    int id;
    int n_in;
    int in[DT_MAX_IN];
    dt_tensor t;           /* dtype and contiguous shape; data bound at compile */
    int64_t ip[DT_NIP];    /* op's integer parameters */
    float fp[DT_NFP];      /* op's float parameters */
    size_t aux_bytes;      /* saved for backward (set by prepare) */
    size_t ws_fwd, ws_bwd; /* scratch for one forward / backward call (set by prepare) */
    void *state;           /* op-private (library primitives); freed by def->destroy */
    /* set by the graph */
    int kind; /* DT_NODE_OP, DT_NODE_INPUT, DT_NODE_PARAM */
    int requires_grad;
    int segment; /* recompute segment index, -1 if none */
    int param;   /* index into the param table for params, else -1 */
    int layout;  /* physical layout of the value and its gradient (compile) */
    char *name;  /* inputs and params */
} dt_node;

enum { DT_NODE_OP = 0, DT_NODE_INPUT = 1, DT_NODE_PARAM = 2 };

/* Physical layouts of a node's value (and of its gradient, always the same). Shapes stay
 * logical: a C16 value of shape [N, C, H, W] is stored as [N, C/16, H, W, 16] (oneDNN's nChw16c),
 * a C8 value as [N, C/8, H, W, 8] (nChw8c): the layouts oneDNN's AVX-512 and AVX2 convolutions
 * read and write, so that a chain conv -> batchnorm -> conv passes activations without
 * reordering them. The compiler picks one block width per graph (the CPU's) and blocks a 4-D f32
 * value with C a multiple of it when its producer and every consumer accept it
 * (dt_op_def.layouts) and the value is not user-visible (kept or the loss); see
 * src/graph/layout.c. */
enum { DT_LAYOUT_PLAIN = 0, DT_LAYOUT_C16 = 1, DT_LAYOUT_C8 = 2 };
/* Channels per block of a layout: 16, 8, or 0 for plain. */
static inline int dt_layout_block(int layout) {
    return layout == DT_LAYOUT_C16 ? 16 : layout == DT_LAYOUT_C8 ? 8 : 0;
}
#define DT_LAY_IN(i) (1u << (i)) /* dt_op_def.layouts: input i may be blocked */
#define DT_LAY_OUT (1u << 4)     /* the output may be blocked */
#define DT_LAY_TIED (1u << 5) /* the output and those inputs are blocked together or not at all */

typedef struct dt_op_ctx {
    const dt_node *node;
    const dt_run *run;
    int recompute;             /* 1 when this forward re-runs a recompute segment */
    dt_tensor in[DT_MAX_IN];   /* input values (contiguous) */
    int in_layout[DT_MAX_IN];  /* inputs' physical layouts (DT_LAYOUT_*, compile) */
    dt_tensor out;             /* output value (contiguous) */
    dt_tensor gin[DT_MAX_IN];  /* input gradients; data NULL if not needed */
    float gin_beta[DT_MAX_IN]; /* 0: overwrite gin, 1: add to gin */
    dt_tensor gout;            /* gradient of the output */
    void *aux;                 /* node->aux_bytes, alive from forward to backward */
    void *ws;                  /* node->ws_fwd or ws_bwd bytes, this call only */
} dt_op_ctx;

/* Flags: which values backward reads, so the planner keeps them alive. */
enum {
    DT_OPF_BWD_IN0 = 1 << 0, /* backward reads in[0]; (DT_OPF_BWD_IN0 << i) for in[i] */
    DT_OPF_BWD_OUT = 1 << 4, /* backward reads out */
    DT_OPF_ACCUM_ONLY = 1 << 5,
    DT_OPF_ALIAS = 1 << 6, /* output is a view of in[0]'s memory (reshape); no kernels */
    /* in[1] is a table [R, ...] of which forward reads only some rows (a lookup), and backward
     * adds nothing -- not even -0.0 -- to the gradient of the rows it did not read: a table
     * only such ops read has a row-sparse gradient (dt_param_info.sparse_row). */
    DT_OPF_ROWS_IN1 = 1 << 7,
};
#define DT_OPF_BWD_IN(i) (DT_OPF_BWD_IN0 << (i))

struct dt_op_def {
    const char *name;
    unsigned flags;
    /* Optional. Sets aux_bytes/ws_fwd/ws_bwd and creates primitives. */
    dt_status (*prepare)(dt_graph *g, dt_node *n);
    dt_status (*forward)(const dt_op_ctx *c);
    dt_status (*backward)(const dt_op_ctx *c);
    void (*destroy)(dt_node *n); /* optional */
    /* Optional: DT_LAY_* bits of the slots this node can handle channel-blocked, in either
     * DT_LAYOUT_C16 or DT_LAYOUT_C8 (NULL: plain only). Called before prepare, which then reads
     * node->layout and its inputs' layouts. */
    unsigned (*layouts)(const dt_graph *g, const dt_node *n);
    /* CUDA entry points (src/ops/NAME_cuda.c), picked when the graph is compiled for a CUDA
     * device (dt_graph_opts.device): an op without cuda_forward (or, when its backward is
     * needed, cuda_backward) fails that compile with "graph: NAME has no CUDA kernel yet". The
     * kernels only issue work on s; ctx pointers are device memory. cuda_prepare replaces
     * prepare on a CUDA graph (optional: sizes aux/ws for the CUDA kernels, refuses what they
     * do not handle with one line). Alias ops need none. */
    dt_status (*cuda_prepare)(dt_graph *g, dt_node *n);
    dt_status (*cuda_forward)(const dt_op_ctx *c, dt_stream *s);
    dt_status (*cuda_backward)(const dt_op_ctx *c, dt_stream *s);
    /* Optional, both or neither: input checks done by the forward's kernels. cuda_check_at
     * gives the byte offset in the node's aux of an int64 the forward leaves holding the first
     * bad position, or -1; the executor copies it, on the stream, into a buffer of the graph's
     * own (aux is reused by later entries). cuda_check forms the CPU op's error for position
     * pos, once the stream's work has finished (it may download the graph's inputs). */
    int64_t (*cuda_check_at)(dt_graph *g, const dt_node *n);
    dt_status (*cuda_check)(dt_graph *g, const dt_op_ctx *c, int64_t pos);
};

/* Adds an op node. Checks only generic things (ids valid, ndim); returns the id or -1. The
 * builder must have validated shapes and dtypes with messages that name the op and shapes. */
int dt_node_add(dt_graph *g, const dt_op_def *op, int n_in, const int *in, dt_dtype dtype, int ndim,
                const int64_t *shape, const int64_t *ip, int nip, const float *fp, int nfp);
/* Node by id (NULL if out of range). Builders use it to read input shapes. */
dt_node *dt_graph_node(dt_graph *g, int id);
/* 1 while a measure_only compile (dt_graph_opts) runs prepare: the graph will only be measured,
 * never run, so prepare may skip work that sizes nothing (tables, precomputed data) and must
 * still set aux_bytes / ws_fwd / ws_bwd exactly as for a real compile. */
int dt_graph_measuring(const dt_graph *g);
/* 1 while compiling a graph with dt_graph_opts.bf16_gemm: the GEMM ops' prepare (linear,
 * matmul, conv2d) then reserves ws for bf16-rounded copies of their operands (src/ops/bf16.c). */
int dt_graph_bf16_gemm(const dt_graph *g);
/* For cuda_prepare: a device copy of bytes of host memory, owned by the graph (freed with it):
 * tables the CUDA kernels read (rope's inverse frequencies). NULL with an error on failure;
 * NULL and no error while measuring (nothing is allocated then). */
void *dt_graph_device_const(dt_graph *g, const void *host, size_t bytes);
/* For cuda_prepare: the graph's cuDNN handle (made on first use, freed with the graph), for the
 * convolutions' plans. An error (a build without cuDNN: one line) leaves *out NULL. */
struct dt_cuda_dnn;
dt_status dt_graph_cuda_dnn(dt_graph *g, struct dt_cuda_dnn **out);
/* Returns 1 (and sets an error naming `op`) if any id is negative or unknown: the builder
 * should then return -1. Use as: if (dt_ids_bad(g, "linear", 2, (int[]){x, w})) return -1; */
int dt_ids_bad(dt_graph *g, const char *op, int n, const int *ids);
/* Sets a shape error "op: what (shapes ...)" and returns -1, for builders. */
int dt_shape_error(const char *op, const char *what, int n, const dt_tensor *const *ts);
/* Returns 0 when x is f32; else sets DT_ERR_DTYPE "op: x must be f32, got DTYPE (x SHAPE)" and
 * returns -1, for builders. */
int dt_x_f32_check(const char *op, const dt_tensor *x);

#endif
