/* Datasets: shard files, manifests, importers, a deterministic sampler and a prefetching loader.
 *
 * A dataset is a directory (one split: train, val or test) with `manifest.json` and shard files
 * `shard-00000.dts`, ... Each shard is a 256-byte little-endian header followed by an mmap-able
 * payload of 64-byte-aligned sections (src/data/shard.h gives the byte layout):
 *   image shards: pixels uint8 [N, H, W, C] and labels int32 [N];
 *   token shards: tokens uint32 [T], document offsets uint64 [N + 1] into the tokens, and for
 *                 instruction data a loss mask uint8 [T] (1 where the token is trained on);
 *   encoded-image shards: the image files' bytes uint8 [E], offsets uint64 [N + 1] into them,
 *                 labels int32 [N] and per image uint32 [N, 4] (width, height, format, flags).
 * The header carries magic, version, kind, dtype, record count, record shape, section table,
 * and the xxh3-64 checksums of the payload and of the header itself. The manifest lists every
 * shard with its size and payload checksum; the dataset fingerprint is the xxh3-64 of the
 * manifest's content (kind, shape, and each shard's records, bytes and checksum), so two
 * imports of the same data have the same fingerprint whatever their directory.
 *
 * The loader shuffles with a keyed pseudo-random permutation (a 4-round Feistel network whose
 * round keys are Philox outputs for (seed, epoch)): any position of any epoch maps to its sample
 * in O(1) without a per-epoch array, so every batch is a pure function of (seed, epoch, rank, batch
 * index). That makes the order reproducible, ranks disjoint, augmentation independent of thread
 * timing, and resume a matter of saving (epoch, batch). */
#ifndef DTRAIN_DATA_H
#define DTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shard format constants ---- */
#define DT_SHARD_MAGIC "DTSHARD\x1a"    /* 8 bytes */
#define DT_SHARD_VERSION 2u             /* writes 2 (per-block checksums); reads 1 and 2 */
#define DT_SHARD_BLOCK_BYTES (1u << 20) /* payload bytes per block checksum (version 2) */
#define DT_SHARD_HEADER_BYTES 256u
#define DT_MANIFEST_NAME "manifest.json"

/* DT_DATA_ENCODED: image files (JPEG, PNG, WebP) of any size stored as they are, with a label
 * and their width and height: decoded when read (src/data/image_codec.h). */
typedef enum dt_data_kind {
    DT_DATA_IMAGE = 1,
    DT_DATA_TOKENS = 2,
    DT_DATA_ENCODED = 3
} dt_data_kind;

/* Element types stored in shards. */
typedef enum dt_data_dtype {
    DT_DATA_U8 = 1,
    DT_DATA_I32 = 2,
    DT_DATA_U32 = 3,
    DT_DATA_U64 = 4,
} dt_data_dtype;

/* What a dataset holds (read from its manifest). */
typedef struct dt_dataset_info {
    dt_data_kind kind;
    int64_t records;                 /* images, or documents */
    int32_t height, width, channels; /* image datasets */
    int32_t classes;                 /* image and encoded: labels are in [0, classes) */
    int64_t bytes;                   /* encoded datasets: total bytes of the image files */
    int64_t tokens;                  /* token datasets: total tokens */
    int64_t vocab_size;              /* token datasets: every token id is < vocab_size */
    int32_t has_mask;                /* token datasets: a loss mask is stored */
    int32_t eot_id, pad_id;          /* token datasets: end-of-text / padding ids (-1: none) */
    int32_t n_shards;
    char fingerprint[17]; /* xxh3-64, 16 hex digits */
    char name[64], split[32];
} dt_dataset_info;

/* ---- reading ---- */
typedef struct dt_dataset dt_dataset;

#define DT_DATA_VERIFY 1 /* dt_dataset_open: also check every payload checksum (reads all) */

/* Opens the dataset in `dir`: parses the manifest, maps every shard, and validates headers,
 * sizes, section tables, document offsets and labels against the manifest. Errors name the
 * file and the byte position (or manifest key) at fault. */
