/* Trainer construction: config -> datasets, loaders, model graph, optimizer, run directory.
 * Every model/data mismatch is found here, before any work. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "dtrain/runtime.h"
#include "core/fsmode.h"
#include "train/train_impl.h"

static dt_status mkdirs(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST)
            return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST)
        return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    return DT_OK;
}

static dt_status open_data(dt_trainer *t, const dt_config *cfg) {
    char path[4096], path_train[4096];
    if (!t->v.data.train[0])
        return dt_error_set(DT_ERR_INVALID, "data.train: no training dataset given");
    dt_dataset_opts o = dt_dataset_opts_default();
    o.cache_mb = t->v.data.cache_mb, o.store_wait_s = t->v.data.store_wait_s;
    dt_config_resolve_path(cfg, t->v.data.train, path, sizeof path);
    snprintf(path_train, sizeof path_train, "%s", path);
    if (dt_dataset_open_with(path, &o, &t->train_ds) != DT_OK) {
        char m[1024];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "data.train: %s", m);
    }
    if (t->v.data.val[0]) {
        dt_config_resolve_path(cfg, t->v.data.val, path, sizeof path);
        if (dt_dataset_open_with(path, &o, &t->val_ds) != DT_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            return dt_error_set(DT_ERR_INVALID, "data.val: %s", m);
        }
    }
    const dt_dataset_info *ti = dt_dataset_get_info(t->train_ds);
    if (t->val_ds) {
        const dt_dataset_info *vi = dt_dataset_get_info(t->val_ds);
        if (vi->kind != ti->kind || vi->channels != ti->channels || vi->height != ti->height ||
            vi->width != ti->width)
            return dt_error_set(DT_ERR_INVALID,
                                "data.val: does not match data.train (kind or image shape)");
    }
    t->task = ti->kind == DT_DATA_TOKENS ? DT_TASK_LM : DT_TASK_IMAGE;
    /* the tokenizer the model is exported with, checked now: an s3:// copy that fails its xxh3
     * stops the run before it trains, not at the export after it */
    int has_tok = 0;
    if (ti->kind == DT_DATA_TOKENS && dt_dataset_tokenizer_export(path_train, NULL, &has_tok)) {
        char m[1024];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "data.train: %s", m);
    }
    return DT_OK;
}

/* Per-channel mean/std of the training images (first 2000 in dataset order), so inputs are
 * normalised for any dataset without hand-entered constants. */
static void image_stats(const dt_dataset *d, const dt_dataset_info *in, float *mean, float *std) {
    int64_t n = in->records < 2000 ? in->records : 2000, px = (int64_t)in->height * in->width;
    int c = in->channels;
    double s[4] = {0}, s2[4] = {0};
    for (int64_t i = 0; i < n; i++) {
        int32_t lab;
        const uint8_t *im = dt_dataset_image(d, i, &lab);
        for (int64_t k = 0; im && k < px * c; k++) {
            double v = im[k] / 255.0;
            s[k % c] += v, s2[k % c] += v * v;
        }
    }
    for (int k = 0; k < c && k < 4; k++) {
        double m = s[k] / (double)(n * px), var = s2[k] / (double)(n * px) - m * m;
        mean[k] = (float)m;
        std[k] = (float)(var > 1e-12 ? sqrt(var) : 1.0);
    }
}

/* The training loader for this rank's part (t->B at t->share_off of each global batch). The
 * validation loader's settings are the training one's, in *lc_out. */
