/* Compile: derive the backward schedule from the loss, plan memory by liveness, allocate once.
 *
 * The schedule is a list of entries: forward of every live op in creation order (a topological
 * order, since a node's inputs exist before it), then backward in reverse order for the ops whose
 * gradient is needed. A recompute segment's dropped activations are recomputed (RECOMP entries)
 * just before backward first reaches the segment.
 *
 * Buffers: value of each op root (alias ops such as reshape share their root's memory) in up to
 * two instances (0: forward; 1: recomputed), gradient of each root, each node's aux (saved for
 * backward, also per instance), and scratch per entry. Each gets a lifetime [first, last]
 * schedule position; the planner packs them into one arena (greedy, largest first, lowest
 * offset that does not collide with a buffer whose lifetime overlaps). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "dtrain/runtime.h"
#include "graph/graph_impl.h"

#define ALIGN 64
#define FOREVER 0x7fffffff

typedef struct buf {
    size_t size, off;
    int start, end;
} buf;

typedef struct plan {
    dt_graph *g;
    int n;
    int *root, *live, *anc, *gneed, *recomp;
    /* buffer ids (-1 none) */
    int *val0, *val1, *gradb, *aux0, *aux1;
    buf *bufs;
    int n_bufs, cap_bufs;
    int *ws; /* per entry */
} plan;

static size_t align_up(size_t x) {
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

static int buf_new(plan *p, size_t size) {
    if (size == 0) return -1;
    if (p->n_bufs == p->cap_bufs) {
        int c = p->cap_bufs ? p->cap_bufs * 2 : 256;
        buf *b = realloc(p->bufs, (size_t)c * sizeof *b);
        if (!b) return -2;
        p->bufs = b, p->cap_bufs = c;
    }
    buf *b = &p->bufs[p->n_bufs];
    b->size = align_up(size), b->off = 0, b->start = FOREVER, b->end = -1;
    return p->n_bufs++;
}

static void touch(plan *p, int b, int pos) {
    if (b < 0) return;
    if (pos < p->bufs[b].start) p->bufs[b].start = pos;
    if (pos > p->bufs[b].end) p->bufs[b].end = pos;
}

static int is_alias(const dt_node *n) {
    return n->op && (n->op->flags & DT_OPF_ALIAS);
}

/* Buffer holding x's value when read in phase ph (-1: a leaf, persistent). */
static int val_buf(plan *p, int x, int ph) {
    int r = p->root[x];
    if (p->g->nodes[r].kind != DT_NODE_OP) return -1;
    return (p->recomp[r] && ph != DT_PH_FWD) ? p->val1[r] : p->val0[r];
}

static int cmp_size_desc(const void *a, const void *b, void *ctx) {
    const buf *bs = ctx;
    size_t x = bs[*(const int *)a].size, y = bs[*(const int *)b].size;
    return x < y ? 1 : x > y ? -1 : (*(const int *)a - *(const int *)b);
}

/* Greedy best-offset packing: largest first, each at the lowest offset (0 or right after a
 * buffer) that collides with no placed buffer whose lifetime overlaps its own. The placed
 * buffers are kept as one array in offset order, so that offset is one sequential sweep over
 * them, and a graph of thousands of buffers (Llama-3.1-8B) packs in tens of milliseconds.
 * Returns the arena size. */
static size_t pack(buf *bs, int n, int no_reuse) {
    int *order = malloc((size_t)n * sizeof *order);
    buf *placed = malloc((size_t)n * sizeof *placed);
    size_t total = 0;
    if (!order || !placed) {
        free(order), free(placed);
        return (size_t)-1;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_size_desc, bs);
    int n_placed = 0;
    for (int k = 0; k < n; k++) {
        buf *b = &bs[order[k]];
        size_t off = 0;
        if (no_reuse) {
            off = total;
        } else {
            /* every offset below `off` collides with a buffer already swept */
            for (const buf *o = placed, *e = placed + n_placed; o < e; o++) {
                if (o->end < b->start || o->start > b->end) continue;
                if (o->off >= off + b->size) break;
                if (o->off + o->size > off) off = o->off + o->size;
            }
        }
        b->off = off;
        if (off + b->size > total) total = off + b->size;
        int lo = 0, hi = n_placed; /* insert after the placed buffers at or below off */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (placed[mid].off <= off)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, (size_t)(n_placed - lo) * sizeof *placed);
        placed[lo] = *b;
        n_placed++;
    }
    free(order), free(placed);
    return total;
}

