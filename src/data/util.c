/* Files and directories for the data layer (see util.h). */
#include "data/util.h"
#include "core/file.h"
#include "core/fsmode.h"
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <cjson/cJSON.h>

void dt_hex64(uint64_t v, char buf[17]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4) buf[i] = hx[v & 15];
    buf[16] = '\0';
}

int dt_parse_hex64(const char *s, uint64_t *v) {
    uint64_t r = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        r = r << 4 | (uint64_t)d;
    }
    if (s[16] != '\0') return -1;
    *v = r;
    return 0;
}

static dt_status too_long(const char *path, const char *size, size_t max, const char *what) {
    return dt_error_set(DT_ERR_FORMAT, "%s: %s bytes, more than the %zu-byte limit of %s", path,
                        size, max, what ? what : "this file");
}

static dt_status read_plain(const char *path, size_t max, const char *what, uint8_t **data,
                            size_t *len) {
    int fd;
    dt_status os = dt_file_open_regular(path, O_RDONLY, 0, &fd);
    if (os) return os;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return dt_error_set(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > max) {
        char sz[32];
        snprintf(sz, sizeof sz, "%lld", (long long)st.st_size);
        close(fd);
        return too_long(path, sz, max, what);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return dt_error_set(DT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return dt_error_set(DT_ERR_IO, "%s: read failed at byte %zu: %s", path, got,
                                r < 0 ? strerror(errno) : "unexpected end of file");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *data = buf, *len = n;
    return DT_OK;
}

/* gzread also passes plain files through, so this handles both. The buffer grows with what was
 * inflated, and reading stops one byte past max. */
static dt_status read_gz(const char *path, size_t max, const char *what, uint8_t **data,
                         size_t *len) {
    int fd;
    dt_status os = dt_file_open_regular(path, O_RDONLY, 0, &fd);
    if (os) return os;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return dt_error_set(DT_ERR_NOMEM, "%s: cannot start reading: out of memory", path);
    }
    gzbuffer(f, 1 << 20);
    size_t cap = max < (1u << 20) ? (max < 64 ? 64 : max + 1) : 1 << 20, n = 0;
    uint8_t *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            gzclose(f);
            return dt_error_set(DT_ERR_NOMEM, "%s: out of memory after %zu bytes", path, n);
        }
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2 + 1);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
            continue;
        }
        size_t room = cap - n;
        if (max < SIZE_MAX && room > max + 1 - n) room = max + 1 - n;
        unsigned want = (unsigned)(room > (1u << 30) ? (1u << 30) : room);
        int r = gzread(f, buf + n, want);
        if (r < 0) {
            int e;
            const char *msg = gzerror(f, &e);
            dt_status s = dt_error_set(DT_ERR_FORMAT, "%s: gzip stream corrupt after %zu bytes: %s",
                                       path, n, msg);
            free(buf);
            gzclose(f);
            return s;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max) {
            free(buf);
            gzclose(f);
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: inflates to more than %zu bytes, the limit of %s", path, max,
                                what ? what : "this file");
        }
    }
    /* A truncated gzip member reads as a short stream plus an error flag. */
    int e;
    const char *msg = gzerror(f, &e);
    if (e != Z_OK && e != Z_BUF_ERROR) {
        dt_status s = dt_error_set(DT_ERR_FORMAT, "%s: gzip stream corrupt after %zu bytes: %s",
                                   path, n, msg);
        free(buf);
        gzclose(f);
        return s;
    }
    if (e == Z_BUF_ERROR) {
        free(buf);
        gzclose(f);
        return dt_error_set(DT_ERR_FORMAT, "%s: gzip stream truncated after %zu bytes", path, n);
    }
    gzclose(f);
    buf[n] = 0;
    *data = buf, *len = n;
    return DT_OK;
}

dt_status dt_read_file(const char *path, int gz, uint8_t **data, size_t *len) {
    return dt_read_file_max(path, gz, SIZE_MAX - 1, NULL, data, len);
}

dt_status dt_read_file_max(const char *path, int gz, size_t max, const char *what, uint8_t **data,
                           size_t *len) {
    if (max >= SIZE_MAX) max = SIZE_MAX - 1; /* + 1 for the NUL */
    return gz ? read_gz(path, max, what, data, len) : read_plain(path, max, what, data, len);
}

int dt_plain_name(const char *name) {
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

int dt_path_inside(const char *dir, const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return -1;
    if (!S_ISLNK(st.st_mode)) return 1;
    char *rd = realpath(dir, NULL), *rp = realpath(path, NULL);
    int in = -1;
    if (rd && rp) {
        size_t n = strlen(rd);
        in = !strncmp(rp, rd, n) && (rp[n] == '/' || (n == 1 && rd[0] == '/'));
    }
    free(rd), free(rp);
    return in;
}

dt_status dt_write_file(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, DT_FILE_MODE);
    if (fd < 0) return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    const uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t r = write(fd, p + done, len - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            dt_status s = dt_error_set(DT_ERR_IO, "%s: write failed at byte %zu: %s", path, done,
                                       strerror(errno));
            close(fd);
            return s;
        }
        done += (size_t)r;
    }
    if (close(fd) != 0)
        return dt_error_set(DT_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    return DT_OK;
}

char *dt_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

void dt_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char *c = dt_path_join(path, e->d_name);
                if (c) dt_remove_tree(c);
                free(c);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

int dt_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

char *dt_temp_dir_for(const char *final) {
    size_t n = strlen(final);
    while (n > 1 && final[n - 1] == '/') n--; /* "out/" -> "out.tmp-..." */
    char *t = malloc(n + 16);
    if (!t) {
        dt_error_set(DT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(t, final, n);
    memcpy(t + n, ".tmp-XXXXXX", 12);
    if (!mkdtemp(t)) {
        dt_error_set(DT_ERR_IO, "%.*s: cannot create a temporary directory beside it: %s", (int)n,
                     final, strerror(errno));
        free(t);
        return NULL;
    }
    return t;
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
