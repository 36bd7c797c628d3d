/* Internal layout of dt_tokenizer, shared by the BPE core (tokenizer.c) and the file loaders
 * (tok_load.c). */
#ifndef DT_DATA_TOK_H
#define DT_DATA_TOK_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include "dtrain/tokenizer.h"

enum { TOK_TIKTOKEN = 1, TOK_HF = 2, TOK_MAX_STAGES = 4 };

/* One pre-tokenization regex; pieces of the previous stage are split by it. */
typedef struct tok_stage {
    pcre2_code *re;
    int keep_gaps;        /* HF Split "Isolated": text between matches is a piece too */
    int add_prefix_space; /* HF ByteLevel: prepend ' ' to a segment that lacks one */
} tok_stage;

/* A SentencePiece-style normalizer step: Replace(from -> to), or Prepend(to) when from is NULL. */
typedef struct tok_norm {
    char *from, *to;
    size_t nf, nt;
} tok_norm;

enum { TOK_MAX_NORM = 4, TOK_META_NONE = 0, TOK_META_ALWAYS, TOK_META_FIRST, TOK_META_NEVER };

typedef struct tok_special {
    char *text;
    size_t len;
    int32_t id;
} tok_special;

struct dt_tokenizer {
    int kind;
    char desc[200];
    /* id -> bytes: tok_len[id] == UINT32_MAX marks an unused id */
    int64_t n_ids;
    /* Every id (ordinary or special) is below this: DT_TOK_MAX_IDS, lowered by the file loaders
     * to what the file's size allows (dt_tok_limit_ids), so that a small hostile file cannot
     * make the id tables (8 bytes per id up to the largest) large. */
    int64_t id_limit;
    uint32_t *tok_off, *tok_len;
    char *blob;
    size_t blob_len, blob_cap;
    int32_t byte_id[256];
    int32_t unk_id;
    /* bytes -> id (ordinary tokens): open addressing, slot holds id + 1 (0 = empty) */
    uint32_t *bt;
    uint64_t bt_mask;
    /* (left id, right id) -> merge priority and merged id */
    uint64_t *pk; /* key: left << 32 | right; UINT64_MAX = empty */
    int32_t *prank, *pmerged;
    uint64_t p_mask, p_count;
    int ignore_merges; /* a piece that is itself a token is emitted whole (tiktoken always) */
    /* pre-tokenization */
    tok_stage stages[TOK_MAX_STAGES];
    int n_stages;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    /* special tokens, sorted by decreasing length so the longest match wins */
    tok_special *sp;
    int n_sp;
    uint8_t sp_first[256];
    /* SentencePiece-style BPE (tok_sp.c): tokens are UTF-8 text, BPE starts from characters,
     * a character not in the vocabulary becomes its <0xNN> byte tokens (byte_fallback) or the
     * unknown token (consecutive ones fused with fuse_unk). */
    int spm, byte_fallback, fuse_unk;
    int32_t fb_id[256]; /* id of "<0xNN>", or -1 */
    tok_norm norm[TOK_MAX_NORM];
    int n_norm;
    int meta, meta_split; /* Metaspace pre-tokenizer: TOK_META_* prepend scheme, split on it */
    char meta_rep[8];     /* its replacement character (UTF-8), "\xe2\x96\x81" */
    size_t meta_rep_len;
    /* decoding: each id's text (byte tokens as their byte, the replacement as ' '), then the
     * Metaspace decoder drops the first token's spaces, Strip cuts the fused text's ends */
    uint32_t *dec_off, *dec_len;
    char *dblob;
    int dec_meta_first;
    char strip_c;
    int strip_start, strip_stop;
    char *nbuf[2]; /* normalization scratch */
    size_t nbuf_cap[2];
    /* scratch for BPE */
    int32_t *w_ids, *w_rank;
    int64_t w_cap;
    char *scratch;
    size_t scratch_cap;
};

/* The most ids a tokenizer may have: 16.7M (the largest vocabularies in use have ~256K). */
#define DT_TOK_MAX_IDS ((int64_t)1 << 24)

/* Allocates an empty tokenizer of the given kind. */
dt_tokenizer *dt_tok_init(int kind);
/* Limits the ids of a tokenizer read from a file of file_bytes bytes: below 2^20 + file_bytes
 * (a dense table takes bytes of the file per id; 2^20 leaves room for sparse special ids such
 * as Llama 3's at 128000), and below DT_TOK_MAX_IDS. */
void dt_tok_limit_ids(dt_tokenizer *t, size_t file_bytes);
/* Sets the token bytes of ordinary token `id` (which must be unused and below id_limit). */
dt_status dt_tok_set_token(dt_tokenizer *t, int32_t id, const char *bytes, size_t len);
/* Builds the bytes->id table and the byte ids; `what` names the file for errors. */
dt_status dt_tok_index(dt_tokenizer *t, const char *what);
/* tiktoken: pair table from the ranks (pair rank = rank of the concatenation). */
dt_status dt_tok_pairs_from_ranks(dt_tokenizer *t);
/* HF: adds merge number `rank` (left + right -> merged); a pair added before is an error. */
dt_status dt_tok_add_merge(dt_tokenizer *t, int32_t left, int32_t right, int32_t merged,
                           int32_t rank);
dt_status dt_tok_pairs_reserve(dt_tokenizer *t, uint64_t n);
/* Ordinary id of a byte string, or -1. */
int32_t dt_tok_lookup(const dt_tokenizer *t, const char *bytes, size_t len);
/* Compiles and appends a pre-tokenization stage. */
dt_status dt_tok_add_stage(dt_tokenizer *t, const char *pattern, int keep_gaps,
                           int add_prefix_space, const char *what);

/* Appends one id. */
dt_status dt_tok_push(dt_tokens *o, int32_t id);
/* Merges the m symbols ids[] (scratch, overwritten) by BPE and appends the result. */
dt_status dt_tok_merge(dt_tokenizer *t, int32_t *ids, size_t m, dt_tokens *out);
/* Grows the BPE scratch to n symbols. */
dt_status dt_tok_reserve(dt_tokenizer *t, size_t n);
/* SentencePiece-style encoding of one text segment (no special tokens in it); `first`: the
 * segment starts the encoded string (Metaspace prepend_scheme "first"). tok_sp.c. */
dt_status dt_tok_sp_encode(dt_tokenizer *t, const char *s, size_t n, int first, dt_tokens *out);
/* Checks the ids and allocates a buffer for their token_bytes, plus a NUL. */
dt_status dt_tok_decode_buffer(const dt_tokenizer *t, const int32_t *ids, int64_t n, char **buf);
/* SentencePiece-style decoding (tok_sp.c). */
dt_status dt_tok_sp_decode(const dt_tokenizer *t, const int32_t *ids, int64_t n, char **text,
                           size_t *len);
/* Frees the SentencePiece-style fields. */
void dt_tok_sp_free(dt_tokenizer *t);

#endif
