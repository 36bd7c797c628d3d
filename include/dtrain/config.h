/* The run configuration: one YAML file with sections, checked against a single static schema,
 * any key overridable as `section.key=value`; and the memory plan (`dtrain plan`).
 *
 * Typical use (what `dtrain train` and `dtrain plan` do):
 *   dt_config *cfg;
 *   if (dt_config_from_args("run.yaml", n_overrides, overrides, &cfg) != DT_OK) {
 *       fprintf(stderr, "%s\n", dt_last_error());   // names file:line, key, value, expectation
 *       return 2;
 *   }
 *   const dt_config_values *v = dt_config_get_values(cfg);
 *   ... v->optim.lr, v->model.kind == DT_CFG_MODEL_LLAMA, v->lora.targets.item[i] ...
 *   dt_config_dump_yaml(cfg, f);   // the resolved config, for the run directory
 *   dt_config_free(cfg);
 *
 * The schema (src/config/schema.c) holds, for every key: its dotted name, type, default, allowed
 * range or values, and a one-line meaning; dt_config_help prints it. Errors:
 *   run.yaml:7: unknown key 'optim.weight_decy' (did you mean 'optim.weight_decay'?)
 *   run.yaml:3: optim.lr: 'fast' is not a number (expected a float in (0, 10])
 *   command line: train.steps=-5: -5 is out of range (expected an integer >= 0)
 *   run.yaml:12: lora.enabled is true but model.kind is 'resnet' (LoRA needs model.kind llama)
 * Per-key checks (type, range, enum value) happen as a value is read or set; cross-key checks
 * (dt_config_validate) once all overrides are in, so an override can fix a file's value. */
#ifndef DTRAIN_CONFIG_H
#define DTRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CFG_STR_MAX 1024 /* longest string / path value, with the terminating NUL */
#define DT_CFG_LIST_MAX 16  /* most items of a list value */
#define DT_CFG_ITEM_MAX 64  /* longest list item, with the NUL */

/* Enum values, in the order the schema lists them (the numbers match dt_optim_kind and
 * dt_lr_kind of dtrain/optim.h). */
enum { DT_CFG_MODEL_RESNET = 0, DT_CFG_MODEL_LLAMA = 1 };
enum { DT_CFG_INIT_RANDOM = 0, DT_CFG_INIT_PRETRAINED = 1 };
enum { DT_CFG_OPTIM_SGD = 0, DT_CFG_OPTIM_ADAMW = 1 };
enum {
    DT_CFG_SCHED_CONSTANT = 0,
    DT_CFG_SCHED_LINEAR = 1,
    DT_CFG_SCHED_COSINE = 2,
    DT_CFG_SCHED_STEP = 3
};
enum { DT_CFG_PREC_FP32 = 0, DT_CFG_PREC_BF16 = 1 };
enum { DT_CFG_BACKEND_AUTO = 0, DT_CFG_BACKEND_MPI = 1, DT_CFG_BACKEND_SINGLE = 2 };
/* dist.gpu_comm: dt_gpu_comm_kind's values (dtrain/gpu_comm.h) */
enum { DT_CFG_GPU_COMM_AUTO = 0, DT_CFG_GPU_COMM_NCCL = 1, DT_CFG_GPU_COMM_HOST = 2 };
enum { DT_CFG_CORRUPT_STOP = 0, DT_CFG_CORRUPT_SKIP = 1 };
enum { DT_CFG_PACK_CONCAT = 0, DT_CFG_PACK_DOCS = 1 }; /* dt_pack_mode's values */
enum { DT_CFG_PROGRESS_AUTO = 0, DT_CFG_PROGRESS_ON = 1, DT_CFG_PROGRESS_OFF = 2 };
/* train.memory_check: refuse (on), go on with a warning (warn) or skip (off) */
enum { DT_CFG_CUDA_GRAPH_AUTO = 0, DT_CFG_CUDA_GRAPH_OFF = 1 }; /* train.cuda_graph */
enum { DT_CFG_MEMCHECK_ON = 0, DT_CFG_MEMCHECK_OFF = 1, DT_CFG_MEMCHECK_WARN = 2 };
enum { DT_CFG_SHARD_FALSE = 0, DT_CFG_SHARD_TRUE = 1, DT_CFG_SHARD_AUTO = 2 }; /* lora.shard_base */

typedef struct dt_config_list {
    int n;
    char item[DT_CFG_LIST_MAX][DT_CFG_ITEM_MAX];
} dt_config_list;

