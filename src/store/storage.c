/* Storage front end: URL dispatch, key checks, sorted listings. */
#include <inttypes.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "store/storage_impl.h"

dt_store_opts dt_store_opts_default(void) {
    dt_store_opts o = {.multipart_threshold = (size_t)64 << 20,
                       .part_size = (size_t)16 << 20,
                       .parallel_parts = 4,
                       .max_retries = 5,
                       .retry_base_s = 0.2,
                       .timeout_s = 60,
                       .fsync = 1,
                       .read_chunk = DT_STORE_READ_CHUNK_DEFAULT};
    /* tests split headers and tensors across chunks with tiny ones */
    const char *env = getenv("DT_STORE_READ_CHUNK");
    char *end;
    unsigned long long c = env ? strtoull(env, &end, 10) : 0;
    if (env && *env && !*end && c > 0 && c <= ((size_t)1 << 30)) o.read_chunk = (size_t)c;
    return o;
}

dt_status dt_store_open(const char *url, const dt_store_opts *opts, dt_store **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "storage open: out is NULL");
    *out = NULL;
    if (!url || !*url) return dt_error_set(DT_ERR_INVALID, "storage open: empty URL");
    if (strlen(url) >= sizeof(((dt_store *)0)->url))
        return dt_error_set(DT_ERR_INVALID, "storage open: URL too long");
    dt_store *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "storage open: out of memory");
    s->opts = opts ? *opts : dt_store_opts_default();
    snprintf(s->url, sizeof s->url, "%s", url);
    dt_status st;
    if (!strncmp(url, "s3://", 5)) {
        st = dt_store_s3_open(s, url + 5);
    } else if (!strncmp(url, "file://", 7)) {
        st = dt_store_posix_open(s, url + 7);
    } else if (strstr(url, "://")) {
        st = dt_error_set(DT_ERR_INVALID,
                          "storage open: %s: unknown scheme (expected a path, file:// or s3://)",
                          url);
    } else {
        st = dt_store_posix_open(s, url);
    }
    if (st != DT_OK) {
        free(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_store_close(dt_store *s) {
    if (!s) return;
    if (s->ops && s->ops->close) s->ops->close(s);
    free(s);
}

const char *dt_store_url(const dt_store *s) {
    return s ? s->url : "";
}

const char *dt_store_kind(const dt_store *s) {
    return s && s->ops ? s->ops->kind : "";
}

/* '/'-separated, relative, no empty, "." or ".." components (they would escape the root or
 * mean different objects on POSIX and S3). */
static dt_status check_key(const dt_store *s, const char *op, const char *key, int prefix) {
    if (!key) return dt_error_set(DT_ERR_INVALID, "storage %s: %s: key is NULL", op, s->url);
    size_t n = strlen(key);
    if (!n && prefix) return DT_OK;
    /* a key's last component is not empty either ("a/" is a directory, not an object) */
    if (!n || n > 1024 || key[0] == '/' || (!prefix && key[n - 1] == '/'))
        return dt_error_set(DT_ERR_INVALID, "storage %s: %s: invalid key '%s'", op, s->url, key);
    const char *c = key;
    while (*c) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (!e && !len && prefix) break; /* a prefix may end in '/' */
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return dt_error_set(DT_ERR_INVALID, "storage %s: %s: invalid key '%s'", op, s->url,
                                key);
        if (!e) break;
        c = e + 1;
    }
    return DT_OK;
}

dt_status dt_store_put(dt_store *s, const char *key, const void *data, size_t n) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "storage put: store is NULL");
    dt_status st = check_key(s, "put", key, 0);
    if (st != DT_OK) return st;
    if (n && !data)
        return dt_error_set(DT_ERR_INVALID, "storage put: %s/%s: NULL data", s->url, key);
    return s->ops->put(s, key, data, n);
}

dt_status dt_store_get(dt_store *s, const char *key, void **data, size_t *n) {
    if (!s || !data || !n) return dt_error_set(DT_ERR_INVALID, "storage get: NULL argument");
    *data = NULL, *n = 0;
    dt_status st = check_key(s, "get", key, 0);
    return st != DT_OK ? st : s->ops->get(s, key, data, n);
}

dt_status dt_store_get_into(dt_store *s, const char *key, void *buf, size_t cap, size_t *n) {
    if (!s || !n || (cap && !buf))
        return dt_error_set(DT_ERR_INVALID, "storage get: NULL argument");
    *n = 0;
    dt_status st = check_key(s, "get", key, 0);
    if (st != DT_OK) return st;
    if (s->ops->get_into) return s->ops->get_into(s, key, buf, cap, n);
    void *data;
    size_t len;
    if ((st = s->ops->get(s, key, &data, &len)) != DT_OK) return st;
    if (len > cap)
        st = dt_error_set(DT_ERR_RANGE, "storage get: %s/%s: %zu bytes, more than expected", s->url,
                          key, len);
    else
        memcpy(buf, data, len), *n = len;
    free(data);
    return st;
}

