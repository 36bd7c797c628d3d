/* Random streams, RandomResizedCrop boxes, ToTensor + Normalize and the whole per-image
 * transform (see image_transform.h; the resize is in image_resize.c, ColorJitter in
 * image_jitter.c). */
#include <math.h>
#include <string.h>
#include "data/image_transform.h"
#include "dtrain/rng.h"

void dt_aug_rng_init(dt_aug_rng *r, uint64_t seed, uint64_t epoch, uint64_t index, int purpose) {
    r->key = seed;
    r->ctr[0] = (uint32_t)index;
    r->ctr[1] = (uint32_t)(index >> 32);
    r->ctr[2] = (uint32_t)epoch;
    r->ctr[3] = (uint32_t)purpose << 24; /* low 24 bits: block number */
    r->pos = 4;
}

uint32_t dt_aug_rng_next(dt_aug_rng *r) {
    if (r->pos == 4) {
        dt_philox4x32(r->key, r->ctr, r->buf);
        r->ctr[3]++;
        r->pos = 0;
    }
    return r->buf[r->pos++];
}

float dt_aug_rng_uniform(dt_aug_rng *r, float lo, float hi) {
    return lo + dt_rng_u01(dt_aug_rng_next(r)) * (hi - lo);
}

int dt_aug_rng_below(dt_aug_rng *r, int n) {
    return (int)(((uint64_t)dt_aug_rng_next(r) * (uint32_t)n) >> 32);
}

int dt_rrc_box_from(const dt_rrc_params *p, int img_w, int img_h, const dt_rrc_source *src,
                    dt_box *out) {
    /* torchvision keeps log(ratio) in a f32 tensor and takes exp in f32 too; the area and the
     * square roots are Python floats (double); round() rounds half to even (rint). */
    double area = (double)img_w * img_h;
    float lr0 = logf((float)p->ratio_lo), lr1 = logf((float)p->ratio_hi);
    for (int t = 0; t < 10; t++) {
        double target =
            area * (double)src->uniform(src->ctx, (float)p->scale_lo, (float)p->scale_hi);
        double aspect = (double)expf(src->uniform(src->ctx, lr0, lr1));
        double wd = rint(sqrt(target * aspect)), hd = rint(sqrt(target / aspect));
        /* compared as doubles: NaN from bad parameters fails and falls back */
        if (wd >= 1 && wd <= img_w && hd >= 1 && hd <= img_h) {
            int w = (int)wd, h = (int)hd;
            out->top = src->below(src->ctx, img_h - h + 1);
            out->left = src->below(src->ctx, img_w - w + 1);
            out->height = h;
            out->width = w;
            return 0;
        }
    }
    double in_ratio = (double)img_w / img_h;
    double rmin = fmin(p->ratio_lo, p->ratio_hi), rmax = fmax(p->ratio_lo, p->ratio_hi);
    int w = img_w, h = img_h;
    if (in_ratio < rmin)
        h = (int)fmin(img_h, fmax(1, rint(w / rmin)));
    else if (in_ratio > rmax)
        w = (int)fmin(img_w, fmax(1, rint(h * rmax)));
    out->top = (img_h - h) / 2;
    out->left = (img_w - w) / 2;
    out->height = h;
    out->width = w;
    return 1;
}

static float rng_uniform_cb(void *ctx, float lo, float hi) {
    return dt_aug_rng_uniform(ctx, lo, hi);
}
static int rng_below_cb(void *ctx, int n) {
    return dt_aug_rng_below(ctx, n);
}

int dt_rrc_box(const dt_rrc_params *p, int img_w, int img_h, uint64_t seed, uint64_t epoch,
               uint64_t index, dt_box *out, int *flip) {
    dt_aug_rng r;
    dt_aug_rng_init(&r, seed, epoch, index, DT_AUG_BOX);
    dt_rrc_source s = {rng_uniform_cb, rng_below_cb, &r};
    int fb = dt_rrc_box_from(p, img_w, img_h, &s, out);
    if (flip) {
        dt_aug_rng_init(&r, seed, epoch, index, DT_AUG_FLIP);
        *flip = (int)(dt_aug_rng_next(&r) >> 31);
    }
    return fb;
}

dt_status dt_norm_lut_init(dt_norm_lut *l, const float mean[3], const float std[3]) {
    for (int c = 0; c < 3; c++) {
        if (!(std[c] != 0.0f) || !isfinite(std[c]) || !isfinite(mean[c]))
            return dt_error_set(DT_ERR_INVALID,
                                "image_transform: normalize channel %d: mean %g std %g (std must "
                                "be finite and non-zero)",
                                c, (double)mean[c], (double)std[c]);
        /* ToTensor divides by 255 in f32, Normalize subtracts then divides in f32. */
        for (int v = 0; v < 256; v++) l->v[c][v] = ((float)v / 255.0f - mean[c]) / std[c];
    }
    return DT_OK;
}

