/* Executor: runs the compiled schedule. No allocation happens here. */
#include <string.h>
#include "dtrain/device_cuda.h"
#include "graph/graph_impl.h"

/* Zero-fills (and 0xff poison) of graph memory: memset on a CPU graph, an async memset on the
 * kernels' stream on a device graph. */
static dt_status fill(const dt_graph *g, void *p, int v, size_t bytes) {
    if (g->on_cuda) return dt_cuda_memset(g->stream, p, v, bytes);
    memset(p, v, bytes);
    return DT_OK;
}

/* ---- poisoning (dt_graph_opts.poison) ---------------------------------------------------- */

static int overlaps(const dt_tensor *a, const dt_tensor *b) {
    if (!a->data || !b->data) return 0;
    const char *p = a->data, *q = b->data;
    return p < q + dt_tensor_nbytes(b) && q < p + dt_tensor_nbytes(a);
}

/* Fills t with 0xff bytes (NaN as f32 and bf16) unless it shares memory with a tensor the op
 * reads: an in-place op legitimately reads what it overwrites. */
static dt_status poison(const dt_graph *g, const dt_op_ctx *c, const dt_tensor *t, int bwd) {
    if (!t->data) return DT_OK;
    if (overlaps(t, &c->out) && t != &c->out) return DT_OK;
    if (bwd && overlaps(t, &c->gout)) return DT_OK;
    for (int j = 0; j < c->node->n_in; j++) {
        if (overlaps(t, &c->in[j])) return DT_OK;
        if (bwd && &c->gin[j] != t && c->gin_beta[j] != 0.0f && overlaps(t, &c->gin[j]))
            return DT_OK;
    }
    return fill(g, t->data, 0xff, dt_tensor_nbytes(t));
}

static dt_status poison_entry(const dt_graph *g, dt_entry *e) {
    dt_op_ctx *c = &e->ctx;
    if (c->node->op->flags & DT_OPF_ALIAS) return DT_OK; /* views write nothing */
    if (e->phase != DT_PH_BWD) return poison(g, c, &c->out, 0);
    dt_status st = DT_OK;
    for (int j = 0; j < c->node->n_in && st == DT_OK; j++)
        if (c->gin[j].data && c->gin_beta[j] == 0.0f) st = poison(g, c, &c->gin[j], 1);
    return st;
}

static dt_status run_entry(dt_graph *g, dt_entry *e) {
    dt_op_ctx *c = &e->ctx;
    const dt_op_def *op = c->node->op;
    dt_status st;
    if (e->phase != DT_PH_BWD) {
        if (g->poison && (st = poison_entry(g, e)) != DT_OK) return st;
        if (!g->on_cuda) return op->forward(c);
        if ((st = op->cuda_forward(c, g->stream)) != DT_OK) return st;
        void *dst;
        const void *src;
        if (e->phase == DT_PH_FWD && dt_graph_device_check_slot(g, e, &dst, &src))
            st = dt_device_copy_async(g->device, dst, src, sizeof(int64_t), DT_COPY_D2D, g->stream);
        return st;
    }
    for (int k = 0; k < e->n_zero; k++)
        if ((st = fill(g, e->zero[k].ptr, 0, e->zero[k].bytes)) != DT_OK) return st;
    for (int j = 0; j < c->node->n_in; j++) {
        if (!e->param_first[j]) continue;
        /* First writer of a parameter gradient: overwrite, or add when accumulating. */
        if (g->accumulate) {
            c->gin_beta[j] = 1.0f;
        } else if (op->flags & DT_OPF_ACCUM_ONLY) {
            if ((st = fill(g, c->gin[j].data, 0, dt_tensor_nbytes(&c->gin[j]))) != DT_OK) return st;
            c->gin_beta[j] = 1.0f;
        } else {
            c->gin_beta[j] = 0.0f;
        }
    }
    if (g->poison && (st = poison_entry(g, e)) != DT_OK) return st;
    return g->on_cuda ? op->cuda_backward(c, g->stream) : op->backward(c);
}

static dt_status run_range(dt_graph *g, int from, int to) {
    for (int k = from; k < to; k++) {
        dt_entry *e = &g->entries[k];
        dt_status s;
        if (g->on_entry && (s = g->on_entry(g->on_entry_ud, k, 0)) != DT_OK) return s;
        if ((s = run_entry(g, e)) != DT_OK) return s;
        if (g->on_entry && (s = g->on_entry(g->on_entry_ud, k, 1)) != DT_OK) return s;
        if (g->on_ready && e->ready_count)
            g->on_ready(g->on_ready_ud, g->ready + e->ready_first, e->ready_count);
    }
    return DT_OK;
}

