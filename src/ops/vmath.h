/* Vectorisable math shared by the element-wise kernels (internal). Include it after the
 * "no-trapping-math" pragma of the including file (see activation.c) so GCC if-converts the
 * selects and the loops that call these vectorise. */
#ifndef DTRAIN_OPS_VMATH_H
#define DTRAIN_OPS_VMATH_H

#include <stdint.h>

/* e^x. Cody-Waite reduction x = n ln2 + r (|r| <= ln2/2), Cephes degree-5 polynomial, then
 * scaling by 2^n as two factors 2^(n/2) 2^(n - n/2) so that both stay normal: results under
 * 2^-126 underflow gradually to 0 and over FLT_MAX overflow to inf, like expf. */
static inline float dt_vexpf(float x) {
    /* Clamps as two independent selects (no nested ternary): see the pragma of the including file. */
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    /* Round to nearest with the 1.5 * 2^23 trick: vectorises where rintf may not. */
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    /* NaN compares false above and stays NaN in y; (int32_t)NaN is only reached in that case
     * and its value does not matter (cvttss2si gives INT_MIN, no trap). */
    const int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    union {
        int32_t i;
        float f;
    } s1 = {.i = (n1 + 127) * (1 << 23)}, s2 = {.i = (n2 + 127) * (1 << 23)};
    return y * s1.f * s2.f;
}

#endif