/* The resolved values, one field per schema key (ints are int64_t, floats double, bools and
 * enums int, strings/paths/URIs char arrays, lists dt_config_list). */
typedef struct dt_config_values {
    struct {
        int kind;       /* DT_CFG_MODEL_* */
        int64_t depth;  /* ResNet depth: 18, 34, 50, 101, 152 */
        int small_stem; /* ResNet 3x3 stride-1 stem without max-pool */
        int64_t in_channels, num_classes, width;
        char hf_path[DT_CFG_STR_MAX]; /* HF folder (config.json [+ weights]) or config.json */
        int init;                     /* DT_CFG_INIT_* */
        int recompute;                /* activation checkpointing per block / decoder layer */
    } model;
    struct {
        char train[DT_CFG_STR_MAX], val[DT_CFG_STR_MAX];
        int64_t batch;      /* per worker, per micro-batch */
        int64_t seq_len;    /* language models */
        int64_t image_size; /* images: H = W in pixels; 0 = from the dataset */
        int augment, shuffle;
        int64_t shuffle_window_mb; /* block-aware shuffling: MiB mixed at a time (0: off) */
        int64_t workers;           /* prefetch threads */
        int on_corrupt;            /* DT_CFG_CORRUPT_*: a payload block failing its checksum */
        int pack;       /* DT_CFG_PACK_*: token windows over the stream, or whole documents */
        int64_t resize; /* encoded images, eval: shorter side (0: image size * 8 / 7) */
        /* encoded images: RandomResizedCrop bounds, ColorJitter strengths; normalisation
         * (numbers as text: dt_config_numbers) */
        dt_config_list crop_scale, crop_ratio, jitter, mean, std;
        int dct_scaling;  /* JPEGs decoded at 1/2..1/8 where the crop allows */
        int64_t cache_mb; /* s3:// datasets: resident payload blocks */
        double
            store_wait_s; /* s3:// datasets: how long a store that does not answer is waited for */
    } data;
    struct {
        int name; /* DT_CFG_OPTIM_* */
        double lr, momentum;
        int nesterov;
        double weight_decay, beta1, beta2, eps, clip_norm;
        int no_decay_norm_bias;
    } optim;
    struct {
        int kind; /* DT_CFG_SCHED_* */
        int64_t warmup_steps, total_steps;
        double min_lr;
        int64_t step_size;
        double gamma;
        int on_extend; /* a resume whose run is longer or shorter: 0 continue, 1 stretch,
                        * 2 restart (docs/checkpoints.md) */
    } schedule;
    struct {
        int64_t steps, epochs, grad_accum, threads, seed;
        double label_smoothing;
        int precision;               /* DT_CFG_PREC_* */
        char device[DT_CFG_STR_MAX]; /* auto | cpu | cuda | cuda:N (dt_device_resolve) */
        int cuda_graph;              /* DT_CFG_CUDA_GRAPH_*: the step as a CUDA graph */
        int64_t log_every, eval_every;
        int progress;     /* DT_CFG_PROGRESS_*: the terminal progress line */
        int memory_check; /* DT_CFG_MEMCHECK_*: the plan against the memory available */
    } train;
    struct {
        int64_t zero_stage;
        char batch_shares[DT_CFG_STR_MAX]; /* "equal", "auto" or "3,1": dt_config_batch_shares */
        int64_t rebalance_step; /* batch_shares auto: the step after which the parts change */
        double bucket_mb;
        int backend; /* DT_CFG_BACKEND_* */
        int overlap;
        int sync_batchnorm;
        int sparse_embedding;
        int shared_memory;
        int gpu_comm;     /* DT_CFG_GPU_COMM_*: the device ranks' gradient all-reduce */
        double timeout_s; /* the hang watchdog (dt_comm_set_timeout); 0: off */
    } dist;
    struct {
        int enabled;
        int64_t rank;
        double alpha, dropout;
        dt_config_list targets;
        dt_config_list modules_to_save; /* PEFT's: whole modules trained beside the adapters */
        int share_base;                 /* the frozen base mapped once per host (docs/lora.md) */
        int shard_base; /* DT_CFG_SHARD_*: the frozen base sharded across workers (docs/lora.md);
                           dt_config_shard_base resolves auto */
    } lora;
    struct {
        char dir[DT_CFG_STR_MAX]; /* storage URI: path, file://..., s3://bucket/prefix */
        int64_t every_steps;
        double every_minutes;
        int64_t keep_last;
        int64_t keep_best;
        char best_metric[DT_CFG_STR_MAX];
        int best_mode; /* 0 min, 1 max */
        int async;
        int require_writable;        /* probe the location at start; refuse if it fails */
        char resume[DT_CFG_STR_MAX]; /* "auto", "never", or a checkpoint URI */
    } ckpt;
    struct {
        char dir[DT_CFG_STR_MAX]; /* storage URI of the experiment store */
        char experiment[DT_CFG_STR_MAX], run_name[DT_CFG_STR_MAX];
        int export_model; /* key "output.export" */
    } output;
    struct {
        char uri[DT_CFG_STR_MAX]; /* experiment store: "" = <output.dir>/dtrain.db, "off" */
    } tracking;
} dt_config_values;