void dt_normalize_chw(const uint8_t *hwc, int w, int h, int stride, const dt_norm_lut *l, int flip,
                      float *out) {
    size_t plane = (size_t)w * h;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = hwc + (size_t)y * stride;
        float *o0 = out + (size_t)y * w, *o1 = o0 + plane, *o2 = o1 + plane;
        if (flip) {
            for (int x = 0; x < w; x++) {
                const uint8_t *p = row + (size_t)(w - 1 - x) * 3;
                o0[x] = l->v[0][p[0]];
                o1[x] = l->v[1][p[1]];
                o2[x] = l->v[2][p[2]];
            }
        } else {
            for (int x = 0; x < w; x++) {
                const uint8_t *p = row + (size_t)x * 3;
                o0[x] = l->v[0][p[0]];
                o1[x] = l->v[1][p[1]];
                o2[x] = l->v[2][p[2]];
            }
        }
    }
}

/* Eval geometry: the resized size and the centre window (torchvision's CenterCrop offsets
 * int(round((side - size) / 2.0)), half to even). */
static void eval_geometry(const dt_transform_cfg *cfg, int img_w, int img_h, int *rw, int *rh,
                          int *wx, int *wy) {
    dt_resize_short_side(img_w, img_h, cfg->resize, rw, rh);
    *wx = (int)rint((*rw - cfg->size) / 2.0);
    *wy = (int)rint((*rh - cfg->size) / 2.0);
}

static size_t sample_bytes(const dt_transform_cfg *cfg) {
    return ((size_t)cfg->size * cfg->size * 3 + 63) & ~(size_t)63;
}

size_t dt_transform_scratch(const dt_transform_cfg *cfg, int max_w, int max_h) {
    if (cfg->size < 1 || max_w < 1 || max_h < 1) return 0;
    int s = cfg->size;
    if (cfg->train) return sample_bytes(cfg) + dt_resize_scratch(max_w, max_h, s, s, s, s);
    /* The resized side is at least resize - 1 per input pixel of the longer side (truncation of
     * size * long / short), so (resize - 1) bounds the filter widths. */
    int m = max_w > max_h ? max_w : max_h, r = cfg->resize > 1 ? cfg->resize - 1 : 1;
    return sample_bytes(cfg) + dt_resize_scratch(m, m, r, r, s, s);
}

size_t dt_transform_plan_scratch(const dt_transform_cfg *cfg, const dt_transform_plan *p) {
    int s = cfg->size;
    return sample_bytes(cfg) +
           dt_resize_scratch(p->box.width, p->box.height, p->out_w, p->out_h, s, s);
}

dt_status dt_transform_check(const dt_transform_cfg *cfg) {
    if (cfg->size < 1 || (!cfg->train && cfg->resize < cfg->size))
        return dt_error_set(DT_ERR_INVALID,
                            "image_transform: size %d, resize %d (need size >= 1 and, for eval, "
                            "resize >= size)",
                            cfg->size, cfg->resize);
    const dt_rrc_params *p = &cfg->rrc;
    if (cfg->train &&
        !(p->scale_lo > 0 && p->scale_lo <= p->scale_hi && p->ratio_lo > 0 &&
          p->ratio_lo <= p->ratio_hi && isfinite(p->scale_hi) && isfinite(p->ratio_hi)))
        return dt_error_set(DT_ERR_INVALID,
                            "image_transform: RandomResizedCrop scale (%g, %g) ratio (%g, %g): "
                            "need 0 < lo <= hi, finite",
                            p->scale_lo, p->scale_hi, p->ratio_lo, p->ratio_hi);
    const dt_jitter_params *j = &cfg->jitter;
    if (!(j->brightness >= 0 && j->contrast >= 0 && j->saturation >= 0 &&
          isfinite(j->brightness + j->contrast + j->saturation)))
        return dt_error_set(DT_ERR_INVALID,
                            "image_transform: jitter brightness %g contrast %g saturation %g: "
                            "need finite values >= 0",
                            (double)j->brightness, (double)j->contrast, (double)j->saturation);
    return DT_OK;
}

