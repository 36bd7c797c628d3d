/* For scripts/cuda-emu.sh: an emulated CUDA device and cuBLASLt wrapper on the CPU, so that
 * code which asks for a CUDA device (a graph compiled with dt_graph_opts.device = cuda:0) runs
 * its CUDA paths with the emulated kernels. The CUDA backend is the CPU backend (host memory;
 * every copy and memset done when it returns) reporting one device; dt_cuda_gemm_run is a
 * plain loop (f32, and bf16 inputs with f32 accumulation). Linked before libdtrain.a, so these win
 * over cuda_off.c. */
#include <stdio.h>
#include <stdlib.h>
#include "device/device_impl.h"
#include "dtrain/device_cuda.h"
#include "dtrain/tensor.h"

static dt_status emu_count(int *n) {
    *n = 1;
    return DT_OK;
}

static dt_status emu_query(int index, dt_device_info *info) {
    dt_status st = dt_device_cpu_backend.query(index, info);
    snprintf(info->name, sizeof info->name, "CUDA emulated on the CPU (scripts/cuda-emu.sh)");
    info->cc_major = 9, info->cc_minor = 0;
    return st;
}

const dt_device_backend *dt_device_cuda_backend(void) {
    static dt_device_backend emu;
    if (!emu.count) {
        emu = dt_device_cpu_backend;
        emu.count = emu_count;
        emu.query = emu_query;
    }
    return &emu;
}

struct dt_cuda_gemm {
    int unused;
};

dt_status dt_cuda_gemm_create(dt_device d, size_t workspace_bytes, dt_cuda_gemm **out) {
    (void)d, (void)workspace_bytes;
    *out = calloc(1, sizeof **out);
    return *out ? DT_OK : dt_error_set(DT_ERR_NOMEM, "emulated gemm: out of memory");
}

void dt_cuda_gemm_destroy(dt_cuda_gemm *h) {
    free(h);
}

/* Element i of an f32 matrix, or of a bf16 one (uint16_t bits, widened exactly). */
static float elem(const void *m, int bf16, int64_t i) {
    return bf16 ? dt_bf16_to_f32(((const uint16_t *)m)[i]) : ((const float *)m)[i];
}

/* Row-major C [M, N] = alpha op(A) op(B) + beta C, f32 sums in k order (bf16 inputs widened
 * exactly, f32 accumulation: DT_GEMM_BF16); beta 0 never reads C. */
dt_status dt_cuda_gemm_run(dt_cuda_gemm *h, dt_stream *s, dt_gemm_mode mode, int trans_a,
                           int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                           int64_t lda, const void *B, int64_t ldb, float beta, float *C,
                           int64_t ldc) {
    (void)h, (void)s;
    if (mode != DT_GEMM_F32 && mode != DT_GEMM_BF16)
        return dt_error_set(DT_ERR_STATE, "emulated gemm: mode %d (f32 and bf16 only)", (int)mode);
    const int bf = mode == DT_GEMM_BF16;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc += elem(A, bf, trans_a ? k * lda + i : i * lda + k) *
                       elem(B, bf, trans_b ? j * ldb + k : k * ldb + j);
            float *c = &C[i * ldc + j];
            *c = beta == 0.0f ? alpha * acc : beta * *c + alpha * acc;
        }
    return DT_OK;
}
