/* The loader on encoded-image datasets.
 *
 *   test_loader_images            unit checks on JPEGs/PNGs made here: batches independent of
 *                                 the prefetch threads (0 vs 3 threads, bit-equal), a resumed
 *                                 loader (cursor, seek) giving the same bits, every sample equal
 *                                 to the transform applied to the image decoded at the scale
 *                                 the DCT rule picks, eval shapes; an image that does not decode:
 *                                 stop names the record, skip uses the next record with the
 *                                 sample's own draws (corrupt payload blocks take the path of
 *                                 stored images, tested by corrupt_train.sh).
 *   test_loader_images dump DATASET OUT MODE SIZE BATCHES
 *                                 writes the first BATCHES batches of the loader (MODE: train,
 *                                 train-dct, eval, eval-dct) with each sample's geometry for
 *                                 tests/data/loader_images.py, which redoes every sample with
 *                                 Pillow + torchvision on the same boxes. */
#include <math.h>
#include "data/image_codec.h"
#include "data/image_transform.h"
#include "data_testutil.h"

static const float k_mean[3] = DT_IMAGENET_MEAN, k_std[3] = DT_IMAGENET_STD;

static void loader_cfg(dt_loader_config *c, int augment, int dct, int size, int threads) {
    dt_loader_config_default(c);
    c->batch_size = 4;
    c->drop_last = 1; /* 22 images: 5 whole batches per epoch */
    c->seed = 99;
    c->augment = augment;
    c->dct_scaling = dct;
    c->image_size = size;
    c->prefetch_threads = threads;
    c->jitter[0] = 0.4f, c->jitter[1] = 0.4f, c->jitter[2] = 0.4f;
    for (int i = 0; i < 3; i++) c->mean[i] = k_mean[i], c->std[i] = k_std[i];
}

/* ---- dump for the torchvision comparison ---- */

static int dump(const char *dir, const char *out, const char *mode, int size, int batches) {
    dt_dataset *d;
    if (dt_dataset_open(dir, 0, &d) != DT_OK) {
        fprintf(stderr, "%s\n", dt_last_error());
        return 1;
    }
    dt_loader_config c;
    int train = !strncmp(mode, "train", 5), dct = strstr(mode, "dct") != NULL;
    loader_cfg(&c, train, dct, size, 2);
    if (!train) c.shuffle = 0;
    c.jitter[0] = c.jitter[1] = c.jitter[2] = 0; /* jitter: checked against PIL in the unit */
    dt_loader *l;
    if (dt_loader_open(d, &c, &l) != DT_OK) {
        fprintf(stderr, "%s\n", dt_last_error());
        return 1;
    }
    dt_transform_cfg tc = {.size = size, .train = train, .resize = size * 8 / 7, .hflip = 1};
    tc.rrc = (dt_rrc_params)DT_RRC_DEFAULTS;
    FILE *f = fopen(out, "wb");
    int rc = f ? 0 : 1;
    for (int k = 0; k < batches && !rc; k++) {
        dt_batch b;
        if (dt_loader_next(l, &b) != DT_OK) {
            fprintf(stderr, "%s\n", dt_last_error());
            rc = 1;
            break;
        }
        for (int64_t i = 0; i < b.n; i++) {
            const uint8_t *bytes;
            size_t len;
            int32_t lab, w, h;
            dt_dataset_encoded(d, b.samples[i], &bytes, &len, &lab, &w, &h);
            dt_transform_plan p;
            dt_transform_plan_for(&tc, w, h, c.seed, (uint64_t)b.epoch, (uint64_t)b.samples[i], &p);
            int denom = dct && dt_image_format_of(bytes, len) == DT_IMAGE_JPEG
                            ? dt_transform_dct_denom(&p, 8)
                            : 1;
            int32_t rec[16] = {(int32_t)b.samples[i],
                               b.labels[i],
                               denom,
                               w,
                               h,
                               p.box.top,
                               p.box.left,
                               p.box.height,
                               p.box.width,
                               p.flip,
                               p.out_w,
                               p.out_h,
                               p.win_x,
                               p.win_y,
                               (int32_t)b.epoch,
                               0};
            fwrite(rec, 4, 16, f);
            fwrite(b.images + i * 3 * size * size, 4, (size_t)3 * size * size, f);
        }
    }
    if (f) fclose(f);
    dt_loader_close(l);
    dt_dataset_close(d);
    return rc;
}

