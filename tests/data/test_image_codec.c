/* Image codec parity with Pillow: tests/ref/ref_image_codec.py (run here with the venv python)
 * writes JPEG / PNG / WebP files and Pillow's RGB decoding of each (after exif_transpose and
 * convert("RGB"), and the DCT-scaled decodes of draft()); every one is decoded with
 * dt_image_decode and compared pixel by pixel: PNG and lossless WebP must be equal, JPEG and
 * lossy WebP too (the same libjpeg-turbo defaults, the same libwebp), with the largest
 * difference printed. Probe agrees with the decoded size. Truncated, bit-flipped and garbage
 * inputs give an error or a decode, never a crash (also under ASan); encode + resize round trip.
 *
 * usage: test_image_codec PYTHON SCRIPT WORKDIR   (exit 77 when PYTHON lacks Pillow / numpy) */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/file.h"
#include "data/image_codec.h"
#include "harness.h"

static char g_dir[4096];

static uint8_t *load(const char *name, size_t *len) {
    char *p = dt_path_join(g_dir, name);
    uint8_t *b = NULL;
    if (dt_read_file(p, 0, &b, len) != DT_OK) b = NULL;
    free(p);
    return b;
}

static int g_jpeg_max, g_jpeg_cases, g_jpeg_exact;

static void check_case(const char *name, int scale, int rw, int rh, int exact) {
    size_t len, rlen;
    char rname[512];
    snprintf(rname, sizeof rname, "%s.%d.rgb", name, scale);
    uint8_t *b = load(name, &len), *r = load(rname, &rlen);
    if (!CHECK(b && r && rlen == (size_t)rw * rh * 3, "%s: files", rname)) goto out;
    dt_image_info in;
    CHECK_OK(dt_image_probe(b, len, &in));
    int32_t pw, ph, w = 0, h = 0;
    dt_image_decoded_size(&in, scale, &pw, &ph);
    CHECK(pw == rw && ph == rh, "%s 1/%d: probe says %dx%d, Pillow %dx%d", name, scale, pw, ph, rw,
          rh);
    size_t cap = (size_t)rw * rh * 3;
    uint8_t *px = malloc(cap);
    dt_status st = dt_image_decode(b, len, scale, px, cap, &w, &h);
    if (CHECK(st == DT_OK && w == rw && h == rh, "%s 1/%d: decode %d (%s) %dx%d, want %dx%d", name,
              scale, (int)st, dt_last_error(), w, h, rw, rh)) {
        int maxd = 0;
        size_t ndiff = 0;
        for (size_t i = 0; i < cap; i++) {
            int d = abs((int)px[i] - (int)r[i]);
            if (d) ndiff++;
            if (d > maxd) maxd = d;
        }
        if (in.format == DT_IMAGE_JPEG) {
            g_jpeg_cases++;
            g_jpeg_exact += maxd == 0;
            if (maxd > g_jpeg_max) g_jpeg_max = maxd;
        }
        /* the goal and the result: equal for every format (Pillow uses the same libraries) */
        CHECK(maxd == 0, "%s 1/%d (%s): %zu of %zu values differ, max |diff| %d", name, scale,
              exact ? "exact" : "lossy", ndiff, cap, maxd);
        /* a buffer one byte short is refused */
        CHECK(dt_image_decode(b, len, scale, px, cap - 1, &w, &h) == DT_ERR_RANGE,
              "%s: short buffer", name);
    }
    free(px);
out:
    free(b);
    free(r);
}

/* Cut and damaged copies: errors with messages, or (bit flips in entropy data) some pixels;
 * never a crash. Truncation anywhere before the last 12 bytes must be an error (a PNG that lost
 * only its IEND chunk still decodes, as it does in Pillow). */
static void damage(const char *name) {
    size_t len;
    uint8_t *b = load(name, &len);
    if (!CHECK(b, "%s", name)) return;
    size_t cap = (size_t)1 << 22;
    uint8_t *px = malloc(cap), *c = malloc(len);
    int32_t w, h;
    int trunc_ok = 0, n_trunc = 0;
    for (size_t cut = 0; cut < len; cut += 1 + len / 23) {
        /* a copy of exactly `cut` bytes, so ASan sees any read past it */
        uint8_t *t = malloc(cut ? cut : 1);
        memcpy(t, b, cut);
        dt_image_info in;
        (void)dt_image_probe(t, cut, &in);
        dt_status st = dt_image_decode(t, cut, 1, px, cap, &w, &h);
        n_trunc++;
        if (st == DT_OK && cut + 12 < len) {
            trunc_ok++;
            printf("%s cut at %zu of %zu decoded\n", name, cut, len);
        } else if (st != DT_OK) {
            CHECK(*dt_last_error(), "%s cut at %zu: an error without a message", name, cut);
        }
        free(t);
    }
    CHECK(trunc_ok == 0, "%s: %d of %d truncated copies decoded without an error", name, trunc_ok,
          n_trunc);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < 60; k++) {
        memcpy(c, b, len);
        for (int f = 0; f < 1 + k % 4; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            c[(s >> 33) % len] ^= (uint8_t)(1u << ((s >> 20) & 7));
        }
        dt_image_info in;
        (void)dt_image_probe(c, len, &in);
        (void)dt_image_decode(c, len, 1 << (k % 4), px, cap, &w, &h);
    }
    free(px);
    free(c);
    free(b);
}

