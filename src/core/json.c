/* Helpers for the JSON files dtrain reads (src/core/json.h). */
#include "core/json.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

const char *dt_json_kind(const cJSON *v) {
    return cJSON_IsString(v)   ? "a string"
           : cJSON_IsNumber(v) ? "a number"
           : cJSON_IsObject(v) ? "an object"
           : cJSON_IsArray(v)  ? "an array"
           : cJSON_IsBool(v)   ? "a boolean"
           : cJSON_IsNull(v)   ? "null"
                               : "not a value";
}

void dt_line_col(const char *s, size_t off, int64_t *line, int64_t *col) {
    int64_t l = 1;
    size_t start = 0;
    for (size_t i = 0; i < off; i++)
        if (s[i] == '\n') l++, start = i + 1;
    *line = l;
    *col = (int64_t)(off - start) + 1;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int dt_json_duplicate_key(const cJSON *o, const char **dup) {
    *dup = NULL;
    int n = cJSON_GetArraySize(o), i = 0, found = 0;
    const char **k = malloc(((size_t)n + 1) * sizeof *k);
    if (!k) return -1;
    for (const cJSON *a = o->child; a && i < n; a = a->next) k[i++] = a->string;
    qsort(k, (size_t)i, sizeof *k, cmp_key);
    for (int j = 1; j < i && !found; j++)
        if (strcmp(k[j], k[j - 1]) == 0) *dup = k[j], found = 1;
    free(k);
    return found;
}

const char *dt_json_what(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsNumber(v))
        snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, n, "a string \"%.40s\"", v->valuestring);
    else
        snprintf(buf, n, "%s",
                 cJSON_IsObject(v)  ? "an object"
                 : cJSON_IsArray(v) ? "an array"
                 : cJSON_IsBool(v)  ? (cJSON_IsTrue(v) ? "true" : "false")
                 : cJSON_IsNull(v)  ? "null"
                                    : "missing");
    return buf;
}

/* Depth-first search for an object holding a key twice; `where` (of size n) holds the dotted
 * path of `o` ("model.vocab", "shards[3]") and, on a find, stays that of the object found.
 * Depth is bounded by cJSON's nesting limit (1000). */
static int dup_walk(const cJSON *o, char *where, size_t n, const char **dup) {
    if (cJSON_IsObject(o)) {
        int r = dt_json_duplicate_key(o, dup);
        if (r) return r;
    }
    if (!cJSON_IsObject(o) && !cJSON_IsArray(o)) return 0;
    size_t at = strlen(where);
    int i = 0;
    for (const cJSON *c = o->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        if (cJSON_IsObject(o))
            snprintf(where + at, n - at, "%s%s", at ? "." : "", c->string);
        else
            snprintf(where + at, n - at, "[%d]", i);
        int r = dup_walk(c, where, n, dup);
        if (r) return r;
        where[at] = '\0';
    }
    return 0;
}

cJSON *dt_json_parse_strict(const char *path, const char *txt, size_t len, dt_status *st) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(txt, len, &end, 0);
    int64_t line, col;
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = ep && ep >= txt ? (size_t)(ep - txt) : 0;
        dt_line_col(txt, off < len ? off : len, &line, &col);
        *st = dt_error_set(DT_ERR_FORMAT, "%s:%" PRId64 ":%" PRId64 ": malformed JSON", path, line,
                           col);
        return NULL;
    }
    size_t off = end && end >= txt ? (size_t)(end - txt) : len;
    while (off < len &&
           (txt[off] == ' ' || txt[off] == '\t' || txt[off] == '\n' || txt[off] == '\r'))
        off++;
    if (off < len) {
        dt_line_col(txt, off, &line, &col);
        *st = dt_error_set(DT_ERR_FORMAT,
                           "%s:%" PRId64 ":%" PRId64
                           ": bytes after the JSON value (a file holds one value)",
                           path, line, col);
        cJSON_Delete(root);
        return NULL;
    }
    char where[256] = "";
    const char *dup = NULL;
    int r = dup_walk(root, where, sizeof where, &dup);
    if (r) {
        *st = r < 0 ? dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path)
                    : dt_error_set(DT_ERR_FORMAT,
                                   "%s: %s%skey \"%.80s\" appears twice (duplicate JSON key: "
                                   "readers differ on which copy counts)",
                                   path, where, *where ? ": " : "", dup);
        cJSON_Delete(root);
        return NULL;
    }
    *st = DT_OK;
    return root;
}
