/* Read throughput of a dataset's files through dt_store_get_range in 1 MiB blocks (the shard
 * format's checksum block, the unit a streaming reader fetches): from the local directory
 * (POSIX store, pread) and from an S3 store the files are first uploaded to, with 1 and with 4
 * reader threads. Prints MB/s of each and the S3/local ratio.
 *
 *   bench_store_read DATASET_DIR s3://BUCKET/PREFIX
 * (S3 settings from the environment, as dt_store reads them; bench/bench_store_read.sh starts
 * a SeaweedFS cluster and imports a dataset.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "dtrain/storage.h"

enum { BLOCK = 1 << 20, MAX_KEYS = 4096 };

typedef struct job {
    dt_store *s;
    char **keys;
    size_t *sizes;
    int n;
    _Atomic long long next; /* block counter over all files */
    long long total_blocks;
    long long *first; /* [n + 1] first block of each file */
    int failed;
} job;

static void *reader(void *arg) {
    job *j = arg;
    char *buf = malloc(BLOCK);
    for (long long b; buf && (b = atomic_fetch_add(&j->next, 1)) < j->total_blocks;) {
        int f = 0;
        while (j->first[f + 1] <= b) f++;
        unsigned long long off = (unsigned long long)(b - j->first[f]) * BLOCK;
        size_t len = j->sizes[f] - off < BLOCK ? j->sizes[f] - off : BLOCK;
        if (dt_store_get_range(j->s, j->keys[f], off, len, buf) != DT_OK) {
            fprintf(stderr, "bench_store_read: %s\n", dt_last_error());
            j->failed = 1;
            break;
        }
    }
    free(buf);
    return NULL;
}

/* MB/s reading every block of the files once with `threads` readers; < 0 on failure. */
static double read_all(dt_store *s, char **keys, size_t *sizes, int n, int threads) {
    job j = {.s = s, .keys = keys, .sizes = sizes, .n = n};
    j.first = calloc((size_t)n + 1, sizeof *j.first);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        j.first[i + 1] = j.first[i] + (long long)((sizes[i] + BLOCK - 1) / BLOCK);
        bytes += sizes[i];
    }
    j.total_blocks = j.first[n];
    pthread_t t[16];
    double t0 = bench_now();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, reader, &j);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double dt = bench_now() - t0;
    free(j.first);
    return j.failed ? -1 : (double)bytes / 1e6 / dt;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bench_store_read DATASET_DIR s3://BUCKET/PREFIX\n");
        return 2;
    }
    dt_store *local, *s3;
    char **keys;
    int n;
    if (dt_store_open(argv[1], NULL, &local) || dt_store_open(argv[2], NULL, &s3) ||
        dt_store_list(local, "", &keys, &n)) {
        fprintf(stderr, "bench_store_read: %s\n", dt_last_error());
        return 1;
    }
    if (n > MAX_KEYS) n = MAX_KEYS;
    size_t *sizes = calloc((size_t)n, sizeof *sizes), total = 0;
    for (int i = 0; i < n; i++) { /* upload: the dataset copied into S3 as it is */
        void *d;
        if (dt_store_get(local, keys[i], &d, &sizes[i]) || dt_store_put(s3, keys[i], d, sizes[i])) {
            fprintf(stderr, "bench_store_read: %s\n", dt_last_error());
            return 1;
        }
        free(d);
        total += sizes[i];
    }
    printf("dataset %s: %d files, %.1f MB, read in %d KiB ranged reads\n", argv[1], n,
           (double)total / 1e6, BLOCK >> 10);
    const int th[2] = {1, 4};
    for (int k = 0; k < 2; k++) {
        read_all(local, keys, sizes, n, th[k]); /* warm the page cache: local = memory speed */
        double a = read_all(local, keys, sizes, n, th[k]);
        double b = read_all(s3, keys, sizes, n, th[k]);
        if (a < 0 || b < 0) return 1;
        printf("threads %d: local %.0f MB/s, s3 %.0f MB/s, s3/local %.3f\n", th[k], a, b, b / a);
    }
    dt_store_list_free(keys, n);
    free(sizes);
    dt_store_close(local);
    dt_store_close(s3);
    return 0;
}
