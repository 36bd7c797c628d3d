/* Decoding only the part of a JPEG that a crop reads (dt_image_decode_jpeg_box, image_codec.h).
 *
 * RandomResizedCrop reads a box of 8-100% of the image. Through libjpeg's own API the decoder
 * skips the rows above the box (jpeg_skip_scanlines: no IDCT, upsampling or colour conversion for
 * them), decodes only the iMCU columns the box spans (jpeg_crop_scanline) and stops after the
 * box's last row. The rows above are still entropy-decoded (a baseline scan has no index to seek
 * by), so a box costs less than its share of the area: on photos about 2/3 of a whole decode for
 * a quarter of the area.
 *
 * The pixels are the whole decode's at the same scale (dt_image_decode: TurboJPEG with flags 0,
 * i.e. libjpeg's defaults -- islow IDCT, fancy upsampling): fancy upsampling reads the chroma
 * samples beside a pixel, so the part decoded reaches MARGIN pixels beyond the box on each side
 * where the image has them (test_image_codec_unit compares every box with the whole decode).
 *
 * libjpeg reports errors through error_exit, which must not return: it longjmps back here. A
 * warning (corrupt entropy data, a truncated file) fails too, as it does in dt_image_decode --
 * but only in the part decoded, so a file damaged below the box decodes here; datasets are
 * checked whole at import and by their shards' checksums after. */
#include <setjmp.h>
#include <stdio.h>
/* jpeglib.h needs FILE and size_t first */
#include <jpeglib.h>
#include "data/image_codec.h"

enum { MARGIN = 2 };

typedef struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} err_mgr;

static void on_error(j_common_ptr c) {
    err_mgr *e = (err_mgr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

/* level -1: a warning (the data is corrupt and libjpeg would go on with grey); others: trace. */
static void on_message(j_common_ptr c, int level) {
    if (level < 0) on_error(c);
}

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* The decode itself, between setjmp and jpeg_destroy_decompress (dt_image_decode_jpeg_box):
 * a function of its own, so that no local of the caller lives across the longjmp. Returns DT_OK
 * with out->decoded = 0 for a file the whole decode should take. */
static dt_status decode_part(struct jpeg_decompress_struct *c, const uint8_t *buf, size_t len,
                             int scale_denom, int32_t x, int32_t y, int32_t w, int32_t h,
                             uint8_t *rgb, size_t cap, dt_image_part *out) {
    jpeg_mem_src(c, buf, (unsigned long)len);
    jpeg_read_header(c, TRUE);
    if (c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK)
        return DT_OK; /* converted as Pillow does: dt_image_decode's path */
    if ((int64_t)c->image_width * c->image_height > DT_IMAGE_MAX_PIXELS)
        return dt_error_set(DT_ERR_RANGE, "jpeg: %ux%u is over the 64 Mi pixel limit",
                            c->image_width, c->image_height);
    c->scale_num = 1;
    c->scale_denom = (unsigned)scale_denom;
    c->out_color_space = JCS_RGB;
    jpeg_start_decompress(c);
    int fw = (int)c->output_width, fh = (int)c->output_height;
    if (x < 0 || y < 0 || w < 1 || h < 1 || x > fw - w || y > fh - h)
        return dt_error_set(DT_ERR_RANGE, "jpeg: box %d,%d %dx%d outside the %dx%d image (1/%d)", x,
                            y, w, h, fw, fh, scale_denom);
    int y0 = clampi(y - MARGIN, 0, fh), y1 = clampi(y + h + MARGIN, 0, fh);
    int x0 = clampi(x - MARGIN, 0, fw), x1 = clampi(x + w + MARGIN, 0, fw);
    JDIMENSION xo = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if (x0 > 0 || x1 < fw) jpeg_crop_scanline(c, &xo, &cw); /* xo down to an iMCU column */
    size_t need = (size_t)cw * (size_t)(y1 - y0) * 3;
    if (need > cap)
        return dt_error_set(DT_ERR_RANGE, "jpeg: a %ux%d part needs %zu bytes, the buffer has %zu",
                            cw, y1 - y0, need, cap);
    if (y0 > 0 && jpeg_skip_scanlines(c, (JDIMENSION)y0) != (JDIMENSION)y0)
        return dt_error_set(DT_ERR_FORMAT, "jpeg: could not skip %d rows", y0);
    while ((int)c->output_scanline < y1) {
        JDIMENSION r = c->output_scanline;
        JSAMPROW row = rgb + (size_t)(r - (JDIMENSION)y0) * cw * 3;
        if (jpeg_read_scanlines(c, &row, 1) != 1)
            return dt_error_set(DT_ERR_FORMAT, "jpeg: row %u does not decode", r);
    }
    *out = (dt_image_part){.decoded = 1,
                           .full_w = fw,
                           .full_h = fh,
                           .x = (int32_t)xo,
                           .y = y0,
                           .w = (int32_t)cw,
                           .h = y1 - y0};
    return DT_OK;
}

dt_status dt_image_decode_jpeg_box(const uint8_t *buf, size_t len, int scale_denom, int32_t x,
                                   int32_t y, int32_t w, int32_t h, uint8_t *rgb, size_t cap,
                                   dt_image_part *out) {
    *out = (dt_image_part){0};
    if (dt_image_format_of(buf, len) != DT_IMAGE_JPEG || dt_image_jpeg_orientation(buf, len) != 1)
        return DT_OK; /* not decoded: the caller decodes the whole image */
    if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
        return dt_error_set(DT_ERR_INVALID, "jpeg: scale 1/%d (1, 2, 4 or 8)", scale_denom);
    struct jpeg_decompress_struct c;
    err_mgr e;
    c.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = on_error;
    e.pub.emit_message = on_message;
    jpeg_create_decompress(&c);
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&c);
        *out = (dt_image_part){0};
        return dt_error_set(DT_ERR_FORMAT, "jpeg: %s", e.msg);
    }
    dt_status st = decode_part(&c, buf, len, scale_denom, x, y, w, h, rgb, cap, out);
    jpeg_destroy_decompress(&c); /* also ends a decompression stopped before its last row */
    return st;
}
