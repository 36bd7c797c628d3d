/* The memory plan of `dtrain plan`: per-worker bytes of parameters, gradients, optimizer state,
 * frozen weights and activations for a config, without weights.
 *
 * Flat buffers (docs/architecture.md): trainable parameters are one f32 buffer, gradients a second
 * of the same size, optimizer moments one (SGD with momentum) or two (AdamW) more. ZeRO shards
 * equal slices of these buffers, padded to a multiple of the world size: stage 1 the optimizer
 * state, stage 2 also the gradients, stage 3 also the parameters. Frozen weights (the LoRA base,
 * bf16 as docs/distributed.md has it) and batchnorm statistics are not sharded. Activations,
 * parameter counts, frozen and state bytes come from the real training graph of one micro-batch,
 * built by the model's builder and compiled with measure_only (plan_measure.c): the arena the
 * graph compiler plans for it, with nothing allocated; gradient accumulation does not change
 * them. */
#include <string.h>
#include <unistd.h>
#include "config/plan_impl.h"
#include "dtrain/data.h"
#include "dtrain/ops_linear.h"

static int64_t shard(int64_t n, int world) {
    return (n + world - 1) / world;
}

/* ORs into *out the bits of every name of list `key` (bits: 0 for an unknown name, which is
 * an error naming the key and `what` the names are). */
static dt_status name_bits(const dt_config_list *l, unsigned (*bits)(const char *name),
                           const char *key, const char *what, unsigned *out) {
    for (int i = 0; i < l->n; i++) {
        unsigned b = bits(l->item[i]);
        if (!b)
            return dt_error_set(DT_ERR_INVALID, "plan: %s: unknown %s '%s'", key, what, l->item[i]);
        *out |= b;
    }
    return DT_OK;
}

/* lora.* of the config as dt_llama_build reads it (the trainer's mapping, src/train/trainer.c). */
static dt_status lora_config(const dt_config_values *v, dt_lora_config *l) {
    *l = (dt_lora_config){.rank = (int)v->lora.rank,
                          .alpha = (float)v->lora.alpha,
                          .dropout = (float)v->lora.dropout};
    dt_status st =
        name_bits(&v->lora.targets, dt_lora_target_bit, "lora.targets", "layer", &l->targets);
    if (st != DT_OK) return st;
    return name_bits(&v->lora.modules_to_save, dt_lora_module_bits, "lora.modules_to_save",
                     "module", &l->modules_to_save);
}

static dt_status image_size(const dt_config *c, int64_t *side) {
    const dt_config_values *v = dt_config_get_values(c);
    *side = v->data.image_size;
    if (*side > 0) return DT_OK;
    if (!v->data.train[0])
        return dt_error_set(DT_ERR_INVALID,
                            "plan: a ResNet plan needs the image size: set data.image_size (or "
                            "data.train, to read it from the dataset)");
    char dir[DT_CFG_STR_MAX];
    dt_config_resolve_path(c, v->data.train, dir, sizeof dir);
    dt_dataset *d;
    dt_status st = dt_dataset_open(dir, 0, &d);
    if (st) return st;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    *side = in->kind == DT_DATA_IMAGE ? in->height : in->kind == DT_DATA_ENCODED ? 224 : 0;
    dt_dataset_close(d);
    if (*side <= 0)
        return dt_error_set(DT_ERR_INVALID, "plan: %s is not an image dataset (data.train)", dir);
    return DT_OK;
}

/* Refuses a plan whose byte counts could overflow (bound: an over-estimate in bytes). */
static dt_status too_large(double bound, const char *what) {
    if (bound < 0x1p60) return DT_OK;
    return dt_error_set(DT_ERR_RANGE,
                        "plan: %s need about %.3g bytes of activations, beyond the 2^60 bytes a "
                        "plan can count: reduce data.batch or data.seq_len",
                        what, bound);
}

dt_status dt_plan_compute(const dt_config *c, int world, dt_plan *p) {
    if (!c) return dt_error_set(DT_ERR_INVALID, "plan: NULL config or output");
    const dt_config_values *v = dt_config_get_values(c);
    /* the trainer's thread count (train.threads, 0: every CPU), which per-thread scratch follows */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = v->train.threads > 0 ? (int)v->train.threads : (cpus > 0 ? (int)cpus : 1);
    return plan_compute_as(c, world, threads, v->train.precision == DT_CFG_PREC_BF16, 0, p);
}

