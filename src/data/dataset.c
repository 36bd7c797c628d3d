/* Opening a dataset: the manifest, every shard mapped and checked against it, the fingerprint. */
#include "data/dataset.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include "core/bytes.h"
#include "core/file.h"
#include "core/json.h"
#include "data/remote.h"

char *dt_dataset_names_line(const char *const *names, int32_t n) {
    size_t len = 1;
    for (int32_t k = 0; names && k < n; k++) len += strlen(names[k]) + 1;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    for (int32_t k = 0; names && k < n; k++) p += sprintf(p, "%s\n", names[k]);
    *p = 0;
    return s;
}

uint64_t dt_dataset_fingerprint(const dt_dataset_info *info, const char *names,
                                const char *shard_lines) {
    char head[256];
    int n = snprintf(head, sizeof head,
                     "dtrain-dataset/1 kind=%d hwc=%dx%dx%d classes=%d vocab=%" PRId64 " mask=%d\n",
                     (int)info->kind, info->height, info->width, info->channels, info->classes,
                     info->vocab_size, info->has_mask);
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, head, (size_t)n);
    if (*names) {
        XXH3_64bits_update(st, "classes\n", 8);
        XXH3_64bits_update(st, names, strlen(names));
    }
    XXH3_64bits_update(st, shard_lines, strlen(shard_lines));
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* ---- manifest parsing ---- */

typedef struct mctx {
    const char *file;
} mctx;

static dt_status bad_key(const mctx *m, const char *key, const char *want) {
    return dt_error_set(DT_ERR_FORMAT, "%s: key \"%s\" is missing or not %s", m->file, key, want);
}

static dt_status get_int(const mctx *m, const cJSON *o, const char *key, const char *path,
                         int64_t lo, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    /* the range first: (int64_t) of 1e300 (or of "1e999", inf) is undefined */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= -9e15 && x->valuedouble <= 9e15) ||
        x->valuedouble != (double)(int64_t)x->valuedouble || x->valuedouble < (double)lo)
        return bad_key(m, path,
                       lo > 0    ? "a positive integer"
                       : lo == 0 ? "a non-negative integer"
                                 : "an integer >= -1 (-1: none)");
    *v = (int64_t)x->valuedouble;
    return DT_OK;
}

static dt_status get_str(const mctx *m, const cJSON *o, const char *key, const char *path,
                         const char **v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(x)) return bad_key(m, path, "a string");
    *v = x->valuestring;
    return DT_OK;
}

/* The manifest's schema is closed (dtrain writes it, docs/data.md lists every key): a key it
 * does not know is a typo or another writer's, refused by name. `keys` ends with NULL. */
static dt_status known_keys(const mctx *m, const cJSON *o, const char *where,
                            const char *const *keys) {
    for (const cJSON *e = o->child; e; e = e->next) {
        int k = 0;
        while (keys[k] && strcmp(keys[k], e->string)) k++;
        if (!keys[k])
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s%skey \"%.64s\" is not a manifest key (docs/data.md lists "
                                "them)",
                                m->file, where, *where ? ": " : "", e->string);
    }
    return DT_OK;
}

/* An optional string key: absent, or a string. */
static dt_status opt_str(const mctx *m, const cJSON *o, const char *key, const char **v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return DT_OK;
    return get_str(m, o, key, key, v);
}

