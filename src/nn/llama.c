/* Llama decoder (Hugging Face LlamaForCausalLM): embeddings -> L x [RMSNorm -> GQA attention
 * with rotary embeddings -> residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> lm_head.
 *
 * Shapes (B batch, T sequence, D hidden, Hq/Hkv heads, Dh head dim, F intermediate, V vocab):
 *   ids [B, T] -> x [B, T, D]; q [B, T, Hq*Dh] -> [B, Hq, T, Dh]; k, v -> [B, Hkv, T, Dh];
 *   attention [B, Hq, T, Dh] -> [B, T, Hq*Dh] -> o_proj [B, T, D]; MLP D -> F -> D;
 *   logits [B, T, V]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "dtrain/rng.h"
#include "nn/lora_impl.h"

#define MAX_HEAD_DIM 1024

/* Under LoRA every base weight is frozen, matrices in bf16 (docs/lora.md), norms in f32, except the
 * modules to save (`module`: the weight's DT_LORA_SAVE_* bit, 0 for projections), which train in
 * f32 like a full finetuning's weights. */
static int frozen(const dt_llama_config *c, unsigned module) {
    return c->lora.rank > 0 && !(dt_lora_saved(c) & module);
}

static int weight(dt_graph *g, const dt_llama_config *c, const char *name, int64_t rows,
                  int64_t cols, unsigned module) {
    int fz = frozen(c, module);
    return dt_graph_param(g, name, fz ? DT_BF16 : DT_F32, 2, (int64_t[]){rows, cols},
                          fz ? DT_PARAM_FROZEN : 0);
}

static int norm_weight(dt_graph *g, const dt_llama_config *c, const char *name, int64_t d,
                       unsigned module) {
    return dt_graph_param(g, name, DT_F32, 1, (int64_t[]){d},
                          frozen(c, module) ? DT_PARAM_FROZEN : DT_PARAM_NO_DECAY);
}

/* x [.., in] -> [.., out] through base weight `prefix.weight` (+ its LoRA adapter if targeted). */
static int proj(dt_graph *g, const dt_llama_config *c, int x, const char *prefix, unsigned bit,
                int64_t out, int64_t in) {
    char n[200];
    snprintf(n, sizeof n, "%s.weight", prefix);
    int y = dt_linear(g, x, weight(g, c, n, out, in, 0), -1);
    const dt_lora_config *l = &c->lora;
    if (l->rank <= 0 || !(l->targets & bit)) return y;
    int64_t r = l->rank;
    snprintf(n, sizeof n, "%s.lora_A.weight", prefix);
    int a = dt_graph_param(g, n, DT_F32, 2, (int64_t[]){r, in}, 0);
    snprintf(n, sizeof n, "%s.lora_B.weight", prefix);
    int b = dt_graph_param(g, n, DT_F32, 2, (int64_t[]){out, r}, 0);
    int xin = l->dropout > 0 ? dt_dropout(g, x, l->dropout) : x;
    int z = dt_linear(g, dt_linear(g, xin, a, -1), b, -1);
    return dt_add(g, y, dt_scale(g, z, l->alpha / (float)l->rank));
}

unsigned dt_lora_target_bit(const char *name) {
    static const char *const names[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                        "gate_proj", "up_proj", "down_proj"};
    for (unsigned i = 0; i < 7; i++)
        if (!strcmp(name, names[i])) return 1u << i;
    return 0;
}

unsigned dt_lora_module_bits(const char *name) {
    static const struct {
        const char *name;
        unsigned bits;
    } names[] = {
        {"embed_tokens", DT_LORA_SAVE_EMBED},
        {"input_layernorm", DT_LORA_SAVE_INPUT_NORM},
        {"post_attention_layernorm", DT_LORA_SAVE_POST_NORM},
        /* PEFT: every module whose path ends with "norm" */
        {"norm", DT_LORA_SAVE_INPUT_NORM | DT_LORA_SAVE_POST_NORM | DT_LORA_SAVE_FINAL_NORM},
        {"model.norm", DT_LORA_SAVE_FINAL_NORM},
        {"lm_head", DT_LORA_SAVE_LM_HEAD},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) return names[i].bits;
    return 0;
}

unsigned dt_lora_saved(const dt_llama_config *c) {
    const unsigned emb = DT_LORA_SAVE_EMBED | DT_LORA_SAVE_LM_HEAD;
    unsigned s = c->lora.rank > 0 ? c->lora.modules_to_save : 0;
    return c->tie_word_embeddings && (s & emb) ? s | emb : s;
}

