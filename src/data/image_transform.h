/* Image transforms for decoded photos (RGB8, HWC, any size) with torchvision's semantics on PIL
 * images: RandomResizedCrop's box sampling, PIL's antialiased bilinear resize, Resize(short
 * side) + CenterCrop, horizontal flip, ColorJitter's brightness / contrast / saturation, and
 * ToTensor + Normalize into f32 CHW.
 *
 * Randomness: every draw comes from counter-based Philox keyed by (seed, epoch, sample index)
 * and a purpose tag (box, flip, jitter), so a resumed run -- or another thread -- draws the same
 * boxes, flips and factors for the same sample. No call allocates: the resize works in a
 * caller-provided scratch buffer whose size dt_resize_scratch / dt_transform_scratch give.
 *
 * Layout: images are uint8 [H, W, 3] rows `stride` bytes apart; outputs of the normaliser are
 * f32 [3, H, W] (plain NCHW per image). The graph keeps its inputs plain (only op outputs are
 * ever channel-blocked, src/graph/layout.c), so there is no blocked variant. */
#ifndef DT_DATA_IMAGE_TRANSFORM_H
#define DT_DATA_IMAGE_TRANSFORM_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

/* A crop box in pixels: rows [top, top + height), columns [left, left + width). */
typedef struct dt_box {
    int top, left, height, width;
} dt_box;

/* ---- Random streams ---- */

/* One sample's stream for one purpose: 32-bit words from Philox4x32 with key = seed and
 * counter (index lo, index hi, epoch, purpose << 24 | block). */
typedef struct dt_aug_rng {
    uint64_t key;
    uint32_t ctr[4];
    uint32_t buf[4];
    int pos;
} dt_aug_rng;
enum { DT_AUG_BOX = 1, DT_AUG_FLIP = 2, DT_AUG_JITTER = 3 };
void dt_aug_rng_init(dt_aug_rng *r, uint64_t seed, uint64_t epoch, uint64_t index, int purpose);
uint32_t dt_aug_rng_next(dt_aug_rng *r);
/* Float uniform in [lo, hi): lo + u * (hi - lo) in f32, u with 24 random bits. */
float dt_aug_rng_uniform(dt_aug_rng *r, float lo, float hi);
/* Integer uniform in [0, n), n >= 1 (multiply-shift of one word; bias below 2^-32 * n). */
int dt_aug_rng_below(dt_aug_rng *r, int n);

/* ---- RandomResizedCrop box ---- */

typedef struct dt_rrc_params {
    double scale_lo, scale_hi; /* fraction of the image area (torchvision: 0.08, 1.0) */
    double ratio_lo, ratio_hi; /* width / height, drawn log-uniform (3/4, 4/3) */
} dt_rrc_params;
#define DT_RRC_DEFAULTS                                                                            \
    { 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0 }

/* Where the box sampler's random numbers come from: dt_rrc_box uses a dt_aug_rng; tests replay
 * torchvision's recorded draws. uniform(lo, hi) returns a f32 in [lo, hi); below(n) an int in
 * [0, n). */
typedef struct dt_rrc_source {
    float (*uniform)(void *ctx, float lo, float hi);
    int (*below)(void *ctx, int n);
    void *ctx;
} dt_rrc_source;

/* torchvision's RandomResizedCrop.get_params: up to 10 draws of (area fraction uniform in
 * scale, aspect ratio exp(uniform in log ratio)), w = round(sqrt(area * ratio)), h =
 * round(sqrt(area / ratio)) (round half to even), accepted when it fits, at a uniform offset;
 * otherwise the centre crop with the ratio clamped into [ratio_lo, ratio_hi]. Returns 1 when
 * the fallback was taken, 0 otherwise. img_w, img_h >= 1. */
int dt_rrc_box_from(const dt_rrc_params *p, int img_w, int img_h, const dt_rrc_source *src,
                    dt_box *out);
