/* Layout choice at compile time (see DT_LAYOUT_* in op.h).
 *
 * Why: oneDNN's fast convolutions work on channel-blocked activations (nChw16c). With plain
 * NCHW values every convolution reordered its input, its output and, in backward, both
 * gradients: at ResNet-18 (CIFAR stem, batch 64) 156 reorders per step, ~77 of ~700 ms, all of
 * it pure memory traffic. Keeping the values between convolutions blocked (batchnorm, ReLU, the
 * residual add and the pools read and write that layout too) removes them.
 *
 * Rule: a value is C16 when it is an op's 4-D f32 output with C % 16 == 0, its producer can
 * write C16, every consumer can read it in that input slot, and it is neither kept nor the loss
 * (user-visible values stay plain). Ops whose slots are tied (batchnorm: x, residual and output
 * share one layout) then demote the whole group to plain if any member is plain, until nothing
 * changes. Demotion only ever turns C16 into plain, so this ends after at most n rounds. */
#include <dnnl.h>
#include "graph/graph_impl.h"

/* oneDNN's convolutions use 16-channel blocks where the CPU has AVX-512; on AVX2-only CPUs they
 * use nChw8c, so nChw16c values would cost a reorder into each convolution and out of it again
 * (measured on AMD Zen 3: ResNet-18 step 14% slower than plain NCHW). There, values stay plain. */
int dt_graph_layout_c16_native(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

static unsigned slots(const dt_graph *g, const dt_node *n) {
    return n->op && n->op->layouts ? n->op->layouts(g, n) : 0u;
}

static int candidate(const dt_graph *g, const dt_node *n) {
    return n->kind == DT_NODE_OP && !(n->op->flags & DT_OPF_ALIAS) && n->t.dtype == DT_F32 &&
           n->t.ndim == 4 && n->t.shape[1] % 16 == 0 && !g->keep[n->id] && n->id != g->loss &&
           (slots(g, n) & DT_LAY_OUT);
}

/* Demotes every member of tied node n's group if one member is plain; returns 1 on a change. */
static int untie(dt_graph *g, dt_node *n) {
    unsigned m = slots(g, n);
    if (!(m & DT_LAY_TIED)) return 0;
    int plain = (m & DT_LAY_OUT) && n->layout == DT_LAYOUT_PLAIN;
    for (int k = 0; k < n->n_in; k++)
        if ((m & DT_LAY_IN(k)) && g->nodes[n->in[k]].layout == DT_LAYOUT_PLAIN) plain = 1;
    if (!plain) return 0;
    int changed = 0;
    if ((m & DT_LAY_OUT) && n->layout != DT_LAYOUT_PLAIN) n->layout = DT_LAYOUT_PLAIN, changed = 1;
    for (int k = 0; k < n->n_in; k++) {
        dt_node *in = &g->nodes[n->in[k]];
        if ((m & DT_LAY_IN(k)) && in->layout != DT_LAYOUT_PLAIN)
            in->layout = DT_LAYOUT_PLAIN, changed = 1;
    }
    return changed;
}

void dt_graph_choose_layouts(dt_graph *g, int plain_only) {
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].layout =
            !plain_only && candidate(g, &g->nodes[i]) ? DT_LAYOUT_C16 : DT_LAYOUT_PLAIN;
    if (plain_only) return;
    for (int j = 0; j < g->n_nodes; j++) {
        const dt_node *n = &g->nodes[j];
        if (n->kind != DT_NODE_OP) continue;
        unsigned m = slots(g, n);
        for (int k = 0; k < n->n_in; k++)
            if (!(m & DT_LAY_IN(k))) g->nodes[n->in[k]].layout = DT_LAYOUT_PLAIN;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int j = 0; j < g->n_nodes; j++)
            if (g->nodes[j].kind == DT_NODE_OP) changed |= untie(g, &g->nodes[j]);
    }
}
