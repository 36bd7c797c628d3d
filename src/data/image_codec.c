/* Image codec: format by magic, probing, JPEG (TurboJPEG) and WebP (libwebp) decoding, the EXIF
 * orientation, JPEG encoding and area resizing. PNG is in image_png.c. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <webp/decode.h>
#include "data/image_codec_impl.h"

dt_image_format dt_image_format_of(const uint8_t *b, size_t n) {
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return DT_IMAGE_JPEG;
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return DT_IMAGE_PNG;
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return DT_IMAGE_WEBP;
    return DT_IMAGE_UNKNOWN;
}

const char *dt_image_format_name(dt_image_format f) {
    switch (f) {
    case DT_IMAGE_JPEG:
        return "jpeg";
    case DT_IMAGE_PNG:
        return "png";
    case DT_IMAGE_WEBP:
        return "webp";
    default:
        return "unknown";
    }
}

/* ---- EXIF orientation (JPEG APP1 "Exif\0\0", TIFF IFD0 tag 0x0112) ---- */

static uint32_t rd16(const uint8_t *p, int le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | p[1];
}
static uint32_t rd32(const uint8_t *p, int le) {
    return le ? rd16(p, 1) | rd16(p + 2, 1) << 16 : rd16(p, 0) << 16 | rd16(p + 2, 0);
}

/* Orientation from one TIFF block t [n] (after "Exif\0\0"); 1 when absent or malformed. */
static int tiff_orientation(const uint8_t *t, size_t n) {
    if (n < 8) return 1;
    int le;
    if (!memcmp(t, "II*\0", 4))
        le = 1;
    else if (!memcmp(t, "MM\0*", 4))
        le = 0;
    else
        return 1;
    uint32_t ifd = rd32(t + 4, le);
    if (ifd > n - 2) return 1;
    uint32_t count = rd16(t + ifd, le);
    for (uint32_t k = 0; k < count; k++) {
        uint64_t e = (uint64_t)ifd + 2 + 12ull * k;
        if (e + 12 > n) return 1;
        uint32_t tag = rd16(t + e, le), type = rd16(t + e + 2, le);
        if (tag != 0x0112) continue;
        /* SHORT (3) as written by cameras; LONG (4) tolerated. The value sits in the entry. */
        uint32_t v = type == 3 ? rd16(t + e + 8, le) : type == 4 ? rd32(t + e + 8, le) : 1;
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

/* Walks the JPEG markers up to the first scan; the first APP1 Exif segment counts (Pillow's
 * choice). Every length is checked against the buffer. */
int dt_image_jpeg_orientation(const uint8_t *b, size_t n) {
    size_t p = 2;
    while (p + 4 <= n) {
        if (b[p] != 0xFF) return 1;
        uint8_t m = b[p + 1];
        if (m == 0xFF) { /* fill byte */
            p++;
            continue;
        }
        if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) { /* no length */
            p += 2;
            continue;
        }
        if (m == 0xDA || m == 0xD9) return 1; /* scan or end: no Exif before it */
        size_t seg = (size_t)b[p + 2] << 8 | b[p + 3];
        if (seg < 2 || seg > n - p - 2) return 1;
        if (m == 0xE1 && seg >= 8 && !memcmp(b + p + 4, "Exif\0\0", 6))
            return tiff_orientation(b + p + 10, seg - 8);
        p += 2 + seg;
    }
    return 1;
}

/* dst = orientation o applied to src [h, w, 3] (Pillow's exif_transpose: 2 FLIP_LEFT_RIGHT,
 * 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90);
 * 5-8 give [w, h, 3]. dst(x, y) for output column x, row y reads src(sx, sy). */
static void orient(const uint8_t *src, int32_t w, int32_t h, int o, uint8_t *dst) {
    int swap = o >= 5;
    int32_t ow = swap ? h : w, oh = swap ? w : h;
    for (int32_t y = 0; y < oh; y++)
        for (int32_t x = 0; x < ow; x++) {
            int32_t sx, sy;
            switch (o) {
            case 2:
                sx = w - 1 - x, sy = y;
                break;
            case 3:
                sx = w - 1 - x, sy = h - 1 - y;
                break;
            case 4:
                sx = x, sy = h - 1 - y;
                break;
            case 5:
                sx = y, sy = x;
                break;
            case 6:
                sx = y, sy = h - 1 - x;
                break;
            case 7:
                sx = w - 1 - y, sy = h - 1 - x;
                break;
            case 8:
                sx = w - 1 - y, sy = x;
                break;
            default:
                sx = x, sy = y;
                break;
            }
            memcpy(dst + ((size_t)y * ow + x) * 3, src + ((size_t)sy * w + sx) * 3, 3);
        }
}

/* ---- probe ---- */

static dt_status jpeg_header(tjhandle tj, const uint8_t *buf, size_t len, int *w, int *h, int *cs) {
    int sub;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, w, h, &sub, cs) != 0)
        return dt_error_set(DT_ERR_FORMAT, "jpeg: %s", tjGetErrorStr2(tj));
    if ((int64_t)*w * *h > DT_IMAGE_MAX_PIXELS)
        return dt_error_set(DT_ERR_RANGE, "jpeg: %dx%d is over the 64 Mi pixel limit", *w, *h);
    return DT_OK;
}

