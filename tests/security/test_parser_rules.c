/* Every rule of the formats dtrain reads beside safetensors (docs/security.md, "Parsers held to
 * their format's specification"): for each rule a file that breaks only it, refused with one line
 * naming the file, the field and the rule; and the valid variants the format allows, accepted.
 *   tokenizer.json   Hugging Face tokenizers (src/data/tok_load.c)
 *   *.tiktoken       tiktoken rank files and their <stem>.json (src/data/tok_load.c)
 *   manifest.json    dtrain's dataset manifest, docs/data.md (src/data/dataset.c)
 *   adapter_config.json  PEFT's LoraConfig (src/nn/lora.c)
 * JSON in the tables is written with ' for " (converted before use), fragments too. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/file.h"
#include "core/json.h"
#include "dtrain/data.h"
#include "dtrain/models.h"
#include "dtrain/tokenizer.h"
#include "harness.h"

static char g_tmp[256];

/* s with every ' turned into " (a fresh malloc'd copy). */
static char *dq(const char *s) {
    char *o = strdup(s ? s : "");
    for (char *p = o; *p; p++)
        if (*p == '\'') *p = '"';
    return o;
}

static void put(const char *path, const char *text) {
    CHECK_OK(dt_write_file(path, text, strlen(text)));
}

/* The status is a refusal whose one-line message names the file and holds both fragments. */
static void refused(const char *area, const char *rule, dt_status st, const char *file,
                    const char *field, const char *why) {
    const char *m = dt_last_error();
    char *f = dq(field), *w = dq(why);
    int ok = st != DT_OK && strstr(m, file) && strstr(m, f) && strstr(m, w) && !strchr(m, '\n');
    CHECK(ok, "%s: %s: status %d, message \"%s\" (want %s, \"%s\", \"%s\")", area, rule, (int)st,
          st ? m : "", file, f, w);
    printf("%-4s %s: %s\n     -> %s\n", ok ? "ok" : "FAIL", area, rule, st ? m : "(accepted)");
    free(f), free(w);
}

static void accepted(const char *area, const char *what, dt_status st) {
    CHECK(st == DT_OK, "%s: %s is valid and must load: %s", area, what, st ? dt_last_error() : "");
    printf("%-4s %s: accepts %s\n", st == DT_OK ? "ok" : "FAIL", area, what);
}

typedef struct rule_case {
    const char *rule, *text, *field, *why;
} rule_case;

/* ---- tokenizer.json ------------------------------------------------------------------------ */

static dt_status tok_load_text(const char *path, const char *text) {
    char *t = dq(text);
    put(path, t);
    free(t);
    dt_tokenizer *tok = NULL;
    dt_status st = dt_tokenizer_load(path, &tok);
    dt_tokenizer_free(tok);
    return st;
}

#define VOCAB "{'a': 0, 'b': 1, 'ab': 2}"
#define MODEL_WITH(vocab, merges, extra)                                                           \
    "'model': {'type': 'BPE', 'vocab': " vocab ", 'merges': " merges extra "}"
#define MODEL MODEL_WITH(VOCAB, "['a b']", "")
#define ADDED(x) "'added_tokens': [" x "], " MODEL
#define PRE(x) "'pre_tokenizer': " x ", " MODEL
#define DEC(x) "'decoder': " x ", " MODEL
#define TOK(...) "{" __VA_ARGS__ "}"

