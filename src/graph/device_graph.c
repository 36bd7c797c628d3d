/* Device graphs: the parts of compile, free and host access that differ when a graph runs on a
 * CUDA device (dt_graph_opts.device). The planner and the schedule are the CPU's; only where
 * the memory lives and which kernels run change. */
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "graph/graph_impl.h"

dt_device dt_graph_device(const dt_graph *g) {
    return g ? g->device : (dt_device){DT_DEVICE_CPU, 0};
}

dt_stream *dt_graph_stream(dt_graph *g) {
    return g ? g->stream : NULL;
}

dt_status dt_graph_device_read_checks(dt_graph *g) {
    if (!g->on_cuda || !g->n_checks) return DT_OK;
    enum { MAX_READ = 64 };
    int64_t pos[MAX_READ];
    const int n = g->n_checks < MAX_READ ? g->n_checks : MAX_READ;
    dt_status st = dt_graph_download(g, pos, g->checks, (size_t)n * sizeof(int64_t));
    for (int e = 0; st == DT_OK && e < g->n_entries; e++) {
        const dt_entry *en = &g->entries[e];
        if (!en->check || en->check > n || pos[en->check - 1] < 0) continue;
        st = g->nodes[en->node].op->cuda_check(g, &en->ctx, pos[en->check - 1]);
    }
    return st;
}

int dt_graph_device_check_slot(dt_graph *g, const dt_entry *e, void **dst, const void **src) {
    if (!g->on_cuda || !e->check) return 0;
    *dst = g->checks + (e->check - 1);
    *src = (const char *)e->ctx.aux + e->ctx.node->op->cuda_check_at(g, e->ctx.node);
    return 1;
}

dt_status dt_graph_device_check(dt_graph *g, const int *live, const int *gneed) {
    for (int i = 0; i < g->n_nodes; i++) {
        const dt_node *nd = &g->nodes[i];
        if (nd->kind != DT_NODE_OP || !live[i] || (nd->op->flags & DT_OPF_ALIAS)) continue;
        if (!nd->op->cuda_forward || (gneed[i] && !nd->op->cuda_backward))
            return dt_error_set(DT_ERR_STATE, "graph: %s has no CUDA %skernel yet (node %d)",
                                nd->op->name, nd->op->cuda_forward ? "backward " : "", i);
    }
    return DT_OK;
}

void *dt_graph_device_const(dt_graph *g, const void *host, size_t bytes) {
    if (g->measuring || bytes == 0) return NULL;
    if (g->n_dconst == g->cap_dconst) {
        int c = g->cap_dconst ? 2 * g->cap_dconst : 16;
        void **p = realloc(g->dconst, (size_t)c * sizeof *p);
        if (!p) {
            dt_error_set(DT_ERR_NOMEM, "graph: out of memory for the device constants");
            return NULL;
        }
        g->dconst = p, g->cap_dconst = c;
    }
    void *d = NULL;
    if (dt_device_alloc(g->device, bytes, &d) != DT_OK) return NULL;
    if (dt_device_copy(g->device, d, host, bytes, DT_COPY_H2D) != DT_OK) {
        dt_device_free(g->device, d);
        return NULL;
    }
    g->dconst[g->n_dconst++] = d;
    return d;
}

dt_status dt_graph_cuda_dnn(dt_graph *g, struct dt_cuda_dnn **out) {
    *out = NULL;
    if (!g->dnn) {
        dt_status st = dt_cuda_dnn_create(g->device, &g->dnn);
        if (st != DT_OK) return st;
    }
    *out = g->dnn;
    return DT_OK;
}

/* One device buffer of bytes (at least 1 byte, so that it is never NULL), zeroed on the graph's
 * stream (a non-blocking stream: cudaMemset on the legacy stream would not be ordered with it). */
static dt_status dalloc(dt_graph *g, size_t bytes, void **p) {
    dt_status st = dt_device_alloc(g->device, bytes ? bytes : 1, p);
    if (st == DT_OK) st = dt_cuda_memset(g->stream, *p, 0, bytes ? bytes : 1);
    return st;
}