dt_status dt_dataset_open(const char *dir, int flags, dt_dataset **out);
/* How a dataset in an object store (dir "s3://BUCKET/PREFIX", credentials and endpoint from
 * AWS_* as for dt_store_open) is read: payload blocks fetched by ranged GETs ahead of the
 * loader and on demand, at most cache_mb MiB of them resident, a store that does not answer
 * waited for up to store_wait_s seconds. Ignored for a local directory. */
typedef struct dt_dataset_opts {
    int flags;           /* DT_DATA_VERIFY (in S3: every block fetched and checked) */
    int64_t cache_mb;    /* default 512 */
    double store_wait_s; /* default 300 */
    int fetch_threads;   /* ranged GETs in flight, default 8 */
} dt_dataset_opts;
dt_dataset_opts dt_dataset_opts_default(void);
dt_status dt_dataset_open_with(const char *dir, const dt_dataset_opts *o, dt_dataset **out);
/* A dataset in an object store: the payload blocks fetched so far (a block dropped from the
 * cache and needed again counts again) and their bytes; returns 0 (nothing set) for a local
 * one. */
int dt_dataset_fetched(const dt_dataset *d, int64_t *blocks, int64_t *bytes);
/* Of those, the blocks the loader queued ahead of its readers (0 for a local dataset). */
int64_t dt_dataset_fetched_ahead(const dt_dataset *d);
/* Bytes of all the dataset's shard files. */
int64_t dt_dataset_bytes(const dt_dataset *d);
void dt_dataset_close(dt_dataset *d);
const dt_dataset_info *dt_dataset_get_info(const dt_dataset *d);
/* Payload blocks found corrupt so far (by the loader's first-touch checks, all shards). */
int64_t dt_dataset_bad_blocks(const dt_dataset *d);
/* Opens with DT_DATA_VERIFY and closes: DT_OK if every file is intact. */
dt_status dt_dataset_verify(const char *dir);
/* Image i: pointer to its H*W*C uint8 pixels (HWC) inside the mapping; *label gets its label.
 * NULL if i is out of range or the dataset is not an image dataset. */
const uint8_t *dt_dataset_image(const dt_dataset *d, int64_t i, int32_t *label);
/* Encoded image i: its file bytes inside the mapping, label, width and height (after the EXIF
 * orientation). The payload blocks it lies in are checked against their checksums the first
 * time they are touched: a corrupt one is DT_ERR_FORMAT naming the shard and byte range. */
dt_status dt_dataset_encoded(const dt_dataset *d, int64_t i, const uint8_t **bytes, size_t *len,
                             int32_t *label, int32_t *w, int32_t *h);
/* Class k's name (encoded datasets, from the manifest; ImageFolder order), NULL if none. */
const char *dt_dataset_class_name(const dt_dataset *d, int32_t k);
/* Document i: its tokens, its loss mask (NULL when the dataset has none) and its length. */
dt_status dt_dataset_doc(const dt_dataset *d, int64_t i, const uint32_t **tokens,
                         const uint8_t **mask, int64_t *len);
/* Number of shards and the path of shard s (for benchmarks and tools). */
int dt_dataset_shard_count(const dt_dataset *d);
const char *dt_dataset_shard_path(const dt_dataset *d, int s);
/* Size in bytes of shard s (the file, or the object of an s3:// dataset); -1 if no such shard. */
int64_t dt_dataset_shard_bytes(const dt_dataset *d, int s);

/* ---- writing ---- */
typedef struct dt_dataset_writer dt_dataset_writer;

