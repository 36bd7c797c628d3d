/* The text importer (plain text files -> documents) and the frame it shares with the JSONL
 * importer (import_jsonl.c): source files, tokenizer, documents, splits. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include "core/file.h"
#include "data/import_text.h"
#include "core/bytes.h"
#include "core/json.h"
#include "dtrain/tokenizer.h"

/* ---- sources ---- */

/* A file is binary (skipped in directories, as grep -I does) if its first 8 KiB hold a NUL. */
static int is_binary(const char *path) {
    FILE *f;
    if (dt_file_fopen_regular(path, "rb", &f)) return 0; /* the read that follows says why */
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return memchr(buf, 0, n) != NULL;
}

/* Named files as given; directories contribute their regular, non-hidden, non-binary files
 * (no symlinks, no recursion), sorted by name so imports are reproducible. */
static dt_status collect(const dt_import *im, const char *const *srcs, int n, dt_strv *out) {
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(srcs[i], &st) != 0)
            return dt_error_set(DT_ERR_IO, "%s: no such file or directory", srcs[i]);
        if (!S_ISDIR(st.st_mode)) {
            if (dt_strv_push(out, strdup(srcs[i])))
                return dt_error_set(DT_ERR_NOMEM, "out of memory");
            continue;
        }
        DIR *d = opendir(srcs[i]);
        if (!d) return dt_error_set(DT_ERR_IO, "%s: cannot read directory", srcs[i]);
        int64_t first = out->n;
        int skipped = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char *p = dt_path_join(srcs[i], e->d_name);
            struct stat ls;
            if (!p || lstat(p, &ls) != 0 || !S_ISREG(ls.st_mode) || is_binary(p)) {
                skipped += p && S_ISREG(ls.st_mode);
                free(p);
                continue;
            }
            if (dt_strv_push(out, p)) {
                closedir(d);
                return dt_error_set(DT_ERR_NOMEM, "out of memory");
            }
        }
        closedir(d);
        if (out->n > first) /* (an empty directory leaves paths NULL) */
            qsort(out->s + first, (size_t)(out->n - first), sizeof *out->s, dt_strv_cmp);
        if (skipped) dt_import_note(im, "%s: skipped %d binary files", srcs[i], skipped);
    }
    if (!out->n) return dt_error_set(DT_ERR_IO, "import: no input files");
    return DT_OK;
}

/* ---- tokenizer and documents ---- */

