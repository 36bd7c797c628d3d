/* Small helpers shared by the data layer: little-endian fields, files, directories. */
#ifndef DT_DATA_UTIL_H
#define DT_DATA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "dtrain/status.h"

static inline void dt_le_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dt_le_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t dt_le_get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t dt_le_get64(const uint8_t *p) {
    return (uint64_t)dt_le_get32(p) | (uint64_t)dt_le_get32(p + 4) << 32;
}
static inline uint32_t dt_be_get32(const uint8_t *p) {
    return (uint32_t)p[3] | (uint32_t)p[2] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[0] << 24;
}

/* "0123456789abcdef" form of a 64-bit hash into buf[17]. */
void dt_hex64(uint64_t v, char buf[17]);
/* Parses 16 hex digits; 0 on success. */
int dt_parse_hex64(const char *s, uint64_t *v);

/* Reads a whole file (malloc'd, NUL-terminated for convenience). Transparently inflates gzip
 * when `gz` is set. Errors name the file. */
dt_status dt_read_file(const char *path, int gz, uint8_t **data, size_t *len);
/* Upper bounds of whole-file reads of metadata: far above any real file, low enough that a
 * hostile or damaged one is refused before anything is allocated for it. The JSON parser
 * (cJSON) takes up to ~40 bytes of memory per byte of input ("[0,0,0,...": a 64-byte node per
 * 2 bytes), so the limit also bounds that. Manifests (a 64 MiB one lists ~400000 shards),
 * trainer_state.json, model.safetensors.index.json (a 405B model's: 100 KB): */
#define DT_MAX_META_BYTES ((size_t)64 << 20)
/* tokenizer.json and tiktoken rank files (Llama 3's tokenizer.json is 9 MB, Gemma 3's 33 MB): */
#define DT_MAX_TOKENIZER_BYTES ((size_t)128 << 20)
/* dt_read_file that refuses more than `max` bytes: a plain file larger than that before anything
 * is allocated (its size is known), a gzip stream as soon as it inflates past it (so a small
 * "gzip bomb" cannot make it allocate more than max + a chunk). `what` completes the message
 * "<path>: N bytes, more than the M-byte limit of <what>". */
dt_status dt_read_file_max(const char *path, int gz, size_t max, const char *what, uint8_t **data,
                           size_t *len);
/* 1 if `name` is one plain file name: not empty, no '/', not "." or "..", so that joined to a
 * directory it names an entry of that directory (names read from manifests and indexes). */
int dt_plain_name(const char *name);
/* Whether `path`, an entry of directory `dir`, stays inside it: 1 if it is not a symbolic link
 * or its target (all links resolved) lies inside dir (resolved too: a dir that is itself a link
 * is fine); 0 if the link leads outside; -1 if it cannot be resolved (errno set). */
int dt_path_inside(const char *dir, const char *path);
/* Writes `len` bytes to `path` (created or truncated) and fsyncs it, in a temporary folder that
 * the caller renames into place (a file that must be replaced whole where it is:
 * dt_file_write_atomic, core/file.h). A full disk is named with its file system (core/fsinfo.h). */
dt_status dt_write_file(const char *path, const void *data, size_t len);
/* Joins dir and name into a malloc'd path. */
char *dt_path_join(const char *dir, const char *name);
/* Removes a directory tree (best effort; used to clean up after failed writes). */
void dt_remove_tree(const char *path);
/* 1 if the path exists (any type). */
int dt_path_exists(const char *path);
/* Creates a fresh temporary directory next to `final` ("<final>.tmp-XXXXXX"); the parent of
 * `final` must exist. Returns the malloc'd path or NULL (error set). */
char *dt_temp_dir_for(const char *final);

struct cJSON;
/* Whether JSON object `o` holds a key twice (JSON leaves it undefined which copy counts: cJSON
 * finds the first, Python's json keeps the last): 1 and *dup = that key, 0 if none, -1 if out of
 * memory. Sorts the keys (n log n: a large header may hold 10^6). */
int dt_json_duplicate_key(const struct cJSON *o, const char **dup);

/* Line and column (1-based, columns in bytes) of byte offset `off` in `s`. */
void dt_line_col(const char *s, size_t off, int64_t *line, int64_t *col);

#endif
