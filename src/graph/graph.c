/* Graph building: leaves, op nodes, recompute segments, accessors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "graph/graph_impl.h"

dt_graph *dt_graph_init(void) {
    dt_graph *g = calloc(1, sizeof *g);
    if (!g) {
        dt_error_set(DT_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    g->loss = -1;
    g->loss_scale = 1.0f;
    return g;
}

void dt_graph_free(dt_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) {
        dt_node *n = &g->nodes[i];
        if (n->op && n->op->destroy) n->op->destroy(n);
        free(n->name);
    }
    free(g->nodes), free(g->params), free(g->segs), free(g->keep);
    if (g->on_cuda) {
        dt_graph_device_free(g);
    } else {
        free(g->flat_param), free(g->flat_grad), free(g->flat_state);
        if (g->flat_frozen) munmap(g->flat_frozen, g->frozen_map_bytes);
        free(g->input_mem), free(g->arena), free(g->loss_grad);
    }
    free(g->val), free(g->grad), free(g->entries), free(g->unused), free(g->ready);
    free(g);
}

dt_node *dt_graph_node_(const dt_graph *g, int id) {
    return (g && id >= 0 && id < g->n_nodes) ? &g->nodes[id] : NULL;
}
dt_node *dt_graph_node(dt_graph *g, int id) {
    return dt_graph_node_(g, id);
}
int dt_graph_measuring(const dt_graph *g) {
    return g && g->measuring;
}
int dt_graph_bf16_gemm(const dt_graph *g) {
    return g && g->bf16_gemm;
}

int dt_ids_bad(dt_graph *g, const char *op, int n, const int *ids) {
    if (!g) {
        dt_error_set(DT_ERR_INVALID, "%s: graph is NULL", op);
        return 1;
    }
    if (g->compiled || g->measured) {
        dt_error_set(DT_ERR_STATE, "%s: graph is already compiled", op);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0) return 1; /* an earlier builder failed: keep its message */
        if (ids[i] >= g->n_nodes) {
            dt_error_set(DT_ERR_INVALID, "%s: input %d is node %d, but the graph has %d nodes", op,
                         i, ids[i], g->n_nodes);
            return 1;
        }
    }
    return 0;
}

int dt_shape_error(const char *op, const char *what, int n, const dt_tensor *const *ts) {
    char msg[512], s[96];
    size_t o = (size_t)snprintf(msg, sizeof msg, "%s: %s (", op, what);
    for (int i = 0; i < n && o < sizeof msg; i++) {
        dt_shape_str(s, sizeof s, ts[i]->ndim, ts[i]->shape);
        o += (size_t)snprintf(msg + o, sizeof msg - o, "%s%s %s", i ? ", " : "", s,
                              dt_dtype_name(ts[i]->dtype));
    }
    dt_error_set(DT_ERR_SHAPE, "%s)", msg);
    return -1;
}

int dt_x_f32_check(const char *op, const dt_tensor *x) {
    if (x->dtype == DT_F32) return 0;
    char sh[64];
    dt_error_set(DT_ERR_DTYPE, "%s: x must be f32, got %s (x %s)", op, dt_dtype_name(x->dtype),
                 dt_shape_str(sh, sizeof sh, x->ndim, x->shape));
    return -1;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
    *p = q, *cap = c;
    return 0;
}

static int node_new(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape_in,
                    const char *who) {
    /* Builders often pass a pointer into an existing node's shape, which the realloc below may
     * move: copy it first. */
    int64_t shape[DT_MAX_DIMS] = {0};
    if (ndim > DT_MAX_DIMS || ndim < 0) {
        dt_error_set(DT_ERR_SHAPE, "%s: %d dims (at most %d)", who, ndim, DT_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < ndim; i++) shape[i] = shape_in[i];
    int cap = g->cap_nodes;
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(dt_node))) {
        dt_error_set(DT_ERR_NOMEM, "%s: out of memory", who);
        return -1;
    }
    if (g->cap_nodes != cap) {
        unsigned char *k = realloc(g->keep, (size_t)g->cap_nodes);
        if (!k) {
            dt_error_set(DT_ERR_NOMEM, "%s: out of memory", who);
            return -1;
        }
        memset(k + cap, 0, (size_t)(g->cap_nodes - cap));
        g->keep = k;
    }
    dt_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    if (dt_tensor_init(&n->t, NULL, dtype, ndim, shape) != DT_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s: %s", who, dt_last_error());
        dt_error_set(DT_ERR_SHAPE, "%s", m);
        return -1;
    }
    n->id = g->n_nodes;
    n->segment = -1;
    n->param = -1;
    return g->n_nodes++;
}

