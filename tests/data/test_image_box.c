/* Decoding a crop's part of a JPEG (dt_image_decode_jpeg_box) against the whole decode
 * (dt_image_decode) at the same scale: every pixel of the box equal, for baseline and progressive
 * JPEGs, 4:4:4, 4:2:2, 4:4:0, 4:2:0 and grayscale, at 1/1, 1/2, 1/4 and 1/8, over random boxes
 * and those touching each edge or one pixel wide. The part covers the box and lies inside the
 * image. Files the path does not take (PNG, an EXIF orientation other than 1) come back
 * undecoded; a truncated file, a box outside the image and a small buffer are refused with a
 * message. JPEGs are written here by TurboJPEG from smooth-plus-noise content. */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include "data/image_codec.h"
#include "harness.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* A photo-like RGB8 image: gradients, a few edges, noise. */
static uint8_t *content(int w, int h) {
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                int v = (x * (c + 1) * 255) / w / 2 + (y * 255) / h / 3 +
                        ((x / 17 + y / 23) % 2) * 40 + (int)(rnd() % 25);
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v > 255 ? 255 : v);
            }
    return p;
}

static uint8_t *encode(const uint8_t *rgb, int w, int h, int samp, int progressive,
                       unsigned long *len) {
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    *len = 0;
    int rc = tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &out, len, samp, 88,
                         progressive ? TJFLAG_PROGRESSIVE : 0);
    CHECK(rc == 0, "tjCompress2: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    uint8_t *copy = malloc(*len); /* out of TurboJPEG's allocator into ours */
    memcpy(copy, out, *len);
    tjFree(out);
    return copy;
}

/* The box (x, y, bw, bh) of the scaled image through both paths: equal pixels. */
static int compare_box(const uint8_t *jpg, size_t len, int d, const uint8_t *whole, int fw, int fh,
                       int x, int y, int bw, int bh, uint8_t *buf, size_t cap) {
    dt_image_part part;
    dt_status st = dt_image_decode_jpeg_box(jpg, len, d, x, y, bw, bh, buf, cap, &part);
    if (st || !part.decoded || part.full_w != fw || part.full_h != fh || part.x > x || part.y > y ||
        part.x + part.w < x + bw || part.y + part.h < y + bh || part.x < 0 || part.y < 0 ||
        part.x + part.w > fw || part.y + part.h > fh)
        return CHECK(0, "1/%d box %d,%d %dx%d: status %d decoded %d, part %d,%d %dx%d of %dx%d", d,
                     x, y, bw, bh, (int)st, part.decoded, part.x, part.y, part.w, part.h,
                     part.full_w, part.full_h);
    for (int r = 0; r < bh; r++) {
        const uint8_t *a = buf + ((size_t)(y - part.y + r) * part.w + (x - part.x)) * 3;
        const uint8_t *b = whole + ((size_t)(y + r) * fw + x) * 3;
        if (memcmp(a, b, (size_t)bw * 3))
            return CHECK(0, "1/%d box %d,%d %dx%d: row %d differs from the whole decode", d, x, y,
                         bw, bh, y + r);
    }
    return 1;
}

static void test_equal_to_whole(void) {
    const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_440, TJSAMP_420, TJSAMP_GRAY};
    const char *names[] = {"4:4:4", "4:2:2", "4:4:0", "4:2:0", "gray"};
    const int sizes[][2] = {{173, 131}, {640, 427}};
    for (int si = 0; si < 2; si++) {
        int w = sizes[si][0], h = sizes[si][1];
        uint8_t *rgb = content(w, h);
        for (int s = 0; s < 5; s++)
            for (int prog = 0; prog < 2; prog++) {
                unsigned long len;
                uint8_t *jpg = encode(rgb, w, h, samps[s], prog, &len);
                int boxes = 0, good = 0;
                for (int d = 1; d <= 8; d *= 2) {
                    int fw = (w + d - 1) / d, fh = (h + d - 1) / d;
                    size_t cap = (size_t)fw * fh * 3;
                    uint8_t *whole = malloc(cap), *buf = malloc(cap);
                    int32_t dw, dh;
                    CHECK_OK(dt_image_decode(jpg, len, d, whole, cap, &dw, &dh));
                    CHECK(dw == fw && dh == fh, "whole decode %dx%d at 1/%d", dw, dh, d);
                    /* edges, corners, one-pixel boxes, then random ones */
                    int fixed[][4] = {{0, 0, fw, fh},
                                      {0, 0, 1, 1},
                                      {fw - 1, fh - 1, 1, 1},
                                      {0, fh / 2, fw, 1},
                                      {fw / 2, 0, 1, fh},
                                      {fw / 3, fh / 3, fw / 3, fh / 3},
                                      {0, fh - fh / 4, fw / 4, fh / 4}};
                    for (int k = 0; k < 7 + 40; k++) {
                        int x, y, bw, bh;
                        if (k < 7) {
                            x = fixed[k][0], y = fixed[k][1], bw = fixed[k][2], bh = fixed[k][3];
                            if (bw < 1) bw = 1;
                            if (bh < 1) bh = 1;
                        } else {
                            bw = 1 + (int)(rnd() % (unsigned)fw),
                            bh = 1 + (int)(rnd() % (unsigned)fh);
                            x = (int)(rnd() % (unsigned)(fw - bw + 1));
                            y = (int)(rnd() % (unsigned)(fh - bh + 1));
                        }
                        boxes++;
                        good += compare_box(jpg, len, d, whole, fw, fh, x, y, bw, bh, buf, cap);
                    }
                    free(whole), free(buf);
                }
                printf("  %dx%d %s%s: %d of %d boxes equal the whole decode\n", w, h, names[s],
                       prog ? " progressive" : "", good, boxes);
                free(jpg);
            }
        free(rgb);
    }
}

