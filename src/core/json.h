/* Helpers for the JSON files dtrain reads (cJSON): keys given twice, and where in the text an
 * error lies. */
#ifndef DTRAIN_CORE_JSON_H
#define DTRAIN_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;
/* Whether JSON object `o` holds a key twice (JSON leaves it undefined which copy counts: cJSON
 * finds the first, Python's json keeps the last): 1 and *dup = that key, 0 if none, -1 if out of
 * memory. Sorts the keys (n log n: a large header may hold 10^6). */
int dt_json_duplicate_key(const struct cJSON *o, const char **dup);

/* "a string", "a number", "an object", "an array", "a boolean", "null": what `v` is, for
 * messages that say what a key holds instead of what it should. */
const char *dt_json_kind(const struct cJSON *v);

/* Line and column (1-based, columns in bytes) of byte offset `off` in `s`. */
void dt_line_col(const char *s, size_t off, int64_t *line, int64_t *col);

#endif
