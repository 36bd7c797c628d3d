/* Loader throughput from a dataset in S3 vs the same dataset on local disk: samples/s of
 * dt_loader_next with T prefetch threads over S seconds (after one warm-up batch), the s3://
 * copy read with a cache of C MiB (small: blocks keep being fetched), and the ratio
 * (bench/bench_loader_s3.sh). Encoded images: RandomResizedCrop(224) + flip + normalise;
 * stored images: normalise only. WINDOW_MB > 0: block-aware shuffling (data.shuffle_window_mb)
 * on both sides.
 *   bench_loader_s3 LOCAL_DIR S3_URL THREADS SECONDS CACHE_MB [WINDOW_MB] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "dtrain/data.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int64_t g_window_mb;

static int run(const char *dir, int threads, double secs, int64_t cache_mb, double *rate) {
    dt_dataset_opts o = dt_dataset_opts_default();
    o.cache_mb = cache_mb;
    dt_dataset *d;
    if (dt_dataset_open_with(dir, &o, &d) != DT_OK) {
        fprintf(stderr, "bench_loader_s3: %s\n", dt_last_error());
        return 1;
    }
    const dt_dataset_info *in = dt_dataset_get_info(d);
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 32, c.prefetch_threads = threads, c.seed = 1;
    c.shuffle_window_bytes = g_window_mb << 20;
    if (in->kind == DT_DATA_ENCODED) c.augment = 1, c.image_size = 224;
    for (int i = 0; i < 3; i++) c.mean[i] = 0.5f, c.std[i] = 0.25f;
    dt_loader *l;
    dt_batch b;
    if (dt_loader_open(d, &c, &l) != DT_OK || dt_loader_next(l, &b) != DT_OK) {
        fprintf(stderr, "bench_loader_s3: %s\n", dt_last_error());
        return 1;
    }
    int64_t n = 0;
    double t0 = now(), t;
    while ((t = now()) - t0 < secs) {
        if (dt_loader_next(l, &b) != DT_OK) {
            fprintf(stderr, "bench_loader_s3: %s\n", dt_last_error());
            return 1;
        }
        n += b.n;
    }
    *rate = (double)n / (t - t0);
    int64_t blocks = 0, bytes = 0;
    printf("%s: %.1f samples/s (%d prefetch thread%s)", dir, *rate, threads,
           threads == 1 ? "" : "s");
    if (dt_dataset_fetched(d, &blocks, &bytes))
        printf("; %lld blocks fetched (%.1f MiB, cache %lld MiB, dataset %.1f MiB)",
               (long long)blocks, (double)bytes / 1048576.0, (long long)cache_mb,
               (double)dt_dataset_bytes(d) / 1048576.0);
    printf("\n");
    dt_loader_close(l);
    dt_dataset_close(d);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr,
                "usage: bench_loader_s3 LOCAL_DIR S3_URL THREADS SECONDS CACHE_MB [WINDOW_MB]\n");
        return 2;
    }
    g_window_mb = argc == 7 ? atoll(argv[6]) : 0;
    int threads = atoi(argv[3]);
    double secs = atof(argv[4]), local, s3;
    if (run(argv[1], threads, secs, 512, &local) ||
        run(argv[2], threads, secs, atoll(argv[5]), &s3))
        return 1;
    printf("ratio s3 / local: %.2f\n", s3 / local);
    return 0;
}
