/* Checkpoint I/O benchmark, the parts bench/bench_ckpt.sh cannot read off the training log:
 *
 *   bench_ckpt_io raw DIR BYTES [REPS]     sequential write of BYTES (16 MiB write() calls, then
 *                                          fsync) to a file in DIR and sequential read back
 *                                          (16 MiB read() calls into one reused buffer): the
 *                                          disk's bandwidth as dd conv=fsync measures it; and
 *                                          the same with O_DIRECT (no page cache copy)
 *   bench_ckpt_io store URL BYTES [REPS]   the same bytes through dt_store, as the trainer's
 *                                          writer does: xxh3 + dt_store_put (temp file, fsync,
 *                                          rename, directory fsync) of a 4096-aligned buffer,
 *                                          then dt_store_get + xxh3, and dt_store_get_stream
 *                                          with each chunk hashed and copied into place
 *   bench_ckpt_io mkbucket NAME            creates an S3 bucket at $AWS_ENDPOINT_URL (for the
 *                                          S3 column; dt_store has no bucket creation)
 *   bench_ckpt_io restore URL ROOT         the read side of a resume from the newest checkpoint
 *                                          under ROOT (an "<experiment>/<run>/checkpoints" key
 *                                          prefix), step by step as src/train/ckpt.c does it:
 *                                          dt_ckpt_find_before at DT_CKPT_SIZES (a stat per
 *                                          file), then dt_store_get_stream of every file, each
 *                                          chunk hashed (xxh3) and copied into the model/
 *                                          optimizer buffers while the next is read; and, for
 *                                          comparison, the whole-file pass restores made
 *                                          before: dt_store_get, xxh3, copy (best of 3 each)
 *
 * Before every read the page cache is dropped (echo 3 > /proc/sys/vm/drop_caches, needs root)
 * so reads come from the disk; "cache_dropped 0" in the output says it could not be, and the
 * reads may then come from memory. Output: "key value" lines, MB = 1e6 bytes, best of REPS. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include "dtrain/checkpoint.h"
#include "dtrain/storage.h"
#include "bench_util.h"

/* CPU time of this process, user + system (a write's copy into the page cache is system time:
 * what a checkpoint writer thread takes from training threads on the same cores). */
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 1 when the page cache was dropped (dirty pages are written first, so nothing is lost). */
static int drop_caches(void) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0) return 0;
    int ok = write(fd, "3\n", 2) == 2;
    close(fd);
    return ok;
}

/* Non-constant bytes (a compressing or deduplicating file system must not get it for free). */
static void fill(unsigned char *p, size_t n) {
    uint64_t x = 0x9e3779b97f4a7c15u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) p[i] = (unsigned char)i;
}

static int fail(const char *what) {
    fprintf(stderr, "bench_ckpt_io: %s: %s\n", what, dt_last_error());
    return 1;
}

enum { CHUNK = 16 << 20 };

/* One sequential write (16 MiB write() calls, fsync, close) and one read back (16 MiB read()
 * calls into one reused buffer) of buf [bytes]; `direct`: O_DIRECT (bytes a multiple of 4096,
 * buf aligned), which skips the page cache copy. Times in seconds; 0 on error. */
static int raw_once(const char *path, unsigned char *buf, size_t bytes, int direct, double *tw,
                    double *cw, double *tr, int *dropped) {
    drop_caches(); /* no dirty pages of earlier work in the way */
    double t0 = bench_now(), c0 = cpu();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0) return perror(path), 0;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        ssize_t w = write(fd, buf + off, n);
        if (w <= 0) return perror(path), 0;
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) return perror(path), 0;
    *tw = bench_now() - t0, *cw = cpu() - c0;
    *dropped &= drop_caches();
    t0 = bench_now();
    fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) return perror(path), 0;
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd, buf, CHUNK)) > 0) got += (size_t)n;
    close(fd);
    *tr = bench_now() - t0;
    if (got != bytes) return fprintf(stderr, "%s: short read\n", path), 0;
    return 1;
}

