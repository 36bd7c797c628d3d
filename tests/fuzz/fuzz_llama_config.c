/* Fuzz target: a Hugging Face config.json of a Llama (src/nn/llama_config.c).
 *
 * Input: the file's bytes. Entry point: dt_llama_config_load on a file holding them; an accepted
 * config then goes through dt_llama_param_count and dt_lora_param_count, what `dtrain plan` and
 * the model builder compute from it first (their size arithmetic must not overflow). */
#include <stdio.h>
#include "dtrain/models.h"
#include "fuzz_util.h"

static volatile int64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[4096];
    if (!path[0]) fz_path(path, sizeof path, "config.json");
    fz_write(path, data, size);
    dt_llama_config c;
    if (dt_llama_config_load(path, &c) == DT_OK) {
        sink = dt_llama_param_count(&c);
        c.lora.rank = 8, c.lora.targets = 0x7f;
        sink += dt_lora_param_count(&c);
    }
    return 0;
}