typedef struct dt_dataset_spec {
    dt_data_kind kind;
    int32_t height, width, channels, classes; /* image datasets (encoded: classes only) */
    int64_t vocab_size;                       /* token datasets */
    int32_t has_mask, eot_id, pad_id;         /* token datasets */
    int64_t shard_bytes;                      /* payload bytes per shard (0: 64 MiB) */
    const char *name, *split;                 /* recorded in the manifest */
    const char *extra_json;                   /* optional JSON object merged as "meta" */
    const char *const *class_names;           /* encoded: `classes` names (or NULL) */
} dt_dataset_spec;

/* Starts a dataset in `dir`, which must not exist: everything is written to a temporary
 * sibling directory that dt_dataset_writer_close renames to `dir`, so a failed or aborted
 * write leaves nothing behind. */
dt_status dt_dataset_writer_open(const char *dir, const dt_dataset_spec *spec,
                                 dt_dataset_writer **out);
/* One image: H*W*C uint8 pixels in HWC order and its label. */
dt_status dt_dataset_writer_add_image(dt_dataset_writer *w, const uint8_t *hwc, int32_t label);
/* One encoded image: the file's bytes (JPEG, PNG or WebP), its label, displayed width and
 * height and format (1 JPEG, 2 PNG, 3 WebP, as src/data/image_codec.h). */
dt_status dt_dataset_writer_add_encoded(dt_dataset_writer *w, const uint8_t *bytes, size_t len,
                                        int32_t label, int32_t width, int32_t height, int32_t fmt);
/* One document of n tokens; mask (n bytes, 0/1) is required iff the spec has has_mask. */
dt_status dt_dataset_writer_add_doc(dt_dataset_writer *w, const uint32_t *tokens,
                                    const uint8_t *mask, int64_t n);
/* Writes the last shard and the manifest, renames into place and frees `w` (also on error,
 * after removing the temporary directory). */
dt_status dt_dataset_writer_close(dt_dataset_writer *w);
/* Removes everything written so far and frees `w`. */
void dt_dataset_writer_abort(dt_dataset_writer *w);

/* ---- importers ---- */
typedef struct dt_import_options {
    double val_fraction;       /* move this fraction of train into a "val" split (0: none) */
    uint64_t seed;             /* which records go to val */
    int64_t shard_bytes;       /* payload bytes per shard (0: 64 MiB) */
    int64_t max_records;       /* keep at most this many records per source split (0: all) */
    const char *tokenizer;     /* text/jsonl: tokenizer file (.tiktoken or tokenizer.json) or a
                                  model folder (its tokenizer.json and tokenizer_config.json) */
    const char *doc_separator; /* text: a line equal to this ends a document (NULL: one
                                  document per file) */
    int quiet;                 /* no progress lines on stderr */
    /* jsonl (docs/data.md): the record format (NULL: detected per record; alpaca, sharegpt,
     * messages, completion, prompt-response), the chat template (NULL: the tokenizer's
     * tokenizer_config.json; llama3, llama3.1, chatml, mistral, gemma), a system prompt for
     * records without one, the loss on the last assistant turn only (else on every one) */
    const char *format, *chat_template, *system;
    int train_last;
    /* strict: a malformed record (jsonl) or a corrupt or unreadable image fails the import
     * (default: reported and skipped) */
    int strict;
    /* images */
    int max_side; /* > 0: images whose longer side is over this are re-encoded as JPEG */
    int threads;  /* threads reading and checking images (0: one per core) */
} dt_import_options;

void dt_import_options_default(dt_import_options *o);
/* Imports `kind` ("fashion-mnist", "mnist", "cifar10", "text", "jsonl") from the given source
 * paths (a directory of IDX / CIFAR-10 binary files; text or JSONL files or directories) into
 * `out_dir`, which must not exist, as one dataset per split: out_dir/train, out_dir/test,
 * out_dir/val. Written to a temporary directory and renamed at the end: on any error nothing
 * is left behind. */
dt_status dt_data_import(const char *kind, const char *const *srcs, int n_srcs, const char *out_dir,
                         const dt_import_options *o);