/* The box for sample `index` of `epoch`, and whether to flip it (p = 1/2, *flip may be NULL),
 * from the sample's own streams (DT_AUG_BOX, DT_AUG_FLIP). */
int dt_rrc_box(const dt_rrc_params *p, int img_w, int img_h, uint64_t seed, uint64_t epoch,
               uint64_t index, dt_box *out, int *flip);

/* ---- Resize (PIL's Image.resize with BILINEAR, 8-bit) ---- */

/* Resizes the crop `box` of src (as PIL's img.crop(box) then .resize((out_w, out_h))) and
 * writes only the window [win_y, win_y + win_h) x [win_x, win_x + win_w) of the resized image
 * to dst [win_h, win_w, 3] (dst_stride bytes per row): a window of the whole output is exactly
 * what cropping the resized image would give, without computing the rest. Triangle filter with
 * support scaled by the downscale factor, coefficients normalised to sum 1 and quantised to
 * 22 fractional bits, horizontal pass first with a uint8 intermediate, as Pillow does.
 * scratch must hold dt_resize_scratch(box.width, box.height, out_w, out_h, win_w, win_h)
 * bytes (8-byte aligned). */
dt_status dt_resize_bilinear_aa(const uint8_t *src, int src_w, int src_h, int src_stride,
                                dt_box box, int out_w, int out_h, int win_x, int win_y, int win_w,
                                int win_h, uint8_t *dst, int dst_stride, void *scratch,
                                size_t scratch_bytes);
size_t dt_resize_scratch(int box_w, int box_h, int out_w, int out_h, int win_w, int win_h);

/* torchvision's Resize(size) for an int size: the shorter side becomes `size`, the longer
 * int(size * long / short). */
void dt_resize_short_side(int img_w, int img_h, int size, int *out_w, int *out_h);

/* ---- ColorJitter (brightness, contrast, saturation; no hue) ---- */

/* Strengths as torchvision's ColorJitter(brightness=b, ...): factor uniform in
 * [max(0, 1 - b), 1 + b]; 0 disables that adjustment. */
typedef struct dt_jitter_params {
    float brightness, contrast, saturation;
} dt_jitter_params;
/* Drawn factors and the order to apply them (ColorJitter's random permutation). */
typedef struct dt_jitter_draw {
    int n;        /* enabled adjustments */
    int order[3]; /* DT_JIT_* in application order */
    float factor[3];
} dt_jitter_draw;
enum { DT_JIT_BRIGHTNESS = 0, DT_JIT_CONTRAST = 1, DT_JIT_SATURATION = 2 };
void dt_jitter_sample(const dt_jitter_params *p, dt_aug_rng *r, dt_jitter_draw *out);
/* In place on [h, w, 3] rows `stride` bytes apart; PIL's ImageEnhance semantics: blend with
 * black / with the rounded mean of the grayscale image / with the grayscale image (ITU-R 601-2
 * luma as PIL's convert("L")), in f32 with truncation and clipping as Image.blend does. */
void dt_adjust_brightness(uint8_t *img, int w, int h, int stride, float factor);
void dt_adjust_contrast(uint8_t *img, int w, int h, int stride, float factor);
void dt_adjust_saturation(uint8_t *img, int w, int h, int stride, float factor);
void dt_jitter_apply(const dt_jitter_draw *d, uint8_t *img, int w, int h, int stride);

/* ---- ToTensor + Normalize ---- */

/* Per channel and pixel value: (v / 255 - mean[c]) / std[c] in f32, as ToTensor + Normalize. */
typedef struct dt_norm_lut {
    float v[3][256];
} dt_norm_lut;
#define DT_IMAGENET_MEAN                                                                           \
    { 0.485f, 0.456f, 0.406f }
#define DT_IMAGENET_STD                                                                            \
    { 0.229f, 0.224f, 0.225f }
