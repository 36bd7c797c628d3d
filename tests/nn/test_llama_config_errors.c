/* Every refusal of a config.json names the file, the key and the rule broken (issue 26: a head
 * count that does not divide hidden_size was "sizes must be positive and head_dim even"). Each
 * case changes one key of a valid config; the message must hold every listed phrase. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/models.h"
#include "dtrain/status.h"
#include "harness.h"

static char dir[64];

#define BASE                                                                                       \
    "\"vocab_size\":256,\"intermediate_size\":128,\"num_hidden_layers\":2,"                        \
    "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"model_type\":\"llama\""

/* Loads `json` written as <dir>/<name>.json; want[] phrases must all be in the error (none:
 * the load must succeed). */
static void expect(const char *name, const char *json, const char *const *want) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "write %s", path);
    if (!f) return;
    fputs(json, f);
    fclose(f);
    dt_llama_config c;
    dt_status s = dt_llama_config_load(path, &c);
    if (!want[0]) {
        CHECK(s == DT_OK, "%s: loads: %s", name, dt_last_error());
    } else {
        const char *m = dt_last_error();
        CHECK(s != DT_OK, "%s: refused", name);
        CHECK(strstr(m, path) != NULL, "%s: names the file: %s", name, m);
        for (int i = 0; want[i]; i++)
            CHECK(strstr(m, want[i]) != NULL, "%s: says '%s': %s", name, want[i], m);
        CHECK(strchr(m, '\n') == NULL, "%s: one line: %s", name, m);
        printf("  %-16s -> %s\n", name, m + strlen(path) + 2);
    }
    remove(path);
}
#define EXPECT(name, json, ...) expect(name, json, (const char *const[]){__VA_ARGS__, NULL})

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dt_llcfg_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    EXPECT("good", "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4}", NULL);
    EXPECT("good-head-dim",
           "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":3,"
           "\"head_dim\":16}",
           NULL);
    /* the case: 3 heads do not divide 64 */
    EXPECT("heads-divide", "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":3}",
           "hidden_size 64", "not a multiple of num_attention_heads 3", "head_dim");
    EXPECT("head-dim-odd", "{" BASE ",\"hidden_size\":63,\"num_attention_heads\":3}",
           "head_dim is 21", "even");
    EXPECT("zero-layers",
           "{\"vocab_size\":256,\"intermediate_size\":128,\"num_hidden_layers\":0,"
           "\"hidden_size\":64,\"num_attention_heads\":4}",
           "'num_hidden_layers' is 0", "at least 1");
    EXPECT("zero-kv",
           "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
           "\"num_key_value_heads\":0}",
           "'num_key_value_heads' is 0", "at least 1");
    EXPECT("kv-divide",
           "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
           "\"num_key_value_heads\":3}",
           "num_attention_heads 4", "not a multiple of num_key_value_heads 3");
    EXPECT("fraction", "{" BASE ",\"hidden_size\":64.5,\"num_attention_heads\":4}",
           "'hidden_size' is 64.5", "integer");
    EXPECT("string", "{" BASE ",\"hidden_size\":\"64\",\"num_attention_heads\":4}",
           "'hidden_size' is a string", "integer");
    EXPECT("missing", "{" BASE ",\"num_attention_heads\":4}", "missing key 'hidden_size'");
    EXPECT("eps",
           "{\"vocab_size\":256,\"intermediate_size\":128,\"num_hidden_layers\":2,"
           "\"hidden_size\":64,\"num_attention_heads\":4,\"rms_norm_eps\":0}",
           "'rms_norm_eps' is 0", "positive");
    EXPECT("bias",
           "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
           "\"attention_bias\":true}",
           "'attention_bias' is true", "not supported");
    EXPECT("duplicate",
           "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
           "\"hidden_size\":128}",
           "'hidden_size' appears twice");
    EXPECT("eos", "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"eos_token_id\":-1}",
           "'eos_token_id'", "not a token id");
    EXPECT("rope",
           "{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
           "\"rope_scaling\":{\"rope_type\":\"yarn\"}}",
           "rope_type 'yarn'", "not supported");
    EXPECT("model-type", "{\"model_type\":\"gpt2\"}", "model_type 'gpt2'", "not supported");
    rmdir(dir);
    return dt_test_finish("test_llama_config_errors");
}
