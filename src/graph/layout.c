/* Layout choice at compile time (see DT_LAYOUT_* in op.h).
 *
 * Why: oneDNN's fast convolutions work on channel-blocked activations (nChw16c). With plain
 * NCHW values every convolution reordered its input, its output and, in backward, both
 * gradients: at ResNet-18 (CIFAR stem, batch 64) 156 reorders per step, ~77 of ~700 ms, all of
 * it pure memory traffic. Keeping the values between convolutions blocked (batchnorm, ReLU, the
 * residual add and the pools read and write that layout too) removes them.
 *
 * Block width: oneDNN's convolutions block 16 channels where the CPU has AVX-512 (nChw16c) and
 * 8 on AVX2 (nChw8c); values blocked any other way would cost a reorder into each convolution
 * and out again (measured on AMD Zen 3 with 16-channel values: ResNet-18 step 14% slower than
 * plain NCHW), so a graph uses the CPU's width for all its blocked values.
 *
 * Rule: a value is blocked when it is an op's 4-D f32 output with C a multiple of the block, its
 * producer can write it blocked, every consumer can read it in that input slot, and it is
 * neither kept nor the loss (user-visible values stay plain). Ops whose slots are tied
 * (batchnorm: x, residual and output share one layout) then demote the whole group to plain if
 * any member is plain, until nothing changes. Demotion only ever turns blocked into plain, so
 * this ends after at most n rounds. */
#include <dnnl.h>
#include "graph/graph_impl.h"

/* dnnl_get_effective_cpu_isa honours ONEDNN_MAX_CPU_ISA, so an AVX-512 machine told to run
 * oneDNN as AVX2 gets 8-channel values too. */
int dt_graph_layout_native_block(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return 16;
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) return 8;
    return 0;
}

static unsigned slots(const dt_graph *g, const dt_node *n) {
    return n->op && n->op->layouts ? n->op->layouts(g, n) : 0u;
}

static int candidate(const dt_graph *g, const dt_node *n, int block) {
    return n->kind == DT_NODE_OP && !(n->op->flags & DT_OPF_ALIAS) && n->t.dtype == DT_F32 &&
           n->t.ndim == 4 && n->t.shape[1] % block == 0 && !g->keep[n->id] && n->id != g->loss &&
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

void dt_graph_choose_layouts(dt_graph *g, int block) {
    int blocked = block == 16 ? DT_LAYOUT_C16 : block == 8 ? DT_LAYOUT_C8 : DT_LAYOUT_PLAIN;
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].layout = blocked != DT_LAYOUT_PLAIN && candidate(g, &g->nodes[i], block)
                                 ? blocked
                                 : DT_LAYOUT_PLAIN;
    if (blocked == DT_LAYOUT_PLAIN) return;
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