dt_status dt_image_probe(const uint8_t *buf, size_t len, dt_image_info *out) {
    memset(out, 0, sizeof *out);
    out->orientation = 1;
    dt_image_format f = dt_image_format_of(buf, len);
    dt_status st = DT_OK;
    if (f == DT_IMAGE_JPEG) {
        tjhandle tj = tjInitDecompress();
        if (!tj) return dt_error_set(DT_ERR_NOMEM, "jpeg: cannot start a decompressor");
        int w, h, cs;
        st = jpeg_header(tj, buf, len, &w, &h, &cs);
        tjDestroy(tj);
        if (st) return st;
        out->format = f;
        out->orientation = dt_image_jpeg_orientation(buf, len);
        out->width = out->orientation >= 5 ? h : w;
        out->height = out->orientation >= 5 ? w : h;
        out->channels = cs == TJCS_GRAY ? 1 : cs == TJCS_CMYK || cs == TJCS_YCCK ? 4 : 3;
    } else if (f == DT_IMAGE_PNG) {
        st = dt_png_probe(buf, len, out);
    } else if (f == DT_IMAGE_WEBP) {
        WebPBitstreamFeatures ft;
        VP8StatusCode vs = WebPGetFeatures(buf, len, &ft);
        if (vs != VP8_STATUS_OK)
            return dt_error_set(DT_ERR_FORMAT, "webp: bad header (libwebp status %d)", (int)vs);
        if (ft.has_animation)
            return dt_error_set(DT_ERR_FORMAT, "webp: animated WebP is not supported");
        out->format = f;
        out->width = ft.width, out->height = ft.height;
        out->channels = ft.has_alpha ? 4 : 3;
    } else {
        return dt_error_set(DT_ERR_FORMAT, "not a JPEG, PNG or WebP file (magic bytes)");
    }
    if (!st && (int64_t)out->width * out->height > DT_IMAGE_MAX_PIXELS)
        st = dt_error_set(DT_ERR_RANGE, "%s: %dx%d is over the 64 Mi pixel limit",
                          dt_image_format_name(f), out->width, out->height);
    if (!st && (out->width <= 0 || out->height <= 0))
        st = dt_error_set(DT_ERR_FORMAT, "%s: empty image", dt_image_format_name(f));
    return st;
}

void dt_image_decoded_size(const dt_image_info *info, int d, int32_t *w, int32_t *h) {
    if (info->format != DT_IMAGE_JPEG || d < 1) d = 1;
    *w = (info->width + d - 1) / d;
    *h = (info->height + d - 1) / d;
}

/* ---- decode ---- */