typedef struct dt_config dt_config;

/* ---- Schema ------------------------------------------------------------------------------ */

typedef enum dt_config_type {
    DT_CFG_INT,   /* 64-bit integer */
    DT_CFG_FLOAT, /* double, finite */
    DT_CFG_BOOL,  /* true/false (also yes/no, on/off, 1/0) */
    DT_CFG_STR,   /* any text */
    DT_CFG_ENUM,  /* one of `choices` ("a|b|c"), stored as its index */
    DT_CFG_LIST,  /* list of strings ([a, b] in YAML, a,b on the command line) */
    DT_CFG_PATH,  /* local path (may be empty) */
    DT_CFG_URI,   /* storage URI: path, file://path or s3://bucket[/prefix] (may be empty) */
} dt_config_type;

/* Range flags. */
enum {
    DT_CFG_HAS_MIN = 1 << 0,
    DT_CFG_HAS_MAX = 1 << 1,
    DT_CFG_MIN_OPEN = 1 << 2, /* value > min rather than >= */
    DT_CFG_MAX_OPEN = 1 << 3, /* value < max rather than <= */
    DT_CFG_REPEATS = 1 << 4,  /* LIST: an item may repeat (lists of numbers) */
};

typedef struct dt_config_key {
    const char *name; /* "section.key" */
    dt_config_type type;
    const char *def; /* default, as it would be written on the command line */
    unsigned range;  /* DT_CFG_HAS_MIN | ... (INT, FLOAT) */
    double min, max;
    const char *choices; /* ENUM: "a|b|c"; LIST: allowed items or NULL for any */
    const char *help;    /* one line */
    size_t offset;       /* field offset in dt_config_values */
} dt_config_key;

int dt_config_key_count(void);
const dt_config_key *dt_config_key_at(int i);
const dt_config_key *dt_config_key_find(const char *name); /* NULL if unknown */
const char *dt_config_type_name(dt_config_type t);         /* "int", "float", ... */
/* Prints every key with type, default, allowed values and meaning, by section. */
void dt_config_help(FILE *f);

/* ---- Life cycle ---------------------------------------------------------------------------- */

/* A config holding every default. NULL only when out of memory. */
dt_config *dt_config_init_defaults(void);
/* Reads a YAML file over the defaults. Unknown keys and sections, wrong types, out-of-range or
 * bad enum values, duplicate keys and malformed YAML are errors naming file, line and key (and
 * the nearest valid key for a typo). Cross-key checks are left to dt_config_validate. */
dt_status dt_config_load(const char *path, dt_config **out);
/* One override: key "section.key" and its value as text (YAML-style for bools and lists). */
dt_status dt_config_set(dt_config *c, const char *key, const char *value);
/* dist.batch_shares: "equal" or "auto" (*n = 0 for both: auto starts with equal parts), or 1 to
 * max positive integer weights, "3,1" or "[3, 1]" (*n of them into w). Errors name the key and
 * what is wrong. */
dt_status dt_config_batch_shares(const char *s, int64_t *w, int max, int *n);
/* A list key's items as numbers ("0.08", "3/4"): at most max into out, *n of them; an item
 * that is not a finite number (or fraction) is an error naming `key`. */
dt_status dt_config_numbers(const dt_config_list *l, const char *key, double *out, int max, int *n);
/* 1 when dist.batch_shares is "auto": the trainer measures each worker's speed and re-balances
 * at dist.rebalance_step. */
int dt_config_shares_auto(const char *s);
/* 1 when a LoRA base is to be sharded across the workers (on 2 or more): lora.shard_base=true,
 * or auto under dist.zero_stage 3 with fixed dist.batch_shares (a rebuilt graph cannot keep a
 * sharded base); the trainer and dtrain plan both decide by it. */
