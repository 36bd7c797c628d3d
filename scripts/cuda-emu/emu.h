// A CPU emulation of the CUDA subset that src/device/*.cu use, for scripts/cuda-emu.sh: a
// developer check of the kernels' indexing, masking and reductions where no GPU is at hand.
// Blocks run one after another; a block that synchronises (__syncthreads, warp shuffles,
// __syncwarp) runs each of its threads as an OS thread with real barriers, others run their
// threads in a loop. __shared__ arrays are function statics (blocks do not overlap), dynamic
// shared memory is a fresh NaN-filled allocation per block (bounds-checked under ASan). The
// stream is the calling thread. Not a model of the GPU's memory ordering, timing or warp
// scheduling: it cannot show a race that barriers hide here, nor any performance.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <barrier>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include "dtrain/device.h"
#include "dtrain/device_cuda.h"
#include "dtrain/status.h"
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef void *cudaStream_t;
typedef int cudaError_t;
#define cudaSuccess 0
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
    return 0;
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    memset(p, v, n);
    return 0;
}
static inline cudaError_t cudaGetLastError() {
    return 0;
}
#define __global__
#define __device__
#define __shared__ static
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;
struct emu_block {
    std::barrier<> *bar;
    std::vector<std::barrier<> *> wb;
    float slots[1024];
    unsigned long long slots64[1024];
};
inline thread_local emu_block *emu_cur;
static inline unsigned long long *emu_shared64_for_block();
inline float *emu_dyn;
inline std::mutex emu_mu;
static inline void __syncthreads() {
    emu_cur->bar->arrive_and_wait();
}
static inline void __syncwarp() {
    emu_cur->wb[threadIdx.x / 32]->arrive_and_wait();
}
static inline float __shfl_sync(unsigned, float v, int src) {
    emu_cur->slots[threadIdx.x] = v;
    __syncwarp();
    float r = emu_cur->slots[(threadIdx.x / 32) * 32 + src];
    __syncwarp();
    return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    return __shfl_sync(0, v, (int)((threadIdx.x & 31) ^ o));
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
    unsigned long long u = 0;
    memcpy(&u, &v, sizeof v);
    emu_shared64_for_block()[threadIdx.x] = u;
    __syncwarp();
    u = emu_shared64_for_block()[(threadIdx.x / 32) * 32 + ((threadIdx.x & 31) ^ o)];
    __syncwarp();
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}

static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    std::lock_guard<std::mutex> g(emu_mu);
    unsigned long long o = *p;
    if (v < o) *p = v;
    return o;
}
static inline uint32_t __umulhi(uint32_t a, uint32_t b) {
    return (uint32_t)(((uint64_t)a * b) >> 32);
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __fmul_rn(float a, float b) {
    return a * b;
}
static inline unsigned long long *emu_shared64_for_block() {
    return emu_cur->slots64;
}
#include "cuda_common_reductions.inc" /* dt_block_sum, dt_block_max: cut from cuda_common.cuh */

static inline dt_status dt_cuda_stream_of(dt_stream *s, const char *op, cudaStream_t *cs) {
    *cs = s;
    return DT_OK;
}
static inline dt_status dt_cuda_launched(dt_stream *, const char *) {
    return DT_OK;
}
static inline dt_status dt_cuda_check(cudaError_t, int, const char *) {
    return DT_OK;
}
static inline void emu_launch(dim3 g, dim3 b, size_t smem, bool threaded,
                              std::function<void()> body) {
    gridDim = g;
    blockDim = b;
    for (unsigned by = 0; by < g.y; by++)
        for (unsigned bx = 0; bx < g.x; bx++) {
            dim3 bi(bx, by, 0);
            emu_dyn = smem ? (float *)malloc(smem) : nullptr;
            if (emu_dyn) memset(emu_dyn, 0xff, smem);
            if (!threaded) {
                blockIdx = bi;
                for (unsigned t = 0; t < b.x; t++) {
                    threadIdx = dim3(t, 0, 0);
                    body();
                }
            } else {
                emu_block blk;
                std::barrier<> bar((ptrdiff_t)b.x);
                blk.bar = &bar;
                for (unsigned w = 0; w < (b.x + 31) / 32; w++)
                    blk.wb.push_back(new std::barrier<>(32));
                std::vector<std::thread> th;
                for (unsigned t = 0; t < b.x; t++)
                    th.emplace_back([&, t] {
                        blockIdx = bi;
                        threadIdx = dim3(t, 0, 0);
                        emu_cur = &blk;
                        body();
                    });
                for (auto &x : th) x.join();
                for (auto *w : blk.wb) delete w;
            }
            free(emu_dyn);
        }
}
