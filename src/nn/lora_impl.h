/* Internal to the LoRA code (llama.c, lora.c, lora_merge.c): which modules a LoRA config trains
 * as full copies, and the graph parameter each module owns. */
#ifndef DT_NN_LORA_IMPL_H
#define DT_NN_LORA_IMPL_H

#include "dtrain/models.h"
#include "dtrain/safetensors.h"

/* c->lora.modules_to_save as the graph realises it: 0 without LoRA; with tied embeddings
 * DT_LORA_SAVE_EMBED and DT_LORA_SAVE_LM_HEAD go together (one shared matrix). */
unsigned dt_lora_saved(const dt_llama_config *c);

/* The DT_LORA_SAVE_* bit of the module that owns graph parameter `name`
 * ("model.embed_tokens.weight", "model.layers.3.input_layernorm.weight", "model.norm.weight",
 * "lm_head.weight"), 0 for any other parameter. */
unsigned dt_lora_param_module(const char *name);

/* Whether `key` of an adapter file is a module to save of graph g built with config c
 * ("base_model.model.<param name>", or the tied lm_head copy of a saved embedding). */
int dt_lora_saved_key(dt_graph *g, const dt_llama_config *c, const char *key);

/* Checks the adapter file f (named path in messages) holds every module to save of g (built with
 * c) with its shape, and, tied, the lm_head copy equal to the embedding; copies them into g's
 * values when `copy`. *n_keys: the file keys this accounts for. */
dt_status dt_lora_saved_load(const dt_st_file *f, const char *path, dt_graph *g,
                             const dt_llama_config *c, int copy, int *n_keys);

#endif
