/* Loader throughput on an encoded-image dataset: decode + RandomResizedCrop(224) + flip +
 * normalise into f32 batches, images/s with T prefetch threads over S seconds (after one warm-up
 * batch), with and without DCT-scaled decoding (bench/bench_loader.sh).
 *   bench_loader DATASET THREADS SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "dtrain/data.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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
    dt_dataset_close(d);
    return 0;
}
