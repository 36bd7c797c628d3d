/* Liveness sweep over an abstract training graph (see plan_impl.h): the same schedule and
 * buffer lifetimes as the graph compiler (src/graph/compile.c), summed instead of packed. */
#include <stdlib.h>
#include <string.h>
#include "config/plan_impl.h"

#define ALIGN 64
#define PH_FWD 0
#define PH_BWD 1
#define PH_RECOMP 2

int dt_ps_add(ps_graph *g, int64_t out, int64_t aux, int64_t ws_f, int64_t ws_b, unsigned flags,
              int n_in, int a, int b, int c) {
    if (g->failed) return -1;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        ps_op *o = realloc(g->ops, (size_t)cap * sizeof *o);
        if (!o) {
            g->failed = 1;
            return -1;
        }
        g->ops = o, g->cap = cap;
    }
    ps_op *o = &g->ops[g->n];
    *o = (ps_op){.out = out,
                 .aux = aux,
                 .ws_f = ws_f,
                 .ws_b = ws_b,
                 .flags = flags,
                 .n_in = n_in,
                 .in = {a, b, c},
                 .seg = g->seg};
    return g->n++;
}

void dt_ps_seg_begin(ps_graph *g, int on) {
    g->seg = on ? g->n_segs++ : -1;
}
void dt_ps_seg_end(ps_graph *g) {
    g->seg = -1;
}

void dt_ps_free(ps_graph *g) {
    free(g->ops);
    memset(g, 0, sizeof *g);
}