static dt_status open_train_loader(dt_trainer *t, dt_loader_config *lc_out, dt_loader **out) {
    const dt_dataset_info *in = dt_dataset_get_info(t->train_ds);
    dt_loader_config lc;
    dt_loader_config_default(&lc);
    lc.batch_size = t->B;
    lc.seed = (uint64_t)t->v.train.seed;
    lc.shuffle = t->v.data.shuffle;
    lc.shuffle_window_bytes = t->v.data.shuffle_window_mb << 20;
    lc.drop_last = 1; /* a static graph: every training batch is full */
    lc.prefetch_threads = (int)t->v.data.workers;
    lc.skip_corrupt = t->v.data.on_corrupt == DT_CFG_CORRUPT_SKIP;
    lc.seq_len = t->T;
    lc.pack = t->v.data.pack == DT_CFG_PACK_DOCS ? DT_PACK_DOCS : DT_PACK_CONCAT;
    lc.rank = t->rank, lc.world_size = t->world; /* interleaved: the ranks' batch k together
                                                    are the one-process batch k of world x b */
    if (t->uneven) lc.global_batch = t->G, lc.global_offset = t->share_off; /* contiguous parts */
    if (t->task == DT_TASK_IMAGE) {
        const dt_config_values *v = &t->v;
        double m[4], sd[4], a[4];
        int nm = 0, ns = 0, n;
        /* the lists were checked by dt_config_validate */
        dt_config_numbers(&v->data.mean, "data.mean", m, 4, &nm);
        dt_config_numbers(&v->data.std, "data.std", sd, 4, &ns);
        if (nm > 0) {
            for (int c = 0; c < 4; c++)
                lc.mean[c] = (float)m[nm == 1  ? 0
                                      : c < nm ? c
                                               : 0],
                lc.std[c] = (float)sd[ns == 1  ? 0
                                      : c < ns ? c
                                               : 0];
        } else if (in->kind == DT_DATA_ENCODED) {
            /* torchvision's ImageNet normalisation */
            const float im[3] = {0.485f, 0.456f, 0.406f}, is[3] = {0.229f, 0.224f, 0.225f};
            for (int c = 0; c < 3; c++) lc.mean[c] = im[c], lc.std[c] = is[c];
        } else {
            image_stats(t->train_ds, in, lc.mean, lc.std);
        }
        lc.augment = v->data.augment;
        lc.image_size = (int)t->H;
        lc.resize = (int)v->data.resize;
        lc.dct_scaling = v->data.dct_scaling;
        dt_config_numbers(&v->data.crop_scale, "data.crop_scale", a, 4, &n);
        if (n == 2) lc.crop_scale[0] = a[0], lc.crop_scale[1] = a[1];
        dt_config_numbers(&v->data.crop_ratio, "data.crop_ratio", a, 4, &n);
        if (n == 2) lc.crop_ratio[0] = a[0], lc.crop_ratio[1] = a[1];
        dt_config_numbers(&v->data.jitter, "data.jitter", a, 4, &n);
        for (int c = 0; c < 3 && c < n; c++) lc.jitter[c] = (float)a[c];
    }
    if (lc_out) *lc_out = lc;
    return dt_loader_open(t->train_ds, &lc, out) != DT_OK ? DT_ERR_INVALID : DT_OK;
}

dt_status dt_train_open_loaders(dt_trainer *t) {
    dt_loader_config lc;
    if (open_train_loader(t, &lc, &t->train_ld) != DT_OK) return DT_ERR_INVALID;
    if (dt_loader_batches_per_epoch(t->train_ld) < 1)
        return dt_error_set(DT_ERR_INVALID, "data.batch: %lld is larger than the training set",
                            (long long)t->B);
    if (t->val_ds) {
        lc.shuffle = 0, lc.augment = 0, lc.drop_last = 0;
        lc.global_batch = lc.global_offset = 0; /* each rank evaluates its interleaved 1/world */
        if (dt_loader_open(t->val_ds, &lc, &t->val_ld) != DT_OK) return DT_ERR_INVALID;
    }
    return DT_OK;
}

/* Memory admission (dt_plan_admit) before the graph's arena, flat buffers and weights exist.
 * Every rank checks its own host; the ranks then agree, so that one refusal ends them all
 * before any allocates (a refused rank alone would leave the others waiting in a collective). */
dt_status dt_train_admit_memory(dt_trainer *t, const dt_config *cfg, const dt_config *held) {
    if (t->model == DT_MODEL_CUSTOM) return DT_OK; /* the plan describes the config's models */
    char warn[1024];
    dt_status st =
        dt_plan_admit_rebuild(cfg, held, t->world, dt_comm_local_size(t->comm), warn, sizeof warn);
    if (warn[0] && t->rank == 0) fprintf(stderr, "dtrain: warning: %s\n", warn);
    if (t->world < 2) return st;
    double refused[1] = {st != DT_OK};
    dt_status cs = dt_comm_allreduce_f64(t->comm, refused, 1);
    if (cs != DT_OK || st != DT_OK) return cs != DT_OK ? cs : st;
    if (refused[0] > 0)
        return dt_error_set(DT_ERR_RANGE,
                            "train.memory_check: %g of %d ranks refused the memory plan (their "
                            "message names the limit); this rank stops with them",
                            refused[0], t->world);
    return DT_OK;
}

