/* Shard format and manifest: round trip of image and token datasets through the writer and the
 * mmap reader (byte-exact), the fingerprint, and corrupt input: truncated shard, bad magic,
 * wrong version, header and payload checksum mismatch, a shard missing from the manifest's
 * list, a malformed manifest; each gives one error naming the file and position. A writer that
 * is aborted or fails leaves nothing behind. */
#include "data_testutil.h"

static const char *g_tmp;

static void path_of(char *buf, size_t n, const char *a, const char *b) {
    snprintf(buf, n, "%s/%s", a, b);
}

static void test_images(void) {
    char dir[4096];
    path_of(dir, sizeof dir, g_tmp, "img");
    /* 1000 images of 6x5x3 in shards of ~ 10 KiB: about 100 records each, 10 shards */
    CHECK_OK(tu_make_images(dir, 1000, 6, 5, 3, 7, 10000));
    dt_dataset *d;
    CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
    if (!d) return;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    CHECK(in->kind == DT_DATA_IMAGE && in->records == 1000 && in->height == 6 && in->width == 5 &&
              in->channels == 3 && in->classes == 7 && in->n_shards == 10,
          "info: %lld records, %d shards", (long long)in->records, in->n_shards);
    CHECK(!strcmp(in->name, "synthetic") && !strcmp(in->split, "train"), "name %s split %s",
          in->name, in->split);
    int bad = 0;
    for (int64_t i = 0; i < 1000; i++) {
        int32_t lab;
        const uint8_t *px = dt_dataset_image(d, i, &lab);
        if (!px || lab != i % 7) bad++;
        for (int k = 0; px && k < 90; k++) bad += px[k] != (uint8_t)((i * 31 + k * 7) & 255);
        /* payload sections are 64-byte aligned in a page-aligned mapping */
    }
    CHECK(bad == 0, "%d pixels or labels differ after the round trip", bad);
    CHECK(dt_dataset_image(d, -1, NULL) == NULL && dt_dataset_image(d, 1000, NULL) == NULL,
          "out-of-range images are NULL");
    const uint32_t *t;
    int64_t len;
    CHECK(dt_dataset_doc(d, 0, &t, NULL, &len) == DT_ERR_INVALID, "doc on an image dataset");
    char fp[17];
    memcpy(fp, in->fingerprint, 17);
    dt_dataset_close(d);

    /* same content elsewhere: same fingerprint; one different pixel: another */
    char dir2[4096], dir3[4096];
    path_of(dir2, sizeof dir2, g_tmp, "img-copy");
    CHECK_OK(tu_make_images(dir2, 1000, 6, 5, 3, 7, 10000));
    CHECK_OK(dt_dataset_open(dir2, 0, &d));
    if (d) {
        CHECK(!strcmp(dt_dataset_get_info(d)->fingerprint, fp), "same content, same fingerprint");
        dt_dataset_close(d);
    }
    path_of(dir3, sizeof dir3, g_tmp, "img-other");
    CHECK_OK(tu_make_images(dir3, 999, 6, 5, 3, 7, 10000));
    CHECK_OK(dt_dataset_open(dir3, 0, &d));
    if (d) {
        CHECK(strcmp(dt_dataset_get_info(d)->fingerprint, fp), "other content, other fingerprint");
        dt_dataset_close(d);
    }
    CHECK(tu_make_images(dir, 10, 6, 5, 3, 7, 0) == DT_ERR_IO, "an existing directory is refused");
}

static void test_tokens(void) {
    char dir[4096];
    path_of(dir, sizeof dir, g_tmp, "tok");
    CHECK_OK(tu_make_tokens(dir, 500, 300, 5000, 1, 20000));
    dt_dataset *d;
    CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
    if (!d) return;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    int64_t total = 0;
    for (int64_t i = 0; i < 500; i++) total += 1 + (i * 37) % 300;
    CHECK(in->kind == DT_DATA_TOKENS && in->records == 500 && in->tokens == total && in->has_mask &&
              in->vocab_size == 5000 && in->n_shards > 3,
          "info: %lld docs, %lld tokens (want %lld), %d shards", (long long)in->records,
          (long long)in->tokens, (long long)total, in->n_shards);
    int bad = 0;
    for (int64_t i = 0; i < 500; i++) {
        const uint32_t *t;
        const uint8_t *m;
        int64_t len;
        if (dt_dataset_doc(d, i, &t, &m, &len) != DT_OK || len != 1 + (i * 37) % 300 || !m) {
            bad++;
            continue;
        }
        for (int64_t k = 0; k < len; k++)
            bad += t[k] != (uint32_t)((i * 1000 + k) % 5000) || m[k] != (k & 1);
    }
    CHECK(bad == 0, "%d tokens differ after the round trip", bad);
    const uint32_t *t;
    int64_t len;
    CHECK(dt_dataset_doc(d, 500, &t, NULL, &len) == DT_ERR_RANGE, "doc out of range");
    dt_dataset_close(d);

    /* writer checks */
    char dir2[4096];
    path_of(dir2, sizeof dir2, g_tmp, "tok-bad");
    dt_dataset_spec sp = {.kind = DT_DATA_TOKENS, .vocab_size = 10, .has_mask = 1};
    dt_dataset_writer *w;
    CHECK_OK(dt_dataset_writer_open(dir2, &sp, &w));
    uint32_t ids[3] = {1, 2, 10};
    uint8_t mask[3] = {0, 1, 1};
    CHECK(dt_dataset_writer_add_doc(w, ids, NULL, 3) == DT_ERR_INVALID, "missing mask refused");
    dt_dataset_writer_abort(w);
    CHECK_OK(dt_dataset_writer_open(dir2, &sp, &w));
    tu_check_error("token outside the vocabulary", dt_dataset_writer_add_doc(w, ids, mask, 3),
                   "id 10", "vocabulary");
    CHECK(dt_dataset_writer_close(w) != DT_OK, "finish after an error fails");
    CHECK(!dt_path_exists(dir2), "a failed writer leaves no directory");
    CHECK(tu_count_entries(g_tmp, ".tmp-") == 0, "and no temporary directory");
}