static int64_t align_up(int64_t x) {
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

typedef struct sweep {
    const ps_graph *g;
    int *root, *rg, *recomp;
    int64_t *delta; /* live-bytes change at each schedule position */
    int n_pos;
} sweep;

/* A buffer of `bytes` live over schedule positions [first, last]. */
static void live(sweep *s, int64_t bytes, int first, int last) {
    if (bytes <= 0 || first < 0) return;
    s->delta[first] += align_up(bytes);
    if (last + 1 < s->n_pos) s->delta[last + 1] -= align_up(bytes);
}

/* Lifetime of a buffer: first and last position it is touched at. */
typedef struct life {
    int first, last;
} life;

static void touch(life *l, int pos) {
    if (l->first < 0 || pos < l->first) l->first = pos;
    if (pos > l->last) l->last = pos;
}

dt_status dt_ps_run(const ps_graph *g, ps_result *r) {
    int n = g->n;
    r->peak = r->saved = 0;
    if (g->failed) return dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
    if (n == 0) return DT_OK;
    /* Positions: forward entries, then at most one recompute and one backward entry per op. */
    int max_pos = 3 * n + 1;
    sweep s = {.g = g, .n_pos = max_pos};
    s.root = calloc((size_t)n, sizeof(int));
    s.rg = calloc((size_t)n, sizeof(int));
    s.recomp = calloc((size_t)n, sizeof(int));
    s.delta = calloc((size_t)max_pos + 1, sizeof(int64_t));
    /* Per op: value (instance 0, 1), aux (0, 1), gradient lifetimes. */
    life *lv = malloc((size_t)n * 5 * sizeof(life));
    int *seen = calloc((size_t)g->n_segs + 1, sizeof(int));
    if (!s.root || !s.rg || !s.recomp || !s.delta || !lv || !seen) {
        free(s.root), free(s.rg), free(s.recomp), free(s.delta), free(lv), free(seen);
        return dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
    }
    for (int i = 0; i < 5 * n; i++) lv[i] = (life){-1, -1};
#define VAL(i, k) lv[5 * (i) + (k)]
#define AUX(i, k) lv[5 * (i) + 2 + (k)]
#define GRAD(i) lv[5 * (i) + 4]
    const int loss = n - 1;
    /* Roots through aliases, and which values depend on a trainable parameter. */
    for (int i = 0; i < n; i++) {
        const ps_op *o = &g->ops[i];
        s.root[i] = (o->flags & PS_ALIAS) ? s.root[o->in[0]] : i;
        for (int j = 0; j < o->n_in; j++)
            if (o->in[j] == PS_TRAIN || (o->in[j] >= 0 && s.rg[o->in[j]])) s.rg[i] = 1;
    }
    /* Recomputed: in a segment, not an alias, not the loss, every consumer in the same segment. */
    for (int i = 0; i < n; i++)
        s.recomp[i] = g->ops[i].seg >= 0 && !(g->ops[i].flags & PS_ALIAS) && i != loss;
    for (int c = 0; c < n; c++) {
        const ps_op *o = &g->ops[c];
        if (o->flags & PS_ALIAS) continue;
        for (int j = 0; j < o->n_in; j++) {
            if (o->in[j] < 0) continue;
            int rt = s.root[o->in[j]];
            if (s.recomp[rt] && g->ops[rt].seg != o->seg) s.recomp[rt] = 0;
        }
    }
    if (s.recomp[s.root[loss]]) s.recomp[s.root[loss]] = 0;
    int pos = 0;
    /* Forward. */
    for (int i = 0; i < n; i++) {
        const ps_op *o = &g->ops[i];
        if (o->flags & PS_ALIAS) continue;
        live(&s, o->ws_f, pos, pos);
        touch(&VAL(i, 0), pos);
        if (o->aux) touch(&AUX(i, 0), pos);
        for (int j = 0; j < o->n_in; j++)
            if (o->in[j] >= 0) touch(&VAL(s.root[o->in[j]], 0), pos);
        pos++;
    }
    int n_fwd = pos;
    /* Backward, with each segment's recomputation just before backward first reaches it. */
    for (int i = n - 1; i >= 0; i--) {
        const ps_op *o = &g->ops[i];
        if (!s.rg[i] || (o->flags & PS_ALIAS)) continue;
        if (o->seg >= 0 && !seen[o->seg]) {
            seen[o->seg] = 1;
            for (int k = 0; k < n; k++) {
                const ps_op *q = &g->ops[k];
                if (q->seg != o->seg || !s.recomp[k]) continue;
                live(&s, q->ws_f, pos, pos);
                touch(&VAL(k, 1), pos);
                if (q->aux) touch(&AUX(k, 1), pos);
                for (int j = 0; j < q->n_in; j++) {
                    if (q->in[j] < 0) continue;
                    int rt = s.root[q->in[j]];
                    touch(&VAL(rt, s.recomp[rt] ? 1 : 0), pos);
                }
                pos++;
            }
        }
        live(&s, o->ws_b, pos, pos);
        int inst = s.recomp[i] ? 1 : 0;
        if (i != s.root[loss]) touch(&GRAD(i), pos);
        if (o->aux) touch(&AUX(i, inst), pos);
        if (o->flags & PS_BWD_OUT) touch(&VAL(i, inst), pos);
        for (int j = 0; j < o->n_in; j++) {
            int x = o->in[j];
            if (x < 0) continue;
            int rt = s.root[x];
            if (o->flags & PS_BWD_IN(j)) touch(&VAL(rt, s.recomp[rt] ? 1 : 0), pos);
            if (s.rg[x] && rt != s.root[loss]) touch(&GRAD(rt), pos);
        }
        pos++;
    }
    /* The loss stays readable after the step. */
    VAL(s.root[loss], 0).last = pos - 1;
    for (int i = 0; i < n; i++) {
        const ps_op *o = &g->ops[i];
        if (o->flags & PS_ALIAS) continue;
        live(&s, o->out, VAL(i, 0).first, VAL(i, 0).last);
        live(&s, o->aux, AUX(i, 0).first, AUX(i, 0).last);
        if (s.recomp[i]) {
            live(&s, o->out, VAL(i, 1).first, VAL(i, 1).last);
            live(&s, o->aux, AUX(i, 1).first, AUX(i, 1).last);
        }
        live(&s, o->out, GRAD(i).first, GRAD(i).last);
    }
    int64_t cur = 0;
    for (int p = 0; p < pos; p++) {
        cur += s.delta[p];
        if (cur > r->peak) r->peak = cur;
        /* Kept for backward: what is live at the last forward entry (the loss). */
        if (p == n_fwd - 1) r->saved = cur;
    }
    free(s.root), free(s.rg), free(s.recomp), free(s.delta), free(lv), free(seen);
#undef VAL
#undef AUX
#undef GRAD
    return DT_OK;
}
