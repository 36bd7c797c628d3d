/* Fuzz target: a PEFT adapter's adapter_config.json (src/nn/lora.c): peft_type, r, lora_alpha,
 * lora_dropout, target_modules and the options dtrain refuses (use_rslora, rank_pattern, ...).
 *
 * Input: the file's bytes. Entry point: dt_lora_config_load on a folder holding it; an accepted
 * config's adapter size is then computed for a small Llama (dt_lora_param_count, what `dtrain
 * plan` and the trainer compute from it next). */
#include <stdio.h>
#include <string.h>
#include "dtrain/models.h"
#include "fuzz_util.h"

static volatile int64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[4096], path[4200];
    if (!dir[0]) {
        fz_path(dir, sizeof dir, "adapter");
        fz_mkdirs(dir);
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    }
    fz_write(path, data, size);
    dt_llama_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 128, c.hidden_size = 64, c.intermediate_size = 160, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
    if (dt_lora_config_load(dir, &c) == DT_OK) sink = dt_lora_param_count(&c);
    return 0;
}
