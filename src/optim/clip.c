/* Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_), in pieces so that
 * distributed code can all-reduce the sum of squares between computing and applying it. */
#include <math.h>
#include "dtrain/optim.h"

/* The sum of squares is split into a fixed number of chunks whose partial sums are added in
 * order, so the result is bit-identical whatever the thread count (an OpenMP reduction combines
 * partials in arrival order). Below CLIP_SERIAL elements one chunk does it all. */
#define CLIP_CHUNKS 64
#define CLIP_SERIAL 65536

/* g: [n] -> sum of g[i]^2, accumulated in double. */
static double sumsq_chunk(const float *restrict g, size_t n) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

double dt_grad_sumsq(const float *grads, size_t n) {
    if (!grads || n == 0) return 0.0;
    if (n < CLIP_SERIAL) return sumsq_chunk(grads, n);
    double part[CLIP_CHUNKS];
    size_t per = (n + CLIP_CHUNKS - 1) / CLIP_CHUNKS;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < CLIP_CHUNKS; c++) {
        size_t a = (size_t)c * per, b = a + per < n ? a + per : n;
        part[c] = a < b ? sumsq_chunk(grads + a, b - a) : 0.0;
    }
    double s = 0.0;
    for (int c = 0; c < CLIP_CHUNKS; c++) s += part[c];
    return s;
}

float dt_grad_clip_coef(double norm, float max_norm) {
    if (!(max_norm > 0) || !isfinite(norm)) return 1.0f;
    double coef = (double)max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

/* g: [n] *= s */
void dt_grad_scale(float *grads, size_t n, float s) {
    if (!grads) return;
#pragma omp parallel for simd schedule(static) if (n >= CLIP_SERIAL)
    for (size_t i = 0; i < n; i++) grads[i] *= s;
}

float dt_grad_clip_norm(float *grads, size_t n, float max_norm) {
    double norm = sqrt(dt_grad_sumsq(grads, n));
    float coef = dt_grad_clip_coef(norm, max_norm);
    if (coef < 1.0f) dt_grad_scale(grads, n, coef);
    return (float)norm;
}