/* dist.batch_shares: this rank's part of the global batch (t->B, t->share_off, t->G). Equal
 * weights are the default's exact path (every rank data.batch, interleaved). */
static dt_status split_batch(dt_trainer *t, const dt_config *cfg) {
    const dt_config_values *v = &t->v;
    int64_t w[4096];
    int n;
    t->G = v->data.batch * t->world, t->B = v->data.batch, t->share_off = 0, t->uneven = 0;
    dt_status st = dt_config_batch_shares(v->dist.batch_shares, w, 4096, &n);
    if (st == DT_OK && t->world > 1 && dt_config_shares_auto(v->dist.batch_shares))
        return dt_train_shares_start(t, cfg); /* equal contiguous parts until the re-balance */
    if (st != DT_OK || n == 0) return st;
    if (n != t->world)
        return dt_error_set(DT_ERR_INVALID,
                            "dist.batch_shares: %d weights for %d workers (one per worker)", n,
                            t->world);
    for (int i = 1; i < n; i++) t->uneven |= w[i] != w[0];
    if (!t->uneven) return DT_OK;
    if (!(t->parts = calloc((size_t)n, sizeof *t->parts)))
        return dt_error_set(DT_ERR_NOMEM, "trainer: out of memory");
    for (int r = 0; r < n && st == DT_OK; r++) {
        int64_t off;
        st = dt_config_share_split(t->G, w, n, r, &t->parts[r], &off);
        if (r == t->rank) t->B = t->parts[r], t->share_off = off;
    }
    return st;
}

