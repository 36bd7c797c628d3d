/* Helpers for the data tests: temporary directories, copying, corrupting and listing files,
 * and small generated datasets. Header-only (each test is one executable). */
#ifndef DT_DATA_TESTUTIL_H
#define DT_DATA_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/file.h"
#include "dtrain/data.h"
#include "harness.h"

/* A fresh directory under $TMPDIR or /tmp; path in buf. */
static inline const char *tu_tempdir(char *buf, size_t n, const char *tag) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/dt_%s_XXXXXX", t && *t ? t : "/tmp", tag);
    return mkdtemp(buf);
}

/* Copies every regular file of directory a into new directory b. */
static inline int tu_copy_dir(const char *a, const char *b) {
    if (mkdir(b, 0755) != 0) return -1;
    DIR *d = opendir(a);
    if (!d) return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char pa[4096], pb[4096];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        uint8_t *buf;
        size_t len;
        if (dt_read_file(pa, 0, &buf, &len) != DT_OK) {
            rc = -1;
            continue;
        }
        if (dt_write_file(pb, buf, len) != DT_OK) rc = -1;
        free(buf);
    }
    closedir(d);
    return rc;
}

/* XORs byte `off` of a file with x. */
static inline int tu_flip(const char *path, long off, uint8_t x) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ x, f);
    fclose(f);
    return 0;
}

static inline int tu_write_u32_le(const char *path, long off, uint32_t v) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    fseek(f, off, SEEK_SET);
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fwrite(b, 1, 4, f);
    fclose(f);
    return 0;
}

static inline long tu_file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Number of entries of dir whose name contains `part`. */
static inline int tu_count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

/* Checks that `st` is an error whose message contains every given fragment. */
static inline int tu_check_error(const char *what, dt_status st, const char *a, const char *b) {
    const char *m = dt_last_error();
    int ok = st != DT_OK && (!a || strstr(m, a)) && (!b || strstr(m, b));
    dt_check_(ok, __FILE__, __LINE__, what, "%s: status %d, message \"%s\" (want \"%s\"%s%s%s)",
              what, (int)st, m, a ? a : "", b ? ", \"" : "", b ? b : "", b ? "\"" : "");
    if (ok) printf("  ok: %s -> %s\n", what, m);
    return ok;
}

/* An image dataset of n images (h x w x c) whose pixels and labels are a function of the index:
 * pixel k of image i = (i * 31 + k * 7) & 255, label i % classes. */
static inline dt_status tu_make_images(const char *dir, int64_t n, int h, int w, int c, int classes,
                                       int64_t shard_bytes) {
    dt_dataset_spec sp = {.kind = DT_DATA_IMAGE,
                          .height = h,
                          .width = w,
                          .channels = c,
                          .classes = classes,
                          .shard_bytes = shard_bytes,
                          .name = "synthetic",
                          .split = "train"};
    dt_dataset_writer *wr;
    dt_status st = dt_dataset_writer_open(dir, &sp, &wr);
    if (st) return st;
    int64_t hwc = (int64_t)h * w * c;
    uint8_t *px = malloc((size_t)hwc);
    for (int64_t i = 0; i < n && !st; i++) {
        for (int64_t k = 0; k < hwc; k++) px[k] = (uint8_t)((i * 31 + k * 7) & 255);
        st = dt_dataset_writer_add_image(wr, px, (int32_t)(i % classes));
    }
    free(px);
    if (st) {
        dt_dataset_writer_abort(wr);
        return st;
    }
    return dt_dataset_writer_close(wr);
}

/* A token dataset of n documents; document i has 1 + (i * 37) % maxlen tokens, token k of
 * document i = (i * 1000 + k) % vocab; with a mask, tokens at odd k are trained on. */
static inline dt_status tu_make_tokens(const char *dir, int64_t n, int64_t maxlen, int64_t vocab,
                                       int with_mask, int64_t shard_bytes) {
    dt_dataset_spec sp = {.kind = DT_DATA_TOKENS,
                          .vocab_size = vocab,
                          .has_mask = with_mask,
                          .eot_id = 0,
                          .pad_id = 1,
                          .shard_bytes = shard_bytes,
                          .name = "synthetic",
                          .split = "train"};
    dt_dataset_writer *wr;
    dt_status st = dt_dataset_writer_open(dir, &sp, &wr);
    if (st) return st;
    uint32_t *t = malloc((size_t)maxlen * 4 + 4);
    uint8_t *m = malloc((size_t)maxlen + 1);
    for (int64_t i = 0; i < n && !st; i++) {
        int64_t len = 1 + (i * 37) % maxlen;
        for (int64_t k = 0; k < len; k++) {
            t[k] = (uint32_t)((i * 1000 + k) % vocab);
            m[k] = (uint8_t)(k & 1);
        }
        st = dt_dataset_writer_add_doc(wr, t, with_mask ? m : NULL, len);
    }
    free(t);
    free(m);
    if (st) {
        dt_dataset_writer_abort(wr);
        return st;
    }
    return dt_dataset_writer_close(wr);
}

#endif
