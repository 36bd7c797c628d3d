/* Encoded images: probing and decoding JPEG (TurboJPEG), PNG (libpng) and WebP (libwebp) to
 * RGB8, and JPEG encoding for re-encoded imports.
 *
 * Decoding follows what a PyTorch pipeline sees from torchvision's default loader, Pillow's
 * Image.open(f) then ImageOps.exif_transpose and convert("RGB"), so that pixels are equal:
 *   - JPEG: libjpeg-turbo with its defaults (islow DCT, fancy upsampling), as Pillow; grayscale
 *     expanded to RGB; the EXIF orientation (IFD0 tag 0x0112 of the first APP1 "Exif" segment)
 *     applied as exif_transpose does. CMYK / YCCK JPEGs converted as Pillow does (read inverted,
 *     r = (255 - c)(255 - k) / 255 with its rounding; see image_codec.c).
 *   - PNG: palette expanded, grayscale replicated, alpha dropped (not composited); 16-bit
 *     samples reduced as Pillow does: RGB, RGBA and gray+alpha keep the high byte (v >> 8),
 *     16-bit gray without alpha (Pillow's mode I;16) is clipped, min(v, 255). No gamma applied.
 *   - WebP: still images only (first and only frame); alpha dropped.
 * EXIF orientation is read for JPEG only (PNG eXIf and WebP EXIF chunks are ignored).
 * Every failure returns a dt_status with a one-line message; no input crashes the decoder. */
#ifndef DT_DATA_IMAGE_CODEC_H
#define DT_DATA_IMAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

typedef enum dt_image_format {
    DT_IMAGE_UNKNOWN = 0,
    DT_IMAGE_JPEG = 1,
    DT_IMAGE_PNG = 2,
    DT_IMAGE_WEBP = 3,
} dt_image_format;

/* Largest image decoded: width x height (stored size) at most 64 Mi pixels (8192 x 8192). */
#define DT_IMAGE_MAX_PIXELS ((int64_t)1 << 26)

typedef struct dt_image_info {
    dt_image_format format;
    int32_t width, height; /* as displayed: after the EXIF orientation (5-8 swap the sides) */
    int32_t channels;      /* in the file: 1 gray, 2 gray+alpha, 3 colour, 4 colour+alpha/CMYK */
    int32_t orientation;   /* EXIF orientation 1-8 (1 when absent or not JPEG) */
} dt_image_info;

/* Format by magic bytes (not by file name): JPEG FF D8 FF, PNG's 8-byte signature, RIFF....WEBP. */
dt_image_format dt_image_format_of(const uint8_t *buf, size_t len);
const char *dt_image_format_name(dt_image_format f); /* "jpeg", "png", "webp", "unknown" */

/* Reads format, size, channels and orientation from the headers, without decoding pixels. */
dt_status dt_image_probe(const uint8_t *buf, size_t len, dt_image_info *out);

/* Size dt_image_decode produces for `info` and scale 1/scale_denom (JPEG: ceil(side / denom);
 * other formats ignore the scale). */
void dt_image_decoded_size(const dt_image_info *info, int scale_denom, int32_t *w, int32_t *h);

/* Decodes to RGB8 HWC [h, w, 3] in rgb (cap bytes, at least w * h * 3). scale_denom in
 * {1, 2, 4, 8}: JPEG is decoded at 1/scale_denom with libjpeg's DCT scaling (as Pillow's
 * draft()); PNG and WebP always at full size. *w, *h get the decoded size. */
dt_status dt_image_decode(const uint8_t *buf, size_t len, int scale_denom, uint8_t *rgb, size_t cap,
                          int32_t *w, int32_t *h);

/* EXIF orientation 1-8 of a JPEG (1 when it has none). */
int dt_image_jpeg_orientation(const uint8_t *buf, size_t len);

/* What dt_image_decode_jpeg_box decoded: rows [y, y + h) and columns [x, x + w) of the image at
 * its scale (full_w x full_h, as dt_image_decode gives it), into rgb [h, w, 3]. decoded = 0: the
 * file is not one this path takes (not a JPEG, an EXIF orientation other than 1, CMYK): decode
 * it whole. */
typedef struct dt_image_part {
    int decoded;
    int32_t full_w, full_h;
    int32_t x, y, w, h;
} dt_image_part;

/* Decodes the part of a JPEG at 1/scale_denom that covers the box of w x h pixels at (x, y) --
 * coordinates in the scaled image -- with pixels equal to the whole decode's there
 * (image_jpeg_box.c: the rows above are skipped, only the box's columns and a small margin are
 * decoded, and decoding stops below the box). rgb: cap bytes. */
dt_status dt_image_decode_jpeg_box(const uint8_t *buf, size_t len, int scale_denom, int32_t x,
                                   int32_t y, int32_t w, int32_t h, uint8_t *rgb, size_t cap,
                                   dt_image_part *out);

/* Encodes RGB8 HWC [h, w, 3] as a baseline JPEG, 4:2:0, at `quality` (1-100) into a malloc'd
 * buffer. */
dt_status dt_image_encode_jpeg(const uint8_t *rgb, int32_t w, int32_t h, int quality, uint8_t **out,
                               size_t *len);

/* Resizes RGB8 HWC [sh, sw, 3] to [dh, dw, 3] with area averaging (each output pixel the mean of
 * the input area it covers, fractional pixels weighted; a box filter, for shrinking). */
dt_status dt_image_resize_area(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw,
                               int32_t dh);

#endif
