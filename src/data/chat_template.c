/* Chat templates without Jinja: a tokenizer_config.json's chat_template is recognised by the
 * markers of the families dtrain renders, and rendered here the way the published templates
 * render a conversation of plain-text messages (no tools, no generation prompt):
 *
 *   llama3    <bos><|start_header_id|>ROLE<|end_header_id|>\n\nTRIM(CONTENT)<|eot_id|>...
 *   llama3.1  the same after a system turn that always comes first: "Cutting Knowledge Date:
 *             December 2023\nToday Date: DATE\n\n" + TRIM(system content)
 *   chatml    <|im_start|>ROLE\nCONTENT<|im_end|>\n ... (no bos); a chat without a system turn
 *             gets the template's default one (Qwen 2: "You are a helpful assistant.")
 *   mistral   <s> [INST] (SYSTEM\n\n)USER [/INST] ASSISTANT</s> [INST] ... (v0.3: the system
 *             content opens the first user turn)
 *   gemma     <bos><start_of_turn>user\nTRIM(CONTENT)<end_of_turn>\n<start_of_turn>model\n...
 *
 * TRIM is Jinja's trim filter (Python's str.strip: Unicode whitespace at both ends). */
#include "data/chat_template.h"
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/file.h"

static const char *const FAMILY_NAMES[] = {"llama3", "llama3.1", "chatml", "mistral", "gemma"};
#define SUPPORTED                                                                                  \
    "supported: Llama 3 / 3.1 (<|start_header_id|>), ChatML as Qwen 2 uses (<|im_start|>), "       \
    "Mistral-7B-Instruct-v0.3 [INST], Gemma 2 <start_of_turn>; --template llama3|llama3.1|"        \
    "chatml|mistral|gemma chooses one"

const char *dt_chat_family_name(dt_chat_family f) {
    return FAMILY_NAMES[f];
}

int dt_chat_has_system(dt_chat_family f) {
    return f != DT_CHAT_GEMMA;
}

const char *dt_chat_end_token(const dt_chat_template *t) {
    switch (t->family) {
    case DT_CHAT_CHATML:
        return "<|im_end|>";
    case DT_CHAT_MISTRAL:
        return t->eos;
    case DT_CHAT_GEMMA:
        return "<end_of_turn>";
    default:
        return "<|eot_id|>";
    }
}

void dt_chat_template_free(dt_chat_template *t) {
    free(t->default_system);
    t->default_system = NULL;
}

static void defaults(dt_chat_template *t) {
    static const char *const bos[] = {"<|begin_of_text|>", "<|begin_of_text|>", "", "<s>", "<bos>"};
    static const char *const eos[] = {"<|eot_id|>", "<|eot_id|>", "<|im_end|>", "</s>", "<eos>"};
    snprintf(t->bos, sizeof t->bos, "%s", bos[t->family]);
    snprintf(t->eos, sizeof t->eos, "%s", eos[t->family]);
    if (t->family == DT_CHAT_LLAMA31) snprintf(t->date, sizeof t->date, "26 Jul 2024");
}

/* bos_token / eos_token: a string, {"content": string} (older configs), or null (none). */
static dt_status special_field(const char *path, const cJSON *cfg, const char *key, char *out,
                               size_t n, int *set) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v) return DT_OK; /* the family's default */
    *set = 1;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (cJSON_IsNull(v)) {
        out[0] = 0;
        return DT_OK;
    }
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= n)
        return dt_error_set(DT_ERR_FORMAT, "%s: %s must be a token text (at most %zu bytes)", path,
                            key, n - 1);
    snprintf(out, n, "%s", v->valuestring);
    return DT_OK;
}

/* Undoes a Jinja string literal's escapes (\n, \t, \\, \', \") in s[0..n). */
static char *unescape(const char *s, size_t n) {
    char *o = malloc(n + 1), *p = o;
    for (size_t i = 0; o && i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[++i];
            *p++ = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
            *p++ = s[i];
        }
    }
    if (o) *p = 0;
    return o;
}

/* ChatML's default system turn: a literal '<|im_start|>system\n' followed by text (no quote,
 * so not a concatenation) up to <|im_end|>. */
static char *chatml_default_system(const char *tpl) {
    static const char mark[] = "<|im_start|>system\\n";
    for (const char *p = strstr(tpl, mark); p; p = strstr(p + 1, mark)) {
        const char *a = p + sizeof mark - 1, *b = strstr(a, "<|im_end|>");
        if (b && b > a && !memchr(a, '\'', (size_t)(b - a)) && !memchr(a, '"', (size_t)(b - a)))
            return unescape(a, (size_t)(b - a));
    }
    return NULL;
}

