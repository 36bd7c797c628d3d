/* What an import was made from: OUT/import.json records the kind, every source (its real path
 * and a fingerprint of the sizes and modification times of the files in it), the options and
 * the tokenizer's checksum, so that running the same import again can be told apart from a
 * different one (dt_data_import_current). The tokenizer itself travels with the data: each
 * split keeps a copy under the name its manifest records (tokenizer_file), and the Hugging Face
 * tokenizer_config.json beside it when there is one, so a model trained on the data can be
 * exported with its tokenizer, as Hugging Face folders are. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include "core/file.h"
#include "data/import.h"
#include "dtrain/storage.h"
#include "core/bytes.h"
#include "core/file.h"

/* Sizes and modification times of everything below `path` (sorted names, at most 8 levels):
 * a changed, added or removed file changes it. */
static void fold_tree(XXH3_state_t *h, const char *path, int depth) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        XXH3_64bits_update(h, "?", 1);
        return;
    }
    int64_t rec[3] = {(int64_t)sb.st_size, (int64_t)sb.st_mtim.tv_sec, (int64_t)sb.st_mtim.tv_nsec};
    XXH3_64bits_update(h, rec, sizeof rec);
    if (!S_ISDIR(sb.st_mode) || depth >= 8) return;
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            char *sub = dt_path_join(path, nm);
            XXH3_64bits_update(h, nm, strlen(nm) + 1);
            if (sub) fold_tree(h, sub, depth + 1);
            free(sub);
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
}

static void add_source(cJSON *arr, const char *src) {
    char real[PATH_MAX], hex[17];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", realpath(src, real) ? real : src);
    XXH3_state_t *h = XXH3_createState();
    if (h) {
        XXH3_64bits_reset(h);
        fold_tree(h, src, 0);
        dt_hex64(XXH3_64bits_digest(h), hex);
        XXH3_freeState(h);
        cJSON_AddStringToObject(o, "files", hex);
    }
    cJSON_AddItemToArray(arr, o);
}

char *dt_import_record(const char *kind, const char *const *srcs, int n_srcs,
                       const dt_import_options *o) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "format", "dtrain-import-1");
    cJSON_AddStringToObject(r, "kind", kind);
    cJSON *arr = cJSON_AddArrayToObject(r, "sources");
    for (int i = 0; i < n_srcs; i++) add_source(arr, srcs[i]);
    cJSON *op = cJSON_AddObjectToObject(r, "options");
    cJSON_AddNumberToObject(op, "val_fraction", o->val_fraction);
    cJSON_AddNumberToObject(op, "seed", (double)o->seed);
    cJSON_AddNumberToObject(op, "shard_bytes", (double)o->shard_bytes);
    cJSON_AddNumberToObject(op, "max_records", (double)o->max_records);
    if (!strcmp(kind, "images")) {
        cJSON_AddBoolToObject(op, "strict", o->strict);
        cJSON_AddNumberToObject(op, "max_side", o->max_side);
        /* a list file names images in and below its folder: their files count too */
        struct stat sb;
        if (n_srcs == 1 && stat(srcs[0], &sb) == 0 && S_ISREG(sb.st_mode)) {
            char *dir = strdup(srcs[0]), *slash = dir ? strrchr(dir, '/') : NULL;
            if (slash) *slash = 0;
            if (dir) add_source(arr, slash ? (*dir ? dir : "/") : ".");
            free(dir);
        }
    }
    if (o->doc_separator) cJSON_AddStringToObject(op, "doc_separator", o->doc_separator);
    if (o->format) cJSON_AddStringToObject(op, "format", o->format);
    if (o->chat_template) cJSON_AddStringToObject(op, "template", o->chat_template);
    if (o->system) cJSON_AddStringToObject(op, "system", o->system);
    if (o->train_last) cJSON_AddStringToObject(op, "train_on", "last");
    if (o->strict) cJSON_AddBoolToObject(op, "strict", 1);
    char *tok = o->tokenizer && *o->tokenizer ? dt_import_tokenizer_path(o) : NULL;
    char *cfg = tok ? dt_import_tokenizer_config(tok) : NULL;
    /* the tokenizer, and the config whose chat template and bos/eos a chat import renders */
    for (int k = 0; k < 2; k++) {
        const char *p = k ? cfg : tok;
        uint8_t *data;
        size_t len;
        char hex[17] = "?";
        if (!p || (k && !dt_path_exists(p))) continue;
        if (dt_read_file_max(p, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &data, &len) ==
            DT_OK) {
            dt_hex64(XXH3_64bits(data, len), hex);
            free(data);
        }
        cJSON_AddStringToObject(op, k ? "tokenizer_config_xxh3" : "tokenizer_xxh3", hex);
    }
    free(tok), free(cfg);
    char *txt = cJSON_Print(r);
    cJSON_Delete(r);
    return txt;
}

