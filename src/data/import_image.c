/* Image importers: MNIST / Fashion-MNIST IDX files (plain or gzip) and CIFAR-10's binary
 * batches. Both have 10 classes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/import.h"
#include "core/file.h"
#include "core/bytes.h"
#include <unistd.h>
#include <zlib.h>

/* ---- IDX ---- */

typedef struct idx_file {
    char *path;
    uint8_t *data;
    size_t len;
    int gz;
} idx_file;

/* Largest IDX file (decompressed) an import reads: MNIST's train images are 47 MB, EMNIST's
 * largest 0.7 GB. The header's dimensions are checked against it before the file is read. */
#define IDX_MAX_BYTES ((uint64_t)16 << 30)

/* Checks an IDX header in b [len] (len may be the header alone): magic 0x00000800 | ndim for
 * unsigned bytes; fills dims and *end, the (decompressed) file size the dimensions imply:
 * 4 + 4 ndim + their product, computed without overflow and at most IDX_MAX_BYTES. */
static dt_status idx_parse(const char *path, int gz, const uint8_t *b, size_t len, uint32_t ndim,
                           uint32_t *dims, uint64_t *end) {
    const char *what = gz ? "decompressed " : "";
    if (len < 4 + 4 * (size_t)ndim)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: truncated: %zu %sbytes, an IDX header with %u "
                            "dimensions needs %u",
                            path, len, what, ndim, 4 + 4 * ndim);
    uint32_t magic = dt_be_get32(b), want = 0x800u | ndim;
    if (magic != want)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: bad magic 0x%08x at byte 0 (expected 0x%08x: "
                            "unsigned bytes, %u dimensions)",
                            path, magic, want, ndim);
    uint64_t total = 1;
    int over = 0;
    char shape[64] = "";
    for (uint32_t i = 0; i < ndim; i++) {
        dims[i] = dt_be_get32(b + 4 + 4 * i);
        over |= __builtin_mul_overflow(total, (uint64_t)dims[i], &total);
        size_t k = strlen(shape);
        snprintf(shape + k, sizeof shape - k, "%s%u", i ? " x " : "", dims[i]);
    }
    *end = 4 + 4 * (uint64_t)ndim + total;
    if (over || total > IDX_MAX_BYTES)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: header dimensions %s (bytes 4-%u) imply more than the "
                            "%" PRIu64 "-byte limit of an IDX file",
                            path, shape, 3 + 4 * ndim, IDX_MAX_BYTES);
    return DT_OK;
}

/* Finds "<dir>/<name>" or "<dir>/<name>.gz" and reads it. The header is read first, alone, and
 * checked: the file is then read with the size it implies as the limit, so a small gzip stream
 * that inflates to gigabytes is stopped there, not read into memory whole. */
static dt_status idx_find(const char *dir, const char *name, uint32_t ndim, idx_file *f) {
    memset(f, 0, sizeof *f);
    char gzname[128];
    snprintf(gzname, sizeof gzname, "%s.gz", name);
    f->path = dt_path_join(dir, name);
    if (f->path && !dt_path_exists(f->path)) {
        free(f->path);
        f->path = dt_path_join(dir, gzname);
        f->gz = 1;
        if (f->path && !dt_path_exists(f->path)) {
            dt_status st = dt_error_set(DT_ERR_IO, "%s: no IDX file %s or %s", dir, name, gzname);
            free(f->path);
            f->path = NULL;
            return st;
        }
    }
    if (!f->path) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    int fd;
    dt_status os = dt_file_open_regular(f->path, O_RDONLY, 0, &fd);
    if (os) return os;
    gzFile z = gzdopen(fd, "rb"); /* plain files pass through */
    if (!z) {
        close(fd);
        return dt_error_set(DT_ERR_NOMEM, "%s: cannot start reading: out of memory", f->path);
    }
    uint8_t hdr[16];
    int got = gzread(z, hdr, 4 + 4 * ndim), e = Z_OK;
    dt_status st = DT_OK;
    if (got < 0)
        st = dt_error_set(DT_ERR_FORMAT, "%s: gzip stream corrupt in the IDX header: %s", f->path,
                          gzerror(z, &e));
    gzclose(z);
    uint32_t dims[3];
    uint64_t end = 0;
    if (!st) st = idx_parse(f->path, f->gz, hdr, (size_t)got, ndim, dims, &end);
    if (st) return st;
    /* a plain file is read by its size (idx_header then compares); a gzip stream up to end */
    return dt_read_file_max(f->path, f->gz, f->gz ? (size_t)end : SIZE_MAX, "its IDX header",
                            &f->data, &f->len);
}