/* Planned bytes live at schedule position pos (n_fwd - 1: what forward leaves for backward). */
static size_t live_bytes_at(const plan *p, int pos) {
    size_t sum = 0;
    for (int b = 0; b < p->n_bufs; b++)
        if (p->bufs[b].start <= pos && pos <= p->bufs[b].end) sum += p->bufs[b].size;
    return sum;
}

static void *alloc_touched(size_t bytes) {
    void *p = aligned_alloc(ALIGN, align_up(bytes ? bytes : 1));
    if (p) memset(p, 0, align_up(bytes ? bytes : 1)); /* pay first-touch faults now */
    return p;
}

/* The flat gradient buffer: page-aligned and a whole number of pages, so that dt_ddp can move
 * its pages into memory the other ranks of the host can map (dt_comm_share). */
static void *alloc_pages(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE),
           sz = bytes ? (bytes + page - 1) / page * page : page;
    void *p = aligned_alloc(page, sz);
    if (p) memset(p, 0, sz);
    return p;
}

/* The frozen buffer: an anonymous mapping (zero pages until written), so that the slots of
 * parameters that dt_graph_param_external points elsewhere never get pages, or give them back. */
static void *alloc_frozen(dt_graph *g, int untouched) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE),
           sz = g->frozen_bytes ? (g->frozen_bytes + page - 1) / page * page : page;
    void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    g->frozen_map_bytes = sz;
    if (!untouched) memset(p, 0, sz); /* pay first-touch faults now */
    return p;
}

static void plan_free(plan *p) {
    free(p->root), free(p->live), free(p->anc), free(p->gneed), free(p->recomp);
    free(p->val0), free(p->val1), free(p->gradb), free(p->aux0), free(p->aux1);
    free(p->bufs), free(p->ws);
}

/* Marks which roots are recomputed: in a segment, not kept, and every live consumer (looking
 * through aliases) in the same segment. */
static void mark_recompute(plan *p) {
    dt_graph *g = p->g;
    int n = p->n;
    for (int i = 0; i < n; i++) {
        dt_node *nd = &g->nodes[i];
        p->recomp[i] = nd->kind == DT_NODE_OP && !is_alias(nd) && nd->segment >= 0 && p->live[i];
    }
    for (int i = 0; i < n; i++) {
        int r = p->root[i];
        if (!p->recomp[r]) continue;
        if (g->keep[i] || i == g->loss) p->recomp[r] = 0;
    }
    for (int c = 0; c < n; c++) {
        dt_node *nd = &g->nodes[c];
        if (!p->live[c] || nd->kind != DT_NODE_OP || is_alias(nd)) continue;
        for (int j = 0; j < nd->n_in; j++) {
            int r = p->root[nd->in[j]];
            if (p->recomp[r] && nd->segment != g->nodes[r].segment) p->recomp[r] = 0;
        }
    }
}

/* Of the roots mark_recompute chose, recomputes only those backward reads: through its own
 * backward (DT_OPF_BWD_OUT, or an aux saved in forward), a consumer's backward (DT_OPF_BWD_IN)
 * or a recomputed consumer that is itself needed. The rest would be computed for nothing: the
 * last linear of a LoRA decoder layer (down_proj: its output only feeds the residual add, whose
 * backward reads no value) is a third of the MLP's recompute. Those are not recomputed and
 * their forward value is dropped after its last forward reader. Creation order is topological,
 * so walking it backwards sees every consumer of a node before the node. */
static dt_status prune_recompute(plan *p) {
    dt_graph *g = p->g;
    int n = p->n;
    unsigned char *need = calloc((size_t)n + 1, 1);
    if (!need) return dt_error_set(DT_ERR_NOMEM, "compile: out of memory");
    for (int i = n - 1; i >= 0; i--) {
        dt_node *nd = &g->nodes[i];
        if (!p->live[i] || nd->kind != DT_NODE_OP || is_alias(nd)) continue;
        if (p->gneed[i]) { /* i's backward runs */
            unsigned f = nd->op->flags;
            if (p->recomp[i] && (nd->aux_bytes || (f & DT_OPF_BWD_OUT))) need[i] = 1;
            for (int j = 0; j < nd->n_in; j++)
                if (f & DT_OPF_BWD_IN(j)) need[p->root[nd->in[j]]] = 1;
        }
        if (p->recomp[i] && need[i])
            for (int j = 0; j < nd->n_in; j++) need[p->root[nd->in[j]]] = 1;
    }
    for (int i = 0; i < n; i++)
        if (p->recomp[i] && !need[i]) p->recomp[i] = 0;
    free(need);
    return DT_OK;
}

