/* The JSONL importer: instruction records in the formats users bring (OpenAI messages, ShareGPT,
 * Alpaca, prompt/response, prompt/completion), rendered with the model's chat template
 * (chat_template.c) and a loss mask over the assistant turns. A malformed record is reported
 * with its file and line and skipped (counted), or refuses the import with --strict. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/chat_template.h"
#include "data/import_text.h"

enum { FMT_AUTO, FMT_MESSAGES, FMT_SHAREGPT, FMT_ALPACA, FMT_COMPLETION, FMT_PROMPT_RESPONSE };
static const char *const FMT_NAMES[] = {"auto",   "messages",   "sharegpt",
                                        "alpaca", "completion", "prompt-response"};
#define FORMATS                                                                                    \
    "messages ({\"messages\": [{\"role\", \"content\"}]}), sharegpt ({\"conversations\": "         \
    "[{\"from\", \"value\"}]}), alpaca ({\"instruction\", \"input\", \"output\"}), completion "    \
    "({\"prompt\", \"completion\"}), prompt-response ({\"prompt\", \"response\"})"

typedef struct jsonl_state {
    int fmt;
    dt_chat_template tpl;
    int have_tpl;
    int32_t comp_bos, comp_eos; /* completion records: no template, these around the text */
    /* the rendering's text since the last control token, and each byte's train flag */
    char *txt;
    uint8_t *flag;
    size_t n, cap;
    dt_chat_msg *msgs;
    int n_msgs, cap_msgs;
    char *joined; /* Alpaca's instruction + "\n\n" + input */
} jsonl_state;

/* ---- the rendering, tokenized as transformers does: text runs between control tokens ---- */

static dt_status em_text(void *ctx, const char *text, size_t len, int train) {
    jsonl_state *js = ((dt_doc_sink *)ctx)->user;
    if (js->n + len > js->cap) {
        size_t c = js->cap ? js->cap : 4096;
        while (c < js->n + len) c *= 2;
        char *t = realloc(js->txt, c);
        if (t) js->txt = t;
        uint8_t *f = realloc(js->flag, c);
        if (f) js->flag = f;
        if (!t || !f) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        js->cap = c;
    }
    memcpy(js->txt + js->n, text, len);
    memset(js->flag + js->n, train, len);
    js->n += len;
    return DT_OK;
}

/* Encodes the pending text as one run; a token is trained on when any of its bytes is. */
static dt_status flush(dt_doc_sink *s) {
    jsonl_state *js = s->user;
    int64_t first = s->ids.n;
    dt_status st = js->n ? dt_sink_text(s, js->txt, js->n, 0) : DT_OK;
    /* The tokens' text is the run's, after what a SentencePiece-style normalizer prepends
     * (Prepend("\u2581"): one ' ' more at the start): those bytes map to no byte of the run. */
    size_t total = 0, l;
    for (int64_t i = first; !st && i < s->ids.n; i++)
        if (dt_tokenizer_token_bytes(s->tok, s->ids.ids[i], &l)) total += l;
    size_t pos = 0, skip = total > js->n ? total - js->n : 0;
    for (int64_t i = first; !st && i < s->ids.n; i++) {
        l = 0;
        dt_tokenizer_token_bytes(s->tok, s->ids.ids[i], &l);
        for (size_t k = pos > skip ? pos - skip : 0; k + skip < pos + l && k < js->n; k++)
            s->mask[i] |= js->flag[k];
        pos += l;
    }
    js->n = 0;
    return st;
}

static dt_status em_token(void *ctx, const char *text, int train) {
    dt_doc_sink *s = ctx;
    int32_t id = dt_tokenizer_special_id(s->tok, text);
    if (id < 0) return em_text(ctx, text, strlen(text), train); /* e.g. v0.2's [INST] */
    dt_status st = flush(s);
    return st ? st : dt_sink_push(s, id, (uint8_t)train);
}

/* ---- records -> conversations ---- */