static int bench_raw(const char *dir, size_t bytes, int reps) {
    char path[4200];
    snprintf(path, sizeof path, "%s/bench_ckpt_raw.bin", dir);
    size_t dbytes = (bytes + 4095) / 4096 * 4096; /* O_DIRECT: whole blocks */
    unsigned char *buf = aligned_alloc(4096, dbytes ? dbytes : 4096);
    if (!buf) return fprintf(stderr, "bench_ckpt_io: out of memory\n"), 1;
    fill(buf, dbytes);
    double best[2][2] = {{0, 0}, {0, 0}}; /* [direct][write, read] in bytes/s */
    double cpu_w[2] = {1e30, 1e30};       /* [direct] CPU seconds of the write */
    int dropped = 1;
    for (int r = 0; r < reps; r++)
        for (int d = 0; d < 2; d++) {
            size_t b = d ? dbytes : bytes;
            double tw, cw, tr;
            if (!raw_once(path, buf, b, d, &tw, &cw, &tr, &dropped)) return 1;
            if (cw < cpu_w[d]) cpu_w[d] = cw;
            if (b / tw > best[d][0]) best[d][0] = b / tw;
            if (b / tr > best[d][1]) best[d][1] = b / tr;
        }
    unlink(path);
    free(buf);
    printf("bytes %zu\nraw_write_mbps %.1f\nraw_read_mbps %.1f\nraw_write_direct_mbps %.1f\n"
           "raw_read_direct_mbps %.1f\nraw_write_cpu_s_per_gb %.3f\nraw_write_direct_cpu_s_per_gb "
           "%.3f\n"
           "cache_dropped %d\n",
           bytes, best[0][0] / 1e6, best[0][1] / 1e6, best[1][0] / 1e6, best[1][1] / 1e6,
           cpu_w[0] / (bytes / 1e9), cpu_w[1] / (dbytes / 1e9), dropped);
    return 0;
}

/* A streaming read's consumer, as the trainer's restore: each chunk hashed, then copied into
 * place (dst [cap], at the chunk's offset). */
typedef struct sink {
    XXH3_state_t *h;
    unsigned char *dst;
    size_t cap;
} sink;

static dt_status sink_chunk(void *ud, size_t off, const void *p, size_t n) {
    sink *k = ud;
    XXH3_64bits_update(k->h, p, n);
    if (off < k->cap) memcpy(k->dst + off, p, n < k->cap - off ? n : k->cap - off);
    return DT_OK;
}

static int bench_store(const char *url, size_t bytes, int reps) {
    dt_store *s;
    if (dt_store_open(url, NULL, &s) != DT_OK) return fail(url);
    /* 4096-aligned, as the trainer's snapshot buffers (a POSIX store writes them O_DIRECT) */
    unsigned char *buf = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + (bytes ? 0 : 4096));
    if (!buf) return fprintf(stderr, "bench_ckpt_io: out of memory\n"), 1;
    fill(buf, bytes);
    const char *key = "bench_ckpt_io/object.bin";
    double best_w = 0, best_r = 0, best_r_nohash = 0, best_s = 0, cpu_w = 1e30;
    int dropped = 1;
    for (int r = 0; r < reps; r++) {
        drop_caches();
        double t0 = bench_now(), c0 = cpu();
        uint64_t h = XXH3_64bits(buf, bytes); /* the writer hashes what it puts */
        if (dt_store_put(s, key, buf, bytes) != DT_OK) return fail("put");
        double tw = bench_now() - t0;
        if (cpu() - c0 < cpu_w) cpu_w = cpu() - c0;
        dropped &= drop_caches();
        t0 = bench_now();
        void *data;
        size_t n;
        if (dt_store_get(s, key, &data, &n) != DT_OK) return fail("get");
        double tg = bench_now() - t0;
        uint64_t h2 = XXH3_64bits(data, n);
        double tr = bench_now() - t0;
        free(data);
        if (n != bytes || h2 != h) return fprintf(stderr, "bench_ckpt_io: read back differs\n"), 1;
        /* the restore's read: chunks hashed (and copied into place) while the next is read */
        dropped &= drop_caches();
        t0 = bench_now();
        sink k = {XXH3_createState(), buf, bytes};
        XXH3_64bits_reset(k.h);
        if (dt_store_get_stream(s, key, bytes, sink_chunk, &k, &n) != DT_OK) return fail("stream");
        h2 = XXH3_64bits_digest(k.h);
        double ts = bench_now() - t0;
        XXH3_freeState(k.h);
        if (n != bytes || h2 != h)
            return fprintf(stderr, "bench_ckpt_io: streamed back differs\n"), 1;
        if (bytes / ts > best_s) best_s = bytes / ts;
        if (bytes / tw > best_w) best_w = bytes / tw;
        if (bytes / tr > best_r) best_r = bytes / tr;
        if (bytes / tg > best_r_nohash) best_r_nohash = bytes / tg;
    }
    dt_store_delete(s, key);
    dt_store_close(s);
    free(buf);
    printf("bytes %zu\nstore_put_mbps %.1f\nstore_get_mbps %.1f\nstore_get_nohash_mbps %.1f\n"
           "store_stream_mbps %.1f\nstore_put_cpu_s_per_gb %.3f\ncache_dropped %d\n",
           bytes, best_w / 1e6, best_r / 1e6, best_r_nohash / 1e6, best_s / 1e6,
           cpu_w / (bytes / 1e9), dropped);
    return 0;
}

