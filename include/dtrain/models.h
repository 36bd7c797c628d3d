/* Model builders: the ResNet family (torchvision layout and names) and the Llama family
 * (Hugging Face LlamaForCausalLM layout and names). A builder adds parameters and ops to a
 * graph; weights are loaded afterwards by name (dt_model_load) or initialised
 * (dt_model_init_*). */
#ifndef DTRAIN_MODELS_H
#define DTRAIN_MODELS_H

#include <stdint.h>
#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ResNet ---------------------------------------------------------------------------- */

typedef struct dt_resnet_config {
    int depth;       /* 18, 34 (basic blocks), 50, 101, 152 (bottleneck, v1.5) */
    int in_channels; /* 3 for RGB */
    int num_classes;
    int small_stem; /* 1: 3x3 stride-1 conv, no max-pool (28x28 / 32x32 images) */
    int width;      /* channels of the first stage; torchvision: 64 */
    int recompute;  /* 1: recompute each residual block's activations in backward */
} dt_resnet_config;

/* x [N, in_channels, H, W] -> logits [N, num_classes]. Parameter names as torchvision's
 * state dict (conv1.weight, bn1.running_mean, layer1.0.conv1.weight, ..., fc.bias). */
int dt_resnet_build(dt_graph *g, const dt_resnet_config *c, int x);
/* Number of trainable parameters, without building. */
int64_t dt_resnet_param_count(const dt_resnet_config *c);
/* torchvision's initialisation: kaiming-normal (fan_out, relu) convs, BN weight 1 bias 0,
 * Linear U(-1/sqrt(in), 1/sqrt(in)); running var 1, mean 0. Deterministic from seed. */
dt_status dt_resnet_init(dt_graph *g, uint64_t seed);

/* ---- Llama ----------------------------------------------------------------------------- */

/* LoRA (Hu et al.; PEFT's LoraConfig): for each target projection W [out, in] the layer computes
 *   y = x W^T + (alpha / r) * dropout(x) A^T B^T,   A [r, in], B [out, r]
 * with W frozen (bf16) and A, B trainable f32, named as PEFT names them inside the model:
 * "model.layers.L.self_attn.q_proj.lora_A.weight" (PEFT's files add "base_model.model."). With
 * rank > 0 every base weight is frozen (matrices and embeddings in bf16, norms in f32) except the
 * modules to save below. */
enum {
    DT_LORA_Q = 1 << 0,
    DT_LORA_K = 1 << 1,
    DT_LORA_V = 1 << 2,
    DT_LORA_O = 1 << 3,
    DT_LORA_GATE = 1 << 4,
    DT_LORA_UP = 1 << 5,
    DT_LORA_DOWN = 1 << 6,
};
/* PEFT's modules_to_save: whole base modules trained as full copies beside the adapters. Such
 * a module's weight is a trainable f32 parameter in the flat buffers (gradients, optimizer state,
 * ZeRO shards, checkpoints) instead of a frozen one, and is saved in the adapter file under its
 * own name, "base_model.model.model.embed_tokens.weight" (PEFT writes the trained copy without
 * its ".modules_to_save.default." infix). Norms cover every layer: PEFT selects a module when its
 * path ends with a name, so "norm" selects model.norm and both norms of every layer.
 * Tied embeddings (tie_word_embeddings): embed_tokens and lm_head are one matrix, which either
 * bit makes trainable, kept tied, as PEFT does with ensure_weight_tying=True (the adapter then
 * holds it under both names; without that option PEFT unties them, which dtrain refuses). */
