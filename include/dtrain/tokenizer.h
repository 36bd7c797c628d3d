/* BPE tokenizer: byte-level (tiktoken / Llama 3 / GPT-2 style) or SentencePiece-style (Llama 2,
 * Mistral, Gemma tokenizer.json: normalizer, Metaspace, characters with byte fallback).
 *
 * Loads either a tiktoken rank file ("base64-token rank" per line: OpenAI's cl100k_base, Llama
 * 3's original/tokenizer.model) or a Hugging Face tokenizer.json with a byte-level BPE model
 * (vocab + merges). Text is split by special tokens (when allowed), then pre-tokenized with the
 * model's regex (PCRE2, UTF + UCP, JIT-compiled), then each piece is merged by BPE:
 *   tiktoken: repeatedly merge the adjacent pair whose concatenation has the lowest rank;
 *   HF:       repeatedly merge the adjacent pair with the lowest merge priority;
 * ties go to the leftmost pair, as both libraries do, so ids match theirs exactly.
 *
 * A tokenizer is not thread-safe (it owns regex match data and a piece cache): use one per
 * thread. Input must be valid UTF-8; invalid input is an error naming the byte offset. */
#ifndef DTRAIN_TOKENIZER_H
#define DTRAIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_tokenizer dt_tokenizer;

/* A growable id buffer; zero-initialise it, free with dt_tokens_free. */
typedef struct dt_tokens {
    int32_t *ids;
    int64_t n, cap;
} dt_tokens;
void dt_tokens_free(dt_tokens *t);

/* The cl100k_base / Llama 3 pre-tokenization pattern. */
extern const char DT_TOK_PATTERN_CL100K[];
/* GPT-2's pattern (Hugging Face ByteLevel pre-tokenizer with use_regex). */
extern const char DT_TOK_PATTERN_GPT2[];

/* By file name: "*.json" is a Hugging Face tokenizer.json; anything else a tiktoken rank file,
 * whose pattern and special tokens come from a sibling "<stem>.json" ({"pat_str": ...,
 * "special_tokens": {text: id}}) when there is one; otherwise the cl100k pattern, and for a file
 * of 128,000 ranks Llama 3's 256 special tokens. */
dt_status dt_tokenizer_load(const char *path, dt_tokenizer **out);
/* A tiktoken rank file with an explicit pattern (NULL: cl100k) and no special tokens. */
dt_status dt_tokenizer_load_tiktoken(const char *rank_file, const char *pattern,
                                     dt_tokenizer **out);
/* A Hugging Face tokenizer.json: model BPE over byte-level tokens with pre_tokenizer ByteLevel,
 * Split (regex, Isolated) or a Sequence of those; or SentencePiece-style BPE (byte_fallback,
 * normalizer Prepend / Replace, pre_tokenizer Metaspace, decoders Replace / ByteFallback / Fuse /
 * Strip / Metaspace). Added tokens become special tokens. Anything else is refused naming it. */
dt_status dt_tokenizer_load_hf(const char *json_path, dt_tokenizer **out);
void dt_tokenizer_free(dt_tokenizer *t);

/* Adds a special token (id < 0: the next free id). Fails if the text or id is taken. */
dt_status dt_tokenizer_add_special(dt_tokenizer *t, const char *text, int32_t id);
/* Adds Llama 3's chat tokens (<|begin_of_text|>, <|end_of_text|>, <|start_header_id|>,
 * <|end_header_id|>, <|eot_id|>) that are missing, at the next free ids. */
dt_status dt_tokenizer_add_llama3_chat(dt_tokenizer *t);
/* Id of special token `text`, or -1. */
int32_t dt_tokenizer_special_id(const dt_tokenizer *t, const char *text);
/* One more than the largest id (ordinary or special). */
int64_t dt_tokenizer_vocab_size(const dt_tokenizer *t);
/* A short description, e.g. "tiktoken cl100k_base.tiktoken (100256 ranks, 5 special)". */
const char *dt_tokenizer_describe(const dt_tokenizer *t);

#define DT_TOK_ALLOW_SPECIAL 1 /* recognise special-token text in the input */
/* The text continues a string already encoded (it follows a special token): a SentencePiece
 * Metaspace pre-tokenizer with prepend_scheme "first" does not prepend its "\u2581" to it. */
#define DT_TOK_CONTINUED 2

/* Appends the ids of `len` bytes of UTF-8 to `out`. */
dt_status dt_tokenizer_encode(dt_tokenizer *t, const char *text, size_t len, int flags,
                              dt_tokens *out);
/* Bytes of token `id` (not NUL-terminated); NULL if the id is unknown. For a SentencePiece-style
 * tokenizer, the text the token decodes to ("\u2581a" -> " a", "<0x0A>" -> "\n"). */
const char *dt_tokenizer_token_bytes(const dt_tokenizer *t, int32_t id, size_t *len);
/* Decodes into a malloc'd NUL-terminated buffer (*text; *len excludes the NUL). The bytes may
 * be invalid UTF-8 if the ids split a character. */
dt_status dt_tokenizer_decode(const dt_tokenizer *t, const int32_t *ids, int64_t n, char **text,
                              size_t *len);

/* Offset of the first byte that is not valid UTF-8 (overlong forms, surrogates and values
 * above U+10FFFF are invalid), or len if all is valid. */
size_t dt_utf8_validate(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
