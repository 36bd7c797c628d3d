/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11). */
#include <math.h>
#include "dtrain/rng.h"

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void dt_philox4x32(uint64_t key, const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void dt_rng_uniform(float *out, int64_t n, uint64_t key, uint32_t c0, uint32_t c1, float lo,
                    float hi) {
    for (int64_t i = 0; i < n; i += 4) {
        uint32_t r[4], ctr[4] = {c0, c1, (uint32_t)(i >> 2), (uint32_t)(i >> 34)};
        dt_philox4x32(key, ctr, r);
        for (int j = 0; j < 4 && i + j < n; j++) out[i + j] = lo + (hi - lo) * dt_rng_u01(r[j]);
    }
}

void dt_rng_normal(float *out, int64_t n, uint64_t key, uint32_t c0, uint32_t c1, float mean,
                   float std) {
    for (int64_t i = 0; i < n; i += 4) {
        uint32_t r[4], ctr[4] = {c0, c1, (uint32_t)(i >> 2), (uint32_t)(i >> 34)};
        dt_philox4x32(key, ctr, r);
        for (int j = 0; j < 4; j += 2) {
            /* Box-Muller; u1 in (0, 1] so the log is finite. */
            float u1 = 1.0f - dt_rng_u01(r[j]), u2 = dt_rng_u01(r[j + 1]);
            float rad = sqrtf(-2.0f * logf(u1)), th = 6.2831853071795865f * u2;
            if (i + j < n) out[i + j] = mean + std * rad * cosf(th);
            if (i + j + 1 < n) out[i + j + 1] = mean + std * rad * sinf(th);
        }
    }
}
