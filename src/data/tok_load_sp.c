/* The SentencePiece-style parts of a tokenizer.json (Llama 2, Mistral, Gemma): normalizer
 * Prepend / Replace (or a Sequence of them), pre-tokenizer Metaspace, decoders Replace,
 * ByteFallback, Fuse, Strip, Metaspace. What changes the text otherwise (NFKC, Lowercase, a
 * Regex pattern, ...) is refused, naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/tok_json.h"
#include "core/json.h"

static dt_status str_field(const cJSON *o, const char *k, const char *path, const char *field,
                           const char **out) {
    const cJSON *v = dt_tok_json_get(o, k);
    char w[64];
    if (!cJSON_IsString(v))
        return dt_error_set(DT_ERR_FORMAT, "%s: %s.%s is %s; it must be a string", path, field, k,
                            dt_json_what(v, w, sizeof w));
    *out = v->valuestring;
    return DT_OK;
}

/* Replace's pattern: {"String": s}; a Regex is refused. */
static dt_status literal_pattern(const cJSON *c, const char *path, const char *field,
                                 const char **out) {
    const cJSON *p = dt_tok_json_get(c, "pattern"), *s = dt_tok_json_get(p, "String");
    char w[64];
    if (dt_tok_json_get(p, "Regex"))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: %s.pattern Regex is not supported (a {\"String\": ...} is)", path,
                            field);
    if (!cJSON_IsString(s) || !*s->valuestring)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: %s.pattern is %s; it must be {\"String\": non-empty string}", path,
                            field, dt_json_what(p, w, sizeof w));
    *out = s->valuestring;
    return DT_OK;
}

static dt_status add_norm(dt_tokenizer *t, const char *from, const char *to, const char *path,
                          const char *field) {
    if (t->n_norm == TOK_MAX_NORM)
        return dt_error_set(DT_ERR_FORMAT, "%s: %s: more than %d normalizer steps", path, field,
                            TOK_MAX_NORM);
    tok_norm *n = &t->norm[t->n_norm];
    n->from = from ? strdup(from) : NULL;
    n->to = strdup(to);
    if ((from && !n->from) || !n->to) {
        free(n->from), free(n->to);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    n->nf = from ? strlen(from) : 0, n->nt = strlen(to);
    t->n_norm++;
    return DT_OK;
}

static dt_status norm_fn(void *t, const cJSON *n, const char *path, const char *field) {
    return dt_tok_sp_normalizer(t, n, path, field);
}

dt_status dt_tok_sp_normalizer(dt_tokenizer *t, const cJSON *n, const char *path,
                               const char *field) {
    if (!n || cJSON_IsNull(n)) return DT_OK;
    const char *ty = dt_tok_json_type(path, n, field), *a, *b;
    if (!ty) return DT_ERR_FORMAT;
    dt_status st;
    if (!strcmp(ty, "Sequence"))
        return dt_tok_json_each(n, "normalizers", "normalizers", path, field, norm_fn, t);
    if (!strcmp(ty, "Prepend")) {
        if ((st = str_field(n, "prepend", path, field, &b))) return st;
        return *b ? add_norm(t, NULL, b, path, field) : DT_OK;
    }
    if (!strcmp(ty, "Replace")) {
        if ((st = literal_pattern(n, path, field, &a)) ||
            (st = str_field(n, "content", path, field, &b)))
            return st;
        return add_norm(t, a, b, path, field);
    }
    return dt_error_set(DT_ERR_FORMAT,
                        "%s: %s type \"%.40s\" is not supported (Prepend, Replace with a String "
                        "pattern, Sequence of those; no Unicode normalization such as NFKC)",
                        path, field, ty);
}

static dt_status pretok_fn(void *t, const cJSON *pt, const char *path, const char *field) {
    return dt_tok_sp_pretok(t, pt, path, field);
}

dt_status dt_tok_sp_pretok(dt_tokenizer *t, const cJSON *pt, const char *path, const char *field) {
    if (!pt || cJSON_IsNull(pt)) return DT_OK;
    const char *ty = dt_tok_json_type(path, pt, field), *rep;
    if (!ty) return DT_ERR_FORMAT;
    dt_status st;
    if (!strcmp(ty, "Sequence"))
        return dt_tok_json_each(pt, "pretokenizers", "pre-tokenizers", path, field, pretok_fn, t);
    if (strcmp(ty, "Metaspace"))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: %s type \"%.40s\" is not supported with a SentencePiece-style "
                            "model (Metaspace or null is)",
                            path, field, ty);
    if (t->meta)
        return dt_error_set(DT_ERR_FORMAT, "%s: %s: a second Metaspace is not supported", path,
                            field);
    if ((st = str_field(pt, "replacement", path, field, &rep))) return st;
    size_t rl = strlen(rep);
    if (rl == 0 || rl >= sizeof t->meta_rep || dt_utf8_validate(rep, rl) != rl ||
        (rl > 1 && (uint8_t)rep[0] < 0xC0) || ((uint8_t)rep[0] >= 0x80 && rl == 1))
        return dt_error_set(DT_ERR_FORMAT, "%s: %s.replacement \"%.16s\" is not one character",
                            path, field, rep);
    if ((st = dt_tok_json_opt(path, pt, field, "split", cJSON_IsBool, "a boolean")) ||
        (st = dt_tok_json_opt(path, pt, field, "add_prefix_space", cJSON_IsBool, "a boolean")) ||
        (st = dt_tok_json_opt(path, pt, field, "prepend_scheme", cJSON_IsString, "a string")))
        return st;
    const cJSON *ps = dt_tok_json_get(pt, "prepend_scheme"), *sp = dt_tok_json_get(pt, "split");
    if (cJSON_IsString(ps)) {
        const char *s = ps->valuestring;
        t->meta = !strcmp(s, "always")  ? TOK_META_ALWAYS
                  : !strcmp(s, "first") ? TOK_META_FIRST
                  : !strcmp(s, "never") ? TOK_META_NEVER
                                        : 0;
        if (!t->meta)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s.prepend_scheme \"%.40s\" is not always, first or never",
                                path, field, s);
    } else { /* files of tokenizers < 0.14: add_prefix_space */
        const cJSON *ap = dt_tok_json_get(pt, "add_prefix_space");
        t->meta = ap && cJSON_IsFalse(ap) ? TOK_META_NEVER : TOK_META_ALWAYS;
    }
    t->meta_split = !cJSON_IsFalse(sp); /* the library's default: true */
    memcpy(t->meta_rep, rep, rl + 1);
    t->meta_rep_len = rl;
    return DT_OK;
}

