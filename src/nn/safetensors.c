/* safetensors reader/writer (see include/dtrain/safetensors.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/file.h"
#include "core/fsinfo.h"
#include "core/json.h"
#include "dtrain/safetensors.h"

#define ST_MAX_HEADER 100000000u /* the reference implementation's limit (100 MB) */

typedef struct st_tensor {
    char *name;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    uint64_t begin, end;
} st_tensor;

struct dt_st_file {
    char *path;
    void *map;
    size_t size;
    int owned;        /* map is a malloc'd buffer (dt_st_open_memory), not a mapping */
    const char *data; /* start of the data section (NULL: a header alone, dt_st_open_header) */
    size_t data_off;  /* where the data section starts in the file: 8 + the header's length */
    int n;
    st_tensor *t;
};

static int dtype_parse(const char *s, dt_dtype *out) {
    static const struct {
        const char *n;
        dt_dtype t;
    } tab[] = {
        {"F32", DT_F32}, {"BF16", DT_BF16}, {"I32", DT_I32}, {"I64", DT_I64}, {"F16", DT_F16}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(s, tab[i].n) == 0) return *out = tab[i].t, 1;
    return 0;
}

/* The format's other dtypes (safetensors' Dtype enum): valid files that dtrain cannot hold, told
 * apart from names the format does not have. */
static int dtype_known(const char *s) {
    static const char *const tab[] = {"BOOL", "U8",      "I8",      "F8_E5M2", "F8_E4M3",
                                      "I16",  "U16",     "U32",     "F64",     "U64",
                                      "F4",   "F6_E2M3", "F6_E3M2", "E8M0",    "F8_E8M0"};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(s, tab[i]) == 0) return 1;
    return 0;
}

