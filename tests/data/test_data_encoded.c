/* Encoded-image datasets (kind 3): round trip of file bytes, labels, sizes and class names
 * through the writer and the mmap reader over several shards; the fingerprint (the same for the
 * same content in another directory, another one for other class names); a corrupt byte found
 * on first touch (dt_dataset_encoded) and by verify; shards with bad offsets, labels or image
 * info (checksums intact, written with dt_shard_write) refused at open naming file and byte;
 * writer misuse; the loader stopping at a record that does not decode. */
#include "data/shard.h"
#include "data_testutil.h"

static const char *g_tmp;
static const char *const k_names[3] = {"cat", "dog", "eel"};

/* Record i: (i * 37) % 4000 + 1 bytes of a pattern, label i % 3, size 10+i x 20+i, format. */
static int g_big; /* records 100 kB larger: a shard spans several 1 MiB checksum blocks */
static size_t rec_len(int i) {
    return (size_t)((i * 37) % 4000 + 1 + (g_big ? 100000 : 0));
}
static uint8_t rec_byte(int i, size_t k) {
    return (uint8_t)(i * 13 + k * 7 + (k >> 8));
}

static dt_status make(const char *dir, int n, const char *const *names, int64_t shard_bytes) {
    dt_dataset_spec sp = {.kind = DT_DATA_ENCODED,
                          .classes = 3,
                          .class_names = names,
                          .shard_bytes = shard_bytes,
                          .name = "enc",
                          .split = "train"};
    dt_dataset_writer *w;
    dt_status st = dt_dataset_writer_open(dir, &sp, &w);
    if (st) return st;
    uint8_t *buf = malloc(4001 + 100000);
    for (int i = 0; i < n && !st; i++) {
        for (size_t k = 0; k < rec_len(i); k++) buf[k] = rec_byte(i, k);
        st = dt_dataset_writer_add_encoded(w, buf, rec_len(i), i % 3, 10 + i, 20 + i, 1 + i % 3);
    }
    free(buf);
    if (st) {
        dt_dataset_writer_abort(w);
        return st;
    }
    return dt_dataset_writer_close(w);
}

static void test_round_trip(void) {
    char a[4096], b[4096], c[4096];
    snprintf(a, sizeof a, "%s/a", g_tmp);
    snprintf(b, sizeof b, "%s/b", g_tmp);
    snprintf(c, sizeof c, "%s/c", g_tmp);
    const int n = 300;
    CHECK_OK(make(a, n, k_names, 64 << 10));
    CHECK_OK(make(b, n, k_names, 64 << 10));
    const char *other[3] = {"cat", "dog", "fox"};
    CHECK_OK(make(c, n, other, 64 << 10));
    CHECK_OK(dt_dataset_verify(a));
    dt_dataset *d = NULL, *db = NULL, *dc = NULL;
    CHECK_OK(dt_dataset_open(a, 0, &d));
    CHECK_OK(dt_dataset_open(b, 0, &db));
    CHECK_OK(dt_dataset_open(c, 0, &dc));
    if (!d || !db || !dc) goto out;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += (int64_t)rec_len(i);
    CHECK(in->kind == DT_DATA_ENCODED && in->records == n && in->classes == 3 &&
              in->bytes == total && in->n_shards >= 5,
          "info: kind %d, %lld records, %d classes, %lld bytes (want %lld), %d shards",
          (int)in->kind, (long long)in->records, in->classes, (long long)in->bytes,
          (long long)total, in->n_shards);
    CHECK(!strcmp(in->fingerprint, dt_dataset_get_info(db)->fingerprint),
          "same content, same fingerprint");
    CHECK(strcmp(in->fingerprint, dt_dataset_get_info(dc)->fingerprint),
          "other class names, other fingerprint");
    CHECK(!strcmp(dt_dataset_class_name(d, 2), "eel") && !dt_dataset_class_name(d, 3) &&
              !strcmp(dt_dataset_class_name(dc, 2), "fox"),
          "class names");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *p;
        size_t len;
        int32_t lab, w, h;
        if (dt_dataset_encoded(d, i, &p, &len, &lab, &w, &h) != DT_OK) {
            bad++;
            continue;
        }
        bad += len != rec_len(i) || lab != i % 3 || w != 10 + i || h != 20 + i;
        for (size_t k = 0; k < len; k++) bad += p[k] != rec_byte(i, k);
    }
    CHECK(bad == 0, "%d records differ after the round trip", bad);
    const uint8_t *p;
    size_t len;
    CHECK(dt_dataset_encoded(d, n, &p, &len, NULL, NULL, NULL) == DT_ERR_RANGE, "out of range");
    CHECK(dt_dataset_image(d, 0, NULL) == NULL, "dt_dataset_image on an encoded dataset");
    dt_loader_config lc;
    dt_loader_config_default(&lc);
    dt_loader *l = NULL;
    lc.batch_size = 2;
    CHECK_OK(dt_loader_open(d, &lc, &l));
    dt_batch bt;
    CHECK(l && dt_loader_next(l, &bt) == DT_ERR_FORMAT &&
              strstr(dt_last_error(), "does not decode"),
          "the loader stops at bytes that are no image: %s", dt_last_error());
    dt_loader_close(l);
