/* Tokenizer units: known cl100k ids, special tokens, UTF-8 validation (overlong, surrogate,
 * out of range, truncated) with positions, decode errors, and malformed tokenizer files (rank
 * file lines, tokenizer.json contents) giving errors that name the file and line.
 *
 * usage: test_tok_unit TIKTOKEN_FILE */
#include "data_testutil.h"
#include "dtrain/tokenizer.h"

static int ids_are(dt_tokenizer *t, const char *s, int flags, const int32_t *want, int n) {
    dt_tokens o = {0};
    dt_status st = dt_tokenizer_encode(t, s, strlen(s), flags, &o);
    int ok = st == DT_OK && o.n == n;
    for (int i = 0; ok && i < n; i++) ok = o.ids[i] == want[i];
    if (!ok) {
        printf("  \"%s\" ->", s);
        for (int64_t i = 0; i < o.n; i++) printf(" %d", o.ids[i]);
        printf(" (%s)\n", st ? dt_last_error() : "");
    }
    dt_tokens_free(&o);
    return ok;
}

static void test_cl100k(const char *path) {
    dt_tokenizer *t;
    CHECK_OK(dt_tokenizer_load(path, &t));
    if (!t) return;
    /* ids as tiktoken gives them for cl100k_base */
    CHECK(ids_are(t, "hello world", 0, (int32_t[]){15339, 1917}, 2), "hello world");
    CHECK(ids_are(t, "<|endoftext|>", DT_TOK_ALLOW_SPECIAL, (int32_t[]){100257}, 1),
          "special token allowed");
    CHECK(ids_are(t, "", 0, NULL, 0), "empty text");
    dt_tokens o = {0};
    CHECK_OK(dt_tokenizer_encode(t, "<|endoftext|>", 13, 0, &o));
    CHECK(o.n > 1, "special-token text is ordinary text unless allowed (%lld ids)", (long long)o.n);
    dt_tokens_free(&o);
    CHECK(dt_tokenizer_vocab_size(t) == 100277, "vocab %lld",
          (long long)dt_tokenizer_vocab_size(t));
    CHECK(dt_tokenizer_special_id(t, "<|endofprompt|>") == 100276, "endofprompt id");
    CHECK(dt_tokenizer_special_id(t, "<|nope|>") == -1, "unknown special");
    tu_check_error("duplicate special", dt_tokenizer_add_special(t, "<|endoftext|>", -1),
                   "<|endoftext|>", "already");
    tu_check_error("taken id", dt_tokenizer_add_special(t, "<|x|>", 15339), "id 15339", "taken");
    CHECK_OK(dt_tokenizer_add_llama3_chat(t));
    CHECK(dt_tokenizer_special_id(t, "<|begin_of_text|>") == 100277 &&
              dt_tokenizer_special_id(t, "<|eot_id|>") == 100281,
          "Llama 3 chat tokens appended after the largest id");
    CHECK_OK(dt_tokenizer_add_llama3_chat(t)); /* idempotent */
    CHECK(dt_tokenizer_vocab_size(t) == 100282, "vocab after chat tokens");

    /* invalid UTF-8: the position is named */
    const char *bad = "ab\ncd\xc3(";
    dt_tokens x = {0};
    tu_check_error("invalid UTF-8 input", dt_tokenizer_encode(t, bad, strlen(bad), 0, &x),
                   "invalid UTF-8 at byte 5", "line 2, column 3");
    dt_tokens_free(&x);
    char *txt;
    size_t tl;
    tu_check_error("decode unknown id",
                   dt_tokenizer_decode(t, (int32_t[]){15339, 999999}, 2, &txt, &tl),
                   "id 999999 at position 1", NULL);
    CHECK_OK(dt_tokenizer_decode(t, (int32_t[]){15339, 1917, 100281}, 3, &txt, &tl));
    CHECK(!strcmp(txt, "hello world<|eot_id|>") && tl == 21, "decode: %s", txt);
    free(txt);
    dt_tokenizer_free(t);
}

static void test_utf8(void) {
    struct {
        const char *s;
        size_t len, bad;
    } c[] = {
        {"plain ascii", 11, 11},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, 14},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 12, 10}, /* cut inside the emoji */
        {"\xc0\xaf", 2, 0},                                    /* overlong '/' */
        {"a\xe0\x80\xaf", 4, 1},                               /* overlong, 3 bytes */
        {"ab\xed\xa0\x80", 5, 2},                              /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, 0},                            /* U+110000 */
        {"xy\xe2\x82", 4, 2},                                  /* truncated */
        {"\x80", 1, 0},                                        /* stray continuation */
        {"12345678\xff", 9, 8},                                /* after the ASCII fast path */
        {"\xf4\x8f\xbf\xbf", 4, 4},                            /* U+10FFFF is valid */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        size_t got = dt_utf8_validate(c[i].s, c[i].len);
        CHECK(got == c[i].bad, "utf8 case %zu: first invalid byte %zu, want %zu", i, got, c[i].bad);
    }
}