enum {
    DT_LORA_SAVE_EMBED = 1 << 0,      /* model.embed_tokens [V, D] */
    DT_LORA_SAVE_INPUT_NORM = 1 << 1, /* model.layers.L.input_layernorm [D], every layer */
    DT_LORA_SAVE_POST_NORM = 1 << 2,  /* model.layers.L.post_attention_layernorm [D], every L */
    DT_LORA_SAVE_FINAL_NORM = 1 << 3, /* model.norm [D] */
    DT_LORA_SAVE_LM_HEAD = 1 << 4,    /* lm_head [V, D] */
};
typedef struct dt_lora_config {
    int rank;                 /* r; 0 = no LoRA (full training) */
    float alpha;              /* scaling alpha (the update is scaled by alpha / r) */
    float dropout;            /* on the adapter input, training only */
    unsigned targets;         /* DT_LORA_* */
    unsigned modules_to_save; /* DT_LORA_SAVE_*; 0: adapters only */
} dt_lora_config;
/* "q_proj" -> DT_LORA_Q ...; 0 for an unknown name. */
unsigned dt_lora_target_bit(const char *name);
/* A modules_to_save name of dtrain's config (lora.modules_to_save) -> DT_LORA_SAVE_* bits, as
 * PEFT's suffix match selects modules: "embed_tokens", "input_layernorm",
 * "post_attention_layernorm", "norm" (all three norms), "model.norm" (the final one only),
 * "lm_head"; 0 for any other name. (Adapter files may use any suffix: see dt_lora_config_load.) */
unsigned dt_lora_module_bits(const char *name);

typedef struct dt_llama_config {
    int vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    int num_attention_heads, num_key_value_heads, head_dim;
    int max_position_embeddings;
    float rms_norm_eps, rope_theta;
    /* rope_scaling "llama3" (rope_type == 1) or none (0) */
    int rope_type;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position_embeddings;
    int tie_word_embeddings;
    int bos_token_id;
    int eos_token_ids[4], n_eos;
    int recompute;       /* 1: recompute each decoder layer in backward */
    dt_lora_config lora; /* rank 0: none */
} dt_llama_config;

/* Reads a Hugging Face config.json (file, or a folder holding one). Unknown architectures,
 * missing required keys and bad values give an error naming the file and key. */
dt_status dt_llama_config_load(const char *path, dt_llama_config *c);
int64_t dt_llama_param_count(const dt_llama_config *c);
/* Every tensor the config implies, against the weights' safetensors headers only (no tensor
 * data is read, nothing large allocated): path is the Hugging Face folder (model.safetensors or
 * the index's shards) or one safetensors file. Callers run it before allocating from the
 * config's sizes; a mismatch names config.json's field, the tensor and the weights file. */
dt_status dt_llama_weights_check(const char *path, const dt_llama_config *c);

/* ids [B, T] (i32/i64) -> logits [B, T, vocab]. */
int dt_llama_build(dt_graph *g, const dt_llama_config *c, int ids);
/* Hugging Face's initialisation (normal(0, 0.02) for linear/embedding, norms 1); LoRA adapters
 * as PEFT: A kaiming-uniform (bound 1/sqrt(in)), B zero, so training starts from the base. */
dt_status dt_llama_init(dt_graph *g, uint64_t seed);
/* Only the LoRA adapters (for a base loaded from files). */
dt_status dt_lora_init(dt_graph *g, uint64_t seed);
/* Trainable parameters of a LoRA config, as PEFT's print_trainable_parameters() counts them:
 * the adapters (sum over targeted projections of r * (in + out)) plus the modules_to_save
 * (V*D for embed_tokens and for an untied lm_head, once for a tied pair; D per norm). */
int64_t dt_lora_param_count(const dt_llama_config *c);
/* The modules_to_save part of it: parameters that train instead of staying in the frozen base. */
int64_t dt_lora_saved_param_count(const dt_llama_config *c);

/* PEFT adapter folders: adapter_config.json + adapter_model.safetensors with PEFT's key names
 * ("base_model.model.<module>.lora_A.weight"; a module to save as
 * "base_model.model.<module>.weight"). Save writes the graph's adapters and modules to save
 * (listed in modules_to_save); load reads them (every one of the graph must be there with its
 * shape, and nothing else; rank, alpha, targets and modules_to_save of adapter_config.json must
 * match the graph's config; errors name the file and key).
 * base_model: recorded as base_model_name_or_path (may be NULL). */
dt_status dt_lora_save(dt_graph *g, const dt_llama_config *c, const char *dir,
                       const char *base_model);
dt_status dt_lora_load(dt_graph *g, const dt_llama_config *c, const char *dir);
/* Reads rank/alpha/dropout/targets/modules_to_save from a PEFT adapter_config.json into c->lora.
 * c's base fields (num_hidden_layers, tie_word_embeddings) judge modules_to_save: each name is
 * matched as PEFT does (a module whose path ends with it) and must select only embed_tokens,
 * norms (every layer's, not some) or lm_head; a tied base needs ensure_weight_tying=true when
 * embed_tokens or lm_head is saved. */