out:
    dt_dataset_close(d);
    dt_dataset_close(db);
    dt_dataset_close(dc);
}

/* A flipped byte inside record 5's bytes (block 0 of a 4 MB shard; the offsets, labels and
 * image info read at open lie in its last block): open (no verify) succeeds, reading record 5
 * fails naming the shard and range, a record in another block reads, verify fails. */
static void test_corrupt_byte(void) {
    char a[4096], sh[4200];
    snprintf(a, sizeof a, "%s/corrupt", g_tmp);
    g_big = 1;
    CHECK_OK(make(a, 40, k_names, 0));
    g_big = 0;
    snprintf(sh, sizeof sh, "%s/shard-00000.dts", a);
    /* section 0 (the bytes) starts at 256; record 5 starts after records 0-4 */
    size_t off = 256;
    for (int i = 0; i < 5; i++) off += rec_len(i);
    CHECK(tu_flip(sh, (long)off + 3, 0x40) == 0, "flip");
    dt_dataset *d = NULL;
    CHECK_OK(dt_dataset_open(a, 0, &d));
    if (!d) return;
    const uint8_t *p;
    size_t len;
    CHECK(dt_dataset_encoded(d, 5, &p, &len, NULL, NULL, NULL) == DT_ERR_FORMAT &&
              strstr(dt_last_error(), "shard-00000.dts") &&
              strstr(dt_last_error(), "corrupt data in bytes"),
          "corrupt record: %s", dt_last_error());
    CHECK_OK(dt_dataset_encoded(d, 30, &p, &len, NULL, NULL, NULL));
    CHECK(dt_dataset_bad_blocks(d) == 1, "%lld bad blocks", (long long)dt_dataset_bad_blocks(d));
    dt_dataset_close(d);
    CHECK(dt_dataset_verify(a) == DT_ERR_FORMAT, "verify finds the flipped byte");
}

/* One shard of 3 records written with intact checksums but `what` broken. */
static void bad_shard(const char *what, const char *want1, const char *want2) {
    uint8_t blob[30];
    for (int i = 0; i < 30; i++) blob[i] = (uint8_t)i;
    uint64_t offs[4] = {0, 10, 20, 30};
    int32_t labels[3] = {0, 1, 2};
    uint32_t info[12] = {5, 6, 1, 0, 7, 8, 2, 0, 9, 10, 3, 0};
    if (!strcmp(what, "offsets")) offs[2] = 5;
    if (!strcmp(what, "past")) offs[3] = 31;
    if (!strcmp(what, "first")) offs[0] = 1;
    if (!strcmp(what, "label")) labels[1] = 3;
    if (!strcmp(what, "format")) info[6] = 9;
    if (!strcmp(what, "width")) info[4] = 0;
    dt_shard_header h = {0};
    h.kind = DT_DATA_ENCODED, h.dtype = DT_DATA_U8, h.records = 3, h.elements = 30;
    h.shape[3] = 3;
    h.n_sections = 4;
    h.sec[0] = (dt_shard_section){DT_SEC_BLOB, DT_DATA_U8, 0, 30, 30};
    h.sec[1] = (dt_shard_section){DT_SEC_OFFSETS, DT_DATA_U64, 0, 32, 4};
    h.sec[2] = (dt_shard_section){DT_SEC_LABELS, DT_DATA_I32, 0, 12, 3};
    h.sec[3] = (dt_shard_section){DT_SEC_IMGINFO, DT_DATA_U32, 0, 48, 12};
    if (!strcmp(what, "missing")) h.n_sections = 3;
    const void *data[4] = {blob, offs, labels, info};
    char path[4200];
    snprintf(path, sizeof path, "%s/bad-%s.dts", g_tmp, what);
    CHECK_OK(dt_shard_write(path, &h, data));
    dt_shard s;
    dt_status st = dt_shard_open(path, 1, &s);
    if (st == DT_OK) dt_shard_close(&s);
    CHECK(st == DT_ERR_FORMAT && strstr(dt_last_error(), path) && strstr(dt_last_error(), want1) &&
              strstr(dt_last_error(), want2),
          "%s: %d: %s", what, (int)st, dt_last_error());
}