/* lora.* of the config -> the builder's LoRA settings; errors name the key. */
dt_status dt_train_lora_config(const dt_config_values *v, dt_lora_config *l) {
    *l = (dt_lora_config){.rank = (int)v->lora.rank,
                          .alpha = (float)v->lora.alpha,
                          .dropout = (float)v->lora.dropout};
    for (int i = 0; i < v->lora.targets.n; i++) {
        unsigned b = dt_lora_target_bit(v->lora.targets.item[i]);
        if (!b)
            return dt_error_set(DT_ERR_INVALID,
                                "lora.targets: '%s' is not a Llama projection (q_proj, "
                                "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                                v->lora.targets.item[i]);
        l->targets |= b;
    }
    if (!l->targets)
        return dt_error_set(DT_ERR_INVALID, "lora.targets: empty (name the projections)");
    for (int i = 0; i < v->lora.modules_to_save.n; i++) {
        unsigned b = dt_lora_module_bits(v->lora.modules_to_save.item[i]);
        if (!b)
            return dt_error_set(DT_ERR_INVALID,
                                "lora.modules_to_save: '%s' is not a Llama module "
                                "(embed_tokens, input_layernorm, post_attention_layernorm, "
                                "norm, model.norm, lm_head)",
                                v->lora.modules_to_save.item[i]);
        l->modules_to_save |= b;
    }
    return DT_OK;
}

/* Model/data fit and the model's graph. */
static dt_status build_model(dt_trainer *t, const dt_config *cfg) {
    const dt_dataset_info *in = dt_dataset_get_info(t->train_ds);
    const dt_config_values *v = &t->v;
    if (t->task == DT_TASK_IMAGE) {
        t->C = in->channels, t->H = in->height, t->W = in->width, t->classes = in->classes;
        if (in->kind == DT_DATA_ENCODED) /* decoded and transformed to 3 x size x size */
            t->C = 3, t->H = t->W = v->data.image_size ? v->data.image_size : 224;
        else if (v->data.image_size && (v->data.image_size != t->H || v->data.image_size != t->W))
            return dt_error_set(DT_ERR_INVALID,
                                "data.image_size: %lld, but the images are %dx%d (resizing is "
                                "not supported; use 0)",
                                (long long)v->data.image_size, in->height, in->width);
        if (t->model == DT_MODEL_LLAMA)
            return dt_error_set(DT_ERR_INVALID,
                                "model.kind: llama needs a token dataset, data.train holds images");
        if (t->model == DT_MODEL_RESNET) {
            if (v->model.in_channels != t->C)
                return dt_error_set(
                    DT_ERR_INVALID, "model.in_channels: %lld, but the images have %lld channel%s",
                    (long long)v->model.in_channels, (long long)t->C, t->C == 1 ? "" : "s");
            if (v->model.num_classes < t->classes)
                return dt_error_set(DT_ERR_INVALID,
                                    "model.num_classes: %lld, but the labels go up to %lld",
                                    (long long)v->model.num_classes, (long long)t->classes - 1);
        }
    } else {
        t->T = v->data.seq_len;
        t->classes = in->vocab_size;
        if (t->model == DT_MODEL_RESNET)
            return dt_error_set(
                DT_ERR_INVALID,
                "model.kind: resnet needs an image dataset, data.train holds tokens");
    }
    if (t->model == DT_MODEL_RESNET) {
        t->rc = (dt_resnet_config){.depth = (int)v->model.depth,
                                   .in_channels = (int)t->C,
                                   .num_classes = (int)v->model.num_classes,
                                   .small_stem = v->model.small_stem,
                                   .width = (int)v->model.width,
                                   .recompute = v->model.recompute};
    } else if (t->model == DT_MODEL_LLAMA) {
        char path[4096];
        if (!v->model.hf_path[0])
            return dt_error_set(DT_ERR_INVALID, "model.hf_path: a Llama needs a config.json");
        dt_config_resolve_path(cfg, v->model.hf_path, path, sizeof path);
        if (dt_llama_config_load(path, &t->lc) != DT_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            return dt_error_set(DT_ERR_INVALID, "model.hf_path: %s", m);
        }
        /* pretrained: config.json's shapes against the weights' headers before the graph
         * allocates anything from them */
        if (v->model.init == DT_CFG_INIT_PRETRAINED &&
            dt_llama_weights_check(path, &t->lc) != DT_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            return dt_error_set(DT_ERR_INVALID, "model.hf_path: %s", m);
        }
        if (t->classes > t->lc.vocab_size)
            return dt_error_set(DT_ERR_INVALID,
                                "model.hf_path: vocab_size %d, but the dataset's token ids go up "
                                "to %lld (tokenizer and model do not match)",
                                t->lc.vocab_size, (long long)t->classes - 1);
        t->lc.recompute = v->model.recompute;
        dt_status st;
        if (v->lora.enabled && (st = dt_train_lora_config(v, &t->lc.lora)) != DT_OK) return st;
        t->classes = t->lc.vocab_size;
    }
    return dt_train_build_graph(t);
}

/* The graph of the model for this rank's batch t->B, compiled (arena and flat buffers); also
 * when dist.batch_shares=auto changes the batch (src/train/shares.c). Inputs: images
 * x [B, C, H, W] f32 and labels y [B], or token ids [B, T] and targets [B*T]. */
dt_status dt_train_build_graph(dt_trainer *t) {
    return dt_train_build_graph_on(t, (dt_device){DT_DEVICE_CPU, 0}, &t->g);
}

/* The same graph compiled for device d into *out (the node ids t->x, t->y, t->logits, t->loss
 * are the same in every build: the builders are deterministic). */
dt_status dt_train_build_graph_on(dt_trainer *t, dt_device d, dt_graph **out) {
    const dt_config_values *v = &t->v;
    dt_graph *g = *out = dt_graph_init();
    if (!g) return DT_ERR_NOMEM;
    if (t->task == DT_TASK_IMAGE) {
        t->x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){t->B, t->C, t->H, t->W}, 0);
        t->y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){t->B}, 0);
    } else {
        t->x = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){t->B, t->T}, 0);
        t->y = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){t->B * t->T}, 0);
    }
    if (t->model == DT_MODEL_RESNET)
        t->logits = dt_resnet_build(g, &t->rc, t->x);
    else if (t->model == DT_MODEL_LLAMA)
        t->logits = dt_llama_build(g, &t->lc, t->x);
    else
        t->logits = t->custom.build(g, t->x, t->custom.ud);
    if (t->logits < 0) return DT_ERR_INVALID;
    int flat = t->logits;
    if (t->task == DT_TASK_LM) {
        const dt_tensor *ls = dt_graph_shape(g, t->logits);
        flat = dt_reshape(g, t->logits, 2, (int64_t[]){t->B * t->T, ls->shape[ls->ndim - 1]});
    }
    t->loss = dt_cross_entropy(g, flat, t->y, (float)v->train.label_smoothing, -100);
    if (t->loss < 0 || dt_graph_keep(g, t->logits) != DT_OK) return DT_ERR_INVALID;
    /* ZeRO shards are equal slices of the flat buffers padded to world x shard elements. */
    dt_graph_opts go = {0};
    size_t n = 0;
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) && pi->offset + pi->numel > n)
            n = pi->offset + pi->numel;
    }
    go.flat_capacity = dt_ddp_flat_capacity(n, t->world, (int)v->dist.zero_stage);
    /* a LoRA base from the files: its frozen weights mostly point into shared mappings */
    go.frozen_untouched =
        v->lora.enabled && v->lora.share_base && v->model.init == DT_CFG_INIT_PRETRAINED;
    /* bf16 mixed precision: GEMM/conv operands rounded to bf16, everything else f32 */
    if (v->train.precision == DT_CFG_PREC_BF16) {
        dt_status st = dt_bf16_gemm_check("train.precision: bf16");
        if (st) return st;
        go.bf16_gemm = 1;
    }
    go.device = d;
    return dt_graph_compile(g, t->loss, &go);
}