/* Each corruption on a fresh copy of a 2-shard image dataset. */
static void test_corrupt(void) {
    char base[4096], c[4096], shard[4200], shard1[4200], man[4200];
    path_of(base, sizeof base, g_tmp, "corrupt-base");
    CHECK_OK(tu_make_images(base, 200, 4, 4, 1, 10, 2000)); /* ~ 100 records per shard */
    dt_dataset *d = NULL;
    int k = 0;
#define FRESH()                                                                                    \
    do {                                                                                           \
        snprintf(c, sizeof c, "%s/corrupt-%d", g_tmp, k++);                                        \
        tu_copy_dir(base, c);                                                                      \
        snprintf(shard, sizeof shard, "%s/shard-00000.dts", c);                                    \
        snprintf(shard1, sizeof shard1, "%s/shard-00001.dts", c);                                  \
        snprintf(man, sizeof man, "%s/manifest.json", c);                                          \
    } while (0)

    FRESH();
    long size = tu_file_size(shard);
    CHECK(truncate(shard, size - 100) == 0, "truncate");
    tu_check_error("truncated shard", dt_dataset_open(c, 0, &d), shard, "truncated");
    FRESH();
    CHECK(truncate(shard, 100) == 0, "truncate");
    tu_check_error("shard shorter than a header", dt_dataset_open(c, 0, &d), shard, "truncated");
    FRESH();
    tu_flip(shard, 0, 0x20);
    tu_check_error("bad magic", dt_dataset_open(c, 0, &d), shard, "bad magic at byte 0");
    FRESH();
    tu_write_u32_le(shard, 8, 3);
    tu_check_error("wrong version", dt_dataset_open(c, 0, &d), shard,
                   "unsupported shard version 3");
    FRESH();
    tu_flip(shard, 24, 1); /* record count: the header checksum catches it */
    tu_check_error("corrupt header", dt_dataset_open(c, 0, &d), shard, "header checksum mismatch");
    FRESH();
    tu_flip(shard, 256 + 5, 0x40); /* a pixel */
    /* version 2: the shard is one block, which also holds the labels that open reads: caught
     * at open, with the byte range of that block (it ends where the block table starts) */
    tu_check_error("corrupt block at open", dt_dataset_open(c, 0, &d), shard,
                   "corrupt data in bytes 256-2303");
    tu_check_error("payload checksum", dt_dataset_open(c, DT_DATA_VERIFY, &d), shard,
                   "corrupt data in bytes 256-");
    tu_check_error("verify", dt_dataset_verify(c), shard, "block 0 does not match");
    FRESH();
    unlink(shard1);
    tu_check_error("missing shard", dt_dataset_open(c, 0, &d), "shard-00001.dts", "missing");
    FRESH();
    FILE *f = fopen(shard1, "ab");
    fputs("junk", f);
    fclose(f);
    tu_check_error("trailing bytes", dt_dataset_open(c, 0, &d), shard1, "unexpected bytes");
    FRESH();
    unlink(man);
    tu_check_error("no manifest", dt_dataset_open(c, 0, &d), "manifest.json", NULL);
    FRESH();
    truncate(man, 40);
    tu_check_error("malformed manifest", dt_dataset_open(c, 0, &d),
                   "manifest.json:", "malformed JSON");
    FRESH();
    {
        uint8_t *txt;
        size_t len;
        dt_read_file(man, 0, &txt, &len);
        char *p = strstr((char *)txt, "\"records\":\t200");
        if (p) memcpy(p, "\"records\":\t201", 14);
        dt_write_file(man, txt, len);
        free(txt);
        tu_check_error("manifest record count", dt_dataset_open(c, 0, &d), "manifest.json",
                       "records");
    }
    FRESH();
    {
        /* another shard's payload in place of this one: header and manifest checksums differ */
        uint8_t *a;
        size_t la;
        dt_read_file(shard1, 0, &a, &la);
        dt_write_file(shard, a, la);
        free(a);
        tu_check_error("swapped shard", dt_dataset_open(c, 0, &d), shard, NULL);
    }
    tu_check_error("no such dataset", dt_dataset_open("/nonexistent/dt", 0, &d), "/nonexistent/dt",
                   NULL);
    CHECK(d == NULL, "failed opens return NULL");
#undef FRESH
}

int main(void) {
    char tmp[4096];
    g_tmp = tu_tempdir(tmp, sizeof tmp, "shard");
    if (!CHECK(g_tmp, "mkdtemp")) return dt_test_finish("test_data_shard");
    test_images();
    test_tokens();
    test_corrupt();
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_shard");
}
