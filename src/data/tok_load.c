/* Tokenizer files: tiktoken rank files (+ optional <stem>.json) and Hugging Face
 * tokenizer.json (byte-level BPE). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/tok.h"
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

/* Standard base64 with padding; returns decoded length or -1. */
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
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (char)(w >> 16);
        if (pad < 2) out[o++] = (char)(w >> 8);
        if (pad < 1) out[o++] = (char)w;
    }
    return o;
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
    char tok[1024];
    for (size_t i = 0; i < len && !st;) {
        line++;
        size_t e = i;
        while (e < len && s[e] != '\n') e++;
        size_t le = e;
        if (le > i && s[le - 1] == '\r') le--;
        if (le > i) {
            const char *sp = memchr(s + i, ' ', le - i);
            char *end = NULL;
            long long r = sp ? strtoll(sp + 1, &end, 10) : -1;
            int64_t bl = -1;
            if (sp && (size_t)(sp - (s + i)) <= 4 * (sizeof tok / 3))
                bl = b64_decode(s + i, (size_t)(sp - (s + i)), tok);
            if (!sp || bl <= 0 || end != s + le || r < 0 || r > INT32_MAX - 1024)
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s:%" PRId64 ": expected \"<base64 token> <rank>\"", path, line);
            else if ((st = dt_tok_set_token(t, (int32_t)r, tok, (size_t)bl))) {
                char why[256]; /* "id N is used twice", "token id N is too large (...)" */
                snprintf(why, sizeof why, "%s", dt_last_error());
                st = dt_error_set(st, "%s:%" PRId64 ": rank %lld: %s", path, line, r, why);
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
    dt_tokenizer *t = dt_tok_new(TOK_TIKTOKEN);
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
    cJSON *root = st ? NULL : cJSON_ParseWithLength((const char *)txt, len);
    if (!st && !cJSON_IsObject(root))
        st = dt_error_set(DT_ERR_FORMAT, "%s: not a JSON object", meta);
    const cJSON *pat = root ? cJSON_GetObjectItemCaseSensitive(root, "pat_str") : NULL;
    if (!st && pat && !cJSON_IsString(pat))
        st = dt_error_set(DT_ERR_FORMAT, "%s: \"pat_str\" is not a string", meta);
    if (!st) st = dt_tokenizer_load_tiktoken(rank_file, pat ? pat->valuestring : NULL, out);
    const cJSON *sp = root ? cJSON_GetObjectItemCaseSensitive(root, "special_tokens") : NULL;
    for (const cJSON *e = sp ? sp->child : NULL; !st && e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX)
            st = dt_error_set(DT_ERR_FORMAT, "%s: special_tokens.%s is not a token id", meta,
                              e->string);
        else if ((st = dt_tokenizer_add_special(*out, e->string, (int32_t)e->valuedouble))) {
            char why[256];
            snprintf(why, sizeof why, "%s", dt_last_error());
            st = dt_error_set(st, "%s: special_tokens.%s: %s", meta, e->string, why);
        }
    }
    if (!st) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "name");
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
static int64_t bytelevel_decode(const char *s, const int32_t cp_to_byte[512], char *out,
                                size_t cap) {
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

static const cJSON *obj(const cJSON *o, const char *k) {
    return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static dt_status add_pretok(dt_tokenizer *t, const cJSON *pt, const char *path) {
    const cJSON *type = obj(pt, "type");
    if (!cJSON_IsString(type))
        return dt_error_set(DT_ERR_FORMAT, "%s: pre_tokenizer without a \"type\"", path);
    const char *ty = type->valuestring;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *list = obj(pt, "pretokenizers");
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            dt_status st = add_pretok(t, e, path);
            if (st) return st;
        }
        return DT_OK;
    }
    if (!strcmp(ty, "ByteLevel")) {
        const cJSON *ur = obj(pt, "use_regex"), *ap = obj(pt, "add_prefix_space");
        int use_regex = !ur || cJSON_IsTrue(ur), prefix = cJSON_IsTrue(ap);
        if (!use_regex && !prefix) return DT_OK; /* only the byte mapping, which is implicit */
        /* A prefix space without a regex: a stage matching everything. */
        return dt_tok_add_stage(t, use_regex ? DT_TOK_PATTERN_GPT2 : "(?s).+", 1, prefix, path);
    }
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = obj(pt, "pattern"), *beh = obj(pt, "behavior"), *inv = obj(pt, "invert");
        const cJSON *re = obj(pat, "Regex"), *str = obj(pat, "String");
        if (cJSON_IsTrue(inv) || !cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated"))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: pre_tokenizer Split is supported with behavior "
                                "Isolated and invert false only",
                                path);
        if (cJSON_IsString(re)) return dt_tok_add_stage(t, re->valuestring, 1, 0, path);
        if (cJSON_IsString(str)) {
            /* a literal: quote it for PCRE2 */
            size_t n = strlen(str->valuestring);
            char *q = malloc(n + 5);
            if (!q) return dt_error_set(DT_ERR_NOMEM, "out of memory");
            snprintf(q, n + 5, "\\Q%s\\E", str->valuestring);
            dt_status st = dt_tok_add_stage(t, q, 1, 0, path);
            free(q);
            return st;
        }
        return dt_error_set(DT_ERR_FORMAT, "%s: pre_tokenizer Split without a pattern", path);
    }
    return dt_error_set(DT_ERR_FORMAT,
                        "%s: pre_tokenizer type \"%s\" is not supported (ByteLevel, "
                        "Split, Sequence are)",
                        path, ty);
}