/* CMYK [n, 4] as libjpeg gives it (YCCK already converted) to RGB [n, 3] as Pillow does: it
 * reads every CMYK JPEG inverted (rawmode "CMYK;I", Adobe's convention), then converts with
 * r = 255 - k' - c' (255 - k') / 255 (rounded as its MULDIV255), c' = 255 - c, k' = 255 - k. */
static void cmyk_to_rgb(const uint8_t *cmyk, size_t n, uint8_t *rgb) {
    for (size_t i = 0; i < n; i++) {
        int nk = cmyk[4 * i + 3]; /* 255 - k' */
        for (int c = 0; c < 3; c++) {
            int t = (255 - cmyk[4 * i + c]) * nk + 128, v = nk - (((t >> 8) + t) >> 8);
            rgb[3 * i + c] = (uint8_t)(v < 0 ? 0 : v);
        }
    }
}

static dt_status decode_jpeg(const uint8_t *buf, size_t len, int d, uint8_t *rgb, size_t cap,
                             int32_t *ow, int32_t *oh) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return dt_error_set(DT_ERR_NOMEM, "jpeg: cannot start a decompressor");
    int w, h, cs;
    dt_status st = jpeg_header(tj, buf, len, &w, &h, &cs);
    tjscalingfactor sf = {1, d};
    int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    int o = st ? 1 : dt_image_jpeg_orientation(buf, len), cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    size_t n = (size_t)sw * sh;
    uint8_t *tmp = NULL, *raw = NULL;
    if (!st && n * 3 > cap)
        st = dt_error_set(DT_ERR_RANGE, "jpeg: %dx%d needs %zu bytes, the buffer has %zu", sw, sh,
                          n * 3, cap);
    if (!st && ((o != 1 && !(tmp = malloc(n * 3))) || (cmyk && !(raw = malloc(n * 4)))))
        st = dt_error_set(DT_ERR_NOMEM, "jpeg: out of memory for %dx%d", sw, sh);
    /* flags 0: libjpeg's defaults, islow DCT and fancy upsampling, as Pillow decodes. A warning
     * (truncated data, corrupt entropy codes) also fails: libjpeg would fill the rest grey. */
    uint8_t *dst = tmp ? tmp : rgb;
    if (!st && tjDecompress2(tj, buf, (unsigned long)len, cmyk ? raw : dst, sw, 0, sh,
                             cmyk ? TJPF_CMYK : TJPF_RGB, 0) != 0)
        st = dt_error_set(DT_ERR_FORMAT, "jpeg: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    if (!st && cmyk) cmyk_to_rgb(raw, n, dst);
    if (!st && tmp) orient(tmp, sw, sh, o, rgb);
    free(raw);
    free(tmp);
    if (st) return st;
    *ow = o >= 5 ? sh : sw, *oh = o >= 5 ? sw : sh;
    return DT_OK;
}

static dt_status decode_webp(const uint8_t *buf, size_t len, uint8_t *rgb, size_t cap, int32_t *w,
                             int32_t *h) {
    dt_image_info in;
    dt_status st = dt_image_probe(buf, len, &in);
    if (st) return st;
    size_t need = (size_t)in.width * in.height * 3;
    if (need > cap)
        return dt_error_set(DT_ERR_RANGE, "webp: %dx%d needs %zu bytes, the buffer has %zu",
                            in.width, in.height, need, cap);
    if (!WebPDecodeRGBInto(buf, len, rgb, need, in.width * 3))
        return dt_error_set(DT_ERR_FORMAT, "webp: corrupt or truncated image data");
    *w = in.width, *h = in.height;
    return DT_OK;
}

dt_status dt_image_decode(const uint8_t *buf, size_t len, int d, uint8_t *rgb, size_t cap,
                          int32_t *w, int32_t *h) {
    if (d != 1 && d != 2 && d != 4 && d != 8)
        return dt_error_set(DT_ERR_INVALID, "image decode: scale 1/%d is not 1, 1/2, 1/4 or 1/8",
                            d);
    switch (dt_image_format_of(buf, len)) {
    case DT_IMAGE_JPEG:
        return decode_jpeg(buf, len, d, rgb, cap, w, h);
    case DT_IMAGE_PNG: {
        dt_image_info in;
        dt_status st = dt_png_probe(buf, len, &in);
        return st ? st : dt_png_decode(buf, len, rgb, cap, w, h);
    }
    case DT_IMAGE_WEBP:
        return decode_webp(buf, len, rgb, cap, w, h);
    default:
        return dt_error_set(DT_ERR_FORMAT, "not a JPEG, PNG or WebP file (magic bytes)");
    }
}

