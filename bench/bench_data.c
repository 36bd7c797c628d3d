/* Data pipeline benchmark: loader throughput (samples/s, MB/s of shard bytes consumed) with 0, 1
 * and 2 prefetch threads, without and with augmentation, beside the raw sequential read
 * bandwidth of the same shard files; and tokenizer throughput (MB/s, one thread).
 *
 * usage: bench_data [--dataset DIR] [--idx DIR] [--text FILE]... [--tokenizer FILE]
 *                   [--epochs N] [--batch N]
 * Without --dataset, Fashion-MNIST is imported from --idx (default
 * /usr/share/datasets/fashion-mnist) into a temporary directory first. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/file.h"
#include "dtrain/data.h"
#include "dtrain/tokenizer.h"
#include "bench_util.h"

/* Reads every shard sequentially in 4 MiB chunks; returns bytes/s (best of `reps`). With
 * `direct`, O_DIRECT bypasses the page cache: the storage's own read bandwidth. */
static double raw_read(const dt_dataset *d, int reps, int direct, double *bytes_out) {
    size_t cap = 4 << 20;
    char *buf = aligned_alloc(4096, cap);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now(), bytes = 0;
        volatile unsigned sink = 0;
        for (int s = 0; s < dt_dataset_shard_count(d); s++) {
            int fd = open(dt_dataset_shard_path(d, s), O_RDONLY | (direct ? O_DIRECT : 0));
            if (fd < 0) return 0;
            ssize_t n;
            while ((n = read(fd, buf, cap)) > 0) {
                bytes += (double)n;
                sink += (unsigned char)buf[n - 1];
            }
            if (n < 0) bytes = 0; /* O_DIRECT refused */
            close(fd);
        }
        double bw = bytes / (bench_now() - t0);
        if (bw > best) best = bw;
        *bytes_out = bytes;
        (void)sink;
    }
    free(buf);
    return best;
}

/* The loader's data access alone: the shuffled records copied as uint8, no conversion. */
static double gather_only(const dt_dataset *d) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    int64_t hwc = (int64_t)in->height * in->width * in->channels, n = in->records;
    uint8_t *out = malloc((size_t)(256 * hwc));
    double t0 = bench_now();
    for (int64_t i = 0; i < n; i++) {
        int32_t lab;
        const uint8_t *p = dt_dataset_image(d, dt_data_permute(i, n, 1, 0), &lab);
        memcpy(out + (i % 256) * hwc, p, (size_t)hwc);
    }
    double dt = bench_now() - t0;
    free(out);
    return (double)n * (double)(hwc + 4) / dt;
}

static void bench_loader(const dt_dataset *d, int threads, int augment, int epochs, int batch,
                         double raw_bw, double direct_bw) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = batch, c.seed = 1, c.prefetch_threads = threads, c.augment = augment;
    c.queue_depth = 8;
    for (int k = 0; k < 4; k++) c.mean[k] = 0.2860f, c.std[k] = 0.3530f;
    dt_loader *l;
    if (dt_loader_open(d, &c, &l) != DT_OK) {
        fprintf(stderr, "loader: %s\n", dt_last_error());
        return;
    }
    int64_t bpe = dt_loader_batches_per_epoch(l), samples = 0;
    dt_batch b;
    dt_loader_next(l, &b); /* start-up (threads, first batch) is not timed */
    double t0 = bench_now();
    for (int64_t k = 1; k < bpe * epochs; k++) {
        dt_loader_next(l, &b);
        samples += b.n;
    }
    double dt = bench_now() - t0;
    double rec = (double)in->height * in->width * in->channels + 4; /* pixels + label */
    double mbs = (double)samples * rec / dt / 1e6;
    printf("loader  threads %d  augment %d  %9.0f samples/s  %8.1f MB/s  = %5.1f%% of page-cache "
           "read, %6.1f%% of O_DIRECT read\n",
           threads, augment, (double)samples / dt, mbs, 100.0 * mbs * 1e6 / raw_bw,
           direct_bw > 0 ? 100.0 * mbs * 1e6 / direct_bw : 0.0);
    dt_loader_close(l);
}