/* APP1 Exif with orientation `o` inserted after SOI (little-endian TIFF, one IFD entry). */
static uint8_t *with_orientation(const uint8_t *jpg, size_t len, int o, size_t *out_len) {
    const uint8_t app1[] = {0xFF, 0xE1, 0x00, 0x22, 'E',        'x', 'i', 'f', 0,    0,    'I', 'I',
                            42,   0,    8,    0,    0,          0,   1,   0,   0x12, 0x01, 3,   0,
                            1,    0,    0,    0,    (uint8_t)o, 0,   0,   0,   0,    0,    0,   0};
    *out_len = len + sizeof app1;
    uint8_t *b = malloc(*out_len);
    memcpy(b, jpg, 2);
    memcpy(b + 2, app1, sizeof app1);
    memcpy(b + 2 + sizeof app1, jpg + 2, len - 2);
    return b;
}

static void test_not_taken_and_errors(void) {
    int w = 96, h = 64;
    uint8_t *rgb = content(w, h);
    unsigned long len;
    uint8_t *jpg = encode(rgb, w, h, TJSAMP_420, 0, &len);
    size_t cap = (size_t)w * h * 3;
    uint8_t *buf = malloc(cap);
    dt_image_part part;
    /* EXIF orientation 6: the displayed image is rotated; the whole decode's path takes it */
    size_t olen;
    uint8_t *rot = with_orientation(jpg, len, 6, &olen);
    dt_image_info info;
    CHECK_OK(dt_image_probe(rot, olen, &info));
    CHECK(info.orientation == 6, "the test's Exif segment reads as orientation %d",
          info.orientation);
    CHECK_OK(dt_image_decode_jpeg_box(rot, olen, 1, 2, 2, 10, 10, buf, cap, &part));
    CHECK(!part.decoded, "orientation 6: not decoded here");
    free(rot);
    rot = with_orientation(jpg, len, 1, &olen);
    CHECK_OK(dt_image_decode_jpeg_box(rot, olen, 1, 2, 2, 10, 10, buf, cap, &part));
    CHECK(part.decoded, "an Exif orientation of 1: decoded here");
    free(rot);
    /* not a JPEG */
    const uint8_t png[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    CHECK_OK(dt_image_decode_jpeg_box(png, sizeof png, 1, 0, 0, 1, 1, buf, cap, &part));
    CHECK(!part.decoded, "PNG: not decoded here");
    /* refusals, each with a message naming what is wrong */
    dt_status st = dt_image_decode_jpeg_box(jpg, len, 1, 90, 0, 10, 10, buf, cap, &part);
    CHECK(st == DT_ERR_RANGE && strstr(dt_last_error(), "outside the 96x64 image"),
          "box outside: %d %s", (int)st, dt_last_error());
    st = dt_image_decode_jpeg_box(jpg, len, 1, 0, 0, w, h, buf, 100, &part);
    CHECK(st == DT_ERR_RANGE && strstr(dt_last_error(), "the buffer has 100"), "small buffer: %s",
          dt_last_error());
    st = dt_image_decode_jpeg_box(jpg, len, 3, 0, 0, 4, 4, buf, cap, &part);
    CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "1/3"), "scale 1/3: %s", dt_last_error());
    st = dt_image_decode_jpeg_box(jpg, len / 2, 1, 0, h - 10, w, 10, buf, cap, &part);
    CHECK(st == DT_ERR_FORMAT && !part.decoded && strstr(dt_last_error(), "jpeg: "),
          "truncated: %d %s", (int)st, dt_last_error());
    st = dt_image_decode_jpeg_box(jpg, 40, 1, 0, 0, 4, 4, buf, cap, &part);
    CHECK(st == DT_ERR_FORMAT && !part.decoded, "header cut: %d %s", (int)st, dt_last_error());
    free(buf), free(jpg), free(rgb);
}

int main(void) {
    test_equal_to_whole();
    test_not_taken_and_errors();
    return dt_test_finish("test_image_box");
}
