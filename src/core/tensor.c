/* Tensor views and copies (see include/dtrain/tensor.h). */
#include <stdio.h>
#include <string.h>
#include "dtrain/tensor.h"

static const size_t dtype_size[DT_DTYPE_COUNT] = {4, 2, 4, 8, 2};
static const char *const dtype_name[DT_DTYPE_COUNT] = {"f32", "bf16", "i32", "i64", "f16"};

size_t dt_dtype_size(dt_dtype t) { return (unsigned)t < DT_DTYPE_COUNT ? dtype_size[t] : 0; }
const char *dt_dtype_name(dt_dtype t) {
    return (unsigned)t < DT_DTYPE_COUNT ? dtype_name[t] : "unknown";
}

float dt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* inf / NaN */
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1, e++;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v = {u};
    return v.f;
}

uint16_t dt_f16_from_f32(float f) {
    union { float f; uint32_t u; } v = {f};
    uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* overflow -> inf */
    if (a < 0x38800000u) {                                           /* subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);                            /* 14..24 */
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t res = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (res & 1))) res++;
    return (uint16_t)(sign | res);
}

void dt_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = dt_bf16_from_f32(src[i]);
}
void dt_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(src[i]);
}

const char *dt_shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = 0;
    if (len == 0) return buf;
    buf[0] = '\0';
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

static void set_contiguous_strides(dt_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

dt_status dt_tensor_init(dt_tensor *t, void *data, dt_dtype dtype, int ndim, const int64_t *shape) {
    if ((unsigned)dtype >= DT_DTYPE_COUNT)
        return dt_error_set(DT_ERR_DTYPE, "tensor: unknown dtype %d", (int)dtype);
    if (ndim < 0 || ndim > DT_MAX_DIMS)
        return dt_error_set(DT_ERR_SHAPE, "tensor: %d dims (at most %d)", ndim, DT_MAX_DIMS);
    memset(t, 0, sizeof *t);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return dt_error_set(DT_ERR_SHAPE, "tensor: negative dim %lld at %d",
                                (long long)shape[i], i);
        t->shape[i] = shape[i];
    }
    t->data = data, t->dtype = dtype, t->ndim = ndim;
    set_contiguous_strides(t);
    return DT_OK;
}

int64_t dt_tensor_numel(const dt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t dt_tensor_nbytes(const dt_tensor *t) {
    return (size_t)dt_tensor_numel(t) * dt_dtype_size(t->dtype);
}

int dt_tensor_is_contiguous(const dt_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

int dt_tensor_same_shape(const dt_tensor *a, const dt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

dt_status dt_tensor_reshape(dt_tensor *out, const dt_tensor *t, int ndim, const int64_t *shape) {
    char a[96], b[96];
    if (!dt_tensor_is_contiguous(t))
        return dt_error_set(DT_ERR_SHAPE, "reshape: source %s is not contiguous",
                            dt_shape_str(a, sizeof a, t->ndim, t->shape));
    if (ndim < 0 || ndim > DT_MAX_DIMS)
        return dt_error_set(DT_ERR_SHAPE, "reshape: %d dims (at most %d)", ndim, DT_MAX_DIMS);
    int64_t n = dt_tensor_numel(t), known = 1, s[DT_MAX_DIMS];
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1 && infer < 0) infer = i;
        else if (s[i] < 0) return dt_error_set(DT_ERR_SHAPE, "reshape: bad dim %lld", (long long)s[i]);
        else known *= s[i];
    }
    if (infer >= 0) s[infer] = known ? n / known : 0;
    int64_t m = 1;
    for (int i = 0; i < ndim; i++) m *= s[i];
    if (m != n)
        return dt_error_set(DT_ERR_SHAPE, "reshape: %s (%lld elements) into %s",
                            dt_shape_str(a, sizeof a, t->ndim, t->shape), (long long)n,
                            dt_shape_str(b, sizeof b, ndim, shape));
    void *data = t->data;
    dt_dtype dt = t->dtype;
    return dt_tensor_init(out, data, dt, ndim, s);
}

dt_status dt_tensor_transpose(dt_tensor *out, const dt_tensor *t, int d0, int d1) {
    if (d0 < 0) d0 += t->ndim;
    if (d1 < 0) d1 += t->ndim;
    if (d0 < 0 || d1 < 0 || d0 >= t->ndim || d1 >= t->ndim)
        return dt_error_set(DT_ERR_SHAPE, "transpose: dims (%d, %d) of a %d-dim tensor", d0, d1,
                            t->ndim);
    dt_tensor r = *t;
    r.shape[d0] = t->shape[d1], r.shape[d1] = t->shape[d0];
    r.stride[d0] = t->stride[d1], r.stride[d1] = t->stride[d0];
    *out = r;
    return DT_OK;
}

dt_status dt_tensor_slice(dt_tensor *out, const dt_tensor *t, int dim, int64_t start, int64_t stop,
                          int64_t step) {
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim)
        return dt_error_set(DT_ERR_SHAPE, "slice: dim %d of a %d-dim tensor", dim, t->ndim);
    int64_t n = t->shape[dim];
    if (step <= 0) return dt_error_set(DT_ERR_INVALID, "slice: step %lld <= 0", (long long)step);
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    if (stop > n) stop = n;
    if (start < 0 || start > n)
        return dt_error_set(DT_ERR_RANGE, "slice: start %lld outside dim %d of size %lld",
                            (long long)start, dim, (long long)n);
    int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
    dt_tensor r = *t;
    r.data = (char *)t->data + (size_t)(start * t->stride[dim]) * dt_dtype_size(t->dtype);
    r.shape[dim] = len;
    r.stride[dim] = t->stride[dim] * step;
    *out = r;
    return DT_OK;
}