static dt_status init_weights(dt_trainer *t, const dt_config *cfg) {
    const dt_config_values *v = &t->v;
    uint64_t seed = (uint64_t)v->train.seed;
    if (v->model.init == DT_CFG_INIT_PRETRAINED) {
        char path[4096];
        static const char *const ignore[] = {"num_batches_tracked", "rotary_emb.inv_freq", NULL};
        dt_config_resolve_path(cfg, v->model.hf_path, path, sizeof path);
        if (t->lc.lora.rank > 0) { /* the frozen base from the files, fresh adapters */
            dt_status st = dt_train_base_load(t, path, ignore);
            return st == DT_OK ? dt_lora_init(t->g, seed) : st;
        }
        return dt_model_load(t->g, path, ignore);
    }
    if (t->model == DT_MODEL_RESNET) return dt_resnet_init(t->g, seed);
    if (t->model == DT_MODEL_LLAMA) return dt_llama_init(t->g, seed);
    if (t->custom.init) return t->custom.init(t->g, seed, t->custom.ud);
    return dt_llama_init(t->g, seed); /* N(0, 0.02) matrices, ones elsewhere */
}

static dt_status make_optim(dt_trainer *t) {
    const dt_config_values *v = &t->v;
    dt_optim_config oc =
        dt_optim_config_default(v->optim.name == DT_CFG_OPTIM_SGD ? DT_OPTIM_SGD : DT_OPTIM_ADAMW);
    oc.weight_decay = v->optim.weight_decay;
    oc.momentum = v->optim.momentum;
    oc.nesterov = v->optim.nesterov;
    oc.beta1 = v->optim.beta1, oc.beta2 = v->optim.beta2, oc.eps = v->optim.eps;
    t->p = dt_graph_flat_param(t->g, &t->n);
    t->gr = dt_graph_flat_grad(t->g, NULL);
    int cap = dt_graph_param_count(t->g) + 1, ng = 0;
    dt_optim_group *groups = calloc((size_t)cap, sizeof *groups);
    dt_status st = DT_ERR_NOMEM;
    if (groups) {
        st = v->optim.no_decay_norm_bias ? dt_optim_groups_from_graph(t->g, groups, cap, &ng)
                                         : DT_OK;
        /* Under ZeRO this rank's optimizer covers its shard only (state for hi - lo). */
        size_t lo = 0, hi = t->n;
        if (t->ddp) dt_ddp_shard(t->ddp, &lo, &hi);
        if (st == DT_OK) st = dt_optim_init(&oc, t->n, lo, hi, groups, ng, &t->opt);
    }
    free(groups);
    if (st != DT_OK) return st;
    int64_t per_epoch = dt_loader_batches_per_epoch(t->train_ld) / v->train.grad_accum;
    t->prog.total_steps = v->train.steps > 0 ? v->train.steps : v->train.epochs * per_epoch;
    if (t->prog.total_steps < 1)
        return dt_error_set(DT_ERR_INVALID,
                            "train.grad_accum: %lld micro-batches per step, but an epoch has only "
                            "%lld batches",
                            (long long)v->train.grad_accum,
                            (long long)dt_loader_batches_per_epoch(t->train_ld));
    t->sched = (dt_lr_schedule){.kind = (dt_lr_kind)v->schedule.kind,
                                .base_lr = (float)v->optim.lr,
                                .warmup_steps = v->schedule.warmup_steps,
                                .total_steps = v->schedule.total_steps ? v->schedule.total_steps
                                                                       : t->prog.total_steps,
                                .min_lr = (float)v->schedule.min_lr,
                                .step_size = v->schedule.step_size,
                                .gamma = (float)v->schedule.gamma};
    if (t->sched.kind != DT_LR_CONSTANT && t->sched.kind != DT_LR_STEP &&
        t->sched.total_steps <= t->sched.warmup_steps)
        return dt_error_set(DT_ERR_INVALID,
                            "schedule.warmup_steps: %lld, but the run has only %lld steps",
                            (long long)t->sched.warmup_steps, (long long)t->sched.total_steps);
    if (dt_lr_check(&t->sched) != DT_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "schedule: %s", m);
    }
    return DT_OK;
}

