/* Tokenizer files: tiktoken rank files (+ optional <stem>.json) and Hugging Face
 * tokenizer.json (byte-level BPE). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/tok.h"
#include "data/tok_json.h"
#include "core/file.h"
#include "core/json.h"

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (RFC 4648 section 4) with padding; returns the decoded length, -1 if it is
 * not base64, -2 if the bits a padded last group leaves over are not zero (then another
 * spelling of the same bytes exists, and the rule that tokens are unique could be dodged). */
static int64_t b64_decode(const char *s, size_t n, char *out) {
    if (n % 4) return -1;
    int64_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0, pad++;
            } else {
                if (pad) return -1;
                v[k] = b64_val((uint8_t)s[i + k]);
                if (v[k] < 0) return -1;
            }
        }
        if ((pad == 2 && (v[1] & 15)) || (pad == 1 && (v[2] & 3))) return -2;
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (char)(w >> 16);
        if (pad < 2) out[o++] = (char)(w >> 8);
        if (pad < 1) out[o++] = (char)w;
    }
    return o;
}

/* One line of a rank file, s[0, n) without its line end: "<base64 token> <rank>", one space,
 * the rank in decimal digits (tiktoken's load_tiktoken_bpe writes exactly this). 0 and the
 * token in tok (*bl bytes) and *rank, or -1 with the rule broken in why. */
static int rank_line(const char *s, size_t n, char *tok, size_t cap, int64_t *bl, int64_t *rank,
                     char *why, size_t nw) {
    const char *sp = memchr(s, ' ', n);
    if (!sp) {
        snprintf(why, nw, "no space: expected \"<base64 token> <rank>\"");
        return -1;
    }
    size_t tl = (size_t)(sp - s), rl = n - tl - 1;
    *bl = tl <= 4 * (cap / 3) ? b64_decode(s, tl, tok) : -1;
    if (*bl == -2) {
        snprintf(why, nw, "token \"%.*s\" is not canonical base64 (non-zero padding bits)",
                 (int)(tl < 64 ? tl : 64), s);
        return -1;
    }
    if (*bl <= 0) {
        snprintf(why, nw,
                 "token \"%.*s\" is not base64 of 1 to %zu bytes (expected \"<base64 "
                 "token> <rank>\")",
                 (int)(tl < 64 ? tl : 64), s, cap);
        return -1;
    }
    int64_t r = 0;
    for (size_t k = 0; k < rl && r <= INT32_MAX; k++)
        r = sp[1 + k] >= '0' && sp[1 + k] <= '9' ? r * 10 + (sp[1 + k] - '0') : INT64_MAX;
    if (rl == 0 || r == INT64_MAX) {
        snprintf(why, nw, "rank \"%.*s\" is not a decimal integer (digits only, one space before)",
                 (int)(rl < 32 ? rl : 32), sp + 1);
        return -1;
    }
    if (r > INT32_MAX - 1024) {
        snprintf(why, nw, "rank %.*s is too large (ranks are token ids, below 2^31)",
                 (int)(rl < 32 ? rl : 32), sp + 1);
        return -1;
    }
    *rank = r;
    return 0;
}

static dt_status read_ranks(dt_tokenizer *t, const char *path, int64_t *n_ranks) {
    uint8_t *data;
    size_t len;
    dt_status st =
        dt_read_file_max(path, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &data, &len);
    if (st) return st;
    dt_tok_limit_ids(t, len);
    const char *s = (const char *)data;
    int64_t line = 0, n = 0;
    char tok[1024], why[256];
    for (size_t i = 0; i < len && !st;) {
        line++;
        size_t e = i;
        while (e < len && s[e] != '\n') e++;
        size_t le = e;
        if (le > i && s[le - 1] == '\r') le--;
        if (le > i) {
            int64_t bl, r;
            if (rank_line(s + i, le - i, tok, sizeof tok, &bl, &r, why, sizeof why))
                st = dt_error_set(DT_ERR_FORMAT, "%s:%" PRId64 ": %s", path, line, why);
            else if ((st = dt_tok_set_token(t, (int32_t)r, tok, (size_t)bl))) {
                /* "id N is used twice", "token id N is too large (...)" */
                snprintf(why, sizeof why, "%s", dt_last_error());
                st = dt_error_set(st, "%s:%" PRId64 ": rank %" PRId64 ": %s", path, line, r, why);
            }
            n++;
        }
        i = e + 1;
    }
    free(data);
    if (!st && n == 0) st = dt_error_set(DT_ERR_FORMAT, "%s: no ranks in the file", path);
    *n_ranks = n;
    return st;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static dt_status finish_tiktoken(dt_tokenizer *t, const char *path) {
    dt_status st = dt_tok_index(t, path);
    if (st) return st;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: no rank for the single byte 0x%02x (a byte-level "
                                "rank file has all 256)",
                                path, b);
    return dt_tok_pairs_from_ranks(t);
}

dt_status dt_tokenizer_load_tiktoken(const char *rank_file, const char *pattern,
                                     dt_tokenizer **out) {
    *out = NULL;
    dt_tokenizer *t = dt_tok_init(TOK_TIKTOKEN);
    if (!t) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    t->ignore_merges = 1; /* tiktoken emits a piece that is a token without merging */
    int64_t n;
    dt_status st = read_ranks(t, rank_file, &n);
    if (!st) st = finish_tiktoken(t, rank_file);
    if (!st) st = dt_tok_add_stage(t, pattern ? pattern : DT_TOK_PATTERN_CL100K, 0, 0, rank_file);
    if (st) {
        dt_tokenizer_free(t);
        return st;
    }
    snprintf(t->desc, sizeof t->desc, "tiktoken %s (%" PRId64 " ranks)", base_name(rank_file), n);
    *out = t;
    return DT_OK;
}

/* A token id as JSON holds it: an integer (2.5 is not one) in [0, 2^31); the tables' own limit
 * (dt_tok_limit_ids) is checked where the id is set. */
static int is_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= INT32_MAX &&
           v->valuedouble == (double)(int32_t)v->valuedouble;
}