dt_status plan_compute_as(const dt_config *c, int world, int threads, int bf16, int gpu,
                          dt_plan *p) {
    if (!c || !p) return dt_error_set(DT_ERR_INVALID, "plan: NULL config or output");
    if (world < 1) return dt_error_set(DT_ERR_INVALID, "plan: %d workers (expected >= 1)", world);
    memset(p, 0, sizeof *p);
    const dt_config_values *v = dt_config_get_values(c);
    int64_t batch = v->data.batch;
    dt_status st;
    plan_figures f;
    p->kind = v->model.kind;
    p->gpu = gpu;
    p->batch = batch;
    if (v->model.kind == DT_CFG_MODEL_LLAMA) {
        char path[DT_CFG_STR_MAX];
        dt_config_resolve_path(c, v->model.hf_path, path, sizeof path);
        dt_llama_config m;
        if ((st = dt_llama_config_load(path, &m))) return st;
        m.recompute = v->model.recompute;
        if (v->lora.enabled && (st = lora_config(v, &m.lora))) return st;
        /* every byte count below is int64: a configuration whose tensors could pass 2^60 bytes
         * (B x T up to 2^42 tokens, times a 2^20 vocabulary...) is refused before any of them is
         * formed, with the sum bounded generously in double (rows x widths, 8 bytes each) */
        double N = (double)batch * (double)v->data.seq_len, D = m.hidden_size,
               F = m.intermediate_size, H = (double)m.num_attention_heads * m.head_dim;
        double bound = 8.0 * N *
                       (m.vocab_size +
                        (double)m.num_hidden_layers * (16 * D + 6 * F + 4 * H + 2.0 * m.lora.rank));
        if ((st = too_large(bound, "data.batch x data.seq_len tokens of this model"))) return st;
        if ((st = dt_plan_measure_llama(&m, batch, v->data.seq_len, threads, bf16, &f))) return st;
        /* lora.shard_base (zero_frozen.c): whole at once are the weights between their first
         * and last use in a pass and the next one (prefetched): the LM head (an untied
         * embedding is gathered by its looked-up rows, zero_frozen_rows.c: the rows and their
         * packed copy, at most half the table twice, so never more than the LM head) and what
         * follows it, where a tied embedding stays whole through forward beside two of a
         * layer's matrices; or two of a layer's matrices -- with recompute a whole layer and
         * the next matrix in backward, whose recomputed forward reads all of them first */
        int64_t ends = f.frozen_largest + f.frozen_layer_largest * (m.tie_word_embeddings ? 2 : 1),
                mid = m.recompute ? f.frozen_layer_bytes + f.frozen_layer_largest
                                  : 2 * f.frozen_layer_largest;
        p->frozen_gather_bytes = ends > mid ? ends : mid;
        p->seq_len = v->data.seq_len;
        p->logits_bytes = batch * p->seq_len * m.vocab_size * 4;
        snprintf(p->model_desc, sizeof p->model_desc,
                 "llama: %d layers, hidden %d, %d heads (%d kv, dim %d), mlp %d, vocab %d%s",
                 m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.num_key_value_heads,
                 m.head_dim, m.intermediate_size, m.vocab_size,
                 m.tie_word_embeddings ? ", tied embeddings" : "");
    } else {
        int64_t side;
        if ((st = image_size(c, &side))) return st;
        dt_resnet_config m = {(int)v->model.depth,       (int)v->model.in_channels,
                              (int)v->model.num_classes, v->model.small_stem,
                              (int)v->model.width,       v->model.recompute};
        if (dt_resnet_param_count(&m) < 0) return DT_ERR_INVALID;
        /* the widest layer is width << 3 channels; a stem keeps the full image side */
        double bound = 8.0 * (double)batch * (double)side * (double)side *
                       ((double)m.width * 64.0 + m.in_channels) * (m.depth / 2 + 4);
        if ((st = too_large(bound, "data.batch images of this size and model.width"))) return st;
        if ((st = dt_plan_measure_resnet(&m, batch, side, threads, bf16, &f))) return st;
        p->seq_len = side;
        snprintf(p->model_desc, sizeof p->model_desc,
                 "resnet-%d: %s stem, width %d, %d input channels, %d classes", m.depth,
                 m.small_stem ? "small-image" : "stock", m.width, m.in_channels, m.num_classes);
    }
    p->params_trainable = f.params_trainable;
    p->params_frozen = f.params_frozen;
    p->params_total = f.params_trainable + f.params_frozen;
    p->frozen_bytes = p->frozen_bytes_1 = f.frozen_bytes;
    p->state_bytes = f.state_bytes;
    p->activation_bytes = f.activation_bytes;
    p->saved_bytes = f.saved_bytes;
    return dt_plan_reshard(c, world, p);
}

