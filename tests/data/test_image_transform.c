/* Image transforms (src/data/image_transform.h) against torchvision + Pillow on the same pixels
 * (tests/ref/ref_imgaug.py writes imgaug.safetensors):
 *  - RandomResizedCrop boxes: torchvision's recorded draws replayed through dtrain's sampler
 *    give the same boxes (fallbacks included); with Philox draws, the box area fraction and
 *    log aspect ratio distributions match torchvision's (two-sample KS, alpha 0.001) and so
 *    does the fallback rate (|z| < 4); a deliberately wrong sampler (uniform ratio) is rejected
 *    by the same KS test.
 *  - resize of crop boxes and Resize(256) + CenterCrop(224): within 1 level of 255 of PIL's,
 *    and the exact fraction is reported (and must be >= 99%).
 *  - ToTensor + Normalize (plain, flipped): within 1e-6.
 *  - adjust_brightness / contrast / saturation and ColorJitter-ordered sequences: within 1 level.
 *  - (argument "unit", no reference needed: also run under the sanitizers) boxes are a function
 *    of (seed, epoch, index); ColorJitter's draws; dt_transform_apply = its parts; bad arguments
 *    give one-line errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/image_transform.h"
#include "harness.h"

static dt_ref *R;

static const float *get(const char *fmt, int i, int64_t *n) {
    char name[64];
    snprintf(name, sizeof name, fmt, i);
    const dt_tensor *t = dt_ref_get(R, name);
    if (!t) return NULL;
    if (n) *n = dt_tensor_numel(t);
    return t->data;
}

/* NULL without a failed check when absent: loops probe for the next case this way. */
static const dt_tensor *tensor(const char *fmt, int i) {
    char name[64];
    snprintf(name, sizeof name, fmt, i);
    return dt_ref_raw(R, name) ? dt_ref_get(R, name) : NULL;
}

/* ---- RandomResizedCrop: replay ---- */

typedef struct replay {
    const float *uni;
    const float *ints;
    int nu, ni;
} replay;
static float replay_uniform(void *c, float lo, float hi) {
    (void)lo, (void)hi;
    replay *r = c;
    return r->nu < 20 ? r->uni[r->nu++] : NAN;
}
static int replay_below(void *c, int n) {
    (void)n;
    replay *r = c;
    return r->ni < 2 ? (int)r->ints[r->ni++] : -1;
}

static void test_replay(void) {
    const float *ps = get("rrcp", 0, NULL);
    int cases = 0, total = 0, bad = 0, fallbacks = 0;
    for (int c = 0; tensor("rrc%d.meta", c) && ps; c++, cases++) {
        const float *m = get("rrc%d.meta", c, NULL), *uni = get("rrc%d.uni", c, NULL);
        const float *ints = get("rrc%d.int", c, NULL), *box = get("rrc%d.box", c, NULL);
        if (!uni || !ints || !box) return;
        int w = (int)m[0], h = (int)m[1], n = (int)m[2];
        const float *p = ps + 4 * (int)m[3];
        /* The parameter sets are f32 in the file; torchvision had Python floats. */
        static const double exact[4][4] = {{0.08, 1.0, 3.0 / 4, 4.0 / 3},
                                           {0.5, 1.0, 0.2, 0.4},
                                           {0.9, 1.0, 2.0, 5.0},
                                           {0.01, 0.05, 1.0, 1.0}};
        const double *e = exact[(int)m[3]];
        CHECK(fabs(e[0] - p[0]) < 1e-6 && fabs(e[3] - p[3]) < 1e-6, "parameter set %d", (int)m[3]);
        dt_rrc_params prm = {e[0], e[1], e[2], e[3]};
        for (int i = 0; i < n; i++) {
            replay r = {uni + 20 * i, ints + 2 * i, 0, 0};
            dt_rrc_source s = {replay_uniform, replay_below, &r};
            dt_box b;
            int fb = dt_rrc_box_from(&prm, w, h, &s, &b);
            int want_fb = ints[2 * i] < 0;
            const float *o = box + 4 * i;
            if (b.top != (int)o[0] || b.left != (int)o[1] || b.height != (int)o[2] ||
                b.width != (int)o[3] || fb != want_fb) {
                if (bad++ < 5)
                    printf("  replay %dx%d set %d #%d: dtrain %d,%d %dx%d fb %d; torchvision "
                           "%g,%g %gx%g fb %d\n",
                           w, h, (int)m[3], i, b.top, b.left, b.height, b.width, fb, o[0], o[1],
                           o[2], o[3], want_fb);
            }
            fallbacks += fb;
            total++;
        }
    }
    printf("  replay: %d boxes in %d cases (%d fallbacks), %d differ\n", total, cases, fallbacks,
           bad);
    CHECK(cases >= 20 && fallbacks > 100 && fallbacks < total, "replay cases %d, fallbacks %d",
          cases, fallbacks);
    CHECK(bad == 0, "%d of %d replayed boxes differ from torchvision's", bad, total);
}