static dt_status load_hf_model(dt_tokenizer *t, const cJSON *model, const char *path) {
    const cJSON *type = obj(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE"))
        return dt_error_set(DT_ERR_FORMAT, "%s: model.type is not \"BPE\"", path);
    const cJSON *cs = obj(model, "continuing_subword_prefix"),
                *ew = obj(model, "end_of_word_suffix");
    if ((cJSON_IsString(cs) && *cs->valuestring) || (cJSON_IsString(ew) && *ew->valuestring) ||
        cJSON_IsTrue(obj(model, "byte_fallback")))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: subword prefixes/suffixes and byte_fallback are "
                            "not supported (byte-level BPE only)",
                            path);
    const cJSON *dr = obj(model, "dropout");
    if (dr && !cJSON_IsNull(dr) && !(cJSON_IsNumber(dr) && dr->valuedouble == 0))
        return dt_error_set(DT_ERR_FORMAT, "%s: BPE dropout is not supported", path);
    t->ignore_merges = cJSON_IsTrue(obj(model, "ignore_merges"));
    int32_t cp_to_byte[512];
    byte_unicode_table(cp_to_byte);
    const cJSON *vocab = obj(model, "vocab");
    if (!cJSON_IsObject(vocab)) return dt_error_set(DT_ERR_FORMAT, "%s: model.vocab missing", path);
    char buf[4096];
    dt_status st;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX)
            return dt_error_set(DT_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not a token id", path,
                                e->string);
        int64_t n = bytelevel_decode(e->string, cp_to_byte, buf, sizeof buf);
        if (n < 0)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: model.vocab token \"%s\" is not byte-level "
                                "(GPT-2 byte-to-unicode) text",
                                path, e->string);
        if ((st = dt_tok_set_token(t, (int32_t)e->valuedouble, buf, (size_t)n))) {
            char why[256]; /* "id N is used twice", "token id N is too large (...)" */
            snprintf(why, sizeof why, "%s", dt_last_error());
            return dt_error_set(st, "%s: model.vocab[\"%.64s\"]: %s", path, e->string, why);
        }
    }
    if ((st = dt_tok_index(t, path))) return st;
    const cJSON *unk = obj(model, "unk_token");
    if (cJSON_IsString(unk)) {
        int64_t n = bytelevel_decode(unk->valuestring, cp_to_byte, buf, sizeof buf);
        t->unk_id = n >= 0 ? dt_tok_lookup(t, buf, (size_t)n) : -1;
    }
    const cJSON *merges = obj(model, "merges");
    if (!cJSON_IsArray(merges))
        return dt_error_set(DT_ERR_FORMAT, "%s: model.merges missing", path);
    if ((st = dt_tok_pairs_reserve(t, (uint64_t)cJSON_GetArraySize(merges)))) return st;
    int32_t rank = 0;
    char lb[2048], rb[2048];
    for (const cJSON *e = merges->child; e; e = e->next, rank++) {
        const char *l, *r;
        char tmp[4096];
        if (cJSON_IsString(e)) { /* "left right" */
            const char *sp = strchr(e->valuestring, ' ');
            size_t ln = sp ? (size_t)(sp - e->valuestring) : 0;
            if (!sp || ln >= sizeof tmp || strchr(sp + 1, ' '))
                return dt_error_set(DT_ERR_FORMAT, "%s: model.merges[%d] \"%s\" is not \"a b\"",
                                    path, rank, e->valuestring);
            memcpy(tmp, e->valuestring, ln);
            tmp[ln] = 0;
            l = tmp, r = sp + 1;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            l = e->child->valuestring, r = e->child->next->valuestring;
        } else {
            return dt_error_set(DT_ERR_FORMAT, "%s: model.merges[%d] is not a pair", path, rank);
        }
        int64_t nl = bytelevel_decode(l, cp_to_byte, lb, sizeof lb / 2);
        int64_t nr = bytelevel_decode(r, cp_to_byte, rb, sizeof rb / 2);
        if (nl <= 0 || nr <= 0)
            return dt_error_set(DT_ERR_FORMAT, "%s: model.merges[%d]: not byte-level text", path,
                                rank);
        int32_t a = dt_tok_lookup(t, lb, (size_t)nl), b = dt_tok_lookup(t, rb, (size_t)nr);
        memcpy(lb + nl, rb, (size_t)nr);
        int32_t m = dt_tok_lookup(t, lb, (size_t)(nl + nr));
        if (a < 0 || b < 0 || m < 0)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: model.merges[%d] (\"%s\" + \"%s\") uses or makes "
                                "a token that is not in model.vocab",
                                path, rank, l, r);
        if ((st = dt_tok_add_merge(t, a, b, m, rank))) return st;
    }
    return DT_OK;
}

