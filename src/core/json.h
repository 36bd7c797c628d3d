/* Helpers for the JSON files dtrain reads (cJSON): keys given twice, and where in the text an
 * error lies. */
#ifndef DTRAIN_CORE_JSON_H
#define DTRAIN_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

struct cJSON;
/* Whether JSON object `o` holds a key twice (JSON leaves it undefined which copy counts: cJSON
 * finds the first, Python's json keeps the last): 1 and *dup = that key, 0 if none, -1 if out of
 * memory. Sorts the keys (n log n: a large header may hold 10^6). */
int dt_json_duplicate_key(const struct cJSON *o, const char **dup);

/* "a string", "a number", "an object", "an array", "a boolean", "null": what `v` is, for
 * messages that say what a key holds instead of what it should. */
const char *dt_json_kind(const struct cJSON *v);

/* A JSON value as a message shows it: 2.5, a string "x", an object, null, missing (v NULL);
 * buf of n bytes. */
const char *dt_json_what(const struct cJSON *v, char *buf, size_t n);

/* Parses a file's whole text as one JSON document the way its specification (RFC 8259) and
 * every reader agree on: one value with nothing but whitespace after it (cJSON alone ignores
 * what follows), and no object anywhere holding a key twice (cJSON finds the first copy,
 * Python's json and serde maps keep the last). NULL with *st set to one line naming the file:
 * "PATH:L:C: malformed JSON", "PATH:L:C: bytes after the JSON value ...", or "PATH: model.vocab:
 * key "x" appears twice (duplicate JSON key ...)". */
struct cJSON *dt_json_parse_strict(const char *path, const char *txt, size_t len, dt_status *st);

/* Line and column (1-based, columns in bytes) of byte offset `off` in `s`. */
void dt_line_col(const char *s, size_t off, int64_t *line, int64_t *col);

#endif