/* ---- RandomResizedCrop: statistics ---- */

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Two-sample Kolmogorov-Smirnov statistic (sorts both; ties handled by stepping past them). */
static double ks(float *a, int n, float *b, int m) {
    qsort(a, (size_t)n, sizeof *a, cmp_f);
    qsort(b, (size_t)m, sizeof *b, cmp_f);
    int i = 0, j = 0;
    double d = 0;
    while (i < n && j < m) {
        float v = a[i] < b[j] ? a[i] : b[j];
        while (i < n && a[i] == v) i++;
        while (j < m && b[j] == v) j++;
        double e = fabs((double)i / n - (double)j / m);
        if (e > d) d = e;
    }
    return d;
}

/* Wrong on purpose: the aspect ratio uniform in [lo, hi] instead of log-uniform. Draws
 * alternate (area, log ratio) in each try, so every second uniform is the ratio's. */
typedef struct wrong {
    dt_aug_rng r;
    int calls;
} wrong;
static float wrong_uniform(void *c, float lo, float hi) {
    wrong *w = c;
    if (w->calls++ % 2 == 0) return dt_aug_rng_uniform(&w->r, lo, hi);
    return logf(dt_aug_rng_uniform(&w->r, expf(lo), expf(hi)));
}
static int wrong_below(void *c, int n) {
    return dt_aug_rng_below(&((wrong *)c)->r, n);
}

static void box_stats(int w, int h, int i, int wrong_ratio, float *area, float *logr, int *fb) {
    dt_rrc_params p = DT_RRC_DEFAULTS;
    dt_box b;
    if (wrong_ratio) {
        wrong wr = {.calls = 0};
        dt_aug_rng_init(&wr.r, 99, 0, (uint64_t)i, DT_AUG_BOX);
        dt_rrc_source s = {wrong_uniform, wrong_below, &wr};
        *fb = dt_rrc_box_from(&p, w, h, &s, &b);
    } else {
        *fb = dt_rrc_box(&p, w, h, 7, 3, (uint64_t)i, &b, NULL);
    }
    *area = (float)((double)b.height * b.width / ((double)w * h));
    *logr = (float)log((double)b.width / b.height);
}

static void test_stats(void) {
    for (int s = 0; tensor("stat%d.meta", s); s++) {
        int64_t n = 0;
        const float *m = get("stat%d.meta", s, NULL), *ra = get("stat%d.area", s, &n);
        const float *rl = get("stat%d.logr", s, NULL), *rf = get("stat%d.fallback", s, NULL);
        if (!ra || !rl || !rf) return;
        int w = (int)m[0], h = (int)m[1], N = (int)n;
        float *ta = malloc(sizeof(float) * n), *tl = malloc(sizeof(float) * n);
        float *da = malloc(sizeof(float) * n), *dl = malloc(sizeof(float) * n);
        double tf = 0, df = 0;
        for (int i = 0; i < N; i++) {
            int fb;
            box_stats(w, h, i, 0, &da[i], &dl[i], &fb);
            df += fb;
            tf += rf[i];
        }
        memcpy(ta, ra, sizeof(float) * n);
        memcpy(tl, rl, sizeof(float) * n);
        /* KS critical value at alpha = 0.001: 1.949 * sqrt((n + m) / (n m)). */
        double crit = 1.949 * sqrt(2.0 / N);
        double d_area = ks(da, N, ta, N), d_logr = ks(dl, N, tl, N);
        /* Fallback rate: two-proportion z statistic (pooled). */
        double p1 = df / N, p2 = tf / N, pp = (df + tf) / (2.0 * N);
        double z = pp > 0 && pp < 1 ? (p1 - p2) / sqrt(pp * (1 - pp) * 2.0 / N) : 0;
        printf("  %dx%d, %d boxes each: KS area %.4f, log ratio %.4f (critical %.4f); "
               "fallback %.4f vs torchvision %.4f (z %.2f)\n",
               w, h, N, d_area, d_logr, crit, p1, p2, z);
        CHECK(N >= 20000, "only %d boxes", N);
        CHECK(d_area < crit && d_logr < crit, "%dx%d: box distribution differs from torchvision's",
              w, h);
        CHECK(fabs(z) < 4, "%dx%d: fallback rate %.4f vs %.4f", w, h, p1, p2);
        if (s == 0) { /* the test's power: a uniform ratio is told apart */
            for (int i = 0; i < N; i++) {
                int fb;
                box_stats(w, h, i, 1, &da[i], &dl[i], &fb);
            }
            memcpy(tl, rl, sizeof(float) * n);
            double d_wrong = ks(dl, N, tl, N);
            printf("  uniform-ratio sampler: KS log ratio %.4f\n", d_wrong);
            CHECK(d_wrong > crit, "a uniform-ratio sampler passes the KS test (%.4f)", d_wrong);
        }
        free(ta), free(tl), free(da), free(dl);
    }
}

