/* Llama inference with a KV cache (no graph: llm.c-style forward passes over plain buffers),
 * token sampling, and writing a Llama as a Hugging Face folder.
 *
 * Typical use:
 *   dt_llm *m;
 *   dt_llm_load("path/to/hf_folder", 2048, &m);      // weights + KV cache, nothing else
 *   dt_sample_opts o = {.temperature = 0.7f, .top_p = 0.9f, .seed = 42};
 *   dt_llm_generate(m, prompt, n_prompt, 256, &o, out, &n_out);
 *   dt_llm_free(m);
 *
 * Numerics follow Hugging Face's LlamaForCausalLM in float32: RMSNorm as x * rsqrt(mean(x^2) +
 * eps) * weight, rotary embeddings with the graph op's inv_freq table (default or "llama3"
 * scaling) in the rotate_half convention, grouped-query attention, SwiGLU MLP. */
#ifndef DTRAIN_GENERATE_H
#define DTRAIN_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/graph.h"
#include "dtrain/models.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_llm dt_llm;

/* An inference model over the weights of a compiled graph built by dt_llama_build (the weights
 * are borrowed, not copied: the graph must outlive the dt_llm; f32 parameters). The KV cache
 * holds max_seq positions (<= 0: the config's max_position_embeddings). */
dt_status dt_llm_from_graph(dt_graph *g, const dt_llama_config *c, int max_seq, dt_llm **out);
/* Loads a Hugging Face folder (config.json and model.safetensors, or a sharded checkpoint with
 * model.safetensors.index.json; f32/bf16/f16 tensors are converted to f32). Memory: the f32
 * weights, the KV cache and a small per-chunk scratch. A missing tensor, a shape mismatch or a
 * tensor the model does not have is an error naming the tensor and the file. */
dt_status dt_llm_load(const char *hf_dir, int max_seq, dt_llm **out);
void dt_llm_free(dt_llm *m);

const dt_llama_config *dt_llm_config(const dt_llm *m);
int dt_llm_max_seq(const dt_llm *m);
/* Number of positions now in the KV cache. */
int dt_llm_pos(const dt_llm *m);
/* Empties the KV cache (the next token is position 0). */
void dt_llm_reset(dt_llm *m);
/* Bytes held: the weights the dt_llm owns (0 when borrowed from a graph), the KV cache, and
 * scratch (activations of one chunk, sampling buffers). Any pointer may be NULL. */
void dt_llm_memory(const dt_llm *m, size_t *weights, size_t *kv_cache, size_t *scratch);

/* Appends n tokens at positions pos..pos+n-1 (the prompt is processed in blocks of up to 128
 * tokens with matrix-matrix products) and, when logits is not NULL, writes the logits of the
 * last one: logits [vocab_size]. Errors (nothing appended): n < 1, a token outside
 * [0, vocab_size), or pos + n > max_seq (the message names the cache length). */
dt_status dt_llm_logits(dt_llm *m, const int32_t *tokens, int n, float *logits);

typedef struct dt_sample_opts {
    float temperature; /* 0: greedy (argmax, lowest id on ties); > 0: sample softmax(logits/T) */
    float top_p;       /* nucleus: keep the most likely tokens until their mass reaches top_p;
                          0 or >= 1: off */
    int top_k;         /* keep the k most likely tokens (and ties with the k-th); 0: off (note:
                          transformers' generate defaults to 50) */
    uint64_t seed;     /* Philox key: the same seed, prompt and options give the same tokens */
    int ignore_eos;    /* 1: do not stop at the config's eos ids */
} dt_sample_opts;

/* The sampling kernel over plain buffers: picks a token from logits [V] (temperature, then
 * top-k, then top-p, as transformers' warpers; the uniform draw is Philox(seed, step)). work:
 * dt_sample_work_bytes(V) bytes of scratch. o NULL means greedy. */
size_t dt_sample_work_bytes(int V);
dt_status dt_sample_token(const float *logits, int V, const dt_sample_opts *o, uint64_t step,
                          void *work, int32_t *token);

/* Picks a token from logits [vocab_size] as dt_llm_generate does for its step-th new token
 * (temperature, then top-k, then top-p, as transformers' warpers; the uniform draw is Philox
 * (seed, step)). o NULL means greedy. */
dt_status dt_llm_sample(dt_llm *m, const float *logits, const dt_sample_opts *o, uint64_t step,
                        int32_t *token);

/* Resets the cache, runs the prompt, then produces up to max_new tokens into out (capacity
 * max_new), *n_out of them. Stops after an eos id of the config (the eos token is included in
 * out, as transformers does) unless o->ignore_eos, after max_new tokens, or when the cache is
 * full (at most max_seq - n_prompt + 1 new tokens). A prompt longer than the cache is an error
 * naming both lengths. o NULL means greedy. */
dt_status dt_llm_generate(dt_llm *m, const int32_t *prompt, int n_prompt, int max_new,
                          const dt_sample_opts *o, int32_t *out, int *n_out);

/* ---- Hugging Face folder out ------------------------------------------------------------- */

/* The Hugging Face names of a Llama's tensors: i in [0, dt_llama_tensor_count(c)) gives the
 * name (into name[len]) and shape (shape[2]) and returns ndim (1 or 2); 0 for i out of range.
 * Order: embed_tokens, per layer q/k/v/o_proj, gate/up/down_proj, the two norms, model.norm,
 * lm_head (absent when tied). */
int dt_llama_tensor_count(const dt_llama_config *c);
int dt_llama_tensor_name(const dt_llama_config *c, int i, char *name, size_t len, int64_t *shape);

/* Writes a folder that transformers' LlamaForCausalLM.from_pretrained loads: config.json and the
 * weights of the compiled graph g (found by their Hugging Face names; other parameters of g,
 * e.g. adapters, are not written) as model.safetensors, or, when they exceed max_shard_bytes
 * (0: no limit), as model-0000i-of-0000N.safetensors shards plus model.safetensors.index.json.
 * Everything is written into a temporary folder beside dir and renamed into place, so a failure
 * leaves no half-written folder. When dir exists, its model files are replaced and its other
 * files (tokenizer, generation config, ...) kept. */
dt_status dt_llama_save_hf(dt_graph *g, const dt_llama_config *c, const char *dir,
                           size_t max_shard_bytes);

#ifdef __cplusplus
}
#endif
#endif