static void garbage(void) {
    uint8_t junk[64] = {0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x10, 'E',  'x',  'i',  'f',
                        0,    0,    'M',  'M',  0,    '*',  0xFF, 0xFF, 0xFF, 0xF0};
    uint8_t px[300];
    int32_t w, h;
    dt_image_info in;
    CHECK(dt_image_probe(junk, sizeof junk, &in) != DT_OK, "junk JPEG probes");
    CHECK(dt_image_decode(junk, sizeof junk, 1, px, sizeof px, &w, &h) != DT_OK, "junk JPEG");
    const uint8_t txt[] = "hello, this is not an image";
    CHECK(dt_image_probe(txt, sizeof txt, &in) == DT_ERR_FORMAT &&
              strstr(dt_last_error(), "not a JPEG, PNG or WebP"),
          "text: %s", dt_last_error());
    CHECK(dt_image_decode(txt, 0, 1, px, sizeof px, &w, &h) == DT_ERR_FORMAT, "empty input");
    CHECK(dt_image_decode(txt, sizeof txt, 3, px, sizeof px, &w, &h) == DT_ERR_INVALID,
          "scale 1/3 is refused");
}

static void encode_resize(void) {
    int w = 50, h = 30;
    uint8_t *rgb = malloc((size_t)w * h * 3), *back = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++)
        rgb[i] = (uint8_t)((i / 3 % w) * 2 + (i / 3 / w) * 2 + (i % 3) * 30);
    uint8_t *j;
    size_t jl;
    CHECK_OK(dt_image_encode_jpeg(rgb, w, h, 90, &j, &jl));
    dt_image_info in;
    int32_t dw = 0, dh = 0;
    CHECK_OK(dt_image_probe(j, jl, &in));
    CHECK(in.format == DT_IMAGE_JPEG && in.width == w && in.height == h, "encoded %dx%d", in.width,
          in.height);
    CHECK_OK(dt_image_decode(j, jl, 1, back, (size_t)w * h * 3, &dw, &dh));
    int maxd = 0;
    for (int i = 0; i < w * h * 3; i++)
        maxd = abs(rgb[i] - back[i]) > maxd ? abs(rgb[i] - back[i]) : maxd;
    CHECK(maxd < 12, "quality 90 round trip differs by %d", maxd);
    free(j);
    /* area resize 50x30 -> 25x15 of a 2x2-block image is the block means exactly */
    uint8_t small[25 * 15 * 3];
    CHECK_OK(dt_image_resize_area(rgb, w, h, small, 25, 15));
    int bad = 0;
    for (int y = 0; y < 15; y++)
        for (int x = 0; x < 25; x++)
            for (int c = 0; c < 3; c++) {
                int s = 0;
                for (int k = 0; k < 4; k++)
                    s += rgb[(((size_t)(2 * y + k / 2)) * w + 2 * x + k % 2) * 3 + c];
                int want = (s + 2) / 4; /* round half up, as the resize does */
                bad += small[(y * 25 + x) * 3 + c] != want;
            }
    CHECK(bad == 0, "area resize: %d values are not the 2x2 means", bad);
    free(rgb);
    free(back);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PYTHON SCRIPT WORKDIR\n", argv[0]);
        return 2;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import PIL, numpy' 2>/dev/null", argv[1]);
    if (system(cmd) != 0) {
        printf("skipped: %s has no Pillow / numpy (scripts/setup-venv.sh)\n", argv[1]);
        return 77;
    }
    snprintf(g_dir, sizeof g_dir, "%s/image_codec", argv[3]);
    dt_remove_tree(g_dir);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", argv[1], argv[2], g_dir);
    if (!CHECK(system(cmd) == 0, "%s failed", cmd)) return dt_test_finish("test_image_codec");
    char *cp = dt_path_join(g_dir, "cases.txt");
    FILE *f = fopen(cp, "r");
    free(cp);
    int n = 0;
    char name[256];
    int scale, w, h, exact;
    while (f && fscanf(f, "%255s %d %d %d %d", name, &scale, &w, &h, &exact) == 5) {
        check_case(name, scale, w, h, exact);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 100, "only %d reference cases", n);
    printf("jpeg: %d of %d decodes equal to Pillow's, max |diff| %d\n", g_jpeg_exact, g_jpeg_cases,
           g_jpeg_max);
    const char *dmg[] = {"j420_2.jpg",  "jprog_2.jpg",    "jexif6.jpg",  "p_rgba_0.png",
                         "p_pal_1.png", "p_gray16_0.png", "w_ll_0.webp", "w_lossya_1.webp"};
    for (size_t i = 0; i < sizeof dmg / sizeof *dmg; i++) damage(dmg[i]);
    garbage();
    encode_resize();
    return dt_test_finish("test_image_codec");
}
