/* The registry's integrity check (include/dtrain/registry.h): every file a version recorded,
 * re-hashed and compared with its registration. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "core/bytes.h"
#include "core/file.h"
#include "dtrain/registry.h"

enum { CHUNK = 1 << 20 };

dt_status dt_registry_hash_file(const char *path, int64_t *bytes, uint64_t *xxh3) {
    FILE *f;
    dt_status st = dt_file_fopen_regular(path, "rb", &f);
    if (st != DT_OK) return st;
    XXH3_state_t *h = XXH3_createState();
    char *buf = malloc(CHUNK);
    if (!h || !buf || XXH3_64bits_reset(h) != XXH_OK) {
        st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory for hashing", path);
    } else {
        int64_t n = 0;
        size_t r;
        while ((r = fread(buf, 1, CHUNK, f)) > 0) {
            XXH3_64bits_update(h, buf, r);
            n += (int64_t)r;
        }
        if (ferror(f)) st = dt_error_set(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        *bytes = n;
        *xxh3 = XXH3_64bits_digest(h);
    }
    fclose(f);
    XXH3_freeState(h);
    free(buf);
    return st;
}

dt_status dt_registry_verify(const dt_registry_version *v, dt_registry_problem_cb cb, void *ud) {
    cJSON *arr = v && v->files_json ? cJSON_Parse(v->files_json) : NULL;
    if (!cJSON_IsArray(arr)) {
        cJSON_Delete(arr);
        return dt_error_set(DT_ERR_FORMAT, "model %s@%d: no file list recorded", v ? v->name : "",
                            v ? v->version : 0);
    }
    int bad = 0;
    char first[PATH_MAX + 400] = "";
    cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "xxh3"));
        cJSON *nb = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        dt_registry_problem p = {.file = name ? name : "?", .bytes_found = -1};
        if (!name || !hex || !cJSON_IsNumber(nb) || dt_parse_hex64(hex, &p.xxh3_recorded) ||
            !dt_plain_name(name)) {
            p.what = "unreadable";
        } else {
            p.bytes_recorded = (int64_t)nb->valuedouble;
            char path[PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s", v->path, name);
            if (!dt_path_exists(path))
                p.what = "missing";
            else if (dt_registry_hash_file(path, &p.bytes_found, &p.xxh3_found) != DT_OK)
                p.what = "unreadable";
            else if (p.bytes_found != p.bytes_recorded)
                p.what = "size";
            else if (p.xxh3_found != p.xxh3_recorded)
                p.what = "checksum";
        }
        if (!p.what) continue;
        if (!bad++)
            snprintf(first, sizeof first, "%s/%s: %s", v->path, p.file,
                     !strcmp(p.what, "size")       ? "size changed"
                     : !strcmp(p.what, "checksum") ? "contents changed (xxh3)"
                                                   : p.what);
        if (cb) cb(ud, &p);
    }
    cJSON_Delete(arr);
    if (bad)
        return dt_error_set(DT_ERR_FORMAT,
                            "model %s@%d: %s (%d file%s differ%s from the registration)", v->name,
                            v->version, first, bad, bad == 1 ? "" : "s", bad == 1 ? "s" : "");
    return DT_OK;
}