/* Llama 3.1's 256 special tokens, from id 128000 (its tokenizer.py). */
static dt_status add_llama3_specials(dt_tokenizer *t, int32_t base) {
    static const char *named[] = {"<|begin_of_text|>",
                                  "<|end_of_text|>",
                                  "<|reserved_special_token_0|>",
                                  "<|reserved_special_token_1|>",
                                  "<|finetune_right_pad_id|>",
                                  "<|step_id|>",
                                  "<|start_header_id|>",
                                  "<|end_header_id|>",
                                  "<|eom_id|>",
                                  "<|eot_id|>",
                                  "<|python_tag|>"};
    char buf[64];
    for (int i = 0; i < 256; i++) {
        const char *s = named[i < 11 ? i : 0];
        if (i >= 11) {
            snprintf(buf, sizeof buf, "<|reserved_special_token_%d|>", i - 11 + 2);
            s = buf;
        }
        dt_status st = dt_tokenizer_add_special(t, s, base + i);
        if (st) return st;
    }
    return DT_OK;
}

/* "<stem>.json" beside a rank file: {"pat_str": ..., "special_tokens": {text: id}}. */
static dt_status load_tiktoken_meta(const char *rank_file, dt_tokenizer **out) {
    size_t n = strlen(rank_file);
    const char *dot = strrchr(rank_file, '.');
    const char *slash = strrchr(rank_file, '/');
    size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - rank_file) : n;
    char *meta = malloc(stem + 6);
    if (!meta) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    memcpy(meta, rank_file, stem);
    memcpy(meta + stem, ".json", 6);
    if (!dt_path_exists(meta)) {
        free(meta);
        dt_status st = dt_tokenizer_load_tiktoken(rank_file, NULL, out);
        if (!st && dt_tokenizer_vocab_size(*out) == 128000) {
            if ((st = add_llama3_specials(*out, 128000))) {
                dt_tokenizer_free(*out);
                *out = NULL;
            } else {
                snprintf((*out)->desc, sizeof(*out)->desc,
                         "tiktoken %s (128000 ranks, Llama 3 special tokens)",
                         base_name(rank_file));
            }
        }
        return st;
    }
    uint8_t *txt = NULL;
    size_t len = 0;
    dt_status st =
        dt_read_file_max(meta, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &txt, &len);
    cJSON *root = st ? NULL : dt_json_parse_strict(meta, (const char *)txt, len, &st);
    char w[64];
    if (!st && !cJSON_IsObject(root))
        st = dt_error_set(DT_ERR_FORMAT, "%s: the file is %s; it must be a JSON object", meta,
                          dt_json_what(root, w, sizeof w));
    const cJSON *pat = dt_tok_json_get(root, "pat_str"),
                *sp = dt_tok_json_get(root, "special_tokens"), *nm = dt_tok_json_get(root, "name");
    if (!st && pat && !cJSON_IsString(pat))
        st = dt_error_set(DT_ERR_FORMAT, "%s: pat_str is %s; it must be a string (a regex)", meta,
                          dt_json_what(pat, w, sizeof w));
    if (!st && sp && !cJSON_IsObject(sp))
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: special_tokens is %s; it must be an object of text: id", meta,
                          dt_json_what(sp, w, sizeof w));
    if (!st && nm && !cJSON_IsString(nm))
        st = dt_error_set(DT_ERR_FORMAT, "%s: name is %s; it must be a string", meta,
                          dt_json_what(nm, w, sizeof w));
    if (!st) st = dt_tokenizer_load_tiktoken(rank_file, pat ? pat->valuestring : NULL, out);
    for (const cJSON *e = sp ? sp->child : NULL; !st && e; e = e->next) {
        if (!is_id(e))
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: special_tokens.%s is %s; it must be a non-negative integer id",
                              meta, e->string, dt_json_what(e, w, sizeof w));
        else if ((st = dt_tokenizer_add_special(*out, e->string, (int32_t)e->valuedouble))) {
            char why[256];
            snprintf(why, sizeof why, "%s", dt_last_error());
            st = dt_error_set(st, "%s: special_tokens.%s: %s", meta, e->string, why);
        }
    }
    if (!st) {
        snprintf((*out)->desc, sizeof(*out)->desc, "tiktoken %s (%s, %d special tokens)",
                 base_name(rank_file), cJSON_IsString(nm) ? nm->valuestring : "?", (*out)->n_sp);
    }
    if (st && *out) {
        dt_tokenizer_free(*out);
        *out = NULL;
    }
    cJSON_Delete(root);
    free(txt);
    free(meta);
    return st;
}