/* ---- unit ---- */

static const char *g_tmp;
enum { N_IMG = 22 };

/* A photo-like image: gradients, a disc and noise, w x h. */
static void photo(uint8_t *px, int w, int h, int seed) {
    uint32_t r = 2463534242u ^ (uint32_t)seed * 2654435761u;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            r ^= r << 13, r ^= r >> 17, r ^= r << 5;
            int disc = (x - w / 2) * (x - w / 2) + (y - h / 3) * (y - h / 3) < w * h / 16;
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / w ^ (disc ? 0x80 : 0));
            p[1] = (uint8_t)(y * 255 / h + (int)(r & 15));
            p[2] = (uint8_t)((x + y + seed * 17) & 255);
        }
}

/* Image i: JPEG (PNG for every 5th) of varied size; record `garbage` (>= 0) holds bytes that
 * start like a JPEG and do not decode. */
static dt_status make(const char *dir, int garbage) {
    dt_dataset_spec sp = {.kind = DT_DATA_ENCODED,
                          .classes = 3,
                          .name = "photos",
                          .split = "train",
                          .shard_bytes = 64 << 10};
    dt_dataset_writer *w;
    dt_status st = dt_dataset_writer_open(dir, &sp, &w);
    if (st) return st;
    uint8_t *px = malloc(900 * 700 * 3);
    for (int i = 0; i < N_IMG && !st; i++) {
        int iw = 40 + (i * 97) % 860, ih = 30 + (i * 61) % 660;
        photo(px, iw, ih, i);
        uint8_t *enc = NULL;
        size_t len = 0;
        if (i == garbage) {
            static uint8_t junk[600];
            for (int k = 0; k < 600; k++) junk[k] = (uint8_t)(k * 31 + 7);
            junk[0] = 0xFF, junk[1] = 0xD8, junk[2] = 0xFF;
            st = dt_dataset_writer_add_encoded(w, junk, sizeof junk, i % 3, iw, ih, 1);
            continue;
        }
        st = dt_image_encode_jpeg(px, iw, ih, 90, &enc, &len);
        if (!st) st = dt_dataset_writer_add_encoded(w, enc, len, i % 3, iw, ih, 1);
        free(enc);
    }
    free(px);
    if (st) {
        dt_dataset_writer_abort(w);
        return st;
    }
    return dt_dataset_writer_close(w);
}

/* The first `nb` batches (images and labels) into buf/labels. */
static dt_status read_batches(dt_loader *l, int nb, float *buf, int32_t *labels, int64_t per) {
    for (int k = 0; k < nb; k++) {
        dt_batch b;
        dt_status st = dt_loader_next(l, &b);
        if (st) return st;
        memcpy(buf + k * b.n * per, b.images, (size_t)(b.n * per) * 4);
        memcpy(labels + k * b.n, b.labels, (size_t)b.n * 4);
    }
    return DT_OK;
}

/* Sample `id` of `epoch` as the loader's parts make it: decode at the rule's scale, then the
 * transform; compared with what the loader wrote. */
