/* Loader throughput on an encoded-image dataset: decode + RandomResizedCrop(224) + flip +
 * normalise into f32 batches, images/s with T prefetch threads over S seconds (after one warm-up
 * batch), with and without DCT-scaled decoding; then the raw libjpeg-turbo figure on the same
 * files, the loader's ceiling: every JPEG decoded whole to RGB by tjDecompress2 in one thread,
 * nothing else (bench/bench_loader.sh).
 *   bench_loader DATASET THREADS SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <turbojpeg.h>
#include "dtrain/data.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whole-image decodes of the dataset's JPEGs, in record order, for `secs`: images/s. */
static int raw_decode(dt_dataset *d, double secs) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    tjhandle h = tjInitDecompress();
    unsigned char *rgb = NULL;
    size_t cap = 0;
    int64_t n = 0, i = 0, jpegs = 0;
    double t0 = now(), t;
    while (h && (t = now()) - t0 < secs) {
        const uint8_t *b;
        size_t len;
        int32_t lab, w, hh;
        if (dt_dataset_encoded(d, i, &b, &len, &lab, &w, &hh) != DT_OK) {
            fprintf(stderr, "bench_loader: %s\n", dt_last_error());
            return 1;
        }
        i = (i + 1) % in->records;
        if (b[0] != 0xFF) continue; /* PNG/WebP: not libjpeg-turbo's */
        size_t need = (size_t)w * (size_t)hh * 3;
        if (need > cap) {
            free(rgb);
            if (!(rgb = malloc(cap = need))) return 1;
        }
        if (tjDecompress2(h, b, (unsigned long)len, rgb, w, 0, hh, TJPF_RGB, 0)) {
            fprintf(stderr, "bench_loader: record %lld: %s\n", (long long)i, tjGetErrorStr2(h));
            return 1;
        }
        n++, jpegs++;
    }
    if (!jpegs) {
        fprintf(stderr, "bench_loader: no JPEG in the dataset\n");
        return 1;
    }
    printf("raw libjpeg-turbo decode (whole image, 1 thread): %.1f images/s\n",
           (double)n / (t - t0));
    free(rgb);
    tjDestroy(h);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_loader DATASET THREADS SECONDS\n");
        return 2;
    }
    dt_dataset *d;
    if (dt_dataset_open(argv[1], 0, &d) != DT_OK) {
        fprintf(stderr, "bench_loader: %s\n", dt_last_error());
        return 1;
    }
    int threads = atoi(argv[2]);
    double secs = atof(argv[3]);
    for (int dct = 1; dct >= 0; dct--) {
        dt_loader_config c;
        dt_loader_config_default(&c);
        c.batch_size = 32, c.augment = 1, c.image_size = 224, c.dct_scaling = dct;
        c.prefetch_threads = threads, c.seed = 1;
        const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
        for (int i = 0; i < 3; i++) c.mean[i] = m[i], c.std[i] = s[i];
        dt_loader *l;
        dt_batch b;
        if (dt_loader_open(d, &c, &l) != DT_OK || dt_loader_next(l, &b) != DT_OK) {
            fprintf(stderr, "bench_loader: %s\n", dt_last_error());
            return 1;
        }
        int64_t n = 0;
        double t0 = now(), t;
        while ((t = now()) - t0 < secs) {
            if (dt_loader_next(l, &b) != DT_OK) {
                fprintf(stderr, "bench_loader: %s\n", dt_last_error());
                return 1;
            }
            n += b.n;
        }
        printf("dtrain loader (dct_scaling %s, %d thread%s): %.1f images/s\n", dct ? "on" : "off",
               threads, threads == 1 ? "" : "s", (double)n / (t - t0));
        dt_loader_close(l);
    }
    int rc = raw_decode(d, secs);
    dt_dataset_close(d);
    return rc;
}
