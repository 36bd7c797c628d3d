/* Byte-level BPE: vocabulary tables, special tokens, pre-tokenization and merging (tok.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "data/tok.h"
#include "core/json.h"

/* cl100k_base's pattern, as tiktoken and Llama 3 use it ((?i:...) spelled out as in
 * cl100k_base.json, so no engine's case folding rules can differ). */
const char DT_TOK_PATTERN_CL100K[] =
    "('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
const char DT_TOK_PATTERN_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void dt_tokens_free(dt_tokens *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

dt_status dt_tok_push(dt_tokens *o, int32_t id) {
    if (o->n == o->cap) {
        int64_t c = o->cap ? o->cap * 2 : 256;
        int32_t *p = realloc(o->ids, (size_t)c * sizeof *p);
        if (!p)
            return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory for %" PRId64 " ids", c);
        o->ids = p, o->cap = c;
    }
    o->ids[o->n++] = id;
    return DT_OK;
}

/* ---- UTF-8 ---- */

size_t dt_utf8_validate(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII fast path, 8 bytes at a time. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF)
            n = 2, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 3, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 4, cp = c & 0x07, min = 0x10000;
        else
            return i;
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return len;
}

static inline size_t utf8_len(uint8_t c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* ---- tables ---- */

dt_tokenizer *dt_tok_init(int kind) {
    dt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->unk_id = -1;
    t->id_limit = DT_TOK_MAX_IDS;
    for (int i = 0; i < 256; i++) t->byte_id[i] = t->fb_id[i] = -1;
    return t;
}

void dt_tok_limit_ids(dt_tokenizer *t, size_t file_bytes) {
    int64_t lim =
        ((int64_t)1 << 20) + (int64_t)(file_bytes < DT_TOK_MAX_IDS ? file_bytes : DT_TOK_MAX_IDS);
    t->id_limit = lim < DT_TOK_MAX_IDS ? lim : DT_TOK_MAX_IDS;
}

dt_status dt_tok_set_token(dt_tokenizer *t, int32_t id, const char *bytes, size_t len) {
    if (id < 0) return dt_error_set(DT_ERR_INVALID, "tokenizer: negative token id %d", id);
    if (id >= t->id_limit)
        return dt_error_set(DT_ERR_RANGE,
                            "tokenizer: token id %d is too large (at most %" PRId64
                            " ids for a file of this size)",
                            id, t->id_limit);
    if (id >= t->n_ids) {
        int64_t n = t->n_ids ? t->n_ids : 1024;
        while (n <= id) n *= 2;
        uint32_t *o = realloc(t->tok_off, (size_t)n * 4);
        if (o) t->tok_off = o;
        uint32_t *l = realloc(t->tok_len, (size_t)n * 4);
        if (l) t->tok_len = l;
        if (!o || !l) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
        for (int64_t i = t->n_ids; i < n; i++) t->tok_len[i] = UINT32_MAX;
        t->n_ids = n;
    }
    if (t->tok_len[id] != UINT32_MAX)
        return dt_error_set(DT_ERR_FORMAT, "tokenizer: id %d is used twice", id);
    if (t->blob_len + len + 1 > t->blob_cap || !t->blob) {
        size_t c = t->blob_cap ? t->blob_cap : 1 << 20;
        while (c < t->blob_len + len + 1) c *= 2;
        char *b = realloc(t->blob, c);
        if (!b) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
        t->blob = b, t->blob_cap = c;
    }
    if (t->blob_len + len > UINT32_MAX)
        return dt_error_set(DT_ERR_RANGE, "tokenizer: vocabulary over 4 GiB of bytes");
    memcpy(t->blob + t->blob_len, bytes, len);
    t->tok_off[id] = (uint32_t)t->blob_len;
    t->tok_len[id] = (uint32_t)len;
    t->blob_len += len;
    return DT_OK;
}

static inline int is_special_id(const dt_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_sp; i++)
        if (t->sp[i].id == id) return 1;
    return 0;
}

int32_t dt_tok_lookup(const dt_tokenizer *t, const char *bytes, size_t len) {
    if (!t->bt) return -1;
    uint64_t h = XXH3_64bits(bytes, len) & t->bt_mask;
    for (;;) {
        uint32_t v = t->bt[h];
        if (!v) return -1;
        int32_t id = (int32_t)(v - 1);
        if (t->tok_len[id] == len && !memcmp(t->blob + t->tok_off[id], bytes, len)) return id;
        h = (h + 1) & t->bt_mask;
    }
}

