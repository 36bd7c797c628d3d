/* JSON helpers shared by the tokenizer.json readers (tok_load.c, tok_load_sp.c). */
#ifndef DT_DATA_TOK_JSON_H
#define DT_DATA_TOK_JSON_H

#include <cjson/cJSON.h>
#include "data/tok.h"

/* Member k of object o (NULL if o is NULL or has none). */
static inline const cJSON *dt_tok_json_get(const cJSON *o, const char *k) {
    return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}
/* An optional member: absent, null, or what is(v) accepts; else one line naming the field. */
dt_status dt_tok_json_opt(const char *path, const cJSON *o, const char *field, const char *key,
                          cJSON_bool (*is)(const cJSON *), const char *want);
/* A "type"d component (normalizer, pre_tokenizer, decoder): its type string, or NULL with the
 * error set (field names it: "pre_tokenizer.pretokenizers[1]"). */
const char *dt_tok_json_type(const char *path, const cJSON *c, const char *field);

/* Calls fn(ctx, item, path, "FIELD.KEY[i]") for each item of the list seq[key] (a Sequence's
 * normalizers, pretokenizers or decoders; `what` names them for the error of a missing list). */
typedef dt_status (*dt_tok_json_fn)(void *ctx, const cJSON *item, const char *path,
                                    const char *field);
dt_status dt_tok_json_each(const cJSON *seq, const char *key, const char *what, const char *path,
                           const char *field, dt_tok_json_fn fn, void *ctx);

/* SentencePiece-style tokenizer.json parts (tok_load_sp.c), into t's sp fields. */
dt_status dt_tok_sp_normalizer(dt_tokenizer *t, const cJSON *n, const char *path,
                               const char *field);
dt_status dt_tok_sp_pretok(dt_tokenizer *t, const cJSON *pt, const char *path, const char *field);
/* The decoder; needs the vocabulary (it builds each id's decoded text). */
dt_status dt_tok_sp_decoder(dt_tokenizer *t, const cJSON *d, const char *path);

#endif