/* Decoder steps applied to each token's text, in order. */
enum { DEC_REPLACE = 1, DEC_BYTES, DEC_META };
typedef struct dec_step {
    int kind;
    const char *from, *to; /* DEC_REPLACE; DEC_META: from = replacement */
} dec_step;

enum { MAX_DEC = 8 };

typedef struct dec_ctx {
    dt_tokenizer *t;
    dec_step *steps;
    int *n, *fused;
} dec_ctx;

static dt_status parse_decoder(dt_tokenizer *t, const cJSON *d, const char *path, const char *field,
                               dec_step *steps, int *n, int *fused);
static dt_status decoder_fn(void *ctx, const cJSON *d, const char *path, const char *field) {
    dec_ctx *c = ctx;
    return parse_decoder(c->t, d, path, field, c->steps, c->n, c->fused);
}

static dt_status parse_decoder(dt_tokenizer *t, const cJSON *d, const char *path, const char *field,
                               dec_step *steps, int *n, int *fused) {
    if (!d || cJSON_IsNull(d)) return DT_OK;
    const char *ty = dt_tok_json_type(path, d, field);
    if (!ty) return DT_ERR_FORMAT;
    dt_status st;
    if (!strcmp(ty, "Sequence")) {
        dec_ctx c = {t, steps, n, fused};
        return dt_tok_json_each(d, "decoders", "decoders", path, field, decoder_fn, &c);
    }
    if (!strcmp(ty, "Fuse")) {
        *fused = 1;
        return DT_OK;
    }
    if (!strcmp(ty, "Strip")) {
        const char *c;
        const cJSON *a = dt_tok_json_get(d, "start"), *b = dt_tok_json_get(d, "stop");
        if ((st = str_field(d, "content", path, field, &c))) return st;
        if (strlen(c) != 1 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 ||
            b->valuedouble < 0 || a->valuedouble > 64 || b->valuedouble > 64)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s must have an ASCII content and start, stop counts "
                                "in [0, 64]",
                                path, field);
        /* before Fuse it would cut every token's ends: not what these families publish */
        if (!*fused)
            return dt_error_set(DT_ERR_FORMAT, "%s: %s before a Fuse decoder is not supported",
                                path, field);
        t->strip_c = c[0], t->strip_start = (int)a->valuedouble,
        t->strip_stop = (int)b->valuedouble;
        return DT_OK;
    }
    if (*fused)
        return dt_error_set(DT_ERR_FORMAT, "%s: %s type \"%.40s\" after Fuse is not supported",
                            path, field, ty);
    if (*n == MAX_DEC)
        return dt_error_set(DT_ERR_FORMAT, "%s: %s: more than %d decoders", path, field, MAX_DEC);
    if (!strcmp(ty, "Replace")) {
        const char *a, *b;
        if ((st = literal_pattern(d, path, field, &a)) ||
            (st = str_field(d, "content", path, field, &b)))
            return st;
        steps[(*n)++] = (dec_step){DEC_REPLACE, a, b};
        return DT_OK;
    }
    if (!strcmp(ty, "ByteFallback")) {
        steps[(*n)++] = (dec_step){DEC_BYTES, NULL, NULL};
        return DT_OK;
    }
    if (!strcmp(ty, "Metaspace")) {
        const char *rep;
        if ((st = str_field(d, "replacement", path, field, &rep))) return st;
        if (!*rep) /* an empty pattern would match between every two bytes */
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s.replacement is empty; it must be one character", path,
                                field);
        const cJSON *ps = dt_tok_json_get(d, "prepend_scheme"),
                    *ap = dt_tok_json_get(d, "add_prefix_space");
        t->dec_meta_first =
            cJSON_IsString(ps) ? strcmp(ps->valuestring, "never") != 0 : !(ap && cJSON_IsFalse(ap));
        steps[(*n)++] = (dec_step){DEC_META, rep, " "};
        return DT_OK;
    }
    return dt_error_set(DT_ERR_FORMAT,
                        "%s: %s type \"%.40s\" is not supported with a SentencePiece-style model "
                        "(Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence are)",
                        path, field, ty);
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* "<0xNN>" (upper-case hex, as the library writes it): the byte, else -1. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int h = hexv(s[3]), l = hexv(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

/* s[0, n) with every `from` replaced by `to`, into *buf (grown). `from` is never empty (the
 * parsers refuse that): each match consumes >= 1 byte, so the output is at most n * max(nt, 1). */
static dt_status step_replace(char **buf, size_t *cap, size_t *n, const char *from,
                              const char *to) {
    size_t nf = strlen(from), nt = strlen(to), need = *n * (nt > nf ? nt : 1) + 1;
    if (!nf) return DT_OK;
    char *o = malloc(need);
    if (!o) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
    size_t w = 0;
    for (size_t i = 0; i < *n;) {
        if (i + nf <= *n && !memcmp(*buf + i, from, nf))
            memcpy(o + w, to, nt), w += nt, i += nf;
        else
            o[w++] = (*buf)[i++];
    }
    free(*buf);
    *buf = o, *cap = need, *n = w;
    return DT_OK;
}

/* Appends s[0, n) to the decoded blob at pos. */
static dt_status add_decoded(dt_tokenizer *t, size_t pos, const char *s, size_t n, size_t *cap) {
    if (pos + n + 1 > *cap || !t->dblob) {
        size_t c = *cap ? *cap : 1 << 20;
        while (c < pos + n + 1) c *= 2;
        char *b = realloc(t->dblob, c);
        if (!b) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
        t->dblob = b, *cap = c;
    }
    memcpy(t->dblob + pos, s, n);
    return DT_OK;
}

dt_status dt_tok_sp_decoder(dt_tokenizer *t, const cJSON *d, const char *path) {
    dec_step steps[MAX_DEC];
    int n = 0, fused = 0;
    dt_status st = parse_decoder(t, d, path, "decoder", steps, &n, &fused);
    if (st) return st;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->fb_id[b] = dt_tok_lookup(t, name, 6);
    }
    /* each id's decoded text, in a blob of its own */
    t->dec_off = malloc((size_t)t->n_ids * sizeof *t->dec_off);
    t->dec_len = malloc((size_t)t->n_ids * sizeof *t->dec_len);
    if (!t->dec_off || !t->dec_len) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    size_t pos = 0, dcap = 0, cap = 0;
    char *buf = NULL;
    for (int64_t id = 0; id < t->n_ids && !st; id++) {
        t->dec_len[id] = 0, t->dec_off[id] = (uint32_t)pos;
        if (t->tok_len[id] == UINT32_MAX) continue;
        size_t len = t->tok_len[id];
        char *nb = malloc(len + 1);
        if (!nb) {
            st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        free(buf);
        buf = nb, cap = len + 1;
        memcpy(buf, t->blob + t->tok_off[id], len);
        for (int k = 0; k < n && !st; k++) {
            int byte = steps[k].kind == DEC_BYTES ? byte_token(buf, len) : -1;
            if (byte >= 0)
                buf[0] = (char)byte, len = 1;
            else if (steps[k].kind != DEC_BYTES)
                st = step_replace(&buf, &cap, &len, steps[k].from, steps[k].to);
        }
        if (st) break;
        if (pos + len > UINT32_MAX) {
            st = dt_error_set(DT_ERR_RANGE, "%s: decoded vocabulary over 4 GiB", path);
            break;
        }
        if ((st = add_decoded(t, pos, buf, len, &dcap))) break;
        t->dec_len[id] = (uint32_t)len;
        pos += len;
    }
    free(buf);
    return st;
}