static dt_status parse_info(const mctx *m, const cJSON *root, dt_dataset_info *info) {
    const char *s = "";
    int64_t v;
    dt_status st;
    static const char *const top_image[] = {"format", "version", "kind",  "name",
                                            "split",  "records", "image", "fingerprint",
                                            "shards", "meta",    NULL};
    static const char *const top_tokens[] = {"format", "version", "kind",   "name",
                                             "split",  "records", "tokens", "fingerprint",
                                             "shards", "meta",    NULL};
    static const char *const top_encoded[] = {"format", "version", "kind",    "name",
                                              "split",  "records", "encoded", "fingerprint",
                                              "shards", "meta",    NULL};
    static const char *const encoded_keys[] = {"classes", "bytes", "class_names", NULL};
    static const char *const image_keys[] = {"height",  "width",  "channels",
                                             "classes", "layout", NULL};
    static const char *const token_keys[] = {"count",  "vocab_size", "has_mask",
                                             "eot_id", "pad_id",     NULL};
    if ((st = get_str(m, root, "format", "format", &s))) return st;
    if (strcmp(s, "dtrain-dataset"))
        return dt_error_set(DT_ERR_FORMAT, "%s: \"format\" is \"%s\", not \"dtrain-dataset\"",
                            m->file, s);
    if ((st = get_int(m, root, "version", "version", 0, &v))) return st;
    if (v != 1)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: unsupported manifest version %" PRId64
                            " (this build reads version 1)",
                            m->file, v);
    if ((st = get_str(m, root, "kind", "kind", &s))) return st;
    if (!strcmp(s, "image"))
        info->kind = DT_DATA_IMAGE;
    else if (!strcmp(s, "tokens"))
        info->kind = DT_DATA_TOKENS;
    else if (!strcmp(s, "encoded-image"))
        info->kind = DT_DATA_ENCODED;
    else
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: \"kind\" is \"%s\" (expected image, tokens or encoded-image)",
                            m->file, s);
    if ((st = known_keys(m, root, "",
                         info->kind == DT_DATA_IMAGE    ? top_image
                         : info->kind == DT_DATA_TOKENS ? top_tokens
                                                        : top_encoded)))
        return st;
    if ((st = get_int(m, root, "records", "records", 0, &info->records))) return st;
    s = "";
    if ((st = opt_str(m, root, "name", &s))) return st;
    snprintf(info->name, sizeof info->name, "%s", s);
    s = "";
    if ((st = opt_str(m, root, "split", &s))) return st;
    snprintf(info->split, sizeof info->split, "%s", s);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    if (meta && !cJSON_IsObject(meta)) return bad_key(m, "meta", "an object");
    if (info->kind == DT_DATA_ENCODED) {
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(root, "encoded");
        if (!cJSON_IsObject(en)) return bad_key(m, "encoded", "an object");
        if ((st = known_keys(m, en, "encoded", encoded_keys))) return st;
        int64_t k;
        if ((st = get_int(m, en, "classes", "encoded.classes", 0, &k)) ||
            (st = get_int(m, en, "bytes", "encoded.bytes", 0, &info->bytes)))
            return st;
        if (k > INT32_MAX)
            return dt_error_set(DT_ERR_FORMAT, "%s: encoded.classes %" PRId64 " is over %d",
                                m->file, k, INT32_MAX);
        info->classes = (int32_t)k;
    } else if (info->kind == DT_DATA_IMAGE) {
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(root, "image");
        if (!cJSON_IsObject(im)) return bad_key(m, "image", "an object");
        if ((st = known_keys(m, im, "image", image_keys))) return st;
        s = "HWC uint8";
        if ((st = opt_str(m, im, "layout", &s))) return st;
        if (strcmp(s, "HWC uint8"))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: image.layout \"%.40s\" is not \"HWC uint8\" (the one layout "
                                "of image shards)",
                                m->file, s);
        int64_t h, w, c, k;
        if ((st = get_int(m, im, "height", "image.height", 1, &h)) ||
            (st = get_int(m, im, "width", "image.width", 1, &w)) ||
            (st = get_int(m, im, "channels", "image.channels", 1, &c)) ||
            (st = get_int(m, im, "classes", "image.classes", 0, &k)))
            return st;
        if (h > 65535 || w > 65535 || c > 4)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: image shape %" PRId64 "x%" PRId64 "x%" PRId64
                                " out of range (height and width <= 65535, channels <= 4)",
                                m->file, h, w, c);
        if (k > INT32_MAX)
            return dt_error_set(DT_ERR_FORMAT, "%s: image.classes %" PRId64 " is over %d", m->file,
                                k, INT32_MAX);
        info->height = (int32_t)h, info->width = (int32_t)w, info->channels = (int32_t)c;
        info->classes = (int32_t)k;
    } else {
        const cJSON *tk = cJSON_GetObjectItemCaseSensitive(root, "tokens");
        if (!cJSON_IsObject(tk)) return bad_key(m, "tokens", "an object");
        if ((st = known_keys(m, tk, "tokens", token_keys))) return st;
        int64_t eot, pad;
        if ((st = get_int(m, tk, "count", "tokens.count", 0, &info->tokens)) ||
            (st = get_int(m, tk, "vocab_size", "tokens.vocab_size", 0, &info->vocab_size)) ||
            (st = get_int(m, tk, "eot_id", "tokens.eot_id", -1, &eot)) ||
            (st = get_int(m, tk, "pad_id", "tokens.pad_id", -1, &pad)))
            return st;
        const cJSON *hm = cJSON_GetObjectItemCaseSensitive(tk, "has_mask");
        if (!cJSON_IsBool(hm)) return bad_key(m, "tokens.has_mask", "a boolean");
        info->has_mask = cJSON_IsTrue(hm);
        /* token ids are stored as u32; eot and pad are ids of the vocabulary or -1 (none) */
        if (info->vocab_size > ((int64_t)1 << 32))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: tokens.vocab_size %" PRId64 " is over 2^32 (ids are u32)",
                                m->file, info->vocab_size);
        int64_t lim = info->vocab_size > 0 ? info->vocab_size : (int64_t)INT32_MAX + 1;
        if (eot >= lim || pad >= lim)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: tokens.%s %" PRId64 " is not an id of the vocabulary "
                                "(-1 or below %" PRId64 ")",
                                m->file, eot >= lim ? "eot_id" : "pad_id", eot >= lim ? eot : pad,
                                lim);
        info->eot_id = (int32_t)eot, info->pad_id = (int32_t)pad;
    }
    return DT_OK;
}