/* A JSON number that is an exact integer in [0, 2^53]: shapes and offsets are usize in the
 * format, so 2.5, -1 or 1e300 are not dimensions (cJSON holds every number as a double). */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Strict UTF-8 (as the reference's from_utf8): no overlong forms, surrogates or code points past
 * U+10FFFF. Returns the offset of the first bad byte, or n. */
static size_t utf8_bad(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k = c < 0x80             ? 0
                   : (c & 0xE0) == 0xC0 ? 1
                   : (c & 0xF0) == 0xE0 ? 2
                   : (c & 0xF8) == 0xF0 ? 3
                                        : 9;
        if (k == 9 || (k == 1 && c < 0xC2)) return i;
        uint32_t cp = k == 0 ? c : c & (0x3F >> k);
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (p[i + j] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return i;
        i += k + 1;
    }
    return n;
}

static const char *dtype_str(dt_dtype t) {
    switch (t) {
    case DT_F32:
        return "F32";
    case DT_BF16:
        return "BF16";
    case DT_I32:
        return "I32";
    case DT_I64:
        return "I64";
    case DT_F16:
        return "F16";
    default:
        return "?";
    }
}

void dt_st_close(dt_st_file *f) {
    if (!f) return;
    if (f->owned == 1)
        free(f->map);
    else if (f->owned == 2)
        ; /* a view of the caller's buffer */
    else if (f->map && f->map != MAP_FAILED)
        munmap(f->map, f->size);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t), free(f->path), free(f);
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* No key of the header twice, checked before any entry is: JSON leaves it undefined which one
 * counts (cJSON finds the first, the reference refuses the file), and the message must say
 * that, not what is wrong with one of the copies. */
static dt_status no_duplicate_names(const char *path, const cJSON *root) {
    const char *k;
    int r = dt_json_duplicate_key(root, &k);
    if (r < 0) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    if (r == 0) return DT_OK;
    return dt_error_set(DT_ERR_FORMAT,
                        strcmp(k, "__metadata__") == 0
                            ? "%s: %s appears twice in the header (duplicate JSON key)"
                            : "%s: tensor '%s' appears twice in the header (duplicate JSON key)",
                        path, k);
}

/* One tensor entry of the header: {"dtype": D, "shape": [usize...], "data_offsets": [b, e]}
 * with b <= e and e - b = numel * sizeof(D) (the format's rules; where it lies in the data
 * section is checked over all tensors by parse). Every message names the file, the tensor, the
 * field and the rule. */
static dt_status parse_entry(dt_st_file *f, cJSON *it, st_tensor *t, uint64_t data_len) {
    const char *p = f->path, *nm = it->string;
    if (!cJSON_IsObject(it))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s' is %s; a safetensors header maps each tensor name to "
                            "an object {dtype, shape, data_offsets}",
                            p, nm, dt_json_kind(it));
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!dt || !sh || !of)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': no \"%s\" field (each tensor needs dtype, shape and "
                            "data_offsets)",
                            p, nm,
                            !dt   ? "dtype"
                            : !sh ? "shape"
                                  : "data_offsets");
    if (!cJSON_IsString(dt))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': dtype is %s, not a string such as "
                            "\"F32\"",
                            p, nm, dt_json_kind(dt));
    if (!dtype_parse(dt->valuestring, &t->dtype))
        return dt_error_set(DT_ERR_FORMAT,
                            dtype_known(dt->valuestring)
                                ? "%s: tensor '%s': unsupported dtype '%s' (a safetensors dtype "
                                  "dtrain does not read: convert the file to F32, BF16, F16, I32 "
                                  "or I64)"
                                : "%s: tensor '%s': unsupported dtype '%s' (not a safetensors "
                                  "dtype)",
                            p, nm, dt->valuestring);
    if (!cJSON_IsArray(sh))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': shape is %s, not an array of dimensions", p, nm,
                            dt_json_kind(sh));
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > DT_MAX_DIMS)
        return dt_error_set(DT_ERR_FORMAT, "%s: tensor '%s': shape has %d dims (at most %d)", p, nm,
                            t->ndim, DT_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        cJSON *v = cJSON_GetArrayItem(sh, d);
        uint64_t n;
        if (!json_uint(v, &n)) {
            char num[40] = "";
            if (cJSON_IsNumber(v)) snprintf(num, sizeof num, " (%.17g)", v->valuedouble);
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: tensor '%s': shape[%d] is %s%s; dimensions must be "
                                "non-negative integers",
                                p, nm, d, dt_json_kind(v), num);
        }
        t->shape[d] = (int64_t)n;
        if (n && numel > UINT64_MAX / 16 / n)
            return dt_error_set(
                DT_ERR_FORMAT,
                "%s: tensor '%s': shape too large (its element count overflows 64 bits)", p, nm);
        numel *= n;
    }
    uint64_t bo, eo;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
        !json_uint(cJSON_GetArrayItem(of, 0), &bo) || !json_uint(cJSON_GetArrayItem(of, 1), &eo))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets must be [begin, end], two "
                            "non-negative integers",
                            p, nm);
    if (eo < bo)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", p,
                            nm, (unsigned long long)bo, (unsigned long long)eo);
    t->begin = bo, t->end = eo;
    if (t->end > data_len)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu) past the end of the data "
                            "(%llu bytes; file truncated?)",
                            p, nm, (unsigned long long)t->begin, (unsigned long long)t->end,
                            (unsigned long long)data_len);
    if (t->end - t->begin != numel * dt_dtype_size(t->dtype))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets hold %llu bytes of data for %llu %s "
                            "elements (shape x dtype size = %llu bytes)",
                            p, nm, (unsigned long long)(t->end - t->begin),
                            (unsigned long long)numel, dt_dtype_name(t->dtype),
                            (unsigned long long)(numel * dt_dtype_size(t->dtype)));
    t->name = strdup(nm);
    return t->name ? DT_OK : dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
}

/* "__metadata__": the format's free-form string-to-string map (the reference reads it as
 * HashMap<String, String> and refuses anything else; a key given twice it takes, the last one
 * winning, so that is not refused here: dtrain reads no metadata). */
static dt_status parse_metadata(const char *p, const cJSON *m) {
    if (!cJSON_IsObject(m))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: __metadata__ is %s; safetensors metadata is an object mapping "
                            "strings to strings",
                            p, dt_json_kind(m));
    const cJSON *v;
    cJSON_ArrayForEach(v, m) {
        if (!cJSON_IsString(v))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: __metadata__ key '%s' is %s; safetensors metadata values "
                                "must be strings (write it as a JSON string)",
                                p, v->string, dt_json_kind(v));
    }
    return DT_OK;
}

/* The header's JSON length from the file's first 8 bytes p, checked against file_size. */
static dt_status header_len(const char *path, const void *p, size_t file_size, uint64_t *hlen) {
    if (file_size < 8)
        return dt_error_set(DT_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors file", path,
                            file_size);
    memcpy(hlen, p, 8); /* little-endian host assumed (x86-64, arm64) */
    if (*hlen > ST_MAX_HEADER || *hlen > file_size - 8)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: header size %llu is larger than the file (%zu bytes) or the "
                            "%u-byte limit",
                            path, (unsigned long long)*hlen, file_size, ST_MAX_HEADER);
    return DT_OK;
}