dt_status dt_lora_config_load(const char *dir, dt_llama_config *c);
/* Merging an adapter into its base (src/nn/lora_merge.c), as PEFT's merge_and_unload: for every
 * targeted projection W [out, in], W' = W + (alpha / r) B A in f32 (A [r, in], B [out, r]).
 * base_dir: a Hugging Face folder (config.json + weights, any float dtype); adapter_dir: a PEFT
 * folder that dt_lora_config_load accepts, whose every targeted projection of every layer has
 * its A and B with the shapes the base implies (and no other tensors).
 * The adapter's modules_to_save replace the base's modules (as merge_and_unload returns them).
 * dt_lora_merge_graph: a forward-only f32 graph (ids [1, 1] -> logits) of the merged model and
 * its config (no LoRA), e.g. for dt_llm_from_graph; free it with dt_graph_free.
 * dt_lora_merge: writes the merged model to out_dir with dt_llama_save_hf (f32) and copies the
 * base's tokenizer and generation files; out_dir must not be the base or adapter folder. */
dt_status dt_lora_merge_graph(const char *base_dir, const char *adapter_dir, dt_graph **g,
                              dt_llama_config *c);
dt_status dt_lora_merge(const char *base_dir, const char *adapter_dir, const char *out_dir);

/* ---- Weights in and out ------------------------------------------------------------------ */

/* Loads every parameter of the graph (trainable, frozen and state) by name from a safetensors
 * file, or from a folder holding model.safetensors or a sharded model.safetensors.index.json.
 * f32, bf16 and f16 sources convert to the parameter's dtype. A missing tensor or a shape
 * mismatch is an error naming the tensor; tensors in the file that the graph lacks are an error
 * unless they are listed in `ignore` (NULL-terminated suffixes, e.g. "num_batches_tracked"). */
dt_status dt_model_load(dt_graph *g, const char *path, const char *const *ignore);
/* The same for the base model of a LoRA graph: the adapters (".lora_A." / ".lora_B.") are
 * not expected in the files. */
dt_status dt_model_load_base(dt_graph *g, const char *path, const char *const *ignore);

/* The same, but frozen parameters stored in the files in their own dtype (a bf16 matrix of a
 * bf16 base, an f32 norm) and aligned to their element size there are not copied: they point
 * into the files' read-only shared mappings (dt_graph_param_external), so the page cache holds
 * one copy of the base however many workers of the host map it. The other frozen parameters
 * (those that need a conversion) are copied as dt_model_load_base copies them with copy_rest,
 * and left alone without (another worker of the host converts them into shared memory);
 * trainable ones (modules_to_save) are always copied. *out holds the mappings: close it after
 * freeing the graph and every other graph attached to it. rep (may be NULL) counts the frozen
 * parameters mapped and the others, and says why the first of those could not be mapped. */
typedef struct dt_base_map dt_base_map;
typedef struct dt_base_report {
    int n_mapped, n_other; /* frozen parameters: pointing into the files, or not */
    size_t mapped_bytes, other_bytes;
    char why[256]; /* the first frozen tensor not mapped and why ("" when all were) */
} dt_base_report;
dt_status dt_model_map_base(dt_graph *g, const char *path, const char *const *ignore, int copy_rest,
                            dt_base_map **out, dt_base_report *rep);
/* Loads the base into g (this graph again, or another graph of the same model, e.g. rebuilt
 * for a new batch size) the same way, from the mappings m already holds. */
dt_status dt_base_map_attach(const dt_base_map *m, dt_graph *g, int copy_rest, dt_base_report *rep);
/* After a conversion pass: the files' pages read once leave this process's page tables (the
 * mapped parameters fault theirs back in from the page cache on their next read). */
void dt_base_map_drop_pages(const dt_base_map *m);
void dt_base_map_close(dt_base_map *m);
/* Writes every parameter (trainable, frozen, state) to one safetensors file, adding an i64 scalar
 * "<bn>.num_batches_tracked" for each batchnorm when bn_batches >= 0 (torchvision's state dict
 * has them), with metadata {"format": "pt"}. */
dt_status dt_model_save(dt_graph *g, const char *path, int64_t bn_batches);

#ifdef __cplusplus
}
#endif
#endif