/* encoded.class_names: absent, or an array of `classes` strings. */
static dt_status parse_names(const mctx *m, const cJSON *root, dt_dataset *d) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(root, "encoded");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(en, "class_names");
    if (!a) return DT_OK;
    int32_t k = d->info.classes;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != k)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: encoded.class_names is not an array of %d names (one per class)",
                            m->file, k);
    d->class_names = calloc((size_t)k + 1, sizeof *d->class_names);
    if (!d->class_names) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", m->file);
    int32_t i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '\n'))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: encoded.class_names[%d] is not a string without newlines",
                                m->file, i);
        if (!(d->class_names[i] = strdup(e->valuestring)))
            return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", m->file);
    }
    return DT_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Before any shard is opened: every entry an object of the four shard keys, no file listed
 * twice (its records would count twice). */
static dt_status check_shard_list(const mctx *m, const cJSON *shards) {
    static const char *const keys[] = {"file", "records", "bytes", "xxh3", NULL};
    int n = cJSON_GetArraySize(shards), i = 0;
    const char **names = malloc(((size_t)n + 1) * sizeof *names);
    if (!names) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", m->file);
    dt_status st = DT_OK;
    char where[32];
    for (const cJSON *e = shards->child; e && !st; e = e->next, i++) {
        snprintf(where, sizeof where, "shards[%d]", i);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
        if (!cJSON_IsObject(e))
            st = bad_key(m, where, "an object");
        else if (!(st = known_keys(m, e, where, keys)))
            names[i] = cJSON_IsString(f) ? f->valuestring : "";
    }
    if (!st) qsort(names, (size_t)n, sizeof *names, cmp_name);
    for (int j = 1; j < n && !st; j++)
        if (*names[j] && !strcmp(names[j], names[j - 1]))
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: shard file \"%.200s\" is listed twice in \"shards\" (each "
                              "shard once)",
                              m->file, names[j]);
    free(names);
    return st;
}

/* Shard i of a local dataset: its file, which must lie inside the directory. */
static dt_status open_local(dt_dataset *d, const mctx *m, int i, const char *file, int flags,
                            dt_shard *s) {
    dt_status st;
    char *path = dt_path_join(d->dir, file);
    if (!path) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st = dt_error_set(DT_ERR_IO,
                          "%s: shard %d \"%s\" listed in the manifest is missing "
                          "(%s: %s)",
                          m->file, i, file, path, strerror(errno));
        free(path);
        return st;
    }
    /* A shard is a file of the dataset: one that is a symbolic link leading out of the
     * directory (unpacked from an archive, say) is refused, so that a dataset cannot make
     * dtrain map and report on bytes of another file. The directory itself may be a link. */
    int inside = dt_path_inside(d->dir, path);
    if (inside <= 0) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: shards[%d].file \"%s\" is a symbolic link %s the dataset "
                          "directory",
                          m->file, i, file,
                          inside < 0 ? "that does not resolve inside" : "leading out of");
        free(path);
        return st;
    }
    st = dt_shard_open(path, flags & DT_DATA_VERIFY, s);
    free(path);
    return st;
}