dt_status dt_plan_reshard(const dt_config *c, int world, dt_plan *p) {
    if (!c || !p) return dt_error_set(DT_ERR_INVALID, "plan: NULL config or plan");
    if (world < 1) return dt_error_set(DT_ERR_INVALID, "plan: %d workers (expected >= 1)", world);
    const dt_config_values *v = dt_config_get_values(c);
    if (p->kind != v->model.kind || p->batch != v->data.batch)
        return dt_error_set(DT_ERR_INVALID,
                            "plan: reshard: the plan is of another model or data.batch");
    int lora = v->lora.enabled, bf16 = v->train.precision == DT_CFG_PREC_BF16;
    p->world = world;
    p->zero_stage = (int)v->dist.zero_stage;
    p->optim_states = v->optim.name == DT_CFG_OPTIM_ADAMW ? 2 : v->optim.momentum > 0 ? 1 : 0;
    int64_t t = p->params_trainable;
    p->param_bytes_1 = 4 * t;
    p->grad_bytes_1 = 4 * t;
    p->optim_bytes_1 = 4 * t * p->optim_states;
    int z = p->zero_stage;
    p->param_bytes = 4 * (z >= 3 ? shard(t, world) : t);
    p->grad_bytes = 4 * (z >= 2 ? shard(t, world) : t);
    p->optim_bytes = 4 * p->optim_states * (z >= 1 ? shard(t, world) : t);
    /* lora.shard_base (auto: ZeRO-3): 1/N of the base (zero_frozen.c) and the parameters whole
     * at once */
    p->base_sharded = lora && dt_config_shard_base(v) && world > 1 && p->frozen_bytes_1 > 0;
    p->frozen_bytes = p->base_sharded ? (p->frozen_bytes_1 + world - 1) / world +
                                            p->frozen_gather_bytes * (world - 1) / world
                                      : p->frozen_bytes_1;
    p->total_bytes = p->param_bytes + p->grad_bytes + p->optim_bytes + p->frozen_bytes +
                     p->state_bytes + p->activation_bytes;
    /* a sharded base is each worker's own 1/N (the mapping only serves the load) */
    p->base_shared = lora && v->lora.share_base && v->model.init == DT_CFG_INIT_PRETRAINED &&
                     p->frozen_bytes > 0 && !p->base_sharded;
    char lora_desc[160] = "";
    if (lora) {
        size_t j =
            (size_t)snprintf(lora_desc, sizeof lora_desc, ", LoRA r=%d on ", (int)v->lora.rank);
        for (int i = 0; i < v->lora.targets.n && j < sizeof lora_desc; i++)
            j += (size_t)snprintf(lora_desc + j, sizeof lora_desc - j, "%s%s", i ? "," : "",
                                  v->lora.targets.item[i]);
        for (int i = 0; i < v->lora.modules_to_save.n && j < sizeof lora_desc; i++)
            j += (size_t)snprintf(lora_desc + j, sizeof lora_desc - j, "%s%s",
                                  i ? "," : " + training ", v->lora.modules_to_save.item[i]);
    }
    if (v->model.kind == DT_CFG_MODEL_LLAMA)
        snprintf(p->run_desc, sizeof p->run_desc, "batch %lld x %lld tokens", (long long)p->batch,
                 (long long)p->seq_len);
    else
        snprintf(p->run_desc, sizeof p->run_desc, "batch %lld x %lldx%lld images",
                 (long long)p->batch, (long long)p->seq_len, (long long)p->seq_len);
    size_t j = strlen(p->run_desc);
    snprintf(p->run_desc + j, sizeof p->run_desc - j, ", %s, %s, %d worker%s, ZeRO stage %d%s%s",
             !bf16 ? "fp32"
             : !p->gpu && dt_bf16_gemm_mode() == DT_BF16_NONE
                 ? "bf16 (this CPU has no bf16 instructions)"
                 : "bf16",
             v->optim.name == DT_CFG_OPTIM_ADAMW ? "AdamW" : "SGD", world, world > 1 ? "s" : "", z,
             lora_desc, v->model.recompute ? ", recompute" : "");
    return DT_OK;
}

