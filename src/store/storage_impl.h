/* Internal storage interface: a vtable per backend (POSIX, S3). storage.c checks keys and
 * arguments before a backend sees them. */
#ifndef DT_STORE_STORAGE_IMPL_H
#define DT_STORE_STORAGE_IMPL_H

#include "dtrain/storage.h"

/* dt_store_get_stream's chunk when opts.read_chunk is 0 (see storage_posix.c for the choice). */
enum { DT_STORE_READ_CHUNK_DEFAULT = 2 << 20 };

typedef struct dt_store_ops {
    const char *kind;
    dt_status (*put)(dt_store *s, const char *key, const void *data, size_t n);
    dt_status (*get)(dt_store *s, const char *key, void **data, size_t *n);
    dt_status (*stat)(dt_store *s, const char *key, size_t *n);
    /* Appends keys under prefix to the list (storage.c sorts them). */
    dt_status (*list)(dt_store *s, const char *prefix, char ***keys, int *n, int *cap);
    dt_status (*del)(dt_store *s, const char *key);
    void (*close)(dt_store *s);
    /* Optional: reads the whole object into buf [cap] (DT_ERR_RANGE if larger). NULL: the
     * front end uses get + copy. */
    dt_status (*get_into)(dt_store *s, const char *key, void *buf, size_t cap, size_t *n);
    /* Optional: dt_store_get_stream (chunk = opts.read_chunk, resolved). NULL: the front end
     * uses get, then hands the buffer over in chunks. */
    dt_status (*get_stream)(dt_store *s, const char *key, size_t max_bytes, size_t chunk,
                            dt_store_chunk_fn fn, void *ud, size_t *total);
    /* bytes [off, off + len) into buf; *got: how many the object had there (< len: it ends
     * first) */
    dt_status (*get_range)(dt_store *s, const char *key, uint64_t off, size_t len, void *buf,
                           size_t *got);
} dt_store_ops;

struct dt_store {
    const dt_store_ops *ops;
    dt_store_opts opts;
    char url[4096];
    void *impl;
};

/* Backends: url is the part after the scheme ("PATH" for POSIX, "BUCKET[/PREFIX]" for S3). */
dt_status dt_store_posix_open(dt_store *s, const char *path);
dt_status dt_store_s3_open(dt_store *s, const char *bucket_prefix);
/* Appends a copy of key to a growing list. */
dt_status dt_store_list_add(char ***keys, int *n, int *cap, const char *key);

#endif