static const char *str_field(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static dt_status add_msg(jsonl_state *js, const char *role, const char *content) {
    if (js->n_msgs == js->cap_msgs) {
        int c = js->cap_msgs ? js->cap_msgs * 2 : 16;
        dt_chat_msg *m = realloc(js->msgs, (size_t)c * sizeof *m);
        if (!m) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        js->msgs = m, js->cap_msgs = c;
    }
    js->msgs[js->n_msgs++] = (dt_chat_msg){role, content, 0};
    return DT_OK;
}

static int detect(const cJSON *r) {
    if (cJSON_GetObjectItemCaseSensitive(r, "messages")) return FMT_MESSAGES;
    if (cJSON_GetObjectItemCaseSensitive(r, "conversations")) return FMT_SHAREGPT;
    if (cJSON_GetObjectItemCaseSensitive(r, "instruction")) return FMT_ALPACA;
    if (cJSON_GetObjectItemCaseSensitive(r, "completion")) return FMT_COMPLETION;
    if (cJSON_GetObjectItemCaseSensitive(r, "response")) return FMT_PROMPT_RESPONSE;
    return FMT_AUTO;
}

/* messages: [{"role", "content"}]; sharegpt: [{"from", "value"}] with from human/user,
 * gpt/assistant, system. */
static dt_status turns(jsonl_state *js, const cJSON *r, int fmt, const char *where) {
    const char *key = fmt == FMT_MESSAGES ? "messages" : "conversations";
    const char *rk = fmt == FMT_MESSAGES ? "role" : "from";
    const char *ck = fmt == FMT_MESSAGES ? "content" : "value";
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r, key), *m;
    if (!cJSON_IsArray(arr))
        return dt_error_set(DT_ERR_FORMAT, "%s: \"%s\" must be an array", where, key);
    int k = 0;
    cJSON_ArrayForEach(m, arr) {
        const char *role = str_field(m, rk), *content = str_field(m, ck);
        if (!role || !content || !*role)
            return dt_error_set(DT_ERR_FORMAT, "%s: %s[%d] needs string \"%s\" and \"%s\"", where,
                                key, k, rk, ck);
        if (fmt == FMT_SHAREGPT) {
            const char *from = role;
            role = !strcmp(from, "human") || !strcmp(from, "user")      ? "user"
                   : !strcmp(from, "gpt") || !strcmp(from, "assistant") ? "assistant"
                   : !strcmp(from, "system")                            ? "system"
                                                                        : NULL;
            if (!role)
                return dt_error_set(DT_ERR_FORMAT,
                                    "%s: conversations[%d]: \"from\" is \"%.40s\" (human, user, "
                                    "gpt, assistant or system)",
                                    where, k, from);
        }
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: messages[%d]: role \"%.40s\" (dtrain renders system, user "
                                "and assistant turns only)",
                                where, k, role);
        dt_status st = add_msg(js, role, content);
        if (st) return st;
        k++;
    }
    return DT_OK;
}

