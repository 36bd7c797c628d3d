/* Fashion-MNIST import (Debian dataset-fashion-mnist IDX files): 60,000 train and 10,000 test
 * images whose pixel sums and label counts equal those a numpy script computed from the same
 * files (tests/ref/ref_data_fmnist.py; exact integers). Also: the val split partitions train,
 * verify passes, and the fingerprint does not depend on the directory.
 *
 * usage: test_data_fmnist IDX_DIR */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/file.h"
#include "dtrain/data.h"
#include "harness.h"

static cJSON *load_ref(void) {
    char p[4096];
    const char *dir = getenv("DT_REF_DIR");
    snprintf(p, sizeof p, "%s/data_fmnist.json", dir ? dir : ".");
    uint8_t *b;
    size_t n;
    if (dt_read_file(p, 0, &b, &n) != DT_OK) return NULL;
    cJSON *r = cJSON_Parse((const char *)b);
    free(b);
    return r;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

typedef struct stats {
    int64_t n, sum, counts[10];
} stats;

static void add_stats(const char *dir, stats *s) {
    dt_dataset *d;
    CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
    if (!d) return;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    CHECK(in->kind == DT_DATA_IMAGE && in->height == 28 && in->width == 28 && in->channels == 1 &&
              in->classes == 10,
          "%s: shape %dx%dx%d", dir, in->height, in->width, in->channels);
    for (int64_t i = 0; i < in->records; i++) {
        int32_t lab;
        const uint8_t *px = dt_dataset_image(d, i, &lab);
        for (int k = 0; k < 784; k++) s->sum += px[k];
        if (lab >= 0 && lab < 10) s->counts[lab]++;
    }
    s->n += in->records;
    dt_dataset_close(d);
}

static void compare(const char *what, const stats *s, const cJSON *ref) {
    CHECK(s->n == (int64_t)num(ref, "n"), "%s: %lld images, reference %.0f", what, (long long)s->n,
          num(ref, "n"));
    CHECK(s->sum == (int64_t)num(ref, "pixel_sum"), "%s: pixel sum %lld, reference %.0f", what,
          (long long)s->sum, num(ref, "pixel_sum"));
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(ref, "label_counts");
    for (int c = 0; c < 10; c++) {
        const cJSON *x = cJSON_GetArrayItem(lc, c);
        CHECK(x && s->counts[c] == (int64_t)x->valuedouble, "%s: label %d count %lld vs %g", what,
              c, (long long)s->counts[c], x ? x->valuedouble : -1.0);
    }
}

int main(int argc, char **argv) {
    const char *src = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    cJSON *ref = load_ref();
    if (!CHECK(ref, "no reference data_fmnist.json in $DT_REF_DIR"))
        return dt_test_finish("fmnist");
    char tmp[] = "/tmp/dt_fmnist_XXXXXX";
    if (!CHECK(mkdtemp(tmp), "mkdtemp")) return dt_test_finish("fmnist");
    char out[4200], out2[4200], dir[4300];
    snprintf(out, sizeof out, "%s/fmnist", tmp);
    snprintf(out2, sizeof out2, "%s/nested/fmnist-val", tmp);
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1;
    o.shard_bytes = 16 << 20; /* several shards, so lookups cross shard boundaries */
    const char *srcs[] = {src};
    CHECK_OK(dt_data_import("fashion-mnist", srcs, 1, out, &o));

    const char *splits[] = {"train", "test"};
    char fp_train[17] = "";
    for (int i = 0; i < 2; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(ref, splits[i]);
        stats s = {0};
        snprintf(dir, sizeof dir, "%s/%s", out, splits[i]);
        add_stats(dir, &s);
        compare(splits[i], &s, r);
        dt_dataset *d;
        CHECK_OK(dt_dataset_open(dir, 0, &d));
        if (!d) continue;
        const dt_dataset_info *in = dt_dataset_get_info(d);
        CHECK(in->n_shards > 1 || i == 1, "%s: %d shards", splits[i], in->n_shards);
        if (i == 0) memcpy(fp_train, in->fingerprint, 17);
        /* individual images by index, across shards */
        const cJSON *probe = cJSON_GetObjectItemCaseSensitive(r, "probe");
        const cJSON *psum = cJSON_GetObjectItemCaseSensitive(r, "probe_sums");
        const cJSON *plab = cJSON_GetObjectItemCaseSensitive(r, "probe_labels");
        for (int k = 0; k < cJSON_GetArraySize(probe); k++) {
            int64_t idx = (int64_t)cJSON_GetArrayItem(probe, k)->valuedouble;
            int32_t lab;
            const uint8_t *px = dt_dataset_image(d, idx, &lab);
            int64_t sum = 0;
            for (int q = 0; px && q < 784; q++) sum += px[q];
            CHECK(px && sum == (int64_t)cJSON_GetArrayItem(psum, k)->valuedouble &&
                      lab == (int32_t)cJSON_GetArrayItem(plab, k)->valuedouble,
                  "%s image %lld: sum %lld label %d", splits[i], (long long)idx, (long long)sum,
                  lab);
        }
        CHECK(dt_dataset_image(d, in->records, NULL) == NULL, "out of range index gives NULL");
        dt_dataset_close(d);
    }
    snprintf(dir, sizeof dir, "%s/test", out);
    CHECK_OK(dt_dataset_verify(dir));

    /* val split: 10% of train, disjoint, together equal to train */
    o.val_fraction = 0.1;
    o.seed = 7;
    o.shard_bytes = 0;
    CHECK_OK(dt_data_import("fashion-mnist", srcs, 1, out2, &o));
    stats tr = {0}, va = {0}, both = {0};
    snprintf(dir, sizeof dir, "%s/train", out2);
    add_stats(dir, &tr);
    add_stats(dir, &both);
    snprintf(dir, sizeof dir, "%s/val", out2);
    add_stats(dir, &va);
    add_stats(dir, &both);
    CHECK(tr.n == 54000 && va.n == 6000, "val split: train %lld, val %lld", (long long)tr.n,
          (long long)va.n);
    compare("train+val", &both, cJSON_GetObjectItemCaseSensitive(ref, "train"));

    /* the same data, another directory and sharding: a different fingerprint only if the shard
     * layout differs; the same layout gives the same fingerprint */
    char out3[4200];
    snprintf(out3, sizeof out3, "%s/again", tmp);
    o.val_fraction = 0, o.shard_bytes = 16 << 20, o.max_records = 0;
    CHECK_OK(dt_data_import("fashion-mnist", srcs, 1, out3, &o));
    snprintf(dir, sizeof dir, "%s/train", out3);
    dt_dataset *d3;
    CHECK_OK(dt_dataset_open(dir, 0, &d3));
    if (d3) {
        CHECK(!strcmp(dt_dataset_get_info(d3)->fingerprint, fp_train),
              "re-import fingerprint %s vs %s", dt_dataset_get_info(d3)->fingerprint, fp_train);
        dt_dataset_close(d3);
    }
    cJSON_Delete(ref);
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_fmnist");
}