static void tokenizer_json_rules(void) {
    static const rule_case cases[] = {
        /* JSON itself (RFC 8259; cJSON alone takes the first of two keys and what follows) */
        {"one JSON value, nothing after it", TOK(MODEL) " x", ":1:", "bytes after the JSON value"},
        {"no key twice (top level)", "{'model': 1, " MODEL "}", "key 'model'", "appears twice"},
        {"no key twice (model.vocab)",
         TOK(MODEL_WITH("{'a': 0, 'b': 1, 'ab': 2, 'a': 3}", "['a b']", "")),
         "model.vocab: key 'a'", "appears twice"},
        {"the file is an object", "[1]", "the file is an array", "a JSON object"},
        /* model */
        {"model is an object", TOK("'normalizer': null"), "model is missing", "an object"},
        {"model.type is a string", TOK("'model': {'vocab': {}, 'merges': []}"),
         "model.type is missing", "'BPE'"},
        {"model.type BPE (others refused by name)",
         TOK("'model': {'type': 'WordPiece', 'vocab': {}}"), "model.type 'WordPiece'",
         "not supported"},
        {"model.vocab is an object", TOK(MODEL_WITH("[]", "[]", "")), "model.vocab is an array",
         "token: id"},
        {"vocab ids are integers", TOK(MODEL_WITH("{'a': 0, 'b': 1, 'ab': 2.5}", "['a b']", "")),
         "model.vocab['ab'] is 2.5", "non-negative integer id"},
        {"vocab ids are non-negative", TOK(MODEL_WITH("{'a': 0, 'b': 1, 'ab': -1}", "['a b']", "")),
         "model.vocab['ab'] is -1", "non-negative integer id"},
        {"vocab ids are numbers", TOK(MODEL_WITH("{'a': 0, 'b': 1, 'ab': '2'}", "['a b']", "")),
         "model.vocab['ab'] is a string", "non-negative integer id"},
        {"vocab ids are unique", TOK(MODEL_WITH("{'a': 0, 'b': 1, 'ab': 1}", "['a b']", "")),
         "model.vocab['", "used twice"},
        {"vocab tokens are not empty", TOK(MODEL_WITH("{'a': 0, '': 1}", "[]", "")),
         "model.vocab token ''", "empty"},
        {"vocab tokens are byte-level text (dtrain)",
         TOK(MODEL_WITH("{'a': 0, '\\u4e00': 1}", "[]", "")), "model.vocab token",
         "not byte-level"},
        {"vocab ids below the file's id limit",
         TOK(MODEL_WITH("{'a': 0, 'b': 2000000000}", "[]", "")), "model.vocab['b']", "too large"},
        /* merges */
        {"model.merges is a list", TOK(MODEL_WITH(VOCAB, "{}", "")), "model.merges is an object",
         "a list"},
        {"model.merges is present", TOK("'model': {'type': 'BPE', 'vocab': " VOCAB "}"),
         "model.merges is missing", "a list"},
        {"a string merge has one space", TOK(MODEL_WITH(VOCAB, "['ab']", "")), "model.merges[0]",
         "is not 'a b'"},
        {"a string merge has exactly one space", TOK(MODEL_WITH(VOCAB, "['a  b']", "")),
         "model.merges[0]", "is not 'a b'"},
        {"a string merge has two non-empty tokens", TOK(MODEL_WITH(VOCAB, "['a ']", "")),
         "model.merges[0]", "is not 'a b'"},
        {"a pair merge has two items", TOK(MODEL_WITH(VOCAB, "[['a', 'b', 'c']]", "")),
         "model.merges[0] is an array", "'a b' or ['a', 'b']"},
        {"a pair merge holds strings", TOK(MODEL_WITH(VOCAB, "[[0, 1]]", "")),
         "model.merges[0] is an array", "'a b' or ['a', 'b']"},
        {"a merge is a string or a pair", TOK(MODEL_WITH(VOCAB, "[5]", "")), "model.merges[0] is 5",
         "'a b' or ['a', 'b']"},
        {"merged tokens are in the vocabulary", TOK(MODEL_WITH("{'a': 0, 'b': 1}", "['a b']", "")),
         "model.merges[0]", "not in model.vocab"},
        {"a merge's parts are in the vocabulary", TOK(MODEL_WITH(VOCAB, "['a c']", "")),
         "model.merges[0]", "not in model.vocab"},
        {"a pair is merged once", TOK(MODEL_WITH(VOCAB, "['a b', ['a', 'b']]", "")),
         "model.merges[1]", "merged twice (first at rank 0)"},
        /* model options */
        {"model.ignore_merges is a boolean",
         TOK(MODEL_WITH(VOCAB, "['a b']", ", 'ignore_merges': 'yes'")), "model.ignore_merges",
         "a boolean or null"},
        {"model.unk_token is a string", TOK(MODEL_WITH(VOCAB, "['a b']", ", 'unk_token': 3")),
         "model.unk_token is 3", "a string or null"},
        {"model.byte_fallback with ByteLevel (dtrain: not supported)",
         TOK("'pre_tokenizer': {'type': 'ByteLevel'}, " MODEL_WITH(VOCAB, "['a b']",
                                                                   ", 'byte_fallback': true")),
         "model.byte_fallback true", "not supported"},
        {"model.continuing_subword_prefix (dtrain: not supported)",
         TOK(MODEL_WITH(VOCAB, "['a b']", ", 'continuing_subword_prefix': '##'")),
         "model.continuing_subword_prefix '##'", "not supported"},
        {"model.dropout in [0, 1]", TOK(MODEL_WITH(VOCAB, "['a b']", ", 'dropout': 2")),
         "model.dropout 2", "outside [0, 1]"},
        {"model.dropout (dtrain: 0 only)", TOK(MODEL_WITH(VOCAB, "['a b']", ", 'dropout': 0.25")),
         "model.dropout 0.25", "not supported"},
        /* normalizer, pre_tokenizer, decoder */
        {"normalizer (dtrain: null only)", TOK("'normalizer': {'type': 'NFC'}, " MODEL),
         "normalizer type 'NFC'", "not supported"},
        {"normalizer is null or a typed object", TOK("'normalizer': 5, " MODEL), "normalizer is 5",
         "with a 'type'"},
        {"pre_tokenizer types (dtrain: ByteLevel, Split, Sequence)",
         TOK(PRE("{'type': 'Whitespace'}")), "pre_tokenizer type 'Whitespace'", "not supported"},
        {"pre_tokenizer has a type", TOK(PRE("{'add_prefix_space': false}")),
         "pre_tokenizer.type is missing", "a string"},
        {"a Sequence lists its pre-tokenizers", TOK(PRE("{'type': 'Sequence'}")),
         "pre_tokenizer.pretokenizers is missing", "a list"},
        {"each pre-tokenizer of a Sequence is checked",
         TOK(PRE("{'type': 'Sequence', 'pretokenizers': [{'type': 'Metaspace'}]}")),
         "pre_tokenizer.pretokenizers[0] type 'Metaspace'", "not supported"},
        {"Split behavior (dtrain: Isolated)",
         TOK(PRE("{'type': 'Split', 'pattern': {'Regex': 'a'}, 'behavior': 'Removed'}")),
         "pre_tokenizer.behavior 'Removed'", "not supported"},
        {"Split invert (dtrain: false)",
         TOK(PRE("{'type': 'Split', 'pattern': {'Regex': 'a'}, 'behavior': 'Isolated', "
                 "'invert': true}")),
         "pre_tokenizer.invert true", "not supported"},
        {"Split has a pattern", TOK(PRE("{'type': 'Split', 'behavior': 'Isolated'}")),
         "pre_tokenizer.pattern is missing", "{'Regex': string}"},
        {"Split's pattern is one of Regex, String",
         TOK(PRE("{'type': 'Split', 'pattern': {'Regex': 'a', 'String': 'b'}, "
                 "'behavior': 'Isolated'}")),
         "pre_tokenizer.pattern is an object", "{'String': string}"},
        {"ByteLevel options are booleans",
         TOK(PRE("{'type': 'ByteLevel', 'add_prefix_space': 'no'}")),
         "pre_tokenizer.add_prefix_space is a string", "a boolean"},
        {"decoder types (dtrain: ByteLevel, Sequence of them, null)",
         TOK(DEC("{'type': 'WordPiece'}")), "decoder type 'WordPiece'", "not supported"},
        {"each decoder of a Sequence is checked",
         TOK(DEC("{'type': 'Sequence', 'decoders': [{'type': 'Metaspace'}]}")),
         "decoder.decoders[0] type 'Metaspace'", "not supported"},
        {"a decoder has a type", TOK(DEC("{}")), "decoder.type is missing", "a string"},
        /* SentencePiece-style models (byte_fallback, a normalizer or Metaspace) */
        {"normalizer NFKC (dtrain: no Unicode normalization)",
         TOK("'normalizer': {'type': 'NFKC'}, " MODEL), "normalizer type 'NFKC'", "not supported"},
        {"normalizer Replace with a Regex (dtrain: String only)",
         TOK("'normalizer': {'type': 'Replace', 'pattern': {'Regex': ' +'}, 'content': "
             "'_'}, " MODEL),
         "normalizer.pattern Regex", "not supported"},
        {"each normalizer of a Sequence is checked",
         TOK("'normalizer': {'type': 'Sequence', 'normalizers': [{'type': 'Prepend', 'prepend': "
             "'_'}, {'type': 'Lowercase'}]}, " MODEL),
         "normalizer.normalizers[1] type 'Lowercase'", "not supported"},
        {"Metaspace prepend_scheme is always, first or never",
         TOK(PRE("{'type': 'Metaspace', 'replacement': '_', 'prepend_scheme': 'sometimes'}")),
         "pre_tokenizer.prepend_scheme 'sometimes'", "always, first or never"},
        {"Metaspace replacement is one character",
         TOK(PRE("{'type': 'Metaspace', 'replacement': '__', 'prepend_scheme': 'first'}")),
         "pre_tokenizer.replacement '__'", "one character"},
        {"the Metaspace decoder's replacement is not empty",
         TOK("'decoder': {'type': 'Metaspace', 'replacement': '', 'prepend_scheme': "
             "'first'}, " MODEL_WITH(VOCAB, "['a b']", ", 'byte_fallback': true")),
         "decoder.replacement is empty", "one character"},
        {"a SentencePiece-style model takes no Split",
         TOK("'pre_tokenizer': {'type': 'Split', 'pattern': {'Regex': 'a'}, 'behavior': "
             "'Isolated'}, " MODEL_WITH(VOCAB, "['a b']", ", 'byte_fallback': true")),
         "pre_tokenizer type 'Split'", "SentencePiece-style"},
        {"Strip decodes after Fuse (dtrain)",
         TOK("'decoder': {'type': 'Strip', 'content': ' ', 'start': 1, 'stop': 0}, " MODEL_WITH(
             VOCAB, "['a b']", ", 'byte_fallback': true")),
         "decoder before a Fuse", "not supported"},
        /* added_tokens */
        {"added_tokens is a list", TOK("'added_tokens': {}, " MODEL), "added_tokens is an object",
         "a list"},
        {"an added token is an object", TOK(ADDED("3")), "added_tokens[0] is 3", "an object"},
        {"an added token has an id", TOK(ADDED("{'content': '<x>'}")), "added_tokens[0].id",
         "not a token id"},
        {"an added token's id is an integer", TOK(ADDED("{'id': 3.5, 'content': '<x>'}")),
         "added_tokens[0].id of '<x>' is 3.5", "not a token id"},
        {"an added token's content is a non-empty string", TOK(ADDED("{'id': 3, 'content': ''}")),
         "added_tokens[0].content", "non-empty string"},
        {"special is a boolean", TOK(ADDED("{'id': 3, 'content': '<x>', 'special': 'yes'}")),
         "added_tokens[0].special is a string", "a boolean"},
        {"lstrip (dtrain: false)", TOK(ADDED("{'id': 3, 'content': '<x>', 'lstrip': true}")),
         "added_tokens[0].lstrip true", "not supported"},
        {"single_word (dtrain: false)",
         TOK(ADDED("{'id': 3, 'content': '<x>', 'single_word': true}")),
         "added_tokens[0].single_word true", "not supported"},
        {"added contents are unique",
         TOK(ADDED("{'id': 3, 'content': '<x>'}, {'id': 4, 'content': '<x>'}")),
         "added_tokens[1] ('<x>', id 4)", "repeats the content of added_tokens[0]"},
        {"added ids are unique",
         TOK(ADDED("{'id': 3, 'content': '<x>'}, {'id': 3, 'content': '<y>'}")),
         "added_tokens[1] ('<y>', id 3)", "repeats the id of added_tokens[0]"},
        {"an added token in the vocabulary has its text", TOK(ADDED("{'id': 0, 'content': '<x>'}")),
         "added_tokens[0] '<x>' has id 0, which is model.vocab", "token 'a'"},
    };
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_tmp);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        refused("tokenizer.json", cases[i].rule, tok_load_text(path, cases[i].text), path,
                cases[i].field, cases[i].why);
    static const struct {
        const char *what, *text;
    } ok[] = {
        {"the minimal file", TOK(MODEL)},
        {"merges as pairs", TOK(MODEL_WITH(VOCAB, "[['a', 'b']]", ""))},
        {"every model option at its default",
         TOK(MODEL_WITH(VOCAB, "['a b']",
                        ", 'dropout': null, 'unk_token': null, 'continuing_subword_prefix': null, "
                        "'end_of_word_suffix': null, 'fuse_unk': false, 'byte_fallback': false, "
                        "'ignore_merges': true"))},
        {"keys it does not read (version, truncation, padding, post_processor, others)",
         TOK("'version': '1.0', 'truncation': null, 'padding': null, 'post_processor': "
             "{'type': 'TemplateProcessing'}, 'x-future': [1], " MODEL)},
        {"added tokens (special and not; one in the vocabulary with its text)",
         TOK(ADDED("{'id': 3, 'content': '<|end|>', 'special': true, 'single_word': false, "
                   "'lstrip': false, 'rstrip': false, 'normalized': false}, "
                   "{'id': 2, 'content': 'ab', 'special': false}"))},
        {"a Sequence of Split (Regex, String) and ByteLevel",
         TOK(PRE("{'type': 'Sequence', 'pretokenizers': [{'type': 'Split', 'pattern': {'Regex': "
                 "'a+'}, 'behavior': 'Isolated', 'invert': false}, {'type': 'Split', 'pattern': "
                 "{'String': 'b'}, 'behavior': 'Isolated'}, {'type': 'ByteLevel', "
                 "'add_prefix_space': false, 'trim_offsets': true, 'use_regex': false}]}"))},
        {"a Sequence of ByteLevel decoders", TOK(DEC("{'type': 'Sequence', 'decoders': "
                                                     "[{'type': 'ByteLevel'}]}"))},
        {"whitespace after the value", TOK(MODEL) "\n\t \r\n"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        accepted("tokenizer.json", ok[i].what, tok_load_text(path, ok[i].text));
}

/* ---- tiktoken rank files ------------------------------------------------------------------- */

/* The 256 single-byte ranks, then `extra` lines; with `drop` >= 0 that byte's line is left out. */
static void put_ranks(const char *path, const char *extra, int drop) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 256 * 16 + strlen(extra) + 1;
    char *buf = malloc(cap), *w = buf;
    for (int b = 0; b < 256; b++)
        if (b != drop) w += sprintf(w, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    strcpy(w, extra);
    put(path, buf);
    free(buf);
}

static dt_status tik_load(const char *path) {
    dt_tokenizer *t = NULL;
    dt_status st = dt_tokenizer_load(path, &t);
    dt_tokenizer_free(t);
    return st;
}

static void tiktoken_rules(void) {
    /* "YWI=" is "ab"; "YWJj" is "abc" */
    static const rule_case lines[] = {
        {"a line is token, space, rank", "YWI=256\n", ":257:", "no space"},
        {"one space between", "YWI=  256\n", ":257:", "not a decimal integer"},
        {"the rank is digits (no sign)", "YWI= +256\n", ":257:", "not a decimal integer"},
        {"the rank is digits only", "YWI= 25x\n", ":257:", "not a decimal integer"},
        {"the rank is present", "YWI= \n", ":257:", "not a decimal integer"},
        {"the token is base64", "Y!I= 256\n", ":257:", "not base64"},
        {"base64 comes in groups of 4", "YWI 256\n", ":257:", "not base64"},
        {"padding only at the end", "YW==YWI= 256\n", ":257:", "not base64"},
        {"the token is not empty", " 256\n", ":257:", "not base64 of 1 to"},
        {"base64 is canonical (zero padding bits)", "YWJ= 256\n", ":257:", "not canonical base64"},
        {"ranks are below 2^31", "YWI= 4294967296\n", ":257:", "too large"},
        {"ranks are below the file's id limit", "YWI= 2000000000\n", ":257: rank 2000000000",
         "too large"},
        {"ranks are unique", "YWI= 0\n", ":257: rank 0", "used twice"},
        {"tokens are unique", "YQ== 256\n", "tokens 97 and 256", "same bytes"},
    };
    char path[512], meta[512];
    snprintf(path, sizeof path, "%s/r.tiktoken", g_tmp);
    snprintf(meta, sizeof meta, "%s/r.json", g_tmp);
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        put_ranks(path, lines[i].text, -1);
        refused("tiktoken", lines[i].rule, tik_load(path), path, lines[i].field, lines[i].why);
    }
    put(path, "");
    refused("tiktoken", "at least one rank", tik_load(path), path, "", "no ranks");
    put_ranks(path, "", 'z');
    refused("tiktoken", "every single byte has a rank (byte-level)", tik_load(path), path, "0x7a",
            "single byte");
    put_ranks(path, "YWI= 256\r\n\r\nYWJj 257", -1);
    accepted("tiktoken", "CRLF line ends, a blank line, no final newline", tik_load(path));

    /* the <stem>.json beside it: {"pat_str": regex, "special_tokens": {text: id}, "name": s} */
    static const rule_case js[] = {
        {"one JSON value", "{} x", ":1:", "bytes after the JSON value"},
        {"no key twice", "{'pat_str': 'a', 'pat_str': 'b'}", "key 'pat_str'", "appears twice"},
        {"the file is an object", "[]", "the file is an array", "a JSON object"},
        {"pat_str is a string", "{'pat_str': 5}", "pat_str is 5", "a string"},
        {"pat_str compiles", "{'pat_str': '(unclosed'}", "regex", ""},
        {"special_tokens is an object", "{'special_tokens': [300]}", "special_tokens is an array",
         "an object of text: id"},
        {"special ids are integers", "{'special_tokens': {'<x>': 300.5}}",
         "special_tokens.<x> is 300.5", "non-negative integer id"},
        {"special ids are non-negative", "{'special_tokens': {'<x>': -1}}",
         "special_tokens.<x> is -1", "non-negative integer id"},
        {"special ids are not ranks", "{'special_tokens': {'<x>': 5}}", "special_tokens.<x>",
         "taken"},
        {"special ids are unique", "{'special_tokens': {'<x>': 300, '<y>': 300}}",
         "special_tokens.<y>", "taken"},
        {"name is a string", "{'name': 5}", "name is 5", "a string"},
    };
    put_ranks(path, "", -1);
    for (size_t i = 0; i < sizeof js / sizeof *js; i++) {
        char *t = dq(js[i].text);
        put(meta, t);
        free(t);
        /* a pattern that does not compile is reported against the rank file it is for */
        int on_ranks = !strcmp(js[i].rule, "pat_str compiles");
        refused("tiktoken .json", js[i].rule, tik_load(path), on_ranks ? path : meta, js[i].field,
                js[i].why);
    }
    put(meta, "{\"name\": \"r\", \"pat_str\": \"\\\\S+|\\\\s+\", \"special_tokens\": "
              "{\"<|x|>\": 300}, \"explicit_n_vocab\": 301}");
    accepted("tiktoken .json", "pat_str, special_tokens, name and a key it does not read",
             tik_load(path));
    remove(meta);
}