dt_status dt_tok_index(dt_tokenizer *t, const char *what) {
    uint64_t n = 0;
    for (int64_t i = 0; i < t->n_ids; i++) n += t->tok_len[i] != UINT32_MAX;
    uint64_t cap = 1024;
    while (cap < 2 * n) cap *= 2;
    free(t->bt);
    t->bt = calloc(cap, sizeof *t->bt);
    if (!t->bt) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", what);
    t->bt_mask = cap - 1;
    for (int64_t i = 0; i < t->n_ids; i++) {
        if (t->tok_len[i] == UINT32_MAX) continue;
        const char *b = t->blob + t->tok_off[i];
        uint64_t h = XXH3_64bits(b, t->tok_len[i]) & t->bt_mask;
        while (t->bt[h]) {
            int32_t o = (int32_t)(t->bt[h] - 1);
            if (t->tok_len[o] == t->tok_len[i] &&
                !memcmp(t->blob + t->tok_off[o], b, t->tok_len[i]))
                return dt_error_set(
                    DT_ERR_FORMAT, "%s: tokens %d and %" PRId64 " have the same bytes", what, o, i);
            h = (h + 1) & t->bt_mask;
        }
        t->bt[h] = (uint32_t)i + 1;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = dt_tok_lookup(t, &c, 1);
    }
    return DT_OK;
}