static dt_status make_dist(dt_trainer *t) {
    static const char *const backends[] = {"auto", "mpi", "single"};
    int b = t->v.dist.backend;
    dt_status st = dt_comm_open(backends[b >= 0 && b < 3 ? b : 0], NULL, NULL, &t->comm);
    if (st != DT_OK) return st;
    t->rank = dt_comm_rank(t->comm), t->world = dt_comm_size(t->comm);
    return dt_comm_set_timeout(t->comm, t->v.dist.timeout_s);
}

/* SyncBatchNorm's reduction: per-channel sums over all ranks, queued behind the gradient
 * buckets already handed to the communication thread (a second collective at the same time on
 * the same communicator would break MPI's matching). */
static dt_status sync_sum(void *ud, double *buf, size_t n) {
    return dt_ddp_allreduce_f64((dt_ddp *)ud, buf, n);
}

/* After the weights exist: DDP, and every rank starts from rank 0's parameters. Gradients are
 * summed, not averaged: dt_trainer_step scales the loss by 1/world, so backward produces them
 * already divided (no pass over 4 bytes per parameter on the communication thread, which shares
 * a core with backward when the cores are all busy). */
dt_status dt_train_make_ddp(dt_trainer *t) {
    if (t->world < 2) return DT_OK;
    /* device ranks, and every rank of a staged job: no host DDP */
    if (t->staged) return dt_train_device_dist(t);
    dt_ddp_opts o = {.bucket_mb = t->v.dist.bucket_mb,
                     .overlap = t->v.dist.overlap,
                     .average = 0,
                     .zero_stage = (int)t->v.dist.zero_stage,
                     .sparse = t->v.dist.sparse_embedding,
                     .shm = t->v.dist.shared_memory,
                     .shard_frozen = dt_config_shard_base(&t->v)};
    dt_status st = dt_ddp_open(t->g, t->comm, &o, &t->ddp);
    if (st == DT_OK && o.shard_frozen) dt_train_base_sharded(t); /* shards copied out */
    if (st == DT_OK && t->v.dist.sync_batchnorm)
        dt_graph_set_sync_batchnorm(t->g, sync_sum, t->ddp);
    if (st == DT_OK) st = dt_ddp_broadcast_params(t->ddp);
    if (st == DT_OK) st = dt_ddp_broadcast_state(t->ddp);
    return st;
}

