/* The frame the text and JSONL importers share (import_text.c): the tokenizer, the documents
 * being made (token ids and a loss mask) and the loop over the source files. */
#ifndef DT_DATA_IMPORT_TEXT_H
#define DT_DATA_IMPORT_TEXT_H

#include "data/import.h"
#include "dtrain/tokenizer.h"

struct cJSON;

typedef struct dt_doc_sink {
    dt_tokenizer *tok;
    int32_t bos, eot; /* -1: none */
    dt_tokens ids;    /* the document being made */
    uint8_t *mask;    /* [ids.cap] when has_mask */
    int64_t mask_cap;
    int has_mask;
    /* documents are buffered so the val split can be drawn over all of them */
    uint32_t *all_tok;
    uint8_t *all_mask;
    int64_t *doc_end;
    int64_t n_tok, cap_tok, n_doc, cap_doc;
    /* JSONL: records skipped as malformed, and the first one's message */
    int64_t skipped;
    char first_skip[512];
    void *user; /* the importer's own state */
} dt_doc_sink;

/* Appends token `id` with mask value m. */
dt_status dt_sink_push(dt_doc_sink *s, int32_t id, uint8_t m);
/* Encodes text (no special tokens recognised) and masks every new token with m. */
dt_status dt_sink_text(dt_doc_sink *s, const char *text, size_t len, uint8_t m);
/* Moves the current document into the buffer of all documents. */
dt_status dt_sink_end_doc(dt_doc_sink *s);

/* Called once the tokenizer is loaded: sets bos/eot, may add tokens, adds to the manifest's
 * meta object. */
typedef dt_status (*dt_sink_setup_fn)(dt_import *im, dt_doc_sink *s, const char *tok_path,
                                      struct cJSON *meta);
/* Called with each source file's bytes. */
typedef dt_status (*dt_sink_file_fn)(dt_import *im, dt_doc_sink *s, const char *path, const char *t,
                                     size_t len);

/* Collects the files of srcs, loads the tokenizer, runs setup, hands each file to `file`, then
 * writes the dataset (with a loss mask when `mask`); s->user = user. */
dt_status dt_import_files(dt_import *im, const char *const *srcs, int n, int mask, void *user,
                          dt_sink_setup_fn setup, dt_sink_file_fn file);

#endif
