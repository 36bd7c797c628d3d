/* model.safetensors.index.json and the files of a model (src/nn/st_index.h). */
#include "nn/st_index.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/file.h"
#include "core/json.h"

static const char INDEX_NAME[] = "model.safetensors.index.json";

/* One weight_map entry: its shard file name, and where it stands (for the first-named order). */
typedef struct entry {
    const char *file, *tensor;
    int pos;
} entry;

static int by_file(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

static int by_pos(const void *a, const void *b) {
    const entry *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parses the index text into *root: one JSON object with nothing but white space after it. */
static dt_status parse(const char *p, const char *txt, size_t len, cJSON **root) {
    const char *end = NULL;
    int64_t line, col;
    *root = cJSON_ParseWithLengthOpts(txt, len, &end, 0);
    if (!*root) {
        size_t off = end && end >= txt && end <= txt + len ? (size_t)(end - txt) : 0;
        dt_line_col(txt, off, &line, &col);
        return dt_error_set(DT_ERR_FORMAT, "%s: not valid JSON (line %lld, column %lld)", p,
                            (long long)line, (long long)col);
    }
    while (end < txt + len && is_space(*end)) end++;
    if (end < txt + len) {
        dt_line_col(txt, (size_t)(end - txt), &line, &col);
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: line %lld, column %lld: text after the JSON value (an index is "
                            "one JSON object)",
                            p, (long long)line, (long long)col);
    }
    if (!cJSON_IsObject(*root))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: %s, not a JSON object (an index is {\"metadata\": {...}, "
                            "\"weight_map\": {tensor name: shard file name}})",
                            p, dt_json_kind(*root));
    return DT_OK;
}

/* The rules of the object itself (see st_index.h); leaves *wm the weight_map. */
static dt_status check_object(const char *p, const cJSON *root, const cJSON **wm) {
    const char *dup;
    int r = dt_json_duplicate_key(root, &dup);
    if (r < 0) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
    if (r > 0)
        return dt_error_set(
            DT_ERR_FORMAT, "%s: key \"%.200s\" given twice (JSON leaves it undefined which counts)",
            p, dup);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (md && !cJSON_IsObject(md))
        return dt_error_set(DT_ERR_FORMAT, "%s: \"metadata\" is %s, not an object", p,
                            dt_json_kind(md));
    *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!*wm)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: no \"weight_map\" object (tensor name -> shard file name)", p);
    if (!cJSON_IsObject(*wm))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: \"weight_map\" is %s, not an object of tensor name -> shard file "
                            "name",
                            p, dt_json_kind(*wm));
    if (!(*wm)->child)
        return dt_error_set(DT_ERR_FORMAT, "%s: \"weight_map\" is empty: it names no shard file",
                            p);
    if ((r = dt_json_duplicate_key(*wm, &dup)) < 0)
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
    if (r > 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: weight_map[\"%.200s\"] given twice (JSON leaves it undefined "
                            "which shard counts)",
                            p, dup);
    return DT_OK;
}

/* Each value a plain file name; e[] gets the entries (*n of them). */
static dt_status check_values(const char *p, const cJSON *wm, entry *e, int *n) {
    int k = 0;
    for (const cJSON *it = wm->child; it; it = it->next, k++) {
        if (!cJSON_IsString(it))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: weight_map[\"%.200s\"] is %s, not a string naming a shard "
                                "file",
                                p, it->string, dt_json_kind(it));
        if (!dt_plain_name(it->valuestring))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: weight_map[\"%.200s\"]: \"%.200s\" is not a plain file name "
                                "in the folder (no '/', '.' or '..')",
                                p, it->string, it->valuestring);
        e[k] = (entry){it->valuestring, it->string, k};
    }
    *n = k;
    return DT_OK;
}

/* The distinct shards, first-named order, each present in dir: into files[*n]. */
static dt_status shards(const char *p, const char *dir, entry *e, int n, char ***files, int *nf) {
    /* sorted by name (n log n: an index of 64 MiB holds ~10^6 entries), the first of each name
     * kept, then back in the order they were first named */
    qsort(e, (size_t)n, sizeof *e, by_file);
    int d = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || strcmp(e[i].file, e[d - 1].file)) e[d++] = e[i];
    qsort(e, (size_t)d, sizeof *e, by_pos);
    if (d > DT_ST_MAX_SHARDS)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: weight_map names %d shard files, more than the %d allowed", p, d,
                            DT_ST_MAX_SHARDS);
    char **f = calloc((size_t)d, sizeof *f);
    if (!f) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
    dt_status st = DT_OK;
    for (int i = 0; i < d && st == DT_OK; i++) {
        char *full = dt_path_join(dir, e[i].file);
        struct stat sb;
        if (!full || !(f[i] = strdup(e[i].file)))
            st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
        else if (stat(full, &sb) != 0 && errno == ENOENT)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: weight_map[\"%.200s\"]: shard \"%.200s\" does not exist in the "
                              "folder",
                              p, e[i].tensor, e[i].file);
        free(full);
    }
    if (st != DT_OK) {
        dt_st_index_free(f, d);
        return st;
    }
    *files = f, *nf = d;
    return DT_OK;
}

