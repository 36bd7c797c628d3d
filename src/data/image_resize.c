/* Antialiased bilinear resize of a crop of an RGB8 image, with the semantics of Pillow's
 * Image.resize(BILINEAR) on 8-bit images (what torchvision's resize does on PIL images):
 *
 *   scale = in / out, filterscale = max(scale, 1), support = 1 * filterscale
 *   output pixel i reads inputs [xmin, xmin + n) around centre c = (i + 0.5) * scale, with
 *   xmin = trunc(c - support + 0.5) clamped at 0, end = trunc(c + support + 0.5) clamped at in,
 *   weights tri((x - c + 0.5) / filterscale), divided by their sum, then quantised to 22
 *   fractional bits (round half away from zero); a pixel is (sum + 2^21) >> 22 clipped to 0..255.
 *
 * Separable, through a uint8 intermediate holding only the rows (columns) the second pass reads
 * (its rounding matters for bit-exactness): horizontal pass first, except -- as Pillow 13 does --
 * when the height shrinks by more than twice as many pixels as the width, then vertical first. A
 * pass whose size does not change is the identity and is skipped. Only the requested output window
 * is computed (its coefficients are the same as in the full output), which is how Resize +
 * CenterCrop costs no more than the centre crop itself. The vertical pass is vectorised over the
 * row; the horizontal one uses SSE4.1 / AVX2 per pixel of up to 8 taps (the same integer sums).
 *
 * Scratch layout (each part 64-byte aligned):
 *   hb int32 [2 * win_w], hk int32 [win_w, ksh]     horizontal bounds and coefficients
 *   vb int32 [2 * win_h], vk int32 [win_h, ksv]     vertical
 *   acc int32 [max(win_w, box_w) * 3]               one output row of vertical sums
 *   tmp uint8 [box_h, win_w, 3] or [win_h, box_w, 3]  first pass output (at most) */
#include <math.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include "data/image_transform.h"

enum { PREC = 22 }; /* fractional bits of the quantised weights (32 - 8 - 2, as Pillow) */

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

static int ksize_of(int in, int out) {
    double filterscale = (double)in / out;
    if (filterscale < 1.0) filterscale = 1.0;
    return (int)ceil(filterscale) * 2 + 1;
}

static double tri(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Bounds (first input, count) and quantised weights for outputs [first, first + n) of an
 * in -> out resize. */
static void coeffs(int in, int out, int first, int n, int ksize, int32_t *bounds, int32_t *k) {
    double scale = (double)in / out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale, ss = 1.0 / filterscale;
    for (int i = 0; i < n; i++) {
        double center = (first + i + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in) xmax = in;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) ww += tri((x + xmin - center + 0.5) * ss);
        int32_t *kr = k + (size_t)i * ksize;
        for (int x = 0; x < ksize; x++) {
            double w = x < xmax ? tri((x + xmin - center + 0.5) * ss) : 0.0;
            if (ww != 0.0) w /= ww;
            w *= (double)(1 << PREC);
            kr[x] = (int32_t)(w < 0 ? w - 0.5 : w + 0.5);
        }
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = xmax;
    }
}

static inline uint8_t clip8(int32_t s) {
    s >>= PREC;
    return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
}

size_t dt_resize_scratch(int box_w, int box_h, int out_w, int out_h, int win_w, int win_h) {
    if (box_w < 1 || box_h < 1 || out_w < 1 || out_h < 1 || win_w < 1 || win_h < 1) return 0;
    size_t ksh = (size_t)ksize_of(box_w, out_w), ksv = (size_t)ksize_of(box_h, out_h);
    size_t wide = (size_t)(box_w > win_w ? box_w : win_w);
    size_t tmp_h = (size_t)box_h * win_w, tmp_v = (size_t)win_h * box_w;
    return align64(sizeof(int32_t) * 2 * win_w) + align64(sizeof(int32_t) * win_w * ksh) +
           align64(sizeof(int32_t) * 2 * win_h) + align64(sizeof(int32_t) * win_h * ksv) +
           align64(sizeof(int32_t) * 3 * wide) + align64(3 * (tmp_h > tmp_v ? tmp_h : tmp_v));
}

