/* Helpers of the CUDA kernel tests: the GPU under test (or exit 77: skipped), uploads and
 * downloads that fail the test on error. */
#ifndef DT_TEST_CUDA_TESTUTIL_H
#define DT_TEST_CUDA_TESTUTIL_H

#include <stddef.h>
#include "dtrain/device.h"
#include "dtrain/graph.h"

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

#endif