static dt_status load_tokenizer(dt_import *im, dt_doc_sink *s, dt_sink_setup_fn setup,
                                char **meta) {
    char *path = dt_import_tokenizer_path(im->o);
    if (!path)
        return dt_error_set(DT_ERR_INVALID,
                            "import %s: no tokenizer (give --tokenizer FILE: a "
                            ".tiktoken rank file, a tokenizer.json or a model folder)",
                            im->kind);
    dt_status st = dt_tokenizer_load(path, &s->tok);
    s->bos = s->tok ? dt_tokenizer_special_id(s->tok, "<|begin_of_text|>") : -1;
    s->eot = s->tok ? dt_tokenizer_special_id(s->tok, "<|end_of_text|>") : -1;
    if (s->eot < 0 && s->tok) s->eot = dt_tokenizer_special_id(s->tok, "<|endoftext|>");
    uint8_t *data = NULL;
    size_t len;
    if (!st)
        st = dt_read_file_max(path, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &data, &len);
    cJSON *m = st ? NULL : cJSON_CreateObject();
    if (!st && !m) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (m) {
        char hex[17];
        dt_hex64(XXH3_64bits(data, len), hex);
        const char *base = strrchr(path, '/');
        cJSON_AddStringToObject(m, "tokenizer", dt_tokenizer_describe(s->tok));
        cJSON_AddStringToObject(m, "tokenizer_file", base ? base + 1 : path);
        cJSON_AddStringToObject(m, "tokenizer_xxh3", hex);
        if (setup) st = setup(im, s, path, m);
        cJSON_AddNumberToObject(m, "bos_id", s->bos);
        cJSON_AddNumberToObject(m, "eot_id", s->eot);
        if (!setup && im->o->doc_separator)
            cJSON_AddStringToObject(m, "doc_separator", im->o->doc_separator);
        *meta = st ? NULL : cJSON_PrintUnformatted(m);
        if (!st && !*meta) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(m);
    free(data);
    free(path);
    if (!st)
        dt_import_note(im, "tokenizer %s, vocabulary %" PRId64, dt_tokenizer_describe(s->tok),
                       dt_tokenizer_vocab_size(s->tok));
    return st;
}

dt_status dt_sink_push(dt_doc_sink *s, int32_t id, uint8_t m) {
    if (s->ids.n == s->ids.cap) {
        int64_t c = s->ids.cap ? s->ids.cap * 2 : 1024;
        int32_t *p = realloc(s->ids.ids, (size_t)c * 4);
        if (!p) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        s->ids.ids = p, s->ids.cap = c;
    }
    if (s->has_mask && s->ids.n >= s->mask_cap) {
        int64_t c = s->ids.cap;
        uint8_t *q = realloc(s->mask, (size_t)c);
        if (!q) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        s->mask = q, s->mask_cap = c;
    }
    if (s->has_mask) s->mask[s->ids.n] = m;
    s->ids.ids[s->ids.n++] = id;
    return DT_OK;
}

dt_status dt_sink_text(dt_doc_sink *s, const char *text, size_t len, uint8_t m) {
    int64_t before = s->ids.n;
    /* text after the document's first tokens continues its string (a special token before it) */
    dt_status st = dt_tokenizer_encode(s->tok, text, len, before ? DT_TOK_CONTINUED : 0, &s->ids);
    if (st) return st;
    if (s->has_mask) {
        if (s->mask_cap < s->ids.cap) {
            uint8_t *q = realloc(s->mask, (size_t)s->ids.cap);
            if (!q) return dt_error_set(DT_ERR_NOMEM, "out of memory");
            s->mask = q, s->mask_cap = s->ids.cap;
        }
        memset(s->mask + before, m, (size_t)(s->ids.n - before));
    }
    return DT_OK;
}

dt_status dt_sink_end_doc(dt_doc_sink *s) {
    int64_t n = s->ids.n;
    if (s->n_tok + n > s->cap_tok) {
        int64_t c = s->cap_tok ? s->cap_tok : 1 << 16;
        while (c < s->n_tok + n) c *= 2;
        uint32_t *t = realloc(s->all_tok, (size_t)c * 4);
        if (t) s->all_tok = t;
        uint8_t *m = s->has_mask ? realloc(s->all_mask, (size_t)c) : NULL;
        if (m) s->all_mask = m;
        if (!t || (s->has_mask && !m))
            return dt_error_set(DT_ERR_NOMEM, "out of memory for %" PRId64 " tokens", c);
        s->cap_tok = c;
    }
    if (s->n_doc == s->cap_doc) {
        int64_t c = s->cap_doc ? s->cap_doc * 2 : 1024;
        int64_t *e = realloc(s->doc_end, (size_t)c * 8);
        if (!e) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        s->doc_end = e, s->cap_doc = c;
    }
    for (int64_t i = 0; i < n; i++) s->all_tok[s->n_tok + i] = (uint32_t)s->ids.ids[i];
    if (s->has_mask) memcpy(s->all_mask + s->n_tok, s->mask, (size_t)n);
    s->n_tok += n;
    s->doc_end[s->n_doc++] = s->n_tok;
    s->ids.n = 0;
    return DT_OK;
}

static void sink_free(dt_doc_sink *s) {
    dt_tokenizer_free(s->tok);
    dt_tokens_free(&s->ids);
    free(s->mask);
    free(s->all_tok);
    free(s->all_mask);
    free(s->doc_end);
}

/* Writes the buffered documents into train (and val) splits. */
static dt_status sink_write(dt_import *im, dt_doc_sink *s, const char *meta) {
    int64_t n = s->n_doc;
    if (im->o->max_records > 0 && n > im->o->max_records) n = im->o->max_records;
    if (s->skipped)
        dt_import_note(im, "%" PRId64 " malformed records skipped (--strict refuses them)",
                       s->skipped);
    if (n == 0 && s->skipped)
        return dt_error_set(DT_ERR_FORMAT,
                            "import %s: no documents in the input (%" PRId64
                            " malformed records skipped, the first: %s)",
                            im->kind, s->skipped, s->first_skip);
    if (n == 0)
        return dt_error_set(DT_ERR_FORMAT, "import %s: no documents in the input", im->kind);
    dt_dataset_spec spec = {.kind = DT_DATA_TOKENS,
                            .vocab_size = dt_tokenizer_vocab_size(s->tok),
                            .has_mask = s->has_mask,
                            .eot_id = s->eot,
                            .pad_id = s->eot,
                            .name = im->kind,
                            .extra_json = meta};
    int32_t pad = dt_tokenizer_special_id(s->tok, "<|finetune_right_pad_id|>");
    if (pad >= 0) spec.pad_id = pad;
    dt_dataset_writer *wt = NULL, *wv = NULL;
    uint8_t *val = NULL;
    dt_status st = dt_import_writer(im, "train", &spec, &wt);
    if (!st && im->o->val_fraction > 0) {
        val = dt_import_val_mask(n, im->o->val_fraction, im->o->seed);
        st = val ? dt_import_writer(im, "val", &spec, &wv) : DT_ERR_NOMEM;
    }
    int64_t nv = 0;
    for (int64_t d = 0; !st && d < n; d++) {
        int64_t a = d ? s->doc_end[d - 1] : 0, b = s->doc_end[d];
        int v = val && val[d];
        nv += v;
        st = dt_dataset_writer_add_doc(v ? wv : wt, s->all_tok + a,
                                       s->has_mask ? s->all_mask + a : NULL, b - a);
    }
    if (!st)
        dt_import_note(
            im, "%" PRId64 " documents, %" PRId64 " tokens -> train %" PRId64 ", val %" PRId64, n,
            s->doc_end[n - 1], n - nv, nv);
    free(val);
    return st;
}

static dt_status utf8_error(const char *path, const char *text, size_t len, size_t base_off) {
    size_t bad = dt_utf8_validate(text, len);
    if (bad == len) return DT_OK;
    int64_t line, col;
    dt_line_col(text, bad, &line, &col);
    return dt_error_set(DT_ERR_FORMAT,
                        "%s:%" PRId64 ":%" PRId64 ": invalid UTF-8 (byte offset %zu, "
                        "byte 0x%02x)",
                        path, line, col, base_off + bad, (uint8_t)text[bad]);
}

dt_status dt_import_files(dt_import *im, const char *const *srcs, int n, int mask, void *user,
                          dt_sink_setup_fn setup, dt_sink_file_fn file) {
    dt_strv files = {0};
    dt_doc_sink s = {.has_mask = mask, .user = user};
    char *meta = NULL;
    dt_status st = collect(im, srcs, n, &files);
    if (!st) st = load_tokenizer(im, &s, setup, &meta);
    for (int64_t f = 0; !st && f < files.n; f++) {
        uint8_t *data;
        size_t len;
        if ((st = dt_read_file(files.s[f], 0, &data, &len))) break;
        st = file(im, &s, files.s[f], (const char *)data, len);
        free(data);
    }
    if (!st) st = sink_write(im, &s, meta);
    free(meta);
    sink_free(&s);
    dt_strv_free(&files);
    return st;
}

/* ---- text ---- */

static dt_status text_doc(dt_doc_sink *s, const char *text, size_t len) {
    size_t i = 0;
    while (i < len && (text[i] == '\n' || text[i] == '\r')) i++; /* blank lines between docs */
    if (i == len) return DT_OK;
    dt_status st = DT_OK;
    if (s->bos >= 0) st = dt_sink_push(s, s->bos, 1);
    if (!st) st = dt_sink_text(s, text, len, 1);
    if (!st && s->eot >= 0) st = dt_sink_push(s, s->eot, 1);
    if (!st) st = dt_sink_end_doc(s);
    return st;
}

static dt_status text_file(dt_import *im, dt_doc_sink *s, const char *path, const char *t,
                           size_t len) {
    const char *sep = im->o->doc_separator;
    size_t sl = sep ? strlen(sep) : 0;
    dt_status st = utf8_error(path, t, len, 0);
    if (!st && !sep) st = text_doc(s, t, len);
    /* Documents end at lines equal to the separator (fortune files use "%"). */
    size_t start = 0;
    for (size_t i = 0; !st && sep && i <= len;) {
        size_t e = i;
        while (e < len && t[e] != '\n') e++;
        size_t le = e > i && t[e - 1] == '\r' ? e - 1 : e;
        int is_sep = le - i == sl && !memcmp(t + i, sep, sl);
        if (is_sep || e >= len) {
            size_t end = is_sep ? i : len;
            st = text_doc(s, t + start, end - start);
            start = e + 1;
        }
        i = e + 1;
    }
    return st;
}

dt_status dt_import_text(dt_import *im, const char *const *srcs, int n) {
    return dt_import_files(im, srcs, n, 0, NULL, NULL, text_file);
}