/* ---- Hugging Face tokenizer.json ---- */

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256 + k. */
static void byte_unicode_table(int32_t cp_to_byte[512]) {
    for (int i = 0; i < 512; i++) cp_to_byte[i] = -1;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (printable)
            cp_to_byte[b] = b;
        else
            cp_to_byte[256 + k++] = b;
    }
}

/* Decodes a byte-level vocabulary string (UTF-8 of mapped code points) into raw bytes. */
static int64_t bytelevel_decode(const char *s, const int32_t *cp_to_byte, char *out, size_t cap) {
    if (!cp_to_byte) { /* SentencePiece-style: the token is its UTF-8 text */
        size_t n = strlen(s);
        if (n > cap) return -1;
        memcpy(out, s, n);
        return (int64_t)n;
    }
    const uint8_t *p = (const uint8_t *)s;
    size_t o = 0;
    while (*p) {
        uint32_t cp;
        if (*p < 0x80)
            cp = *p++;
        else if ((*p & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80)
            cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F), p += 2;
        else
            return -1;
        if (cp >= 512 || cp_to_byte[cp] < 0 || o >= cap) return -1;
        out[o++] = (char)cp_to_byte[cp];
    }
    return (int64_t)o;
}

/* An optional member: absent, null, or what is(v) accepts; else one line naming the field. */
dt_status dt_tok_json_opt(const char *path, const cJSON *o, const char *field, const char *key,
                          cJSON_bool (*is)(const cJSON *), const char *want) {
    const cJSON *v = dt_tok_json_get(o, key);
    if (!v || cJSON_IsNull(v) || is(v)) return DT_OK;
    char w[64];
    return dt_error_set(DT_ERR_FORMAT, "%s: %s%s%s is %s; it must be %s or null", path, field,
                        *field ? "." : "", key, dt_json_what(v, w, sizeof w), want);
}

/* A "type"d component (normalizer, pre_tokenizer, decoder): its type string, or NULL with the
 * error set (field names it: "pre_tokenizer.pretokenizers[1]"). */
const char *dt_tok_json_type(const char *path, const cJSON *c, const char *field) {
    const cJSON *type = dt_tok_json_get(c, "type");
    char w[64];
    if (!cJSON_IsObject(c))
        dt_error_set(DT_ERR_FORMAT, "%s: %s is %s; it must be null or an object with a \"type\"",
                     path, field, dt_json_what(c, w, sizeof w));
    else if (!cJSON_IsString(type))
        dt_error_set(DT_ERR_FORMAT, "%s: %s.type is %s; it must be a string", path, field,
                     dt_json_what(type, w, sizeof w));
    else
        return type->valuestring;
    return NULL;
}

dt_status dt_tok_json_each(const cJSON *seq, const char *key, const char *what, const char *path,
                           const char *field, dt_tok_json_fn fn, void *ctx) {
    const cJSON *list = dt_tok_json_get(seq, key), *e;
    char w[64];
    if (!cJSON_IsArray(list))
        return dt_error_set(DT_ERR_FORMAT, "%s: %s.%s is %s; a Sequence needs a list of %s", path,
                            field, key, dt_json_what(list, w, sizeof w), what);
    int i = 0;
    cJSON_ArrayForEach(e, list) {
        char sub[200];
        snprintf(sub, sizeof sub, "%.150s.%s[%d]", field, key, i++);
        dt_status st = fn(ctx, e, path, sub);
        if (st) return st;
    }
    return DT_OK;
}

