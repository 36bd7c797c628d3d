/* Helpers for the JSON files dtrain reads (src/core/json.h). */
#include "core/json.h"
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
