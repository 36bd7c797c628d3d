/* Helpers of the CUDA kernel tests: the GPU under test (or exit 77: skipped), uploads and
 * downloads that fail the test on error. */
#ifndef DT_TEST_CUDA_TESTUTIL_H
#define DT_TEST_CUDA_TESTUTIL_H

#include <stddef.h>
#include "dtrain/device.h"
#include "dtrain/graph.h"
#include "dtrain/models.h"

/* cuda:0 and a stream on it; exits 77 when this build has no CUDA backend or no GPU is
 * visible, so ctest reports the test as skipped, never as passed. */
dt_device cuda_test_device(const char *test, dt_stream **s);
/* A device copy of n bytes of host memory (n > 0); aborts the test on failure. */
void *cuda_test_upload(dt_device d, const void *host, size_t n);
/* A device buffer of n bytes filled with 0xff (NaN as floats: a kernel that does not write an
 * element it should shows up). */
void *cuda_test_alloc(dt_device d, size_t n);
/* Copies n bytes back after syncing s. */
void cuda_test_download(dt_device d, dt_stream *s, void *host, const void *dev, size_t n);

/* The CPU side of a kernel test: keeps `out`, adds loss = sum(out * R) (*r = R's id), compiles
 * and fills every named f32 leaf with N(0, 1) (seed 500 + id). Integer inputs (ids,
 * positions) are the caller's to fill before cuda_test_cpu_step. 0, or -1 on failure. */
int cuda_test_cpu_compile(dt_graph *g, int out, int *r);
/* Forward (training mode) and backward of the compiled graph: 0, or -1 on failure. */
int cuda_test_cpu_step(dt_graph *g);
/* A device copy of a node's value (any dtype: its bytes). */
void *cuda_test_upload_value(dt_device d, dt_graph *g, int id);

/* Downloads n floats of dev and checks them against want (dt_check_close); the failure names
 * "what: name". */
void cuda_test_check(dt_device d, dt_stream *s, const char *what, const char *name,
                     const float *dev, const float *want, int64_t n, double atol, double rtol);
/* Downloads n bytes of dev and checks that they equal want bit for bit. */
void cuda_test_same(dt_device d, dt_stream *s, const char *what, const char *name, const void *dev,
                    const void *want, size_t n);

/* The trainer tests (cuda_train_*): a CUDA run's per-step losses and gradient norms against a
 * CPU run's -- the CPU's losses finite and positive, each loss within 2e-4 (1 + |loss|), each
 * norm within 2e-3 relative -- and the CPU run trained (its last loss at least 0.02 below its
 * first). */
void cuda_test_steps(const char *what, int steps, const double *loss_gpu, const double *loss_cpu,
                     const double *norm_gpu, const double *norm_cpu);
/* got against want (n floats): want not all zero, at most 1 in 1000 elements beyond
 * 1e-4 max|want| + 1e-3 |want[i]|, none beyond cap (0: 1e-2 max|want|). */
void cuda_test_close_most(const char *what, const float *got, const float *want, size_t n,
                          double cap);

/* The graph tests' language model (cuda_graph_llama, cuda_graph_lora): ids [B, T] i32 ->
 * dt_llama_build -> logits [B T, V] -> cross-entropy with targets [B T] i32 (-100 ignored),
 * compiled for device d. 0, or -1 on failure (dt_last_error says why). */
typedef struct cuda_lm {
    dt_graph *g;
    int ids, tg, loss;
} cuda_lm;
/* The tests' tiny Llama: 2 layers, 64 wide (MLP 160), GQA with 4 query and 2 kv heads of 16,
 * RMSNorm eps 1e-5, RoPE theta 1e4, 64 positions, vocab words. */
dt_llama_config cuda_lm_tiny(int vocab, int tied, int recompute);
int cuda_lm_build(cuda_lm *m, const dt_llama_config *lc, int64_t B, int64_t T, dt_device d);
/* The same model built for the CPU (cpu) and for d (cu); 0, or -1 after a failed check (nothing
 * left to free). */
int cuda_lm_pair(const char *what, cuda_lm *cpu, cuda_lm *cu, const dt_llama_config *lc, int64_t B,
                 int64_t T, dt_device d);
/* Forward (training) and backward, adding into the gradients when accumulate: 0 or -1. */
int cuda_lm_step(cuda_lm *m, int accumulate);
/* The device graph cu against the CPU graph cpu after a step: loss |cu - cpu| <= loss_rtol
 * (1 + |cpu|), and every trainable parameter's gradient (not all zero on the CPU) elementwise
 * within gabs max|cpu over the parameter| + grel |cpu|; prints the worst error as a fraction
 * of its tolerance. Returns the device's flat gradient, downloaded (the caller frees it). */
float *cuda_lm_compare(const char *what, cuda_lm *cpu, cuda_lm *cu, double loss_rtol, double gabs,
                       double grel);

#endif