int dt_node_add(dt_graph *g, const dt_op_def *op, int n_in, const int *in, dt_dtype dtype, int ndim,
                const int64_t *shape, const int64_t *ip, int nip, const float *fp, int nfp) {
    const char *name = op ? op->name : "op";
    if (dt_ids_bad(g, name, n_in, in)) return -1;
    if (!op || n_in < 0 || n_in > DT_MAX_IN || nip < 0 || nip > DT_NIP || nfp < 0 || nfp > DT_NFP) {
        dt_error_set(DT_ERR_INVALID, "%s: bad node description (%d inputs, %d+%d params)", name,
                     n_in, nip, nfp);
        return -1;
    }
    /* Copy before node_new may move the node array these could point into. */
    int in_c[DT_MAX_IN];
    int64_t ip_c[DT_NIP];
    float fp_c[DT_NFP];
    for (int i = 0; i < n_in; i++) in_c[i] = in[i];
    for (int i = 0; i < nip; i++) ip_c[i] = ip[i];
    for (int i = 0; i < nfp; i++) fp_c[i] = fp[i];
    int id = node_new(g, dtype, ndim, shape, name);
    if (id < 0) return -1;
    dt_node *n = &g->nodes[id];
    n->op = op;
    n->kind = DT_NODE_OP;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in_c[i];
    for (int i = 0; i < nip; i++) n->ip[i] = ip_c[i];
    for (int i = 0; i < nfp; i++) n->fp[i] = fp_c[i];
    return id;
}

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

int dt_graph_input(dt_graph *g, const char *name, dt_dtype dtype, int ndim, const int64_t *shape,
                   int requires_grad) {
    if (dt_ids_bad(g, "input", 0, NULL)) return -1;
    if (requires_grad && dtype != DT_F32) {
        dt_error_set(DT_ERR_DTYPE, "input '%s': gradients need f32, not %s", name ? name : "",
                     dt_dtype_name(dtype));
        return -1;
    }
    int id = node_new(g, dtype, ndim, shape, "input");
    if (id < 0) return -1;
    dt_node *n = &g->nodes[id];
    n->kind = DT_NODE_INPUT;
    n->requires_grad = requires_grad != 0;
    n->name = strdup(name ? name : "");
    n->ip[0] = (int64_t)g->input_bytes; /* value offset in input_mem */
    g->input_bytes += align_up(dt_tensor_nbytes(&n->t), 64);
    if (requires_grad) {
        n->ip[1] = (int64_t)g->input_bytes; /* gradient offset */
        g->input_bytes += align_up(dt_tensor_nbytes(&n->t), 64);
    }
    return id;
}

int dt_graph_param(dt_graph *g, const char *name, dt_dtype dtype, int ndim, const int64_t *shape,
                   unsigned flags) {
    if (dt_ids_bad(g, "param", 0, NULL)) return -1;
    const char *nm = name ? name : "";
    if (!(flags & DT_PARAM_FROZEN) && dtype != DT_F32) {
        dt_error_set(DT_ERR_DTYPE, "param '%s': trainable parameters are f32, not %s", nm,
                     dt_dtype_name(dtype));
        return -1;
    }
    if ((flags & DT_PARAM_STATE) && dtype != DT_F32) {
        dt_error_set(DT_ERR_DTYPE, "param '%s': state buffers are f32, not %s", nm,
                     dt_dtype_name(dtype));
        return -1;
    }
    if (dt_graph_find(g, nm) >= 0) {
        dt_error_set(DT_ERR_INVALID, "param '%s': name already used", nm);
        return -1;
    }
    if (grow((void **)&g->params, &g->cap_params, g->n_params + 1, sizeof(dt_param_info))) {
        dt_error_set(DT_ERR_NOMEM, "param '%s': out of memory", nm);
        return -1;
    }
    int id = node_new(g, dtype, ndim, shape, "param");
    if (id < 0) return -1;
    dt_node *n = &g->nodes[id];
    n->kind = DT_NODE_PARAM;
    n->name = strdup(nm);
    n->param = g->n_params;
    dt_param_info *p = &g->params[g->n_params++];
    p->name = n->name;
    p->id = id;
    p->flags = flags;
    p->numel = (size_t)dt_tensor_numel(&n->t);
    if (flags & DT_PARAM_STATE) {
        p->offset = g->n_state;
        g->n_state += p->numel;
    } else if (flags & DT_PARAM_FROZEN) {
        p->offset = g->frozen_bytes;
        g->frozen_bytes += align_up(dt_tensor_nbytes(&n->t), 64);
    } else {
        p->offset = g->n_flat;
        g->n_flat += p->numel;
        n->requires_grad = 1;
    }
    return id;
}