#ifdef __AVX2__
/* One output pixel from 5..8 taps with AVX2: the 8 pixels (24 bytes) at p split into R, G, B
 * planes, widened to int32, multiplied by the (masked) weights and summed per channel -- the
 * same integer sums as the scalar loop. Reads 24 bytes at p: the caller checks they are in the
 * row. */
static inline void pixel_avx2(const uint8_t *p, const int32_t *k, int n, uint8_t *o) {
    static const int32_t lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const __m128i a = _mm_loadu_si128((const __m128i *)p);
    const __m128i b = _mm_loadl_epi64((const __m128i *)(p + 16));
    const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i kv = _mm256_maskload_epi32(k, _mm256_loadu_si256((const __m256i *)(lanes + 8 - n)));
    __m256i r =
        _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb)));
    __m256i g =
        _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb)));
    __m256i bl =
        _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb)));
    r = _mm256_mullo_epi32(r, kv);
    g = _mm256_mullo_epi32(g, kv);
    bl = _mm256_mullo_epi32(bl, kv);
    __m256i h =
        _mm256_hadd_epi32(_mm256_hadd_epi32(r, g), _mm256_hadd_epi32(bl, _mm256_setzero_si256()));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_srai_epi32(_mm_add_epi32(s, _mm_set1_epi32(1 << (PREC - 1))), PREC);
    s = _mm_packus_epi16(_mm_packs_epi32(s, s), s); /* clip to 0..255 */
    uint32_t v = (uint32_t)_mm_cvtsi128_si32(s);
    o[0] = (uint8_t)v, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)(v >> 16);
}
/* The same for 1..4 taps with SSE4.1: reads 16 bytes at p. */
static inline void pixel_sse4(const uint8_t *p, const int32_t *k, int n, uint8_t *o) {
    static const int32_t lanes[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
    const __m128i a = _mm_loadu_si128((const __m128i *)p);
    __m128i kv = _mm_maskload_epi32(k, _mm_loadu_si128((const __m128i *)(lanes + 4 - n)));
    __m128i r = _mm_cvtepu8_epi32(_mm_shuffle_epi8(
        a, _mm_setr_epi8(0, 3, 6, 9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)));
    __m128i g = _mm_cvtepu8_epi32(_mm_shuffle_epi8(
        a, _mm_setr_epi8(1, 4, 7, 10, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)));
    __m128i b = _mm_cvtepu8_epi32(_mm_shuffle_epi8(
        a, _mm_setr_epi8(2, 5, 8, 11, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)));
    r = _mm_mullo_epi32(r, kv);
    g = _mm_mullo_epi32(g, kv);
    b = _mm_mullo_epi32(b, kv);
    __m128i s = _mm_hadd_epi32(_mm_hadd_epi32(r, g), _mm_hadd_epi32(b, _mm_setzero_si128()));
    s = _mm_srai_epi32(_mm_add_epi32(s, _mm_set1_epi32(1 << (PREC - 1))), PREC);
    s = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
    uint32_t v = (uint32_t)_mm_cvtsi128_si32(s);
    o[0] = (uint8_t)v, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)(v >> 16);
}
#endif

/* Horizontal pass: `rows` rows of `in` -> out [rows, win_w, 3]; output pixel i reads the pixels
 * from column hb[2i] - xshift of `in`, whose rows hold in_cols pixels from there on (what may be
 * read). */