/* ---- dataset manifest.json ----------------------------------------------------------------- */

static char g_ds[512], g_img[512], g_manifest[600], g_img_manifest[600];
static char *g_orig, *g_img_orig;

static dt_status ds_open(const char *dir) {
    dt_dataset *d = NULL;
    dt_status st = dt_dataset_open(dir, 0, &d);
    dt_dataset_close(d);
    return st;
}

/* A manifest edited through cJSON: fn(root) changes one thing. */
static dt_status ds_edit(const char *dir, const char *manifest, const char *orig,
                         void (*fn)(cJSON *)) {
    cJSON *r = cJSON_Parse(orig);
    fn(r);
    char *t = cJSON_Print(r);
    cJSON_Delete(r);
    put(manifest, t);
    free(t);
    dt_status st = ds_open(dir);
    put(manifest, orig);
    return st;
}

/* A manifest edited as text: the original with `what` put in place of its first `from`. */
static dt_status ds_text(const char *dir, const char *manifest, const char *orig, const char *from,
                         const char *what) {
    const char *at = strstr(orig, from);
    CHECK(at != NULL, "manifest holds %s", from);
    if (!at) return DT_OK;
    char *w = dq(what);
    size_t n = strlen(orig) + strlen(w) + 1;
    char *t = malloc(n);
    snprintf(t, n, "%.*s%s%s", (int)(at - orig), orig, w, at + strlen(from));
    put(manifest, t);
    free(t), free(w);
    dt_status st = ds_open(dir);
    put(manifest, orig);
    return st;
}

