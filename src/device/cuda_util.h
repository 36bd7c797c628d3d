/* Helpers shared by the CUDA files of src/device (only built with -DDT_CUDA=ON). */
#ifndef DT_DEVICE_CUDA_UTIL_H
#define DT_DEVICE_CUDA_UTIL_H

#include <cuda_runtime_api.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DT_OK for cudaSuccess; otherwise clears CUDA's last error and sets "device cuda:<index>:
 * <op>: <CUDA's message> (<error name>)" (DT_ERR_NOMEM for an allocation failure). */
dt_status dt_cuda_check(cudaError_t e, int index, const char *op);

#ifdef __cplusplus
}
#endif
#endif