static float expect_diff(const dt_dataset *d, const dt_loader_config *c, int64_t id, int64_t src,
                         int64_t epoch, const float *got, int *denom_out) {
    const uint8_t *bytes;
    size_t len;
    int32_t lab, w, h, dw, dh;
    dt_dataset_encoded(d, src, &bytes, &len, &lab, &w, &h);
    dt_transform_cfg tc = {
        .size = c->image_size, .train = c->augment, .resize = c->image_size * 8 / 7, .hflip = 1};
    tc.rrc = (dt_rrc_params)DT_RRC_DEFAULTS;
    tc.jitter = (dt_jitter_params){c->jitter[0], c->jitter[1], c->jitter[2]};
    dt_norm_lut_init(&tc.norm, k_mean, k_std);
    dt_transform_plan p;
    dt_transform_plan_for(&tc, w, h, c->seed, (uint64_t)epoch, (uint64_t)id, &p);
    int denom = c->dct_scaling ? dt_transform_dct_denom(&p, 8) : 1;
    *denom_out = denom;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    dt_image_decode(bytes, len, denom, rgb, (size_t)w * h * 3, &dw, &dh);
    /* the box the scaled image is cropped with, by the rule docs/data.md states */
    dt_box b0 = p.box;
    if (denom > 1) {
        int x1 = (b0.left + b0.width + denom - 1) / denom,
            y1 = (b0.top + b0.height + denom - 1) / denom;
        p.box = (dt_box){b0.top / denom, b0.left / denom, (y1 > dh ? dh : y1) - b0.top / denom,
                         (x1 > dw ? dw : x1) - b0.left / denom};
    }
    int s = c->image_size;
    float *want = malloc((size_t)3 * s * s * 4);
    size_t sb = dt_transform_plan_scratch(&tc, &p);
    void *scr = malloc(sb);
    dt_status st = dt_transform_run(&tc, &p, rgb, dw, dh, dw * 3, c->seed, (uint64_t)epoch,
                                    (uint64_t)id, want, scr, sb);
    float worst = st ? INFINITY : 0;
    for (int64_t k = 0; !st && k < (int64_t)3 * s * s; k++)
        worst = fmaxf(worst, fabsf(want[k] - got[k]));
    free(rgb), free(want), free(scr);
    return worst;
}

static void test_batches(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/photos", g_tmp);
    CHECK_OK(make(dir, -1));
    dt_dataset *d = NULL;
    CHECK_OK(dt_dataset_open(dir, 0, &d));
    if (!d) return;
    for (int dct = 0; dct <= 1; dct++) {
        const int S = 48, NB = 10; /* 10 batches of 4: into the second epoch (5 per epoch) */
        const int64_t per = 3 * S * S;
        float *a = malloc((size_t)(NB * 4 * per) * 4), *b = malloc((size_t)(NB * 4 * per) * 4);
        int32_t la[NB * 4], lb[NB * 4];
        dt_loader_config c0, c3;
        loader_cfg(&c0, 1, dct, S, 0);
        loader_cfg(&c3, 1, dct, S, 3);
        dt_loader *l0 = NULL, *l3 = NULL;
        CHECK_OK(dt_loader_open(d, &c0, &l0));
        CHECK_OK(dt_loader_open(d, &c3, &l3));
        if (!l0 || !l3) return;
        int c, h, w;
        dt_loader_image_shape(l0, &c, &h, &w);
        CHECK(c == 3 && h == S && w == S, "sample shape %dx%dx%d", c, h, w);
        CHECK_OK(read_batches(l0, NB, a, la, per));
        CHECK_OK(read_batches(l3, NB, b, lb, per));
        CHECK(!memcmp(a, b, (size_t)(NB * 4 * per) * 4) && !memcmp(la, lb, sizeof la),
              "dct %d: 0 and 3 prefetch threads give the same bits", dct);
        /* each sample against the parts; the sample ids from a fresh loader's batches */
        dt_loader_close(l3);
        CHECK_OK(dt_loader_open(d, &c0, &l3));
        float worst = 0;
        int scaled = 0, labels_ok = 1;
        for (int k = 0; k < NB; k++) {
            dt_batch bt;
            CHECK_OK(dt_loader_next(l3, &bt));
            for (int64_t i = 0; i < bt.n; i++) {
                int denom;
                float e = expect_diff(d, &c0, bt.samples[i], bt.samples[i], bt.epoch,
                                      a + (k * 4 + i) * per, &denom);
                worst = fmaxf(worst, e);
                scaled += denom > 1;
                labels_ok &= la[k * 4 + i] == (int32_t)(bt.samples[i] % 3);
            }
        }
        CHECK(worst == 0 && labels_ok, "dct %d: every sample equals decode + transform (worst %g)",
              dct, (double)worst);
        CHECK(dct ? scaled > 5 : scaled == 0, "dct %d: %d of %d samples decoded scaled", dct,
              scaled, NB * 4);
        /* resume: a new loader seeking to the cursor after 3 batches gives batches 3.. */
        dt_loader_close(l3);
        CHECK_OK(dt_loader_open(d, &c3, &l3));
        float *tmp = malloc((size_t)(3 * 4 * per) * 4);
        int32_t lt[12];
        CHECK_OK(read_batches(l3, 3, tmp, lt, per));
        dt_data_cursor cur;
        dt_loader_cursor(l3, &cur);
        dt_loader_close(l3);
        CHECK_OK(dt_loader_open(d, &c3, &l3));
        CHECK_OK(dt_loader_seek(l3, &cur));
        CHECK_OK(read_batches(l3, NB - 3, b, lb, per));
        CHECK(!memcmp(a + 3 * 4 * per, b, (size_t)((NB - 3) * 4 * per) * 4),
              "dct %d: resumed at batch 3, the same bits to batch %d", dct, NB - 1);
        free(tmp);
        dt_loader_close(l0);
        dt_loader_close(l3);
        free(a), free(b);
    }
    /* eval: Resize + CenterCrop, every sample as the parts make it */
    dt_loader_config ce;
    loader_cfg(&ce, 0, 1, 40, 1);
    ce.shuffle = 0;
    dt_loader *le = NULL;
    CHECK_OK(dt_loader_open(d, &ce, &le));
    if (le) {
        dt_batch bt;
        float worst = 0;
        for (int k = 0; k < 5; k++) {
            CHECK_OK(dt_loader_next(le, &bt));
            for (int64_t i = 0; i < bt.n; i++) {
                int denom;
                worst = fmaxf(worst, expect_diff(d, &ce, bt.samples[i], bt.samples[i], bt.epoch,
                                                 bt.images + i * 3 * 40 * 40, &denom));
            }
        }
        CHECK(worst == 0, "eval: every sample equals decode + Resize + CenterCrop (worst %g)",
              (double)worst);
        dt_loader_close(le);
    }
    /* refusals */
    dt_loader_config bad;
    loader_cfg(&bad, 1, 1, 48, 0);
    bad.crop_scale[0] = 0;
    dt_loader *lb2 = NULL;
    tu_check_error("crop scale 0", dt_loader_open(d, &bad, &lb2), "loader:", "scale");
    loader_cfg(&bad, 0, 1, 48, 0);
    bad.resize = 40;
    tu_check_error("eval resize below size", dt_loader_open(d, &bad, &lb2), "loader:", "resize");
    dt_dataset_close(d);
}

