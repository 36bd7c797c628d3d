/* Convolutional-network ops (what ResNets need), NCHW f32 with PyTorch semantics and names.
 *
 * Each builder returns the new node id, or -1 with a message in dt_last_error() that names the
 * op and the input shapes (bad shapes, dtypes, strides, groups, or an output size <= 0). */
#ifndef DTRAIN_OPS_CNN_H
#define DTRAIN_OPS_CNN_H

#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.nn.functional.conv2d: x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] or -1.
 * y [N, O, OH, OW] with OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1 (same for W).
 * stride and dilation >= 1, padding >= 0, groups divides C and O (groups == C: depthwise). */
int dt_conv2d(dt_graph *g, int x, int w, int bias, int stride_h, int stride_w, int pad_h, int pad_w,
              int dil_h, int dil_w, int groups);

/* torch.nn.BatchNorm2d (affine, track_running_stats): x [N, C, ...] -> same shape; weight,
 * bias [C] trainable; running_mean, running_var [C] params created with DT_PARAM_STATE.
 * Training mode (dt_graph_forward(g, 1)) normalises with the batch statistics and updates the
 * running statistics in place (running = (1 - momentum) * running + momentum * batch, with the
 * unbiased batch variance; not in recomputed forwards); eval mode uses the running statistics.
 * PyTorch's defaults: momentum 0.1, eps 1e-5. */
int dt_batchnorm2d(dt_graph *g, int x, int weight, int bias, int running_mean, int running_var,
                   float momentum, float eps);

/* batchnorm2d with what follows it in ResNets fused into its kernels:
 *   y = relu(batchnorm2d(x) + residual)
 * residual: a tensor of x's shape, or -1 for none; relu: 1 to apply ReLU, 0 not. The results,
 * including running statistics and every gradient (the residual's too), are bit for bit those of
 * dt_batchnorm2d, dt_add(y, residual) and dt_relu one after the other; the fused op makes fewer
 * passes over memory and keeps no intermediate arrays. Its backward applies the ReLU to the
 * output's gradient in place (like an in-place ReLU), so after backward dt_graph_grad of the
 * output holds the gradient before the ReLU. */
int dt_batchnorm2d_fused(dt_graph *g, int x, int weight, int bias, int running_mean,
                         int running_var, float momentum, float eps, int residual, int relu);

/* torch.nn.functional.max_pool2d / avg_pool2d (ceil_mode=False; avg: count_include_pad=True):
 * x [N, C, H, W] -> [N, C, OH, OW], OH = (H + 2*ph - kh) / sh + 1. Padding at most half the
 * kernel, like PyTorch. */
int dt_maxpool2d(dt_graph *g, int x, int kh, int kw, int sh, int sw, int ph, int pw);
int dt_avgpool2d(dt_graph *g, int x, int kh, int kw, int sh, int sw, int ph, int pw);

/* Adaptive average pooling to 1x1, flattened (torchvision ResNet's avgpool + flatten):
 * x [N, C, H, W] -> [N, C]. */
int dt_global_avgpool(dt_graph *g, int x);

#ifdef __cplusplus
}
#endif
#endif
