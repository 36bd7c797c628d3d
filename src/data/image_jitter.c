/* ColorJitter's brightness, contrast and saturation with PIL's ImageEnhance semantics (what
 * torchvision.transforms.functional.adjust_* do on PIL images). Each is Image.blend(degenerate,
 * img, factor): out = in1 + factor * (in2 - in1) in f32, clipped to [0, 255] and truncated,
 * where the degenerate image in1 is black, the rounded mean of the grayscale image, or the
 * grayscale image itself (ITU-R 601-2 luma, PIL's fixed point L = (19595 R + 38470 G + 7471 B
 * + 2^15) >> 16). Hue is not implemented. */
#include "data/image_transform.h"

/* in1 + factor * (in2 - in1) as Image.blend computes it: the product rounded to f32, then the
 * f32 sum, clipped and truncated. The product is formed exactly in double (24 x 9 bits) and
 * rounded by the conversion, so FMA contraction (which would round once, unlike PIL) cannot
 * apply, and the loops still vectorise. */
static inline uint8_t blend(int in1, int in2, float factor) {
    float t = (float)in1 + (float)((double)factor * (double)(in2 - in1));
    return (uint8_t)(t <= 0.0f ? 0 : t >= 255.0f ? 255 : (int)t);
}

static inline int luma(const uint8_t *p) {
    return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
}

/* Every channel value blended with the constant m, through a table of the 256 results. */
static void blend_const(uint8_t *img, int w, int h, int stride, int m, float factor) {
    uint8_t lut[256];
    for (int v = 0; v < 256; v++) lut[v] = blend(m, v, factor);
    for (int y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * stride;
        for (int x = 0; x < 3 * w; x++) row[x] = lut[row[x]];
    }
}

void dt_adjust_brightness(uint8_t *img, int w, int h, int stride, float factor) {
    blend_const(img, w, h, stride, 0, factor);
}

void dt_adjust_contrast(uint8_t *img, int w, int h, int stride, float factor) {
    /* ImageStat mean of convert("L"), then int(mean + 0.5). */
    uint64_t sum = 0;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = img + (size_t)y * stride;
        uint32_t s = 0; /* < 2^32 for rows up to 2^24 pixels */
#pragma omp simd reduction(+ : s)
        for (int x = 0; x < w; x++) s += (uint32_t)luma(row + 3 * x);
        sum += s;
    }
    int m = (int)((double)sum / ((double)w * h) + 0.5);
    blend_const(img, w, h, stride, m, factor);
}

void dt_adjust_saturation(uint8_t *img, int w, int h, int stride, float factor) {
    for (int y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * stride;
#pragma omp simd
        for (int x = 0; x < w; x++) {
            uint8_t *p = row + 3 * x;
            int g = luma(p);
            uint8_t r = blend(g, p[0], factor), gr = blend(g, p[1], factor);
            uint8_t b = blend(g, p[2], factor);
            p[0] = r, p[1] = gr, p[2] = b;
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