const char *dt_plan_group_digits(int64_t x, char *buf, size_t n) {
    char d[32];
    int l = snprintf(d, sizeof d, "%lld", (long long)x), j = 0;
    for (int i = 0; i < l && (size_t)j + 2 < n; i++) {
        if (i && (l - i) % 3 == 0 && d[i - 1] != '-') buf[j++] = ',';
        buf[j++] = d[i];
    }
    buf[j] = '\0';
    return buf;
}

static double gib(int64_t b) {
    return (double)b / (1024.0 * 1024.0 * 1024.0);
}

int64_t dt_plan_host_bytes(const dt_plan *p, int local) {
    if (local < 1) local = 1;
    return local * p->total_bytes - (p->base_shared ? (local - 1) * p->frozen_bytes : 0);
}

void plan_print_head(FILE *f, const dt_plan *p, const char *title, int width) {
    char a[40], b[40], c[40];
    fprintf(f, "model:  %s\n", p->model_desc);
    fprintf(f, "run:    %s\n", p->run_desc);
    fprintf(f, "params: %s total, %s trainable", dt_plan_group_digits(p->params_total, a, sizeof a),
            dt_plan_group_digits(p->params_trainable, b, sizeof b));
    if (p->params_frozen)
        fprintf(f, ", %s frozen", dt_plan_group_digits(p->params_frozen, c, sizeof c));
    fprintf(f, "\n\n%-*s %10s %10s\n", width, title, "GiB", "unsharded");
}

void plan_print_rows(FILE *f, const dt_plan *p, int width, int64_t weight_bf16_bytes) {
    const char *z = p->zero_stage ? "(sharded)" : "";
    char lbl[64];
    snprintf(lbl, sizeof lbl, "  trainable parameters (f32) %s", p->zero_stage >= 3 ? z : "");
    fprintf(f, "%-*s %10.2f %10.2f\n", width, lbl, gib(p->param_bytes), gib(p->param_bytes_1));
    if (weight_bf16_bytes >= 0)
        fprintf(f, "%-*s %10.2f\n", width, "  bf16 copy of them for the GEMMs",
                gib(weight_bf16_bytes));
    snprintf(lbl, sizeof lbl, "  gradients (f32) %s", p->zero_stage >= 2 ? z : "");
    fprintf(f, "%-*s %10.2f %10.2f\n", width, lbl, gib(p->grad_bytes), gib(p->grad_bytes_1));
    snprintf(lbl, sizeof lbl, "  optimizer state (%dx f32) %s", p->optim_states,
             p->zero_stage >= 1 ? z : "");
    fprintf(f, "%-*s %10.2f %10.2f\n", width, lbl, gib(p->optim_bytes), gib(p->optim_bytes_1));
    if (p->params_frozen && p->base_sharded)
        fprintf(f, "%-*s %10.2f %10.2f\n", width,
                p->frozen_bytes_1 < 3 * p->params_frozen ? "  frozen base weights (bf16) (sharded)"
                                                         : "  frozen base weights (f32) (sharded)",
                gib(p->frozen_bytes), gib(p->frozen_bytes_1));
    else if (p->params_frozen)
        fprintf(f, "%-*s %10.2f\n", width,
                /* bf16 matrices; the frozen norms (a few thousandths of it) stay f32 */
                p->frozen_bytes < 3 * p->params_frozen ? "  frozen base weights (bf16)"
                                                       : "  frozen base weights (f32)",
                gib(p->frozen_bytes));
    if (p->state_bytes)
        fprintf(f, "%-*s %10.2f\n", width, "  batchnorm statistics", gib(p->state_bytes));
}

