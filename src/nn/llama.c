/* Llama decoder (Hugging Face LlamaForCausalLM): embeddings -> L x [RMSNorm -> GQA attention
 * with rotary embeddings -> residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> lm_head.
 *
 * Shapes (B batch, T sequence, D hidden, Hq/Hkv heads, Dh head dim, F intermediate, V vocab):
 *   ids [B, T] -> x [B, T, D]; q [B, T, Hq*Dh] -> [B, Hq, T, Dh]; k, v -> [B, Hkv, T, Dh];
 *   attention [B, Hq, T, Dh] -> [B, T, Hq*Dh] -> o_proj [B, T, D]; MLP D -> F -> D;
 *   logits [B, T, V]. */
#include <stdio.h>
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "dtrain/rng.h"

#define MAX_HEAD_DIM 1024

static int weight(dt_graph *g, const char *name, int64_t rows, int64_t cols) {
    return dt_graph_param(g, name, DT_F32, 2, (int64_t[]){rows, cols}, 0);
}

static int norm_weight(dt_graph *g, const char *name, int64_t d) {
    return dt_graph_param(g, name, DT_F32, 1, (int64_t[]){d}, DT_PARAM_NO_DECAY);
}

/* [B, T, H*Dh] -> [B, H, T, Dh] */
static int heads(dt_graph *g, int x, int64_t B, int64_t T, int64_t H, int64_t Dh) {
    return dt_transpose(g, dt_reshape(g, x, 4, (int64_t[]){B, T, H, Dh}), 1, 2);
}

static int layer(dt_graph *g, const dt_llama_config *c, int x, int l, const float *inv_freq,
                 int64_t B, int64_t T) {
    char n[160];
    int64_t D = c->hidden_size, Dh = c->head_dim, Hq = c->num_attention_heads,
            Hkv = c->num_key_value_heads, F = c->intermediate_size;
#define P(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
    int h = dt_rmsnorm(g, x, norm_weight(g, P("input_layernorm.weight"), D), c->rms_norm_eps);
    int wq = weight(g, P("self_attn.q_proj.weight"), Hq * Dh, D);
    int wk = weight(g, P("self_attn.k_proj.weight"), Hkv * Dh, D);
    int wv = weight(g, P("self_attn.v_proj.weight"), Hkv * Dh, D);
    int wo = weight(g, P("self_attn.o_proj.weight"), D, Hq * Dh);
    int q = dt_rope(g, heads(g, dt_linear(g, h, wq, -1), B, T, Hq, Dh), -1, c->rope_theta, inv_freq);
    int k = dt_rope(g, heads(g, dt_linear(g, h, wk, -1), B, T, Hkv, Dh), -1, c->rope_theta, inv_freq);
    int v = heads(g, dt_linear(g, h, wv, -1), B, T, Hkv, Dh);
    int a = dt_transpose(g, dt_attention(g, q, k, v, 1, 0.0f), 1, 2); /* [B, T, Hq, Dh] */
    a = dt_reshape(g, a, 3, (int64_t[]){B, T, Hq * Dh});
    x = dt_add(g, x, dt_linear(g, a, wo, -1));
    h = dt_rmsnorm(g, x, norm_weight(g, P("post_attention_layernorm.weight"), D), c->rms_norm_eps);
    int wg = weight(g, P("mlp.gate_proj.weight"), F, D);
    int wu = weight(g, P("mlp.up_proj.weight"), F, D);
    int wd = weight(g, P("mlp.down_proj.weight"), D, F);
#undef P
    int m = dt_mul(g, dt_silu(g, dt_linear(g, h, wg, -1)), dt_linear(g, h, wu, -1));
    return dt_add(g, x, dt_linear(g, m, wd, -1));
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
    dt_status st = c->rope_type == 1
                       ? dt_rope_llama3_inv_freq(inv_freq, c->head_dim, c->rope_theta,
                                                 c->rope_factor, c->rope_low_freq_factor,
                                                 c->rope_high_freq_factor,
                                                 c->rope_original_max_position_embeddings)
                       : dt_rope_default_inv_freq(inv_freq, c->head_dim, c->rope_theta);
    if (st != DT_OK) return -1;
    int emb = weight(g, "model.embed_tokens.weight", c->vocab_size, D);
    int x = dt_embedding(g, ids, emb);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        int before = dt_graph_node_count(g) - 1;
        x = layer(g, c, x, l, inv_freq, B, T);
        if (c->recompute && x >= 0 && dt_graph_recompute(g, before, x) != DT_OK) return -1;
    }
    x = dt_rmsnorm(g, x, norm_weight(g, "model.norm.weight", D), c->rms_norm_eps);
    int head = c->tie_word_embeddings ? emb : weight(g, "lm_head.weight", c->vocab_size, D);
    return dt_linear(g, x, head, -1);
}

dt_status dt_llama_init(dt_graph *g, uint64_t seed) {
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        const dt_tensor *t = dt_graph_value(g, pi->id);
        if (!t || !t->data) return dt_error_set(DT_ERR_STATE, "llama init: graph not compiled");
        if (t->dtype != DT_F32) continue;
        float *p = t->data;
        if (t->ndim == 2)
            dt_rng_normal(p, (int64_t)pi->numel, seed, (uint32_t)i, 0, 0.0f, 0.02f);
        else
            for (size_t k = 0; k < pi->numel; k++) p[k] = 1.0f;
    }
    return DT_OK;
}