static int same_box(dt_box a, dt_box b) {
    return a.top == b.top && a.left == b.left && a.height == b.height && a.width == b.width;
}

static void test_determinism(void) {
    dt_rrc_params p = DT_RRC_DEFAULTS;
    dt_box a, b, c;
    int fa, fb, distinct = 0, flips = 0, N = 4000;
    for (int i = 0; i < N; i++) {
        dt_rrc_box(&p, 500, 375, 11, 2, (uint64_t)i, &a, &fa);
        dt_rrc_box(&p, 500, 375, 11, 2, (uint64_t)i, &b, &fb);
        CHECK(same_box(a, b) && fa == fb, "index %d: two draws differ", i);
        dt_rrc_box(&p, 500, 375, 11, 2, (uint64_t)i + 1, &c, NULL);
        distinct += !same_box(a, c);
        flips += fa;
        if (i < 50) {
            dt_rrc_box(&p, 500, 375, 11, 3, (uint64_t)i, &c, NULL);
            CHECK(!same_box(a, c), "index %d: epochs 2 and 3 drew the same box", i);
            dt_rrc_box(&p, 500, 375, 12, 2, (uint64_t)i, &c, NULL);
            CHECK(!same_box(a, c), "index %d: seeds 11 and 12 drew the same box", i);
        }
    }
    CHECK(distinct > N * 99 / 100, "neighbouring indices: only %d of %d boxes differ", distinct, N);
    CHECK(fabs(flips / (double)N - 0.5) < 0.03, "flip rate %.3f", flips / (double)N);
}

/* ---- Resize ---- */

static uint8_t *image_u8(int k, int *w, int *h) {
    const dt_tensor *t = tensor("img%d", k);
    if (!t) return NULL;
    *h = (int)t->shape[0], *w = (int)t->shape[1];
    int64_t n = dt_tensor_numel(t);
    uint8_t *u = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) u[i] = (uint8_t)((const float *)t->data)[i];
    return u;
}

typedef struct diffs {
    int64_t n, exact, worst;
} diffs;
static void count(diffs *d, const uint8_t *a, const float *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int e = abs((int)a[i] - (int)ref[i]);
        d->n++;
        d->exact += e == 0;
        if (e > d->worst) d->worst = e;
    }
}

static void test_resize(void) {
    diffs all = {0, 0, 0};
    for (int c = 0; tensor("rc%d.meta", c); c++) {
        const float *m = get("rc%d.meta", c, NULL), *ref = get("rc%d.out", c, NULL);
        int w, h, sz = (int)m[5];
        uint8_t *img = image_u8((int)m[0], &w, &h);
        if (!img || !ref) return;
        dt_box box = {(int)m[1], (int)m[2], (int)m[3], (int)m[4]};
        size_t sb = dt_resize_scratch(box.width, box.height, sz, sz, sz, sz);
        void *scr = malloc(sb);
        uint8_t *out = malloc((size_t)sz * sz * 3);
        CHECK_OK(dt_resize_bilinear_aa(img, w, h, w * 3, box, sz, sz, 0, 0, sz, sz, out, sz * 3,
                                       scr, sb));
        diffs d = {0, 0, 0};
        count(&d, out, ref, (int64_t)sz * sz * 3);
        CHECK(d.worst <= 1, "crop %d,%d %dx%d of %dx%d -> %d: max diff %lld levels", box.top,
              box.left, box.width, box.height, w, h, sz, (long long)d.worst);
        if (getenv("DT_TEST_VERBOSE"))
            printf("  crop %d,%d %dx%d of %dx%d -> %d: %.4f%% exact\n", box.top, box.left,
                   box.width, box.height, w, h, sz, 100.0 * d.exact / d.n);
        all.n += d.n, all.exact += d.exact;
        if (d.worst > all.worst) all.worst = d.worst;
        free(scr), free(out), free(img);
    }
    printf("  resized_crop: %lld values, %.4f%% exact, max diff %lld\n", (long long)all.n,
           100.0 * all.exact / (all.n ? all.n : 1), (long long)all.worst);
    /* dtrain follows Pillow 13's pass order; an older Pillow in the environment differs by one
     * level in the tall reductions, so there only the 1-level bound holds. */
    const float *vf = get("pil.vfirst", 0, NULL);
    if (vf && vf[0] == 0)
        printf("  note: this Pillow resizes horizontally first always (before 13); the exact "
               "fraction is not checked\n");
    else
        CHECK(all.n > 0 && all.exact >= all.n * 99 / 100, "resized_crop: exact fraction %lld/%lld",
              (long long)all.exact, (long long)all.n);
}

