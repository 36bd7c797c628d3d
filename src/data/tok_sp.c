/* SentencePiece-style BPE (Llama 2, Mistral, Gemma tokenizer.json): the encoder's normalizer and
 * Metaspace steps, BPE over characters with byte fallback, and the decoder (tok.h).
 *
 * As the Hugging Face tokenizers library does it, per text segment between special tokens:
 *   normalizer: Prepend(s) puts s before a non-empty segment, Replace(a, b) replaces every a;
 *   Metaspace:  ' ' -> replacement, the replacement prepended (scheme always, or first for the
 *               segment that starts the string) unless the text starts with it, and split
 *               before every replacement character (split true);
 *   BPE:        symbols are the characters; a character missing from the vocabulary is its
 *               UTF-8 bytes as <0xNN> tokens (byte_fallback, when all exist) or the unknown
 *               token (fuse_unk: one for a run); then the usual lowest-rank merges. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "data/tok.h"

static inline size_t u8len(uint8_t c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Scratch buffer k (0 or 1) of at least n bytes. */
static char *nbuf(dt_tokenizer *t, int k, size_t n) {
    if (t->nbuf_cap[k] < n) {
        size_t c = t->nbuf_cap[k] ? t->nbuf_cap[k] : 256;
        while (c < n) c *= 2;
        char *b = realloc(t->nbuf[k], c);
        if (!b) return NULL;
        t->nbuf[k] = b, t->nbuf_cap[k] = c;
    }
    return t->nbuf[k];
}

/* Every `from` in s[0, n) (left to right, not overlapping) replaced by `to`, into buffer k;
 * pre (may be NULL) goes first. */
static const char *replace(dt_tokenizer *t, int k, const char *s, size_t n, const char *from,
                           size_t nf, const char *to, size_t nt, const char *pre, size_t np,
                           size_t *out_n) {
    size_t hits = 0;
    for (const char *q = s, *e = s + n; nf && (q = memmem(q, (size_t)(e - q), from, nf)); q += nf)
        hits++;
    char *o = nbuf(t, k, np + n + hits * (nt > nf ? nt - nf : 0) + 1);
    if (!o) return NULL;
    size_t w = 0;
    if (np) memcpy(o, pre, np), w = np;
    for (size_t i = 0; i < n;) {
        const char *q = nf && hits ? memmem(s + i, n - i, from, nf) : NULL;
        size_t run = q ? (size_t)(q - s) - i : n - i; /* bytes before the next `from` */
        memcpy(o + w, s + i, run), w += run, i += run;
        if (q) memcpy(o + w, to, nt), w += nt, i += nf;
    }
    *out_n = w;
    return o;
}

/* One pre-tokenized word: characters -> symbols -> merges. */
static dt_status sp_word(dt_tokenizer *t, const char *p, size_t n, size_t at, dt_tokens *out) {
    if (n == 0) return DT_OK;
    if (t->ignore_merges) {
        int32_t id = dt_tok_lookup(t, p, n);
        if (id >= 0) return dt_tok_push(out, id);
    }
    dt_status st = dt_tok_reserve(t, n); /* at most one symbol per byte */
    if (st) return st;
    int32_t *ids = t->w_ids;
    size_t m = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = u8len((uint8_t)p[i]);
        if (cl > n - i) cl = n - i;
        int32_t id = dt_tok_lookup(t, p + i, cl);
        int fb = id < 0 && t->byte_fallback;
        for (size_t k = 0; fb && k < cl; k++) fb = t->fb_id[(uint8_t)p[i + k]] >= 0;
        if (id >= 0) {
            ids[m++] = id, last_unk = 0;
        } else if (fb) {
            for (size_t k = 0; k < cl; k++) ids[m++] = t->fb_id[(uint8_t)p[i + k]];
            last_unk = 0;
        } else if (t->unk_id >= 0) {
            if (!(t->fuse_unk && last_unk)) ids[m++] = t->unk_id;
            last_unk = 1;
        } else {
            return dt_error_set(DT_ERR_FORMAT,
                                "tokenizer: the character \"%.*s\" at byte %zu is not in the "
                                "vocabulary, has no byte tokens and there is no unk_token",
                                (int)cl, p + i, at);
        }
        i += cl;
    }
    return dt_tok_merge(t, ids, m, out);
}

