/* Images per second of dtrain's per-image transforms, single thread: the ImageNet training
 * transform (RandomResizedCrop(224) + horizontal flip + ToTensor + Normalize), the same with
 * ColorJitter(0.4, 0.4, 0.4), and the eval transform (Resize(256) + CenterCrop(224) + ToTensor
 * + Normalize), on synthetic decoded photos of typical sizes. Per CPU second too: on a loaded
 * machine that is the steadier figure. --write FILE also stores the
 * images (int32 count, then per image int32 w, h and h*w*3 bytes) so that
 * bench_transform.py times torchvision on the same pixels.
 *
 * usage: bench_transform [--write FILE] [--seconds S] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "data/image_transform.h"

enum { NIMG = 32 };
static const int SIZES[][2] = {{500, 375}, {375, 500},  {640, 480}, {800, 600},
                               {333, 500}, {1024, 768}, {480, 640}, {500, 333}};

static uint8_t *make_image(int w, int h, unsigned seed) {
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                seed = seed * 1103515245u + 12345u;
                double v = 127 + 90 * sin(0.05 * x * (c + 1) + 0.03 * y) + (int)(seed >> 28) - 8;
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

static double run(const char *name, const dt_transform_cfg *cfg, uint8_t **img, const int *w,
                  const int *h, double seconds) {
    size_t sb = 0;
    for (int i = 0; i < NIMG; i++) {
        size_t b = dt_transform_scratch(cfg, w[i], h[i]);
        if (b > sb) sb = b;
    }
    void *scr = malloc(sb);
    float *out = malloc(sizeof(float) * 3 * cfg->size * cfg->size);
    long n = 0;
    double t0 = bench_now(), c0 = bench_thread_cpu(), t;
    do {
        for (int i = 0; i < NIMG; i++, n++)
            if (dt_transform_apply(cfg, img[i], w[i], h[i], w[i] * 3, 1, 0, (uint64_t)n, out, scr,
                                   sb) != DT_OK) {
                fprintf(stderr, "bench_transform: %s\n", dt_last_error());
                exit(1);
            }
        t = bench_now() - t0;
    } while (t < seconds);
    double c = bench_thread_cpu() - c0;
    printf("dtrain      %-38s %6.0f images/s, %6.0f per CPU second (%ld images, 1 thread)\n", name,
           n / t, n / c, n);
    free(scr), free(out);
    return n / t;
}

int main(int argc, char **argv) {
    const char *write = NULL;
    double seconds = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--write") && i + 1 < argc)
            write = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_transform [--write FILE] [--seconds S]\n");
            return 2;
        }
    }
    uint8_t *img[NIMG];
    int w[NIMG], h[NIMG];
    for (int i = 0; i < NIMG; i++) {
        w[i] = SIZES[i % 8][0], h[i] = SIZES[i % 8][1];
        img[i] = make_image(w[i], h[i], 77u + (unsigned)i);
    }
    if (write) {
        FILE *f = fopen(write, "wb");
        int32_t n = NIMG;
        if (!f || fwrite(&n, 4, 1, f) != 1) return perror(write), 1;
        for (int i = 0; i < NIMG; i++) {
            int32_t d[2] = {w[i], h[i]};
            fwrite(d, 4, 2, f);
            fwrite(img[i], 1, (size_t)w[i] * h[i] * 3, f);
        }
        if (fclose(f)) return perror(write), 1;
    }
    const float mean[3] = DT_IMAGENET_MEAN, std[3] = DT_IMAGENET_STD;
    dt_transform_cfg train = {.size = 224, .train = 1, .hflip = 1, .rrc = DT_RRC_DEFAULTS};
    dt_norm_lut_init(&train.norm, mean, std);
    dt_transform_cfg jit = train;
    jit.jitter = (dt_jitter_params){0.4f, 0.4f, 0.4f};
    dt_transform_cfg eval = train;
    eval.train = 0, eval.resize = 256;
    run("RRC(224)+flip+normalize", &train, img, w, h, seconds);
    run("RRC(224)+flip+ColorJitter+normalize", &jit, img, w, h, seconds);
    run("Resize(256)+CenterCrop(224)+normalize", &eval, img, w, h, seconds);
    for (int i = 0; i < NIMG; i++) free(img[i]);
    return 0;
}