static dt_status add_pretok(dt_tokenizer *t, const cJSON *pt, const char *path, const char *field);
static dt_status add_pretok_fn(void *t, const cJSON *pt, const char *path, const char *field) {
    return add_pretok(t, pt, path, field);
}

static dt_status add_pretok(dt_tokenizer *t, const cJSON *pt, const char *path, const char *field) {
    const char *ty = dt_tok_json_type(path, pt, field);
    if (!ty) return DT_ERR_FORMAT;
    dt_status st;
    char w[64];
    if (!strcmp(ty, "Sequence"))
        return dt_tok_json_each(pt, "pretokenizers", "pre-tokenizers", path, field, add_pretok_fn,
                                t);
    if (!strcmp(ty, "ByteLevel")) {
        static const char *const bools[] = {"add_prefix_space", "use_regex", "trim_offsets"};
        for (int i = 0; i < 3; i++)
            if ((st = dt_tok_json_opt(path, pt, field, bools[i], cJSON_IsBool, "a boolean")))
                return st;
        const cJSON *ur = dt_tok_json_get(pt, "use_regex"),
                    *ap = dt_tok_json_get(pt, "add_prefix_space");
        int use_regex = !ur || cJSON_IsTrue(ur), prefix = cJSON_IsTrue(ap);
        if (!use_regex && !prefix) return DT_OK; /* only the byte mapping, which is implicit */
        /* A prefix space without a regex: a stage matching everything. */
        return dt_tok_add_stage(t, use_regex ? DT_TOK_PATTERN_GPT2 : "(?s).+", 1, prefix, path);
    }
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = dt_tok_json_get(pt, "pattern"), *beh = dt_tok_json_get(pt, "behavior");
        const cJSON *re = dt_tok_json_get(pat, "Regex"), *str = dt_tok_json_get(pat, "String");
        if ((st = dt_tok_json_opt(path, pt, field, "invert", cJSON_IsBool, "a boolean"))) return st;
        if (!cJSON_IsString(beh))
            return dt_error_set(DT_ERR_FORMAT, "%s: %s.behavior is %s; it must be a string", path,
                                field, dt_json_what(beh, w, sizeof w));
        if (strcmp(beh->valuestring, "Isolated"))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s.behavior \"%.40s\" is not supported (Isolated is)", path,
                                field, beh->valuestring);
        if (cJSON_IsTrue(dt_tok_json_get(pt, "invert")))
            return dt_error_set(DT_ERR_FORMAT, "%s: %s.invert true is not supported", path, field);
        if (!cJSON_IsObject(pat) || cJSON_GetArraySize(pat) != 1 ||
            !(cJSON_IsString(re) || cJSON_IsString(str)))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s.pattern is %s; it must be {\"Regex\": string} or "
                                "{\"String\": string}",
                                path, field, dt_json_what(pat, w, sizeof w));
        if (cJSON_IsString(re)) return dt_tok_add_stage(t, re->valuestring, 1, 0, path);
        /* a literal: quote it for PCRE2 */
        size_t n = strlen(str->valuestring);
        char *q = malloc(n + 5);
        if (!q) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        snprintf(q, n + 5, "\\Q%s\\E", str->valuestring);
        st = dt_tok_add_stage(t, q, 1, 0, path);
        free(q);
        return st;
    }
    return dt_error_set(DT_ERR_FORMAT,
                        "%s: %s type \"%.40s\" is not supported (ByteLevel, Split, Sequence are)",
                        path, field, ty);
}

/* The decoder turns ids back into text; dtrain decodes byte-level tokens to their bytes, which
 * is what ByteLevel does (null: the same, as dtrain has no other). */
static dt_status check_decoder(const cJSON *d, const char *path, const char *field);
static dt_status check_decoder_fn(void *ctx, const cJSON *d, const char *path, const char *field) {
    return check_decoder(d, path, field);
}

static dt_status check_decoder(const cJSON *d, const char *path, const char *field) {
    if (!d || cJSON_IsNull(d)) return DT_OK;
    const char *ty = dt_tok_json_type(path, d, field);
    if (!ty) return DT_ERR_FORMAT;
    if (!strcmp(ty, "ByteLevel")) return DT_OK;
    if (!strcmp(ty, "Sequence"))
        return dt_tok_json_each(d, "decoders", "decoders", path, field, check_decoder_fn, NULL);
    return dt_error_set(DT_ERR_FORMAT,
                        "%s: %s type \"%.40s\" is not supported (ByteLevel or null: dtrain "
                        "decodes byte-level BPE)",
                        path, field, ty);
}