static dt_status open_shards(dt_dataset *d, const mctx *m, const cJSON *shards, int flags,
                             char **lines_out) {
    dt_status cs = check_shard_list(m, shards);
    if (cs) return cs;
    int n = cJSON_GetArraySize(shards);
    d->shards = calloc((size_t)(n ? n : 1), sizeof *d->shards);
    d->rec_start = calloc((size_t)n + 1, sizeof(int64_t));
    d->tok_start = calloc((size_t)n + 1, sizeof(int64_t));
    char *lines = calloc((size_t)n * 64 + 1, 1);
    *lines_out = lines;
    if (!d->shards || !d->rec_start || !d->tok_start || !lines)
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", m->file);
    size_t lpos = 0;
    const dt_dataset_info *in = &d->info;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(shards, i);
        char key[64];
        const char *file = "", *hex = "";
        int64_t recs, bytes;
        dt_status st;
        snprintf(key, sizeof key, "shards[%d].file", i);
        if ((st = get_str(m, e, "file", key, &file))) return st;
        if (!dt_plain_name(file))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s \"%.200s\" is not a plain file name in the dataset "
                                "directory (no '/', '.' or '..')",
                                m->file, key, file);
        snprintf(key, sizeof key, "shards[%d].records", i);
        if ((st = get_int(m, e, "records", key, 0, &recs))) return st;
        snprintf(key, sizeof key, "shards[%d].bytes", i);
        if ((st = get_int(m, e, "bytes", key, 0, &bytes))) return st;
        snprintf(key, sizeof key, "shards[%d].xxh3", i);
        uint64_t sum;
        if ((st = get_str(m, e, "xxh3", key, &hex))) return st;
        if (dt_parse_hex64(hex, &sum))
            return dt_error_set(DT_ERR_FORMAT, "%s: %s \"%s\" is not 16 hex digits", m->file, key,
                                hex);
        dt_shard *s = &d->shards[i];
        if (d->remote) {
            if ((st = dt_remote_shard_open(d->remote, file, (uint64_t)bytes, s))) return st;
        } else if ((st = open_local(d, m, i, file, flags, s))) {
            return st;
        }
        d->n_shards = i + 1;
        const dt_shard_header *h = &s->h;
        if ((int64_t)s->size != bytes)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: shards[%d].bytes %" PRId64 ", but %s has %zu bytes", m->file,
                                i, bytes, s->path, s->size);
        if (h->payload_xxh3 != sum)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: payload checksum %016" PRIx64
                                " in its header (byte 200) differs from the manifest's %s",
                                s->path, h->payload_xxh3, hex);
        if ((int64_t)h->records != recs)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: shards[%d].records %" PRId64 ", but %s holds %" PRIu64
                                " records (byte 24)",
                                m->file, i, recs, s->path, h->records);
        if ((int)h->kind != (int)in->kind ||
            (in->kind == DT_DATA_ENCODED && h->shape[3] != (uint32_t)in->classes) ||
            (in->kind == DT_DATA_IMAGE &&
             (h->shape[0] != (uint32_t)in->height || h->shape[1] != (uint32_t)in->width ||
              h->shape[2] != (uint32_t)in->channels || h->shape[3] != (uint32_t)in->classes)) ||
            (in->kind == DT_DATA_TOKENS && !!s->mask != !!in->has_mask))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: kind or record shape (bytes 16-47) differ "
                                "from the manifest %s",
                                s->path, m->file);
        if (in->kind == DT_DATA_TOKENS && in->vocab_size > 0 && (flags & DT_DATA_VERIFY)) {
            for (uint64_t t = 0; t < h->elements; t++)
                if (s->tokens[t] >= (uint64_t)in->vocab_size)
                    return dt_error_set(DT_ERR_FORMAT,
                                        "%s: token %" PRIu64 " is id %u, outside "
                                        "the vocabulary (%" PRId64 ")",
                                        s->path, t, s->tokens[t], in->vocab_size);
        }
        d->rec_start[i + 1] = d->rec_start[i] + recs;
        /* tok_start counts tokens, or (encoded) bytes of image files */
        d->tok_start[i + 1] =
            d->tok_start[i] + (in->kind != DT_DATA_IMAGE ? (int64_t)h->elements : 0);
        lpos +=
            (size_t)snprintf(lines + lpos, 64, "%" PRId64 " %" PRId64 " %s\n", recs, bytes, hex);
    }
    return DT_OK;
}

dt_dataset_opts dt_dataset_opts_default(void) {
    return (dt_dataset_opts){0, 512, 300, 8};
}

dt_status dt_dataset_open(const char *dir, int flags, dt_dataset **out) {
    dt_dataset_opts o = dt_dataset_opts_default();
    o.flags = flags;
    return dt_dataset_open_with(dir, &o, out);
}