static void test_bad_shards(void) {
    bad_shard("offsets", "image offset 2", "(byte ");
    bad_shard("past", "image offset 3", "must rise to 30");
    bad_shard("first", "first image offset", "(byte ");
    bad_shard("label", "label of record 1", "outside [0, 3)");
    bad_shard("format", "image info of record 1", "(byte ");
    bad_shard("width", "image info of record 1", "0x8");
    bad_shard("missing", "without a", "image info");
}

static void test_writer_misuse(void) {
    char a[4096];
    snprintf(a, sizeof a, "%s/misuse", g_tmp);
    dt_dataset_spec sp = {.kind = DT_DATA_ENCODED, .classes = 2};
    dt_dataset_writer *w;
    CHECK_OK(dt_dataset_writer_open(a, &sp, &w));
    if (!w) return;
    const uint8_t b[4] = {1, 2, 3, 4};
    CHECK(dt_dataset_writer_add_encoded(w, b, 4, 2, 5, 5, 1) == DT_ERR_RANGE &&
              strstr(dt_last_error(), "label 2"),
          "label out of range: %s", dt_last_error());
    dt_dataset_writer_abort(w);
    CHECK_OK(dt_dataset_writer_open(a, &sp, &w));
    CHECK(dt_dataset_writer_add_encoded(w, b, 4, 0, 5, 5, 0) == DT_ERR_INVALID, "format 0");
    dt_dataset_writer_abort(w);
    CHECK_OK(dt_dataset_writer_open(a, &sp, &w));
    CHECK(dt_dataset_writer_add_image(w, b, 0) == DT_ERR_INVALID, "add_image on encoded");
    dt_dataset_writer_abort(w);
    CHECK(!dt_path_exists(a), "aborted writers leave nothing");
    const char *nl[2] = {"a", "b\nc"};
    sp.class_names = nl;
    CHECK(dt_dataset_writer_open(a, &sp, &w) == DT_ERR_INVALID, "a class name with a newline");
}

/* The manifest's class_names must list one name per class. */
static void test_manifest_names(void) {
    char a[4096], m[4200];
    snprintf(a, sizeof a, "%s/names", g_tmp);
    CHECK_OK(make(a, 10, k_names, 0));
    snprintf(m, sizeof m, "%s/manifest.json", a);
    uint8_t *txt;
    size_t len;
    CHECK_OK(dt_read_file(m, 0, &txt, &len));
    char *q = strstr((char *)txt, "\"dog\",");
    if (!CHECK(q, "dog in the manifest")) return;
    memcpy(q, "      ", 6); /* two names for three classes, still valid JSON */
    CHECK_OK(dt_write_file(m, txt, len));
    free(txt);
    dt_dataset *d;
    CHECK(dt_dataset_open(a, 0, &d) == DT_ERR_FORMAT && strstr(dt_last_error(), "class_names") &&
              strstr(dt_last_error(), "manifest.json"),
          "two names for three classes: %s", dt_last_error());
}

int main(void) {
    char tmp[4096];
    g_tmp = tu_tempdir(tmp, sizeof tmp, "encoded");
    if (!CHECK(g_tmp, "mkdtemp")) return dt_test_finish("test_data_encoded");
    test_round_trip();
    test_corrupt_byte();
    test_bad_shards();
    test_writer_misuse();
    test_manifest_names();
    dt_remove_tree(g_tmp);
    return dt_test_finish("test_data_encoded");
}