static dt_status analyse(plan *p, int loss) {
    dt_graph *g = p->g;
    int n = p->n;
    for (int i = 0; i < n; i++) {
        dt_node *nd = &g->nodes[i];
        p->root[i] = is_alias(nd) ? p->root[nd->in[0]] : i;
        if (nd->kind == DT_NODE_OP) {
            nd->requires_grad = 0;
            for (int j = 0; j < nd->n_in; j++)
                if (g->nodes[nd->in[j]].requires_grad) nd->requires_grad = 1;
        }
    }
    p->live[loss] = p->anc[loss] = 1;
    for (int i = 0; i < n; i++)
        if (g->keep[i]) p->live[i] = 1;
    for (int i = n - 1; i >= 0; i--) {
        dt_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            if (p->live[i]) p->live[nd->in[j]] = 1;
            if (p->anc[i]) p->anc[nd->in[j]] = 1;
        }
    }
    for (int i = 0; i < n; i++)
        p->gneed[i] = !g->no_backward && p->anc[i] && g->nodes[i].requires_grad;
    mark_recompute(p);
    return prune_recompute(p);
}

/* Appends an entry; returns its position. */
static int entry_add(dt_graph *g, int *cap, int node, int phase) {
    if (g->n_entries == *cap) {
        int c = *cap ? *cap * 2 : 256;
        dt_entry *e = realloc(g->entries, (size_t)c * sizeof *e);
        if (!e) return -1;
        g->entries = e, *cap = c;
    }
    dt_entry *e = &g->entries[g->n_entries];
    memset(e, 0, sizeof *e);
    e->node = node, e->phase = phase;
    return g->n_entries++;
}

static dt_status schedule(plan *p) {
    dt_graph *g = p->g;
    int cap = 0, n = p->n;
    g->n_entries = 0;
    for (int i = 0; i < n; i++) {
        dt_node *nd = &g->nodes[i];
        if (p->live[i] && nd->kind == DT_NODE_OP && !is_alias(nd))
            if (entry_add(g, &cap, i, DT_PH_FWD) < 0) goto oom;
    }
    g->n_fwd = g->n_entries;
    if (g->no_backward) return DT_OK;
    unsigned char *seen = calloc((size_t)g->n_segs + 1, 1);
    if (!seen) goto oom;
    for (int i = n - 1; i >= 0; i--) {
        dt_node *nd = &g->nodes[i];
        if (!p->gneed[i] || nd->kind != DT_NODE_OP || is_alias(nd)) continue;
        int s = nd->segment;
        if (s >= 0 && !seen[s]) {
            seen[s] = 1;
            for (int j = g->segs[s][0] + 1; j <= g->segs[s][1]; j++)
                if (p->recomp[j] && entry_add(g, &cap, j, DT_PH_RECOMP) < 0) {
                    free(seen);
                    goto oom;
                }
        }
        if (entry_add(g, &cap, i, DT_PH_BWD) < 0) {
            free(seen);
            goto oom;
        }
    }
    free(seen);
    return DT_OK;
oom:
    return dt_error_set(DT_ERR_NOMEM, "compile: out of memory for the schedule");
}

