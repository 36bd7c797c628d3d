/* Fuzz target: a tiktoken rank file ("<base64 token> <rank>" lines) and the optional "<stem>.json"
 * beside it ({"pat_str": regex, "special_tokens": {text: id}}) (src/data/tok_load.c).
 *
 * Input: the rank file, optionally followed by FZ_SEP and the JSON. Entry point:
 * dt_tokenizer_load on "<dir>/fuzz.tiktoken" (fuzz.json present only when the input has a
 * second part); an accepted tokenizer encodes and decodes a fixed text (fz_tokenizer_exercise).
 */
#include <stdio.h>
#include <stdlib.h>
#include "dtrain/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char ranks[4096], meta[4096];
    if (!ranks[0]) {
        fz_path(ranks, sizeof ranks, "fuzz.tiktoken");
        fz_path(meta, sizeof meta, "fuzz.json");
    }
    const uint8_t *part[2];
    size_t len[2];
    int n = fz_split(data, size, part, len, 2);
    fz_write(ranks, part[0], len[0]);
    if (n > 1)
        fz_write(meta, part[1], len[1]);
    else
        fz_rm(meta);
    dt_tokenizer *t = NULL;
    if (dt_tokenizer_load(ranks, &t) == DT_OK) fz_tokenizer_exercise(t);
    dt_tokenizer_free(t);
    return 0;
}
