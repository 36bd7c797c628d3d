/* conv2d's node parameters, shared by its CPU op (conv.c) and its CUDA glue (cnn_cuda.c). */
#ifndef DTRAIN_OPS_CONV_IMPL_H
#define DTRAIN_OPS_CONV_IMPL_H

/* node->ip[]: strides, paddings, dilations, groups; CV_CUDA is set by the CUDA prepare: then
 * node->state is its cuDNN plan (dt_cuda_conv), not the oneDNN primitives. */
enum { CV_SH, CV_SW, CV_PH, CV_PW, CV_DH, CV_DW, CV_GROUPS, CV_CUDA };

#endif
