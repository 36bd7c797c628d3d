/* Internal to the memory plan: an abstract training graph whose ops carry only byte sizes and
 * what their backward reads, and a liveness sweep over it that follows the graph compiler's
 * rules (src/graph/compile.c): forward in creation order, backward in reverse, a recompute
 * segment's values rebuilt just before backward reaches it; a value lives from its writer to its
 * last reader, a gradient from its first writer to its last reader, scratch for one call. The
 * peak of live bytes is the planned arena without fragmentation.
 *
 * The model descriptions (plan_llama.c, plan_resnet.c) add one abstract op per graph op with the
 * sizes the real op's builder and prepare() choose, so a change to an op's saved data shows up
 * here as one line to edit. */
#ifndef DT_CONFIG_PLAN_IMPL_H
#define DT_CONFIG_PLAN_IMPL_H

#include <stdint.h>
#include "dtrain/config.h"
#include "dtrain/models.h"

/* Input ids of an abstract op that are not ops. */
#define PS_LEAF (-1)  /* batch input or frozen parameter: no gradient */
#define PS_TRAIN (-2) /* trainable parameter: needs a gradient (in the flat buffer) */

/* Op flags (as DT_OPF_* of src/graph/op.h). */
#define PS_BWD_IN(i) (1u << (i)) /* backward reads input i */
#define PS_BWD_OUT (1u << 4)     /* backward reads the output */
#define PS_ALIAS (1u << 6)       /* output is a view of input 0 (reshape) */

typedef struct ps_op {
    int64_t out, aux, ws_f, ws_b; /* bytes */
    int in[3], n_in;
    unsigned flags;
    int seg; /* recompute segment, -1 none */
} ps_op;

typedef struct ps_graph {
    ps_op *ops;
    int n, cap, seg, n_segs, failed;
} ps_graph;

/* Adds an op; returns its id (or -1 after an allocation failure, remembered in g->failed). */
int dt_ps_add(ps_graph *g, int64_t out, int64_t aux, int64_t ws_f, int64_t ws_b, unsigned flags,
              int n_in, int a, int b, int c);
/* Ops added between begin and end form one recompute segment (when on). */
void dt_ps_seg_begin(ps_graph *g, int on);
void dt_ps_seg_end(ps_graph *g);

typedef struct ps_result {
    int64_t peak;  /* most bytes live at once */
    int64_t saved; /* bytes live when forward ends (kept for backward, and the loss's) */
    int64_t state; /* non-trainable state outside the arena (batchnorm running stats), bytes */
} ps_result;
/* Sweeps the graph with its last op as the loss. */
dt_status dt_ps_run(const ps_graph *g, ps_result *r);
void dt_ps_free(ps_graph *g);

/* What the model descriptions need besides the model's own config. */
typedef struct plan_opts {
    int64_t batch, seq_len, image_size;
    int recompute;
    int threads;     /* attention scratch is per thread */
    int frozen_bf16; /* frozen base weights stored in bf16 (bf16 GEMM path) */
    int lora, lora_rank;
    double lora_dropout;
    unsigned lora_targets; /* bit per PLAN_T_* below */
    unsigned lora_modules; /* DT_LORA_SAVE_* (lora.modules_to_save): trained whole, in f32 */
} plan_opts;

enum { PLAN_T_Q, PLAN_T_K, PLAN_T_V, PLAN_T_O, PLAN_T_GATE, PLAN_T_UP, PLAN_T_DOWN, PLAN_T_N };
extern const char *const dt_plan_lora_target_names[PLAN_T_N];

/* Activation figures of one training step (forward + cross entropy + backward). */
dt_status dt_plan_llama_activations(const dt_llama_config *c, const plan_opts *o, ps_result *r);
dt_status dt_plan_resnet_activations(const dt_resnet_config *c, const plan_opts *o, ps_result *r);
/* LoRA adapter parameters: rank * (in + out) per targeted linear. */
int64_t dt_plan_lora_params(const dt_llama_config *c, int rank, unsigned targets);
/* Parameters of the LoRA modules to save (DT_LORA_SAVE_* bits): trainable, not frozen. */
int64_t dt_plan_lora_saved_params(const dt_llama_config *c, unsigned modules);

#endif