static dt_status check_model_options(const cJSON *model, const char *path, int sp) {
    dt_status st;
    static const char *const strs[] = {"unk_token", "continuing_subword_prefix",
                                       "end_of_word_suffix"};
    static const char *const bools[] = {"fuse_unk", "byte_fallback", "ignore_merges"};
    for (int i = 0; i < 3; i++)
        if ((st = dt_tok_json_opt(path, model, "model", strs[i], cJSON_IsString, "a string")) ||
            (st = dt_tok_json_opt(path, model, "model", bools[i], cJSON_IsBool, "a boolean")))
            return st;
    if ((st = dt_tok_json_opt(path, model, "model", "dropout", cJSON_IsNumber, "a number")))
        return st;
    for (int i = 1; i < 3; i++) {
        const cJSON *v = dt_tok_json_get(model, strs[i]);
        if (cJSON_IsString(v) && *v->valuestring)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: model.%s \"%.40s\" is not supported (byte-level BPE has "
                                "none)",
                                path, strs[i], v->valuestring);
    }
    if (!sp && cJSON_IsTrue(dt_tok_json_get(model, "byte_fallback")))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model.byte_fallback true is not supported with a ByteLevel "
                            "pre-tokenizer (byte-level BPE has every byte)",
                            path);
    const cJSON *dr = dt_tok_json_get(model, "dropout");
    if (cJSON_IsNumber(dr) && !(dr->valuedouble >= 0 && dr->valuedouble <= 1))
        return dt_error_set(DT_ERR_FORMAT, "%s: model.dropout %g is outside [0, 1]", path,
                            dr->valuedouble);
    if (cJSON_IsNumber(dr) && dr->valuedouble != 0)
        return dt_error_set(DT_ERR_FORMAT, "%s: model.dropout %g is not supported (0 or null)",
                            path, dr->valuedouble);
    return DT_OK;
}

/* model.merges[rank]: "a b" (one space, two non-empty tokens) or ["a", "b"]; both and their
 * concatenation in model.vocab; a pair merged once (readers differ on a repeated pair's rank:
 * the Rust tokenizers' map keeps the last). */
static dt_status add_hf_merge(dt_tokenizer *t, const cJSON *e, int32_t rank,
                              const int32_t *cp_to_byte, const char *path) {
    const char *l, *r;
    char tmp[4096], lb[2048], rb[2048], w[64];
    if (cJSON_IsString(e)) {
        const char *sp = strchr(e->valuestring, ' ');
        size_t ln = sp ? (size_t)(sp - e->valuestring) : 0;
        if (!sp || !ln || !sp[1] || ln >= sizeof tmp || strchr(sp + 1, ' '))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: model.merges[%d] \"%.80s\" is not \"a b\" (two tokens, one "
                                "space between)",
                                path, rank, e->valuestring);
        memcpy(tmp, e->valuestring, ln);
        tmp[ln] = 0;
        l = tmp, r = sp + 1;
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
               cJSON_IsString(e->child->next)) {
        l = e->child->valuestring, r = e->child->next->valuestring;
    } else {
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model.merges[%d] is %s; it must be \"a b\" or [\"a\", \"b\"]",
                            path, rank, dt_json_what(e, w, sizeof w));
    }
    int64_t nl = bytelevel_decode(l, cp_to_byte, lb, sizeof lb / 2);
    int64_t nr = bytelevel_decode(r, cp_to_byte, rb, sizeof rb / 2);
    if (nl <= 0 || nr <= 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model.merges[%d]: \"%.40s\" or \"%.40s\" is empty or not "
                            "byte-level text",
                            path, rank, l, r);
    int32_t a = dt_tok_lookup(t, lb, (size_t)nl), b = dt_tok_lookup(t, rb, (size_t)nr);
    memcpy(lb + nl, rb, (size_t)nr);
    int32_t m = dt_tok_lookup(t, lb, (size_t)(nl + nr));
    if (a < 0 || b < 0 || m < 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model.merges[%d] (\"%.40s\" + \"%.40s\") uses or makes a token "
                            "that is not in model.vocab",
                            path, rank, l, r);
    dt_status st = dt_tok_add_merge(t, a, b, m, rank);
    if (st) {
        char why[256]; /* "the pair is merged twice (first at rank N)" */
        snprintf(why, sizeof why, "%s", dt_last_error());
        return dt_error_set(st, "%s: model.merges[%d] (\"%.40s\" + \"%.40s\"): %s", path, rank, l,
                            r, why);
    }
    return DT_OK;
}

