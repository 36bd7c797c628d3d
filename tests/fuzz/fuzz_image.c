/* Fuzz target: the image codec's probe and decoders (src/data/image_codec.c, image_png.c:
 * TurboJPEG, libpng, libwebp, and the EXIF orientation parser), as an image import or the
 * loader meets a file.
 *
 * Input: one control byte, then the file. Control bits 0-1: scale 1/1, 1/2, 1/4, 1/8; bit 2:
 * give decode a buffer one byte short of the probed size (it must refuse, not overrun).
 * Entry points: dt_image_probe, dt_image_decode. A probe that succeeds bounds the decode: the
 * buffer is exactly the size dt_image_decoded_size says (capped at 16 Mi pixels here), and a
 * decode that succeeds must return that size. */
#include <stdio.h>
#include <stdlib.h>
#include "data/image_codec.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    int scale = 1 << (ctl & 3);
    /* a copy of exactly the file's bytes, so a read past the end is caught */
    size_t n = size - 1;
    uint8_t *f = malloc(n ? n : 1);
    if (!f) abort();
    for (size_t i = 0; i < n; i++) f[i] = data[1 + i];
    dt_image_info in;
    if (dt_image_probe(f, n, &in) == DT_OK) {
        int32_t w, h, dw = 0, dh = 0;
        dt_image_decoded_size(&in, scale, &w, &h);
        if ((int64_t)w * h <= ((int64_t)1 << 24)) {
            size_t cap = (size_t)w * h * 3 - ((ctl & 4) ? 1 : 0);
            uint8_t *px = malloc(cap ? cap : 1);
            if (!px) abort();
            dt_status st = dt_image_decode(f, n, scale, px, cap, &dw, &dh);
            if (st == DT_OK && ((ctl & 4) || dw != w || dh != h)) {
                fprintf(stderr, "decode gave %dx%d into %zu bytes, probe said %dx%d\n", dw, dh, cap,
                        w, h);
                abort();
            }
            free(px);
        }
    } else {
        /* a file that does not probe must not decode either */
        uint8_t px[3 * 64];
        int32_t w, h;
        if (dt_image_decode(f, n, scale, px, sizeof px, &w, &h) == DT_OK) {
            fprintf(stderr, "decoded a file that does not probe\n");
            abort();
        }
    }
    free(f);
    return 0;
}
