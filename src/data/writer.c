/* Writing a dataset: shards buffered in memory up to shard_bytes, then the manifest; all in a
 * temporary directory renamed into place at the end. The folder ends up DT_DIR_MODE (0750) and
 * its files DT_FILE_MODE (0640), less the umask (src/core/fsmode.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsmode.h"
#include "data/dataset.h"
#include "core/bytes.h"
#include "core/file.h"

struct dt_dataset_writer {
    char *final_dir, *tmp_dir;
    dt_dataset_spec spec;
    char name[64], split[32];
    char *extra_json;
    dt_status failed; /* first error; the writer only accepts abort/finish after it */
    int64_t hwc, per_shard;
    /* the shard being filled */
    uint8_t *pix;
    int32_t *labels;
    uint32_t *tok;
    uint8_t *mask;
    uint64_t *offs;
    uint8_t *blob;     /* encoded: the files' bytes ([n_tok]: n_tok counts bytes) */
    uint32_t *imginfo; /* encoded: [n_rec, 4] */
    char **names;      /* encoded: class names, [classes] or NULL */
    int64_t n_rec, n_tok, cap_rec, cap_tok;
    /* totals */
    int n_shards;
    int64_t records, tokens;
    cJSON *shard_list;
    char *lines;
    size_t lines_len, lines_cap;
};

static void *grow(void *p, int64_t *cap, int64_t need, size_t es) {
    if (need <= *cap) return p;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(p, (size_t)c * es);
    if (q) *cap = c;
    return q;
}