/* ---- encode, resize ---- */

dt_status dt_image_encode_jpeg(const uint8_t *rgb, int32_t w, int32_t h, int quality, uint8_t **out,
                               size_t *len) {
    *out = NULL, *len = 0;
    if (w <= 0 || h <= 0 || quality < 1 || quality > 100)
        return dt_error_set(DT_ERR_INVALID, "jpeg encode: %dx%d at quality %d", w, h, quality);
    tjhandle tj = tjInitCompress();
    if (!tj) return dt_error_set(DT_ERR_NOMEM, "jpeg: cannot start a compressor");
    unsigned char *jb = NULL;
    unsigned long jl = 0;
    dt_status st = DT_OK;
    if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jb, &jl, TJSAMP_420, quality, 0) != 0)
        st = dt_error_set(DT_ERR_FORMAT, "jpeg encode: %s", tjGetErrorStr2(tj));
    else if (!(*out = malloc(jl)))
        st = dt_error_set(DT_ERR_NOMEM, "jpeg encode: out of memory");
    else
        memcpy(*out, jb, jl), *len = jl;
    tjFree(jb);
    tjDestroy(tj);
    return st;
}

/* Weights of a 1-D area resize from n to m samples: output i covers input [i n/m, (i+1) n/m). */
static void area_axis(const float *in, int32_t n, int32_t stride_in, float *out, int32_t m,
                      int32_t stride_out) {
    double scale = (double)n / m;
    for (int32_t i = 0; i < m; i++) {
        double a = i * scale, b = (i + 1) * scale;
        double acc[3] = {0, 0, 0};
        for (int32_t k = (int32_t)a; k < n && k < b; k++) {
            double lo = k > a ? k : a, hi = k + 1 < b ? k + 1 : b, wgt = hi - lo;
            for (int c = 0; c < 3; c++) acc[c] += wgt * in[(size_t)k * stride_in + c];
        }
        for (int c = 0; c < 3; c++) out[(size_t)i * stride_out + c] = (float)(acc[c] / scale);
    }
}

dt_status dt_image_resize_area(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw,
                               int32_t dh) {
    if (sw <= 0 || sh <= 0 || dw <= 0 || dh <= 0)
        return dt_error_set(DT_ERR_INVALID, "image resize: %dx%d to %dx%d", sw, sh, dw, dh);
    /* rows first (horizontal pass into [sh, dw, 3]), then columns into [dh, dw, 3] */
    float *row = malloc((size_t)sw * 3 * sizeof(float));
    float *mid = malloc((size_t)sh * dw * 3 * sizeof(float));
    float *col = malloc((size_t)dh * 3 * sizeof(float));
    if (!row || !mid || !col) {
        free(row), free(mid), free(col);
        return dt_error_set(DT_ERR_NOMEM, "image resize: out of memory for %dx%d", sw, sh);
    }
    for (int32_t y = 0; y < sh; y++) {
        for (size_t i = 0; i < (size_t)sw * 3; i++) row[i] = src[(size_t)y * sw * 3 + i];
        area_axis(row, sw, 3, mid + (size_t)y * dw * 3, dw, 3);
    }
    for (int32_t x = 0; x < dw; x++) {
        area_axis(mid + (size_t)x * 3, sh, dw * 3, col, dh, 3);
        for (int32_t y = 0; y < dh; y++)
            for (int c = 0; c < 3; c++) {
                float v = col[(size_t)y * 3 + c] + 0.5f;
                dst[((size_t)y * dw + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    }
    free(row), free(mid), free(col);
    return DT_OK;
}