static dt_status refuse(const char *path, const char *tpl, const char *why) {
    char head[48];
    size_t k = 0;
    for (const char *p = tpl; *p && k < 40; p++) head[k++] = *p == '\n' ? ' ' : *p;
    while (k > 0 && ((unsigned char)tpl[k] & 0xc0) == 0x80) k--; /* whole UTF-8 characters */
    head[k] = 0;
    return dt_error_set(DT_ERR_FORMAT, "%s: chat_template \"%s%s\" %s (" SUPPORTED ")", path, head,
                        strlen(tpl) > 40 ? "..." : "", why);
}

/* The family of template text `tpl`, by its markers (docs/data.md lists them). */
static dt_status recognise(const char *path, const char *tpl, dt_chat_template *t) {
    if (strstr(tpl, "<|start_header_id|>") && strstr(tpl, "<|eot_id|>")) {
        if (strstr(tpl, "strftime_now"))
            return refuse(path, tpl,
                          "writes the day of the import into the system turn (strftime_now, "
                          "Llama 3.2): dtrain does not render it");
        t->family = strstr(tpl, "Cutting Knowledge Date") ? DT_CHAT_LLAMA31 : DT_CHAT_LLAMA3;
        defaults(t);
        if (t->family == DT_CHAT_LLAMA31) {
            const char *d = strstr(tpl, "date_string = \"");
            const char *e = d ? strchr(d + 15, '"') : NULL;
            if (!e || (size_t)(e - d - 15) >= sizeof t->date)
                return refuse(path, tpl,
                              "has the Llama 3.1 system header but no fixed date_string");
            snprintf(t->date, sizeof t->date, "%.*s", (int)(e - d - 15), d + 15);
        }
        return DT_OK;
    }
    if (strstr(tpl, "<|im_start|>") && strstr(tpl, "<|im_end|>")) {
        if (strstr(tpl, "<think>"))
            return refuse(path, tpl, "renders reasoning (<think>, Qwen 3): dtrain does not");
        t->family = DT_CHAT_CHATML;
        defaults(t);
        t->default_system = chatml_default_system(tpl);
        return DT_OK;
    }
    if (strstr(tpl, "[INST]") && strstr(tpl, "[/INST]")) {
        /* v0.3's form; v0.1/v0.2's first template (no system, no leading spaces), Nemo's (system
         * in the last user turn) and the tokenizer-v7 ones ([SYSTEM_PROMPT]) render otherwise */
        if (!strstr(tpl,
                    "' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]'") ||
            !strstr(tpl, "loop.first and system_message") ||
            !strstr(tpl, "' ' + message['content'] + eos_token"))
            return refuse(path, tpl,
                          "is an [INST] template other than Mistral-7B-Instruct-v0.3's (the "
                          "system content opening the first user turn, \" [INST] \", \" \" "
                          "before each answer)");
        t->family = DT_CHAT_MISTRAL;
        defaults(t);
        return DT_OK;
    }
    if (strstr(tpl, "<start_of_turn>") && strstr(tpl, "<end_of_turn>")) {
        if (!strstr(tpl, "System role not supported"))
            return refuse(path, tpl,
                          "is a <start_of_turn> template other than Gemma 2's (which refuses a "
                          "system turn; Gemma 3's folds it into the first user turn)");
        t->family = DT_CHAT_GEMMA;
        defaults(t);
        return DT_OK;
    }
    return refuse(path, tpl, "is not a template dtrain renders");
}

dt_status dt_chat_template_load(const char *config_path, const char *forced, dt_chat_template *t) {
    memset(t, 0, sizeof *t);
    if (forced) {
        int f = -1;
        for (int i = 0; i < 5; i++)
            if (!strcmp(forced, FAMILY_NAMES[i])) f = i;
        if (f < 0)
            return dt_error_set(DT_ERR_INVALID,
                                "--template %s: unknown (llama3, llama3.1, chatml, mistral, gemma)",
                                forced);
        t->family = (dt_chat_family)f;
        defaults(t);
        snprintf(t->origin, sizeof t->origin, "--template %s", forced);
    } else {
        t->family = DT_CHAT_LLAMA3;
        defaults(t);
        snprintf(t->origin, sizeof t->origin, "dtrain's default (Llama 3)");
    }
    if (!config_path || !dt_path_exists(config_path)) return DT_OK;
    uint8_t *txt;
    size_t len;
    dt_status st = dt_read_file_max(config_path, 0, 16 << 20, "a tokenizer config", &txt, &len);
    if (st) return st;
    cJSON *cfg = cJSON_ParseWithLength((const char *)txt, len);
    free(txt);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return dt_error_set(DT_ERR_FORMAT, "%s: not a JSON object", config_path);
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsArray(ct)) { /* [{"name": "default", "template": ...}, {"name": "tool_use"...}] */
        const cJSON *e, *pick = NULL;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default"))
                pick = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        ct = pick;
        if (!cJSON_IsString(ct))
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: chat_template is a list without a \"default\" "
                              "template",
                              config_path);
    } else if (ct && !cJSON_IsString(ct) && !cJSON_IsNull(ct)) {
        st = dt_error_set(DT_ERR_FORMAT, "%s: chat_template must be a string", config_path);
    }
    if (!st && !forced && cJSON_IsString(ct)) {
        st = recognise(config_path, ct->valuestring, t);
        t->from_config = 1;
        const char *b = strrchr(config_path, '/');
        snprintf(t->origin, sizeof t->origin, "%s's chat_template", b ? b + 1 : config_path);
    }
    if (!st) st = special_field(config_path, cfg, "bos_token", t->bos, sizeof t->bos, &t->bos_set);
    if (!st) st = special_field(config_path, cfg, "eos_token", t->eos, sizeof t->eos, &t->eos_set);
    cJSON_Delete(cfg);
    if (st) dt_chat_template_free(t);
    return st;
}