static void bench_tokenizer(const char *tok_path, const char *file) {
    uint8_t *text;
    size_t len;
    if (dt_read_file(file, 0, &text, &len) != DT_OK) {
        fprintf(stderr, "bench_data: %s\n", dt_last_error());
        return;
    }
    double t0 = bench_now();
    dt_tokenizer *t;
    if (dt_tokenizer_load(tok_path, &t) != DT_OK) {
        fprintf(stderr, "bench_data: %s\n", dt_last_error());
        free(text);
        return;
    }
    double load = bench_now() - t0, best = 1e30;
    dt_tokens o = {0};
    for (int r = 0; r < 3; r++) {
        o.n = 0;
        t0 = bench_now();
        if (dt_tokenizer_encode(t, (const char *)text, len, 0, &o) != DT_OK) {
            fprintf(stderr, "bench_data: %s\n", dt_last_error());
            break;
        }
        double e = bench_now() - t0;
        if (e < best) best = e;
    }
    printf("tokenizer dtrain   %-40s %8.2f MB/s  (%zu bytes -> %lld tokens, load %.0f ms)\n", file,
           (double)len / best / 1e6, len, (long long)o.n, load * 1e3);
    dt_tokens_free(&o);
    dt_tokenizer_free(t);
    free(text);
}

int main(int argc, char **argv) {
    const char *dataset = NULL, *idx = "/usr/share/datasets/fashion-mnist", *tok = NULL;
    const char *texts[8];
    int ntext = 0, epochs = 2, batch = 256;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dataset"))
            dataset = argv[i + 1];
        else if (!strcmp(argv[i], "--idx"))
            idx = argv[i + 1];
        else if (!strcmp(argv[i], "--text") && ntext < 8)
            texts[ntext++] = argv[i + 1];
        else if (!strcmp(argv[i], "--tokenizer"))
            tok = argv[i + 1];
        else if (!strcmp(argv[i], "--epochs"))
            epochs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
    }
    char tmp[] = "/tmp/dt_bench_data_XXXXXX", out[128], dir[160];
    int made = 0;
    if (!dataset) {
        if (!mkdtemp(tmp)) return 1;
        snprintf(out, sizeof out, "%s/fmnist", tmp);
        dt_import_options o;
        dt_import_options_default(&o);
        o.quiet = 1;
        const char *srcs[] = {idx};
        double t0 = bench_now();
        if (dt_data_import("fashion-mnist", srcs, 1, out, &o) != DT_OK) {
            fprintf(stderr, "bench_data: %s\n", dt_last_error());
            dt_remove_tree(tmp);
            return 1;
        }
        printf("import  fashion-mnist (train + test, from gzip IDX): %.2f s\n", bench_now() - t0);
        snprintf(dir, sizeof dir, "%s/train", out);
        dataset = dir;
        made = 1;
    }
    dt_dataset *d;
    double t0 = bench_now();
    if (dt_dataset_open(dataset, DT_DATA_VERIFY, &d) != DT_OK) {
        fprintf(stderr, "bench_data: %s\n", dt_last_error());
        return 1;
    }
    const dt_dataset_info *in = dt_dataset_get_info(d);
    printf("open    %s: %lld records, %d shards, verified in %.0f ms\n", dataset,
           (long long)in->records, in->n_shards, (bench_now() - t0) * 1e3);
    if (in->kind == DT_DATA_IMAGE) {
        double bytes, raw = raw_read(d, 5, 0, &bytes), direct = raw_read(d, 3, 1, &bytes);
        printf("raw     sequential read() of the shard files: %.1f MB/s through the page cache, "
               "%.1f MB/s with O_DIRECT (%.1f MB)\n",
               raw / 1e6, direct / 1e6, bytes / 1e6);
        printf("gather  shuffled uint8 records, copy only (1 thread): %.1f MB/s\n",
               gather_only(d) / 1e6);
        for (int aug = 0; aug <= 1; aug++)
            for (int th = 0; th <= 2; th++) bench_loader(d, th, aug, epochs, batch, raw, direct);
    }
    dt_dataset_close(d);
    if (made) dt_remove_tree(tmp);
    for (int i = 0; tok && i < ntext; i++) bench_tokenizer(tok, texts[i]);
    return 0;
}
