/* `dtrain data import images SRC`: JPEG, PNG and WebP files into an encoded-image dataset.
 *
 * SRC is an ImageFolder (SRC/<class>/<file>: one train split, --val moves a fraction to val), a
 * folder of splits (SRC/train/<class>/..., SRC/val/..., SRC/test/...: the classes are train's),
 * or a list file (import_folder.c). Files are kept by their content: one that is not JPEG, PNG
 * or WebP is skipped ("not an image"); one that is but does not decode (corrupt, truncated,
 * unsupported) or cannot be read is listed with the reason and skipped, or fails the import
 * with `strict`. Each image is decoded once to check it (JPEG at 1/8 scale: every coefficient
 * is still read); with max_side, a larger one is decoded, shrunk by area averaging so its
 * longer side is max_side, and re-encoded as JPEG quality 90, else its bytes are stored as
 * they are.
 *
 * Threads check windows of files in parallel; the writer then appends the window in list
 * order, so the dataset does not depend on the number of threads or their timing. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/file.h"
#include "data/image_codec.h"
#include "data/import.h"

/* Largest image file read (a 64 Mi pixel PNG can be ~200 MB). */
#define IMAGE_FILE_MAX ((size_t)512 << 20)
enum { WINDOW_PER_THREAD = 32, MAX_THREADS = 64 };

typedef enum { RES_OK = 0, RES_NOT_IMAGE = 1, RES_BAD = 2 } result_kind;

typedef struct result {
    result_kind kind;
    uint8_t *bytes; /* the file's bytes, or the re-encoded JPEG */
    size_t len;
    int32_t w, h, fmt;
    char why[256]; /* RES_NOT_IMAGE / RES_BAD: the reason */
} result;

typedef struct job {
    const dt_image_list *l;
    int64_t lo, hi; /* this window: entries [lo, hi) */
    result *res;    /* [hi - lo] */
    _Atomic int64_t next;
    int max_side;
} job;

static void set_why(result *r, result_kind k, const char *msg) {
    r->kind = k;
    snprintf(r->why, sizeof r->why, "%s", msg);
    free(r->bytes);
    r->bytes = NULL;
}

/* Shrinks to max_side and re-encodes (JPEG decoded at the largest DCT scale that keeps the
 * longer side >= max_side). */
static dt_status shrink(result *r, const dt_image_info *in, int max_side) {
    int32_t side = in->width > in->height ? in->width : in->height;
    int d = 8;
    while (d > 1 && (in->format != DT_IMAGE_JPEG || (side + d - 1) / d < max_side)) d /= 2;
    int32_t sw, sh, w, h;
    dt_image_decoded_size(in, d, &sw, &sh);
    uint8_t *px = malloc((size_t)sw * sh * 3);
    if (!px) return dt_error_set(DT_ERR_NOMEM, "out of memory for %dx%d", sw, sh);
    dt_status st = dt_image_decode(r->bytes, r->len, d, px, (size_t)sw * sh * 3, &w, &h);
    int32_t dw =
        in->width >= in->height ? max_side : (int32_t)((int64_t)in->width * max_side / in->height);
    int32_t dh =
        in->height > in->width ? max_side : (int32_t)((int64_t)in->height * max_side / in->width);
    if (dw < 1) dw = 1;
    if (dh < 1) dh = 1;
    uint8_t *small = st ? NULL : malloc((size_t)dw * dh * 3);
    if (!st && !small) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (!st) st = dt_image_resize_area(px, w, h, small, dw, dh);
    free(px);
    uint8_t *jpg = NULL;
    size_t jl = 0;
    if (!st) st = dt_image_encode_jpeg(small, dw, dh, 90, &jpg, &jl);
    free(small);
    if (st) return st;
    free(r->bytes);
    r->bytes = jpg, r->len = jl, r->w = dw, r->h = dh, r->fmt = DT_IMAGE_JPEG;
    return DT_OK;
}

static void check_one(const char *path, int max_side, result *r) {
    memset(r, 0, sizeof *r);
    dt_status st = dt_read_file_max(path, 0, IMAGE_FILE_MAX, "an image file", &r->bytes, &r->len);
    if (st) {
        set_why(r, RES_BAD, dt_last_error());
        return;
    }
    if (dt_image_format_of(r->bytes, r->len) == DT_IMAGE_UNKNOWN) {
        set_why(r, RES_NOT_IMAGE, "not a JPEG, PNG or WebP file");
        return;
    }
    dt_image_info in;
    st = dt_image_probe(r->bytes, r->len, &in);
    if (!st && max_side > 0 && (in.width > max_side || in.height > max_side)) {
        st = shrink(r, &in, max_side);
    } else if (!st) {
        int d = in.format == DT_IMAGE_JPEG ? 8 : 1;
        int32_t w, h, dw, dh;
        dt_image_decoded_size(&in, d, &w, &h);
        uint8_t *px = malloc((size_t)w * h * 3);
        st = px ? dt_image_decode(r->bytes, r->len, d, px, (size_t)w * h * 3, &dw, &dh)
                : dt_error_set(DT_ERR_NOMEM, "out of memory for %dx%d", w, h);
        free(px);
        r->w = in.width, r->h = in.height, r->fmt = (int32_t)in.format;
    }
    if (st) set_why(r, RES_BAD, dt_last_error());
}

static void *worker(void *arg) {
    job *j = arg;
    for (;;) {
        int64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->hi - j->lo) break;
        check_one(j->l->e[j->lo + i].path, j->max_side, &j->res[i]);
    }
    return NULL;
}