dt_status dt_graph_device_alloc(dt_graph *g, size_t flat_cap) {
    dt_status st = dt_stream_create(g->device, &g->stream);
    if (st == DT_OK) st = dt_cuda_gemm_create(g->device, 0, &g->run.gemm);
    if (st == DT_OK) st = dalloc(g, g->arena_bytes, &g->arena);
    if (st == DT_OK) st = dalloc(g, flat_cap * sizeof(float), (void **)&g->flat_param);
    if (st == DT_OK && !g->no_backward)
        st = dalloc(g, flat_cap * sizeof(float), (void **)&g->flat_grad);
    if (st == DT_OK) st = dalloc(g, g->n_state * sizeof(float), (void **)&g->flat_state);
    if (st == DT_OK) st = dalloc(g, g->frozen_bytes, &g->flat_frozen);
    if (st == DT_OK) st = dalloc(g, g->input_bytes, &g->input_mem);
    if (st == DT_OK) st = dalloc(g, sizeof(float), (void **)&g->loss_grad);
    /* a slot per forward entry whose op checks its input on the device, -1 (0xff bytes) until
     * a forward says otherwise */
    g->n_checks = 0;
    for (int e = 0; e < g->n_entries; e++) {
        dt_entry *en = &g->entries[e];
        const dt_op_def *op = g->nodes[en->node].op;
        en->check = en->phase == DT_PH_FWD && op && op->cuda_check_at ? ++g->n_checks : 0;
    }
    if (st == DT_OK) st = dalloc(g, (size_t)g->n_checks * sizeof(int64_t), (void **)&g->checks);
    if (st == DT_OK && g->n_checks)
        st = dt_cuda_memset(g->stream, g->checks, 0xff, (size_t)g->n_checks * sizeof(int64_t));
    if (st == DT_OK)
        st = dt_host_alloc_pinned(g->device, sizeof(float), (void **)&g->loss_scale_pin);
    if (st == DT_OK) *g->loss_scale_pin = g->loss_scale;
    if (st == DT_OK) st = dt_host_alloc_pinned(g->device, sizeof(uint64_t), (void **)&g->step_pin);
    if (st == DT_OK) *g->step_pin = g->run.step;
    if (st == DT_OK) st = dalloc(g, sizeof(uint64_t), (void **)&g->step_dev);
    if (st == DT_OK) st = dt_stream_sync(g->stream);
    g->run.device = g->device;
    return st;
}

void dt_graph_device_free(dt_graph *g) {
    void *bufs[] = {g->arena,     g->flat_param, g->flat_grad, g->flat_state, g->flat_frozen,
                    g->input_mem, g->loss_grad,  g->checks,    g->step_dev};
    if (g->stream) dt_stream_sync(g->stream);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) dt_device_free(g->device, bufs[i]);
    for (int i = 0; i < g->n_dconst; i++) dt_device_free(g->device, g->dconst[i]);
    dt_host_free_pinned(g->device, g->loss_scale_pin);
    g->loss_scale_pin = NULL;
    dt_host_free_pinned(g->device, g->step_pin);
    g->step_pin = NULL, g->step_dev = NULL, g->run.step_dev = NULL;
    free(g->dconst);
    if (g->run.gemm) dt_cuda_gemm_destroy(g->run.gemm);
    dt_cuda_dnn_destroy(g->dnn); /* after dt_graph_free destroyed the ops' plans made on it */
    g->dnn = NULL;
    if (g->stream) dt_stream_destroy(g->stream);
    g->arena = g->flat_frozen = g->input_mem = g->dconst = NULL;
    g->flat_param = g->flat_grad = g->flat_state = g->loss_grad = NULL;
    g->run.gemm = NULL;
    g->stream = NULL;
}

/* The copies of dt_graph_upload/download: after the work issued so far (the copy must not
 * overtake a kernel that writes or reads the same memory). */
static dt_status graph_copy(dt_graph *g, void *dst, const void *src, size_t bytes, dt_copy_kind k) {
    const char *what = k == DT_COPY_H2D ? "graph upload" : "graph download";
    if (!g || !g->compiled) return dt_error_set(DT_ERR_STATE, "%s: not compiled", what);
    if (bytes && (!dst || !src))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL pointer for %zu bytes", what, bytes);
    if (!g->on_cuda) {
        if (bytes) memmove(dst, src, bytes);
        return DT_OK;
    }
    dt_status st = dt_stream_sync(g->stream);
    return st == DT_OK ? dt_device_copy(g->device, dst, src, bytes, k) : st;
}

dt_status dt_graph_upload(dt_graph *g, void *dst, const void *src, size_t bytes) {
    return graph_copy(g, dst, src, bytes, DT_COPY_H2D);
}

dt_status dt_graph_download(dt_graph *g, void *dst, const void *src, size_t bytes) {
    return graph_copy(g, dst, src, bytes, DT_COPY_D2H);
}
