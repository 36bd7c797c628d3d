/* Fuzz target: the CIFAR-10 importer's binary batches (src/data/import_image.c): records of one
 * label byte and three 32x32 colour planes.
 *
 * Input: one control byte, then data_batch_1.bin, test_batch.bin and data_batch_2.bin
 * separated by FZ_SEP (a missing part: the file is absent). Control bits: 0 put the files in a
 * cifar-10-batches-bin/ subdirectory (as the official archive unpacks), 1 move a quarter of
 * train to a val split, 2 keep at most 2 records. Entry point: dt_data_import("cifar10", ...);
 * an import that succeeds must give datasets that open and verify (fz_check_import). */
#include <stdio.h>
#include "dtrain/data.h"
#include "fuzz_util.h"

static const char *const names[3] = {"data_batch_1.bin", "test_batch.bin", "data_batch_2.bin"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char src[4096], out[4096];
    if (!src[0]) {
        fz_path(src, sizeof src, "cifar");
        fz_path(out, sizeof out, "cifar-out");
    }
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    fz_rm(src);
    fz_rm(out);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s%s", src, ctl & 1 ? "/cifar-10-batches-bin" : "");
    fz_mkdirs(dir);
    const uint8_t *part[3];
    size_t len[3];
    int n = fz_split(data + 1, size - 1, part, len, 3);
    for (int i = 0; i < n; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        fz_write(p, part[i], len[i]);
    }
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1;
    o.val_fraction = ctl & 2 ? 0.25 : 0;
    o.max_records = ctl & 4 ? 2 : 0;
    const char *srcs[1] = {src};
    if (dt_data_import("cifar10", srcs, 1, out, &o) == DT_OK) fz_check_import(out, ctl & 2);
    return 0;
}