static void test_eval(void) {
    dt_transform_cfg cfg = {.size = 224, .train = 0, .resize = 256};
    const float mean[3] = DT_IMAGENET_MEAN, std[3] = DT_IMAGENET_STD;
    CHECK_OK(dt_norm_lut_init(&cfg.norm, mean, std));
    diffs all = {0, 0, 0};
    for (int k = 0; tensor("ev%d.out", k); k++) {
        int w, h;
        uint8_t *img = image_u8(k, &w, &h);
        const float *ref = get("ev%d.out", k, NULL), *rn = get("ev%d.norm", k, NULL);
        if (!img || !ref || !rn) return;
        /* uint8 result of Resize(256) + CenterCrop(224) */
        int rw, rh;
        dt_resize_short_side(w, h, 256, &rw, &rh);
        int wx = (int)rint((rw - 224) / 2.0), wy = (int)rint((rh - 224) / 2.0);
        size_t sb = dt_resize_scratch(w, h, rw, rh, 224, 224);
        void *scr = malloc(sb);
        uint8_t *out = malloc(224 * 224 * 3);
        dt_box all_img = {0, 0, h, w};
        CHECK_OK(dt_resize_bilinear_aa(img, w, h, w * 3, all_img, rw, rh, wx, wy, 224, 224, out,
                                       224 * 3, scr, sb));
        diffs d = {0, 0, 0};
        count(&d, out, ref, 224 * 224 * 3);
        CHECK(d.worst <= 1, "Resize(256)+CenterCrop(224) of %dx%d: max diff %lld", w, h,
              (long long)d.worst);
        all.n += d.n, all.exact += d.exact;
        if (d.worst > all.worst) all.worst = d.worst;
        /* The whole eval transform, through the worst-case scratch for this image size. */
        size_t tb = dt_transform_scratch(&cfg, w, h);
        void *ts = malloc(tb);
        float *t = malloc(sizeof(float) * 3 * 224 * 224);
        CHECK_OK(dt_transform_apply(&cfg, img, w, h, w * 3, 1, 0, 0, t, ts, tb));
        /* one level of 255 divided by the smallest std, plus f32 rounding */
        dt_check_close("eval transform vs torchvision", t, rn, 3 * 224 * 224,
                       1.0 / (255 * 0.224) + 1e-6, 0);
        /* Normalize alone on torchvision's pixels: the ImageNet constants, exactly */
        dt_normalize_chw(out, 224, 224, 224 * 3, &cfg.norm, 0, t);
        if (d.exact == d.n) dt_check_close("ImageNet normalize", t, rn, 3 * 224 * 224, 1e-6, 0);
        free(ts), free(t), free(scr), free(out), free(img);
    }
    printf("  Resize(256)+CenterCrop(224): %lld values, %.4f%% exact, max diff %lld\n",
           (long long)all.n, 100.0 * all.exact / (all.n ? all.n : 1), (long long)all.worst);
    CHECK(all.n > 0 && all.exact >= all.n * 99 / 100, "eval: exact fraction %lld/%lld",
          (long long)all.exact, (long long)all.n);
}

/* ---- Normalize ---- */