dt_status dt_dataset_writer_open(const char *dir, const dt_dataset_spec *spec,
                                 dt_dataset_writer **out) {
    *out = NULL;
    if (spec->kind != DT_DATA_IMAGE && spec->kind != DT_DATA_TOKENS &&
        spec->kind != DT_DATA_ENCODED)
        return dt_error_set(DT_ERR_INVALID, "%s: dataset kind %d unknown", dir, (int)spec->kind);
    if (spec->kind == DT_DATA_IMAGE &&
        (spec->height <= 0 || spec->width <= 0 || spec->channels <= 0 || spec->channels > 4 ||
         spec->height > 65535 || spec->width > 65535 || spec->classes < 0))
        return dt_error_set(DT_ERR_INVALID, "%s: image shape %dx%dx%d (classes %d) invalid", dir,
                            spec->height, spec->width, spec->channels, spec->classes);
    if (spec->kind == DT_DATA_ENCODED && spec->classes < 0)
        return dt_error_set(DT_ERR_INVALID, "%s: %d classes", dir, spec->classes);
    for (int32_t k = 0; spec->kind == DT_DATA_ENCODED && spec->class_names && k < spec->classes;
         k++)
        if (!spec->class_names[k] || strchr(spec->class_names[k], '\n'))
            return dt_error_set(DT_ERR_INVALID, "%s: class name %d is missing or has a newline",
                                dir, k);
    if (dt_path_exists(dir))
        return dt_error_set(DT_ERR_IO, "%s: already exists (a dataset is never overwritten)", dir);
    dt_dataset_writer *w = calloc(1, sizeof *w);
    if (!w) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (spec->kind == DT_DATA_ENCODED && spec->class_names) {
        w->names = calloc((size_t)spec->classes + 1, sizeof *w->names);
        for (int32_t k = 0; w->names && k < spec->classes; k++)
            if (!(w->names[k] = strdup(spec->class_names[k]))) {
                dt_dataset_writer_abort(w);
                return dt_error_set(DT_ERR_NOMEM, "out of memory");
            }
        if (!w->names) {
            free(w);
            return dt_error_set(DT_ERR_NOMEM, "out of memory");
        }
    }
    w->spec = *spec;
    w->spec.class_names = NULL; /* w->names holds copies: the caller's may go away */
    snprintf(w->name, sizeof w->name, "%s", spec->name ? spec->name : "");
    snprintf(w->split, sizeof w->split, "%s", spec->split ? spec->split : "");
    w->extra_json = spec->extra_json ? strdup(spec->extra_json) : NULL;
    w->final_dir = strdup(dir);
    w->shard_list = cJSON_CreateArray();
    if (!w->final_dir || !w->shard_list || (spec->extra_json && !w->extra_json)) {
        dt_dataset_writer_abort(w);
        return dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    if (w->spec.shard_bytes <= 0) w->spec.shard_bytes = 64ll << 20;
    w->hwc = (int64_t)spec->height * spec->width * spec->channels;
    if (spec->kind == DT_DATA_IMAGE) {
        w->per_shard = w->spec.shard_bytes / (w->hwc + 4);
        if (w->per_shard < 1) w->per_shard = 1;
    }
    w->tmp_dir = dt_temp_dir_for(dir);
    if (!w->tmp_dir) {
        dt_status st = DT_ERR_IO;
        free(w->final_dir);
        cJSON_Delete(w->shard_list);
        free(w->extra_json);
        free(w);
        return st;
    }
    *out = w;
    return DT_OK;
}

static dt_status fail(dt_dataset_writer *w, dt_status st) {
    if (!w->failed) w->failed = st;
    return st;
}

static dt_status flush_shard(dt_dataset_writer *w) {
    if (w->n_rec == 0) return DT_OK;
    char file[32];
    snprintf(file, sizeof file, "shard-%05d.dts", w->n_shards);
    char *path = dt_path_join(w->tmp_dir, file);
    if (!path) return fail(w, dt_error_set(DT_ERR_NOMEM, "out of memory"));
    dt_shard_header h = {0};
    h.kind = (uint32_t)w->spec.kind;
    h.records = (uint64_t)w->n_rec;
    const void *data[DT_SHARD_MAX_SECTIONS];
    if (w->spec.kind == DT_DATA_IMAGE) {
        h.dtype = DT_DATA_U8;
        h.shape[0] = (uint32_t)w->spec.height, h.shape[1] = (uint32_t)w->spec.width;
        h.shape[2] = (uint32_t)w->spec.channels, h.shape[3] = (uint32_t)w->spec.classes;
        h.elements = (uint64_t)(w->n_rec * w->hwc);
        h.n_sections = 2;
        h.sec[0] = (dt_shard_section){DT_SEC_PIXELS, DT_DATA_U8, 0, h.elements, h.elements};
        h.sec[1] = (dt_shard_section){DT_SEC_LABELS, DT_DATA_I32, 0, h.records * 4, h.records};
        data[0] = w->pix, data[1] = w->labels;
    } else if (w->spec.kind == DT_DATA_ENCODED) {
        uint64_t e = (uint64_t)w->n_tok, n = h.records;
        h.dtype = DT_DATA_U8;
        h.shape[3] = (uint32_t)w->spec.classes;
        h.elements = e;
        h.n_sections = 4;
        h.sec[0] = (dt_shard_section){DT_SEC_BLOB, DT_DATA_U8, 0, e, e};
        h.sec[1] = (dt_shard_section){DT_SEC_OFFSETS, DT_DATA_U64, 0, (n + 1) * 8, n + 1};
        h.sec[2] = (dt_shard_section){DT_SEC_LABELS, DT_DATA_I32, 0, n * 4, n};
        h.sec[3] = (dt_shard_section){DT_SEC_IMGINFO, DT_DATA_U32, 0, n * 16, n * 4};
        data[0] = w->blob, data[1] = w->offs, data[2] = w->labels, data[3] = w->imginfo;
    } else {
        uint64_t t = (uint64_t)w->n_tok;
        h.dtype = DT_DATA_U32;
        h.elements = t;
        h.n_sections = 2;
        h.sec[0] = (dt_shard_section){DT_SEC_TOKENS, DT_DATA_U32, 0, t * 4, t};
        h.sec[1] =
            (dt_shard_section){DT_SEC_OFFSETS, DT_DATA_U64, 0, (h.records + 1) * 8, h.records + 1};
        data[0] = w->tok, data[1] = w->offs;
        if (w->spec.has_mask) {
            h.flags |= DT_SHARD_FLAG_MASK;
            h.sec[2] = (dt_shard_section){DT_SEC_MASK, DT_DATA_U8, 0, t, t};
            data[2] = w->mask;
            h.n_sections = 3;
        }
    }
    dt_status st = dt_shard_write(path, &h, data);
    if (!st && dt_chmod_umask(path, DT_FILE_MODE) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: chmod: %s", path, strerror(errno));
    free(path);
    if (st) return fail(w, st);
    uint64_t bytes = DT_SHARD_HEADER_BYTES + h.payload_bytes;
    char hex[17];
    dt_hex64(h.payload_xxh3, hex);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "file", file);
    cJSON_AddNumberToObject(e, "records", (double)w->n_rec);
    cJSON_AddNumberToObject(e, "bytes", (double)bytes);
    cJSON_AddStringToObject(e, "xxh3", hex);
    cJSON_AddItemToArray(w->shard_list, e);
    if (w->lines_len + 64 >= w->lines_cap) {
        size_t c = w->lines_cap ? w->lines_cap * 2 : 4096;
        char *l = realloc(w->lines, c);
        if (!l) return fail(w, dt_error_set(DT_ERR_NOMEM, "out of memory"));
        w->lines = l, w->lines_cap = c;
    }
    w->lines_len += (size_t)snprintf(w->lines + w->lines_len, 64, "%" PRId64 " %" PRIu64 " %s\n",
                                     w->n_rec, bytes, hex);
    w->n_shards++;
    w->records += w->n_rec;
    w->tokens += w->n_tok;
    w->n_rec = w->n_tok = 0;
    return DT_OK;
}

dt_status dt_dataset_writer_add_image(dt_dataset_writer *w, const uint8_t *hwc, int32_t label) {
    if (w->failed) return w->failed;
    if (w->spec.kind != DT_DATA_IMAGE)
        return fail(w,
                    dt_error_set(DT_ERR_INVALID, "%s: add_image on a token dataset", w->final_dir));
    if (label < 0 || (w->spec.classes && label >= w->spec.classes))
        return fail(w,
                    dt_error_set(DT_ERR_RANGE, "%s: record %" PRId64 ": label %d outside [0, %d)",
                                 w->final_dir, w->records + w->n_rec, label, w->spec.classes));
    if (w->n_rec == w->per_shard) {
        dt_status st = flush_shard(w);
        if (st) return st;
    }
    if (w->n_rec == w->cap_rec) {
        int64_t c1 = w->cap_rec, c2 = w->cap_rec;
        uint8_t *p = grow(w->pix, &c1, w->n_rec + 1, (size_t)w->hwc);
        if (p) w->pix = p;
        int32_t *l = grow(w->labels, &c2, w->n_rec + 1, 4);
        if (l) w->labels = l;
        if (!p || !l) return fail(w, dt_error_set(DT_ERR_NOMEM, "%s: out of memory", w->final_dir));
        w->cap_rec = c1;
    }
    memcpy(w->pix + w->n_rec * w->hwc, hwc, (size_t)w->hwc);
    w->labels[w->n_rec++] = label;
    return DT_OK;
}

dt_status dt_dataset_writer_add_encoded(dt_dataset_writer *w, const uint8_t *bytes, size_t len,
                                        int32_t label, int32_t width, int32_t height, int32_t fmt) {
    if (w->failed) return w->failed;
    int64_t rec = w->records + w->n_rec;
    if (w->spec.kind != DT_DATA_ENCODED)
        return fail(w, dt_error_set(DT_ERR_INVALID, "%s: add_encoded on a dataset of kind %d",
                                    w->final_dir, (int)w->spec.kind));
    if (label < 0 || (w->spec.classes && label >= w->spec.classes))
        return fail(w,
                    dt_error_set(DT_ERR_RANGE, "%s: record %" PRId64 ": label %d outside [0, %d)",
                                 w->final_dir, rec, label, w->spec.classes));
    if (!len || len > ((size_t)1 << 40) || width <= 0 || height <= 0 || width > 65535 ||
        height > 65535 || fmt < 1 || fmt > 3)
        return fail(w, dt_error_set(DT_ERR_INVALID,
                                    "%s: record %" PRId64 ": %zu bytes, %dx%d, format %d (need "
                                    "bytes, sides 1-65535, format 1-3)",
                                    w->final_dir, rec, len, width, height, fmt));
    /* a shard holds at least one image; the next starts when this one would pass shard_bytes */
    if (w->n_rec > 0 &&
        w->n_tok + (int64_t)len + (w->n_rec + 2) * (8 + 4 + 16) > w->spec.shard_bytes) {
        dt_status st = flush_shard(w);
        if (st) return st;
    }
    int64_t cb = w->cap_tok, co = w->cap_rec, cl = w->cap_rec, ci = w->cap_rec;
    uint8_t *b = grow(w->blob, &cb, w->n_tok + (int64_t)len, 1);
    if (b) w->blob = b;
    uint64_t *o = grow(w->offs, &co, w->n_rec + 2, 8);
    if (o) w->offs = o;
    int32_t *l = grow(w->labels, &cl, w->n_rec + 2, 4);
    if (l) w->labels = l;
    uint32_t *in = grow(w->imginfo, &ci, w->n_rec + 2, 16);
    if (in) w->imginfo = in;
    if (!b || !o || !l || !in)
        return fail(w, dt_error_set(DT_ERR_NOMEM, "%s: out of memory", w->final_dir));
    w->cap_tok = cb, w->cap_rec = co;
    memcpy(w->blob + w->n_tok, bytes, len);
    w->offs[0] = 0;
    w->labels[w->n_rec] = label;
    uint32_t *r = w->imginfo + 4 * w->n_rec;
    r[0] = (uint32_t)width, r[1] = (uint32_t)height, r[2] = (uint32_t)fmt, r[3] = 0;
    w->n_tok += (int64_t)len;
    w->offs[++w->n_rec] = (uint64_t)w->n_tok;
    return DT_OK;
}

dt_status dt_dataset_writer_add_doc(dt_dataset_writer *w, const uint32_t *tokens,
                                    const uint8_t *mask, int64_t n) {
    if (w->failed) return w->failed;
    if (w->spec.kind != DT_DATA_TOKENS)
        return fail(w,
                    dt_error_set(DT_ERR_INVALID, "%s: add_doc on an image dataset", w->final_dir));
    if (n < 0 || (w->spec.has_mask && !mask && n))
        return fail(w, dt_error_set(DT_ERR_INVALID, "%s: document %" PRId64 ": %s", w->final_dir,
                                    w->records + w->n_rec,
                                    n < 0 ? "negative length" : "the dataset needs a loss mask"));
    for (int64_t i = 0; i < n; i++) {
        if (w->spec.vocab_size > 0 && tokens[i] >= (uint64_t)w->spec.vocab_size)
            return fail(w, dt_error_set(DT_ERR_RANGE,
                                        "%s: document %" PRId64 ", token %" PRId64
                                        ": id %u outside the vocabulary (%" PRId64 ")",
                                        w->final_dir, w->records + w->n_rec, i, tokens[i],
                                        w->spec.vocab_size));
        if (w->spec.has_mask && mask[i] > 1)
            return fail(w, dt_error_set(DT_ERR_INVALID,
                                        "%s: document %" PRId64 ": mask value %u is not 0 or 1",
                                        w->final_dir, w->records + w->n_rec, mask[i]));
    }
    int64_t per_tok = w->spec.has_mask ? 5 : 4;
    if (w->n_rec > 0 && (w->n_tok + n) * per_tok + (w->n_rec + 2) * 8 > w->spec.shard_bytes) {
        dt_status st = flush_shard(w);
        if (st) return st;
    }
    int64_t ct = w->cap_tok, cm = w->cap_tok, co = w->cap_rec;
    uint32_t *t = grow(w->tok, &ct, w->n_tok + n, 4);
    if (t) w->tok = t;
    uint8_t *m = w->mask;
    if (w->spec.has_mask) {
        m = grow(w->mask, &cm, w->n_tok + n, 1);
        if (m) w->mask = m;
    }
    uint64_t *o = grow(w->offs, &co, w->n_rec + 2, 8);
    if (o) w->offs = o;
    if (!t || !o || (w->spec.has_mask && !m))
        return fail(w, dt_error_set(DT_ERR_NOMEM, "%s: out of memory", w->final_dir));
    w->cap_tok = ct, w->cap_rec = co;
    if (n) memcpy(w->tok + w->n_tok, tokens, (size_t)n * 4);
    if (w->spec.has_mask && n) memcpy(w->mask + w->n_tok, mask, (size_t)n);
    w->offs[0] = 0;
    w->n_tok += n;
    w->offs[++w->n_rec] = (uint64_t)w->n_tok;
    return DT_OK;
}

static void free_writer(dt_dataset_writer *w) {
    free(w->final_dir);
    free(w->tmp_dir);
    free(w->extra_json);
    free(w->pix);
    free(w->labels);
    free(w->tok);
    free(w->mask);
    free(w->offs);
    free(w->blob);
    free(w->imginfo);
    for (int32_t k = 0; w->names && w->names[k]; k++) free(w->names[k]);
    free(w->names);
    free(w->lines);
    cJSON_Delete(w->shard_list);
    free(w);
}

void dt_dataset_writer_abort(dt_dataset_writer *w) {
    if (!w) return;
    if (w->tmp_dir) dt_remove_tree(w->tmp_dir);
    free_writer(w);
}

static dt_status write_manifest(dt_dataset_writer *w, char fp[17]) {
    dt_dataset_info in = {0};
    in.kind = w->spec.kind;
    if (w->spec.kind == DT_DATA_IMAGE) {
        in.height = w->spec.height, in.width = w->spec.width, in.channels = w->spec.channels;
        in.classes = w->spec.classes;
    } else if (w->spec.kind == DT_DATA_ENCODED) {
        in.classes = w->spec.classes;
    } else {
        in.vocab_size = w->spec.vocab_size, in.has_mask = w->spec.has_mask;
    }
    char *names =
        dt_dataset_names_line((const char *const *)w->names, w->names ? w->spec.classes : 0);
    if (!names) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    dt_hex64(dt_dataset_fingerprint(&in, names, w->lines ? w->lines : ""), fp);
    free(names);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "format", "dtrain-dataset");
    cJSON_AddNumberToObject(r, "version", 1);
    cJSON_AddStringToObject(r, "kind",
                            w->spec.kind == DT_DATA_IMAGE    ? "image"
                            : w->spec.kind == DT_DATA_TOKENS ? "tokens"
                                                             : "encoded-image");
    cJSON_AddStringToObject(r, "name", w->name);
    cJSON_AddStringToObject(r, "split", w->split);
    cJSON_AddNumberToObject(r, "records", (double)w->records);
    if (w->spec.kind == DT_DATA_IMAGE) {
        cJSON *im = cJSON_AddObjectToObject(r, "image");
        cJSON_AddNumberToObject(im, "height", w->spec.height);
        cJSON_AddNumberToObject(im, "width", w->spec.width);
        cJSON_AddNumberToObject(im, "channels", w->spec.channels);
        cJSON_AddNumberToObject(im, "classes", w->spec.classes);
        cJSON_AddStringToObject(im, "layout", "HWC uint8");
    } else if (w->spec.kind == DT_DATA_ENCODED) {
        cJSON *en = cJSON_AddObjectToObject(r, "encoded");
        cJSON_AddNumberToObject(en, "classes", w->spec.classes);
        cJSON_AddNumberToObject(en, "bytes", (double)w->tokens);
        if (w->names) {
            cJSON *a = cJSON_AddArrayToObject(en, "class_names");
            for (int32_t k = 0; k < w->spec.classes; k++)
                cJSON_AddItemToArray(a, cJSON_CreateString(w->names[k]));
        }
    } else {
        cJSON *tk = cJSON_AddObjectToObject(r, "tokens");
        cJSON_AddNumberToObject(tk, "count", (double)w->tokens);
        cJSON_AddNumberToObject(tk, "vocab_size", (double)w->spec.vocab_size);
        cJSON_AddBoolToObject(tk, "has_mask", w->spec.has_mask);
        cJSON_AddNumberToObject(tk, "eot_id", w->spec.eot_id);
        cJSON_AddNumberToObject(tk, "pad_id", w->spec.pad_id);
    }
    cJSON_AddStringToObject(r, "fingerprint", fp);
    cJSON_AddItemReferenceToObject(r, "shards", w->shard_list);
    if (w->extra_json) {
        cJSON *meta = cJSON_Parse(w->extra_json);
        if (meta) cJSON_AddItemToObject(r, "meta", meta);
    }
    char *txt = cJSON_Print(r);
    cJSON_Delete(r);
    if (!txt) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    char *path = dt_path_join(w->tmp_dir, DT_MANIFEST_NAME);
    size_t n = strlen(txt);
    txt[n] = '\n'; /* cJSON_Print leaves room: replace the NUL, write n + 1 bytes */
    dt_status st =
        path ? dt_write_file(path, txt, n + 1) : dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (!st && dt_chmod_umask(path, DT_FILE_MODE) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: chmod: %s", path, strerror(errno));
    free(path);
    free(txt);
    return st;
}

dt_status dt_dataset_writer_close(dt_dataset_writer *w) {
    dt_status st = w->failed;
    if (!st) st = flush_shard(w);
    char fp[17];
    if (!st) st = write_manifest(w, fp);
    /* mkdtemp made it 0700: the dataset is shared like every folder dtrain writes */
    if (!st && dt_chmod_umask(w->tmp_dir, DT_DIR_MODE) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: chmod: %s", w->tmp_dir, strerror(errno));
    if (!st && rename(w->tmp_dir, w->final_dir) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: cannot rename %s into place: %s", w->final_dir,
                          w->tmp_dir, strerror(errno));
    if (st) {
        dt_dataset_writer_abort(w);
        return st;
    }
    free_writer(w);
    return DT_OK;
}