static cJSON *item(cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}
static cJSON *shard0(cJSON *r) {
    return cJSON_GetArrayItem(item(r, "shards"), 0);
}
#define EDIT(name, body)                                                                           \
    static void name(cJSON *r) {                                                                   \
        body;                                                                                      \
    }
EDIT(e_unknown_top, cJSON_AddNumberToObject(r, "recrods", 3))
EDIT(e_unknown_tokens, cJSON_AddNumberToObject(item(r, "tokens"), "bos_id", 1))
EDIT(e_unknown_shard, cJSON_AddNumberToObject(shard0(r), "offset", 0))
EDIT(e_format, cJSON_ReplaceItemInObject(r, "format", cJSON_CreateString("dtrain-data")))
EDIT(e_version, cJSON_ReplaceItemInObject(r, "version", cJSON_CreateNumber(2)))
EDIT(e_kind, cJSON_ReplaceItemInObject(r, "kind", cJSON_CreateString("audio")))
EDIT(e_records_neg, cJSON_ReplaceItemInObject(r, "records", cJSON_CreateNumber(-1)))
EDIT(e_records_frac, cJSON_ReplaceItemInObject(r, "records", cJSON_CreateNumber(2.5)))
EDIT(e_records_str, cJSON_ReplaceItemInObject(r, "records", cJSON_CreateString("3")))
EDIT(e_records_sum, cJSON_ReplaceItemInObject(r, "records", cJSON_CreateNumber(4)))
EDIT(e_name, cJSON_ReplaceItemInObject(r, "name", cJSON_CreateNumber(5)))
EDIT(e_split, cJSON_ReplaceItemInObject(r, "split", cJSON_CreateTrue()))
EDIT(e_meta, cJSON_AddItemToObject(r, "meta", cJSON_CreateArray()))
EDIT(e_tokens_obj, cJSON_ReplaceItemInObject(r, "tokens", cJSON_CreateArray()))
EDIT(e_count, cJSON_ReplaceItemInObject(item(r, "tokens"), "count", cJSON_CreateNumber(1)))
EDIT(e_mask, cJSON_ReplaceItemInObject(item(r, "tokens"), "has_mask", cJSON_CreateNumber(1)))
EDIT(e_vocab_big,
     cJSON_ReplaceItemInObject(item(r, "tokens"), "vocab_size", cJSON_CreateNumber(1e10)))