int dt_data_import_current(const char *kind, const char *const *srcs, int n_srcs,
                           const char *out_dir, const dt_import_options *opts) {
    dt_import_options defaults;
    if (!opts) {
        dt_import_options_default(&defaults);
        opts = &defaults;
    }
    char *want = dt_import_record(kind, srcs, n_srcs, opts);
    char *path = dt_path_join(out_dir, "import.json");
    uint8_t *have = NULL;
    size_t len = 0;
    int same = want && path &&
               dt_read_file_max(path, 0, 1 << 20, "an import record", &have, &len) == DT_OK;
    if (same)
        same = len == strlen(want) + 1 && !memcmp(have, want, len - 1) && have[len - 1] == '\n';
    /* and it is whole: every split it made still has its manifest */
    DIR *d = same ? opendir(out_dir) : NULL;
    struct dirent *e;
    int splits = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *sub = dt_path_join(out_dir, e->d_name);
        char *man = sub ? dt_path_join(sub, "manifest.json") : NULL;
        struct stat sb;
        if (sub && stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            splits++; /* intact too: a damaged import is not one to keep (xxh3: GB/s) */
            if (!man || !dt_path_exists(man) || dt_dataset_verify(sub) != DT_OK) same = 0;
        }
        free(man);
        free(sub);
    }
    if (d) closedir(d);
    free(want), free(path), free(have);
    dt_error_clear();
    return same && splits > 0;
}

dt_status dt_import_finish_record(const dt_import *im, const char *const *srcs, int n_srcs) {
    /* the tokenizer (and its Hugging Face config) beside every split's manifest */
    char *tok = dt_import_tokenizer_path(im->o);
    if (tok && (!strcmp(im->kind, "text") || !strcmp(im->kind, "jsonl"))) {
        uint8_t *data = NULL, *cfg = NULL;
        size_t len = 0, cfg_len = 0;
        dt_status st =
            dt_read_file_max(tok, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &data, &len);
        if (st != DT_OK) {
            free(tok);
            return st;
        }
        const char *base = strrchr(tok, '/');
        base = base ? base + 1 : tok;
        char *cfg_path = dt_import_tokenizer_config(tok);
        if (cfg_path && dt_path_exists(cfg_path) &&
            dt_read_file_max(cfg_path, 0, 16 << 20, "a tokenizer config", &cfg, &cfg_len) != DT_OK)
            cfg = NULL;
        dt_error_clear();
        for (int i = 0; i < im->n_w && st == DT_OK; i++) {
            char *sd = dt_path_join(im->top, im->split_name[i]);
            char *dst = sd ? dt_path_join(sd, base) : NULL;
            char *cdst = sd ? dt_path_join(sd, "tokenizer_config.json") : NULL;
            st = !dst || !cdst ? dt_error_set(DT_ERR_NOMEM, "out of memory")
                               : dt_write_file(dst, data, len);
            if (st == DT_OK && cfg && strcmp(base, "tokenizer_config.json"))
                st = dt_write_file(cdst, cfg, cfg_len);
            free(sd), free(dst), free(cdst);
        }
        free(data), free(cfg), free(cfg_path), free(tok);
        if (st != DT_OK) return st;
    } else {
        free(tok);
    }
    char *rec = dt_import_record(im->kind, srcs, n_srcs, im->o);
    char *path = dt_path_join(im->top, "import.json");
    dt_status st = !rec || !path ? dt_error_set(DT_ERR_NOMEM, "out of memory") : DT_OK;
    if (st == DT_OK) {
        size_t n = strlen(rec);
        rec[n] = '\n'; /* cJSON_Print's text plus a newline; the NUL is not written */
        st = dt_write_file(path, rec, n + 1);
    }
    free(rec), free(path);
    return st;
}

/* A file beside a dataset's manifest, whole: read from its directory or, for an s3:// dataset
 * (store not NULL), fetched from the store. DT_ERR_NOTFOUND when there is none. */