int dt_config_shard_base(const dt_config_values *v);
/* dist.batch_shares=auto's split: n workers' measured rates (samples per second of compute,
 * each > 0 and finite) into integer parts of the global batch G proportional to them (the
 * largest remainder of each rate's share, ties to the lower rank), every part at least 1
 * (taken from the largest part). Deterministic given the rates. Needs G >= n. */
dt_status dt_config_share_from_rates(int64_t G, const double *rates, int n, int64_t *parts);
/* Rank `rank`'s part of a global batch of G samples split by the weights w[n] (largest
 * remainder, ties to the lower rank): *b samples from epoch-order offset *off of each global
 * batch. Every part must get a sample: an error names the share that gets none. */
dt_status dt_config_share_split(int64_t G, const int64_t *w, int n, int rank, int64_t *b,
                                int64_t *off);
/* One override written as "section.key=value" (the command-line form). */
dt_status dt_config_set_arg(dt_config *c, const char *arg);
/* Cross-key checks (e.g. lora.enabled needs model.kind llama; nesterov needs momentum > 0). */
dt_status dt_config_validate(const dt_config *c);
/* load (or defaults when path is NULL) + each "key=value" override + validate. */
dt_status dt_config_from_args(const char *path, int n_overrides, char *const *overrides,
                              dt_config **out);
void dt_config_free(dt_config *c);
/* A copy of c (a variant to change with dt_config_set, e.g. to plan another batch); free it
 * with dt_config_free. */
dt_status dt_config_clone(const dt_config *c, dt_config **out);

/* ---- Access -------------------------------------------------------------------------------- */

const dt_config_values *dt_config_get_values(const dt_config *c);
/* Typed access by name; errors for unknown keys and for a type that does not fit (get_int
 * reads INT, BOOL and ENUM keys (the index); get_float INT and FLOAT; get_bool BOOL; get_str any
 * key but LIST, as text: enum names, "true"/"false", numbers as written by dump). The string
 * stays valid until the next get_str on this thread. */
dt_status dt_config_get_int(const dt_config *c, const char *key, int64_t *out);
dt_status dt_config_get_float(const dt_config *c, const char *key, double *out);
dt_status dt_config_get_bool(const dt_config *c, const char *key, int *out);
dt_status dt_config_get_str(const dt_config *c, const char *key, const char **out);
/* Where a key's value came from: "default", "command line" or "FILE:LINE". */
const char *dt_config_origin(const dt_config *c, const char *key);
/* The file the config was loaded from ("" for defaults only). */
const char *dt_config_path(const dt_config *c);
/* Resolves a path value (model.hf_path, data.train, ...): kept as it is when absolute or when it
 * exists relative to the working directory; otherwise taken relative to the config file's
 * folder. Writes at most n bytes to out. */
void dt_config_resolve_path(const dt_config *c, const char *path, char *out, size_t n);
/* Writes the resolved config as YAML (every key, by section), loadable by dt_config_load. */
dt_status dt_config_dump_yaml(const dt_config *c, FILE *f);
dt_status dt_config_save_yaml(const dt_config *c, const char *path);

/* ---- Memory plan (`dtrain plan`) -------------------------------------------------------- */

/* Per-worker memory of one training step, in bytes, computed from the configured model, batch,
 * sequence length / image size, precision, ZeRO stage, LoRA and recomputation, without weights.
 * Llama: reads model.hf_path's config.json. ResNet: needs data.image_size (or data.train's
 * dataset for its image size). Activations are the arena the graph compiler plans for the
 * trainer's graph of that configuration (src/config/plan_measure.c): activations, their
 * gradients, saved-for-backward data and the ops' own scratch, packed. */