EDIT(e_eot, cJSON_ReplaceItemInObject(item(r, "tokens"), "eot_id", cJSON_CreateNumber(100)))
EDIT(e_pad, cJSON_ReplaceItemInObject(item(r, "tokens"), "pad_id", cJSON_CreateNumber(-2)))
EDIT(e_shards, cJSON_ReplaceItemInObject(r, "shards", cJSON_CreateObject()))
EDIT(e_shard_obj, cJSON_ReplaceItemInArray(item(r, "shards"), 0, cJSON_CreateString("x")))
EDIT(e_shard_file, cJSON_ReplaceItemInObject(shard0(r), "file", cJSON_CreateString("../x")))
EDIT(e_shard_twice, cJSON_AddItemToArray(item(r, "shards"), cJSON_Duplicate(shard0(r), 1)))
EDIT(e_shard_records, cJSON_ReplaceItemInObject(shard0(r), "records", cJSON_CreateNumber(2)))
EDIT(e_shard_bytes, cJSON_ReplaceItemInObject(shard0(r), "bytes", cJSON_CreateNumber(7)))
EDIT(e_shard_xxh3, cJSON_ReplaceItemInObject(shard0(r), "xxh3", cJSON_CreateString("12ab")))
EDIT(e_fingerprint,
     cJSON_ReplaceItemInObject(r, "fingerprint", cJSON_CreateString("0123456789abcdef")))