static void test_files(const char *tmp) {
    char p[4200], q[4200];
    dt_tokenizer *t = NULL;
    snprintf(p, sizeof p, "%s/bad.tiktoken", tmp);
    const char *r = "YQ== 0\nYg== 1\n!!!! 2\n";
    dt_write_file(p, r, strlen(r));
    tu_check_error("bad rank line", dt_tokenizer_load(p, &t), "bad.tiktoken:3:", "base64");
    r = "YQ== 0\nYg== 0\n";
    dt_write_file(p, r, strlen(r));
    tu_check_error("duplicate rank", dt_tokenizer_load(p, &t), "bad.tiktoken:2:", "used twice");
    r = "YQ== 0\nYg== 1\n";
    dt_write_file(p, r, strlen(r));
    tu_check_error("missing byte ranks", dt_tokenizer_load(p, &t), "bad.tiktoken", "single byte");
    CHECK(t == NULL, "failed loads return NULL");

    /* a complete byte-level rank file: 256 bytes + merges "ab", "abc" */
    snprintf(p, sizeof p, "%s/tiny.tiktoken", tmp);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *buf = malloc(256 * 16 + 64), *w = buf;
    for (int b = 0; b < 256; b++) w += sprintf(w, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    w += sprintf(w, "YWI= 256\nYWJj 257\n");
    dt_write_file(p, buf, (size_t)(w - buf));
    free(buf);
    CHECK_OK(dt_tokenizer_load(p, &t));
    if (t) {
        CHECK(ids_are(t, "abc abd", 0, (int32_t[]){257, ' ', 256, 'd'}, 4), "tiny merges");
        CHECK(dt_tokenizer_vocab_size(t) == 258, "tiny vocab (no specials without a .json)");
        dt_tokenizer_free(t);
        t = NULL;
    }
    /* 128,000 ranks and no .json: Llama 3's rank-file layout gets its 256 special tokens */
    snprintf(q, sizeof q, "%s/llama3-like.model", tmp);
    buf = malloc(128000 * 16);
    w = buf;
    for (int b = 0; b < 256; b++) w += sprintf(w, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    for (int i = 0; i < 128000 - 256; i++) {
        uint32_t v =
            (uint32_t)(i & 255) << 16 | (uint32_t)((i >> 8) & 255) << 8 | (uint32_t)(i >> 16);
        w += sprintf(w, "%c%c%c%c %d\n", b64[v >> 18], b64[(v >> 12) & 63], b64[(v >> 6) & 63],
                     b64[v & 63], 256 + i);
    }
    dt_write_file(q, buf, (size_t)(w - buf));
    free(buf);
    CHECK_OK(dt_tokenizer_load(q, &t));
    if (t) {
        CHECK(dt_tokenizer_special_id(t, "<|begin_of_text|>") == 128000 &&
                  dt_tokenizer_special_id(t, "<|start_header_id|>") == 128006 &&
                  dt_tokenizer_special_id(t, "<|eot_id|>") == 128009 &&
                  dt_tokenizer_special_id(t, "<|reserved_special_token_246|>") == 128255 &&
                  dt_tokenizer_vocab_size(t) == 128256,
              "Llama 3 special tokens at 128000-128255");
        dt_tokenizer_free(t);
        t = NULL;
    }
    /* a sibling .json with a pattern that cannot compile */
    snprintf(q, sizeof q, "%s/tiny.json", tmp);
    const char *j = "{\"pat_str\": \"(unclosed\", \"special_tokens\": {}}";
    dt_write_file(q, j, strlen(j));
    tu_check_error("bad regex", dt_tokenizer_load(p, &t), "tiny.tiktoken", "regex");

    snprintf(q, sizeof q, "%s/tokenizer.json", tmp);
    struct {
        const char *json, *frag;
    } hf[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": "
         "{\"type\": \"NFC\"}}",
         "normalizer"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model.type"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
         "model.merges[0]"},
        {"{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0,}}}", "tokenizer.json:2:"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
         "\"pre_tokenizer\": "
         "{\"type\": \"Whitespace\"}}",
         "Whitespace"},
    };
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
        dt_write_file(q, hf[i].json, strlen(hf[i].json));
        tu_check_error("bad tokenizer.json", dt_tokenizer_load(q, &t), "tokenizer.json",
                       hf[i].frag);
    }
}

int main(int argc, char **argv) {
    char tmp[4096];
    if (!CHECK(tu_tempdir(tmp, sizeof tmp, "tok"), "mkdtemp")) return dt_test_finish("tok");
    test_cl100k(argc > 1 ? argv[1] : "data/tokenizers/cl100k_base.tiktoken");
    test_utf8();
    test_files(tmp);
    dt_remove_tree(tmp);
    return dt_test_finish("test_tok_unit");
}