static dt_status make_buffers(plan *p) {
    dt_graph *g = p->g;
    for (int i = 0; i < p->n; i++) {
        dt_node *nd = &g->nodes[i];
        p->val0[i] = p->val1[i] = p->gradb[i] = p->aux0[i] = p->aux1[i] = -1;
        if (nd->kind != DT_NODE_OP || is_alias(nd) || !p->live[i]) continue;
        size_t bytes = dt_tensor_nbytes(&nd->t);
        if ((p->val0[i] = buf_new(p, bytes)) < -1) goto oom;
        if ((p->aux0[i] = buf_new(p, nd->aux_bytes)) < -1) goto oom;
        if (p->recomp[i]) {
            if ((p->val1[i] = buf_new(p, bytes)) < -1) goto oom;
            if ((p->aux1[i] = buf_new(p, nd->aux_bytes)) < -1) goto oom;
        }
        if (p->gneed[i] && i != p->root[g->loss])
            if ((p->gradb[i] = buf_new(p, bytes)) < -1) goto oom;
    }
    for (int e = 0; e < g->n_entries; e++) {
        dt_entry *en = &g->entries[e];
        dt_node *nd = &g->nodes[en->node];
        size_t ws = en->phase == DT_PH_BWD ? nd->ws_bwd : nd->ws_fwd;
        if ((p->ws[e] = buf_new(p, ws)) < -1) goto oom;
    }
    return DT_OK;
oom:
    return dt_error_set(DT_ERR_NOMEM, "compile: out of memory for the buffer table");
}

/* Lifetimes from the reads and writes of each entry. */
static void lifetimes(plan *p) {
    dt_graph *g = p->g;
    for (int e = 0; e < g->n_entries; e++) {
        dt_entry *en = &g->entries[e];
        dt_node *nd = &g->nodes[en->node];
        int i = en->node;
        touch(p, p->ws[e], e);
        if (en->phase != DT_PH_BWD) {
            int inst1 = en->phase == DT_PH_RECOMP;
            touch(p, inst1 ? p->val1[i] : p->val0[i], e);
            touch(p, inst1 ? p->aux1[i] : p->aux0[i], e);
            for (int j = 0; j < nd->n_in; j++) touch(p, val_buf(p, nd->in[j], en->phase), e);
        } else {
            unsigned f = nd->op->flags;
            touch(p, p->gradb[i], e);
            touch(p, p->recomp[i] ? p->aux1[i] : p->aux0[i], e);
            if (f & DT_OPF_BWD_OUT) touch(p, val_buf(p, i, DT_PH_BWD), e);
            for (int j = 0; j < nd->n_in; j++) {
                if (f & DT_OPF_BWD_IN(j)) touch(p, val_buf(p, nd->in[j], DT_PH_BWD), e);
                if (p->gneed[nd->in[j]]) touch(p, p->gradb[p->root[nd->in[j]]], e);
            }
        }
    }
    /* Kept values (and the loss) stay readable after the step. */
    for (int i = 0; i < p->n; i++)
        if ((g->keep[i] || i == g->loss) && p->val0[p->root[i]] >= 0)
            p->bufs[p->val0[p->root[i]]].end = FOREVER;
    /* A buffer nobody touched (value of a live node that is never scheduled) gets a point life. */
    for (int b = 0; b < p->n_bufs; b++)
        if (p->bufs[b].start == FOREVER) p->bufs[b].start = p->bufs[b].end = 0;
}

static void *bptr(plan *p, int b) {
    return b >= 0 ? (char *)p->g->arena + p->bufs[b].off : NULL;
}

/* Pointer of x's value in phase ph. */
static void *val_ptr(plan *p, int x, int ph) {
    dt_graph *g = p->g;
    dt_node *r = &g->nodes[p->root[x]];
    if (r->kind == DT_NODE_INPUT) return (char *)g->input_mem + r->ip[0];
    if (r->kind == DT_NODE_PARAM) {
        const dt_param_info *pi = &g->params[r->param];
        if (pi->flags & DT_PARAM_STATE) return g->flat_state + pi->offset;
        if (pi->flags & DT_PARAM_FROZEN) return (char *)g->flat_frozen + pi->offset;
        return g->flat_param + pi->offset;
    }
    return bptr(p, val_buf(p, x, ph));
}

static void *grad_ptr(plan *p, int x) {
    dt_graph *g = p->g;
    int r = p->root[x];
    dt_node *rn = &g->nodes[r];
    /* A trainable parameter always has its slot in the flat gradient, even if unused. */
    if (x == r && rn->kind == DT_NODE_PARAM && !g->no_backward &&
        !(g->params[rn->param].flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)))
        return g->flat_grad + g->params[rn->param].offset;
    if (!p->gneed[x]) return NULL;
    if (rn->kind == DT_NODE_INPUT) return (char *)g->input_mem + rn->ip[1];
    if (rn->kind == DT_NODE_PARAM) return g->flat_grad + g->params[rn->param].offset;
    if (r == p->root[g->loss]) return g->loss_grad;
    return bptr(p, p->gradb[r]);
}