static void idx_free(idx_file *f) {
    free(f->path);
    free(f->data);
    memset(f, 0, sizeof *f);
}

/* Checks the file read against its header. Fills dims. */
static dt_status idx_header(const idx_file *f, uint32_t ndim, uint32_t *dims) {
    const char *what = f->gz ? "decompressed " : "";
    uint64_t end = 0;
    dt_status st = idx_parse(f->path, f->gz, f->data, f->len, ndim, dims, &end);
    if (st) return st;
    if (f->len < end)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: truncated: the header says the data ends at %sbyte "
                            "%" PRIu64 ", the file has %zu",
                            f->path, what, end, f->len);
    if (f->len > end)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: %zu unexpected %sbytes after the data end (byte %" PRIu64 ")",
                            f->path, f->len - (size_t)end, what, end);
    return DT_OK;
}

/* One source split (train or t10k) into one or two writers (train/val or test). */
static dt_status idx_split(dt_import *im, const char *src, const char *prefix, const char *name,
                           int is_train) {
    char iname[64], lname[64];
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", prefix);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", prefix);
    idx_file fi, fl;
    dt_status st = idx_find(src, iname, 3, &fi);
    if (st) {
        idx_free(&fi);
        return st;
    }
    st = idx_find(src, lname, 1, &fl);
    uint32_t id[3], ld[1];
    if (!st) st = idx_header(&fi, 3, id);
    if (!st) st = idx_header(&fl, 1, ld);
    if (!st && id[0] != ld[0])
        st = dt_error_set(DT_ERR_FORMAT, "%s: %u labels (bytes 4-7) for %u images in %s", fl.path,
                          ld[0], id[0], fi.path);
    if (!st && (id[1] == 0 || id[2] == 0 || id[1] > 4096 || id[2] > 4096))
        st = dt_error_set(DT_ERR_FORMAT, "%s: image size %ux%u (bytes 8-15) out of range", fi.path,
                          id[1], id[2]);
    /* the data behind the headers only once both are checked (a missing file's data is NULL) */
    const uint8_t *labels = st ? NULL : fl.data + 8, *pix = st ? NULL : fi.data + 16;
    int64_t n = st ? 0 : id[0];
    for (int64_t i = 0; !st && i < n; i++)
        if (labels[i] > 9)
            st = dt_error_set(DT_ERR_FORMAT, "%s: label %u at byte %" PRId64 " is not a class 0-9",
                              fl.path, labels[i], 8 + i);
    if (im->o->max_records > 0 && n > im->o->max_records) n = im->o->max_records;
    uint8_t *val = NULL;
    dt_dataset_writer *wm = NULL, *wv = NULL;
    dt_dataset_spec spec = {.kind = DT_DATA_IMAGE, .classes = 10, .channels = 1, .name = name};
    if (!st) {
        spec.height = (int32_t)id[1], spec.width = (int32_t)id[2];
        st = dt_import_writer(im, is_train ? "train" : "test", &spec, &wm);
    }
    if (!st && is_train && im->o->val_fraction > 0) {
        val = dt_import_val_mask(n, im->o->val_fraction, im->o->seed);
        st = val ? dt_import_writer(im, "val", &spec, &wv) : DT_ERR_NOMEM;
    }
    int64_t hw = (int64_t)spec.height * spec.width, nv = 0;
    for (int64_t i = 0; !st && i < n; i++) {
        int v = val && val[i];
        nv += v;
        st = dt_dataset_writer_add_image(v ? wv : wm, pix + i * hw, labels[i]);
    }
    if (!st)
        dt_import_note(im, "%s: %" PRId64 " images %ux%u -> %s %" PRId64 "%s", fi.path, n, id[1],
                       id[2], is_train ? "train" : "test", n - nv, nv ? " + val" : "");
    free(val);
    idx_free(&fi);
    idx_free(&fl);
    return st;
}

dt_status dt_import_idx(dt_import *im, const char *src, const char *name) {
    dt_status st = idx_split(im, src, "train", name, 1);
    if (!st) st = idx_split(im, src, "t10k", name, 0);
    return st;
}

