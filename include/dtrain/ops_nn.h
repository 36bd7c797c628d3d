/* Neural-network ops: normalisation, activations, softmax and cross-entropy, dropout, and
 * shape ops that materialise a contiguous copy (transpose, permute, concat, narrow, split).
 *
 * All take and return f32 tensors (cross-entropy targets are DT_I32 or DT_I64). Builders return
 * the new node id, or -1 with a message naming the op and the shapes (see dt_last_error()). A
 * builder given a negative input id returns -1 at once. Dimensions may be negative (Python
 * style: -1 is the last). */
#ifndef DTRAIN_OPS_NN_H
#define DTRAIN_OPS_NN_H

#include <stdint.h>
#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch's default ignore_index for cross-entropy. */
#define DT_IGNORE_INDEX_DEFAULT (-100)

/* ---- normalisation (over the last dim D) ---- */

/* PyTorch nn.LayerNorm(D): y = (x - mean) / sqrt(var + eps) * weight + bias, var biased.
 * x [..., D]; weight [D] or -1 (none); bias [D] or -1 (none). */
int dt_layernorm(dt_graph *g, int x, int weight, int bias, float eps);
/* Hugging Face LlamaRMSNorm: y = x * rsqrt(mean(x^2) + eps) * weight, in f32.
 * x [..., D]; weight [D] or -1 (none). */
int dt_rmsnorm(dt_graph *g, int x, int weight, float eps);

/* ---- activations (element-wise, output has x's shape) ---- */

int dt_relu(dt_graph *g, int x);
/* torch.nn.functional.gelu: approximate='none' (erf) when tanh_approx == 0, 'tanh' otherwise. */
int dt_gelu(dt_graph *g, int x, int tanh_approx);
/* x * sigmoid(x) (SiLU / swish). */
int dt_silu(dt_graph *g, int x);

/* ---- softmax and loss ---- */

/* Softmax over the last dim. */
int dt_softmax(dt_graph *g, int x);
/* torch.nn.functional.cross_entropy(logits, targets, reduction='mean', label_smoothing=ls,
 * ignore_index=ii) with classes in the LAST dim: logits [N, C] or [..., C] (flattened to
 * [N, C]); targets DT_I32/DT_I64 with N elements ([N] or the leading shape of logits). Returns a
 * scalar (ndim 0): the mean over non-ignored rows of
 *   (1 - ls) * -log p[target] + ls / C * sum_c -log p[c].
 * All rows ignored gives NaN (and zero gradient), as PyTorch does. A target outside [0, C) that
 * is not ignore_index makes the forward pass fail with DT_ERR_RANGE. */
int dt_cross_entropy(dt_graph *g, int logits, int targets, float label_smoothing,
                     int64_t ignore_index);

/* ---- dropout ---- */

/* Training mode: zero each element with probability p and scale the rest by 1 / (1 - p);
 * eval mode: identity. The mask is a pure function of (RNG key, step, node id, element index)
 * (Philox), so backward and recomputation regenerate it: nothing is stored. 0 <= p <= 1. */
int dt_dropout(dt_graph *g, int x, float p);

/* ---- shape ops (materialised contiguous copies) ---- */

/* Swaps dims d0 and d1. */
int dt_transpose(dt_graph *g, int x, int d0, int d1);
/* out.shape[i] = x.shape[perm[i]]; perm has x's ndim entries, a permutation of 0..ndim-1. */
int dt_permute(dt_graph *g, int x, const int *perm);
/* Joins n >= 1 tensors along dim; all other dims must agree. */
int dt_concat(dt_graph *g, int n, const int *xs, int dim);
/* x[..., start:start+len, ...] along dim, as a copy. */
int dt_narrow(dt_graph *g, int x, int dim, int64_t start, int64_t len);
/* Splits x along dim into n consecutive pieces of sizes[0..n-1] (which must sum to the dim's
 * size); writes the n node ids into out_ids. Returns 0, or -1 with a message. */
int dt_split(dt_graph *g, int x, int dim, int n, const int64_t *sizes, int *out_ids);

#ifdef __cplusplus
}
#endif
#endif