static void view(dt_tensor *t, const dt_node *nd, void *data) {
    *t = nd->t;
    t->data = data;
}

static void bind(plan *p) {
    dt_graph *g = p->g;
    unsigned char *written = calloc((size_t)p->n, 1);
    for (int i = 0; i < p->n; i++) {
        view(&g->val[i], &g->nodes[i],
             p->live[i] || g->nodes[i].kind != DT_NODE_OP ? val_ptr(p, i, DT_PH_FWD) : NULL);
        view(&g->grad[i], &g->nodes[i], grad_ptr(p, i));
    }
    for (int e = 0; e < g->n_entries; e++) {
        dt_entry *en = &g->entries[e];
        dt_node *nd = &g->nodes[en->node];
        dt_op_ctx *c = &en->ctx;
        int ph = en->phase, i = en->node;
        c->node = nd;
        c->run = &g->run;
        c->recompute = ph == DT_PH_RECOMP;
        c->ws = bptr(p, p->ws[e]);
        c->aux = bptr(p, (ph == DT_PH_RECOMP || (ph == DT_PH_BWD && p->recomp[i])) ? p->aux1[i]
                                                                                   : p->aux0[i]);
        view(&c->out, nd, val_ptr(p, i, ph));
        for (int j = 0; j < nd->n_in; j++) {
            dt_node *in = &g->nodes[nd->in[j]];
            view(&c->in[j], in, val_ptr(p, nd->in[j], ph));
            c->in_layout[j] = in->layout;
            view(&c->gin[j], in, NULL);
        }
        if (ph != DT_PH_BWD) continue;
        view(&c->gout, nd, grad_ptr(p, i));
        for (int j = 0; j < nd->n_in; j++) {
            int x = nd->in[j];
            if (!p->gneed[x]) continue;
            dt_node *in = &g->nodes[x];
            int r = p->root[x];
            view(&c->gin[j], in, grad_ptr(p, x));
            c->gin_beta[j] = written && written[r] ? 1.0f : 0.0f;
            if (written && !written[r] && g->nodes[r].kind == DT_NODE_PARAM) en->param_first[j] = 1;
            if (written) written[r] = 1;
            if ((nd->op->flags & DT_OPF_ACCUM_ONLY) && c->gin_beta[j] == 0.0f &&
                !en->param_first[j]) {
                en->zero[en->n_zero].ptr = c->gin[j].data;
                en->zero[en->n_zero++].bytes = dt_tensor_nbytes(&in->t);
                c->gin_beta[j] = 1.0f;
            }
        }
    }
    for (int k = 0; written && k < g->n_params; k++) {
        const dt_param_info *pi = &g->params[k];
        if (!(pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) && !written[pi->id])
            g->unused[g->n_unused++] = pi->id;
    }
    free(written);
    /* Gradient-ready events: after which backward entry each parameter's gradient is final
     * (its last writer), so communication can start on it while backward goes on. */
    int *last = malloc(((size_t)g->n_params + 1) * sizeof *last);
    for (int k = 0; last && k < g->n_params; k++) last[k] = -1;
    for (int e = g->n_fwd; last && e < g->n_entries; e++) {
        dt_entry *en = &g->entries[e];
        for (int j = 0; j < en->ctx.node->n_in; j++) {
            dt_node *r = &g->nodes[p->root[en->ctx.node->in[j]]];
            if (en->ctx.gin[j].data && r->kind == DT_NODE_PARAM) last[r->param] = e;
        }
    }
    g->n_ready = 0;
    for (int e = g->n_fwd; last && e < g->n_entries; e++) {
        g->entries[e].ready_first = g->n_ready;
        for (int k = 0; k < g->n_params; k++)
            if (last[k] == e) g->ready[g->n_ready++] = k;
        g->entries[e].ready_count = g->n_ready - g->entries[e].ready_first;
    }
    free(last);
}

/* dt_param_info.sparse_row: a parameter (trainable or frozen, not state) whose every use is as
 * the table (in[1]) of a row lookup (DT_OPF_ROWS_IN1) gets the row length of its [R, ...] shape;
 * any other use, even through a view, makes it dense. (size_t)-1 marks "dense" while scanning. */
