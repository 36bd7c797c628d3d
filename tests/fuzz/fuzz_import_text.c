/* Fuzz target: the text and JSONL importers (src/data/import_text.c, import_jsonl.c,
 * chat_template.c): UTF-8 checks, document separators, JSON lines in every record format
 * rendered with a chat template read off a tokenizer_config.json, and the loss mask.
 *
 * Input: one control byte, then up to three source files separated by FZ_SEP. Control bits:
 * 0 import as jsonl (else text), 1 text: documents end at lines "%" (fortune files), 2 move a
 * quarter to a val split, 3 pass the files by name (else their directory: hidden and binary
 * files are skipped), 4 jsonl: --strict, 5 jsonl: --train-on last, 6 jsonl: --system, 7 jsonl:
 * the last file is the tokenizer's tokenizer_config.json (chat_template, bos/eos), not a source.
 * The tokenizer is a small byte-level tiktoken file made once (256 single bytes and a few
 * merges, and every template family's control tokens as special tokens), so every byte sequence
 * encodes. Entry point: dt_data_import("text" or "jsonl", ...); an import that succeeds must give
 * datasets that open and verify. */
#include <stdio.h>
#include <string.h>
#include "dtrain/data.h"
#include "fuzz_util.h"

static char g_tok[4096];

static void b64(const uint8_t *s, size_t n, char *out) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = a[w >> 18 & 63], out[o++] = a[w >> 12 & 63];
        out[o++] = i + 1 < n ? a[w >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? a[w & 63] : '=';
    }
    out[o] = 0;
}

static void make_tokenizer(void) {
    static const char *const merges[] = {"th", "he", "the", " t", "in", "er", "\n\n", "an"};
    char text[16384], tok[64];
    size_t o = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        b64(&c, 1, tok);
        o += (size_t)snprintf(text + o, sizeof text - o, "%s %d\n", tok, b);
    }
    for (int i = 0; i < 8; i++) {
        b64((const uint8_t *)merges[i], strlen(merges[i]), tok);
        o += (size_t)snprintf(text + o, sizeof text - o, "%s %d\n", tok, 256 + i);
    }
    fz_path(g_tok, sizeof g_tok, "bytes.tiktoken");
    fz_write(g_tok, text, o);
    static const char *const sp[] = {"<|begin_of_text|>",
                                     "<|end_of_text|>",
                                     "<|start_header_id|>",
                                     "<|end_header_id|>",
                                     "<|eot_id|>",
                                     "<|im_start|>",
                                     "<|im_end|>",
                                     "<s>",
                                     "</s>",
                                     "[INST]",
                                     "[/INST]",
                                     "<bos>",
                                     "<eos>",
                                     "<start_of_turn>",
                                     "<end_of_turn>"};
    o = (size_t)snprintf(text, sizeof text, "{\"special_tokens\": {");
    for (int i = 0; i < 15; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s\"%s\": %d", i ? ", " : "", sp[i],
                              300 + i);
    o += (size_t)snprintf(text + o, sizeof text - o, "}}");
    char meta[4096];
    fz_path(meta, sizeof meta, "bytes.json"); /* the rank file's sibling: its special tokens */
    fz_write(meta, text, o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char src[4096], out[4096];
    if (!src[0]) {
        make_tokenizer();
        fz_path(src, sizeof src, "text");
        fz_path(out, sizeof out, "text-out");
    }
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    fz_rm(src);
    fz_rm(out);
    fz_mkdirs(src);
    const uint8_t *part[3];
    size_t len[3];
    int n = fz_split(data + 1, size - 1, part, len, 3);
    char cfg[4096];
    fz_path(cfg, sizeof cfg, "tokenizer_config.json");
    fz_rm(cfg);
    if ((ctl & 129) == 129 && n > 1) {
        n--;
        fz_write(cfg, part[n], len[n]);
    }
    char paths[3][4200];
    const char *srcs[3];
    for (int i = 0; i < n; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/part-%d.%s", src, i, ctl & 1 ? "jsonl" : "txt");
        fz_write(paths[i], part[i], len[i]);
        srcs[i] = paths[i];
    }
    int nsrc = ctl & 8 ? n : 1;
    if (!(ctl & 8)) srcs[0] = src;
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1;
    o.tokenizer = g_tok;
    o.doc_separator = !(ctl & 1) && (ctl & 2) ? "%" : NULL;
    o.val_fraction = ctl & 4 ? 0.25 : 0;
    o.shard_bytes = 4096; /* several shards from a small input */
    o.strict = ctl & 16 ? 1 : 0;
    o.train_last = ctl & 32 ? 1 : 0;
    o.system = ctl & 64 ? "Be brief." : NULL;
    if (dt_data_import(ctl & 1 ? "jsonl" : "text", srcs, nsrc, out, &o) == DT_OK)
        fz_check_import(out, ctl & 4);
    return 0;
}
