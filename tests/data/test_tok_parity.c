/* Tokenizer parity: our ids against a reference library's for every case of a case file written
 * by tests/ref/ref_tok*.py (tiktoken for cl100k_base, Hugging Face tokenizers for a trained
 * byte-level BPE, SentencePiece-style BPEs), and decode(encode(x)) == x on every case. Exact
 * equality, no tolerance. Case flags: 1 special tokens recognised; 2 the reference library's
 * decode does not give x back either (no round-trip check); 4 a decode case: decode(ids) must be
 * the library's decode, the text; 8 the text is encoded with DT_TOK_CONTINUED.
 *
 * usage: test_tok_parity TOKENIZER_FILE CASES_FILE [CASES_FILE TOKENIZER_FILE ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/tokenizer.h"
#include "harness.h"

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static void run(const char *tok_path, const char *cases_path) {
    dt_tokenizer *t = NULL;
    CHECK_OK(dt_tokenizer_load(tok_path, &t));
    if (!t) return;
    printf("%s: %s\n", tok_path, dt_tokenizer_describe(t));
    size_t n;
    uint8_t *b = slurp(cases_path, &n);
    if (!CHECK(b && n >= 12 && !memcmp(b, "DTTOKREF", 8), "cannot read %s", cases_path)) {
        dt_tokenizer_free(t);
        free(b);
        return;
    }
    uint32_t count = rd32(b + 8);
    size_t pos = 12;
    int bad = 0, bad_rt = 0, n_dec = 0;
    int64_t total_ids = 0, total_bytes = 0;
    dt_tokens out = {0};
    for (uint32_t c = 0; c < count; c++) {
        uint32_t flags = rd32(b + pos), tl = rd32(b + pos + 4);
        const char *text = (const char *)b + pos + 8;
        pos += 8 + tl;
        uint32_t ni = rd32(b + pos);
        const uint8_t *ids = b + pos + 4;
        pos += 4 + 4 * (size_t)ni;
        out.n = 0;
        if (flags & 4) { /* decode case */
            char *dec = NULL;
            size_t dl = 0;
            int32_t *v = malloc(4 * (size_t)ni + 4);
            for (uint32_t i = 0; v && i < ni; i++) v[i] = (int32_t)rd32(ids + 4 * i);
            if (!v || dt_tokenizer_decode(t, v, ni, &dec, &dl) != DT_OK || dl != tl ||
                memcmp(dec, text, tl)) {
                if (bad_rt++ < 5)
                    printf("case %u: decode differs from the reference's\n  want: %.*s\n  got:  "
                           "%.*s\n",
                           c, (int)(tl < 200 ? tl : 200), text, (int)(dl < 200 ? dl : 200),
                           dec ? dec : "");
            }
            free(v), free(dec);
            n_dec++;
            continue;
        }
        int fl = (flags & 1 ? DT_TOK_ALLOW_SPECIAL : 0) | (flags & 8 ? DT_TOK_CONTINUED : 0);
        dt_status s = dt_tokenizer_encode(t, text, tl, fl, &out);
        int same = s == DT_OK && out.n == ni;
        for (uint32_t i = 0; same && i < ni; i++) same = (uint32_t)out.ids[i] == rd32(ids + 4 * i);
        if (!same && bad++ < 5) {
            printf("case %u (flags %u, %u bytes): %s\n  text: %.*s\n  want %u ids:", c, flags, tl,
                   s ? dt_last_error() : "ids differ", (int)(tl < 200 ? tl : 200), text, ni);
            for (uint32_t i = 0; i < ni && i < 40; i++) printf(" %u", rd32(ids + 4 * i));
            printf("\n  got  %lld ids:", (long long)out.n);
            for (int64_t i = 0; i < out.n && i < 40; i++) printf(" %d", out.ids[i]);
            printf("\n");
        }
        char *dec = NULL;
        size_t dl = 0;
        if (s == DT_OK && (flags & 10)) {
            /* the reference's decode differs from x too: a decode case checks it */
        } else if (s == DT_OK && dt_tokenizer_decode(t, out.ids, out.n, &dec, &dl) == DT_OK) {
            if ((dl != tl || memcmp(dec, text, tl)) && bad_rt++ < 5)
                printf("case %u: decode(encode(x)) != x\n", c);
        } else {
            bad_rt++;
        }
        free(dec);
        total_ids += out.n;
        total_bytes += tl;
    }
    CHECK(bad == 0, "%s: %d of %u cases differ from the reference ids", cases_path, bad, count);
    CHECK(bad_rt == 0, "%s: decode(encode(x)) != x in %d cases", cases_path, bad_rt);
    CHECK(count >= 1000, "only %u cases", count);
    printf("%s: %u cases (%d decode cases), %lld bytes, %lld ids, %d mismatches, %d round-trip "
           "failures\n",
           cases_path, count, n_dec, (long long)total_bytes, (long long)total_ids, bad, bad_rt);
    dt_tokens_free(&out);
    free(b);
    dt_tokenizer_free(t);
}

int main(int argc, char **argv) {
    const char *dir = getenv("DT_REF_DIR");
    char path[4096];
    for (int i = 1; i + 1 < argc; i += 2) {
        snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", argv[i + 1]);
        run(argv[i], path);
    }
    return dt_test_finish("test_tok_parity");
}