static dt_status load_hf_model(dt_tokenizer *t, const cJSON *model, const char *path) {
    char w[64];
    if (!cJSON_IsObject(model))
        return dt_error_set(DT_ERR_FORMAT, "%s: model is %s; it must be an object (a BPE model)",
                            path, dt_json_what(model, w, sizeof w));
    const cJSON *type = dt_tok_json_get(model, "type");
    if (!cJSON_IsString(type))
        return dt_error_set(DT_ERR_FORMAT, "%s: model.type is %s; it must be \"BPE\"", path,
                            dt_json_what(type, w, sizeof w));
    if (strcmp(type->valuestring, "BPE"))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model.type \"%.40s\" is not supported (dtrain reads byte-level "
                            "\"BPE\" only)",
                            path, type->valuestring);
    dt_status st = check_model_options(model, path, t->spm);
    if (st) return st;
    t->ignore_merges = cJSON_IsTrue(dt_tok_json_get(model, "ignore_merges"));
    t->byte_fallback = cJSON_IsTrue(dt_tok_json_get(model, "byte_fallback"));
    t->fuse_unk = cJSON_IsTrue(dt_tok_json_get(model, "fuse_unk"));
    int32_t table[512], *cp_to_byte = t->spm ? NULL : table;
    byte_unicode_table(table);
    const cJSON *vocab = dt_tok_json_get(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model.vocab is %s; it must be an object of token: id", path,
                            dt_json_what(vocab, w, sizeof w));
    char buf[4096];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!is_id(e))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: model.vocab[\"%.64s\"] is %s; it must be a non-negative "
                                "integer id",
                                path, e->string, dt_json_what(e, w, sizeof w));
        int64_t n = bytelevel_decode(e->string, cp_to_byte, buf, sizeof buf);
        if (n <= 0)
            return dt_error_set(DT_ERR_FORMAT, "%s: model.vocab token \"%.64s\" is %s", path,
                                e->string,
                                n ? "not byte-level (GPT-2 byte-to-unicode) text"
                                  : "empty (a token is at least one byte)");
        if ((st = dt_tok_set_token(t, (int32_t)e->valuedouble, buf, (size_t)n))) {
            char why[256]; /* "id N is used twice", "token id N is too large (...)" */
            snprintf(why, sizeof why, "%s", dt_last_error());
            return dt_error_set(st, "%s: model.vocab[\"%.64s\"]: %s", path, e->string, why);
        }
    }
    if ((st = dt_tok_index(t, path))) return st;
    const cJSON *unk = dt_tok_json_get(model, "unk_token");
    if (cJSON_IsString(unk)) {
        int64_t n = bytelevel_decode(unk->valuestring, cp_to_byte, buf, sizeof buf);
        t->unk_id = n >= 0 ? dt_tok_lookup(t, buf, (size_t)n) : -1;
    }
    const cJSON *merges = dt_tok_json_get(model, "merges");
    if (!cJSON_IsArray(merges))
        return dt_error_set(DT_ERR_FORMAT, "%s: model.merges is %s; it must be a list", path,
                            dt_json_what(merges, w, sizeof w));
    if ((st = dt_tok_pairs_reserve(t, (uint64_t)cJSON_GetArraySize(merges)))) return st;
    int32_t rank = 0;
    for (const cJSON *e = merges->child; e; e = e->next, rank++)
        if ((st = add_hf_merge(t, e, rank, cp_to_byte, path))) return st;
    return DT_OK;
}

typedef struct added_key {
    const char *content;
    int32_t id;
    int index;
} added_key;

static int added_by_content(const void *a, const void *b) {
    const added_key *x = a, *y = b;
    int c = strcmp(x->content, y->content);
    return c ? c : x->index - y->index;
}

static int added_by_id(const void *a, const void *b) {
    const added_key *x = a, *y = b;
    return x->id != y->id ? (x->id > y->id) - (x->id < y->id) : x->index - y->index;
}

/* added_tokens: a list of {"id": integer, "content": non-empty string, and the booleans
 * special, single_word, lstrip, rstrip, normalized}; no content and no id twice (checked
 * sorted: n log n for a hostile list of 10^6). single_word, lstrip and rstrip change how the
 * text is matched and are not supported. */