dt_status dt_graph_recompute(dt_graph *g, int first, int last) {
    if (!g || g->compiled || g->measured)
        return dt_error_set(DT_ERR_STATE, "recompute: graph compiled or NULL");
    if (first < -1 || last <= first || last >= g->n_nodes)
        return dt_error_set(DT_ERR_INVALID, "recompute: bad segment (%d, %d] of %d nodes", first,
                            last, g->n_nodes);
    for (int i = first + 1; i <= last; i++)
        if (g->nodes[i].segment >= 0)
            return dt_error_set(DT_ERR_INVALID, "recompute: node %d is already in segment %d", i,
                                g->nodes[i].segment);
    int cap = g->n_segs;
    int(*s)[2] = realloc(g->segs, (size_t)(cap + 1) * sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "recompute: out of memory");
    g->segs = s;
    s[g->n_segs][0] = first, s[g->n_segs][1] = last;
    for (int i = first + 1; i <= last; i++)
        if (g->nodes[i].kind == DT_NODE_OP) g->nodes[i].segment = g->n_segs;
    g->n_segs++;
    return DT_OK;
}

dt_status dt_graph_keep(dt_graph *g, int id) {
    if (!g || id < 0 || id >= g->n_nodes)
        return dt_error_set(DT_ERR_INVALID, "keep: no node %d", id);
    if (g->compiled || g->measured)
        return dt_error_set(DT_ERR_STATE, "keep: graph is already compiled");
    g->keep[id] = 1;
    return DT_OK;
}

int dt_graph_find(const dt_graph *g, const char *name) {
    for (int i = 0; g && name && i < g->n_nodes; i++)
        if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0) return i;
    return -1;
}

const char *dt_graph_name(const dt_graph *g, int id) {
    dt_node *n = dt_graph_node_(g, id);
    if (!n) return NULL;
    return n->name ? n->name : (n->op ? n->op->name : "");
}

int dt_graph_node_count(const dt_graph *g) {
    return g ? g->n_nodes : 0;
}

const dt_tensor *dt_graph_shape(const dt_graph *g, int id) {
    dt_node *n = dt_graph_node_(g, id);
    return n ? &n->t : NULL;
}

const dt_tensor *dt_graph_value(dt_graph *g, int id) {
    if (!g || !g->compiled || id < 0 || id >= g->n_nodes) return NULL;
    return &g->val[id];
}

const dt_tensor *dt_graph_grad(dt_graph *g, int id) {
    if (!g || !g->compiled || id < 0 || id >= g->n_nodes) return NULL;
    return &g->grad[id];
}

float *dt_graph_flat_param(dt_graph *g, size_t *n) {
    if (n) *n = g->n_flat;
    return g->flat_param;
}
size_t dt_graph_flat_capacity(const dt_graph *g) {
    return g ? (g->flat_cap > g->n_flat ? g->flat_cap : g->n_flat) : 0;
}

float *dt_graph_flat_grad(dt_graph *g, size_t *n) {
    if (n) *n = g->n_flat;
    return g->flat_grad;
}
void *dt_graph_flat_frozen(dt_graph *g, size_t *bytes) {
    if (bytes) *bytes = g->frozen_bytes;
    return g->flat_frozen;
}
/* t's data moved from [old, old + n) to nw: a pointer into that range follows it. */
static void follow(dt_tensor *t, const char *old, size_t n, const char *nw) {
    const char *d = t->data;
    if (d && d >= old && d < old + n) t->data = (void *)(nw + (d - old));
}