static void test_normalize(void) {
    const dt_tensor *in = tensor("norm.in", 0);
    const float *mean = get("norm.mean", 0, NULL), *std = get("norm.std", 0, NULL);
    const float *ref = get("norm.out", 0, NULL), *rf = get("norm.flip", 0, NULL);
    if (!in || !mean || !std || !ref || !rf) return;
    int h = (int)in->shape[0], w = (int)in->shape[1];
    uint8_t *u = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++) u[i] = (uint8_t)((const float *)in->data)[i];
    dt_norm_lut l;
    CHECK_OK(dt_norm_lut_init(&l, mean, std));
    float *o = malloc(sizeof(float) * 3 * w * h);
    dt_normalize_chw(u, w, h, w * 3, &l, 0, o);
    dt_check_close("ToTensor+Normalize", o, ref, 3 * w * h, 1e-6, 0);
    dt_normalize_chw(u, w, h, w * 3, &l, 1, o);
    dt_check_close("hflip+ToTensor+Normalize", o, rf, 3 * w * h, 1e-6, 0);
    const float zero[3] = {0.5f, 0.5f, 0.5f}, bad[3] = {0.2f, 0.0f, 0.2f};
    CHECK(dt_norm_lut_init(&l, zero, bad) == DT_ERR_INVALID && strstr(dt_last_error(), "std"),
          "zero std accepted: %s", dt_last_error());
    free(u), free(o);
}

/* ---- ColorJitter ---- */

static void apply_op(int op, uint8_t *img, int w, int h, float f) {
    if (op == DT_JIT_BRIGHTNESS) dt_adjust_brightness(img, w, h, w * 3, f);
    if (op == DT_JIT_CONTRAST) dt_adjust_contrast(img, w, h, w * 3, f);
    if (op == DT_JIT_SATURATION) dt_adjust_saturation(img, w, h, w * 3, f);
}

static void test_jitter(void) {
    diffs all = {0, 0, 0};
    int cases = 0;
    for (int j = 0; tensor("jit%d.meta", j); j++, cases++) {
        const float *m = get("jit%d.meta", j, NULL), *ref = get("jit%d.out", j, NULL);
        int w, h, op = (int)m[1];
        uint8_t *img = image_u8((int)m[0], &w, &h);
        if (!img || !ref) return;
        if (op >= 0) {
            apply_op(op, img, w, h, m[2]);
        } else {
            const float *seq = get("jit%d.seq", j, NULL);
            dt_jitter_draw d = {.n = 3};
            for (int i = 0; i < 3; i++) d.order[i] = (int)seq[2 * i], d.factor[i] = seq[2 * i + 1];
            dt_jitter_apply(&d, img, w, h, w * 3);
        }
        diffs d = {0, 0, 0};
        count(&d, img, ref, (int64_t)w * h * 3);
        CHECK(d.worst <= 1, "jitter case %d (op %d factor %g, %dx%d): max diff %lld", j, op,
              (double)m[2], w, h, (long long)d.worst);
        all.n += d.n, all.exact += d.exact;
        if (d.worst > all.worst) all.worst = d.worst;
        free(img);
    }
    printf("  adjust_*: %d cases, %lld values, %.4f%% exact, max diff %lld\n", cases,
           (long long)all.n, 100.0 * all.exact / (all.n ? all.n : 1), (long long)all.worst);
    CHECK(cases >= 30, "only %d jitter cases", cases);
}

static void test_jitter_draws(void) {
    /* ColorJitter's draws: each enabled adjustment once, in every order, factors in range. */
    dt_jitter_params p = {0.4f, 0.4f, 0.0f};
    int orders[3][3] = {{0}}, N = 6000;
    for (int i = 0; i < N; i++) {
        dt_aug_rng r;
        dt_jitter_draw d;
        dt_aug_rng_init(&r, 5, 0, (uint64_t)i, DT_AUG_JITTER);
        dt_jitter_sample(&p, &r, &d);
        int ok = d.n == 2 && d.order[0] != d.order[1] && d.order[0] <= 1 && d.order[1] <= 1;
        for (int k = 0; k < d.n; k++) ok &= d.factor[k] >= 0.6f && d.factor[k] < 1.4f;
        CHECK(ok, "draw %d: n %d order %d %d", i, d.n, d.order[0], d.order[1]);
        if (ok) orders[d.order[0]][d.order[1]]++;
    }
    CHECK(abs(orders[0][1] - N / 2) < N / 20, "brightness first in %d of %d draws", orders[0][1],
          N);
}

/* ---- The whole training transform ---- */