/* The conversation of record r (js->msgs), or its tokens for a completion record. */
static dt_status record(dt_import *im, dt_doc_sink *s, const cJSON *r, const char *where) {
    jsonl_state *js = s->user;
    js->n_msgs = 0;
    int fmt = js->fmt == FMT_AUTO ? detect(r) : js->fmt;
    const char *sys = str_field(r, "system"), *prompt = str_field(r, "prompt");
    dt_status st = DT_OK;
    if (fmt == FMT_COMPLETION) { /* no template: BOS PROMPT (masked) COMPLETION EOS (trained) */
        const char *comp = str_field(r, "completion");
        if (!prompt || !comp)
            return dt_error_set(DT_ERR_FORMAT, "%s: needs string \"prompt\" and \"completion\"",
                                where);
        if (js->comp_bos >= 0) st = dt_sink_push(s, js->comp_bos, 0);
        if (!st) st = dt_sink_text(s, prompt, strlen(prompt), 0);
        if (!st) st = dt_sink_text(s, comp, strlen(comp), 1);
        if (!st && js->comp_eos >= 0) st = dt_sink_push(s, js->comp_eos, 1);
        return st;
    }
    if (!js->have_tpl)
        return dt_error_set(DT_ERR_FORMAT, "%s: a chat record, but --format completion", where);
    if (fmt == FMT_MESSAGES || fmt == FMT_SHAREGPT) {
        st = turns(js, r, fmt, where); /* a top-level "system" (some ShareGPT sets) is below */
    } else if (fmt == FMT_ALPACA) {
        const char *ins = str_field(r, "instruction"), *out = str_field(r, "output");
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(r, "input");
        if (!ins || !out || (in && !cJSON_IsString(in) && !cJSON_IsNull(in)))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: Alpaca needs string \"instruction\" and \"output\" (and "
                                "\"input\" a string if given)",
                                where);
        const char *inp = cJSON_IsString(in) ? in->valuestring : "";
        size_t a = strlen(ins), b = strlen(inp);
        char *j = realloc(js->joined, a + b + 3);
        if (!j) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        js->joined = j;
        memcpy(j, ins, a);
        if (b) memcpy(j + a, "\n\n", 2), memcpy(j + a + 2, inp, b);
        j[a + (b ? b + 2 : 0)] = 0;
        st = add_msg(js, "user", j);
        if (!st) st = add_msg(js, "assistant", out);
    } else if (fmt == FMT_PROMPT_RESPONSE && prompt && str_field(r, "response")) {
        st = add_msg(js, "user", prompt);
        if (!st) st = add_msg(js, "assistant", str_field(r, "response"));
    } else {
        return dt_error_set(DT_ERR_FORMAT, "%s: expected a record of %s%s", where,
                            js->fmt == FMT_AUTO ? "one of " : "--format ",
                            js->fmt == FMT_AUTO ? FORMATS : FMT_NAMES[js->fmt]);
    }
    /* the record's "system", else --system, unless the conversation opens with a system turn */
    if (!sys) sys = im->o->system;
    if (!st && sys && (js->n_msgs == 0 || strcmp(js->msgs[0].role, "system"))) {
        if ((st = add_msg(js, "system", sys))) return st; /* then moved to the front */
        dt_chat_msg m = js->msgs[js->n_msgs - 1];
        memmove(js->msgs + 1, js->msgs, (size_t)(js->n_msgs - 1) * sizeof m);
        js->msgs[0] = m;
    }
    if (st) return st;
    int last = -1;
    for (int i = 0; i < js->n_msgs; i++)
        if (!strcmp(js->msgs[i].role, "assistant"))
            js->msgs[i].train = !im->o->train_last, last = i;
    if (last < 0) return dt_error_set(DT_ERR_FORMAT, "%s: no assistant message to train on", where);
    js->msgs[last].train = 1;
    dt_chat_emit e = {s, em_token, em_text};
    st = dt_chat_render(&js->tpl, js->msgs, js->n_msgs, &e);
    if (st == DT_ERR_FORMAT) {
        char m[512];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(st, "%s: %s", where, m);
    }
    return st ? st : flush(s);
}

/* A record's problem (DT_ERR_FORMAT): refuses the import with --strict, else is reported (the
 * first few) and counted. */
static dt_status malformed(dt_import *im, dt_doc_sink *s, dt_status st) {
    jsonl_state *js = s->user;
    s->ids.n = 0, js->n = 0; /* drop what the record had rendered */
    if (st != DT_ERR_FORMAT || im->o->strict) return st;
    if (!s->skipped++) snprintf(s->first_skip, sizeof s->first_skip, "%s", dt_last_error());
    if (s->skipped <= 5) dt_import_note(im, "%s (skipped)", dt_last_error());
    dt_error_clear();
    return DT_OK;
}

static dt_status jsonl_file(dt_import *im, dt_doc_sink *s, const char *path, const char *t,
                            size_t len) {
    dt_status st = DT_OK;
    int64_t line = 0;
    for (size_t i = 0; !st && i < len;) {
        line++;
        size_t e = i;
        while (e < len && t[e] != '\n') e++;
        size_t bad = dt_utf8_validate(t + i, e - i), k = i;
        while (k < e && (t[k] == ' ' || t[k] == '\t' || t[k] == '\r')) k++;
        cJSON *r = NULL;
        if (bad < e - i) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s:%" PRId64 ":%zu: invalid UTF-8 (byte offset %zu, byte 0x%02x)",
                              path, line, bad + 1, i + bad, (uint8_t)t[i + bad]);
        } else if (k < e) {
            const char *end = NULL;
            r = cJSON_ParseWithLengthOpts(t + i, e - i, &end, 0);
            while (r && end && end < t + e && (*end == ' ' || *end == '\t' || *end == '\r')) end++;
            if (r && end && end < t + e) { /* text after the object */
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s:%" PRId64 ":%zu: unexpected text after the JSON object", path,
                                  line, (size_t)(end - (t + i)) + 1);
            } else if (!cJSON_IsObject(r)) {
                const char *ep = r ? t + i : cJSON_GetErrorPtr();
                size_t col = ep && ep >= t + i && ep <= t + e ? (size_t)(ep - (t + i)) + 1 : 1;
                st = dt_error_set(DT_ERR_FORMAT, "%s:%" PRId64 ":%zu: %s", path, line, col,
                                  r ? "the line is not a JSON object" : "malformed JSON");
            } else {
                char where[4200];
                snprintf(where, sizeof where, "%s:%" PRId64, path, line);
                st = record(im, s, r, where);
                if (!st) st = dt_sink_end_doc(s);
            }
        }
        cJSON_Delete(r);
        if (st) st = malformed(im, s, st);
        i = e + 1;
    }
    return st;
}

