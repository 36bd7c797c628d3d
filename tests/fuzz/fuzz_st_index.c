/* Fuzz target: model.safetensors.index.json, the index of a sharded Hugging Face checkpoint
 * (its weight_map names the shard file of every tensor; src/nn/st_index.c reads it for both
 * loaders, src/nn/model_io.c and src/nn/llama_infer_load.c).
 *
 * Input: the index's bytes. A folder with a tiny Llama's config.json and its weights split over
 * two shards is made once; each input becomes the folder's index, and the folder is loaded by
 * both readers: dt_model_load (into a compiled graph of that Llama) and dt_llm_read_weights_
 * (dt_llm's loader, straight into one f32 buffer). A valid index loads everything, so the
 * fuzzer starts from the success path and mutates file names, tensor names and structure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/generate.h"
#include "dtrain/graph.h"
#include "dtrain/models.h"
#include "dtrain/ops_basic.h"
#include "dtrain/safetensors.h"
#include "fuzz_util.h"

dt_status dt_llm_read_weights_(const char *dir, const dt_llama_config *c, float *dst);

/* 1 layer, hidden 4, 2 heads of 2, tied embeddings: 10 tensors. */
static const char config_json[] =
    "{\"model_type\": \"llama\", \"vocab_size\": 8, \"hidden_size\": 4, "
    "\"intermediate_size\": 6, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 1, \"max_position_embeddings\": 16, "
    "\"tie_word_embeddings\": true, \"rms_norm_eps\": 1e-5}";

static char g_dir[4096], g_index[4200];
static dt_llama_config g_cfg;
static dt_graph *g_graph;
static float *g_buf;

/* Shard of tensor `name`: by the parity of its length (tests/fuzz/make_seeds.sh writes the
 * seed index with the same rule). */
static int shard_of(const char *name) {
    return (int)(strlen(name) % 2);
}

static void setup(void) {
    fz_path(g_dir, sizeof g_dir, "model");
    fz_mkdirs(g_dir);
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    fz_write(p, config_json, sizeof config_json - 1);
    if (dt_llama_config_load(g_dir, &g_cfg) != DT_OK) abort();
    int nt = dt_llama_tensor_count(&g_cfg);
    char names[32][128];
    float *data[32];
    dt_tensor t[32];
    dt_st_entry e[2][32];
    int ne[2] = {0, 0};
    for (int i = 0; i < nt && i < 32; i++) {
        int64_t shape[2];
        int nd = dt_llama_tensor_name(&g_cfg, i, names[i], sizeof names[i], shape);
        int64_t n = nd == 2 ? shape[0] * shape[1] : shape[0];
        data[i] = calloc((size_t)n, sizeof(float));
        for (int64_t k = 0; k < n; k++) data[i][k] = 0.01f * (float)(k + i);
        dt_tensor_init(&t[i], data[i], DT_F32, nd, shape);
        int s = shard_of(names[i]);
        e[s][ne[s]++] = (dt_st_entry){names[i], &t[i]};
    }
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/model-%05d-of-00002.safetensors", g_dir, s + 1);
        if (dt_st_save(p, e[s], ne[s], NULL, NULL, 0) != DT_OK) abort();
    }
    for (int i = 0; i < nt && i < 32; i++) free(data[i]);
    snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", g_dir);
    g_buf = calloc((size_t)dt_llama_param_count(&g_cfg), sizeof(float));

    g_graph = dt_graph_init();
    int ids = dt_graph_input(g_graph, "ids", DT_I32, 2, (int64_t[]){1, 1}, 0);
    int logits = dt_llama_build(g_graph, &g_cfg, ids);
    dt_graph_opts o = {.no_backward = 1};
    if (logits < 0 || dt_graph_compile(g_graph, dt_sum(g_graph, logits), &o) != DT_OK) {
        fprintf(stderr, "fuzz_st_index: %s\n", dt_last_error());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_graph) setup();
    fz_write(g_index, data, size);
    dt_model_load(g_graph, g_dir, NULL);
    dt_llm_read_weights_(g_dir, &g_cfg, g_buf);
    return 0;
}