dt_status dt_st_index_read(const char *dir, char ***files, int *n) {
    *files = NULL, *n = 0;
    char *p = dt_path_join(dir, INDEX_NAME);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", dir);
    uint8_t *txt = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    const cJSON *wm = NULL;
    entry *e = NULL;
    int ne = 0;
    dt_status st = dt_read_file_max(p, 0, DT_MAX_META_BYTES, "a safetensors index", &txt, &len);
    if (st == DT_OK) st = parse(p, (const char *)txt, len, &root);
    free(txt);
    if (st == DT_OK) st = check_object(p, root, &wm);
    if (st == DT_OK && !(e = malloc((size_t)cJSON_GetArraySize(wm) * sizeof *e)))
        st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
    if (st == DT_OK) st = check_values(p, wm, e, &ne);
    if (st == DT_OK) st = shards(p, dir, e, ne, files, n);
    free(e);
    cJSON_Delete(root);
    free(p);
    return st;
}

void dt_st_index_free(char **files, int n) {
    for (int i = 0; files && i < n; i++) free(files[i]);
    free(files);
}

/* ---- the open files ---- */

void dt_st_sources_close(dt_st_sources *s) {
    for (int i = 0; i < s->n; i++) dt_st_close(s->files[i]), free(s->paths[i]);
    free(s->files), free(s->paths);
    memset(s, 0, sizeof *s);
}

/* Opens the `n` files paths[] (owned by s from here on, freed on failure too). */
static dt_status open_all(dt_st_sources *s, char **paths, int n) {
    s->paths = paths;
    s->files = calloc((size_t)n, sizeof *s->files);
    if (!s->files) {
        dt_status st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", paths[0]);
        dt_st_index_free(paths, n);
        s->paths = NULL;
        return st;
    }
    dt_status st = DT_OK;
    for (; s->n < n && st == DT_OK; s->n++)
        if ((st = dt_st_open(paths[s->n], &s->files[s->n])) != DT_OK) break;
    for (int i = s->n; i < n; i++) free(paths[i]); /* the ones not opened */
    if (st != DT_OK) dt_st_sources_close(s);
    return st;
}

dt_status dt_st_sources_open(const char *path, dt_st_sources *s) {
    memset(s, 0, sizeof *s);
    struct stat sb;
    char **paths = NULL;
    int n = 0;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) { /* one file (dt_st_open says if not) */
        paths = malloc(sizeof *paths);
        if (paths && !(paths[0] = strdup(path))) free(paths), paths = NULL;
        n = 1;
    } else {
        char *idx = dt_path_join(path, INDEX_NAME);
        if (!idx) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
        int sharded = !(stat(idx, &sb) != 0 && errno == ENOENT);
        free(idx);
        if (!sharded) {
            paths = malloc(sizeof *paths);
            if (paths && !(paths[0] = dt_path_join(path, "model.safetensors")))
                free(paths), paths = NULL;
            n = 1;
        } else {
            dt_status st = dt_st_index_read(path, &paths, &n);
            if (st != DT_OK) return st;
            for (int i = 0; i < n; i++) {
                char *full = dt_path_join(path, paths[i]);
                if (!full) {
                    dt_st_index_free(paths, n);
                    return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
                }
                free(paths[i]);
                paths[i] = full;
            }
        }
    }
    if (!paths) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    return open_all(s, paths, n);
}

int dt_st_sources_find(const dt_st_sources *s, const char *name, dt_tensor *t) {
    for (int i = 0; i < s->n; i++)
        if (dt_st_get(s->files[i], name, t) == DT_OK) return i;
    return -1;
}