dt_status dt_tok_sp_encode(dt_tokenizer *t, const char *s, size_t n, int first, dt_tokens *out) {
    const char *cur = s;
    size_t cn = n;
    int k = 0;
    for (int i = 0; i < t->n_norm; i++) {
        const tok_norm *nm = &t->norm[i];
        if (!nm->from && cn == 0) continue; /* Prepend leaves an empty text empty */
        cur = nm->from ? replace(t, k, cur, cn, nm->from, nm->nf, nm->to, nm->nt, NULL, 0, &cn)
                       : replace(t, k, cur, cn, NULL, 0, NULL, 0, nm->to, nm->nt, &cn);
        if (!cur) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
        k ^= 1; /* the next step reads this buffer and writes the other */
    }
    if (t->meta) {
        const char *r = t->meta_rep;
        size_t rl = t->meta_rep_len;
        /* prepended unless the text (its ' ' replaced) starts with the replacement */
        int pre = (t->meta == TOK_META_ALWAYS || (t->meta == TOK_META_FIRST && first)) &&
                  !(cn >= rl && !memcmp(cur, r, rl)) && !(cn && cur[0] == ' ');
        cur = replace(t, k, cur, cn, " ", 1, r, rl, pre ? r : NULL, pre ? rl : 0, &cn);
        if (!cur) return dt_error_set(DT_ERR_NOMEM, "tokenizer: out of memory");
        k ^= 1;
        if (t->meta_split) { /* a word starts at 0 and at every replacement character */
            size_t a = 0;
            for (const char *q = cur + rl, *e = cur + cn;
                 q < e && (q = memmem(q, (size_t)(e - q), r, rl)); q += rl) {
                size_t i = (size_t)(q - cur);
                dt_status st = sp_word(t, cur + a, i - a, a, out);
                if (st) return st;
                a = i;
            }
            return sp_word(t, cur + a, cn - a, a, out);
        }
    }
    return sp_word(t, cur, cn, 0, out);
}

static int is_special(const dt_tokenizer *t, int32_t id, size_t *len, const char **text) {
    for (int i = 0; i < t->n_sp; i++)
        if (t->sp[i].id == id) {
            *len = t->sp[i].len, *text = t->sp[i].text;
            return 1;
        }
    return 0;
}

dt_status dt_tok_sp_decode(const dt_tokenizer *t, const int32_t *ids, int64_t n, char **text,
                           size_t *len) {
    size_t l;
    char *buf;
    dt_status st = dt_tok_decode_buffer(t, ids, n, &buf);
    if (st) return st;
    size_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *b = dt_tokenizer_token_bytes(t, ids[i], &l), *sx;
        size_t sl;
        /* the Metaspace decoder drops every replacement of the first token (byte tokens and
         * special tokens keep their text) */
        int drop = i == 0 && t->dec_meta_first && !is_special(t, ids[i], &sl, &sx) &&
                   !(t->tok_len[ids[i]] == 6 && !memcmp(t->blob + t->tok_off[ids[i]], "<0x", 3));
        for (size_t k = 0; k < l; k++)
            if (!(drop && b[k] == ' ')) buf[pos++] = b[k];
    }
    size_t a = 0, e = pos;
    for (int k = 0; k < t->strip_start && a < e && buf[a] == t->strip_c; k++) a++;
    for (int k = 0; k < t->strip_stop && e > a && buf[e - 1] == t->strip_c; k++) e--;
    memmove(buf, buf + a, e - a);
    buf[e - a] = '\0';
    *text = buf, *len = e - a;
    return DT_OK;
}

void dt_tok_sp_free(dt_tokenizer *t) {
    for (int i = 0; i < t->n_norm; i++) free(t->norm[i].from), free(t->norm[i].to);
    free(t->dec_off), free(t->dec_len), free(t->dblob);
    free(t->nbuf[0]), free(t->nbuf[1]);
}