static inline uint64_t pair_hash(uint64_t key, uint64_t mask) {
    return (key * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

dt_status dt_tok_pairs_reserve(dt_tokenizer *t, uint64_t n) {
    uint64_t cap = 1024;
    while (cap < 2 * n + 2) cap *= 2;
    if (t->pk && t->p_mask + 1 >= cap) return DT_OK;
    uint64_t *pk = malloc(cap * sizeof *pk);
    int32_t *pr = malloc(cap * sizeof *pr), *pm = malloc(cap * sizeof *pm);
    if (!pk || !pr || !pm) {
        free(pk), free(pr), free(pm);
        return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory for %" PRIu64 " merges", n);
    }
    memset(pk, 0xff, cap * sizeof *pk);
    uint64_t mask = cap - 1;
    for (uint64_t i = 0; t->pk && i <= t->p_mask; i++) {
        if (t->pk[i] == UINT64_MAX) continue;
        uint64_t h = pair_hash(t->pk[i], mask);
        while (pk[h] != UINT64_MAX) h = (h + 1) & mask;
        pk[h] = t->pk[i], pr[h] = t->prank[i], pm[h] = t->pmerged[i];
    }
    free(t->pk), free(t->prank), free(t->pmerged);
    t->pk = pk, t->prank = pr, t->pmerged = pm, t->p_mask = mask;
    return DT_OK;
}

dt_status dt_tok_add_merge(dt_tokenizer *t, int32_t left, int32_t right, int32_t merged,
                           int32_t rank) {
    if (!t->pk || 2 * (t->p_count + 1) > t->p_mask + 1) {
        dt_status st = dt_tok_pairs_reserve(t, 2 * t->p_count + 1024);
        if (st) return st;
    }
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = pair_hash(key, t->p_mask);
    while (t->pk[h] != UINT64_MAX) {
        /* a pair twice: readers differ on its rank (the Rust tokenizers keep the last) */
        if (t->pk[h] == key)
            return dt_error_set(DT_ERR_FORMAT,
                                "tokenizer: the pair is merged twice (first at rank %d)",
                                t->prank[h]);
        h = (h + 1) & t->p_mask;
    }
    t->pk[h] = key, t->prank[h] = rank, t->pmerged[h] = merged;
    t->p_count++;
    return DT_OK;
}

/* Slot of the pair (a, b), or -1. */
static inline int64_t pair_find(const dt_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = pair_hash(key, t->p_mask);
    for (;;) {
        uint64_t k = t->pk[h];
        if (k == key) return (int64_t)h;
        if (k == UINT64_MAX) return -1;
        h = (h + 1) & t->p_mask;
    }
}

dt_status dt_tok_pairs_from_ranks(dt_tokenizer *t) {
    /* Every split of every token into two tokens is a pair whose concatenation has that
     * token's rank: exactly the lookups tiktoken's merge loop makes. */
    uint64_t n = 0;
    for (int64_t i = 0; i < t->n_ids; i++)
        if (t->tok_len[i] != UINT32_MAX && t->tok_len[i] > 1) n += t->tok_len[i] - 1;
    dt_status st = dt_tok_pairs_reserve(t, n);
    if (st) return st;
    for (int64_t i = 0; i < t->n_ids; i++) {
        uint32_t len = t->tok_len[i];
        if (len == UINT32_MAX || len < 2) continue;
        const char *b = t->blob + t->tok_off[i];
        for (uint32_t k = 1; k < len; k++) {
            int32_t l = dt_tok_lookup(t, b, k);
            if (l < 0) continue;
            int32_t r = dt_tok_lookup(t, b + k, len - k);
            if (r < 0) continue;
            if ((st = dt_tok_add_merge(t, l, r, (int32_t)i, (int32_t)i))) return st;
        }
    }
    return DT_OK;
}

dt_status dt_tok_add_stage(dt_tokenizer *t, const char *pattern, int keep_gaps,
                           int add_prefix_space, const char *what) {
    if (t->n_stages == TOK_MAX_STAGES)
        return dt_error_set(DT_ERR_FORMAT, "%s: more than %d pre-tokenizer stages", what,
                            TOK_MAX_STAGES);
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dt_error_set(DT_ERR_FORMAT, "%s: pre-tokenizer regex, offset %zu: %s", what,
                            (size_t)eoff, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if no JIT */
    t->stages[t->n_stages++] = (tok_stage){re, keep_gaps, add_prefix_space};
    if (!t->mctx) {
        t->mctx = pcre2_match_context_create(NULL);
        t->jit_stack = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
        if (t->mctx && t->jit_stack) pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    }
    pcre2_match_data_free(t->md);
    uint32_t most = 0;
    for (int i = 0; i < t->n_stages; i++) {
        uint32_t c;
        pcre2_pattern_info(t->stages[i].re, PCRE2_INFO_CAPTURECOUNT, &c);
        if (c > most) most = c;
    }
    t->md = pcre2_match_data_create(most + 1, NULL);
    if (!t->md || !t->mctx) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", what);
    return DT_OK;
}

/* ---- special tokens ---- */

static int sp_cmp(const void *a, const void *b) {
    const tok_special *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

dt_status dt_tokenizer_add_special(dt_tokenizer *t, const char *text, int32_t id) {
    size_t len = strlen(text);
    if (!len) return dt_error_set(DT_ERR_INVALID, "tokenizer: empty special token");
    if (dt_utf8_validate(text, len) != len)
        return dt_error_set(DT_ERR_INVALID, "tokenizer: special token is not valid UTF-8");
    for (int i = 0; i < t->n_sp; i++)
        if (!strcmp(t->sp[i].text, text))
            return dt_error_set(DT_ERR_INVALID, "tokenizer: special token %s already has id %d",
                                text, t->sp[i].id);
    if (id < 0) id = (int32_t)dt_tokenizer_vocab_size(t);
    if (id >= t->id_limit)
        return dt_error_set(DT_ERR_RANGE,
                            "tokenizer: id %d of special token %s is too large (at most %" PRId64
                            " ids)",
                            id, text, t->id_limit);
    if ((id < t->n_ids && t->tok_len[id] != UINT32_MAX) || is_special_id(t, id))
        return dt_error_set(DT_ERR_INVALID, "tokenizer: id %d of special token %s is taken", id,
                            text);
    tok_special *sp = realloc(t->sp, (size_t)(t->n_sp + 1) * sizeof *sp);
    if (!sp) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
    t->sp = sp;
    char *c = strdup(text);
    if (!c) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
    t->sp[t->n_sp++] = (tok_special){c, len, id};
    qsort(t->sp, (size_t)t->n_sp, sizeof *t->sp, sp_cmp);
    t->sp_first[(uint8_t)text[0]] = 1;
    return DT_OK;
}

int32_t dt_tokenizer_special_id(const dt_tokenizer *t, const char *text) {
    for (int i = 0; i < t->n_sp; i++)
        if (!strcmp(t->sp[i].text, text)) return t->sp[i].id;
    return -1;
}

dt_status dt_tokenizer_add_llama3_chat(dt_tokenizer *t) {
    static const char *names[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                  "<|end_header_id|>", "<|eot_id|>"};
    for (int i = 0; i < 5; i++) {
        if (dt_tokenizer_special_id(t, names[i]) >= 0) continue;
        dt_status st = dt_tokenizer_add_special(t, names[i], -1);
        if (st) return st;
    }
    return DT_OK;
}

int64_t dt_tokenizer_vocab_size(const dt_tokenizer *t) {
    int64_t n = 0;
    for (int64_t i = t->n_ids - 1; i >= 0; i--)
        if (t->tok_len[i] != UINT32_MAX) {
            n = i + 1;
            break;
        }
    for (int i = 0; i < t->n_sp; i++)
        if (t->sp[i].id + 1 > n) n = t->sp[i].id + 1;
    return n;
}

const char *dt_tokenizer_describe(const dt_tokenizer *t) {
    return t->desc;
}

void dt_tokenizer_free(dt_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->stages[i].re);
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    if (t->jit_stack) pcre2_jit_stack_free(t->jit_stack);
    for (int i = 0; i < t->n_sp; i++) free(t->sp[i].text);
    free(t->sp);
    free(t->tok_off), free(t->tok_len), free(t->blob), free(t->bt);
    free(t->pk), free(t->prank), free(t->pmerged);
    free(t->w_ids), free(t->w_rank), free(t->scratch);
    dt_tok_sp_free(t);
    free(t);
}

/* ---- encoding ---- */

static dt_status byte_unknown(const dt_tokenizer *t, uint8_t b, dt_tokens *out) {
    if (t->unk_id >= 0) return dt_tok_push(out, t->unk_id);
    return dt_error_set(DT_ERR_FORMAT,
                        "tokenizer: byte 0x%02x has no token and there is no "
                        "unknown token",
                        b);
}

/* Long pieces: the same leftmost-lowest-rank merge order with a linked list and a binary heap
 * of (rank, position) candidates, O(n log n) instead of O(n^2). A candidate is stale once either
 * of its tokens has changed; stale ones are skipped when popped. */
typedef struct cand {
    int32_t rank, left_id, right_id;
    uint32_t pos, right;
} cand;

static inline int cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_less(&c, &h[up])) break;
        h[i] = h[up], i = up;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best)) m = l, best = &h[l];
        if (r < *n && cand_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m], i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static dt_status bpe_long(const dt_tokenizer *t, int32_t *ids, size_t m, dt_tokens *out) {
    uint32_t *next = malloc(m * sizeof *next), *prev = malloc(m * sizeof *prev);
    cand *h = malloc(3 * m * sizeof *h);
    if (!next || !prev || !h) {
        free(next), free(prev), free(h);
        return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory for a %zu-byte piece", m);
    }
    const uint32_t END = UINT32_MAX;
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (uint32_t)i + 1 : END;
        prev[i] = i ? (uint32_t)i - 1 : END;
    }
