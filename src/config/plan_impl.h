/* Internal to the memory plan (plan.c): the figures plan_measure.c reads off the real training
 * graph of a configuration, compiled with measure_only (nothing allocated). */
#ifndef DT_CONFIG_PLAN_IMPL_H
#define DT_CONFIG_PLAN_IMPL_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/config.h"
#include "dtrain/models.h"

typedef struct plan_figures {
    int64_t activation_bytes; /* the planned arena: activations, gradients, saved data, scratch */
    int64_t saved_bytes;      /* of it, bytes live when forward ends (kept for backward) */
    int64_t state_bytes;      /* non-trainable state (batchnorm running statistics) */
    int64_t frozen_bytes;     /* the frozen-parameter buffer (LoRA base: bf16 matrices) */
    int64_t frozen_largest;   /* the largest frozen parameter's bytes (lora.shard_base gathers) */
    int64_t frozen_layer_largest; /* the same among a decoder layer's ("layers." in the name) */
    int64_t frozen_layer_bytes;   /* the frozen bytes of decoder layer 0 */
    int64_t params_trainable;     /* elements of the flat parameter buffer */
    int64_t params_frozen;        /* elements of the frozen parameters */
} plan_figures;

/* One training step's graph (forward, cross entropy, backward) of batch x seq_len tokens /
 * batch images of side x side, planned with `threads` OpenMP threads (the trainer's
 * train.threads), measured. bf16: compiled as train.precision: bf16 runs it
 * (dt_graph_opts.bf16_gemm), so the GEMM ops' scratch holds their bf16-rounded operands. */
dt_status dt_plan_measure_llama(const dt_llama_config *c, int64_t batch, int64_t seq_len,
                                int threads, int bf16, plan_figures *f);
dt_status dt_plan_measure_resnet(const dt_resnet_config *c, int64_t batch, int64_t side,
                                 int threads, int bf16, plan_figures *f);

/* dt_plan_compute with the compile's thread count and bf16 rounding copies chosen by the caller,
 * and gpu: 1 when the plan is for a GPU (plan_gpu.c; the run line then names no CPU's bf16
 * support). dt_plan_compute is this with the trainer's threads and train.precision. */
dt_status plan_compute_as(const dt_config *c, int world, int threads, int bf16, int gpu,
                          dt_plan *p);
/* The text table's head (model, run and params lines, the column titles under `title`) and its
 * rows of the training state (parameters, with the bf16 copy when weight_bf16_bytes >= 0,
 * gradients, optimizer state, frozen weights, batchnorm statistics), labels `width` wide. */
void plan_print_head(FILE *f, const dt_plan *p, const char *title, int width);
void plan_print_rows(FILE *f, const dt_plan *p, int width, int64_t weight_bf16_bytes);
/* The plan's JSON object (dt_plan_print's) without its closing brace, for a caller that adds
 * keys (the GPU plan's "device"). */
void plan_print_json_body(FILE *f, const dt_plan *p);

#endif