static void pass_h(const uint8_t *in, size_t in_stride, int rows, int xshift, int in_cols,
                   int win_w, int ksh, const int32_t *hb, const int32_t *hk, uint8_t *out,
                   size_t out_stride) {
    for (int y = 0; y < rows; y++) {
        const uint8_t *row = in + (size_t)y * in_stride;
        uint8_t *o = out + (size_t)y * out_stride;
        for (int i = 0; i < win_w; i++) {
            int x = hb[2 * i] - xshift, n = hb[2 * i + 1];
            const uint8_t *p = row + (size_t)x * 3;
            const int32_t *k = hk + (size_t)i * ksh;
#ifdef __AVX2__
            /* SIMD where the loads stay inside the row; the edge pixels scalar */
            if (n >= 5 && n <= 8 && x + 8 <= in_cols) {
                pixel_avx2(p, k, n, o + 3 * i);
                continue;
            }
            if (n <= 4 && x + 6 <= in_cols) {
                pixel_sse4(p, k, n, o + 3 * i);
                continue;
            }
#else
            (void)in_cols;
#endif
            int32_t s0 = 1 << (PREC - 1), s1 = s0, s2 = s0;
            for (int t = 0; t < n; t++) {
                s0 += p[3 * t] * k[t];
                s1 += p[3 * t + 1] * k[t];
                s2 += p[3 * t + 2] * k[t];
            }
            o[3 * i] = clip8(s0);
            o[3 * i + 1] = clip8(s1);
            o[3 * i + 2] = clip8(s2);
        }
    }
}

/* Vertical pass: output row i = sum over taps t of row vb[2i] - yshift + t of `in`, over `bytes`
 * contiguous bytes. Taps outer and bytes inner, so the multiply-adds run over contiguous memory
 * (vectorised); acc holds one row of sums [bytes]. */