static dt_status beside_read(const char *dir, dt_store *store, const char *name, size_t max,
                             const char *what, uint8_t **data, size_t *len) {
    *data = NULL, *len = 0;
    if (store) {
        size_t n = 0;
        void *p = NULL;
        dt_status st = dt_store_stat(store, name, &n);
        if (st == DT_OK && n > max)
            return dt_error_set(DT_ERR_FORMAT, "%s/%s: %zu bytes, more than the %zu allowed for %s",
                                dir, name, n, max, what);
        if (st == DT_OK) st = dt_store_get(store, name, &p, len);
        *data = p;
        return st;
    }
    char *path = dt_path_join(dir, name);
    if (!path) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    dt_status st = dt_path_exists(path) ? dt_read_file_max(path, 0, max, what, data, len)
                                        : dt_error_set(DT_ERR_NOTFOUND, "%s: not found", path);
    free(path);
    return st;
}

dt_status dt_dataset_tokenizer_export(const char *dataset_dir, const char *dst_dir, int *copied) {
    *copied = 0;
    /* a dataset in an object store: the manifest and the files beside it are fetched (AWS_* as
     * for the dataset's blocks), a tokenizer that fails its xxh3 is an error naming the object */
    dt_store *store = NULL;
    dt_status st = DT_OK;
    if (!strncmp(dataset_dir, "s3://", 5)) {
        dt_store_opts so = dt_store_opts_default();
        st = dt_store_open(dataset_dir, &so, &store);
        if (st) return st;
    }
    uint8_t *txt = NULL;
    size_t len = 0;
    st = beside_read(dataset_dir, store, "manifest.json", 64 << 20, "a manifest", &txt, &len);
    cJSON *m = st == DT_OK ? cJSON_ParseWithLength((const char *)txt, len) : NULL;
    free(txt);
    if (st != DT_OK) {
        if (store) dt_store_close(store);
        return st;
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m, "meta");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(meta, "tokenizer_file");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(meta, "tokenizer_xxh3");
    /* only a Hugging Face tokenizer.json as it was used: a chat import that added Llama 3's chat
     * tokens in memory (meta.template without chat_tokens_added 0) has tokens the file lacks */
    size_t fl = cJSON_IsString(file) ? strlen(file->valuestring) : 0;
    int usable = fl > 5 && !strcmp(file->valuestring + fl - 5, ".json") && cJSON_IsString(sum) &&
                 dt_plain_name(file->valuestring) &&
                 (!cJSON_GetObjectItemCaseSensitive(meta, "template") ||
                  cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "tokenizer_as_is")));
    uint8_t *data = NULL;
    char hex[17] = "";
    /* absent or unreadable: none to give, as for an import made before the copy existed */
    if (usable && beside_read(dataset_dir, store, file->valuestring, DT_MAX_TOKENIZER_BYTES,
                              "a tokenizer file", &data, &len) == DT_OK)
        dt_hex64(XXH3_64bits(data, len), hex);
    dt_error_clear();
    if (data && store && strcmp(hex, sum->valuestring))
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s/%s: xxh3 %s, the manifest's meta.tokenizer_xxh3 says %s: not the "
                          "tokenizer the data was made with",
                          dataset_dir, file->valuestring, hex, sum->valuestring);
    if (st == DT_OK && data && !dst_dir && !strcmp(hex, sum->valuestring)) *copied = 1;
    if (st == DT_OK && data && dst_dir && !strcmp(hex, sum->valuestring)) {
        char *dst = dt_path_join(dst_dir, "tokenizer.json");
        char *cd = dt_path_join(dst_dir, "tokenizer_config.json");
        /* into a model folder already in place: each file whole or not at all */
        st = dst && cd ? dt_file_write_atomic(dst, data, len)
                       : dt_error_set(DT_ERR_NOMEM, "out of memory");
        uint8_t *cfg = NULL;
        size_t cl = 0;
        if (st == DT_OK) {
            st = beside_read(dataset_dir, store, "tokenizer_config.json", 16 << 20,
                             "a tokenizer config", &cfg, &cl);
            if (st == DT_ERR_NOTFOUND)
                st = DT_OK, dt_error_clear();
            else if (st == DT_OK)
                st = dt_file_write_atomic(cd, cfg, cl);
        }
        *copied = st == DT_OK;
        free(cfg), free(dst), free(cd);
    }
    free(data);
    cJSON_Delete(m);
    if (store) dt_store_close(store);
    return st;
}