typedef struct dt_plan {
    int kind; /* DT_CFG_MODEL_* */
    int world, zero_stage;
    int64_t batch, seq_len;   /* seq_len: tokens (Llama) or image side (ResNet) */
    int64_t params_total;     /* every parameter of the model (+ LoRA adapters) */
    int64_t params_trainable; /* optimised: all, or the LoRA adapters + modules to save */
    int64_t params_frozen;    /* LoRA base weights (less the modules to save) */
    int optim_states;         /* f32 moments per trainable parameter: SGD 0 or 1, AdamW 2 */
    /* Bytes per worker after ZeRO sharding. */
    int64_t param_bytes;      /* trainable f32 parameters (/N under stage 3) */
    int64_t grad_bytes;       /* f32 gradients (/N under stage >= 2) */
    int64_t optim_bytes;      /* optimizer state (/N under stage >= 1) */
    int64_t frozen_bytes;     /* frozen base weights: the LoRA base, bf16 (docs/lora.md) */
    int64_t state_bytes;      /* non-trainable state: batchnorm running statistics */
    int64_t activation_bytes; /* planned arena: activations, their gradients and scratch */
    int64_t saved_bytes;      /* of that: live when forward ends (kept for backward) */
    int64_t logits_bytes;     /* Llama logits [B, T, V] f32 (one copy) */
    int64_t total_bytes;
    /* 1 when the workers of a host share one copy of the frozen base (lora.share_base with a
     * pretrained base: mapped from the files or converted once per host, docs/lora.md); each
     * worker's total still counts it, as each maps it. */
    int base_shared;
    int gpu; /* 1: the graph compiled for a GPU plan (dt_plan_gpu_compute), 0: for this CPU */
    /* 1 when the frozen base is sharded across the workers (lora.shard_base, world > 1):
     * frozen_bytes is then each worker's 1/N of it plus the parameters gathered whole at once
     * (frozen_gather_bytes: those between their first and last use in a pass and the next,
     * prefetched -- the embedding or LM head and a layer's largest matrix, or two of those,
     * or with recompute a whole layer and one more: src/config/plan.c), less their own
     * slices. */
    int base_sharded;
    int64_t frozen_gather_bytes;
    /* The same before sharding (world 1), for the table. */
    int64_t param_bytes_1, grad_bytes_1, optim_bytes_1, frozen_bytes_1;
    char model_desc[200]; /* e.g. "llama: 32 layers, hidden 4096, ..." */
    char run_desc[300];   /* batch, precision, workers, ZeRO, LoRA, recompute */
} dt_plan;

/* What `local` workers of one host need together: local x total, less the copies of the frozen
 * base they share (p->base_shared). */
int64_t dt_plan_host_bytes(const dt_plan *p, int local);
/* The plan of one training step of c on `world` workers. Activations, parameter counts, frozen
 * and state bytes come from the real training graph (the model's builder and the loss, compiled
 * with measure_only: planned, nothing allocated); parameters, gradients and optimizer state are
 * then sharded by the ZeRO stage. */
dt_status dt_plan_compute(const dt_config *c, int world, dt_plan *p);
/* p, a plan of a config that differs from c at most in dist.* and optim.* (the same training
 * graph), redone for c on `world` workers: ZeRO shards, optimizer state, totals and the
 * description, the graph's figures kept instead of measured again. For searches over worker
 * counts and ZeRO stages (plan --compare, memory admission). */
dt_status dt_plan_reshard(const dt_config *c, int world, dt_plan *p);
/* A readable table (GiB with 2 decimals) or, with json, one JSON object (bytes as integers). */
void dt_plan_print(FILE *f, const dt_plan *p, int json);
/* Memory admission (train.memory_check): the plan of `world` workers against what one of
 * `local_ranks` workers on this host may use (the cgroup's limit less its usage, MemAvailable,
 * the smaller, divided by local_ranks; src/core/meminfo.h). A plan above it is refused
 * (DT_ERR_INVALID, one line naming the plan, the limit and where it came from, and the single keys
 * that would make it fit: data.batch, model.recompute, dist.zero_stage, lora.enabled) -- or, with
 * train.memory_check=warn, the same line goes to warn[n] and DT_OK is returned. A plan within 10%
 * of the limit also writes warn. A config the plan cannot describe, or a host whose memory cannot
 * be read, passes. warn[0] is '\0' when there is nothing to say. */
dt_status dt_plan_admit(const dt_config *c, int world, int local_ranks, char *warn, size_t n);
/* The same for buffers that replace ones this worker holds now: the graph, flat buffers and
 * loaders of config `held` (the same model; e.g. another data.batch), which are freed before those
 * of c are allocated (dist.batch_shares=auto's re-balance). What held's plan needs counts as
 * available: the check is of the growth, not of c's whole plan against what is free beside the
 * old buffers. held NULL: dt_plan_admit. */
dt_status dt_plan_admit_rebuild(const dt_config *c, const dt_config *held, int world,
                                int local_ranks, char *warn, size_t n);
/* ---- GPU memory plan (`dtrain plan --device`, docs/gpu.md) ------------------------------ */

/* A GPU to plan for: a known card by name, the visible one, or a size. */
typedef struct dt_gpu_card {
    char name[256];         /* "h200", "NVIDIA H200" (the visible device), or "cuda" (--gpu-gib) */
    int64_t total_bytes;    /* its memory */
    int cc_major, cc_minor; /* compute capability; 0.0 unknown (a card given by size alone) */
} dt_gpu_card;