dt_status dt_dataset_open_with(const char *dir, const dt_dataset_opts *o, dt_dataset **out) {
    *out = NULL;
    int flags = o->flags;
    dt_dataset *d = calloc(1, sizeof *d);
    if (!d) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    d->dir = strdup(dir);
    char *mpath = dt_path_join(dir, DT_MANIFEST_NAME);
    uint8_t *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    char *lines = NULL, *names = NULL;
    dt_status st = DT_OK;
    if (!d->dir || !mpath) {
        st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (dt_remote_is_url(dir)) {
        dt_remote_opts ro = {o->cache_mb << 20, o->store_wait_s, o->fetch_threads};
        if ((st = dt_remote_open(dir, &ro, &d->remote))) goto done;
        if ((st = dt_remote_get_meta(d->remote, DT_MANIFEST_NAME, DT_MAX_META_BYTES, &text, &len)))
            goto done;
    } else if (!dt_path_exists(dir)) {
        st = dt_error_set(DT_ERR_IO, "%s: no such dataset directory", dir);
        goto done;
    } else if ((st = dt_read_file_max(mpath, 0, DT_MAX_META_BYTES, "a dataset manifest", &text,
                                      &len))) {
        goto done;
    }
    root = dt_json_parse_strict(mpath, (const char *)text, len, &st);
    if (st) goto done;
    if (!cJSON_IsObject(root)) {
        st = dt_error_set(DT_ERR_FORMAT, "%s: the manifest is not a JSON object", mpath);
        goto done;
    }
    mctx m = {mpath};
    if ((st = parse_info(&m, root, &d->info))) goto done;
    if (d->info.kind == DT_DATA_ENCODED && (st = parse_names(&m, root, d))) goto done;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    if (!cJSON_IsArray(shards)) {
        st = bad_key(&m, "shards", "an array");
        goto done;
    }
    if ((st = open_shards(d, &m, shards, flags, &lines))) goto done;
    /* DT_DATA_VERIFY on a dataset in S3: every payload block fetched and checked, one at a
     * time (so the cache bound holds); the whole-payload hash is left to the blocks' */
    for (int i = 0; d->remote && (flags & DT_DATA_VERIFY) && i < d->n_shards && !st; i++) {
        dt_shard *sh = &d->shards[i];
        for (uint64_t k = 0; k < sh->n_blocks && !st; k++)
            st = dt_shard_check(sh, DT_SHARD_HEADER_BYTES + k * sh->h.block_bytes,
                                dt_shard_block_len(sh, k));
    }
    if (st) goto done;
    dt_dataset_info *in = &d->info;
    in->n_shards = d->n_shards;
    if (d->rec_start[d->n_shards] != in->records) {
        st = dt_error_set(DT_ERR_FORMAT, "%s: \"records\" is %" PRId64 ", the shards hold %" PRId64,
                          mpath, in->records, d->rec_start[d->n_shards]);
        goto done;
    }
    if (in->kind == DT_DATA_TOKENS && d->tok_start[d->n_shards] != in->tokens) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: \"tokens.count\" is %" PRId64 ", the shards hold %" PRId64, mpath,
                          in->tokens, d->tok_start[d->n_shards]);
        goto done;
    }
    if (in->kind == DT_DATA_ENCODED && d->tok_start[d->n_shards] != in->bytes) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: \"encoded.bytes\" is %" PRId64 ", the shards hold %" PRId64, mpath,
                          in->bytes, d->tok_start[d->n_shards]);
        goto done;
    }
    const char *fp = "";
    if ((st = get_str(&m, root, "fingerprint", "fingerprint", &fp))) goto done;
    names = dt_dataset_names_line((const char *const *)d->class_names,
                                  d->class_names ? in->classes : 0);
    if (!names) {
        st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        goto done;
    }
    dt_hex64(dt_dataset_fingerprint(in, names, lines), in->fingerprint);
    if (strcmp(fp, in->fingerprint)) {
        st = dt_error_set(DT_ERR_FORMAT, "%s: fingerprint \"%s\" does not match the content (%s)",
                          mpath, fp, in->fingerprint);
        goto done;
    }
    d->hwc = (int64_t)in->height * in->width * in->channels;
done:
    free(lines);
    free(names);
    cJSON_Delete(root);
    free(text);
    free(mpath);
    if (st) {
        dt_dataset_close(d);
        return st;
    }
    *out = d;
    return DT_OK;
}

void dt_dataset_close(dt_dataset *d) {
    if (!d) return;
    dt_remote_close(d->remote); /* its threads write into the shards' mappings */
    for (int i = 0; i < d->n_shards; i++) dt_shard_close(&d->shards[i]);
    free(d->shards);
    free(d->rec_start);
    free(d->tok_start);
    for (int32_t k = 0; d->class_names && d->class_names[k]; k++) free(d->class_names[k]);
    free(d->class_names);
    free(d->dir);
    free(d);
}

const dt_dataset_info *dt_dataset_get_info(const dt_dataset *d) {
    return &d->info;
}

dt_status dt_dataset_verify(const char *dir) {
    dt_dataset *d;
    dt_status st = dt_dataset_open(dir, DT_DATA_VERIFY, &d);
    if (st == DT_OK) dt_dataset_close(d);
    return st;
}