static void pass_v(const uint8_t *in, size_t in_stride, int yshift, int bytes, int rows, int ksv,
                   const int32_t *vb, const int32_t *vk, int32_t *restrict acc, uint8_t *out,
                   size_t out_stride) {
    for (int i = 0; i < rows; i++) {
        const int32_t *k = vk + (size_t)i * ksv;
        const uint8_t *r0 = in + (size_t)(vb[2 * i] - yshift) * in_stride;
        int n = vb[2 * i + 1];
        /* First tap initialises (n >= 1 always: every output reads at least one input). */
        const uint8_t *restrict r = r0;
        int32_t kt = k[0];
#pragma omp simd
        for (int j = 0; j < bytes; j++) acc[j] = (1 << (PREC - 1)) + r[j] * kt;
        for (int t = 1; t < n; t++) {
            r = r0 + (size_t)t * in_stride;
            kt = k[t];
#pragma omp simd
            for (int j = 0; j < bytes; j++) acc[j] += r[j] * kt;
        }
        uint8_t *restrict o = out + (size_t)i * out_stride;
#pragma omp simd
        for (int j = 0; j < bytes; j++) {
            int32_t v = acc[j] >> PREC;
            o[j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

dt_status dt_resize_bilinear_aa(const uint8_t *src, int src_w, int src_h, int src_stride,
                                dt_box box, int out_w, int out_h, int win_x, int win_y, int win_w,
                                int win_h, uint8_t *dst, int dst_stride, void *scratch,
                                size_t scratch_bytes) {
    if (!src || !dst || src_w < 1 || src_h < 1 || src_stride < src_w * 3)
        return dt_error_set(DT_ERR_INVALID, "image_resize: bad source %dx%d (stride %d)", src_w,
                            src_h, src_stride);
    if (box.top < 0 || box.left < 0 || box.width < 1 || box.height < 1 ||
        box.left > src_w - box.width || box.top > src_h - box.height)
        return dt_error_set(DT_ERR_RANGE,
                            "image_resize: crop box top %d left %d %dx%d outside the %dx%d image",
                            box.top, box.left, box.width, box.height, src_w, src_h);
    if (out_w < 1 || out_h < 1 || win_x < 0 || win_y < 0 || win_w < 1 || win_h < 1 ||
        win_x > out_w - win_w || win_y > out_h - win_h || dst_stride < win_w * 3)
        return dt_error_set(DT_ERR_RANGE,
                            "image_resize: window %d,%d %dx%d outside the %dx%d output", win_x,
                            win_y, win_w, win_h, out_w, out_h);
    size_t need = dt_resize_scratch(box.width, box.height, out_w, out_h, win_w, win_h);
    if (!scratch || scratch_bytes < need)
        return dt_error_set(DT_ERR_INVALID, "image_resize: scratch of %zu bytes, %zu needed",
                            scratch_bytes, need);
    int ksh = ksize_of(box.width, out_w), ksv = ksize_of(box.height, out_h);
    size_t wide = (size_t)(box.width > win_w ? box.width : win_w);
    char *s = scratch;
    int32_t *hb = (int32_t *)s;
    s += align64(sizeof(int32_t) * 2 * win_w);
    int32_t *hk = (int32_t *)s;
    s += align64(sizeof(int32_t) * win_w * (size_t)ksh);
    int32_t *vb = (int32_t *)s;
    s += align64(sizeof(int32_t) * 2 * win_h);
    int32_t *vk = (int32_t *)s;
    s += align64(sizeof(int32_t) * win_h * (size_t)ksv);
    int32_t *acc = (int32_t *)s;
    s += align64(sizeof(int32_t) * 3 * wide);
    uint8_t *tmp = (uint8_t *)s;

    const uint8_t *crop = src + (size_t)box.top * src_stride + (size_t)box.left * 3;
    size_t ss = (size_t)src_stride, ds = (size_t)dst_stride;
    int need_h = out_w != box.width, need_v = out_h != box.height;
    if (need_h) coeffs(box.width, out_w, win_x, win_w, ksh, hb, hk);
    if (need_v) coeffs(box.height, out_h, win_y, win_h, ksv, vb, vk);
    if (need_h && need_v) {
        /* Pillow (13) runs the vertical pass first when the height shrinks by more than twice
         * as many pixels as the width; the uint8 intermediate makes the order visible. */
        if (box.height > out_h && box.height - out_h > 2 * (box.width - out_w)) {
            int x0 = hb[0], x1 = hb[2 * (win_w - 1)] + hb[2 * (win_w - 1) + 1];
            size_t ts = (size_t)(x1 - x0) * 3;
            pass_v(crop + (size_t)x0 * 3, ss, 0, (int)ts, win_h, ksv, vb, vk, acc, tmp, ts);
            pass_h(tmp, ts, win_h, x0, x1 - x0, win_w, ksh, hb, hk, dst, ds);
        } else {
            int y0 = vb[0], y1 = vb[2 * (win_h - 1)] + vb[2 * (win_h - 1) + 1];
            size_t ts = (size_t)win_w * 3;
            pass_h(crop + (size_t)y0 * ss, ss, y1 - y0, 0, src_w - box.left, win_w, ksh, hb, hk,
                   tmp, ts);
            pass_v(tmp, ts, y0, win_w * 3, win_h, ksv, vb, vk, acc, dst, ds);
        }
    } else if (need_h) {
        pass_h(crop + (size_t)win_y * ss, ss, win_h, 0, src_w - box.left, win_w, ksh, hb, hk, dst,
               ds);
    } else if (need_v) {
        pass_v(crop + (size_t)win_x * 3, ss, 0, win_w * 3, win_h, ksv, vb, vk, acc, dst, ds);
    } else {
        for (int i = 0; i < win_h; i++)
            memcpy(dst + i * ds, crop + (size_t)(win_y + i) * ss + (size_t)win_x * 3,
                   (size_t)win_w * 3);
    }
    return DT_OK;
}

void dt_resize_short_side(int img_w, int img_h, int size, int *out_w, int *out_h) {
    /* torchvision: new_long = int(size * long / short) in double, truncated. */
    if (img_w <= img_h) {
        *out_w = size;
        *out_h = (int)((double)size * img_h / img_w);
    } else {
        *out_h = size;
        *out_w = (int)((double)size * img_w / img_h);
    }
}
