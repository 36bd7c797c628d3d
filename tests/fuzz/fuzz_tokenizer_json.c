/* Fuzz target: a Hugging Face tokenizer.json (src/data/tok_load.c: the BPE model's vocabulary
 * and merges, pre-tokenizers with their regexes, added tokens).
 *
 * Input: the file's bytes. Entry point: dt_tokenizer_load (the name ends in .json, so
 * dt_tokenizer_load_hf); an accepted tokenizer then encodes a fixed text (special tokens
 * allowed) and decodes the ids, gets Llama 3's chat tokens added (as `dtrain data import jsonl`
 * does) and reports its vocabulary size (fz_tokenizer_exercise, fuzz_util.c): the tables the file
 * built are used, not just built. */
#include "dtrain/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[4096];
    if (!path[0]) fz_path(path, sizeof path, "tokenizer.json");
    fz_write(path, data, size);
    dt_tokenizer *t = NULL;
    if (dt_tokenizer_load(path, &t) == DT_OK) fz_tokenizer_exercise(t);
    dt_tokenizer_free(t);
    return 0;
}