#define CANDIDATE(a, b)                                                                            \
    do {                                                                                           \
        int64_t s_ = pair_find(t, ids[a], ids[b]);                                                 \
        if (s_ >= 0)                                                                               \
            heap_push(h, &hn, (cand){t->prank[s_], ids[a], ids[b], (uint32_t)(a), (uint32_t)(b)}); \
    } while (0)
    for (size_t i = 0; i + 1 < m; i++) CANDIDATE(i, i + 1);
    while (hn) {
        cand c = heap_pop(h, &hn);
        /* alive: left still starts a token whose right neighbour and both ids are unchanged */
        if (ids[c.pos] != c.left_id || next[c.pos] != c.right || ids[c.right] != c.right_id)
            continue;
        ids[c.pos] = t->pmerged[pair_find(t, c.left_id, c.right_id)];
        ids[c.right] = -1; /* dead */
        next[c.pos] = next[c.right];
        if (next[c.pos] != END) prev[next[c.pos]] = c.pos;
        if (prev[c.pos] != END) CANDIDATE(prev[c.pos], c.pos);
        if (next[c.pos] != END) CANDIDATE(c.pos, next[c.pos]);
    }
#undef CANDIDATE
    dt_status st = DT_OK;
    for (uint32_t i = 0; i != END && !st; i = next[i]) st = dt_tok_push(out, ids[i]);
    free(next), free(prev), free(h);
    return st;
}