static int format_of(const dt_import_options *o) {
    for (int i = 0; i < 6; i++)
        if (!strcmp(o->format ? o->format : "auto", FMT_NAMES[i])) return i;
    return -1;
}

dt_status dt_import_jsonl_check(const dt_import_options *o) {
    if (format_of(o) < 0)
        return dt_error_set(DT_ERR_INVALID,
                            "--format %s: unknown (auto, messages, sharegpt, alpaca, completion, "
                            "prompt-response)",
                            o->format);
    dt_chat_template t;
    dt_status st = o->chat_template ? dt_chat_template_load(NULL, o->chat_template, &t) : DT_OK;
    if (o->chat_template) dt_chat_template_free(&t);
    return st;
}

/* After the tokenizer is loaded: the format, the template and its tokens. */
static dt_status jsonl_setup(dt_import *im, dt_doc_sink *s, const char *tok_path, cJSON *meta) {
    jsonl_state *js = s->user;
    const dt_import_options *o = im->o;
    dt_status st = dt_import_jsonl_check(o);
    if (st) return st;
    js->fmt = format_of(o);
    char *cfg = dt_import_tokenizer_config(tok_path);
    if (!cfg) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    /* completion records use only bos/eos: any template, known or not, is not read */
    int chat = js->fmt != FMT_COMPLETION;
    st = dt_chat_template_load(cfg, chat ? o->chat_template : "llama3", &js->tpl);
    free(cfg);
    if (st) return st;
    js->have_tpl = chat;
    int64_t v0 = dt_tokenizer_vocab_size(s->tok);
    dt_chat_family f = js->tpl.family;
    /* Llama 3's tokens may be missing from a plain tokenizer (a .tiktoken file, a base model):
     * dtrain adds them at the next free ids, as it always did, unless a template named them */
    if (chat && f <= DT_CHAT_LLAMA31 && !js->tpl.from_config)
        st = dt_tokenizer_add_llama3_chat(s->tok);
    if (!st && chat) st = dt_chat_template_check(&js->tpl, s->tok);
    if (!st && chat && o->system && !dt_chat_has_system(f))
        st = dt_error_set(DT_ERR_INVALID,
                          "--system: the Gemma 2 template has no system role (it raises "
                          "\"System role not supported\")");
    if (st) return st;
    /* completion: bos/eos of the config if it names them, else the text importer's */
    int32_t b = dt_tokenizer_special_id(s->tok, js->tpl.bos);
    int32_t eo = dt_tokenizer_special_id(s->tok, js->tpl.eos);
    js->comp_bos = js->tpl.bos_set ? b : s->bos;
    js->comp_eos = js->tpl.eos_set ? eo : s->eot;
    if (chat) {
        s->bos = js->tpl.bos[0] ? b : -1;
        s->eot = dt_tokenizer_special_id(s->tok, dt_chat_end_token(&js->tpl));
        cJSON_AddStringToObject(meta, "template", dt_chat_family_name(f));
        cJSON_AddStringToObject(meta, "template_from", js->tpl.origin);
        dt_import_note(im, "chat template %s (%s)", dt_chat_family_name(f), js->tpl.origin);
    } else {
        s->eot = js->comp_eos;
    }
    if (dt_tokenizer_vocab_size(s->tok) == v0) cJSON_AddBoolToObject(meta, "tokenizer_as_is", 1);
    return DT_OK;
}

dt_status dt_import_jsonl(dt_import *im, const char *const *srcs, int n) {
    jsonl_state js = {.comp_bos = -1, .comp_eos = -1};
    dt_status st = dt_import_files(im, srcs, n, 1, &js, jsonl_setup, jsonl_file);
    dt_chat_template_free(&js.tpl);
    free(js.txt), free(js.flag), free(js.msgs), free(js.joined);
    return st;
}