dt_status dt_chat_template_check(const dt_chat_template *t, const dt_tokenizer *tok) {
    const char *need[6] = {t->bos, t->eos, NULL, NULL, NULL, NULL};
    if (t->family <= DT_CHAT_LLAMA31)
        need[2] = "<|start_header_id|>", need[3] = "<|end_header_id|>", need[4] = "<|eot_id|>";
    else if (t->family == DT_CHAT_CHATML)
        need[2] = "<|im_start|>", need[3] = "<|im_end|>";
    else if (t->family == DT_CHAT_GEMMA)
        need[2] = "<start_of_turn>", need[3] = "<end_of_turn>";
    for (int i = 0; i < 6; i++)
        if (need[i] && need[i][0] && dt_tokenizer_special_id(tok, need[i]) < 0)
            return dt_error_set(DT_ERR_FORMAT,
                                "chat template %s (%s): the tokenizer %s has no special token "
                                "%s",
                                FAMILY_NAMES[t->family], t->origin, dt_tokenizer_describe(tok),
                                need[i]);
    return DT_OK;
}

/* ---- rendering ---- */

/* Length of the Python-whitespace code point at s[0..n) (0 if none): ASCII \t\n\v\f\r, \x1c-\x1f,
 * space, and U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. */
static size_t space_at(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 9 && s[0] <= 13) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n < 3) return 0;
    unsigned c = ((s[0] & 15u) << 12) | ((s[1] & 63u) << 6) | (s[2] & 63u);
    if ((s[0] & 0xf0) != 0xe0) return 0;
    return c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
                   c == 0x202f || c == 0x205f || c == 0x3000
               ? 3
               : 0;
}

/* Start of the code point that ends at s[n). */
static size_t last_cp(const unsigned char *s, size_t n) {
    size_t k = n - 1;
    while (k > 0 && (s[k] & 0xc0) == 0x80 && n - k < 4) k--;
    return k;
}

static dt_status emit_trim(const dt_chat_emit *e, const char *s, int train) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), k;
    while (n && (k = space_at(p, n))) p += k, n -= k;
    while (n) {
        size_t a = last_cp(p, n);
        if (space_at(p + a, n - a) != n - a) break;
        n = a;
    }
    return e->text(e->ctx, (const char *)p, n, train);
}

static dt_status lit(const dt_chat_emit *e, const char *s) {
    return e->text(e->ctx, s, strlen(s), 0);
}

static dt_status bos(const dt_chat_template *t, const dt_chat_emit *e) {
    return t->bos[0] ? e->token(e->ctx, t->bos, 0) : DT_OK;
}

