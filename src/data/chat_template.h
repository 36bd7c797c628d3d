/* Chat templates: which model family's template a tokenizer folder carries, and dtrain's own
 * rendering of it (no Jinja). A conversation is rendered as a stream of template literals,
 * control tokens and message contents; the caller tokenizes it the way transformers'
 * apply_chat_template does (text split at the control tokens, each run between them encoded
 * whole) and trains on the bytes marked `train`. */
#ifndef DT_DATA_CHAT_TEMPLATE_H
#define DT_DATA_CHAT_TEMPLATE_H

#include <stddef.h>
#include "dtrain/status.h"
#include "dtrain/tokenizer.h"

typedef enum dt_chat_family {
    DT_CHAT_LLAMA3,  /* Meta-Llama-3-Instruct: headers, content trimmed, <|eot_id|> */
    DT_CHAT_LLAMA31, /* Llama-3.1-Instruct: plus the system header with the knowledge date */
    DT_CHAT_CHATML,  /* Qwen 2 / 2.5: <|im_start|>role\n...<|im_end|>\n, default system */
    DT_CHAT_MISTRAL, /* Mistral-7B-Instruct-v0.3: " [INST] " ... " [/INST]", " " answer </s> */
    DT_CHAT_GEMMA,   /* Gemma 2: <start_of_turn>user|model\n...<end_of_turn>\n, no system */
} dt_chat_family;

typedef struct dt_chat_template {
    dt_chat_family family;
    char bos[64], eos[64]; /* bos/eos token texts ("" none): tokenizer_config.json or defaults */
    char *default_system;  /* ChatML: the system turn the template adds when a chat has none */
    char date[32];         /* Llama 3.1: the template's date_string */
    char origin[512];      /* where it came from, for messages and the manifest */
    int from_config;       /* the family was read off a tokenizer_config.json */
    int bos_set, eos_set;  /* bos / eos were named by the config */
} dt_chat_template;

typedef struct dt_chat_msg {
    const char *role, *content; /* role: "system", "user", "assistant" or another name */
    int train;                  /* 1: the content and its end-of-turn token are trained on */
} dt_chat_msg;

/* Emits the rendering: a control token by its text (the caller maps it to its special id, or
 * encodes it as text when the tokenizer has no such token), or text with a train flag. */
typedef struct dt_chat_emit {
    void *ctx;
    dt_status (*token)(void *ctx, const char *text, int train);
    dt_status (*text)(void *ctx, const char *text, size_t len, int train);
} dt_chat_emit;

/* The template of a tokenizer: `forced` (llama3, llama3.1, chatml, mistral, gemma) if not NULL,
 * else the chat_template of `config_path` (tokenizer_config.json; NULL or absent: Llama 3, as
 * dtrain always did). An unknown family is refused in one line naming the file, the template's
 * first characters and the families supported. Free with dt_chat_template_free. */
dt_status dt_chat_template_load(const char *config_path, const char *forced, dt_chat_template *t);
void dt_chat_template_free(dt_chat_template *t);
const char *dt_chat_family_name(dt_chat_family f);
/* Whether the family renders a system turn (Gemma 2's template raises on one). */
int dt_chat_has_system(dt_chat_family f);
/* Checks that the control tokens the rendering uses (and bos/eos) are special tokens of `tok`
 * (Mistral's [INST] and [/INST] may be plain text, as in v0.2's tokenizer); one line naming the
 * first one missing. */
dt_status dt_chat_template_check(const dt_chat_template *t, const dt_tokenizer *tok);
/* The token a turn ends with (trained on with an assistant turn): <|eot_id|>, <|im_end|>, eos,
 * <end_of_turn>. */
const char *dt_chat_end_token(const dt_chat_template *t);

/* Checks the roles the way the family's template does (alternation, where a system turn may be;
 * DT_ERR_FORMAT with the template's reason) and emits the rendering of msgs[0..n). */
dt_status dt_chat_render(const dt_chat_template *t, const dt_chat_msg *msgs, int n,
                         const dt_chat_emit *e);

#endif
