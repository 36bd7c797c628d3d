/* Tensors: a typed, strided view of memory that the tensor does not own.
 *
 * Shapes have up to DT_MAX_DIMS dimensions; strides are in elements. Views (reshape,
 * transpose, narrow, slice) never copy; dt_tensor_copy() makes a strided copy with dtype
 * conversion (f32 <-> bf16). bf16 is a storage type: kernels widen it to f32 to compute. */
#ifndef DTRAIN_TENSOR_H
#define DTRAIN_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAX_DIMS 5

/* DT_F16 is for reading files (Hugging Face checkpoints in float16): storage and conversion
 * only; no op computes on it. */
typedef enum dt_dtype {
    DT_F32 = 0,
    DT_BF16 = 1,
    DT_I32 = 2,
    DT_I64 = 3,
    DT_F16 = 4,
    DT_DTYPE_COUNT
} dt_dtype;

typedef struct dt_tensor {
    void *data;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    int64_t stride[DT_MAX_DIMS]; /* in elements, not bytes */
} dt_tensor;

size_t dt_dtype_size(dt_dtype t);
const char *dt_dtype_name(dt_dtype t);

/* Round-to-nearest-even f32 -> bf16 (NaN stays NaN), and the exact widening back. */
static inline uint16_t dt_bf16_from_f32(float f) {
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}
static inline float dt_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}
/* IEEE half <-> f32 (round to nearest even; subnormals, inf and NaN handled). */
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f16_from_f32(float f);
void dt_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);
void dt_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/* A contiguous (row-major) tensor over `data`. Fails on ndim outside 0..DT_MAX_DIMS, a
 * negative dimension or an unknown dtype. */
dt_status dt_tensor_init(dt_tensor *t, void *data, dt_dtype dtype, int ndim, const int64_t *shape);
int64_t dt_tensor_numel(const dt_tensor *t);
size_t dt_tensor_nbytes(const dt_tensor *t);
int dt_tensor_is_contiguous(const dt_tensor *t);
int dt_tensor_same_shape(const dt_tensor *a, const dt_tensor *b);
/* "[2, 3, 4]" into buf (always NUL-terminated). Returns buf. */
const char *dt_shape_str(char *buf, size_t len, int ndim, const int64_t *shape);

/* Views. `out` may alias `t`. reshape needs a contiguous source; one dim may be -1. */
dt_status dt_tensor_reshape(dt_tensor *out, const dt_tensor *t, int ndim, const int64_t *shape);
dt_status dt_tensor_transpose(dt_tensor *out, const dt_tensor *t, int d0, int d1);
dt_status dt_tensor_narrow(dt_tensor *out, const dt_tensor *t, int dim, int64_t start, int64_t len);
/* Python-style t[start:stop:step] along dim (step > 0). */
dt_status dt_tensor_slice(dt_tensor *out, const dt_tensor *t, int dim, int64_t start, int64_t stop,
                          int64_t step);
/* dst <- src elementwise (same shape, any strides; f32<->bf16 conversion, ints to same type). */
dt_status dt_tensor_copy(dt_tensor *dst, const dt_tensor *src);
/* Read/write element i (row-major logical index) as double, any dtype. For tests and tools. */
double dt_tensor_get(const dt_tensor *t, int64_t i);
void dt_tensor_set(dt_tensor *t, int64_t i, double v);

#ifdef __cplusplus
}
#endif
#endif
