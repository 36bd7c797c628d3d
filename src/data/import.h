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

dt_status dt_import_idx(dt_import *im, const char *src, const char *name);
dt_status dt_import_cifar10(dt_import *im, const char *src);
dt_status dt_import_text(dt_import *im, const char *const *srcs, int n);
dt_status dt_import_jsonl(dt_import *im, const char *const *srcs, int n);
/* The jsonl options' names (--format, --template): DT_ERR_INVALID naming the one unknown. */
dt_status dt_import_jsonl_check(const dt_import_options *o);

#endif