void dt_trainer_run_name(const char *configured, char *out, size_t n) {
    if (configured && configured[0]) {
        snprintf(out, n, "%s", configured);
        return;
    }
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(out, n, "%Y%m%d-%H%M%S", &tmv);
}

static dt_status make_run_dir(dt_trainer *t, const dt_config *cfg) {
    const dt_config_values *v = &t->v;
    char name[DT_CFG_STR_MAX];
    dt_trainer_run_name(v->output.run_name, name, sizeof name);
    const char *root = v->output.dir;
    if (!strncmp(root, "file://", 7)) root += 7;
    if (!strncmp(root, "s3://", 5))
        return dt_error_set(DT_ERR_INVALID,
                            "output.dir: s3:// run directories are not supported yet (use a path)");
    /* Rank 0 names the run; the others take its name so that all agree. */
    if (t->world > 1) {
        dt_status bs = dt_comm_broadcast(t->comm, name, sizeof name, 0);
        if (bs != DT_OK) return bs;
    }
    snprintf(t->run_dir, sizeof t->run_dir, "%s/%s/%s", root, v->output.experiment, name);
    if (t->rank != 0) return DT_OK; /* only rank 0 writes run files */
    dt_status st = mkdirs(t->run_dir);
    if (st != DT_OK) return st;
    char p[4200];
    snprintf(p, sizeof p, "%s/config.yaml", t->run_dir);
    return dt_config_save_yaml(cfg, p);
}

/* train.device -> t->device, before anything is built. Each rank takes the GPU of its local rank
 * (dt_device_local_rank). An explicit cuda/cuda:N trains on the device what the CUDA engine
 * covers (dt_train_device_check, src/train/device_train.c); auto stays on the CPU even where a
 * GPU is visible, saying so (the engine has never run on a real GPU, docs/gpu.md).
 * DT_ERR_INVALID throughout: the CLI reports it as a config error (exit 2). */
static dt_status pick_device(dt_trainer *t) {
    const char *spec = t->v.train.device;
    int is_auto = 0;
    dt_device d;
    if (dt_device_parse(spec, &d, &is_auto) != DT_OK)
        return dt_error_set(DT_ERR_INVALID,
                            "train.device: '%s' is not a device (expected auto, "
                            "cpu, cuda or cuda:N)",
                            spec);
    int gpus = 0;
    if (dt_device_count(DT_DEVICE_CUDA, &gpus) != DT_OK) gpus = 0;
    t->device = (dt_device){DT_DEVICE_CPU, 0};
    if (d.kind == DT_DEVICE_CPU && !is_auto) {
        snprintf(t->device_note, sizeof t->device_note, "device: cpu (train.device=cpu)");
        return DT_OK;
    }
    if (is_auto) {
        if (gpus == 0)
            snprintf(t->device_note, sizeof t->device_note, "device: cpu (train.device=auto: %s)",
                     dt_device_cuda_built() ? "no CUDA device visible"
                                            : "this dtrain was built without CUDA");
        else
            snprintf(t->device_note, sizeof t->device_note,
                     "device: cpu (train.device=auto: %d CUDA device%s visible, but auto does "
                     "not pick CUDA yet: set train.device=cuda, docs/gpu.md)",
                     gpus, gpus == 1 ? "" : "s");
        return DT_OK;
    }
    dt_device g;
    if (dt_device_resolve(spec, "train.device", dt_device_local_rank(), &g) != DT_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "%s", m);
    }
    char nm[DT_DEVICE_NAME_MAX];
    t->device = g;
    snprintf(t->device_note, sizeof t->device_note, "device: %s (train.device=%.64s)",
             dt_device_name(g, nm, sizeof nm), spec);
    return DT_OK;
}

