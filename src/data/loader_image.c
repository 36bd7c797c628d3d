/* Encoded-image samples of the loader: one record's file bytes -> decoded RGB8 (JPEG at the DCT
 * scale the crop allows) -> RandomResizedCrop + flip (+ jitter) or Resize + CenterCrop ->
 * normalised f32 [3, size, size] written straight into the batch slot (see loader_image.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/dataset.h"
#include "data/image_codec.h"
#include "data/loader_image.h"

dt_status dt_enc_transform_cfg(const dt_loader_config *c, dt_transform_cfg *tc) {
    memset(tc, 0, sizeof *tc);
    tc->size = c->image_size > 0 ? c->image_size : 224;
    tc->train = c->augment != 0;
    /* torchvision's ImageNet recipe: Resize(256) + CenterCrop(224), i.e. size * 8 / 7 */
    tc->resize = c->resize > 0 ? c->resize : tc->size * 8 / 7;
    tc->hflip = c->hflip;
    tc->rrc =
        (dt_rrc_params){c->crop_scale[0], c->crop_scale[1], c->crop_ratio[0], c->crop_ratio[1]};
    tc->jitter = (dt_jitter_params){c->jitter[0], c->jitter[1], c->jitter[2]};
    if (tc->size > 8192 || tc->resize > 8192)
        return dt_error_set(DT_ERR_INVALID, "loader: image size %d, resize %d over 8192", tc->size,
                            tc->resize);
    dt_status st = dt_norm_lut_init(&tc->norm, c->mean, c->std);
    if (st == DT_OK) st = dt_transform_check(tc);
    if (st != DT_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "loader: %s", m);
    }
    return DT_OK;
}

/* Grows *buf to at least n bytes (64-byte aligned, so the resize's coefficient tables are). */
static dt_status grow(void **buf, size_t *cap, size_t n) {
    if (n <= *cap) return DT_OK;
    n = (n + n / 4 + 63) & ~(size_t)63; /* some headroom: fewer regrowths over varied sizes */
    void *p = aligned_alloc(64, n);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "loader: out of memory for %zu bytes of scratch", n);
    free(*buf);
    *buf = p, *cap = n;
    return DT_OK;
}

dt_status dt_enc_sample(const dt_dataset *d, const dt_transform_cfg *tc, int dct, uint64_t seed,
                        int64_t epoch, int64_t id, int64_t src, dt_enc_scratch *s, float *out,
                        int32_t *label, int *undecodable) {
    *undecodable = 0;
    const uint8_t *bytes;
    size_t len;
    int32_t w, h;
    dt_status st = dt_dataset_encoded(d, src, &bytes, &len, label, &w, &h);
    if (st) return st;
    /* the geometry from the full-size image, as torchvision sees it: the boxes' distribution
     * does not depend on the decode scale */
    dt_transform_plan p;
    dt_transform_plan_for(tc, w, h, seed, (uint64_t)epoch, (uint64_t)id, &p);
    int denom = 1;
    if (dct && dt_image_format_of(bytes, len) == DT_IMAGE_JPEG) {
        denom = dt_transform_dct_denom(&p, 8);
        dt_transform_plan_scale(&p, w, h, denom);
    }
    int32_t ew = (w + denom - 1) / denom, eh = (h + denom - 1) / denom, dw, dh;
    if ((st = grow((void **)&s->rgb, &s->rgb_cap, (size_t)ew * eh * 3)) ||
        (st = grow(&s->tx, &s->tx_cap, dt_transform_plan_scratch(tc, &p))))
        return st;
    /* A training crop smaller than the image: only the part of a JPEG it covers is decoded
     * (the same pixels, image_jpeg_box.c), and the box is moved into that part. */
    dt_image_part part = {0};
    if (tc->train && (p.box.width < ew || p.box.height < eh)) {
        st = dt_image_decode_jpeg_box(bytes, len, denom, p.box.left, p.box.top, p.box.width,
                                      p.box.height, s->rgb, s->rgb_cap, &part);
        if (st == DT_OK && part.decoded) {
            dw = part.full_w, dh = part.full_h;
            p.box.left -= part.x, p.box.top -= part.y;
        }
    }
    if (st == DT_OK && !part.decoded)
        st = dt_image_decode(bytes, len, denom, s->rgb, s->rgb_cap, &dw, &dh);
    if (st == DT_OK && (dw != ew || dh != eh))
        st = dt_error_set(DT_ERR_FORMAT, "decoded %dx%d, the manifest says %dx%d (at 1/%d)", dw, dh,
                          ew, eh, denom);
    if (st == DT_OK && part.decoded) dw = part.w, dh = part.h;
    if (st == DT_OK)
        st = dt_transform_run(tc, &p, s->rgb, dw, dh, dw * 3, seed, (uint64_t)epoch, (uint64_t)id,
                              out, s->tx, s->tx_cap);
    if (st) {
        char m[512];
        snprintf(m, sizeof m, "%s", dt_last_error());
        *undecodable = st != DT_ERR_NOMEM;
        return dt_error_set(st == DT_ERR_NOMEM ? st : DT_ERR_FORMAT,
                            "%s: image %" PRId64 " does not decode: %s", d->dir, src, m);
    }
    return DT_OK;
}

void dt_enc_scratch_free(dt_enc_scratch *s) {
    free(s->rgb);
    free(s->tx);
    s->rgb = NULL, s->tx = NULL, s->rgb_cap = s->tx_cap = 0;
}