void dt_transform_plan_for(const dt_transform_cfg *cfg, int img_w, int img_h, uint64_t seed,
                           uint64_t epoch, uint64_t index, dt_transform_plan *p) {
    int s = cfg->size;
    memset(p, 0, sizeof *p);
    if (cfg->train) {
        dt_rrc_box(&cfg->rrc, img_w, img_h, seed, epoch, index, &p->box, &p->flip);
        p->flip &= cfg->hflip != 0;
        p->out_w = p->out_h = s;
    } else {
        p->box = (dt_box){0, 0, img_h, img_w};
        eval_geometry(cfg, img_w, img_h, &p->out_w, &p->out_h, &p->win_x, &p->win_y);
    }
}

int dt_transform_dct_denom(const dt_transform_plan *p, int max_denom) {
    int d = 1;
    /* the box at 1/(2d) must still cover the resized size: never an upscale after scaling */
    while (2 * d <= max_denom && 2 * d <= 8 && (int64_t)p->box.width >= (int64_t)2 * d * p->out_w &&
           (int64_t)p->box.height >= (int64_t)2 * d * p->out_h)
        d *= 2;
    return d;
}

void dt_transform_plan_scale(dt_transform_plan *p, int img_w, int img_h, int denom) {
    if (denom <= 1) return;
    /* the decoded image is ceil(side / denom) (libjpeg's scaled output); the box keeps every
     * pixel it covered: [floor(x0 / d), ceil(x1 / d)) */
    int sw = (img_w + denom - 1) / denom, sh = (img_h + denom - 1) / denom;
    int x0 = p->box.left / denom, y0 = p->box.top / denom;
    int x1 = (p->box.left + p->box.width + denom - 1) / denom;
    int y1 = (p->box.top + p->box.height + denom - 1) / denom;
    if (x1 > sw) x1 = sw;
    if (y1 > sh) y1 = sh;
    p->box = (dt_box){y0, x0, y1 - y0, x1 - x0};
}

dt_status dt_transform_run(const dt_transform_cfg *cfg, const dt_transform_plan *p,
                           const uint8_t *img, int img_w, int img_h, int stride, uint64_t seed,
                           uint64_t epoch, uint64_t index, float *out, void *scratch,
                           size_t scratch_bytes) {
    int s = cfg->size;
    if (!img || !out)
        return dt_error_set(DT_ERR_INVALID, "image_transform: %s is NULL", img ? "out" : "img");
    if (img_w < 1 || img_h < 1)
        return dt_error_set(DT_ERR_SHAPE, "image_transform: empty image %dx%d", img_w, img_h);
    size_t sb = sample_bytes(cfg);
    if (!scratch || scratch_bytes < sb)
        return dt_error_set(DT_ERR_INVALID, "image_transform: scratch of %zu bytes, %zu needed",
                            scratch_bytes, sb);
    uint8_t *sample = scratch; /* [s, s, 3] */
    dt_status st = dt_resize_bilinear_aa(img, img_w, img_h, stride, p->box, p->out_w, p->out_h,
                                         p->win_x, p->win_y, s, s, sample, s * 3,
                                         (char *)scratch + sb, scratch_bytes - sb);
    if (st != DT_OK) return st;
    dt_jitter_params j = cfg->jitter;
    if (cfg->train && (j.brightness > 0 || j.contrast > 0 || j.saturation > 0)) {
        dt_aug_rng r;
        dt_jitter_draw d;
        dt_aug_rng_init(&r, seed, epoch, index, DT_AUG_JITTER);
        dt_jitter_sample(&j, &r, &d);
        dt_jitter_apply(&d, sample, s, s, s * 3);
    }
    dt_normalize_chw(sample, s, s, s * 3, &cfg->norm, p->flip, out);
    return DT_OK;
}

dt_status dt_transform_apply(const dt_transform_cfg *cfg, const uint8_t *img, int img_w, int img_h,
                             int stride, uint64_t seed, uint64_t epoch, uint64_t index, float *out,
                             void *scratch, size_t scratch_bytes) {
    dt_status cs = dt_transform_check(cfg);
    if (cs != DT_OK) return cs;
    if (!img || !out)
        return dt_error_set(DT_ERR_INVALID, "image_transform: %s is NULL", img ? "out" : "img");
    if (img_w < 1 || img_h < 1)
        return dt_error_set(DT_ERR_SHAPE, "image_transform: empty image %dx%d", img_w, img_h);
    dt_transform_plan p;
    dt_transform_plan_for(cfg, img_w, img_h, seed, epoch, index, &p);
    return dt_transform_run(cfg, &p, img, img_w, img_h, stride, seed, epoch, index, out, scratch,
                            scratch_bytes);
}