dt_status dt_tensor_narrow(dt_tensor *out, const dt_tensor *t, int dim, int64_t start, int64_t len) {
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim)
        return dt_error_set(DT_ERR_SHAPE, "narrow: dim %d of a %d-dim tensor", dim, t->ndim);
    if (start < 0 || len < 0 || start + len > t->shape[dim])
        return dt_error_set(DT_ERR_RANGE, "narrow: [%lld, %lld) outside dim %d of size %lld",
                            (long long)start, (long long)(start + len), dim,
                            (long long)t->shape[dim]);
    return dt_tensor_slice(out, t, dim, start, start + len, 1);
}

/* Byte offset of logical element i. */
static size_t elem_offset(const dt_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d];
        off += (i % n) * t->stride[d];
        i /= n;
    }
    return (size_t)off * dt_dtype_size(t->dtype);
}

/* Element access goes through memcpy: file-backed tensors (safetensors) carry no alignment
 * guarantee, so an i64 may sit at any address. */
double dt_tensor_get(const dt_tensor *t, int64_t i) {
    const char *p = (const char *)t->data + elem_offset(t, i);
    float f;
    uint16_t h;
    int32_t i32;
    int64_t i64;
    switch (t->dtype) {
    case DT_F32: return memcpy(&f, p, 4), f;
    case DT_BF16: return memcpy(&h, p, 2), dt_bf16_to_f32(h);
    case DT_I32: return memcpy(&i32, p, 4), i32;
    case DT_I64: return memcpy(&i64, p, 8), (double)i64;
    case DT_F16: return memcpy(&h, p, 2), dt_f16_to_f32(h);
    default: return 0;
    }
}

void dt_tensor_set(dt_tensor *t, int64_t i, double v) {
    char *p = (char *)t->data + elem_offset(t, i);
    float f = (float)v;
    uint16_t h;
    int32_t i32 = (int32_t)v;
    int64_t i64 = (int64_t)v;
    switch (t->dtype) {
    case DT_F32: memcpy(p, &f, 4); break;
    case DT_BF16: h = dt_bf16_from_f32(f), memcpy(p, &h, 2); break;
    case DT_I32: memcpy(p, &i32, 4); break;
    case DT_I64: memcpy(p, &i64, 8); break;
    case DT_F16: h = dt_f16_from_f32(f), memcpy(p, &h, 2); break;
    default: break;
    }
}

dt_status dt_tensor_copy(dt_tensor *dst, const dt_tensor *src) {
    char a[96], b[96];
    if (!dt_tensor_same_shape(dst, src))
        return dt_error_set(DT_ERR_SHAPE, "copy: destination %s, source %s",
                            dt_shape_str(a, sizeof a, dst->ndim, dst->shape),
                            dt_shape_str(b, sizeof b, src->ndim, src->shape));
    int fd = dst->dtype == DT_F32 || dst->dtype == DT_BF16 || dst->dtype == DT_F16;
    int fs = src->dtype == DT_F32 || src->dtype == DT_BF16 || src->dtype == DT_F16;
    if (fd != fs)
        return dt_error_set(DT_ERR_DTYPE, "copy: %s into %s", dt_dtype_name(src->dtype),
                            dt_dtype_name(dst->dtype));
    int64_t n = dt_tensor_numel(src);
    if (dst->dtype == src->dtype && dt_tensor_is_contiguous(dst) && dt_tensor_is_contiguous(src)) {
        memmove(dst->data, src->data, dt_tensor_nbytes(src));
        return DT_OK;
    }
    if (dst->dtype == DT_BF16 && src->dtype == DT_F32 && dt_tensor_is_contiguous(dst) &&
        dt_tensor_is_contiguous(src)) {
        dt_bf16_from_f32_n(dst->data, src->data, (size_t)n);
        return DT_OK;
    }
    if (dst->dtype == DT_F32 && src->dtype == DT_BF16 && dt_tensor_is_contiguous(dst) &&
        dt_tensor_is_contiguous(src)) {
        dt_bf16_to_f32_n(dst->data, src->data, (size_t)n);
        return DT_OK;
    }
    /* General strided path (views, int widening); not on any hot path. */
    for (int64_t i = 0; i < n; i++) {
        if (src->dtype == DT_I64 && dst->dtype == DT_I64) { /* exact beyond 2^53 */
            memcpy((char *)dst->data + elem_offset(dst, i),
                   (const char *)src->data + elem_offset(src, i), 8);
        } else {
            dt_tensor_set(dst, i, dt_tensor_get(src, i));
        }
    }
    return DT_OK;
}