/* Validates the header and the tensor table of f->map [f->size] (of which only the header need
 * be in memory: dt_st_open_header), by the format's rules as the reference implementation
 * (huggingface/safetensors, tensor.rs) applies them: a UTF-8 JSON object of at most 100 MB,
 * padded with whitespace only; "__metadata__" a string-to-string map; each tensor's entry valid
 * (parse_entry); no name twice; and the tensors, sorted by offset, tile the data section from
 * byte 0 to its last byte exactly -- no hole, no overlap, nothing after the last one. */
static dt_status parse(dt_st_file *f) {
    const char *path = f->path;
    cJSON *root = NULL;
    uint64_t hlen = 0;
    dt_status st = header_len(path, f->map, f->size, &hlen);
    if (st != DT_OK) return st;
    const char *h = (const char *)f->map + 8;
    size_t bad = utf8_bad((const unsigned char *)h, (size_t)hlen);
    if (bad < hlen)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: header byte %zu is not UTF-8 (the header must be UTF-8 JSON)",
                            path, bad);
    size_t lead = 0;
    while (lead < hlen && (h[lead] == ' ' || h[lead] == '\t' || h[lead] == '\n' || h[lead] == '\r'))
        lead++;
    const char *end = NULL;
    if (lead < hlen && h[lead] == '{') root = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &end, 0);
    if (!cJSON_IsObject(root)) {
        st = dt_error_set(DT_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    /* what follows the object: the writer's padding (spaces, to align the data), nothing else */
    for (const char *q = end; q < h + hlen; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: header byte %td follows the JSON object and is not padding "
                              "(only spaces may pad the header)",
                              path, q - h);
            goto done;
        }
    f->data = (const char *)f->map + 8 + hlen;
    f->data_off = 8 + (size_t)hlen;
    uint64_t data_len = f->size - 8 - hlen;
    int cap = cJSON_GetArraySize(root);
    f->t = calloc((size_t)cap + 1, sizeof *f->t);
    if (!f->t) {
        st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if ((st = no_duplicate_names(path, root)) != DT_OK) goto done;
    cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if ((st = parse_metadata(path, it)) != DT_OK) goto done;
            continue;
        }
        if ((st = parse_entry(f, it, &f->t[f->n], data_len)) != DT_OK) goto done;
        f->n++;
    }
    st_tensor *s = malloc((size_t)f->n * sizeof *s + 1);
    if (!s) {
        st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* the data section's layout, on a copy sorted by offset (f->t keeps the header order) */
    memcpy(s, f->t, (size_t)f->n * sizeof *s);
    qsort(s, (size_t)f->n, sizeof *s, cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n && !st; i++) {
        if (s[i].begin > at)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: bytes [%llu, %llu) of the data section belong to no tensor "
                              "(a hole before '%s'); the tensors must cover the data section "
                              "contiguously",
                              path, (unsigned long long)at, (unsigned long long)s[i].begin,
                              s[i].name);
        else if (s[i].begin < at)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap in the "
                              "data section",
                              path, s[i - 1].name, (unsigned long long)s[i - 1].begin,
                              (unsigned long long)s[i - 1].end, s[i].name,
                              (unsigned long long)s[i].begin, (unsigned long long)s[i].end);
        at = s[i].end;
    }
    if (!st && f->data && at != data_len)
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: %llu bytes of the data section follow the last tensor's end (byte "
                          "%llu of %llu); the tensors must cover the data section exactly",
                          path, (unsigned long long)(data_len - at), (unsigned long long)at,
                          (unsigned long long)data_len);
    free(s);
done:
    cJSON_Delete(root);
    return st;
}

void dt_st_drop_pages(const dt_st_file *f) {
    if (f && f->map && !f->owned && f->size) madvise(f->map, f->size, MADV_DONTNEED);
}