dt_status dt_tok_reserve(dt_tokenizer *t, size_t n) {
    if ((int64_t)n <= t->w_cap) return DT_OK;
    int64_t c = t->w_cap ? t->w_cap : 64;
    while (c < (int64_t)n) c *= 2;
    int32_t *a = realloc(t->w_ids, (size_t)c * 4);
    if (a) t->w_ids = a;
    int32_t *b = realloc(t->w_rank, (size_t)c * 4);
    if (b) t->w_rank = b;
    if (!a || !b) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
    t->w_cap = c;
    return DT_OK;
}

dt_status dt_tok_merge(dt_tokenizer *t, int32_t *ids, size_t m, dt_tokens *out) {
    int32_t *rk = t->w_rank;
    if (!t->pk) goto emit;
    if (m > 128) return bpe_long(t, ids, m, out);
    for (size_t i = 0; i + 1 < m; i++) {
        int64_t s = pair_find(t, ids[i], ids[i + 1]);
        rk[i] = s < 0 ? INT32_MAX : t->prank[s];
    }
    while (m > 1) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rk[i] < best) best = rk[i], bi = i;
        if (best == INT32_MAX) break;
        ids[bi] = t->pmerged[pair_find(t, ids[bi], ids[bi + 1])];
        /* drop ids[bi + 1] and rk[bi] (the merged pair); ranks of the neighbours change */
        memmove(ids + bi + 1, ids + bi + 2, (m - bi - 2) * sizeof *ids);
        if (bi + 1 < m - 1) memmove(rk + bi, rk + bi + 1, (m - bi - 2) * sizeof *rk);
        m--;
        if (bi > 0) {
            int64_t s = pair_find(t, ids[bi - 1], ids[bi]);
            rk[bi - 1] = s < 0 ? INT32_MAX : t->prank[s];
        }
        if (bi + 1 < m) {
            int64_t s = pair_find(t, ids[bi], ids[bi + 1]);
            rk[bi] = s < 0 ? INT32_MAX : t->prank[s];
        }
    }
emit:
    for (size_t i = 0; i < m; i++) {
        dt_status st = dt_tok_push(out, ids[i]);
        if (st) return st;
    }
    return DT_OK;
}

/* Merges one pre-tokenized piece (byte-level: the symbols are its bytes). */
static dt_status bpe_piece(dt_tokenizer *t, const char *p, size_t n, dt_tokens *out) {
    if (n == 0) return DT_OK;
    if (n == 1) {
        int32_t id = t->byte_id[(uint8_t)p[0]];
        return id >= 0 ? dt_tok_push(out, id) : byte_unknown(t, (uint8_t)p[0], out);
    }
    if (t->ignore_merges) {
        int32_t id = dt_tok_lookup(t, p, n);
        if (id >= 0) return dt_tok_push(out, id);
    }
    dt_status st = dt_tok_reserve(t, n);
    if (st) return st;
    int32_t *ids = t->w_ids;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)p[i]];
        if (id < 0) {
            /* Unknown bytes stand alone: flush what we have, emit unk, continue after it. */
            st = bpe_piece(t, p, i, out);
            if (!st) st = byte_unknown(t, (uint8_t)p[i], out);
            if (!st) st = bpe_piece(t, p + i + 1, n - i - 1, out);
            return st;
        }
        ids[m++] = id;
    }
    return dt_tok_merge(t, ids, m, out);
}

static dt_status run_stage(dt_tokenizer *t, int k, const char *s, size_t n, dt_tokens *out);