dt_status dt_graph_param_external(dt_graph *g, int id, const void *data) {
    const dt_node *nd = dt_graph_node_(g, id);
    if (!g || !g->compiled)
        return dt_error_set(DT_ERR_STATE, "param external: the graph is not compiled");
    if (g->on_cuda)
        return dt_error_set(DT_ERR_STATE, "param external: not on a CUDA graph (its frozen "
                                          "buffer is device memory)");
    if (!nd || nd->kind != DT_NODE_PARAM || !(g->params[nd->param].flags & DT_PARAM_FROZEN))
        return dt_error_set(DT_ERR_INVALID, "param external: node %d is not a frozen parameter",
                            id);
    size_t es = dt_dtype_size(nd->t.dtype), n = dt_tensor_nbytes(&nd->t);
    if (!data || (es && (uintptr_t)data % es))
        return dt_error_set(DT_ERR_INVALID,
                            "param '%s': external memory %p is not aligned to its %zu-byte "
                            "elements",
                            nd->name, data, es);
    const char *old = g->val[id].data, *nw = data;
    if (n == 0 || old == nw) return DT_OK;
    /* Every binding made at compile: the values (the parameter's and its views') and each
     * entry's inputs and outputs (an alias op's output is its input's memory). */
    for (int i = 0; i < g->n_nodes; i++) follow(&g->val[i], old, n, nw);
    for (int e = 0; e < g->n_entries; e++) {
        dt_op_ctx *c = &g->entries[e].ctx;
        follow(&c->out, old, n, nw);
        for (int j = 0; j < DT_MAX_IN; j++) follow(&c->in[j], old, n, nw);
    }
    /* The slot's whole pages go back (their neighbours' bytes share only the edge pages). */
    const char *slot = (const char *)g->flat_frozen + g->params[nd->param].offset;
    if (old == slot) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE),
                  lo = ((uintptr_t)slot + page - 1) & ~(page - 1),
                  hi = ((uintptr_t)slot + n) & ~(page - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return DT_OK;
}

float *dt_graph_flat_state(dt_graph *g, size_t *n) {
    if (n) *n = g->n_state;
    return g->flat_state;
}

int dt_graph_param_count(const dt_graph *g) {
    return g ? g->n_params : 0;
}
const dt_param_info *dt_graph_param_info(const dt_graph *g, int i) {
    return (g && i >= 0 && i < g->n_params) ? &g->params[i] : NULL;
}

void dt_graph_memory(const dt_graph *g, dt_graph_mem *m) {
    memset(m, 0, sizeof *m);
    m->arena_bytes = g->arena_bytes;
    m->unplanned_bytes = g->unplanned_bytes;
    m->saved_bytes = g->saved_bytes;
    m->param_bytes = g->n_flat * sizeof(float);
    m->grad_bytes = g->no_backward ? 0 : g->n_flat * sizeof(float);
    m->frozen_bytes = g->frozen_bytes;
    m->state_bytes = g->n_state * sizeof(float);
    m->input_bytes = g->input_bytes;
}

void dt_graph_set_accumulate(dt_graph *g, int on) {
    g->accumulate = on != 0;
}
void dt_graph_on_grad_ready(dt_graph *g, dt_grad_ready_fn fn, void *ud) {
    g->on_ready = fn;
    g->on_ready_ud = ud;
}
void dt_graph_set_loss_scale(dt_graph *g, float s) {
    g->loss_scale = s;
    if (g->loss_scale_pin) *g->loss_scale_pin = s;
}
void dt_graph_set_rng(dt_graph *g, uint64_t seed, uint64_t step, int rank) {
    g->run.key = seed ^ ((uint64_t)(uint32_t)rank * 0x9E3779B97F4A7C15ull);
    g->run.step = step;
    if (g->step_pin) *g->step_pin = step;
}
dt_status dt_graph_rng_on_device(dt_graph *g, int on) {
    if (!g->on_cuda || !g->step_dev)
        return dt_error_set(DT_ERR_STATE, "rng on device: the graph is not compiled for CUDA");
    g->run.step_dev = on ? g->step_dev : NULL;
    return DT_OK;
}
void dt_graph_set_sync_batchnorm(dt_graph *g, dt_graph_allreduce_fn fn, void *ud) {
    g->run.sync_fn = fn;
    g->run.sync_ud = fn ? ud : NULL;
}