int64_t dt_lora_saved_param_count(const dt_llama_config *c) {
    unsigned s = dt_lora_saved(c);
    int64_t D = c->hidden_size, VD = (int64_t)c->vocab_size * D, L = c->num_hidden_layers;
    int64_t n = (s & DT_LORA_SAVE_EMBED) ? VD : 0;
    if ((s & DT_LORA_SAVE_LM_HEAD) && !c->tie_word_embeddings) n += VD; /* tied: the same matrix */
    if (s & DT_LORA_SAVE_INPUT_NORM) n += L * D;
    if (s & DT_LORA_SAVE_POST_NORM) n += L * D;
    if (s & DT_LORA_SAVE_FINAL_NORM) n += D;
    return n;
}

int64_t dt_lora_param_count(const dt_llama_config *c) {
    const dt_lora_config *l = &c->lora;
    if (l->rank <= 0) return 0;
    int64_t D = c->hidden_size, Q = (int64_t)c->num_attention_heads * c->head_dim,
            KV = (int64_t)c->num_key_value_heads * c->head_dim, F = c->intermediate_size;
    int64_t io[7][2] = {{D, Q}, {D, KV}, {D, KV}, {Q, D}, {D, F}, {D, F}, {F, D}};
    int64_t per = 0;
    for (int i = 0; i < 7; i++)
        if (l->targets & (1u << i)) per += (int64_t)l->rank * (io[i][0] + io[i][1]);
    return per * c->num_hidden_layers + dt_lora_saved_param_count(c);
}

/* [B, T, H*Dh] -> [B, H, T, Dh] */
static int heads(dt_graph *g, int x, int64_t B, int64_t T, int64_t H, int64_t Dh) {
    return dt_transpose(g, dt_reshape(g, x, 4, (int64_t[]){B, T, H, Dh}), 1, 2);
}

/* One decoder layer on x [B, T, D]; *mid gets the residual stream after attention. */
static int layer(dt_graph *g, const dt_llama_config *c, int x, int l, const float *inv_freq,
                 int64_t B, int64_t T, int *mid) {
    char n[160];
    int64_t D = c->hidden_size, Dh = c->head_dim, Hq = c->num_attention_heads,
            Hkv = c->num_key_value_heads, F = c->intermediate_size;
#define P(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
    char pq[160], pk[160], pv[160], po[160], pg[160], pu[160], pd[160];
    int h =
        dt_rmsnorm(g, x, norm_weight(g, c, P("input_layernorm.weight"), D, DT_LORA_SAVE_INPUT_NORM),
                   c->rms_norm_eps);
    snprintf(pq, sizeof pq, "%s", P("self_attn.q_proj"));
    snprintf(pk, sizeof pk, "%s", P("self_attn.k_proj"));
    snprintf(pv, sizeof pv, "%s", P("self_attn.v_proj"));
    snprintf(po, sizeof po, "%s", P("self_attn.o_proj"));
    int q = dt_rope(g, heads(g, proj(g, c, h, pq, DT_LORA_Q, Hq * Dh, D), B, T, Hq, Dh), -1,
                    c->rope_theta, inv_freq);
    int k = dt_rope(g, heads(g, proj(g, c, h, pk, DT_LORA_K, Hkv * Dh, D), B, T, Hkv, Dh), -1,
                    c->rope_theta, inv_freq);
    int v = heads(g, proj(g, c, h, pv, DT_LORA_V, Hkv * Dh, D), B, T, Hkv, Dh);
    int a = dt_transpose(g, dt_attention(g, q, k, v, 1, 0.0f), 1, 2); /* [B, T, Hq, Dh] */
    a = dt_reshape(g, a, 3, (int64_t[]){B, T, Hq * Dh});
    x = dt_add(g, x, proj(g, c, a, po, DT_LORA_O, D, Hq * Dh));
    *mid = x;
    h = dt_rmsnorm(
        g, x, norm_weight(g, c, P("post_attention_layernorm.weight"), D, DT_LORA_SAVE_POST_NORM),
        c->rms_norm_eps);
    snprintf(pg, sizeof pg, "%s", P("mlp.gate_proj"));
    snprintf(pu, sizeof pu, "%s", P("mlp.up_proj"));
    snprintf(pd, sizeof pd, "%s", P("mlp.down_proj"));
#undef P
    int m = dt_mul(g, dt_silu(g, proj(g, c, h, pg, DT_LORA_GATE, F, D)),
                   proj(g, c, h, pu, DT_LORA_UP, F, D));
    return dt_add(g, x, proj(g, c, m, pd, DT_LORA_DOWN, D, F));
}

