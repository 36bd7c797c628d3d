/* Attention ops for Llama-style models: rotary position embedding and scaled-dot-product
 * attention with grouped-query heads, both forward and backward, f32.
 *
 * Layouts follow Hugging Face's Llama after its transpose: [B, H, T, Dh] (batch, heads,
 * sequence, head dim), contiguous. */
#ifndef DTRAIN_OPS_ATTN_H
#define DTRAIN_OPS_ATTN_H

#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rotary position embedding, Hugging Face Llama convention (rotate_half: the head dim is split
 * into two halves [x1, x2] and rotated as [x1 cos - x2 sin, x2 cos + x1 sin]; not the
 * interleaved-pairs layout of Meta's original code).
 *   x:         f32 [B, H, T, Dh], Dh even
 *   positions: -1 for positions 0..T-1, or a DT_I32/DT_I64 node of shape [T], [1, T] or [B, T]
 *   theta:     base of the default frequencies inv_freq[i] = theta^(-2i/Dh) (used when
 *              inv_freq is NULL)
 *   inv_freq:  NULL, or a table of Dh/2 frequencies (copied into the node), e.g. from
 *              dt_rope_llama3_inv_freq()
 * Output: f32 [B, H, T, Dh]. Returns the node id or -1 (message names "rope" and the shapes). */
int dt_rope(dt_graph *g, int x, int positions, float theta, const float *inv_freq);

/* The default Llama frequencies inv_freq[i] = 1 / theta^(2i/head_dim), i < head_dim/2, computed
 * the way transformers does in f32. */
dt_status dt_rope_default_inv_freq(float *inv_freq, int head_dim, float theta);

/* Llama-3.1 "llama3" rope_scaling: the default frequencies rescaled exactly like transformers'
 * _compute_llama3_parameters (long wavelengths divided by `factor`, short ones kept, a smooth
 * interpolation between). Llama-3.1: factor 8, low_freq_factor 1, high_freq_factor 4,
 * original_max_pos 8192, theta 500000. Writes head_dim/2 floats. */
dt_status dt_rope_llama3_inv_freq(float *inv_freq, int head_dim, float theta, float factor,
                                  float low_freq_factor, float high_freq_factor,
                                  int original_max_pos);

/* Scaled-dot-product attention, softmax(q k^T * scale [+ causal mask]) v, with grouped-query
 * heads: query head h reads kv head h / (Hq / Hkv).
 *   q: f32 [B, Hq, T, Dh];  k, v: f32 [B, Hkv, T, Dh];  Hq a multiple of Hkv
 *   causal: 1 masks keys after the query position (query i sees keys 0..i)
 *   scale: <= 0 means 1/sqrt(Dh)
 * Output: f32 [B, Hq, T, Dh]. Computed in tiles with an online softmax (flash attention): the
 * T x T score matrix is never stored; only B*Hq*T row log-sum-exps are saved for backward. */
int dt_attention(dt_graph *g, int q, int k, int v, int causal, float scale);

#ifdef __cplusplus
}
#endif
#endif