static void mark_sparse_rows(dt_graph *g) {
    for (int k = 0; k < g->n_params; k++) g->params[k].sparse_row = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const dt_node *nd = &g->nodes[i];
        if (nd->kind != DT_NODE_OP) continue;
        for (int j = 0; j < nd->n_in; j++) {
            const dt_node *in = &g->nodes[nd->in[j]];
            if (in->kind != DT_NODE_PARAM) continue;
            dt_param_info *pi = &g->params[in->param];
            int lookup = j == 1 && (nd->op->flags & DT_OPF_ROWS_IN1) && in->t.ndim >= 1 &&
                         in->t.shape[0] > 0;
            if (!lookup)
                pi->sparse_row = (size_t)-1;
            else if (pi->sparse_row != (size_t)-1)
                pi->sparse_row = pi->numel / (size_t)in->t.shape[0];
        }
    }
    for (int k = 0; k < g->n_params; k++) {
        dt_param_info *pi = &g->params[k];
        if (pi->sparse_row == (size_t)-1 || (pi->flags & DT_PARAM_STATE)) pi->sparse_row = 0;
    }
}

dt_status dt_graph_compile(dt_graph *g, int loss, const dt_graph_opts *opts) {
    if (!g) return dt_error_set(DT_ERR_INVALID, "compile: graph is NULL");
    if (g->compiled || g->measured)
        return dt_error_set(DT_ERR_STATE, "compile: graph is already %s",
                            g->measured ? "measured (measure_only): build it again to run it"
                                        : "compiled");
    dt_node *ln = dt_graph_node_(g, loss);
    if (!ln)
        return dt_error_set(DT_ERR_INVALID, "compile: loss is node %d, not in the graph", loss);
    if (dt_tensor_numel(&ln->t) != 1 || ln->t.dtype != DT_F32)
        return dt_error_set(DT_ERR_SHAPE, "compile: loss '%s' must be one f32 value, has %lld %s",
                            dt_graph_name(g, loss), (long long)dt_tensor_numel(&ln->t),
                            dt_dtype_name(ln->t.dtype));
    dt_graph_opts o = opts ? *opts : (dt_graph_opts){0};
    if (!o.measure_only) dt_runtime_tune_malloc();
    if (getenv("DT_PLAN_NO_REUSE")) o.no_reuse = 1; /* debugging aid: rule the planner out */
    const char *pz = getenv("DT_GRAPH_POISON");
    if (pz && pz[0] && strcmp(pz, "0")) o.poison = 1;
    /* DT_GRAPH_PLAIN: 1 plain, 0 blocked even where the CPU has no AVX2 (tests), unset: by the
     * CPU. DT_GRAPH_BLOCK=8|16: that block width where the options leave it to the CPU (tests,
     * A/B runs). */
    const char *pl = getenv("DT_GRAPH_PLAIN"), *pb = getenv("DT_GRAPH_BLOCK");
    if (pl && pl[0] && strcmp(pl, "0")) o.plain_layout = 1;
    if (!o.layout_block && pb && (!strcmp(pb, "8") || !strcmp(pb, "16"))) o.layout_block = atoi(pb);
    if (o.layout_block != 0 && o.layout_block != 8 && o.layout_block != 16)
        return dt_error_set(DT_ERR_INVALID, "compile: layout_block %d is not 0, 8 or 16",
                            o.layout_block);
    int block = o.layout_block ? o.layout_block : dt_graph_layout_native_block();
    if (!block && pl && pl[0] && !strcmp(pl, "0")) block = 16;
    if (o.plain_layout) block = 0;
    g->device = o.device;
    g->on_cuda = o.device.kind == DT_DEVICE_CUDA;
    if (g->on_cuda) {
        if (o.bf16_gemm)
            return dt_error_set(DT_ERR_STATE, "compile: bf16_gemm has no CUDA kernels yet (f32 "
                                              "only on a CUDA device)");
        block = 0; /* the CUDA kernels read plain layouts only */
    } else if (o.device.kind != DT_DEVICE_CPU) {
        return dt_error_set(DT_ERR_INVALID, "compile: unknown device kind %d", (int)o.device.kind);
    }
    g->loss = loss;
    g->poison = o.poison;
    g->no_backward = o.no_backward;
    g->bf16_gemm = o.bf16_gemm != 0;
    int n = g->n_nodes;
    plan p = {.g = g, .n = n};
    dt_status st = DT_ERR_NOMEM;
#define NEWI(f) (p.f = calloc((size_t)n + 1, sizeof(int)))
    if (!NEWI(root) || !NEWI(live) || !NEWI(anc) || !NEWI(gneed) || !NEWI(recomp) || !NEWI(val0) ||
        !NEWI(val1) || !NEWI(gradb) || !NEWI(aux0) || !NEWI(aux1)) {
        dt_error_set(DT_ERR_NOMEM, "compile: out of memory");
        goto fail;
    }
#undef NEWI
    dt_graph_choose_layouts(g, block);
    g->measuring = o.measure_only != 0;
    for (int i = 0; i < n; i++) {
        dt_node *nd = &g->nodes[i];
        dt_status (*prep)(dt_graph *, dt_node *) = nd->kind != DT_NODE_OP ? NULL
                                                   : g->on_cuda           ? nd->op->cuda_prepare
                                                                          : nd->op->prepare;
        if (prep && (st = prep(g, nd)) != DT_OK) goto fail;
    }
    if ((st = analyse(&p, loss)) != DT_OK) goto fail;
    if (g->on_cuda && (st = dt_graph_device_check(g, p.live, p.gneed)) != DT_OK) goto fail;
    if ((st = schedule(&p)) != DT_OK) goto fail;
    p.ws = calloc((size_t)g->n_entries + 1, sizeof(int));
    if (!p.ws) {
        st = dt_error_set(DT_ERR_NOMEM, "compile: out of memory");
        goto fail;
    }
    if ((st = make_buffers(&p)) != DT_OK) goto fail;
    lifetimes(&p);
    g->unplanned_bytes = 0;
    for (int b = 0; b < p.n_bufs; b++) g->unplanned_bytes += p.bufs[b].size;
    g->arena_bytes = pack(p.bufs, p.n_bufs, o.no_reuse);
    st = dt_error_set(DT_ERR_NOMEM, "compile: out of memory allocating %zu bytes of activations",
                      g->arena_bytes);
    if (g->arena_bytes == (size_t)-1) goto fail;
    g->saved_bytes = live_bytes_at(&p, g->n_fwd - 1);
    g->measuring = 0;
    if (o.measure_only) { /* the figures are known: allocate and bind nothing */
        dt_error_clear();
        g->measured = 1;
        plan_free(&p);
        return DT_OK;
    }
    g->flat_cap = o.flat_capacity > g->n_flat ? o.flat_capacity : g->n_flat;
    if (g->on_cuda) {
        dt_status ds = dt_graph_device_alloc(g, g->flat_cap);
        if (ds != DT_OK) {
            st = ds;
            goto fail;
        }
    } else {
        g->arena = alloc_touched(g->arena_bytes);
        g->flat_param = alloc_touched(g->flat_cap * sizeof(float));
        /* Forward-only graphs (inference, evaluation) need no gradient memory at all. */
        g->flat_grad = g->no_backward ? NULL : alloc_pages(g->flat_cap * sizeof(float));
        g->flat_state = alloc_touched(g->n_state * sizeof(float));
        g->flat_frozen = alloc_frozen(g, o.frozen_untouched);
        g->input_mem = alloc_touched(g->input_bytes);
        g->loss_grad = alloc_touched(sizeof(float));
    }
    g->val = calloc((size_t)n + 1, sizeof(dt_tensor));
    g->grad = calloc((size_t)n + 1, sizeof(dt_tensor));
    g->unused = calloc((size_t)g->n_params + 1, sizeof(int));
    g->ready = calloc((size_t)g->n_params + 1, sizeof(int));
    if (!g->unused || !g->ready || !g->arena || !g->flat_param ||
        (!g->flat_grad && !g->no_backward) || !g->flat_state || !g->flat_frozen || !g->input_mem ||
        !g->loss_grad || !g->val || !g->grad)
        goto fail;
    dt_error_clear();
    bind(&p);
    mark_sparse_rows(g);
    g->compiled = 1;
    plan_free(&p);
    return DT_OK;
fail:
    g->measuring = 0;
    plan_free(&p);
    return st;
}
