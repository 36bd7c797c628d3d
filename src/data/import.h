/* Importers: an import writes every split into one temporary directory and renames it into
 * place at the end (import.c); the format readers live in import_image.c and import_text.c. */
#ifndef DT_DATA_IMPORT_H
#define DT_DATA_IMPORT_H

#include "dtrain/data.h"

typedef struct dt_import {
    const dt_import_options *o;
    const char *kind;
    char *out, *top;         /* final directory; temporary directory being filled */
    dt_dataset_writer *w[4]; /* open split writers */
    char split_name[4][16];
    int n_w;
} dt_import;

/* Opens a writer for split `split` (train, val, test) inside the import's temporary dir. */
dt_status dt_import_writer(dt_import *im, const char *split, dt_dataset_spec *spec,
                           dt_dataset_writer **w);
/* 1 where record i (of n) goes to the val split: round(n * val_fraction) records chosen by
 * the keyed permutation. malloc'd; NULL with an error set on failure. */
uint8_t *dt_import_val_mask(int64_t n, double fraction, uint64_t seed);
/* The tokenizer file an import uses (malloc'd): o->tokenizer or $DT_TOKENIZER, and for a
 * directory (a model folder) its tokenizer.json; NULL when none is given. */
char *dt_import_tokenizer_path(const dt_import_options *o);
/* tokenizer_config.json beside tokenizer file `tok` (malloc'd; it may not exist). */
char *dt_import_tokenizer_config(const char *tok);
/* Progress line on stderr unless quiet. */
void dt_import_note(const dt_import *im, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* import_record.c: the import's record (malloc'd JSON text: kind, sources and their files'
 * fingerprint, options, tokenizer checksum) and, once every split is written, the tokenizer
 * copied beside each split's manifest and OUT/import.json written into the temporary dir. */
char *dt_import_record(const char *kind, const char *const *srcs, int n_srcs,
                       const dt_import_options *o);
dt_status dt_import_finish_record(const dt_import *im, const char *const *srcs, int n_srcs);

/* A growing array of malloc'd strings (file paths, names). */
typedef struct dt_strv {
    char **s;
    int64_t n, cap;
} dt_strv;
/* Appends s (taking it; freed on failure); -1 when s is NULL or memory runs out. */
int dt_strv_push(dt_strv *v, char *s);
void dt_strv_free(dt_strv *v);
/* qsort comparator of char * elements by strcmp (byte order). */
int dt_strv_cmp(const void *a, const void *b);

/* import_folder.c: the files of an image import, in order, with labels. */
typedef struct dt_image_entry {
    char *path;
    int32_t label;
} dt_image_entry;
typedef struct dt_image_list {
    dt_image_entry *e;
    int64_t n, cap;
    char **names; /* [classes] class names, label k is names[k] */
    int32_t classes;
} dt_image_list;
/* ImageFolder root/<class>/... (torchvision's order; hidden names left out). With classes_of,
 * the classes are those (a val or test split) and a class folder not among them is an error. */
dt_status dt_image_folder(const char *root, const dt_image_list *classes_of, dt_image_list *l);
/* A list file: CSV lines "path,label" (an optional "path,label" header; the label after the
 * last comma) or, for *.jsonl, {"path": ..., "label": ...}; relative paths are relative to
 * the list's folder. Labels that are all integers are used as they are; otherwise they are
 * class names, indexed in sorted order. */
dt_status dt_image_list_file(const char *file, dt_image_list *l);
void dt_image_list_free(dt_image_list *l);
/* import_images.c: `dtrain data import images SRC` (an ImageFolder, a train/val[/test] folder
 * of them, or a list file). */
dt_status dt_import_images(dt_import *im, const char *src);

dt_status dt_import_idx(dt_import *im, const char *src, const char *name);
dt_status dt_import_cifar10(dt_import *im, const char *src);
dt_status dt_import_text(dt_import *im, const char *const *srcs, int n);
dt_status dt_import_jsonl(dt_import *im, const char *const *srcs, int n);
/* The jsonl options' names (--format, --template): DT_ERR_INVALID naming the one unknown. */
dt_status dt_import_jsonl_check(const dt_import_options *o);

#endif
