/* Internal layout of dt_graph, shared by graph.c (building), compile.c (autodiff schedule and
 * memory planner) and exec.c (executor). */
#ifndef DTRAIN_GRAPH_IMPL_H
#define DTRAIN_GRAPH_IMPL_H

#include "graph/op.h"

enum { DT_PH_FWD = 0, DT_PH_BWD = 1, DT_PH_RECOMP = 2 };

typedef struct dt_zero {
    void *ptr;
    size_t bytes;
} dt_zero;

/* One step of the schedule: run node's forward, backward or recomputed forward. */
typedef struct dt_entry {
    int node;
    int phase;
    dt_op_ctx ctx;
    /* Per gin slot: 1 if this entry is the first writer of a parameter's gradient (its beta is
     * then 0, or 1 in accumulate mode). */
    unsigned char param_first[DT_MAX_IN];
    int n_zero; /* buffers to zero before an accumulate-only backward */
    dt_zero zero[DT_MAX_IN];
    int ready_first, ready_count; /* params whose gradient is final after this entry */
    int check; /* device graphs: 1 + this forward's slot in dt_graph.checks, 0 for none */
} dt_entry;

struct dt_graph {
    dt_node *nodes;
    int n_nodes, cap_nodes;
    dt_param_info *params;
    int n_params, cap_params;
    int (*segs)[2];
    int n_segs;
    unsigned char *keep; /* per node, sized cap_nodes */

    /* leaf storage sizes, assigned as leaves are declared */
    size_t n_flat, n_state, frozen_bytes, input_bytes;

    /* after compile */
    int compiled, loss, no_backward, poison;
    int measuring; /* a measure_only compile is under way (dt_graph_measuring) */
    int measured;  /* compiled with measure_only: sizes planned, nothing allocated or bound */
    int bf16_gemm; /* dt_graph_opts.bf16_gemm, for the GEMM ops' prepare (dt_graph_bf16_gemm) */
    float *flat_param, *flat_grad, *flat_state;
    void *flat_frozen, *input_mem, *arena;
    size_t frozen_map_bytes; /* flat_frozen is an anonymous mapping of this many bytes */
    size_t arena_bytes, unplanned_bytes, saved_bytes;
    dt_tensor *val, *grad; /* per node: user-visible bindings */
    dt_entry *entries;
    int n_entries, n_fwd;
    float *loss_grad; /* seed for backward */
    int *unused;      /* trainable params no backward writes: zeroed each step */
    int n_unused;
    int *ready, n_ready; /* param indices in the order their gradients become final */
    size_t flat_cap;     /* elements allocated in flat_param / flat_grad (>= n_flat) */
    dt_graph_entry_fn on_entry;
    void *on_entry_ud;
    dt_grad_ready_fn on_ready;
    void *on_ready_ud;
    dt_run run;
    int accumulate;
    float loss_scale;
    /* CUDA: loss_scale in pinned host memory, the source of the backward's seed copy, so that
     * a captured step (a CUDA graph, which cannot copy from pageable memory) reads the value
     * set before each replay */
    float *loss_scale_pin;
    /* CUDA: the RNG counter (run.step) in pinned host memory, written by dt_graph_set_rng, and
     * its device copy, refreshed at the start of each forward when run.step_dev points at it
     * (dt_graph_rng_on_device) */
    uint64_t *step_pin, *step_dev;
    /* device graphs (src/graph/device_graph.c) */
    int on_cuda;     /* compiled (or being compiled) for a CUDA device */
    int64_t *checks; /* device [n_checks]: the checked forwards' first bad positions */
    int n_checks;
    dt_device device;        /* dt_graph_opts.device */
    dt_stream *stream;       /* the kernels' stream (CUDA graphs) */
    struct dt_cuda_dnn *dnn; /* dt_graph_cuda_dnn: cuDNN handle of the convolutions */
    void **dconst;           /* dt_graph_device_const allocations */
    int n_dconst, cap_dconst;
};

dt_node *dt_graph_node_(const dt_graph *g, int id);
/* Sets every node's layout (src/graph/layout.c): channel blocks of `block` (16 or 8), or all
 * DT_LAYOUT_PLAIN with block 0. */
void dt_graph_choose_layouts(dt_graph *g, int block);
/* The channel block of oneDNN's convolutions on this CPU: 16 with AVX-512, 8 with AVX2, 0 below
 * (blocked values would only add reorders there). */
int dt_graph_layout_native_block(void);

/* Device graphs (src/graph/device_graph.c). The first op the device has no kernel for, as a
 * one-line error (DT_OK when all have one). */
dt_status dt_graph_device_check(dt_graph *g, const int *live, const int *gneed);
/* For a forward entry whose op checks its input on the device: where the executor copies the
 * check's int64 from (in aux) and to (dt_graph.checks); 0 when the entry has none. */
int dt_graph_device_check_slot(dt_graph *g, const dt_entry *e, void **dst, const void **src);
/* Allocates (and zeroes) the arena, flat buffers, inputs and loss seed on the graph's device,
 * creates its stream and GEMM handle. */
dt_status dt_graph_device_alloc(dt_graph *g, size_t flat_cap);
/* Frees what dt_graph_device_alloc and dt_graph_device_const made. */
void dt_graph_device_free(dt_graph *g);

#endif
