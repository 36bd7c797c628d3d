/* Fuzz target: a dataset directory's manifest.json and its shards as a whole
 * (src/data/dataset.c: the manifest's keys, the shard list, and every check of the shards
 * against it: sizes, checksums, record counts, shapes, the fingerprint).
 *
 * Input: manifest.json, then up to four shard files, each after FZ_SEP, written as
 * shard-00000.dts, shard-00001.dts, ... (the names the dataset writer gives). The seeds are
 * whole datasets written by `dtrain data import` (tests/fuzz/make_seeds.sh). Entry point:
 * dt_dataset_open (with and without DT_DATA_VERIFY); an accepted dataset's records are read
 * through dt_dataset_image / dt_dataset_doc and mapped to shards. */
#include <stdio.h>
#include "data/dataset.h"
#include "fuzz_util.h"

static volatile uint64_t sink;

static void walk(const dt_dataset *d) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    int64_t n = in->records < 4096 ? in->records : 4096;
    int64_t hwc = (int64_t)in->height * in->width * in->channels;
    for (int64_t i = 0; i < n; i++) {
        sink += (uint64_t)dt_dataset_shard_of_record(d, i);
        if (in->kind == DT_DATA_IMAGE) {
            int32_t label = 0;
            const uint8_t *p = dt_dataset_image(d, i, &label);
            if (p) sink += p[0] + p[hwc - 1] + (uint64_t)label;
        } else if (in->kind == DT_DATA_ENCODED) {
            const uint8_t *b = NULL;
            size_t len = 0;
            int32_t label = 0, w = 0, h = 0;
            if (dt_dataset_encoded(d, i, &b, &len, &label, &w, &h) == DT_OK && len > 0)
                sink += b[0] + b[len - 1] + (uint64_t)(label + w + h);
        } else {
            const uint32_t *t = NULL;
            const uint8_t *m = NULL;
            int64_t len = 0;
            if (dt_dataset_doc(d, i, &t, &m, &len) == DT_OK && len > 0)
                sink += t[0] + t[len - 1] + (m ? m[len - 1] : 0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[4096];
    if (!dir[0]) fz_path(dir, sizeof dir, "dataset");
    fz_rm(dir);
    fz_mkdirs(dir);
    const uint8_t *part[5];
    size_t len[5];
    int n = fz_split(data, size, part, len, 5);
    char p[4200];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    fz_write(p, part[0], len[0]);
    for (int i = 1; i < n; i++) {
        snprintf(p, sizeof p, "%s/shard-%05d.dts", dir, i - 1);
        fz_write(p, part[i], len[i]);
    }
    for (int flags = 0; flags <= DT_DATA_VERIFY; flags += DT_DATA_VERIFY) {
        dt_dataset *d = NULL;
        if (dt_dataset_open(dir, flags, &d) == DT_OK) {
            walk(d);
            dt_dataset_close(d);
        }
    }
    return 0;
}