dt_status dt_st_open(const char *path, dt_st_file **out) {
    *out = NULL;
    dt_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    dt_status st = DT_OK;
    int fd;
    struct stat sb;
    if ((st = dt_file_open_regular(path, O_RDONLY, 0, &fd))) goto done;
    if (fstat(fd, &sb) != 0) {
        st = dt_error_set(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    f->size = (size_t)sb.st_size;
    if (f->size < 8) {
        st = dt_error_set(DT_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors file", path,
                          f->size);
        goto done;
    }
    /* Shared and read-only: the pages are the page cache's, one copy however many processes of
     * the host map the file (a LoRA base's frozen weights point straight into it), and a write
     * through the mapping faults. */
    f->map = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st = dt_error_set(DT_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        goto done;
    }
    st = parse(f);
done:
    if (fd >= 0) close(fd);
    if (st != DT_OK) {
        dt_st_close(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_st_open_view(const char *name, const void *data, size_t n, dt_st_file **out) {
    *out = NULL;
    dt_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "(memory)"))) {
        free(f);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", name ? name : "(memory)");
    }
    f->map = (void *)data, f->size = n, f->owned = 2; /* 2: borrowed, neither freed nor unmapped */
    dt_status st = parse(f);
    if (st != DT_OK) {
        dt_st_close(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_st_open_memory(const char *name, void *data, size_t n, dt_st_file **out) {
    *out = NULL;
    dt_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "(memory)"))) {
        free(f), free(data);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", name ? name : "(memory)");
    }
    f->map = data, f->size = n, f->owned = 1;
    dt_status st = parse(f);
    if (st != DT_OK) {
        dt_st_close(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_st_header_size(const char *name, const void *first8, size_t file_size, size_t *n) {
    uint64_t hlen = 0;
    dt_status st = header_len(name ? name : "(memory)", first8, file_size, &hlen);
    if (st == DT_OK) *n = 8 + (size_t)hlen;
    return st;
}

dt_status dt_st_open_header(const char *name, const void *prefix, size_t n, size_t file_size,
                            dt_st_file **out) {
    *out = NULL;
    const char *nm = name ? name : "(memory)";
    size_t need;
    dt_status st =
        n < 8 ? dt_error_set(DT_ERR_RANGE, "%s: %zu bytes of the header given, need 8", nm, n)
              : dt_st_header_size(nm, prefix, file_size, &need);
    if (st != DT_OK) return st;
    if (n < need)
        return dt_error_set(DT_ERR_RANGE, "%s: %zu bytes of the header given, need %zu", nm, n,
                            need);
    dt_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(nm))) {
        free(f);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", nm);
    }
    /* parse reads only the header; the data section is the file's, not in memory */
    f->map = (void *)prefix, f->size = file_size, f->owned = 2;
    st = parse(f);
    f->map = NULL, f->data = NULL;
    if (st != DT_OK) {
        dt_st_close(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_st_locate(const dt_st_file *f, const char *name, dt_tensor *out, size_t *file_offset) {
    for (int i = 0; f && i < f->n; i++) {
        if (strcmp(f->t[i].name, name) != 0) continue;
        if (file_offset) *file_offset = f->data_off + (size_t)f->t[i].begin;
        return dt_tensor_init(out, f->data ? (void *)(f->data + f->t[i].begin) : NULL,
                              f->t[i].dtype, f->t[i].ndim, f->t[i].shape);
    }
    return dt_error_set(DT_ERR_INVALID, "%s: no tensor '%s'", f ? f->path : "?", name);
}

int dt_st_count(const dt_st_file *f) {
    return f ? f->n : 0;
}
const char *dt_st_name(const dt_st_file *f, int i) {
    return (f && i >= 0 && i < f->n) ? f->t[i].name : NULL;
}

dt_status dt_st_get(const dt_st_file *f, const char *name, dt_tensor *out) {
    return dt_st_locate(f, name, out, NULL);
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC; /* nothing more fits */
            return -1;
        }
        c += w, n -= (size_t)w;
    }
    return 0;
}

/* The header JSON (padded to 8 bytes with spaces by the caller) and the data size. */
static char *header_json(const dt_st_entry *e, int n, const char *const *meta_keys,
                         const char *const *meta_vals, int n_meta, uint64_t *data_bytes) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < n_meta; i++)
            cJSON_AddStringToObject(m, meta_keys[i], meta_vals[i]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = e[i].t;
        cJSON *o = cJSON_AddObjectToObject(root, e[i].name);
        if (!o) {
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddStringToObject(o, "dtype", dtype_str(t->dtype));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        uint64_t nb = dt_tensor_nbytes(t);
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    *data_bytes = off;
    return json;
}

size_t dt_st_serialized_size(const dt_st_entry *e, int n, const char *const *meta_keys,
                             const char *const *meta_vals, int n_meta) {
    uint64_t data = 0;
    char *json = header_json(e, n, meta_keys, meta_vals, n_meta, &data);
    if (!json) return 0;
    size_t jl = strlen(json);
    free(json);
    return 8 + jl + (8 - jl % 8) % 8 + (size_t)data;
}

dt_status dt_st_serialize(void *buf, size_t cap, const dt_st_entry *e, int n,
                          const char *const *meta_keys, const char *const *meta_vals, int n_meta,
                          size_t *written) {
    uint64_t data = 0;
    char *json = header_json(e, n, meta_keys, meta_vals, n_meta, &data);
    if (!json) return dt_error_set(DT_ERR_NOMEM, "safetensors serialize: out of memory");
    size_t jl = strlen(json), pad = (8 - jl % 8) % 8;
    uint64_t hlen = jl + pad;
    size_t total = 8 + hlen + (size_t)data;
    if (total > cap) {
        free(json);
        return dt_error_set(DT_ERR_RANGE, "safetensors serialize: %zu bytes do not fit %zu", total,
                            cap);
    }
    char *p = buf;
    memcpy(p, &hlen, 8);
    memcpy(p + 8, json, jl);
    memset(p + 8 + jl, ' ', pad);
    free(json);
    p += 8 + hlen;
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = e[i].t;
        size_t nb = dt_tensor_nbytes(t);
        if (dt_tensor_is_contiguous(t)) {
            memcpy(p, t->data, nb);
        } else {
            size_t es = dt_dtype_size(t->dtype);
            int64_t ne = dt_tensor_numel(t);
            dt_tensor one;
            for (int64_t j = 0; j < ne; j++) {
                dt_tensor_init(&one, p + (size_t)j * es, t->dtype, 0, NULL);
                dt_tensor_set(&one, 0, dt_tensor_get(t, j));
            }
        }
        p += nb;
    }
    if (written) *written = total;
    return DT_OK;
}

dt_status dt_st_save(const char *path, const dt_st_entry *e, int n, const char *const *meta_keys,
                     const char *const *meta_vals, int n_meta) {
    char tmp[4096];
    dt_status st = DT_OK;
    int fd = -1;
    uint64_t data_bytes = 0;
    char *json = header_json(e, n, meta_keys, meta_vals, n_meta, &data_bytes);
    if (!json) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    size_t jl = strlen(json), pad = (8 - jl % 8) % 8;
    uint64_t hlen = jl + pad;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0640); /* DT_FILE_MODE */
    if (fd < 0) {
        int err = errno;
        char note[DT_FS_NOTE_LEN];
        st = dt_error_set(DT_ERR_IO, "%s: cannot create: %s%s", tmp, strerror(err),
                          dt_fs_full_note(tmp, err, note, sizeof note));
        goto done;
    }
    int bad = write_all(fd, &hlen, 8) || write_all(fd, json, jl) || write_all(fd, "        ", pad);
    for (int i = 0; i < n && !bad; i++) {
        const dt_tensor *t = e[i].t;
        if (dt_tensor_is_contiguous(t)) {
            bad = write_all(fd, t->data, dt_tensor_nbytes(t));
        } else {
            /* Strided: copy in chunks through a small contiguous buffer, element by element. */
            char chunk[4096];
            size_t es = dt_dtype_size(t->dtype), per = sizeof chunk / es, k = 0;
            int64_t ne = dt_tensor_numel(t);
            dt_tensor one;
            for (int64_t j = 0; j < ne && !bad; j++) {
                dt_tensor_init(&one, chunk + k * es, t->dtype, 0, NULL);
                dt_tensor_set(&one, 0, dt_tensor_get(t, j));
                if (++k == per || j + 1 == ne) bad = write_all(fd, chunk, k * es), k = 0;
            }
        }
    }
    /* a full disk shows at write, fsync (delayed allocation, NFS) or close: all checked */
    if (!bad && fsync(fd) != 0) bad = 1;
    int err = errno;
    if (close(fd) != 0 && !bad) bad = 1, err = errno;
    fd = -1;
    if (bad) {
        char note[DT_FS_NOTE_LEN];
        st = dt_error_set(DT_ERR_IO, "%s: write failed: %s%s; %s is left as it was", tmp,
                          strerror(err), dt_fs_full_note(tmp, err, note, sizeof note), path);
        goto done;
    }
    if (rename(tmp, path) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
done:
    if (fd >= 0) close(fd);
    if (st != DT_OK) unlink(tmp);
    free(json);
    (void)data_bytes;
    return st;
}