dt_status dt_graph_forward(dt_graph *g, int training) {
    if (!g || !g->compiled)
        return dt_error_set(DT_ERR_STATE, "forward: graph is not compiled%s",
                            g && g->measured ? " (only measured: measure_only)" : "");
    g->run.training = training != 0;
    dt_status st; /* the counter the kernels read: recorded as a copy from the pinned slot */
    if (g->run.step_dev &&
        (st = dt_device_copy_async(g->device, g->step_dev, g->step_pin, sizeof(uint64_t),
                                   DT_COPY_H2D, g->stream)) != DT_OK)
        return st;
    return run_range(g, 0, g->n_fwd);
}

dt_status dt_graph_backward(dt_graph *g) {
    if (!g || !g->compiled)
        return dt_error_set(DT_ERR_STATE, "backward: graph is not compiled%s",
                            g && g->measured ? " (only measured: measure_only)" : "");
    if (g->no_backward)
        return dt_error_set(DT_ERR_STATE, "backward: graph was compiled with no_backward");
    dt_status st;
    if (!g->on_cuda)
        g->loss_grad[0] = g->loss_scale;
    else if ((st = dt_device_copy_async(g->device, g->loss_grad, g->loss_scale_pin, sizeof(float),
                                        DT_COPY_H2D, g->stream)) != DT_OK)
        return st;
    if (!g->accumulate)
        for (int k = 0; k < g->n_unused; k++) {
            const dt_tensor *t = &g->grad[g->unused[k]];
            if ((st = fill(g, t->data, 0, dt_tensor_nbytes(t))) != DT_OK) return st;
        }
    /* Unused parameters' gradients are final (zero) before backward starts. */
    if (g->on_ready)
        for (int k = 0; k < g->n_unused; k++) {
            int pi = g->nodes[g->unused[k]].param;
            g->on_ready(g->on_ready_ud, &pi, 1);
        }
    return run_range(g, g->n_fwd, g->n_entries);
}

int dt_graph_entry_count(const dt_graph *g, int *n_forward) {
    int ok = g && g->compiled;
    if (n_forward) *n_forward = ok ? g->n_fwd : 0;
    return ok ? g->n_entries : 0;
}

/* The parameters entry k reads (through views) whose flags match `want` under `mask`. */
static int entry_params(const dt_graph *g, int k, int *params, unsigned mask, unsigned want) {
    if (!g || !g->compiled || k < 0 || k >= g->n_entries) return 0;
    const dt_node *nd = &g->nodes[g->entries[k].node];
    int n = 0;
    for (int j = 0; j < nd->n_in && n < DT_GRAPH_ENTRY_PARAMS; j++) {
        const dt_node *r = &g->nodes[nd->in[j]];
        while (r->op && (r->op->flags & DT_OPF_ALIAS)) r = &g->nodes[r->in[0]]; /* views */
        if (r->kind != DT_NODE_PARAM || r->param < 0) continue;
        if ((g->params[r->param].flags & mask) != want) continue;
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= params[i] == r->param;
        if (!dup) params[n++] = r->param;
    }
    return n;
}

int dt_graph_entry_params(const dt_graph *g, int k, int *params) {
    return entry_params(g, k, params, DT_PARAM_FROZEN | DT_PARAM_STATE, 0);
}

int dt_graph_entry_frozen(const dt_graph *g, int k, int *params) {
    return entry_params(g, k, params, DT_PARAM_FROZEN, DT_PARAM_FROZEN);
}

const char *dt_graph_entry_op(const dt_graph *g, int k, int *phase) {
    if (!g || !g->compiled || k < 0 || k >= g->n_entries) return NULL;
    const dt_entry *e = &g->entries[k];
    if (phase) *phase = e->phase;
    const dt_op_def *op = g->nodes[e->node].op;
    return op ? op->name : "leaf";
}

const dt_tensor *dt_graph_entry_row_ids(const dt_graph *g, int k) {
    if (!g || !g->compiled || g->on_cuda || k < 0 || k >= g->n_entries) return NULL;
    const dt_entry *e = &g->entries[k];
    const dt_node *nd = &g->nodes[e->node];
    if (!nd->op || !(nd->op->flags & DT_OPF_ROWS_IN1) || nd->n_in < 2) return NULL;
    const dt_node *r = &g->nodes[nd->in[0]];
    while (r->op && (r->op->flags & DT_OPF_ALIAS)) r = &g->nodes[r->in[0]]; /* views */
    return r->kind == DT_NODE_INPUT ? &e->ctx.in[0] : NULL;
}

void dt_graph_on_entry(dt_graph *g, dt_graph_entry_fn fn, void *ud) {
    if (!g) return;
    g->on_entry = fn;
    g->on_entry_ud = ud;
}
