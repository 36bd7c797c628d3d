/* Batchnorm kernels for DT_LAYOUT_C8 (x [N, C/8, P, 8], oneDNN's nChw8c): the template in
 * batchnorm_blocked.inc with 8 channels per block. */
#define BN_L 8
#define BN_FN(name) dt_bn8_##name
#include "ops/batchnorm_blocked.inc"