/* ---- CIFAR-10 binary ---- */

enum { CIFAR_HW = 32, CIFAR_REC = 1 + 3 * CIFAR_HW * CIFAR_HW };

/* Records: 1 label byte, then the red, green and blue 32x32 planes (CHW) -> HWC. */
static dt_status cifar_file(dt_import *im, const char *path, dt_dataset_writer *wm,
                            dt_dataset_writer *wv, const uint8_t *val, int64_t *idx,
                            int64_t limit) {
    uint8_t *d;
    size_t len;
    dt_status st = dt_read_file(path, 0, &d, &len);
    if (st) return st;
    if (len % CIFAR_REC) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: %zu bytes is not a whole number of %d-byte records: "
                          "the record at byte %zu is truncated",
                          path, len, CIFAR_REC, len - len % CIFAR_REC);
        free(d);
        return st;
    }
    size_t n = len / CIFAR_REC;
    uint8_t hwc[CIFAR_REC - 1];
    for (size_t r = 0; !st && r < n && (limit <= 0 || *idx < limit); r++) {
        const uint8_t *rec = d + r * CIFAR_REC;
        if (rec[0] > 9) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: record %zu (byte %zu) has label %u, not a class "
                              "0-9",
                              path, r, r * CIFAR_REC, rec[0]);
            break;
        }
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < CIFAR_HW * CIFAR_HW; p++) hwc[p * 3 + c] = rec[1 + c * 1024 + p];
        int v = val && val[*idx];
        st = dt_dataset_writer_add_image(v ? wv : wm, hwc, rec[0]);
        (*idx)++;
    }
    if (!st) dt_import_note(im, "%s: %zu images", path, n);
    free(d);
    return st;
}

dt_status dt_import_cifar10(dt_import *im, const char *src) {
    /* The official archive unpacks into cifar-10-batches-bin/; accept either level. */
    char *base = dt_path_join(src, "cifar-10-batches-bin");
    if (!base) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (!dt_path_exists(base)) {
        free(base);
        base = strdup(src);
    }
    char *train[5] = {0}, *test = NULL;
    int nt = 0;
    dt_status st = DT_OK;
    for (int i = 1; i <= 5; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "data_batch_%d.bin", i);
        char *p = dt_path_join(base, nm);
        if (p && dt_path_exists(p))
            train[nt++] = p;
        else
            free(p);
    }
    test = dt_path_join(base, "test_batch.bin");
    if (!nt || !test || !dt_path_exists(test))
        st = dt_error_set(DT_ERR_IO,
                          "%s: expected CIFAR-10 binary batches data_batch_1.bin ... "
                          "data_batch_5.bin and test_batch.bin",
                          base);
    /* Count train records first, for the val split. */
    int64_t ntrain = 0;
    for (int i = 0; !st && i < nt; i++) {
        FILE *f;
        if ((st = dt_file_fopen_regular(train[i], "rb", &f))) {
            break;
        }
        fseek(f, 0, SEEK_END);
        ntrain += ftell(f) / CIFAR_REC;
        fclose(f);
    }
    int64_t limit = im->o->max_records;
    if (limit > 0 && ntrain > limit) ntrain = limit;
    dt_dataset_spec spec = {.kind = DT_DATA_IMAGE,
                            .height = CIFAR_HW,
                            .width = CIFAR_HW,
                            .channels = 3,
                            .classes = 10,
                            .name = "cifar10"};
    dt_dataset_writer *wm = NULL, *wv = NULL, *wt = NULL;
    uint8_t *val = NULL;
    if (!st) st = dt_import_writer(im, "train", &spec, &wm);
    if (!st && im->o->val_fraction > 0) {
        val = dt_import_val_mask(ntrain, im->o->val_fraction, im->o->seed);
        st = val ? dt_import_writer(im, "val", &spec, &wv) : DT_ERR_NOMEM;
    }
    int64_t idx = 0;
    for (int i = 0; !st && i < nt; i++) st = cifar_file(im, train[i], wm, wv, val, &idx, ntrain);
    if (!st) st = dt_import_writer(im, "test", &spec, &wt);
    int64_t tidx = 0;
    if (!st) st = cifar_file(im, test, wt, NULL, NULL, &tidx, limit);
    free(val);
    for (int i = 0; i < nt; i++) free(train[i]);
    free(test);
    free(base);
    return st;
}