static void test_train_apply(void) {
    /* a synthetic photo: the checks here compare dtrain with itself */
    int w = 500, h = 375;
    uint8_t *img = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++) img[i] = (uint8_t)((i * 2654435761u) >> 24);
    dt_transform_cfg cfg = {
        .size = 96, .train = 1, .hflip = 1, .rrc = DT_RRC_DEFAULTS, .jitter = {0.4f, 0.4f, 0.4f}};
    const float mean[3] = DT_IMAGENET_MEAN, std[3] = DT_IMAGENET_STD;
    CHECK_OK(dt_norm_lut_init(&cfg.norm, mean, std));
    size_t sb = dt_transform_scratch(&cfg, w, h);
    void *scr = malloc(sb), *s2 = malloc(sb);
    float *a = malloc(sizeof(float) * 3 * 96 * 96), *b = malloc(sizeof(float) * 3 * 96 * 96);
    uint8_t *u = malloc(96 * 96 * 3);
    int flips = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_OK(dt_transform_apply(&cfg, img, w, h, w * 3, 42, 1, (uint64_t)i, a, scr, sb));
        /* by hand: box + flip, resize, jitter, normalise */
        dt_box box;
        int flip;
        dt_rrc_box(&cfg.rrc, w, h, 42, 1, (uint64_t)i, &box, &flip);
        flips += flip;
        CHECK_OK(
            dt_resize_bilinear_aa(img, w, h, w * 3, box, 96, 96, 0, 0, 96, 96, u, 96 * 3, s2, sb));
        dt_aug_rng r;
        dt_jitter_draw d;
        dt_aug_rng_init(&r, 42, 1, (uint64_t)i, DT_AUG_JITTER);
        dt_jitter_sample(&cfg.jitter, &r, &d);
        dt_jitter_apply(&d, u, 96, 96, 96 * 3);
        dt_normalize_chw(u, 96, 96, 96 * 3, &cfg.norm, flip, b);
        CHECK(memcmp(a, b, sizeof(float) * 3 * 96 * 96) == 0, "sample %d: apply != its parts", i);
    }
    CHECK(flips > 0 && flips < 8, "%d of 8 samples flipped", flips);
    /* bad input: one line naming what is wrong */
    CHECK(dt_transform_apply(&cfg, img, w, h, w * 3, 42, 1, 0, a, scr, 100) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "scratch"),
          "small scratch: %s", dt_last_error());
    CHECK(dt_transform_apply(&cfg, NULL, w, h, w * 3, 42, 1, 0, a, scr, sb) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "img is NULL"),
          "NULL image: %s", dt_last_error());
    dt_transform_cfg badc = cfg;
    badc.rrc.ratio_lo = -1;
    CHECK(dt_transform_apply(&badc, img, w, h, w * 3, 42, 1, 0, a, scr, sb) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "ratio"),
          "negative ratio: %s", dt_last_error());
    /* the box sampler itself never returns a box outside the image, whatever its parameters */
    const dt_rrc_params odd[] = {{0.5, 0.2, 2, 1}, {0, 0, 1, 1}, {1, 1, 1e-9, 1e-9}, {2, 3, 1, 1}};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 50; i++) {
            dt_box bb;
            dt_rrc_box(&odd[k], 7, 3, 1, 0, (uint64_t)i, &bb, NULL);
            CHECK(bb.top >= 0 && bb.left >= 0 && bb.height >= 1 && bb.width >= 1 &&
                      bb.top + bb.height <= 3 && bb.left + bb.width <= 7,
                  "params %d: box %d,%d %dx%d in 7x3", k, bb.top, bb.left, bb.width, bb.height);
        }
    dt_box out = {300, 0, 100, 100};
    CHECK(dt_resize_bilinear_aa(img, w, h, w * 3, out, 8, 8, 0, 0, 8, 8, u, 24, scr, sb) ==
                  DT_ERR_RANGE &&
              strstr(dt_last_error(), "outside the 500x375"),
          "box outside: %s", dt_last_error());
    free(scr), free(s2), free(a), free(b), free(u), free(img);
}

/* usage: test_image_transform [unit]  ("unit": only the checks that need no reference file) */
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "unit") == 0) {
        test_determinism();
        test_jitter_draws();
        test_train_apply();
        return dt_test_finish("test_image_transform unit");
    }
    R = dt_ref_load("imgaug.safetensors");
    if (!R) return dt_test_finish("test_image_transform");
    test_replay();
    test_stats();
    test_resize();
    test_eval();
    test_normalize();
    test_jitter();
    dt_ref_free(R);
    return dt_test_finish("test_image_transform");
}