EDIT(e_layout, cJSON_ReplaceItemInObject(item(r, "image"), "layout", cJSON_CreateString("CHW")))
EDIT(e_channels, cJSON_ReplaceItemInObject(item(r, "image"), "channels", cJSON_CreateNumber(5)))
EDIT(e_height, cJSON_ReplaceItemInObject(item(r, "image"), "height", cJSON_CreateNumber(0)))
EDIT(e_other_kind, cJSON_AddItemToObject(r, "tokens", cJSON_CreateObject()))
EDIT(e_meta_free,
     cJSON_AddItemToObject(r, "meta", cJSON_Parse("{\"anything\": [1, {\"x\": null}]}")))

static void make_datasets(void) {
    snprintf(g_ds, sizeof g_ds, "%s/tokens", g_tmp);
    dt_dataset_spec sp = {.kind = DT_DATA_TOKENS,
                          .vocab_size = 64,
                          .eot_id = 0,
                          .pad_id = 1,
                          .shard_bytes = 1 << 20,
                          .name = "rules",
                          .split = "train"};
    dt_dataset_writer *w = NULL;
    CHECK_OK(dt_dataset_writer_open(g_ds, &sp, &w));
    uint32_t doc[4] = {5, 6, 7, 0};
    for (int i = 0; i < 3 && w; i++) CHECK_OK(dt_dataset_writer_add_doc(w, doc, NULL, 4));
    if (w) CHECK_OK(dt_dataset_writer_close(w));
    snprintf(g_img, sizeof g_img, "%s/images", g_tmp);
    dt_dataset_spec si = {.kind = DT_DATA_IMAGE,
                          .height = 2,
                          .width = 2,
                          .channels = 1,
                          .classes = 3,
                          .shard_bytes = 1 << 20,
                          .name = "rules",
                          .split = "train"};
    w = NULL;
    CHECK_OK(dt_dataset_writer_open(g_img, &si, &w));
    uint8_t px[4] = {1, 2, 3, 4};
    for (int i = 0; i < 3 && w; i++) CHECK_OK(dt_dataset_writer_add_image(w, px, i));
    if (w) CHECK_OK(dt_dataset_writer_close(w));
    snprintf(g_manifest, sizeof g_manifest, "%s/manifest.json", g_ds);
    snprintf(g_img_manifest, sizeof g_img_manifest, "%s/manifest.json", g_img);
    uint8_t *b;
    size_t n;
    g_orig = dt_read_file(g_manifest, 0, &b, &n) ? NULL : (char *)b;
    g_img_orig = dt_read_file(g_img_manifest, 0, &b, &n) ? NULL : (char *)b;
}

