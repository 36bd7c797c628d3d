/* ColorJitter's brightness, contrast and saturation with PIL's ImageEnhance semantics (what
 * torchvision.transforms.functional.adjust_* do on PIL images). Each is Image.blend(degenerate,
 * img, factor): out = in1 + factor * (in2 - in1) in f32, clipped to [0, 255] and truncated,
 * where the degenerate image in1 is black, the rounded mean of the grayscale image, or the
 * grayscale image itself (ITU-R 601-2 luma, PIL's fixed point L = (19595 R + 38470 G + 7471 B
 * + 2^15) >> 16). Hue is not implemented. */
#include "data/image_transform.h"

/* factor * d for d in [-255, 255], rounded to f32 and stored: the later addition reads the
 * rounded product from memory, so the compiler cannot fuse multiply and add (which would round
 * once instead of twice, unlike PIL). */
static __attribute__((noinline)) void products(float factor, float prod[511]) {
    for (int d = -255; d <= 255; d++) prod[d + 255] = factor * (float)d;
}

static inline uint8_t blend_out(float t) {
    return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
}

static inline uint8_t luma(const uint8_t *p) {
    return (uint8_t)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

/* Every channel value v -> lut[v], for a degenerate image of constant value m. */
static void apply_const(uint8_t *img, int w, int h, int stride, int m, float factor) {
    float prod[511];
    uint8_t lut[256];
    products(factor, prod);
    for (int v = 0; v < 256; v++) lut[v] = blend_out((float)m + prod[v - m + 255]);
    for (int y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * stride;
        for (int x = 0; x < 3 * w; x++) row[x] = lut[row[x]];
    }
}

void dt_adjust_brightness(uint8_t *img, int w, int h, int stride, float factor) {
    apply_const(img, w, h, stride, 0, factor);
}

void dt_adjust_contrast(uint8_t *img, int w, int h, int stride, float factor) {
    /* ImageStat mean of convert("L"), then int(mean + 0.5). */
    uint64_t sum = 0;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = img + (size_t)y * stride;
        for (int x = 0; x < w; x++) sum += luma(row + 3 * x);
    }
    int m = (int)((double)sum / ((double)w * h) + 0.5);
    apply_const(img, w, h, stride, m, factor);
}

void dt_adjust_saturation(uint8_t *img, int w, int h, int stride, float factor) {
    float prod[511];
    products(factor, prod);
    for (int y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * stride;
        for (int x = 0; x < w; x++) {
            uint8_t *p = row + 3 * x;
            int g = luma(p);
            for (int c = 0; c < 3; c++) p[c] = blend_out((float)g + prod[p[c] - g + 255]);
        }
    }
}

void dt_jitter_sample(const dt_jitter_params *p, dt_aug_rng *r, dt_jitter_draw *out) {
    /* A random order of the three (Fisher-Yates), then one factor per enabled adjustment,
     * uniform in [max(0, 1 - b), 1 + b]. */
    int perm[3] = {0, 1, 2};
    for (int i = 2; i > 0; i--) {
        int j = dt_aug_rng_below(r, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    const float b[3] = {p->brightness, p->contrast, p->saturation};
    out->n = 0;
    for (int i = 0; i < 3; i++) {
        float s = b[perm[i]];
        if (!(s > 0.0f)) continue;
        float lo = 1.0f - s < 0.0f ? 0.0f : 1.0f - s;
        out->order[out->n] = perm[i];
        out->factor[out->n++] = dt_aug_rng_uniform(r, lo, 1.0f + s);
    }
}

void dt_jitter_apply(const dt_jitter_draw *d, uint8_t *img, int w, int h, int stride) {
    for (int i = 0; i < d->n; i++) {
        if (d->order[i] == DT_JIT_BRIGHTNESS)
            dt_adjust_brightness(img, w, h, stride, d->factor[i]);
        else if (d->order[i] == DT_JIT_CONTRAST)
            dt_adjust_contrast(img, w, h, stride, d->factor[i]);
        else
            dt_adjust_saturation(img, w, h, stride, d->factor[i]);
    }
}
