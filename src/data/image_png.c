/* PNG through libpng's classic API: its transformations give RGB8 as Pillow's convert("RGB")
 * does (palette expanded, gray replicated, alpha stripped, 16-bit to the high byte), except
 * 16-bit gray, which Pillow clips (min(v, 255)) and which is therefore read as 16-bit and
 * reduced here. libpng reports errors by longjmp from png_error: everything that must be freed
 * after one lives in a volatile-qualified context. */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include "data/image_codec_impl.h"

typedef struct png_src {
    const uint8_t *buf;
    size_t len, pos;
} png_src;

typedef struct png_err {
    jmp_buf jmp;
    char msg[160];
} png_err;

static void on_error(png_structp png, png_const_charp msg) {
    png_err *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jmp, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png, (void)msg; /* ancillary-chunk trouble: Pillow reads such files too */
}

static void on_read(png_structp png, png_bytep out, size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "truncated: the file ends inside the image data");
    memcpy(out, s->buf + s->pos, n);
    s->pos += n;
}

/* The shared setup of probe and decode: structs created, header read. */
typedef struct png_job {
    png_structp png;
    png_infop info;
    png_src src;
    png_err err;
} png_job;

static dt_status job_open(png_job *j, const uint8_t *buf, size_t len) {
    memset(j, 0, sizeof *j);
    j->src = (png_src){buf, len, 0};
    j->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j->err, on_error, on_warning);
    if (j->png) j->info = png_create_info_struct(j->png);
    if (!j->png || !j->info) {
        png_destroy_read_struct(&j->png, &j->info, NULL);
        return dt_error_set(DT_ERR_NOMEM, "png: out of memory");
    }
    png_set_read_fn(j->png, &j->src, on_read);
    return DT_OK;
}

static int channels_of(int color_type) {
    switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
        return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        return 2;
    case PNG_COLOR_TYPE_RGB_ALPHA:
        return 4;
    default:
        return 3; /* RGB, palette */
    }
}

dt_status dt_png_probe(const uint8_t *buf, size_t len, dt_image_info *out) {
    png_job j;
    dt_status st = job_open(&j, buf, len);
    if (st) return st;
    if (setjmp(j.err.jmp)) {
        png_destroy_read_struct(&j.png, &j.info, NULL);
        return dt_error_set(DT_ERR_FORMAT, "png: %s", j.err.msg);
    }
    png_read_info(j.png, j.info);
    out->format = DT_IMAGE_PNG;
    out->width = (int32_t)png_get_image_width(j.png, j.info);
    out->height = (int32_t)png_get_image_height(j.png, j.info);
    out->channels = channels_of(png_get_color_type(j.png, j.info));
    out->orientation = 1;
    png_destroy_read_struct(&j.png, &j.info, NULL);
    return DT_OK;
}

dt_status dt_png_decode(const uint8_t *buf, size_t len, uint8_t *rgb, size_t cap, int32_t *w,
                        int32_t *h) {
    png_job j;
    dt_status st = job_open(&j, buf, len);
    if (st) return st;
    /* freed after a longjmp too: volatile so that setjmp's return sees their last values */
    png_bytep *volatile rows = NULL;
    uint8_t *volatile tmp = NULL;
    if (setjmp(j.err.jmp)) {
        free(rows);
        free(tmp);
        png_destroy_read_struct(&j.png, &j.info, NULL);
        return dt_error_set(DT_ERR_FORMAT, "png: %s", j.err.msg);
    }
    png_read_info(j.png, j.info);
    uint32_t pw = png_get_image_width(j.png, j.info), ph = png_get_image_height(j.png, j.info);
    int ct = png_get_color_type(j.png, j.info), bd = png_get_bit_depth(j.png, j.info);
    if ((int64_t)pw * ph > DT_IMAGE_MAX_PIXELS) png_error(j.png, "image over 64 Mi pixels");
    if ((size_t)pw * ph * 3 > cap) {
        png_destroy_read_struct(&j.png, &j.info, NULL);
        return dt_error_set(DT_ERR_RANGE, "png: %ux%u needs %zu bytes, the buffer has %zu", pw, ph,
                            (size_t)pw * ph * 3, cap);
    }
    int gray16 = ct == PNG_COLOR_TYPE_GRAY && bd == 16;
    png_set_interlace_handling(j.png);
    if (!gray16) {
        if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(j.png);
        if (ct == PNG_COLOR_TYPE_GRAY && bd < 8) png_set_expand_gray_1_2_4_to_8(j.png);
        if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA)
            png_set_gray_to_rgb(j.png);
        if (bd == 16) png_set_strip_16(j.png);
        png_set_strip_alpha(j.png);
    }
    png_read_update_info(j.png, j.info);
    size_t rb = png_get_rowbytes(j.png, j.info), want = gray16 ? (size_t)pw * 2 : (size_t)pw * 3;
    if (rb != want) png_error(j.png, "unexpected row size after the RGB transformations");
    rows = malloc((size_t)ph * sizeof *rows);
    if (gray16) tmp = malloc((size_t)ph * rb);
    if (!rows || (gray16 && !tmp)) png_error(j.png, "out of memory");
    uint8_t *base = gray16 ? tmp : rgb;
    for (uint32_t y = 0; y < ph; y++) rows[y] = base + (size_t)y * rb;
    png_read_image(j.png, rows);
    if (gray16) /* big-endian samples; Pillow's I;16 -> RGB clips to 255 */
        for (size_t i = 0; i < (size_t)pw * ph; i++) {
            uint8_t v = tmp[2 * i] ? 255 : tmp[2 * i + 1];
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = v;
        }
    free(rows);
    free(tmp);
    png_destroy_read_struct(&j.png, &j.info, NULL);
    *w = (int32_t)pw, *h = (int32_t)ph;
    return DT_OK;
}
