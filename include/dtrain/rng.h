/* Counter-based random numbers (Philox4x32-10).
 *
 * A stream is addressed by a 64-bit key (seed) and a 128-bit counter, so any element of any
 * random tensor can be recomputed without state: dropout masks are regenerated in backward and
 * in recomputation, and resuming a run needs only (seed, step). Convention for ops:
 * key = seed ^ (rank * golden), counter = (step, node id, element / 4). */
#ifndef DTRAIN_RNG_H
#define DTRAIN_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Four 32-bit random words for (key, counter). */
void dt_philox4x32(uint64_t key, const uint32_t ctr[4], uint32_t out[4]);
/* Uniform float in [0, 1) from a 32-bit word (24 bits of precision). */
static inline float dt_rng_u01(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}
/* Fill n floats uniform in [lo, hi) from stream (key, c0, c1). */
void dt_rng_uniform(float *out, int64_t n, uint64_t key, uint32_t c0, uint32_t c1, float lo,
                    float hi);
/* Fill n floats N(mean, std^2) (Box-Muller) from stream (key, c0, c1). */
void dt_rng_normal(float *out, int64_t n, uint64_t key, uint32_t c0, uint32_t c1, float mean,
                   float std);

#ifdef __cplusplus
}
#endif
#endif