static dt_status check_added(const cJSON *added, const char *path, int64_t id_limit) {
    char w[64];
    if (!added || cJSON_IsNull(added)) return DT_OK;
    if (!cJSON_IsArray(added))
        return dt_error_set(DT_ERR_FORMAT, "%s: added_tokens is %s; it must be a list", path,
                            dt_json_what(added, w, sizeof w));
    int n = cJSON_GetArraySize(added), i = 0;
    added_key *k = malloc(((size_t)n + 1) * sizeof *k);
    if (!k) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    dt_status st = DT_OK;
    char field[48];
    for (const cJSON *e = added->child; e && !st; e = e->next, i++) {
        const cJSON *id = dt_tok_json_get(e, "id"), *content = dt_tok_json_get(e, "content");
        snprintf(field, sizeof field, "added_tokens[%d]", i);
        static const char *const bools[] = {"special", "single_word", "lstrip", "rstrip",
                                            "normalized"};
        if (!cJSON_IsObject(e))
            st = dt_error_set(DT_ERR_FORMAT, "%s: %s is %s; it must be an object", path, field,
                              dt_json_what(e, w, sizeof w));
        else if (!cJSON_IsString(content) || !*content->valuestring)
            st = dt_error_set(DT_ERR_FORMAT, "%s: %s.content is %s; it must be a non-empty string",
                              path, field, dt_json_what(content, w, sizeof w));
        /* an id is an index into the id tables: checked before it is used as one */
        else if (!is_id(id) || id->valuedouble >= (double)id_limit)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: %s.id of \"%.64s\" is %s: not a token id (an integer in "
                              "[0, %" PRId64 "))",
                              path, field, content->valuestring, dt_json_what(id, w, sizeof w),
                              id_limit);
        for (int b = 0; b < 5 && !st; b++)
            st = dt_tok_json_opt(path, e, field, bools[b], cJSON_IsBool, "a boolean");
        for (int b = 1; b < 4 && !st; b++)
            if (cJSON_IsTrue(dt_tok_json_get(e, bools[b])))
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: %s.%s true is not supported (dtrain matches an added "
                                  "token's text exactly)",
                                  path, field, bools[b]);
        if (!st) k[i] = (added_key){content->valuestring, (int32_t)id->valuedouble, i};
    }
    for (int pass = 0; pass < 2 && !st; pass++) {
        qsort(k, (size_t)n, sizeof *k, pass ? added_by_id : added_by_content);
        for (int j = 1; j < n && !st; j++)
            if (pass ? k[j].id == k[j - 1].id : !strcmp(k[j].content, k[j - 1].content))
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: added_tokens[%d] (\"%.64s\", id %d) repeats the %s of "
                                  "added_tokens[%d] (\"%.64s\", id %d)",
                                  path, k[j].index, k[j].content, k[j].id, pass ? "id" : "content",
                                  k[j - 1].index, k[j - 1].content, k[j - 1].id);
    }
    free(k);
    return st;
}

/* Registers the (checked) added tokens. One whose id is in the vocabulary keeps that id and is
 * matched as a whole in the raw text; its text must be that token's. Others are special
 * tokens at their ids. */
static dt_status add_added(dt_tokenizer *t, const cJSON *added, const char *path) {
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, added) {
        const char *c = dt_tok_json_get(e, "content")->valuestring;
        int32_t iid = (int32_t)dt_tok_json_get(e, "id")->valuedouble;
        size_t n = strlen(c);
        dt_status st;
        if (iid < t->n_ids && t->tok_len[iid] != UINT32_MAX) {
            if (t->tok_len[iid] != n || memcmp(t->blob + t->tok_off[iid], c, n))
                return dt_error_set(DT_ERR_FORMAT,
                                    "%s: added_tokens[%d] \"%.64s\" has id %d, which is "
                                    "model.vocab's token \"%.*s\" (an added token in the "
                                    "vocabulary has its text)",
                                    path, i, c, iid,
                                    (int)(t->tok_len[iid] < 64 ? t->tok_len[iid] : 64),
                                    t->blob + t->tok_off[iid]);
            tok_special *sp = realloc(t->sp, (size_t)(t->n_sp + 1) * sizeof *sp);
            char *cc = strdup(c);
            if (sp) t->sp = sp;
            if (!sp || !cc) {
                free(cc);
                return dt_error_set(DT_ERR_NOMEM, "%s: added token", path);
            }
            t->sp[t->n_sp++] = (tok_special){cc, n, iid};
            t->sp_first[(uint8_t)cc[0]] = 1;
        } else if ((st = dt_tokenizer_add_special(t, c, iid))) {
            char why[256];
            snprintf(why, sizeof why, "%s", dt_last_error());
            return dt_error_set(st, "%s: added_tokens[%d]: %s", path, i, why);
        }
        i++;
    }
    /* keep the longest-first order dt_tokenizer_add_special maintains */
    for (int a = 1; a < t->n_sp; a++)
        for (int j = a; j > 0 && t->sp[j].len > t->sp[j - 1].len; j--) {
            tok_special x = t->sp[j];
            t->sp[j] = t->sp[j - 1], t->sp[j - 1] = x;
        }
    return DT_OK;
}

/* A SentencePiece-style BPE (Llama 2, Mistral, Gemma): byte_fallback, a normalizer, or a
 * Metaspace pre-tokenizer; its tokens are UTF-8 text with "\u2581" for spaces. Byte-level BPE
 * (GPT-2, Llama 3, Qwen 2) has none of these. */