/* std[c] must be non-zero. */
dt_status dt_norm_lut_init(dt_norm_lut *l, const float mean[3], const float std[3]);
/* uint8 [h, w, 3] (stride bytes per row) -> f32 [3, h, w]; flip mirrors the columns. */
void dt_normalize_chw(const uint8_t *hwc, int w, int h, int stride, const dt_norm_lut *l, int flip,
                      float *out);

/* ---- The whole transform ---- */

typedef struct dt_transform_cfg {
    int size;          /* output side: size x size */
    int train;         /* 1: RandomResizedCrop + flip (+ jitter); 0: Resize(resize) + CenterCrop */
    int resize;        /* eval: shorter side before the centre crop (ImageNet: 256 for 224) */
    int hflip;         /* train: random horizontal flip with p = 1/2 */
    dt_rrc_params rrc; /* train */
    dt_jitter_params jitter;
    dt_norm_lut norm;
} dt_transform_cfg;
/* DT_OK, or DT_ERR_INVALID naming the field: size < 1, eval resize < size, RandomResizedCrop
 * bounds not 0 < lo <= hi, negative or non-finite jitter. dt_transform_apply checks too. */
dt_status dt_transform_check(const dt_transform_cfg *cfg);
/* Scratch bytes enough for any image up to max_w x max_h under cfg (resize intermediate and
 * coefficients plus the size x size uint8 sample). */
size_t dt_transform_scratch(const dt_transform_cfg *cfg, int max_w, int max_h);
/* One image [img_h, img_w, 3] -> out f32 [3, size, size], keyed by (seed, epoch, index). */
dt_status dt_transform_apply(const dt_transform_cfg *cfg, const uint8_t *img, int img_w, int img_h,
                             int stride, uint64_t seed, uint64_t epoch, uint64_t index, float *out,
                             void *scratch, size_t scratch_bytes);

/* ---- The same in steps (the loader: decode scaled, then resize) ---- */

/* One sample's geometry: the source box (in the pixels of the image as decoded), the size the
 * box is resized to, the size x size window of that kept, and the flip. Train: the
 * RandomResizedCrop box, out = size x size, window (0, 0); eval: the whole image, out = the
 * Resize(resize) size, the centre window. */
typedef struct dt_transform_plan {
    dt_box box;
    int out_w, out_h, win_x, win_y;
    int flip;
} dt_transform_plan;
/* The plan for an image of img_w x img_h (full size, as displayed), keyed by (seed, epoch,
 * index) as dt_transform_apply draws it. cfg must pass dt_transform_check. */
void dt_transform_plan_for(const dt_transform_cfg *cfg, int img_w, int img_h, uint64_t seed,
                           uint64_t epoch, uint64_t index, dt_transform_plan *p);
/* The JPEG DCT scale for the plan: the largest d in {1, 2, 4, 8}, d <= max_denom, with
 * box.width >= d * out_w and box.height >= d * out_h -- the box decoded at 1/d still covers
 * the resized size, so the resize stays a downscale (or 1:1). */
int dt_transform_dct_denom(const dt_transform_plan *p, int max_denom);
/* Maps the plan's box to the image decoded at 1/denom (sides ceil(img / denom)): rows
 * [floor(top / d), ceil((top + height) / d)), columns likewise, clamped to the image. out and
 * window stay (the resized size is the full-size image's). */
void dt_transform_plan_scale(dt_transform_plan *p, int img_w, int img_h, int denom);
/* Scratch bytes dt_transform_run needs for this plan. */
size_t dt_transform_plan_scratch(const dt_transform_cfg *cfg, const dt_transform_plan *p);
/* Resize (box -> out, window kept), jitter (train; its draws keyed by seed, epoch, index), flip
 * and normalise into out f32 [3, size, size]. img is [img_h, img_w, 3] as decoded. */
dt_status dt_transform_run(const dt_transform_cfg *cfg, const dt_transform_plan *p,
                           const uint8_t *img, int img_w, int img_h, int stride, uint64_t seed,
                           uint64_t epoch, uint64_t index, float *out, void *scratch,
                           size_t scratch_bytes);

#endif