/* 1 when out_dir already holds this very import: the same kind, the same sources with the same
 * files (sizes and modification times), the same options and tokenizer (its import.json says
 * so), and every split's manifest is there -- running the import again would change nothing.
 * Text and JSONL imports keep the tokenizer file beside each split's manifest (and a Hugging
 * Face tokenizer_config.json found beside it), so that a model trained on them is exported
 * with its tokenizer. */
int dt_data_import_current(const char *kind, const char *const *srcs, int n_srcs,
                           const char *out_dir, const dt_import_options *o);
/* Copies the Hugging Face tokenizer a token dataset was made with (kept beside its manifest,
 * checked against the manifest's tokenizer_xxh3) into dst_dir as tokenizer.json, with its
 * tokenizer_config.json if there is one; *copied 0 when the dataset has none to give (another
 * kind of tokenizer, a chat import whose tokens were added in memory, an older import).
 * dataset_dir may be an s3:// URL: the files are fetched (AWS_* as for dt_store_open), and a
 * tokenizer file that fails the xxh3 is an error naming the object. dst_dir NULL: nothing is
 * written (the check before training; *copied 1 when there is one to give). */
dt_status dt_dataset_tokenizer_export(const char *dataset_dir, const char *dst_dir, int *copied);

/* ---- loader ---- */
typedef enum dt_pack_mode {
    DT_PACK_CONCAT = 0, /* token stream of all documents cut into windows of seq_len + 1 */
    DT_PACK_DOCS = 1,   /* whole documents packed greedily into sequences, the rest padded;
                           a document longer than a sequence is split */
} dt_pack_mode;

typedef struct dt_loader_config {
    int64_t batch_size; /* samples per batch on this rank */
    /* 0: batch k of rank r interleaves (positions j * world + r); > 0: uneven parts of a
     * global batch: batch k holds epoch-order positions [k*global_batch + global_offset,
     * + batch_size) (drop_last only; pad_remainder does not apply) */
    int64_t global_batch, global_offset;
    uint64_t seed;
    int rank, world_size;
    int shuffle; /* 1: permute every epoch (default); 0: dataset order */
    /* > 0 (with shuffle): block-aware shuffling for datasets larger than a cache: chunks of
     * consecutive samples (about 1-4 MiB of the dataset's bytes) are permuted and taken about
     * this many bytes of chunks at a time, the samples permuted inside each such window; each
     * rank then reads a contiguous part of the epoch's order (global_batch: as before), so the
     * ranks read disjoint windows. 0: one permutation of the whole dataset (default) */
    int64_t shuffle_window_bytes;
    int pad_remainder;    /* 0: drop the N mod world_size last samples of the epoch's order;
                             1: pad with the first ones so every sample is seen */
    int drop_last;        /* 1: drop a final partial batch of an epoch (default 0) */
    int prefetch_threads; /* 0: batches are made in dt_loader_next; n: n background threads */
    int queue_depth;      /* batches prepared ahead (default 4) */
    /* images: output f32 NCHW, (x / 255 - mean[c]) / std[c] */
    float mean[4], std[4];
    int augment;      /* random crop (with crop_padding zero padding) and horizontal flip */
    int crop_padding; /* pixels of padding for the random crop (default 4) */
    int hflip;        /* 1: flip with probability 1/2 (when augment) */
    /* encoded images (kind encoded-image; docs/data.md): each decoded and transformed to f32
     * [3, image_size, image_size]. augment: RandomResizedCrop(image_size, crop_scale,
     * crop_ratio) + hflip + ColorJitter(jitter); otherwise Resize(resize) + CenterCrop.
     * dct_scaling: JPEGs decoded at 1/2, 1/4 or 1/8 where the box still covers the output
     * (faster; not torchvision-exact pixels); 0 decodes at full size (torchvision-exact). */
    int image_size;                      /* default 224 */
    int resize;                          /* 0: image_size * 8 / 7 (256 for 224) */
    double crop_scale[2], crop_ratio[2]; /* default (0.08, 1), (3/4, 4/3) */
    float jitter[3];                     /* brightness, contrast, saturation (0: off) */
    int dct_scaling;                     /* default 1 */
    /* tokens */
    int64_t seq_len; /* T: inputs and targets are [batch, T] */
    dt_pack_mode pack;
    /* a record in a corrupt payload block (checked the first time the loader touches it):
     * 0 stops with the error; 1 skips it: an image is replaced by the next intact record, tokens
     * become padding with loss mask 0 (dt_dataset_bad_blocks counts the blocks) */
    int skip_corrupt;
} dt_loader_config;

