/* Shared by the .cu files of src/device: block reductions and the stream check. */
#ifndef DT_DEVICE_CUDA_COMMON_CUH
#define DT_DEVICE_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include "dtrain/device.h"
#include "device/cuda_util.h"

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets
 * the result. The tree is fixed, so the result does not depend on timing. `sh` holds 32. */
template <typename T> __device__ inline T dt_block_sum(T v, T *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : T(0);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float dt_block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The CUDA stream of s, after checking that s is a stream of a CUDA device and making that
 * device current; `op` names the kernel in the message. */
static inline dt_status dt_cuda_stream_of(dt_stream *s, const char *op, cudaStream_t *cs) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "%s: NULL stream", op);
    dt_device d = dt_stream_device(s);
    if (d.kind != DT_DEVICE_CUDA)
        return dt_error_set(DT_ERR_STATE, "%s: not a CUDA stream (device %s)", op,
                            d.kind == DT_DEVICE_CPU ? "cpu" : "unknown");
    *cs = (cudaStream_t)dt_stream_handle(s);
    return dt_cuda_check(cudaSetDevice(d.index), d.index, op);
}

/* The launch's error, if any. */
static inline dt_status dt_cuda_launched(dt_stream *s, const char *op) {
    return dt_cuda_check(cudaGetLastError(), dt_stream_device(s).index, op);
}

#endif