dt_status dt_trainer_open(const dt_config *cfg, const dt_model_def *custom, dt_trainer **out) {
    *out = NULL;
    dt_trainer *t = calloc(1, sizeof *t);
    if (!t) return dt_error_set(DT_ERR_NOMEM, "trainer: out of memory");
    t->v = *dt_config_get_values(cfg);
    t->log = stdout;
    if (custom) {
        if (!custom->build) {
            free(t);
            return dt_error_set(DT_ERR_INVALID, "trainer: custom model '%s' has no build function",
                                custom->name ? custom->name : "");
        }
        t->custom = *custom, t->model = DT_MODEL_CUSTOM;
    } else {
        t->model = t->v.model.kind == DT_CFG_MODEL_LLAMA ? DT_MODEL_LLAMA : DT_MODEL_RESNET;
    }
    dt_threads_set((int)t->v.train.threads);
    dt_status st;
    double peak_unused;
    if ((st = pick_device(t)) != DT_OK || (st = make_dist(t)) != DT_OK ||
        (st = dt_train_device_agree(t)) != DT_OK || (st = dt_train_device_check(t)) != DT_OK ||
        (st = split_batch(t, cfg)) != DT_OK || (st = open_data(t, cfg)) != DT_OK ||
        (st = dt_train_admit_memory(t, cfg, NULL)) != DT_OK ||
        (dt_train_rss(&t->rss_base_mib, &peak_unused), (st = build_model(t, cfg)) != DT_OK) ||
        (st = dt_train_device_open(t)) != DT_OK || (st = dt_train_open_loaders(t)) != DT_OK ||
        (st = init_weights(t, cfg)) != DT_OK || (st = dt_train_make_ddp(t)) != DT_OK ||
        (st = make_optim(t)) != DT_OK || (st = make_run_dir(t, cfg)) != DT_OK) {
        t->failed = 1;
        dt_trainer_close(t);
        return st;
    }
    {
        /* the resolved config, recorded in every trainer_state.json */
        size_t len = 0;
        FILE *mf = open_memstream(&t->config_yaml, &len);
        if (mf) {
            dt_config_dump_yaml(cfg, mf);
            fclose(mf);
        }
        if (t->rank != 0) t->log = NULL; /* rank 0 logs */
        const char *run = strrchr(t->run_dir, '/');
        if ((st = dt_train_ckpt_open(t, run ? run + 1 : t->run_dir)) != DT_OK ||
            (st = dt_train_ckpt_resume(t)) != DT_OK ||
            (st = dt_train_device_upload(t)) != DT_OK) { /* after the resume: its state */
            t->failed = 1;
            dt_trainer_close(t);
            return st;
        }
    }
    /* The plan is only for the log's memory line: a model it cannot plan still trains. */
    t->have_plan = dt_plan_compute(cfg, t->world, &t->plan) == DT_OK;
    dt_error_clear();
    dt_train_track_open(t, cfg); /* experiment store: begins the run (or a new attempt) */
    t->t_start = t->t_last = dt_train_now();
    *out = t;
    return DT_OK;
}

void dt_trainer_close(dt_trainer *t) {
    if (!t) return;
    dt_train_ckpt_close(t);
    dt_train_track_close(t); /* after the checkpoint writer: it may still record an artifact */
    /* t->log and stderr back, now that no thread prints */
    dt_train_progress_free(t);
    free(t->config_yaml), free(t->parts);
    dt_train_shares_free(t);
    dt_loader_close(t->train_ld), dt_loader_close(t->val_ld);
    dt_dataset_close(t->train_ds), dt_dataset_close(t->val_ds);
    dt_train_device_close(t);
    dt_optim_free(t->opt);
    dt_ddp_close(t->ddp);
    dt_graph_free(t->g);
    dt_train_base_free(t); /* the mappings the graph's frozen parameters pointed into */
    if (t->comm && t->failed) dt_comm_set_failed(t->comm);
    dt_comm_close(t->comm);
    free(t);
}

const dt_train_progress *dt_trainer_progress(const dt_trainer *t) {
    return &t->prog;
}
const dt_eval_result *dt_trainer_last_eval(const dt_trainer *t) {
    return t->have_eval ? &t->eval : NULL;
}
const char *dt_trainer_run_dir(const dt_trainer *t) {
    return t->run_dir;
}
dt_graph *dt_trainer_graph(dt_trainer *t) {
    return t->g;
}
dt_optim *dt_trainer_optim(dt_trainer *t) {
    return t->opt;
}
void dt_trainer_set_log(dt_trainer *t, FILE *f) {
    t->log = t->rank == 0 ? f : NULL;
}

void dt_trainer_request_stop(dt_trainer *t) {
    if (t) t->stop_requested = 1;
}