static void test_corrupt(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/garbage", g_tmp);
    const int G = 6;
    CHECK_OK(make(dir, G));
    dt_dataset *d = NULL;
    CHECK_OK(dt_dataset_open(dir, 0, &d));
    if (!d) return;
    dt_loader_config c;
    loader_cfg(&c, 1, 1, 32, 1);
    c.shuffle = 0, c.batch_size = 8;
    dt_loader *l = NULL;
    dt_batch b;
    CHECK_OK(dt_loader_open(d, &c, &l));
    tu_check_error("undecodable image, on_corrupt=stop", dt_loader_next(l, &b),
                   "image 6 does not decode", "jpeg");
    dt_loader_close(l);
    c.skip_corrupt = 1;
    int denom;
    CHECK_OK(dt_loader_open(d, &c, &l));
    CHECK_OK(dt_loader_next(l, &b)); /* batch 0: samples 0..7, sample 6 at place 6 */
    CHECK(b.labels[G] == (G + 1) % 3 &&
              expect_diff(d, &c, G, G + 1, 0, b.images + G * 3 * 32 * 32, &denom) == 0,
          "skip: sample %d is record %d with sample %d's draws (label %d)", G, G + 1, G,
          b.labels[G]);
    dt_loader_close(l);
    dt_dataset_close(d);
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "dump"))
        return dump(argv[2], argv[3], argv[4], atoi(argv[5]), atoi(argv[6]));
    char tmp[4096];
    g_tmp = tu_tempdir(tmp, sizeof tmp, "loader_images");
    if (!g_tmp) return 1;
    test_batches();
    test_corrupt();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_tmp);
    return dt_test_finish("test_loader_images");
}
