/* Activation memory of a Llama training step, op by op as dt_llama_build (src/nn/llama.c)
 * builds it, with the sizes the ops choose (N = B*T tokens, f32 = 4 bytes):
 *
 *   op           output        saved for backward (besides its output when BWD_OUT)
 *   embedding    [N, D]        ids
 *   rmsnorm      [N, D]        its input x, rstd [N]
 *   linear       [N, out]      its input x (not for a frozen bf16 weight: the bf16 GEMM path
 *                              computes only dx), scratch: bf16 copies of x / dy
 *   transpose    copy          nothing          rope: nothing (positions are implicit)
 *   attention    [B,Hq,T,Dh]   q, k, v, the output, lse [B*Hq*T]; scratch tiles per thread
 *   add          sum           nothing          silu: input     mul: both inputs
 *   cross entropy loss         logits [N, V], lse [N]
 *
 * The sweep (plan_sim.c) turns this into the planner's peak: for a large vocabulary that is the
 * cross-entropy backward (every saved activation + logits and their gradient, 2 x N*V f32);
 * otherwise the last layer's MLP backward. LoRA (not yet in the engine's builder; modelled as
 * PEFT computes it) adds, per targeted linear: dropout(x) (when dropout > 0), x A^T [N, r],
 * (x A^T) B^T [N, out], the scaling and the sum with the frozen base linear. LoRA's modules to
 * save (lora.modules_to_save) train their f32 weights as full finetuning does. */
#include <stdio.h>
#include "config/plan_impl.h"
#include "nn/lora_impl.h"

#define F32 4
#define ATT_BQ 64 /* attention tile sizes (src/ops/attention.c) */
#define ATT_BK 64
#define NORM_BLOCKS 32 /* rmsnorm parameter-gradient partials (src/ops/norm.c) */

const char *const dt_plan_lora_target_names[PLAN_T_N] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

typedef struct lctx {
    ps_graph *g;
    const plan_opts *o;
    int64_t N;      /* tokens */
    int train_w;    /* PS_TRAIN for full training, PS_LEAF (frozen) under LoRA */
    unsigned saved; /* LoRA modules to save as the builder realises them (dt_lora_saved) */
} lctx;

/* The weight of module `bit` (DT_LORA_SAVE_*): trainable in full training and, under LoRA, when
 * it is a module to save. */