static dt_status run_stage_body(dt_tokenizer *t, int k, const char *s, size_t n, dt_tokens *out) {
    const tok_stage *sg = &t->stages[k];
    size_t start = 0;
    while (start < n) {
        int rc = pcre2_match(sg->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (sg->keep_gaps) return run_stage(t, k + 1, s + start, n - start, out);
            return DT_OK;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return dt_error_set(DT_ERR_INTERNAL, "tokenizer: regex match failed at byte %zu: %s",
                                start, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        size_t ms = ov[0], me = ov[1];
        dt_status st;
        if (ms > start && sg->keep_gaps && (st = run_stage(t, k + 1, s + start, ms - start, out)))
            return st;
        if (me == ms) { /* empty match: step over one character */
            start = me + (me < n ? utf8_len((uint8_t)s[me]) : 1);
            continue;
        }
        if ((st = run_stage(t, k + 1, s + ms, me - ms, out))) return st;
        start = me;
    }
    return DT_OK;
}

static dt_status run_stage(dt_tokenizer *t, int k, const char *s, size_t n, dt_tokens *out) {
    if (k == t->n_stages) return bpe_piece(t, s, n, out);
    if (t->stages[k].add_prefix_space && (n == 0 || s[0] != ' ') && n > 0) {
        char *b = malloc(n + 1);
        if (!b) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
        b[0] = ' ';
        memcpy(b + 1, s, n);
        dt_status st = run_stage_body(t, k, b, n + 1, out);
        free(b);
        return st;
    }
    return run_stage_body(t, k, s, n, out);
}

/* Text [a, b) between special tokens. */
static dt_status segment(dt_tokenizer *t, const char *text, size_t a, size_t b, int flags,
                         dt_tokens *out) {
    if (t->spm)
        return dt_tok_sp_encode(t, text + a, b - a, a == 0 && !(flags & DT_TOK_CONTINUED), out);
    return run_stage(t, 0, text + a, b - a, out);
}

dt_status dt_tokenizer_encode(dt_tokenizer *t, const char *text, size_t len, int flags,
                              dt_tokens *out) {
    size_t bad = dt_utf8_validate(text, len);
    if (bad < len) {
        int64_t line, col;
        dt_line_col(text, bad, &line, &col);
        return dt_error_set(DT_ERR_FORMAT,
                            "tokenizer: invalid UTF-8 at byte %zu (line %" PRId64
                            ", column %" PRId64 "): 0x%02x",
                            bad, line, col, (uint8_t)text[bad]);
    }
    size_t start = 0;
    if ((flags & DT_TOK_ALLOW_SPECIAL) && t->n_sp) {
        for (size_t i = 0; i < len; i++) {
            if (!t->sp_first[(uint8_t)text[i]]) continue;
            const tok_special *hit = NULL;
            for (int k = 0; k < t->n_sp; k++)
                if (t->sp[k].len <= len - i && !memcmp(text + i, t->sp[k].text, t->sp[k].len)) {
                    hit = &t->sp[k];
                    break;
                }
            if (!hit) continue;
            dt_status st = i > start ? segment(t, text, start, i, flags, out) : DT_OK;
            if (!st) st = dt_tok_push(out, hit->id);
            if (st) return st;
            start = i + hit->len;
            i = start - 1;
        }
    }
    return len > start ? segment(t, text, start, len, flags, out) : DT_OK;
}

/* ---- decoding ---- */

const char *dt_tokenizer_token_bytes(const dt_tokenizer *t, int32_t id, size_t *len) {
    if (id >= 0 && id < t->n_ids && t->tok_len[id] != UINT32_MAX && t->dec_len) {
        *len = t->dec_len[id];
        return t->dblob + t->dec_off[id];
    }
    if (id >= 0 && id < t->n_ids && t->tok_len[id] != UINT32_MAX) {
        *len = t->tok_len[id];
        return t->blob + t->tok_off[id];
    }
    for (int i = 0; i < t->n_sp; i++)
        if (t->sp[i].id == id) {
            *len = t->sp[i].len;
            return t->sp[i].text;
        }
    return NULL;
}

dt_status dt_tok_decode_buffer(const dt_tokenizer *t, const int32_t *ids, int64_t n, char **buf) {
    size_t total = 0, l;
    for (int64_t i = 0; i < n; i++) {
        if (!dt_tokenizer_token_bytes(t, ids[i], &l))
            return dt_error_set(DT_ERR_RANGE,
                                "tokenizer: decode: id %d at position %" PRId64
                                " is not in the vocabulary",
                                ids[i], i);
        total += l;
    }
    *buf = malloc(total + 1);
    return *buf ? DT_OK : dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
}

dt_status dt_tokenizer_decode(const dt_tokenizer *t, const int32_t *ids, int64_t n, char **text,
                              size_t *len) {
    if (t->spm) return dt_tok_sp_decode(t, ids, n, text, len);
    size_t l;
    char *buf;
    dt_status st = dt_tok_decode_buffer(t, ids, n, &buf);
    if (st) return st;
    size_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *b = dt_tokenizer_token_bytes(t, ids[i], &l);
        memcpy(buf + pos, b, l);
        pos += l;
    }
    buf[pos] = '\0';
    *text = buf, *len = pos;
    return DT_OK;
}