int dt_llama_build(dt_graph *g, const dt_llama_config *c, int ids) {
    const dt_tensor *it = dt_graph_shape(g, ids);
    if (!it || it->ndim != 2 || (it->dtype != DT_I32 && it->dtype != DT_I64)) {
        dt_error_set(DT_ERR_SHAPE, "llama: ids must be an i32/i64 [B, T] node");
        return -1;
    }
    if (c->head_dim > MAX_HEAD_DIM || c->head_dim % 2) {
        dt_error_set(DT_ERR_INVALID, "llama: head_dim %d (even, at most %d)", c->head_dim,
                     MAX_HEAD_DIM);
        return -1;
    }
    int64_t B = it->shape[0], T = it->shape[1], D = c->hidden_size;
    float inv_freq[MAX_HEAD_DIM / 2];
    dt_status st =
        c->rope_type == 1
            ? dt_rope_llama3_inv_freq(inv_freq, c->head_dim, c->rope_theta, c->rope_factor,
                                      c->rope_low_freq_factor, c->rope_high_freq_factor,
                                      c->rope_original_max_position_embeddings)
            : dt_rope_default_inv_freq(inv_freq, c->head_dim, c->rope_theta);
    if (st != DT_OK) return -1;
    int emb = weight(g, c, "model.embed_tokens.weight", c->vocab_size, D, DT_LORA_SAVE_EMBED);
    int x = dt_embedding(g, ids, emb);
    /* With recompute a layer is two segments, attention and MLP, and the residual stream
     * between them ([B, T, D] f32, as much as the layer's input) is kept: the MLP's recomputed
     * forward starts from it, so o_proj's base GEMM and the add are never recomputed (backward
     * reads neither value; the compiler recomputes only what backward reads). */
    for (int l = 0; l < c->num_hidden_layers; l++) {
        int before = dt_graph_node_count(g) - 1, mid = -1;
        x = layer(g, c, x, l, inv_freq, B, T, &mid);
        if (c->recompute && x >= 0 &&
            (dt_graph_recompute(g, before, mid) != DT_OK || dt_graph_recompute(g, mid, x) != DT_OK))
            return -1;
    }
    x = dt_rmsnorm(g, x, norm_weight(g, c, "model.norm.weight", D, DT_LORA_SAVE_FINAL_NORM),
                   c->rms_norm_eps);
    int head = c->tie_word_embeddings
                   ? emb
                   : weight(g, c, "lm_head.weight", c->vocab_size, D, DT_LORA_SAVE_LM_HEAD);
    return dt_linear(g, x, head, -1);
}

static int is_lora(const char *name, const char *which) {
    return strstr(name, which) != NULL;
}

/* PEFT: A ~ kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); B = 0. */
static void init_adapter(const dt_param_info *pi, const dt_tensor *t, uint64_t seed, int i) {
    float *p = t->data;
    if (is_lora(pi->name, ".lora_B.")) {
        memset(p, 0, pi->numel * sizeof(float));
    } else {
        float bound = 1.0f / sqrtf((float)t->shape[1]);
        dt_rng_uniform(p, (int64_t)pi->numel, seed, (uint32_t)i, 1, -bound, bound);
    }
}

static dt_status init(dt_graph *g, uint64_t seed, int adapters_only) {
    if (dt_graph_device(g).kind != DT_DEVICE_CPU) /* its values are device memory */
        return dt_error_set(DT_ERR_STATE, "llama init: the graph is on a CUDA device; initialise "
                                          "a CPU graph and dt_graph_upload its flat buffers");
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        const dt_tensor *t = dt_graph_value(g, pi->id);
        if (!t || !t->data) return dt_error_set(DT_ERR_STATE, "llama init: graph not compiled");
        if (is_lora(pi->name, ".lora_A.") || is_lora(pi->name, ".lora_B.")) {
            init_adapter(pi, t, seed, i);
            continue;
        }
        if (adapters_only) continue;
        if (t->dtype == DT_BF16) { /* a frozen LoRA base initialised at random (tests) */
            /* in chunks through a small f32 buffer: a whole-matrix temporary would stay
             * resident (the heap keeps freed blocks) and inflate the memory a LoRA run needs */
            enum { CH = 1 << 18 };
            float *f = malloc(CH * sizeof(float));
            if (!f) return dt_error_set(DT_ERR_NOMEM, "llama init: out of memory");
            uint16_t *dst = t->data;
            for (size_t o = 0, ch = 0; o < pi->numel; o += CH, ch++) {
                size_t m = pi->numel - o < CH ? pi->numel - o : CH;
                dt_rng_normal(f, (int64_t)m, seed, (uint32_t)i, (uint32_t)(2 + ch), 0.0f, 0.02f);
                dt_bf16_from_f32_n(dst + o, f, m);
            }
            free(f);
            continue;
        }
        if (t->dtype != DT_F32) continue;
        float *p = t->data;
        if (t->ndim == 2)
            dt_rng_normal(p, (int64_t)pi->numel, seed, (uint32_t)i, 0, 0.0f, 0.02f);
        else
            for (size_t k = 0; k < pi->numel; k++) p[k] = 1.0f;
    }
    return DT_OK;
}

dt_status dt_llama_init(dt_graph *g, uint64_t seed) {
    return init(g, seed, 0);
}

dt_status dt_lora_init(dt_graph *g, uint64_t seed) {
    return init(g, seed, 1);
}
