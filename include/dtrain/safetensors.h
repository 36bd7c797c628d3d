/* safetensors files (Hugging Face's format): read (memory-mapped, every header field checked)
 * and write (atomic: temporary file, fsync, rename).
 *
 * Layout: u64 little-endian header size N, N bytes of JSON
 *   {"__metadata__": {...}, "name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
 * then the data section; offsets are relative to the data section. */
#ifndef DTRAIN_SAFETENSORS_H
#define DTRAIN_SAFETENSORS_H

#include "dtrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_st_file dt_st_file;

/* Opens and validates `path`. On a bad file the message names the file, the tensor and the
 * problem (truncated, offsets outside the data, overlapping tensors, unknown dtype, ...). */
dt_status dt_st_open(const char *path, dt_st_file **out);
/* The same on a whole file already in memory (read from object storage): takes ownership of
 * data (a malloc'd buffer; freed by dt_st_close, or at once on failure). name is for messages. */
dt_status dt_st_open_memory(const char *name, void *data, size_t n, dt_st_file **out);
/* The same on a buffer the caller keeps (valid until dt_st_close; not freed by it). */
dt_status dt_st_open_view(const char *name, const void *data, size_t n, dt_st_file **out);
/* Streaming reads (checkpoint restores) parse the header as soon as it has arrived:
 * dt_st_header_size gives the header's size, its 8-byte length included, from the file's first
 * 8 bytes (checked against file_size and the format's limit, as dt_st_open checks it);
 * dt_st_open_header validates it from prefix, the file's first n (>= that size) bytes, against a
 * file of file_size bytes (every check dt_st_open makes but the data's presence). prefix is not
 * kept: the file's tensors have no data in memory (dt_st_get gives data NULL), dt_st_locate says
 * where each one's bytes lie in the file. DT_ERR_RANGE if n is too short. */
dt_status dt_st_header_size(const char *name, const void *first8, size_t file_size, size_t *n);
dt_status dt_st_open_header(const char *name, const void *prefix, size_t n, size_t file_size,
                            dt_st_file **out);
void dt_st_close(dt_st_file *f);
/* Takes a file's pages out of this process's page tables (they stay in the page cache, and a
 * later read maps them again): after a one-time pass over the file, so that this process's
 * memory report no longer counts what it read once. No-op for a file in memory. */
void dt_st_drop_pages(const dt_st_file *f);
int dt_st_count(const dt_st_file *f);
const char *dt_st_name(const dt_st_file *f, int i);
/* A read-only view of the named tensor inside the mapping (valid until dt_st_close). */
dt_status dt_st_get(const dt_st_file *f, const char *name, dt_tensor *out);
/* The same, and the file offset of the tensor's first byte (the header included). */
dt_status dt_st_locate(const dt_st_file *f, const char *name, dt_tensor *out, size_t *file_offset);

typedef struct dt_st_entry {
    const char *name;
    const dt_tensor *t; /* any strides; written contiguous */
} dt_st_entry;
/* A whole file in memory: dt_st_serialized_size gives its size (0 on out of memory),
 * dt_st_serialize writes it into buf [cap] (checkpoint snapshots are these buffers, reused). */
size_t dt_st_serialized_size(const dt_st_entry *e, int n, const char *const *meta_keys,
                             const char *const *meta_vals, int n_meta);
dt_status dt_st_serialize(void *buf, size_t cap, const dt_st_entry *e, int n,
                          const char *const *meta_keys, const char *const *meta_vals, int n_meta,
                          size_t *written);
/* Writes the tensors (and optional "__metadata__" string pairs, keys[i] -> vals[i]). */
dt_status dt_st_save(const char *path, const dt_st_entry *e, int n, const char *const *meta_keys,
                     const char *const *meta_vals, int n_meta);

#ifdef __cplusplus
}
#endif
#endif