/* Reads every file trainer_state.json lists, checks size and xxh3 and copies it into `dst`
 * (the model/optimizer buffers the trainer copies tensors into): `stream` as the trainer
 * restores (dt_store_get_stream: the hash and the copy of each chunk while the next is read),
 * else whole files (dt_store_get, then xxh3, then the copy: the restore before streaming).
 * Returns the bytes, -1 on error. */
static int64_t load_all(dt_store *s, const char *dir, unsigned char *dst, size_t cap, int stream) {
    char *txt;
    if (dt_ckpt_read_state(s, dir, &txt) != DT_OK) return fail("trainer_state.json"), -1;
    cJSON *o = cJSON_Parse(txt), *f;
    free(txt);
    int64_t total = 0;
    XXH3_state_t *h = XXH3_createState();
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(o, "files")) {
        char key[1400], hex[17];
        snprintf(key, sizeof key, "%s/%s", dir, f->string);
        uint64_t hash;
        size_t n;
        if (stream) {
            sink k = {h, dst, cap};
            XXH3_64bits_reset(h);
            if (dt_store_get_stream(s, key, (size_t)-1, sink_chunk, &k, &n) != DT_OK)
                return fail(key), -1;
            hash = XXH3_64bits_digest(h);
        } else {
            void *data;
            if (dt_store_get(s, key, &data, &n) != DT_OK) return fail(key), -1;
            hash = XXH3_64bits(data, n);
            memcpy(dst, data, n < cap ? n : cap);
            free(data);
        }
        snprintf(hex, sizeof hex, "%016" PRIx64, hash);
        const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "xxh3"));
        if (!want || strcmp(hex, want)) {
            fprintf(stderr, "bench_ckpt_io: %s: checksum mismatch\n", key);
            return -1;
        }
        total += (int64_t)n;
    }
    XXH3_freeState(h);
    cJSON_Delete(o);
    return total;
}