static int weight_of(const lctx *c, unsigned bit) {
    return (c->saved & bit) ? PS_TRAIN : c->train_w;
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static int64_t al64(int64_t x) {
    return (x + 63) / 64 * 64;
}

static int rmsnorm(lctx *c, int x, int64_t D, unsigned bit) {
    int64_t N = c->N;
    return dt_ps_add(c->g, N * D * F32, N * F32, 0, min64(N, NORM_BLOCKS) * 2 * D * F32,
                     PS_BWD_IN(0) | PS_BWD_IN(1), 2, x, weight_of(c, bit), 0);
}

/* x [N, in] -> [N, out] through a weight that is trainable (full training, or a LoRA module to
 * save: `bit`), or frozen with a LoRA adapter when `target`, or frozen alone. */
static int linear_w(lctx *c, int x, int64_t in, int64_t out, int target, unsigned bit) {
    ps_graph *g = c->g;
    int64_t N = c->N;
    if (weight_of(c, bit) == PS_TRAIN)
        return dt_ps_add(g, N * out * F32, 0, 0, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2, x, PS_TRAIN, 0);
    int base = c->o->frozen_bf16 ? dt_ps_add(g, N * out * F32, 0, al64(N * in * 2),
                                             al64(N * out * 2), PS_BWD_IN(1), 2, x, PS_LEAF, 0)
                                 : dt_ps_add(g, N * out * F32, 0, 0, 0, PS_BWD_IN(0) | PS_BWD_IN(1),
                                             2, x, PS_LEAF, 0);
    if (!target) return base;
    int64_t r = c->o->lora_rank;
    int d = x;
    if (c->o->lora_dropout > 0) d = dt_ps_add(g, N * in * F32, 0, 0, 0, 0, 1, x, 0, 0);
    int a = dt_ps_add(g, N * r * F32, 0, 0, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2, d, PS_TRAIN, 0);
    int b = dt_ps_add(g, N * out * F32, 0, 0, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2, a, PS_TRAIN, 0);
    int s = dt_ps_add(g, N * out * F32, 0, 0, 0, 0, 1, b, 0, 0);
    return dt_ps_add(g, N * out * F32, 0, 0, 0, 0, 2, base, s, 0);
}

static int linear(lctx *c, int x, int64_t in, int64_t out, int target) {
    return linear_w(c, x, in, out, target, 0);
}

static int target(const lctx *c, int t) {
    return c->o->lora && (c->o->lora_targets >> t & 1u);
}

/* [B, T, H*Dh] -> [B, H, T, Dh]: a reshape (view) and a transposing copy. */
static int heads(lctx *c, int x, int64_t width) {
    int v = dt_ps_add(c->g, 0, 0, 0, 0, PS_ALIAS, 1, x, 0, 0);
    return dt_ps_add(c->g, c->N * width * F32, 0, 0, 0, 0, 1, v, 0, 0);
}

static int layer(lctx *c, const dt_llama_config *m, int x) {
    ps_graph *g = c->g;
    int64_t N = c->N, D = m->hidden_size, Dh = m->head_dim,
            Q = (int64_t)m->num_attention_heads * Dh, K = (int64_t)m->num_key_value_heads * Dh,
            F = m->intermediate_size;
    int64_t rows = c->o->batch * m->num_attention_heads * c->o->seq_len, nt = c->o->threads;
    int h = rmsnorm(c, x, D, DT_LORA_SAVE_INPUT_NORM);
    int q = heads(c, linear(c, h, D, Q, target(c, PLAN_T_Q)), Q);
    q = dt_ps_add(g, N * Q * F32, 0, 0, 0, 0, 1, q, 0, 0); /* rope */
    int k = heads(c, linear(c, h, D, K, target(c, PLAN_T_K)), K);
    k = dt_ps_add(g, N * K * F32, 0, 0, 0, 0, 1, k, 0, 0);
    int v = heads(c, linear(c, h, D, K, target(c, PLAN_T_V)), K);
    int64_t fwd_tile = Dh * ATT_BK + ATT_BQ * ATT_BK + 2 * ATT_BQ;
    int64_t bwd_tile = 2 * Dh * ATT_BK + 3 * ATT_BQ * ATT_BK + 2 * ATT_BK * Dh;
    int a = dt_ps_add(g, N * Q * F32, rows * F32, nt * fwd_tile * F32, (rows + nt * bwd_tile) * F32,
                      PS_BWD_IN(0) | PS_BWD_IN(1) | PS_BWD_IN(2) | PS_BWD_OUT, 3, q, k, v);
    a = dt_ps_add(g, N * Q * F32, 0, 0, 0, 0, 1, a, 0, 0); /* transpose back to [B, T, Hq, Dh] */
    a = dt_ps_add(g, 0, 0, 0, 0, PS_ALIAS, 1, a, 0, 0);    /* reshape [B, T, Hq*Dh] */
    x = dt_ps_add(g, N * D * F32, 0, 0, 0, 0, 2, x, linear(c, a, Q, D, target(c, PLAN_T_O)), 0);
    h = rmsnorm(c, x, D, DT_LORA_SAVE_POST_NORM);
    /* dt_mul(silu(gate(h)), up(h)): GCC evaluates the arguments right to left. */
    int up = linear(c, h, D, F, target(c, PLAN_T_UP));
    int gate = linear(c, h, D, F, target(c, PLAN_T_GATE));
    int s = dt_ps_add(g, N * F * F32, 0, 0, 0, PS_BWD_IN(0), 1, gate, 0, 0);
    int mm = dt_ps_add(g, N * F * F32, 0, 0, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2, s, up, 0);
    return dt_ps_add(g, N * D * F32, 0, 0, 0, 0, 2, x, linear(c, mm, F, D, target(c, PLAN_T_DOWN)),
                     0);
}

dt_status dt_plan_llama_activations(const dt_llama_config *m, const plan_opts *o, ps_result *r) {
    ps_graph g = {.seg = -1};
    lctx c = {.g = &g, .o = o, .N = o->batch * o->seq_len, .train_w = o->lora ? PS_LEAF : PS_TRAIN};
    if (o->lora) {
        dt_llama_config lm = *m;
        lm.lora = (dt_lora_config){.rank = o->lora_rank, .modules_to_save = o->lora_modules};
        c.saved = dt_lora_saved(&lm);
    }
    int64_t N = c.N, D = m->hidden_size, V = m->vocab_size;
    int x = dt_ps_add(&g, N * D * F32, 0, 0, 0, PS_BWD_IN(0), 2, PS_LEAF,
                      weight_of(&c, DT_LORA_SAVE_EMBED), 0);
    for (int l = 0; l < m->num_hidden_layers; l++) {
        dt_ps_seg_begin(&g, o->recompute);
        x = layer(&c, m, x);
        dt_ps_seg_end(&g);
    }
    x = rmsnorm(&c, x, D, DT_LORA_SAVE_FINAL_NORM);
    /* lm_head (the embedding when tied: dt_lora_saved sets both bits) */
    int logits = linear_w(&c, x, D, V, 0, DT_LORA_SAVE_LM_HEAD);
    logits = dt_ps_add(&g, 0, 0, 0, 0, PS_ALIAS, 1, logits, 0, 0); /* [N, V] */
    dt_ps_add(&g, F32, al64(N * F32) + 8, N * F32, 0, PS_BWD_IN(0) | PS_BWD_IN(1), 2, logits,
              PS_LEAF, 0);
    dt_status st = dt_ps_run(&g, r);
    r->state = 0;
    dt_ps_free(&g);
    return st;
}

int64_t dt_plan_lora_params(const dt_llama_config *m, int rank, unsigned targets) {
    int64_t D = m->hidden_size, Q = (int64_t)m->num_attention_heads * m->head_dim,
            K = (int64_t)m->num_key_value_heads * m->head_dim, F = m->intermediate_size;
    const int64_t io[PLAN_T_N][2] = {{D, Q}, {D, K}, {D, K}, {Q, D}, {D, F}, {D, F}, {F, D}};
    int64_t n = 0;
    for (int t = 0; t < PLAN_T_N; t++)
        if (targets >> t & 1u) n += (int64_t)rank * (io[t][0] + io[t][1]);
    return n * m->num_hidden_layers;
}

int64_t dt_plan_lora_saved_params(const dt_llama_config *m, unsigned modules) {
    dt_llama_config lm = *m;
    lm.lora = (dt_lora_config){.rank = 1, .modules_to_save = modules};
    return dt_lora_saved_param_count(&lm);
}
