/* Fuzz target: the MNIST / Fashion-MNIST importer's IDX files, plain or gzip
 * (src/data/import_image.c, src/core/file.c's reader).
 *
 * Input: one control byte, then up to four files separated by FZ_SEP: train-images-idx3-ubyte,
 * train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (a missing part: the
 * file is absent). Control bits: 0 name the files *.gz (read through zlib, which passes plain
 * bytes through too), 1 move a quarter of train to a val split, 2 keep at most 3 records.
 * Entry point: dt_data_import("mnist", ...) from a directory holding the files. An import that
 * succeeds must give datasets that open and verify (dt_dataset_open with DT_DATA_VERIFY): the
 * importer must not write what the reader refuses. */
#include <stdio.h>
#include "dtrain/data.h"
#include "fuzz_util.h"

static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                     "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char src[4096], out[4096];
    if (!src[0]) {
        fz_path(src, sizeof src, "idx");
        fz_path(out, sizeof out, "idx-out");
    }
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    fz_rm(src);
    fz_rm(out);
    fz_mkdirs(src);
    const uint8_t *part[4];
    size_t len[4];
    int n = fz_split(data + 1, size - 1, part, len, 4);
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s%s", src, names[i], ctl & 1 ? ".gz" : "");
        fz_write(p, part[i], len[i]);
    }
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1;
    o.val_fraction = ctl & 2 ? 0.25 : 0;
    o.max_records = ctl & 4 ? 3 : 0;
    const char *srcs[1] = {src};
    if (dt_data_import("mnist", srcs, 1, out, &o) == DT_OK) fz_check_import(out, ctl & 2);
    return 0;
}