dt_status dt_store_get_stream(dt_store *s, const char *key, size_t max_bytes, dt_store_chunk_fn fn,
                              void *ud, size_t *total) {
    if (!s || !fn || !total) return dt_error_set(DT_ERR_INVALID, "storage get: NULL argument");
    *total = 0;
    dt_status st = check_key(s, "get", key, 0);
    if (st != DT_OK) return st;
    size_t chunk = s->opts.read_chunk ? s->opts.read_chunk : DT_STORE_READ_CHUNK_DEFAULT;
    if (s->ops->get_stream) return s->ops->get_stream(s, key, max_bytes, chunk, fn, ud, total);
    /* the whole object first (S3: one GET, retried as a whole), then in chunks; its size is
     * asked first, so an object larger than the caller allows (a hostile trainer_state.json,
     * a file longer than its checkpoint lists) is refused before it is fetched into memory */
    void *data;
    size_t len;
    if (max_bytes != SIZE_MAX) {
        if ((st = s->ops->stat(s, key, &len)) != DT_OK) return st;
        if (len > max_bytes)
            return dt_error_set(DT_ERR_RANGE, "storage get: %s/%s: %zu bytes, more than expected",
                                s->url, key, len);
    }
    if ((st = s->ops->get(s, key, &data, &len)) != DT_OK) return st;
    if (len > max_bytes)
        st = dt_error_set(DT_ERR_RANGE, "storage get: %s/%s: %zu bytes, more than expected", s->url,
                          key, len);
    for (size_t off = 0; st == DT_OK && off < len; off += chunk)
        st = fn(ud, off, (const char *)data + off, len - off < chunk ? len - off : chunk);
    if (st == DT_OK) *total = len;
    free(data);
    return st;
}

dt_status dt_store_get_range(dt_store *s, const char *key, uint64_t off, size_t len, void *buf) {
    if (!s || (len && !buf)) return dt_error_set(DT_ERR_INVALID, "storage get: NULL argument");
    dt_status st = check_key(s, "get", key, 0);
    if (st != DT_OK || !len) return st;
    if (off > UINT64_MAX - len)
        return dt_error_set(DT_ERR_RANGE, "storage get: %s/%s: range overflows", s->url, key);
    size_t got = 0;
    if ((st = s->ops->get_range(s, key, off, len, buf, &got)) != DT_OK) return st;
    if (got != len)
        return dt_error_set(DT_ERR_RANGE,
                            "storage get: %s/%s: bytes %" PRIu64 "-%" PRIu64
                            " asked, the object has only %zu of them",
                            s->url, key, off, off + len - 1, got);
    return DT_OK;
}

dt_status dt_store_stat(dt_store *s, const char *key, size_t *n) {
    if (!s || !n) return dt_error_set(DT_ERR_INVALID, "storage stat: NULL argument");
    dt_status st = check_key(s, "stat", key, 0);
    return st != DT_OK ? st : s->ops->stat(s, key, n);
}

dt_status dt_store_list_add(char ***keys, int *n, int *cap, const char *key) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        char **k = realloc(*keys, (size_t)c * sizeof *k);
        if (!k) return dt_error_set(DT_ERR_NOMEM, "storage list: out of memory");
        *keys = k, *cap = c;
    }
    if (!((*keys)[*n] = strdup(key)))
        return dt_error_set(DT_ERR_NOMEM, "storage list: out of memory");
    (*n)++;
    return DT_OK;
}

static int by_bytes(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

dt_status dt_store_list(dt_store *s, const char *prefix, char ***keys, int *n) {
    if (!s || !keys || !n) return dt_error_set(DT_ERR_INVALID, "storage list: NULL argument");
    *keys = NULL, *n = 0;
    if (!prefix) prefix = "";
    dt_status st = check_key(s, "list", prefix, 1);
    if (st != DT_OK) return st;
    int cap = 0;
    st = s->ops->list(s, prefix, keys, n, &cap);
    if (st != DT_OK) {
        dt_store_list_free(*keys, *n);
        *keys = NULL, *n = 0;
        return st;
    }
    if (*n > 1) qsort(*keys, (size_t)*n, sizeof **keys, by_bytes);
    return DT_OK;
}

void dt_store_list_free(char **keys, int n) {
    for (int i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
}

dt_status dt_store_delete(dt_store *s, const char *key) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "storage delete: store is NULL");
    dt_status st = check_key(s, "delete", key, 0);
    return st != DT_OK ? st : s->ops->del(s, key);
}