static int n_threads(const dt_import_options *o) {
    long n = o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* Checks the window [lo, hi) of l on `nt` threads (the calling one among them). */
static void run_window(job *j, int nt) {
    atomic_store(&j->next, 0);
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < nt && j->hi - j->lo > t; t++)
        if (pthread_create(&th[started], NULL, worker, j) == 0) started++;
    worker(j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
}

typedef struct split_out {
    dt_dataset_writer *w, *wv; /* this split, and val taken from it (or NULL) */
    int64_t n, nv, bad, not_image;
} split_out;

/* Writes one split's images: l in order, val[i] sends entry i to wv. */
static dt_status write_split(dt_import *im, const dt_image_list *l, const uint8_t *val,
                             const char *split, split_out *so) {
    const dt_import_options *o = im->o;
    int nt = n_threads(o);
    int64_t win = (int64_t)nt * WINDOW_PER_THREAD, total = l->n;
    if (o->max_records > 0 && total > o->max_records) total = o->max_records;
    result *res = calloc((size_t)win, sizeof *res);
    if (!res) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    job j = {.l = l, .res = res, .max_side = o->max_side};
    dt_status st = DT_OK;
    int64_t next_note = total / 10;
    for (int64_t lo = 0; !st && lo < total; lo += win) {
        j.lo = lo, j.hi = lo + win < total ? lo + win : total;
        run_window(&j, nt);
        for (int64_t i = 0; i < j.hi - lo; i++) {
            result *r = &res[i];
            const char *path = l->e[lo + i].path, *why = r->why;
            size_t pl = strlen(path); /* a read error names the file already */
            if (!strncmp(why, path, pl) && !strncmp(why + pl, ": ", 2)) why += pl + 2;
            if (!st && r->kind == RES_OK) {
                int v = val && val[lo + i];
                st = dt_dataset_writer_add_encoded(v ? so->wv : so->w, r->bytes, r->len,
                                                   l->e[lo + i].label, r->w, r->h, r->fmt);
                so->n += !v, so->nv += v;
            } else if (!st && r->kind == RES_BAD && o->strict) {
                st = dt_error_set(DT_ERR_FORMAT, "%s: %s (--strict: nothing imported)", path, why);
            } else if (!st) {
                /* listed even when quiet: a skipped image changes what is trained on */
                fprintf(stderr, "import images: skipped %s: %s\n", path, why);
                so->bad += r->kind == RES_BAD, so->not_image += r->kind == RES_NOT_IMAGE;
            }
            free(r->bytes);
            r->bytes = NULL;
        }
        if (!st && j.hi >= next_note && j.hi < total) {
            dt_import_note(im, "%s: %" PRId64 "/%" PRId64 " files", split, j.hi, total);
            while (next_note <= j.hi) next_note += total / 10 > 0 ? total / 10 : 1;
        }
    }
    free(res);
    if (!st)
        dt_import_note(im,
                       "%s: %" PRId64 " images%s (%d classes); skipped %" PRId64
                       " bad images and %" PRId64 " other files",
                       split, so->n, so->wv ? " + val" : "", l->classes, so->bad, so->not_image);
    return st;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static dt_status open_writer(dt_import *im, const char *split, const dt_image_list *l,
                             dt_dataset_writer **w) {
    dt_dataset_spec spec = {.kind = DT_DATA_ENCODED,
                            .classes = l->classes,
                            .class_names = (const char *const *)l->names,
                            .name = "images"};
    return dt_import_writer(im, split, &spec, w);
}

/* One source split (an ImageFolder or a list) into `split`, with --val taken from it. */
static dt_status import_list(dt_import *im, const dt_image_list *l, const char *split,
                             int with_val) {
    split_out so = {0};
    uint8_t *val = NULL;
    dt_status st = open_writer(im, split, l, &so.w);
    if (!st && with_val && im->o->val_fraction > 0) {
        val = dt_import_val_mask(l->n, im->o->val_fraction, im->o->seed);
        st = val ? open_writer(im, "val", l, &so.wv) : DT_ERR_NOMEM;
    }
    if (!st) st = write_split(im, l, val, split, &so);
    free(val);
    return st;
}

dt_status dt_import_images(dt_import *im, const char *src) {
    dt_status st;
    dt_image_list train = {0}, other = {0};
    if (!is_dir(src)) {
        st = dt_image_list_file(src, &train);
        if (!st) st = import_list(im, &train, "train", 1);
        dt_image_list_free(&train);
        return st;
    }
    char *tdir = dt_path_join(src, "train"), *vdir = dt_path_join(src, "val"),
         *sdir = dt_path_join(src, "test");
    if (!tdir || !vdir || !sdir) {
        free(tdir), free(vdir), free(sdir);
        return dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    /* SRC/train + SRC/val (+ SRC/test): splits given by folder; otherwise SRC is one
     * ImageFolder whose classes may well include one called "train" */
    int split_layout = is_dir(tdir) && (is_dir(vdir) || is_dir(sdir));
    if (split_layout && im->o->val_fraction > 0 && is_dir(vdir)) {
        st = dt_error_set(DT_ERR_INVALID, "%s: has a val folder: --val would make a second one",
                          src);
    } else if (split_layout) {
        st = dt_image_folder(tdir, NULL, &train);
        if (!st) st = import_list(im, &train, "train", 1);
        const char *const dirs[2] = {vdir, sdir}, *names[2] = {"val", "test"};
        for (int k = 0; k < 2 && !st; k++) {
            if (!is_dir(dirs[k])) continue;
            st = dt_image_folder(dirs[k], &train, &other);
            if (!st) st = import_list(im, &other, names[k], 0);
            dt_image_list_free(&other);
        }
    } else {
        st = dt_image_folder(src, NULL, &train);
        if (!st) st = import_list(im, &train, "train", 1);
    }
    dt_image_list_free(&train);
    free(tdir), free(vdir), free(sdir);
    return st;
}