static void manifest_rules(void) {
    make_datasets();
    if (!CHECK(g_orig && g_img_orig, "datasets written")) return;
    const char *D = g_ds, *M = g_manifest, *O = g_orig;
    const char *A = "manifest.json";
#define TE(rule, fn, field, why) refused(A, rule, ds_edit(D, M, O, fn), M, field, why)
#define TI(rule, fn, field, why)                                                                   \
    refused(A, rule, ds_edit(g_img, g_img_manifest, g_img_orig, fn), g_img_manifest, field, why)
#define TT(rule, from, to, field, why) refused(A, rule, ds_text(D, M, O, from, to), M, field, why)
    {
        size_t n = strlen(O) + 3;
        char *t = malloc(n);
        snprintf(t, n, "%s{}", O);
        put(M, t);
        free(t);
        refused(A, "one JSON value, nothing after it", ds_open(D), M, ":", "bytes after the JSON");
        put(M, O);
    }
    TT("no key twice (top level)", "\"format\"", "'records': 0, 'format'", "key 'records'",
       "appears twice");
    TT("no key twice (a shard)", "\"file\"", "'bytes': 1, 'file'", "shards[0]: key 'bytes'",
       "appears twice");
    TE("top-level keys are the documented ones", e_unknown_top, "key 'recrods'",
       "not a manifest key");
    TE("tokens keys are the documented ones", e_unknown_tokens, "tokens: key 'bos_id'",
       "not a manifest key");
    TE("shard keys are the documented ones", e_unknown_shard, "shards[0]: key 'offset'",
       "not a manifest key");
    TE("format is dtrain-dataset", e_format, "'format' is 'dtrain-data'", "dtrain-dataset");
    TE("version is 1", e_version, "manifest version 2", "version 1");
    TE("kind is image or tokens", e_kind, "'kind' is 'audio'", "image, tokens or encoded-image");
    TE("records is non-negative", e_records_neg, "'records'", "a non-negative integer");
    TE("records is an integer", e_records_frac, "'records'", "a non-negative integer");
    TE("records is a number", e_records_str, "'records'", "a non-negative integer");
    TE("records is the shards' sum", e_records_sum, "'records' is 4", "the shards hold 3");
    TE("name is a string", e_name, "'name'", "a string");
    TE("split is a string", e_split, "'split'", "a string");
    TE("meta is an object", e_meta, "'meta'", "an object");
    TE("tokens is an object", e_tokens_obj, "'tokens'", "an object");
    TE("tokens.count is the shards' sum", e_count, "'tokens.count' is 1", "the shards hold 12");
    TE("tokens.has_mask is a boolean", e_mask, "'tokens.has_mask'", "a boolean");
    TE("tokens.vocab_size fits u32 ids", e_vocab_big, "tokens.vocab_size 10000000000", "over 2^32");
    TE("tokens.eot_id is an id of the vocabulary", e_eot, "tokens.eot_id 100", "below 64");
    TE("tokens.pad_id is -1 or more", e_pad, "'tokens.pad_id'", "an integer >= -1");
    TE("shards is a list", e_shards, "'shards'", "an array");
    TE("a shard is an object", e_shard_obj, "'shards[0]'", "an object");
    TE("shard names are plain", e_shard_file, "shards[0].file '../x'", "not a plain file name");
    TE("each shard is listed once", e_shard_twice, "listed twice", "each shard once");
    TE("a shard's records are its header's", e_shard_records, "shards[0].records 2",
       "3 records (byte 24)");
    TE("a shard's bytes are its size", e_shard_bytes, "shards[0].bytes 7", ", but ");
    TE("a shard's xxh3 is 16 hex digits", e_shard_xxh3, "shards[0].xxh3 '12ab'", "16 hex digits");
    TE("the fingerprint is the content's", e_fingerprint, "fingerprint '0123456789abcdef'",
       "does not match");
    TI("image.layout is HWC uint8", e_layout, "image.layout 'CHW'", "'HWC uint8'");
    TI("image.channels at most 4", e_channels, "image shape 2x2x5", "channels <= 4");
    TI("image.height is positive", e_height, "'image.height'", "a positive integer");
    TI("no key of the other kind", e_other_kind, "key 'tokens'", "not a manifest key");
    accepted(A, "the manifest as written (tokens)", ds_open(D));
    accepted(A, "the manifest as written (images)", ds_open(g_img));
    accepted(A, "a free-form meta object", ds_edit(D, M, O, e_meta_free));
#undef TE
#undef TI
#undef TT
    free(g_orig), free(g_img_orig);
}

/* ---- PEFT adapter_config.json -------------------------------------------------------------- */

static unsigned g_targets;

static dt_status lora_text(const char *dir, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *t = dq(text);
    put(path, t);
    free(t);
    dt_llama_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 128, c.hidden_size = 64, c.intermediate_size = 160, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
    dt_status st = dt_lora_config_load(dir, &c);
    g_targets = st ? 0 : c.lora.targets;
    return st;
}

#define LORA(...) "{'peft_type': 'LORA', 'r': 4, 'lora_alpha': 8, " __VA_ARGS__ "}"
#define QV "'target_modules': ['q_proj', 'v_proj']"

