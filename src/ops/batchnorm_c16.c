/* Batchnorm kernels for DT_LAYOUT_C16 (x [N, C/16, P, 16], oneDNN's nChw16c): the template in
 * batchnorm_blocked.inc with 16 channels per block. */
#define BN_L 16
#define BN_FN(name) dt_bn16_##name
#include "ops/batchnorm_blocked.inc"