/* "h200|h100|a100-80|a100-40|l40s|v100-32|cuda" (what --device takes besides cuda:N). */
const char *dt_gpu_card_names(void);
/* The card of spec: a known name (the memory the driver reports on that board, a table in
 * src/config/plan_gpu.c), or "cuda" / "cuda:N": the visible GPU, queried (its name and total
 * memory). gib > 0 sets the size instead (spec NULL or "cuda": a card of gib GiB; with a name:
 * that card, resized). Errors name the spec and what is accepted: an unknown name, gib not in
 * (0, 1e6], or "cuda" with no GPU visible and no gib (the message names --device and
 * --gpu-gib). */
dt_status dt_gpu_card_get(const char *spec, double gib, dt_gpu_card *out);

/* Per-worker (per-GPU: one GPU per process) device memory of one training step of c, a model:
 * nothing here is measured on a GPU. The components sum to total_bytes. */
typedef struct dt_plan_gpu {
    dt_gpu_card card;
    int bf16; /* train.precision: bf16 */
    /* As the CPU plan, sharded the same way by ZeRO (dt_plan). */
    int64_t param_bytes, grad_bytes, optim_bytes, frozen_bytes, state_bytes;
    /* bf16: the GEMMs' bf16 copy of the trainable weights (2 bytes each, /N under ZeRO-3) */
    int64_t weight_bf16_bytes;
    /* the arena of the graph compiled for the device (one thread's scratch, no bf16 rounding
     * copies): activation_f32_bytes; under bf16 every activation but one f32 copy of the
     * logits is counted at DT_PLAN_GPU_BF16_ACT_FACTOR of it */
    int64_t activation_f32_bytes, activation_bytes;
    int64_t cublaslt_bytes; /* the GEMM handle's workspace (src/device/cuda_gemm.c) */
    int64_t cudnn_bytes;    /* convolution workspace cap (models with convolutions) */
    int64_t context_bytes;  /* CUDA context and loaded kernels: DT_PLAN_GPU_CONTEXT_BYTES */
    int64_t headroom_bytes; /* allocator rounding: DT_PLAN_GPU_HEADROOM of the allocations */
    int64_t total_bytes;
    int fits; /* total_bytes <= card.total_bytes */
} dt_plan_gpu;

/* Factor of the bf16 activations against f32 (2 of 4 bytes per element). */
#define DT_PLAN_GPU_BF16_ACT_FACTOR 0.5
/* Fraction of the device allocations added for the allocator (see plan_gpu.c). */
#define DT_PLAN_GPU_HEADROOM 0.05

/* The plan of c on `world` workers for one GPU each of `card`: *p is the plan of the graph as
 * compiled for the device (dt_plan's figures, p->gpu = 1), *g its device memory. */
dt_status dt_plan_gpu_compute(const dt_config *c, int world, const dt_gpu_card *card, dt_plan *p,
                              dt_plan_gpu *g);
/* The largest data.batch (1..max) whose GPU plan fits card; 0 when not even 1 does. Plans grow
 * with the batch: a doubling search, then a bisection (a few graph compilations). */
dt_status dt_plan_gpu_max_batch(const dt_config *c, int world, const dt_gpu_card *card, int64_t max,
                                int64_t *out);
/* Worker counts the GPU plan searches (dt_plan_gpu_min_workers). */
#define DT_PLAN_GPU_MAX_WORKERS 1024
/* The fewest workers in 1..max at which c under ZeRO-3 (the config's data.batch; p: its GPU
 * plan, resharded, not compiled again) fits one card each; 0 when none does (what ZeRO does not
 * shard -- activations, the frozen base -- is too large alone). */
dt_status dt_plan_gpu_min_workers(const dt_config *c, const dt_plan *p, const dt_gpu_card *card,
                                  int max, int *out);
/* The table (GiB), or with json the plan's JSON object with a "device" object added; max_batch
 * as dt_plan_gpu_max_batch found it, min_workers as dt_plan_gpu_min_workers (< 0: not searched,
 * null in the JSON). */
void dt_plan_gpu_print(FILE *f, const dt_plan *p, const dt_plan_gpu *g, int64_t max_batch,
                       int min_workers, int json);

/* 1234567 -> "1,234,567" in buf [n] (the plan tables' parameter counts); returns buf. */
const char *dt_plan_group_digits(int64_t x, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