static void adapter_config_rules(void) {
    static const rule_case cases[] = {
        {"one JSON value, nothing after it", LORA(QV) "]", ":1:", "bytes after the JSON value"},
        {"no key twice", LORA("'r': 8, " QV), "key 'r'", "appears twice"},
        {"the file is an object", "['LORA']", "the file is an array", "a JSON object"},
        {"peft_type is LORA", "{'peft_type': 'IA3', 'r': 4, 'lora_alpha': 8, " QV "}",
         "key peft_type is a string 'IA3'", "expected 'LORA'"},
        {"peft_type is present", "{'r': 4, 'lora_alpha': 8, " QV "}", "key peft_type is missing",
         "expected 'LORA'"},
        {"r is positive", "{'peft_type': 'LORA', 'r': 0, 'lora_alpha': 8, " QV "}", "key r is 0",
         "integer rank >= 1"},
        {"r is an integer", "{'peft_type': 'LORA', 'r': 2.5, 'lora_alpha': 8, " QV "}",
         "key r is 2.5", "integer rank >= 1"},
        {"r is a number", "{'peft_type': 'LORA', 'r': '4', 'lora_alpha': 8, " QV "}",
         "key r is a string '4'", "integer rank"},
        {"r is at most 65536", "{'peft_type': 'LORA', 'r': 1e9, 'lora_alpha': 8, " QV "}",
         "key r is 1000000000", "at most 65536"},
        {"lora_alpha is a number", "{'peft_type': 'LORA', 'r': 4, 'lora_alpha': '8', " QV "}",
         "key lora_alpha is a string", "a number > 0"},
        {"lora_alpha is positive", "{'peft_type': 'LORA', 'r': 4, 'lora_alpha': 0, " QV "}",
         "key lora_alpha is 0", "a number > 0"},
        {"lora_dropout is a number", LORA("'lora_dropout': '0.1', " QV),
         "key lora_dropout is a string", "[0, 1)"},
        {"lora_dropout is below 1", LORA("'lora_dropout': 1, " QV), "key lora_dropout is 1",
         "[0, 1)"},
        {"target_modules is present", LORA("'bias': 'none'"), "key target_modules is missing",
         "a non-empty list"},
        {"target_modules is not empty", LORA("'target_modules': []"),
         "key target_modules is an empty list", "non-empty list"},
        {"target_modules lists strings", LORA("'target_modules': ['q_proj', 5]"),
         "key target_modules: 5", "not a Llama projection"},
        {"target_modules names projections (dtrain)", LORA("'target_modules': ['c_attn']"),
         "key target_modules:", "c_attn"},
        {"target_modules is a list or a string", LORA("'target_modules': {'q_proj': 1}"),
         "key target_modules is an object", "or a string"},
        {"a target_modules string is a regex", LORA("'target_modules': '(q_proj'"),
         "key target_modules: '(q_proj'", "not a regular expression"},
        {"a target_modules regex full-matches module names", LORA("'target_modules': 'q_proj'"),
         "key target_modules: 'q_proj'", "matches no module"},
        {"a target_modules regex takes projections only",
         LORA("'target_modules': '.*(q_proj|mlp)'"), "matches the module 'model.layers.0.mlp'",
         "not a projection"},
        {"a target_modules regex takes the same projections in every layer",
         LORA("'target_modules': 'model[.]layers[.]0[.].*q_proj'"),
         "selects other projections "
         "in layer 1",
         "every layer"},
        {"use_rslora is a boolean", LORA("'use_rslora': 'no', " QV), "key use_rslora is a string",
         "a boolean"},
        {"use_dora (dtrain: false)", LORA("'use_dora': true, " QV), "key use_dora",
         "not supported"},
        {"bias (dtrain: none)", LORA("'bias': 'all', " QV), "key bias", "only 'none'"},
        {"exclude_modules (dtrain: empty)", LORA("'exclude_modules': ['q_proj'], " QV),
         "key exclude_modules", "only null or empty"},
        {"layer_replication (dtrain: null)", LORA("'layer_replication': [[0, 1]], " QV),
         "key layer_replication", "only null or empty"},
        {"layers_pattern (PEFT: only with layers_to_transform)",
         LORA("'layers_pattern': 'layers', " QV), "key layers_pattern", "only null or empty"},
        {"modules_to_save is a list", LORA("'modules_to_save': 'lm_head', " QV),
         "key modules_to_save", "null or a list of names"},
    };
    char dir[512];
    snprintf(dir, sizeof dir, "%s/adapter", g_tmp);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    char path[600];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        refused("adapter_config.json", cases[i].rule, lora_text(dir, cases[i].text), path,
                cases[i].field, cases[i].why);
    static const struct {
        const char *what, *text;
        unsigned targets;
    } ok[] = {
        {"a list of projections", LORA(QV), 0x5},
        {"as dtrain writes it (defaults spelled out, modules_to_save null)",
         LORA("'task_type': 'CAUSAL_LM', 'lora_dropout': 0.05, " QV ", 'bias': 'none', "
              "'fan_in_fan_out': false, 'inference_mode': true, 'init_lora_weights': true, "
              "'use_rslora': false, 'use_dora': false, 'modules_to_save': null, "
              "'layers_to_transform': null, 'rank_pattern': {}, 'alpha_pattern': {}, "
              "'base_model_name_or_path': null"),
         0x5},
        {"target_modules 'all-linear'", LORA("'target_modules': 'all-linear'"), 0x7f},
        {"a target_modules regex", LORA("'target_modules': '.*[.](q_proj|v_proj|down_proj)'"),
         0x45},
        {"keys it does not know (PEFT ignores them with a warning)",
         LORA(QV ", 'peft_version': '0.99', 'some_future_option': {'x': 1}"), 0x5},
        {"a float lora_alpha and r 65536",
         "{'peft_type': 'LORA', 'r': 65536, 'lora_alpha': 0.5, "
         "'target_modules': ['down_proj']}",
         0x40},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        dt_status st = lora_text(dir, ok[i].text);
        accepted("adapter_config.json", ok[i].what, st);
        if (!st)
            CHECK(g_targets == ok[i].targets, "%s: targets 0x%x, expected 0x%x", ok[i].what,
                  g_targets, ok[i].targets);
    }
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dt-rules-XXXXXX", t && *t ? t : "/tmp");
    if (!CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp")) return dt_test_finish("security_parser_rules");
    tokenizer_json_rules();
    tiktoken_rules();
    manifest_rules();
    adapter_config_rules();
    dt_remove_tree(g_tmp);
    return dt_test_finish("security_parser_rules");
}