static int bench_restore(const char *url, const char *root) {
    dt_store *s;
    if (dt_store_open(url, NULL, &s) != DT_OK) return fail(url);
    dt_ckpt_info info;
    if (dt_ckpt_find_latest(s, root, stderr, &info) != DT_OK) return fail(root);
    size_t cap = (size_t)info.bytes;
    unsigned char *dst = malloc(cap ? cap : 1);
    if (!dst) return fprintf(stderr, "bench_ckpt_io: out of memory\n"), 1;
    memset(dst, 0, cap); /* resident, like the trainer's parameters */
    /* as dt_train_ckpt_resume with ckpt.resume=auto: the cheap choice, then one streaming pass;
     * and the whole-file pass of restores before, alternating, best of 3 each */
    double best[2] = {1e30, 1e30}, find[2] = {0, 0};
    int64_t bytes = 0;
    int dropped = 1;
    for (int rep = 0; rep < 3; rep++)
        for (int stream = 1; stream >= 0; stream--) {
            dropped &= drop_caches();
            double t0 = bench_now();
            if (dt_ckpt_find_before(s, root, INT64_MAX, DT_CKPT_SIZES, stderr, &info) != DT_OK)
                return fail(root);
            double t_find = bench_now() - t0;
            if ((bytes = load_all(s, info.dir, dst, cap, stream)) < 0) return 1;
            double t = bench_now() - t0;
            if (t < best[stream]) best[stream] = t, find[stream] = t_find;
        }
    printf("checkpoint %s/%s\nbytes %" PRId64 "\nrestore_find_s %.3f\nrestore_load_s %.3f\n"
           "restore_total_s %.3f\nrestore_mbps %.1f\nrestore_whole_s %.3f\n"
           "restore_whole_mbps %.1f\ncache_dropped %d\n",
           url, info.dir, bytes, find[1], best[1] - find[1], best[1], bytes / best[1] / 1e6,
           best[0], bytes / best[0] / 1e6, dropped);
    free(dst);
    dt_store_close(s);
    return 0;
}

/* PUT /NAME, signed with the AWS_* environment; retried for a few seconds (a fresh gateway may
 * not know its identities yet). An existing bucket of ours is fine. */
static int mkbucket(const char *name) {
    const char *ep = getenv("AWS_ENDPOINT_URL"), *region = getenv("AWS_REGION");
    if (!ep || !getenv("AWS_ACCESS_KEY_ID") || !getenv("AWS_SECRET_ACCESS_KEY"))
        return fprintf(stderr, "bench_ckpt_io mkbucket: AWS_ENDPOINT_URL and keys not set\n"), 1;
    char url[2048], sig[128];
    snprintf(url, sizeof url, "%s/%s", ep, name);
    snprintf(sig, sizeof sig, "aws:amz:%s:s3", region ? region : "us-east-1");
    long code = 0;
    for (double t0 = bench_now(); bench_now() - t0 < 20; usleep(100000)) {
        CURL *h = curl_easy_init();
        if (!h) break;
        struct curl_slist *hdr = curl_slist_append(NULL, "x-amz-content-sha256: "
                                                         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4"
                                                         "649b934ca495991b7852b855");
        char *body = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&body, &len);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig);
        curl_easy_setopt(h, CURLOPT_USERNAME, getenv("AWS_ACCESS_KEY_ID"));
        curl_easy_setopt(h, CURLOPT_PASSWORD, getenv("AWS_SECRET_ACCESS_KEY"));
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, mem);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
        code = 0;
        if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        fclose(mem);
        int exists = body && strstr(body, "BucketAlreadyOwnedByYou");
        free(body);
        curl_slist_free_all(hdr);
        curl_easy_cleanup(h);
        if (code == 200 || exists) return 0;
    }
    fprintf(stderr, "bench_ckpt_io: cannot create bucket %s at %s: HTTP %ld\n", name, ep, code);
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "mkbucket")) return mkbucket(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "raw"))
        return bench_raw(argv[2], strtoull(argv[3], NULL, 10), argc > 4 ? atoi(argv[4]) : 2);
    if (argc >= 4 && !strcmp(argv[1], "store"))
        return bench_store(argv[2], strtoull(argv[3], NULL, 10), argc > 4 ? atoi(argv[4]) : 2);
    if (argc == 4 && !strcmp(argv[1], "restore")) return bench_restore(argv[2], argv[3]);
    fprintf(stderr, "usage: bench_ckpt_io raw DIR BYTES [REPS] | store URL BYTES [REPS] | "
                    "restore URL ROOT | mkbucket NAME\n");
    return 2;
}
