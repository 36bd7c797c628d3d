/* Executor: runs the compiled schedule. No allocation happens here. */
#include <string.h>
#include "graph/graph_impl.h"

static dt_status run_entry(dt_graph *g, dt_entry *e) {
    dt_op_ctx *c = &e->ctx;
    const dt_op_def *op = c->node->op;
    if (e->phase != DT_PH_BWD) return op->forward(c);
    for (int k = 0; k < e->n_zero; k++) memset(e->zero[k].ptr, 0, e->zero[k].bytes);
    for (int j = 0; j < c->node->n_in; j++) {
        if (!e->param_first[j]) continue;
        /* First writer of a parameter gradient: overwrite, or add when accumulating. */
        if (g->accumulate) {
            c->gin_beta[j] = 1.0f;
        } else if (op->flags & DT_OPF_ACCUM_ONLY) {
            memset(c->gin[j].data, 0, dt_tensor_nbytes(&c->gin[j]));
            c->gin_beta[j] = 1.0f;
        } else {
            c->gin_beta[j] = 0.0f;
        }
    }
    return op->backward(c);
}

static dt_status run_range(dt_graph *g, int from, int to) {
    for (int k = from; k < to; k++) {
        dt_entry *e = &g->entries[k];
        dt_status s = run_entry(g, e);
        if (s != DT_OK) return s;
        if (g->on_ready && e->ready_count) g->on_ready(g->on_ready_ud, g->ready + e->ready_first, e->ready_count);
    }
    return DT_OK;
}

dt_status dt_graph_forward(dt_graph *g, int training) {
    if (!g || !g->compiled) return dt_error_set(DT_ERR_STATE, "forward: graph is not compiled");
    g->run.training = training != 0;
    return run_range(g, 0, g->n_fwd);
}

dt_status dt_graph_backward(dt_graph *g) {
    if (!g || !g->compiled) return dt_error_set(DT_ERR_STATE, "backward: graph is not compiled");
    if (g->no_backward)
        return dt_error_set(DT_ERR_STATE, "backward: graph was compiled with no_backward");
    g->loss_grad[0] = g->loss_scale;
    if (!g->accumulate)
        for (int k = 0; k < g->n_unused; k++) {
            const dt_tensor *t = &g->grad[g->unused[k]];
            memset(t->data, 0, dt_tensor_nbytes(t));
        }
    /* Unused parameters' gradients are final (zero) before backward starts. */
    if (g->on_ready)
        for (int k = 0; k < g->n_unused; k++) {
            int pi = g->nodes[g->unused[k]].param;
            g->on_ready(g->on_ready_ud, &pi, 1);
        }
    return run_range(g, g->n_fwd, g->n_entries);
}