void plan_print_json_body(FILE *f, const dt_plan *p) {
    fprintf(f,
            "{\"model\": \"%s\", \"kind\": \"%s\", \"world\": %d, \"zero_stage\": %d, "
            "\"batch\": %lld, \"seq_len\": %lld, \"params_total\": %lld, "
            "\"params_trainable\": %lld, \"params_frozen\": %lld, \"optim_states\": %d, "
            "\"param_bytes\": %lld, \"grad_bytes\": %lld, \"optim_bytes\": %lld, "
            "\"frozen_bytes\": %lld, \"state_bytes\": %lld, \"activation_bytes\": %lld, "
            "\"saved_bytes\": %lld, \"logits_bytes\": %lld, \"total_bytes\": %lld, "
            "\"base_sharded\": %s, \"frozen_gather_bytes\": %lld, "
            "\"unsharded\": {\"param_bytes\": %lld, \"grad_bytes\": %lld, "
            "\"optim_bytes\": %lld, \"frozen_bytes\": %lld}, \"host\": {\"workers\": %d, "
            "\"base_shared\": %s, \"total_bytes\": %lld}",
            p->model_desc, p->kind == DT_CFG_MODEL_LLAMA ? "llama" : "resnet", p->world,
            p->zero_stage, (long long)p->batch, (long long)p->seq_len, (long long)p->params_total,
            (long long)p->params_trainable, (long long)p->params_frozen, p->optim_states,
            (long long)p->param_bytes, (long long)p->grad_bytes, (long long)p->optim_bytes,
            (long long)p->frozen_bytes, (long long)p->state_bytes, (long long)p->activation_bytes,
            (long long)p->saved_bytes, (long long)p->logits_bytes, (long long)p->total_bytes,
            p->base_sharded ? "true" : "false", (long long)p->frozen_gather_bytes,
            (long long)p->param_bytes_1, (long long)p->grad_bytes_1, (long long)p->optim_bytes_1,
            (long long)p->frozen_bytes_1, p->world, p->base_shared ? "true" : "false",
            (long long)dt_plan_host_bytes(p, p->world));
}

void dt_plan_print(FILE *f, const dt_plan *p, int json) {
    if (json) {
        plan_print_json_body(f, p);
        fprintf(f, "}\n");
        return;
    }
    plan_print_head(f, p, "memory per worker", 44);
    plan_print_rows(f, p, 44, -1);
    fprintf(f, "%-44s %10.2f\n", "  activations (planned arena)", gib(p->activation_bytes));
    fprintf(f, "%-44s %10.2f\n", "    kept from forward for backward", gib(p->saved_bytes));
    if (p->logits_bytes)
        fprintf(f, "%-44s %10.2f\n", "    logits [B, T, V] f32 (one copy)", gib(p->logits_bytes));
    fprintf(f, "%-44s %10.2f\n", "  total", gib(p->total_bytes));
    if (p->base_shared && p->world > 1) { /* lora.share_base: one base per host */
        char lbl[64];
        snprintf(lbl, sizeof lbl, "  all %d on one host, sharing the base", p->world);
        fprintf(f, "%-44s %10.2f\n", lbl, gib(dt_plan_host_bytes(p, p->world)));
    }
    if (p->zero_stage)
        fprintf(f, "\nZeRO stage %d over %d workers shards the %s by %d.\n", p->zero_stage,
                p->world,
                p->zero_stage == 1   ? "optimizer state"
                : p->zero_stage == 2 ? "optimizer state and gradients"
                                     : "optimizer state, gradients and parameters",
                p->world);
    if (p->base_sharded)
        fprintf(f,
                "The frozen base is sharded by %d (lora.shard_base): each worker keeps 1/%d of "
                "it and "
                "gathers each weight whole just before use (%.2f GiB at once at most).\n",
                p->world, p->world, gib(p->frozen_gather_bytes));
}
