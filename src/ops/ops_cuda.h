/* CUDA glue of the ops (dt_op_def.cuda_*): how each op's node maps onto the kernels of
 * include/dtrain/device_cuda.h on a graph compiled for a CUDA device. Defined in
 * src/ops/nn_cuda.c (linear, linear_bf16, elementwise, scale, silu, transpose/permute, dropout) and
 * src/ops/llm_cuda.c (rmsnorm, rope, attention, embedding, cross-entropy) and src/ops/cnn_cuda.c
 * (conv2d, batchnorm, pooling, relu). Each op file puts
 * its entries into its dt_op_def. */
#ifndef DT_OPS_OPS_CUDA_H
#define DT_OPS_OPS_CUDA_H

#include "graph/op.h"

#define DT_CUDA_OP_DECL(name)                                                                      \
    dt_status dt_##name##_cuda_prepare(dt_graph *g, dt_node *n);                                   \
    dt_status dt_##name##_cuda_forward(const dt_op_ctx *c, dt_stream *s);                          \
    dt_status dt_##name##_cuda_backward(const dt_op_ctx *c, dt_stream *s);

/* The three entries of dt_op_def for op `name` (prepare may be a stub that only checks). */
#define DT_CUDA_OP_ENTRIES(name)                                                                   \
    .cuda_prepare = dt_##name##_cuda_prepare, .cuda_forward = dt_##name##_cuda_forward,            \
    .cuda_backward = dt_##name##_cuda_backward

DT_CUDA_OP_DECL(linear)
DT_CUDA_OP_DECL(linear_bf16)
DT_CUDA_OP_DECL(ew)
DT_CUDA_OP_DECL(scale)
DT_CUDA_OP_DECL(silu)
DT_CUDA_OP_DECL(permute)
DT_CUDA_OP_DECL(dropout)
DT_CUDA_OP_DECL(rmsnorm)
DT_CUDA_OP_DECL(rope)
DT_CUDA_OP_DECL(attention)
DT_CUDA_OP_DECL(embedding)
DT_CUDA_OP_DECL(ce)
DT_CUDA_OP_DECL(conv2d)
DT_CUDA_OP_DECL(bn)
DT_CUDA_OP_DECL(maxpool)
DT_CUDA_OP_DECL(avgpool)
DT_CUDA_OP_DECL(gap)
DT_CUDA_OP_DECL(relu)
/* The read-back of the kernels' input checks (dt_op_def.cuda_check): an embedding id and a
 * cross-entropy target outside their range. */
int64_t dt_embedding_cuda_check_at(dt_graph *g, const dt_node *n);
dt_status dt_embedding_cuda_check(dt_graph *g, const dt_op_ctx *c, int64_t pos);
int64_t dt_ce_cuda_check_at(dt_graph *g, const dt_node *n);
dt_status dt_ce_cuda_check(dt_graph *g, const dt_op_ctx *c, int64_t pos);
/* conv2d's destroy on a CUDA graph (its cuDNN plan). */
void dt_conv2d_cuda_destroy(dt_node *n);

#endif