static int has_type(const cJSON *c, const char *list, const char *type) {
    const cJSON *ty = dt_tok_json_get(c, "type"), *e;
    if (cJSON_IsString(ty) && !strcmp(ty->valuestring, type)) return 1;
    cJSON_ArrayForEach(e, dt_tok_json_get(c, list)) if (has_type(e, list, type)) return 1;
    return 0;
}

static int is_sentencepiece(const cJSON *root) {
    const cJSON *m = dt_tok_json_get(root, "model"), *n = dt_tok_json_get(root, "normalizer");
    const cJSON *pt = dt_tok_json_get(root, "pre_tokenizer"), *ty = dt_tok_json_get(pt, "type");
    if (has_type(pt, "pretokenizers", "ByteLevel") ||
        has_type(dt_tok_json_get(root, "decoder"), "decoders", "ByteLevel"))
        return 0;
    if (cJSON_IsTrue(dt_tok_json_get(m, "byte_fallback"))) return 1;
    if (n && !cJSON_IsNull(n)) return 1;
    return cJSON_IsString(ty) && !strcmp(ty->valuestring, "Metaspace");
}

/* tokenizer.json as the Hugging Face tokenizers library writes it (serialization.rs): an object
 * whose model is BPE, byte-level or SentencePiece-style. Read: normalizer, pre_tokenizer, model,
 * decoder (checked), added_tokens. Not read: version, truncation, padding, post_processor (dtrain
 * adds its own BOS/EOS), and keys it does not know (the library ignores them too). */
dt_status dt_tokenizer_load_hf(const char *json_path, dt_tokenizer **out) {
    *out = NULL;
    uint8_t *txt;
    size_t len;
    dt_status st =
        dt_read_file_max(json_path, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &txt, &len);
    if (st) return st;
    cJSON *root = dt_json_parse_strict(json_path, (const char *)txt, len, &st);
    dt_tokenizer *t = st ? NULL : dt_tok_init(TOK_HF);
    if (!st && !t) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (t) dt_tok_limit_ids(t, len);
    char w[64];
    if (!st && !cJSON_IsObject(root))
        st = dt_error_set(DT_ERR_FORMAT, "%s: the file is %s; it must be a JSON object", json_path,
                          dt_json_what(root, w, sizeof w));
    const cJSON *norm = dt_tok_json_get(root, "normalizer");
    const cJSON *pt = dt_tok_json_get(root, "pre_tokenizer");
    if (!st) t->spm = is_sentencepiece(root);
    if (!st && t->spm) st = dt_tok_sp_normalizer(t, norm, json_path, "normalizer");
    if (!st && !t->spm && norm && !cJSON_IsNull(norm)) {
        const char *ty = dt_tok_json_type(json_path, norm, "normalizer");
        st = ty ? dt_error_set(DT_ERR_FORMAT,
                               "%s: normalizer type \"%.40s\" is not supported with a ByteLevel "
                               "model (it must be null)",
                               json_path, ty)
                : DT_ERR_FORMAT;
    }
    if (!st) st = load_hf_model(t, dt_tok_json_get(root, "model"), json_path);
    if (t && t->spm) {
        if (!st) st = dt_tok_sp_pretok(t, pt, json_path, "pre_tokenizer");
        if (!st) st = dt_tok_sp_decoder(t, dt_tok_json_get(root, "decoder"), json_path);
    } else {
        if (!st && pt && !cJSON_IsNull(pt)) st = add_pretok(t, pt, json_path, "pre_tokenizer");
        if (!st && t->n_stages == 0) st = dt_tok_add_stage(t, "(?s).+", 1, 0, json_path);
        if (!st) st = check_decoder(dt_tok_json_get(root, "decoder"), json_path, "decoder");
    }
    const cJSON *added = dt_tok_json_get(root, "added_tokens");
    if (!st) st = check_added(added, json_path, t->id_limit);
    if (!st) st = add_added(t, added, json_path);
    cJSON_Delete(root);
    free(txt);
    if (st) {
        dt_tokenizer_free(t);
        return st;
    }
    snprintf(t->desc, sizeof t->desc, "huggingface %s (%s%" PRId64 " ids, %" PRIu64 " merges)",
             base_name(json_path), t->spm ? "SentencePiece-style, " : "",
             dt_tokenizer_vocab_size(t), t->p_count);
    *out = t;
    return DT_OK;
}

dt_status dt_tokenizer_load(const char *path, dt_tokenizer **out) {
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return dt_tokenizer_load_hf(path, out);
    return load_tiktoken_meta(path, out);
}