dt_status dt_tokenizer_load_hf(const char *json_path, dt_tokenizer **out) {
    *out = NULL;
    uint8_t *txt;
    size_t len;
    dt_status st =
        dt_read_file_max(json_path, 0, DT_MAX_TOKENIZER_BYTES, "a tokenizer file", &txt, &len);
    if (st) return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)txt, len, &end, 0);
    dt_tokenizer *t = dt_tok_new(TOK_HF);
    if (!t) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (t) dt_tok_limit_ids(t, len);
    if (!st && !cJSON_IsObject(root)) {
        int64_t line = 0, col = 0;
        const char *ep = cJSON_GetErrorPtr();
        size_t off = ep && ep >= (const char *)txt ? (size_t)(ep - (const char *)txt) : 0;
        dt_line_col((const char *)txt, off < len ? off : len, &line, &col);
        st = dt_error_set(DT_ERR_FORMAT, "%s:%" PRId64 ":%" PRId64 ": malformed JSON", json_path,
                          line, col);
    }
    const cJSON *norm = obj(root, "normalizer");
    if (!st && norm && !cJSON_IsNull(norm))
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: normalizers are not supported (\"normalizer\" must be "
                          "null)",
                          json_path);
    if (!st) st = load_hf_model(t, obj(root, "model"), json_path);
    const cJSON *pt = obj(root, "pre_tokenizer");
    if (!st && pt && !cJSON_IsNull(pt)) st = add_pretok(t, pt, json_path);
    if (!st && t->n_stages == 0) st = dt_tok_add_stage(t, "(?s).+", 1, 0, json_path);
    const cJSON *added = obj(root, "added_tokens"), *e;
    cJSON_ArrayForEach(e, added) {
        if (st) break;
        const cJSON *id = obj(e, "id"), *content = obj(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content)) {
            st = dt_error_set(DT_ERR_FORMAT, "%s: added_tokens entry without id and content",
                              json_path);
            break;
        }
        /* an id is an index into the id tables: checked before it is used as one */
        if (!(id->valuedouble >= 0 && id->valuedouble < (double)t->id_limit) ||
            id->valuedouble != (double)(int32_t)id->valuedouble) {
            st = dt_error_set(
                DT_ERR_FORMAT,
                "%s: added_tokens: id %g of \"%.64s\" is not a token id below %" PRId64, json_path,
                id->valuedouble, content->valuestring, t->id_limit);
            break;
        }
        /* An added token that is also in the vocabulary keeps its ordinary id; as a special it
         * is matched in the raw text. Register the text with that id without a clash check. */
        int32_t iid = (int32_t)id->valuedouble;
        if (dt_tokenizer_special_id(t, content->valuestring) >= 0) continue;
        if (iid < t->n_ids && t->tok_len[iid] != UINT32_MAX) {
            size_t n = strlen(content->valuestring);
            tok_special *sp = realloc(t->sp, (size_t)(t->n_sp + 1) * sizeof *sp);
            char *c = strdup(content->valuestring);
            if (sp) t->sp = sp;
            if (!sp || !c || !n) {
                free(c);
                st = dt_error_set(DT_ERR_NOMEM, "%s: added token", json_path);
                break;
            }
            t->sp[t->n_sp++] = (tok_special){c, n, iid};
            t->sp_first[(uint8_t)c[0]] = 1;
            continue;
        }
        st = dt_tokenizer_add_special(t, content->valuestring, iid);
    }
    if (!st && t->n_sp) {
        /* keep the longest-first order dt_tokenizer_add_special maintains */
        for (int i = 1; i < t->n_sp; i++)
            for (int j = i; j > 0 && t->sp[j].len > t->sp[j - 1].len; j--) {
                tok_special x = t->sp[j];
                t->sp[j] = t->sp[j - 1], t->sp[j - 1] = x;
            }
    }
    cJSON_Delete(root);
    free(txt);
    if (st) {
        dt_tokenizer_free(t);
        return st;
    }
    snprintf(t->desc, sizeof t->desc, "huggingface %s (%" PRId64 " ids, %" PRIu64 " merges)",
             base_name(json_path), dt_tokenizer_vocab_size(t), t->p_count);
    *out = t;
    return DT_OK;
}

dt_status dt_tokenizer_load(const char *path, dt_tokenizer **out) {
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return dt_tokenizer_load_hf(path, out);
    return load_tiktoken_meta(path, out);
}
