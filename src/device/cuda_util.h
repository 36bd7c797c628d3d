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

/* The libraries loaded with dlopen when first needed (cuBLASLt, cuDNN, NCCL: a CPU-only process
 * never pays for them, and the binary needs none of them to start). Loads `lib` -- from `dir`
 * first when dir is not NULL, then as the loader finds it -- and each entry point names[i]
 * into *slots[i], i < n. 1 on success; 0 with err set to "cannot load LIB: why" or "LIB has no
 * NAME". The library stays loaded for the process. */
int dt_cuda_lib_load(const char *dir, const char *lib, int n, const char *const *names,
                     void **const *slots, char *err, size_t en);

#ifdef __cplusplus
}
#endif
#endif
