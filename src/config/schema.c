/* The config schema: every key of the YAML config, in one static table. Each row: dotted name,
 * type, default (as written on the command line), allowed range or values, one-line meaning,
 * and the field of dt_config_values that holds it. `dtrain train --help-config` prints this
 * table; dt_config_load / dt_config_set check every value against it. Keep names stable: run
 * directories store resolved configs that later versions must still load. */
#include <stddef.h>
#include <string.h>
#include "config/config_impl.h"

#define OFF(f) offsetof(dt_config_values, f)
#define MIN DT_CFG_HAS_MIN
#define MAX DT_CFG_HAS_MAX
#define GT (DT_CFG_HAS_MIN | DT_CFG_MIN_OPEN)
#define LT (DT_CFG_HAS_MAX | DT_CFG_MAX_OPEN)

/* clang-format off */
static const dt_config_key keys[] = {
    /* model */
    {"model.kind", DT_CFG_ENUM, "resnet", 0, 0, 0, "resnet|llama",
     "model family", OFF(model.kind)},
    {"model.depth", DT_CFG_INT, "18", MIN | MAX, 18, 152, NULL,
     "ResNet depth: 18, 34 (basic blocks), 50, 101, 152 (bottleneck)", OFF(model.depth)},
    {"model.small_stem", DT_CFG_BOOL, "false", 0, 0, 0, NULL,
     "ResNet 3x3 stride-1 stem without max-pool, for 28x28 / 32x32 images", OFF(model.small_stem)},
    {"model.in_channels", DT_CFG_INT, "3", MIN | MAX, 1, 4096, NULL,
     "ResNet input channels (1 grey, 3 RGB)", OFF(model.in_channels)},
    {"model.num_classes", DT_CFG_INT, "1000", MIN | MAX, 2, 1e7, NULL,
     "ResNet output classes", OFF(model.num_classes)},
    {"model.width", DT_CFG_INT, "64", MIN | MAX, 1, 4096, NULL,
     "ResNet channels of the first stage (torchvision: 64)", OFF(model.width)},
    {"model.hf_path", DT_CFG_PATH, "", 0, 0, 0, NULL,
     "Hugging Face folder (config.json [+ *.safetensors]) or config.json; ResNet: weights file",
     OFF(model.hf_path)},
    {"model.init", DT_CFG_ENUM, "random", 0, 0, 0, "random|pretrained",
     "start from random weights or load model.hf_path's weights", OFF(model.init)},
    {"model.recompute", DT_CFG_BOOL, "false", 0, 0, 0, NULL,
     "recompute each block's / decoder layer's activations in backward (less memory)",
     OFF(model.recompute)},
    /* data */
    {"data.train", DT_CFG_PATH, "", 0, 0, 0, NULL,
     "training dataset directory (dtrain data import)", OFF(data.train)},
    {"data.val", DT_CFG_PATH, "", 0, 0, 0, NULL,
     "validation dataset directory (empty: no evaluation)", OFF(data.val)},
    {"data.batch", DT_CFG_INT, "32", MIN | MAX, 1, 1 << 20, NULL,
     "samples (sequences) per micro-batch, per worker", OFF(data.batch)},
    {"data.seq_len", DT_CFG_INT, "256", MIN | MAX, 1, 1 << 22, NULL,
     "tokens per sequence (language models)", OFF(data.seq_len)},
    {"data.image_size", DT_CFG_INT, "0", MIN | MAX, 0, 1 << 16, NULL,
     "image height = width in pixels (0: the dataset's)", OFF(data.image_size)},
    {"data.augment", DT_CFG_BOOL, "false", 0, 0, 0, NULL,
     "images: random crop (padding 4) and horizontal flip; encoded images: RandomResizedCrop "
     "(data.crop_scale, data.crop_ratio) + flip + data.jitter (false: Resize + CenterCrop)",
     OFF(data.augment)},
    {"data.resize", DT_CFG_INT, "0", MIN | MAX, 0, 8192, NULL,
     "encoded images, evaluation: shorter side before the centre crop (0: image size * 8 / 7, "
     "256 for 224)", OFF(data.resize)},
    {"data.crop_scale", DT_CFG_LIST, "0.08,1", DT_CFG_REPEATS, 0, 0, NULL,
     "encoded images: RandomResizedCrop area fraction [min, max], 0 < min <= max <= 1",
     OFF(data.crop_scale)},
    {"data.crop_ratio", DT_CFG_LIST, "3/4,4/3", DT_CFG_REPEATS, 0, 0, NULL,
     "encoded images: RandomResizedCrop aspect ratio (width / height) [min, max]",
     OFF(data.crop_ratio)},
    {"data.jitter", DT_CFG_LIST, "0,0,0", DT_CFG_REPEATS, 0, 0, NULL,
     "encoded images, training: ColorJitter brightness, contrast, saturation (0: off)",
     OFF(data.jitter)},
    {"data.mean", DT_CFG_LIST, "", DT_CFG_REPEATS, 0, 0, NULL,
     "per-channel mean of the normalisation, e.g. [0.485, 0.456, 0.406] (empty: encoded images "
     "ImageNet's, stored images measured on the first 2000)", OFF(data.mean)},
    {"data.std", DT_CFG_LIST, "", DT_CFG_REPEATS, 0, 0, NULL,
     "per-channel standard deviation of the normalisation (empty: as data.mean)",
     OFF(data.std)},
    {"data.dct_scaling", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "encoded images: decode JPEGs at 1/2, 1/4, 1/8 where the crop stays at least the output "
     "size (faster; false: full decode, torchvision-exact pixels)", OFF(data.dct_scaling)},
    {"data.shuffle", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "shuffle the training set every epoch (seeded by train.seed)", OFF(data.shuffle)},
    {"data.shuffle_window_mb", DT_CFG_INT, "0", MIN | MAX, 0, 1 << 24, NULL,
     "block-aware shuffling: permute chunks of consecutive samples and mix about this many MiB "
     "of them at a time, each rank reading its own windows (s3:// datasets larger than "
     "data.cache_mb; at most an eighth of it); 0: one permutation of the whole set",
     OFF(data.shuffle_window_mb)},
    {"data.workers", DT_CFG_INT, "1", MIN | MAX, 0, 64, NULL,
     "prefetch threads of the loader (0: load in the training thread)", OFF(data.workers)},
    {"data.cache_mb", DT_CFG_INT, "512", MIN | MAX, 1, 1 << 24, NULL,
     "s3:// datasets: MiB of fetched payload blocks kept in memory (least recently used dropped)",
     OFF(data.cache_mb)},
    {"data.store_wait_s", DT_CFG_FLOAT, "300", MIN | MAX, 0, 1e7, NULL,
     "s3:// datasets: seconds training waits for a store that does not answer before it fails",
     OFF(data.store_wait_s)},
    {"data.on_corrupt", DT_CFG_ENUM, "stop", 0, 0, 0, "stop|skip",
     "a payload block failing its checksum: stop, or skip its records and count them",
     OFF(data.on_corrupt)},
    {"data.pack", DT_CFG_ENUM, "concat", 0, 0, 0, "concat|docs",
     "token sequences: windows over the stream of all documents (concat), or whole documents "
     "packed greedily and the rest padded (docs)",
     OFF(data.pack)},
    /* optim */
    {"optim.name", DT_CFG_ENUM, "adamw", 0, 0, 0, "sgd|adamw",
     "optimizer (torch.optim.SGD / AdamW update rules)", OFF(optim.name)},
    {"optim.lr", DT_CFG_FLOAT, "0.001", GT | MAX, 0, 10, NULL,
     "peak learning rate (after warmup)", OFF(optim.lr)},
    {"optim.momentum", DT_CFG_FLOAT, "0", MIN | LT, 0, 1, NULL,
     "SGD momentum (0: none, no momentum buffer)", OFF(optim.momentum)},
    {"optim.nesterov", DT_CFG_BOOL, "false", 0, 0, 0, NULL,
     "SGD Nesterov momentum (needs momentum > 0)", OFF(optim.nesterov)},
    {"optim.weight_decay", DT_CFG_FLOAT, "0", MIN | MAX, 0, 10, NULL,
     "weight decay (SGD: L2 added to the gradient; AdamW: decoupled)", OFF(optim.weight_decay)},
    {"optim.beta1", DT_CFG_FLOAT, "0.9", MIN | LT, 0, 1, NULL,
     "AdamW first-moment decay", OFF(optim.beta1)},
    {"optim.beta2", DT_CFG_FLOAT, "0.999", MIN | LT, 0, 1, NULL,
     "AdamW second-moment decay", OFF(optim.beta2)},
    {"optim.eps", DT_CFG_FLOAT, "1e-08", GT | MAX, 0, 1, NULL,
     "AdamW denominator epsilon", OFF(optim.eps)},
    {"optim.clip_norm", DT_CFG_FLOAT, "0", MIN, 0, 0, NULL,
     "clip the global gradient L2 norm to this (0: no clipping)", OFF(optim.clip_norm)},
    {"optim.no_decay_norm_bias", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "no weight decay on norm weights and biases", OFF(optim.no_decay_norm_bias)},
    /* schedule */
    {"schedule.kind", DT_CFG_ENUM, "constant", 0, 0, 0, "constant|linear|cosine|step",
     "learning-rate decay after warmup", OFF(schedule.kind)},
    {"schedule.warmup_steps", DT_CFG_INT, "0", MIN, 0, 0, NULL,
     "linear warmup from 0 over this many steps", OFF(schedule.warmup_steps)},
    {"schedule.total_steps", DT_CFG_INT, "0", MIN, 0, 0, NULL,
     "linear/cosine: step at which min_lr is reached (0: the run's total steps)",
     OFF(schedule.total_steps)},
    {"schedule.min_lr", DT_CFG_FLOAT, "0", MIN | MAX, 0, 10, NULL,
     "linear/cosine: final learning rate", OFF(schedule.min_lr)},
    {"schedule.step_size", DT_CFG_INT, "1000", MIN, 1, 0, NULL,
     "step: multiply the rate by gamma every this many steps", OFF(schedule.step_size)},
    {"schedule.gamma", DT_CFG_FLOAT, "0.1", GT | MAX, 0, 1, NULL,
     "step: decay factor", OFF(schedule.gamma)},
    {"schedule.on_extend", DT_CFG_ENUM, "continue", 0, 0, 0, "continue|stretch|restart",
     "resumed with another run length (linear/cosine over the run): continue the saved decay "
     "(then min_lr), stretch it over the new length, or restart warmup and decay",
     OFF(schedule.on_extend)},
    /* train */
    {"train.steps", DT_CFG_INT, "0", MIN, 0, 0, NULL,
     "optimizer steps to run (0: train.epochs passes over data.train)", OFF(train.steps)},
    {"train.epochs", DT_CFG_INT, "1", MIN | MAX, 0, 1e6, NULL,
     "passes over the training set when train.steps is 0", OFF(train.epochs)},
    {"train.label_smoothing", DT_CFG_FLOAT, "0", MIN | LT, 0, 1, NULL,
     "cross-entropy label smoothing (torch's label_smoothing)", OFF(train.label_smoothing)},
    {"train.grad_accum", DT_CFG_INT, "1", MIN | MAX, 1, 65536, NULL,
     "micro-batches per optimizer step (gradient accumulation)", OFF(train.grad_accum)},
    {"train.threads", DT_CFG_INT, "0", MIN | MAX, 0, 4096, NULL,
     "compute threads per worker (0: all cores of the worker)", OFF(train.threads)},
    {"train.seed", DT_CFG_INT, "1234", MIN, 0, 0, NULL,
     "seed of initialisation, shuffling, augmentation and dropout", OFF(train.seed)},
    {"train.precision", DT_CFG_ENUM, "fp32", 0, 0, 0, "fp32|bf16",
     "precision of matrix products: bf16 rounds GEMM/conv operands to bf16 (f32 accumulation; "
     "weights, gradients and optimizer state stay f32); needs a CPU with bf16 instructions",
     OFF(train.precision)},
    {"train.device", DT_CFG_STR, "auto", 0, 0, 0, NULL,
     "where to train: auto, cpu, cuda (the local rank's GPU) or cuda:N (docs/gpu.md)",
     OFF(train.device)},
    {"train.cuda_graph", DT_CFG_ENUM, "auto", 0, 0, 0, "auto|off",
     "CUDA device: replay the step as one captured CUDA graph (auto; eager where the step cannot "
     "be captured) or issue every kernel each step (off; docs/gpu.md)", OFF(train.cuda_graph)},
    {"train.log_every", DT_CFG_INT, "10", MIN, 1, 0, NULL,
     "log one line every this many steps", OFF(train.log_every)},
    {"train.eval_every", DT_CFG_INT, "0", MIN, 0, 0, NULL,
     "evaluate on data.val every this many steps (0: only at the end)", OFF(train.eval_every)},
    {"train.progress", DT_CFG_ENUM, "auto", 0, 0, 0, "auto|on|off",
     "one updating progress line on a terminal (auto: when the log is a terminal)",
     OFF(train.progress)},
    /* memory admission (src/config/plan_admit.c) */
    {"train.memory_check", DT_CFG_ENUM, "on", 0, 0, 0, "on|off|warn",
     "refuse a run whose memory plan exceeds this worker's memory (cgroup, MemAvailable)",
     OFF(train.memory_check)},
    /* dist */
    {"dist.zero_stage", DT_CFG_INT, "0", MIN | MAX, 0, 3, NULL,
     "ZeRO: 1 shards optimizer state, 2 + gradients, 3 + parameters", OFF(dist.zero_stage)},
    {"dist.batch_shares", DT_CFG_STR, "equal", 0, 0, 0, NULL,
     "each worker's share of the global batch (data.batch x workers): equal, auto (measured "
     "while training, see dist.rebalance_step), or relative weights one per worker, e.g. [3,1] "
     "(a faster worker takes more)",
     OFF(dist.batch_shares)},
    {"dist.rebalance_step", DT_CFG_INT, "20", MIN | MAX, 1, 1e9, NULL,
     "dist.batch_shares=auto: each worker's compute time per sample is measured over the steps "
     "from a quarter of this one on, and after this step the global batch is split by speed",
     OFF(dist.rebalance_step)},
    {"dist.bucket_mb", DT_CFG_FLOAT, "25", GT | MAX, 0, 4096, NULL,
     "gradient bucket size for overlapped all-reduce, MiB", OFF(dist.bucket_mb)},
    {"dist.backend", DT_CFG_ENUM, "auto", 0, 0, 0, "auto|mpi|single",
     "communicator (auto: MPI when started by mpirun/srun, else single process)",
     OFF(dist.backend)},
    {"dist.overlap", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "all-reduce gradient buckets while backward runs (false: after it; same numbers)",
     OFF(dist.overlap)},
    {"dist.sync_batchnorm", DT_CFG_BOOL, "false", 0, 0, 0, NULL,
     "batchnorm statistics over the global batch of all workers (SyncBatchNorm)",
     OFF(dist.sync_batchnorm)},
    {"dist.sparse_embedding", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "all-reduce only the embedding rows some worker looked up (false: the whole table)",
     OFF(dist.sparse_embedding)},
    {"dist.shared_memory", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "workers on one host all-reduce gradients by reading each other's buffers (false: MPI)",
     OFF(dist.shared_memory)},
    {"dist.gpu_comm", DT_CFG_ENUM, "auto", 0, 0, 0, "auto|nccl|host",
     "train.device=cuda with several workers: gradient all-reduce by NCCL (loaded at run time) or "
     "staged through host memory and dist.backend's communicator (auto: NCCL when it loads and "
     "every worker has its own GPU)",
     OFF(dist.gpu_comm)},
    {"dist.timeout_s", DT_CFG_FLOAT, "600", MIN | MAX, 0, 1e6, NULL,
     "hang watchdog: a collective waiting this long ends the job with exit status 76 (0: off)",
     OFF(dist.timeout_s)},
    /* lora */
    {"lora.enabled", DT_CFG_BOOL, "false", 0, 0, 0, NULL,
     "train LoRA adapters on a frozen base model (Llama)", OFF(lora.enabled)},
    {"lora.rank", DT_CFG_INT, "8", MIN | MAX, 1, 4096, NULL,
     "adapter rank r", OFF(lora.rank)},
    {"lora.alpha", DT_CFG_FLOAT, "16", GT | MAX, 0, 1e6, NULL,
     "adapter scaling alpha (output scaled by alpha / r)", OFF(lora.alpha)},
    {"lora.dropout", DT_CFG_FLOAT, "0", MIN | LT, 0, 1, NULL,
     "dropout on the adapter input", OFF(lora.dropout)},
    {"lora.targets", DT_CFG_LIST, "q_proj,v_proj", 0, 0, 0,
     "q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj",
     "linear layers that get adapters", OFF(lora.targets)},
    {"lora.modules_to_save", DT_CFG_LIST, "", 0, 0, 0,
     "embed_tokens|input_layernorm|post_attention_layernorm|norm|model.norm|lm_head",
     "modules trained whole (f32) and saved with the adapters, as PEFT's (norm: every RMSNorm)",
     OFF(lora.modules_to_save)},
    {"lora.share_base", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "the workers of a host share one copy of the frozen base: read-only mappings of the model "
     "files, or one worker's conversion in shared memory (false: each worker copies it)",
     OFF(lora.share_base)},
    {"lora.shard_base", DT_CFG_ENUM, "auto", 0, 0, 0, "false|true|auto",
     "shard the frozen base across the workers (each keeps 1/N of every frozen weight, gathered "
     "just before use and released after, as FSDP); auto: under dist.zero_stage 3 (unless "
     "dist.batch_shares is auto)",
     OFF(lora.shard_base)},
    /* ckpt */
    {"ckpt.dir", DT_CFG_URI, "", 0, 0, 0, NULL,
     "checkpoint storage (path, file://, s3://bucket/prefix; empty: the run directory)",
     OFF(ckpt.dir)},
    {"ckpt.every_steps", DT_CFG_INT, "0", MIN, 0, 0, NULL,
     "checkpoint every this many steps (0: off)", OFF(ckpt.every_steps)},
    {"ckpt.every_minutes", DT_CFG_FLOAT, "0", MIN | MAX, 0, 1e6, NULL,
     "checkpoint every this many minutes of training (0: off)", OFF(ckpt.every_minutes)},
    {"ckpt.keep_last", DT_CFG_INT, "3", MIN | MAX, 0, 1e6, NULL,
     "checkpoints kept (0: all)", OFF(ckpt.keep_last)},
    {"ckpt.keep_best", DT_CFG_INT, "0", MIN | MAX, 0, 1e6, NULL,
     "also keep this many best checkpoints by ckpt.best_metric", OFF(ckpt.keep_best)},
    {"ckpt.best_metric", DT_CFG_STR, "eval_loss", 0, 0, 0, NULL,
     "metric for ckpt.keep_best: loss, eval_loss or eval_accuracy", OFF(ckpt.best_metric)},
    {"ckpt.best_mode", DT_CFG_ENUM, "min", 0, 0, 0, "min|max",
     "whether a smaller (min) or larger (max) ckpt.best_metric is better", OFF(ckpt.best_mode)},
    {"ckpt.async", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "write checkpoints in the background while training goes on", OFF(ckpt.async)},
    {"ckpt.require_writable", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "refuse to train when a probe file cannot be written to the checkpoint location at start "
     "(false: warn and train)",
     OFF(ckpt.require_writable)},
    {"ckpt.resume", DT_CFG_STR, "auto", 0, 0, 0, NULL,
     "auto: from the latest good checkpoint of this run, never, or a checkpoint URI",
     OFF(ckpt.resume)},
    /* output */
    {"output.dir", DT_CFG_URI, "runs", 0, 0, 0, NULL,
     "experiment store root (path, file://, s3://bucket/prefix)", OFF(output.dir)},
    {"output.experiment", DT_CFG_STR, "default", 0, 0, 0, NULL,
     "experiment name (runs are grouped by it)", OFF(output.experiment)},
    {"output.run_name", DT_CFG_STR, "", 0, 0, 0, NULL,
     "run name (empty: generated from the date and time)", OFF(output.run_name)},
    {"output.export", DT_CFG_BOOL, "true", 0, 0, 0, NULL,
     "write the final model (torchvision safetensors / Hugging Face folder)",
     OFF(output.export_model)},
    /* tracking */
    {"tracking.uri", DT_CFG_STR, "", 0, 0, 0, NULL,
     "experiment store: SQLite file path or file:// (empty: <output.dir>/dtrain.db; off: none);"
     " http(s)://HOST:PORT: also an MLflow tracking server (docs/tracking.md)",
     OFF(tracking.uri)},
};
/* clang-format on */

#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

int dt_config_key_count(void) {
    return N_KEYS;
}

const dt_config_key *dt_config_key_at(int i) {
    return i >= 0 && i < N_KEYS ? &keys[i] : NULL;
}

int dt_cfg_key_index(const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].name, name)) return i;
    return -1;
}

const dt_config_key *dt_config_key_find(const char *name) {
    int i = name ? dt_cfg_key_index(name) : -1;
    return i >= 0 ? &keys[i] : NULL;
}

const char *dt_config_type_name(dt_config_type t) {
    static const char *n[] = {"int", "float", "bool", "string", "enum", "list", "path", "uri"};
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "?";
}
