/* The figures of `dtrain plan` from the real training graph: the model's own builder
 * (dt_llama_build, dt_resnet_build) plus the loss, exactly as the trainer builds them
 * (src/train/trainer.c, build_model), compiled with measure_only (include/dtrain/graph.h). The
 * compiler then runs every op's prepare -- the kernels' own workspace, saved-for-backward and
 * scratch sizes (attention tiles, rmsnorm partials, oneDNN scratchpads) --, derives the schedule
 * and packs the arena, and allocates nothing: no activations, no flat buffers, no weights. So
 * the planned activations are the arena a step of that configuration runs in, on this machine
 * (the CPU's convolution layouts, the thread count), with nothing copied from the kernels.
 *
 * Shapes: Llama ids [B, T] i32 -> logits [B, T, V] -> [B*T, V] -> cross entropy with targets
 * [B*T] i32; ResNet x [B, C, S, S] f32 -> logits [B, classes] -> cross entropy with y [B] i32.
 * The logits are kept (the trainer reads them after forward). */
#include <string.h>
#include "config/plan_impl.h"
#include "dtrain/ops.h"
#include "dtrain/runtime.h"

static dt_status measure(dt_graph *g, int logits, int targets, int64_t rows, int threads, int bf16,
                         plan_figures *f) {
    int flat = logits;
    const dt_tensor *ls = logits >= 0 ? dt_graph_shape(g, logits) : NULL;
    if (ls && ls->ndim == 3)
        flat = dt_reshape(g, logits, 2, (int64_t[]){rows, ls->shape[ls->ndim - 1]});
    int loss = dt_cross_entropy(g, flat, targets, 0.0f, -100);
    if (loss < 0 || dt_graph_keep(g, logits) != DT_OK)
        return dt_error_set(DT_ERR_INVALID, "plan: building the model's graph: %s",
                            dt_last_error());
    /* ops size per-thread scratch by the OpenMP thread count (attention): the trainer's */
    int before = dt_threads_get();
    if (threads != before) dt_threads_set(threads);
    dt_status st =
        dt_graph_compile(g, loss, &(dt_graph_opts){.measure_only = 1, .bf16_gemm = bf16});
    if (threads != before) dt_threads_set(before);
    if (st != DT_OK) return st;
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    f->activation_bytes = (int64_t)m.arena_bytes;
    f->saved_bytes = (int64_t)m.saved_bytes;
    f->state_bytes = (int64_t)m.state_bytes;
    f->frozen_bytes = (int64_t)m.frozen_bytes;
    f->params_trainable = (int64_t)(m.param_bytes / sizeof(float));
    f->params_frozen = 0, f->frozen_largest = 0, f->frozen_layer_largest = 0;
    f->frozen_layer_bytes = 0;
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(pi->flags & DT_PARAM_FROZEN)) continue;
        f->params_frozen += (int64_t)pi->numel;
        int64_t b = (int64_t)dt_tensor_nbytes(dt_graph_shape(g, pi->id));
        if (b > f->frozen_largest) f->frozen_largest = b;
        if (strstr(pi->name, "layers.") && b > f->frozen_layer_largest) f->frozen_layer_largest = b;
        if (!strncmp(pi->name, "model.layers.0.", 15)) f->frozen_layer_bytes += b;
    }
    return DT_OK;
}

dt_status dt_plan_measure_llama(const dt_llama_config *c, int64_t batch, int64_t seq_len,
                                int threads, int bf16, plan_figures *f) {
    dt_graph *g = dt_graph_init();
    if (!g) return dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
    int ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){batch, seq_len}, 0);
    int targets = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){batch * seq_len}, 0);
    int logits = ids >= 0 ? dt_llama_build(g, c, ids) : -1;
    dt_status st = measure(g, logits, targets, batch * seq_len, threads, bf16, f);
    dt_graph_free(g);
    return st;
}

dt_status dt_plan_measure_resnet(const dt_resnet_config *c, int64_t batch, int64_t side,
                                 int threads, int bf16, plan_figures *f) {
    dt_graph *g = dt_graph_init();
    if (!g) return dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){batch, c->in_channels, side, side}, 0);
    int y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){batch}, 0);
    int logits = x >= 0 ? dt_resnet_build(g, c, x) : -1;
    dt_status st = measure(g, logits, y, batch, threads, bf16, f);
    dt_graph_free(g);
    return st;
}