static dt_status render_llama(const dt_chat_template *t, const dt_chat_msg *m, int n,
                              const dt_chat_emit *e) {
    dt_status st = bos(t, e);
    int i = 0;
    if (t->family == DT_CHAT_LLAMA31) { /* the system turn always comes first */
        const char *sys = n > 0 && !strcmp(m[0].role, "system") ? m[0].content : "";
        i = n > 0 && !strcmp(m[0].role, "system");
        if (!st) st = e->token(e->ctx, "<|start_header_id|>", 0);
        if (!st) st = lit(e, "system");
        if (!st) st = e->token(e->ctx, "<|end_header_id|>", 0);
        if (!st) st = lit(e, "\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        if (!st) st = lit(e, t->date);
        if (!st) st = lit(e, "\n\n");
        if (!st) st = emit_trim(e, sys, 0);
        if (!st) st = e->token(e->ctx, "<|eot_id|>", 0);
    }
    for (; !st && i < n; i++) {
        st = e->token(e->ctx, "<|start_header_id|>", 0);
        if (!st) st = lit(e, m[i].role);
        if (!st) st = e->token(e->ctx, "<|end_header_id|>", 0);
        if (!st) st = lit(e, "\n\n");
        if (!st) st = emit_trim(e, m[i].content, m[i].train);
        if (!st) st = e->token(e->ctx, "<|eot_id|>", m[i].train);
    }
    return st;
}

static dt_status render_chatml(const dt_chat_template *t, const dt_chat_msg *m, int n,
                               const dt_chat_emit *e) {
    dt_status st = DT_OK;
    if (t->default_system && (n == 0 || strcmp(m[0].role, "system"))) {
        st = e->token(e->ctx, "<|im_start|>", 0);
        if (!st) st = lit(e, "system\n");
        if (!st) st = lit(e, t->default_system);
        if (!st) st = e->token(e->ctx, "<|im_end|>", 0);
        if (!st) st = lit(e, "\n");
    }
    for (int i = 0; !st && i < n; i++) {
        st = e->token(e->ctx, "<|im_start|>", 0);
        if (!st) st = lit(e, m[i].role);
        if (!st) st = lit(e, "\n");
        if (!st) st = e->text(e->ctx, m[i].content, strlen(m[i].content), m[i].train);
        if (!st) st = e->token(e->ctx, "<|im_end|>", m[i].train);
        if (!st) st = lit(e, "\n");
    }
    return st;
}

/* The templates' own alternation rule: turn i (after Mistral's optional system turn) is a user
 * turn exactly when i is even. */
static dt_status alternate(const dt_chat_msg *m, int n, const char *why) {
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].role, "user") != (i % 2 == 0))
            return dt_error_set(DT_ERR_FORMAT, "%s (turn %d is %s)", why, i, m[i].role);
    return DT_OK;
}

static dt_status render_mistral(const dt_chat_template *t, const dt_chat_msg *m, int n,
                                const dt_chat_emit *e) {
    const char *sys = n > 0 && !strcmp(m[0].role, "system") ? m[0].content : NULL;
    if (sys) m++, n--;
    dt_status st = alternate(m, n,
                             "the Mistral template: after the optional system message, "
                             "conversation roles must alternate user/assistant/user/assistant/...");
    for (int i = 0; !st && i < n; i++)
        if (strcmp(m[i].role, "user") && strcmp(m[i].role, "assistant"))
            st = dt_error_set(DT_ERR_FORMAT,
                              "the Mistral template: only user and assistant roles are "
                              "supported, with the exception of an initial optional system "
                              "message (turn %d is %s)",
                              i, m[i].role);
    if (!st) st = bos(t, e);
    for (int i = 0; !st && i < n; i++) {
        if (!strcmp(m[i].role, "user")) {
            st = lit(e, " ");
            if (!st) st = e->token(e->ctx, "[INST]", 0);
            if (!st) st = lit(e, " ");
            if (!st && i == 0 && sys) st = lit(e, sys);
            if (!st && i == 0 && sys) st = lit(e, "\n\n");
            if (!st) st = lit(e, m[i].content);
            if (!st) st = lit(e, " ");
            if (!st) st = e->token(e->ctx, "[/INST]", 0);
        } else {
            st = lit(e, " ");
            if (!st) st = e->text(e->ctx, m[i].content, strlen(m[i].content), m[i].train);
            if (!st) st = e->token(e->ctx, t->eos, m[i].train);
        }
    }
    return st;
}

static dt_status render_gemma(const dt_chat_template *t, const dt_chat_msg *m, int n,
                              const dt_chat_emit *e) {
    if (n > 0 && !strcmp(m[0].role, "system"))
        return dt_error_set(DT_ERR_FORMAT, "the Gemma 2 template: system role not supported");
    dt_status st = alternate(m, n,
                             "the Gemma 2 template: conversation roles must alternate "
                             "user/assistant/user/assistant/...");
    if (!st) st = bos(t, e);
    for (int i = 0; !st && i < n; i++) {
        st = e->token(e->ctx, "<start_of_turn>", 0);
        if (!st) st = lit(e, !strcmp(m[i].role, "assistant") ? "model" : m[i].role);
        if (!st) st = lit(e, "\n");
        if (!st) st = emit_trim(e, m[i].content, m[i].train);
        if (!st) st = e->token(e->ctx, "<end_of_turn>", m[i].train);
        if (!st) st = lit(e, "\n");
    }
    return st;
}

dt_status dt_chat_render(const dt_chat_template *t, const dt_chat_msg *msgs, int n,
                         const dt_chat_emit *e) {
    switch (t->family) {
    case DT_CHAT_CHATML:
        return render_chatml(t, msgs, n, e);
    case DT_CHAT_MISTRAL:
        return render_mistral(t, msgs, n, e);
    case DT_CHAT_GEMMA:
        return render_gemma(t, msgs, n, e);
    default:
        return render_llama(t, msgs, n, e);
    }
}