void dt_loader_config_default(dt_loader_config *c);

/* A batch; buffers belong to the loader and stay valid until the next dt_loader_next. */
typedef struct dt_batch {
    int64_t epoch, index;   /* position: batch `index` of `epoch` */
    int64_t n;              /* samples in this batch (< batch_size only for a final partial one) */
    const int64_t *samples; /* [n] sample ids (image index, or packed-sequence index) */
    /* images */
    const float *images;   /* [n, C, H, W] normalised (and augmented) */
    const int32_t *labels; /* [n] */
    /* tokens */
    const int32_t *inputs;    /* [n, T] */
    const int32_t *targets;   /* [n, T] next token of each input (pad_id where padded) */
    const float *loss_mask;   /* [n, T] 1 where the target is trained on, else 0 */
    const int32_t *positions; /* [n, T] position of each input inside its document */
} dt_batch;

typedef struct dt_loader dt_loader;

/* The dataset must outlive the loader. */
dt_status dt_loader_open(const dt_dataset *d, const dt_loader_config *c, dt_loader **out);
/* The next batch; after the last batch of an epoch comes batch 0 of the next epoch. */
dt_status dt_loader_next(dt_loader *l, dt_batch *b);
int64_t dt_loader_batches_per_epoch(const dt_loader *l);
/* Samples in one epoch of the whole dataset (images, or packed sequences), before ranks. */
int64_t dt_loader_dataset_samples(const dt_loader *l);
/* Tokens: the fraction of the epoch's token slots (sequences x (T + 1)) that hold a document's
 * tokens rather than padding: 1 for DT_PACK_CONCAT, measured for DT_PACK_DOCS; 1 for images. */
double dt_loader_pack_efficiency(const dt_loader *l);
/* Samples this rank sees per epoch. */
int64_t dt_loader_rank_samples(const dt_loader *l);
/* The shape of one sample of an image loader: channels, height, width (encoded images:
 * 3 x image_size x image_size; image datasets: the stored shape). */
void dt_loader_image_shape(const dt_loader *l, int *c, int *h, int *w);
void dt_loader_close(dt_loader *l);

/* Where a loader is: the next batch it will return, and what it must be resumed with. */
typedef struct dt_data_cursor {
    int64_t epoch, batch;
    uint64_t seed;
    int32_t rank, world_size;
    int64_t batch_size, seq_len;
    char fingerprint[17];
} dt_data_cursor;

void dt_loader_cursor(const dt_loader *l, dt_data_cursor *c);
/* Continues from `c` (saved by a loader with the same dataset, seed, world size, rank, batch
 * size and sequence length; a mismatch is an error naming the field). */
dt_status dt_loader_seek(dt_loader *l, const dt_data_cursor *c);
/* Text form for trainer_state.json: "epoch=E batch=B seed=S rank=R world=W batch_size=N
 * seq_len=T fingerprint=F". Returns the length snprintf would write. */
int dt_data_cursor_format(const dt_data_cursor *c, char *buf, size_t n);
dt_status dt_data_cursor_parse(const char *s, dt_data_cursor *c);

/* The keyed permutation the loader shuffles with: the sample at position p (< n) of the
 * order for (seed, epoch). A bijection of [0, n) for every (seed, epoch). */
int64_t dt_data_permute(int64_t p, int64_t n, uint64_t seed, uint64_t epoch);

#ifdef __cplusplus
}
#endif
#endif
