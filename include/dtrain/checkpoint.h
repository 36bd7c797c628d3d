/* Checkpoints on a dt_store (docs/checkpoints.md):
 *
 *   <root>/step-000001200/model.safetensors                 weights (HF/torchvision names) and
 *                                                            batchnorm state, written by rank 0
 *   <root>/step-000001200/optim-00000-of-00002.safetensors   optimizer state of ZeRO shard 0
 *                                                            (one file, -of-00001, without ZeRO)
 *   <root>/step-000001200/trainer_state.json                 written LAST, by rank 0, after every
 *                                                            rank reported its files written
 *
 * <root> is <ckpt.dir or output.dir>/<experiment>/<run>/checkpoints. trainer_state.json holds the
 * step, epoch, data cursor, RNG and schedule state, world size, ZeRO stage, the flat layout,
 * metrics, the config, the code version and, for every other file, its size and xxh3-64. A
 * directory without it is not a checkpoint (a save that died half-way). These functions work on
 * the store alone (the `dtrain ckpt` command uses them); the trainer writes and restores. */
#ifndef DTRAIN_CHECKPOINT_H
#define DTRAIN_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/status.h"
#include "dtrain/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CKPT_STATE "trainer_state.json"

typedef struct dt_ckpt_info {
    char dir[1100]; /* key prefix of the checkpoint, "<root>/step-000001200" */
    int64_t step;
    int committed; /* trainer_state.json exists */
    int verified;  /* every file present with its size and checksum (after dt_ckpt_verify, or
                    * dt_ckpt_find_before at DT_CKPT_CHECKSUMS) */
    double metric; /* the value of the metric asked for in dt_ckpt_list (NAN if absent) */
    int64_t bytes; /* all files */
} dt_ckpt_info;

#define DT_CKPT_FORMAT "dtrain-checkpoint-1" /* trainer_state.json's "format" */
#define DT_CKPT_MODEL "model.safetensors"

/* ---- trainer_state.json, decoded (src/ckpt/state.c: the only code that spells its keys) ----
 * docs/checkpoints.md lists every key. Decoding checks the type and range of every key present
 * and refuses duplicate keys and a "format" other than DT_CKPT_FORMAT; a key that is absent is
 * left at its "absent" value (-1 for integers, NAN for numbers, NULL for strings, 0 entries),
 * so each reader decides what it needs (the resume needs the layout, the cursor and the step;
 * `dtrain ckpt verify` only the files). Unknown keys are ignored (a newer writer may add some). */
typedef struct dt_ckpt_file_entry {
    char *name;    /* a plain file name of the checkpoint directory (no '/', not "." or "..") */
    int64_t bytes; /* in [0, 2^53] */
    uint64_t xxh3;
} dt_ckpt_file_entry;

typedef struct dt_ckpt_param_entry {
    char *name;
    int64_t offset, numel; /* in the flat parameter buffer */
} dt_ckpt_param_entry;

typedef struct dt_ckpt_metric {
    char name[64];
    double value; /* NAN: recorded as null (not finite) */
} dt_ckpt_metric;

enum { DT_CKPT_MAX_METRICS = 16 };

typedef struct dt_ckpt_state {
    char *format;                      /* DT_CKPT_FORMAT */
    int64_t step, epoch, samples_seen; /* integers in [0, 9e15) */
    char *data_cursor;                 /* dt_data_cursor_format's text */
    int64_t rng_seed, rng_counter;     /* rng.seed, rng.counter */
    int64_t sched_step, sched_total;   /* schedule.step, schedule.total_steps (the horizon) */
    int64_t sched_start;               /* schedule.start: the step the schedule began at */
    double sched_lr;                   /* schedule.lr */
    int64_t optimizer_step;            /* the optimizer's own step count */
    int world_size;                    /* [1, 1e7); -1 absent */
    int64_t *batch_parts;              /* uneven dist.batch_shares: each rank's batch (world_size
                                        * of them); NULL: equal parts */
    int n_batch_parts;
    int64_t batch_parts_auto_step;  /* dist.batch_shares=auto measured batch_parts at this step;
                                     * -1 absent (given shares, or equal parts) */
    int zero_stage;                 /* [0, 3]; -1 absent */
    int64_t layout_n, layout_shard; /* layout.n, layout.shard */
    int layout_shards;              /* layout.shards: [1, 1e6); -1 absent */
    dt_ckpt_param_entry *params;    /* layout.params, flat-buffer order */
    int n_params;
    dt_ckpt_metric metrics[DT_CKPT_MAX_METRICS];
    int n_metrics;
    char *config, *code_version, *dtrain_version;
    dt_ckpt_file_entry *files;
    int n_files;
} dt_ckpt_state;

/* Every field absent, no entries. */
void dt_ckpt_state_init(dt_ckpt_state *s);
void dt_ckpt_state_free(dt_ckpt_state *s); /* then as after _init */
/* Decodes JSON text; `where` names the file in messages ("<dir>/trainer_state.json"). On error
 * *s is left as after _init; the message names the file, the key and the rule broken. */
dt_status dt_ckpt_state_decode(const char *json, const char *where, dt_ckpt_state *s);
/* Encodes (indented, keys in the documented order; absent fields are left out) into a
 * malloc'd NUL-terminated string. */
dt_status dt_ckpt_state_encode(const dt_ckpt_state *s, char **json);
/* Reads and decodes trainer_state.json of checkpoint `dir`. */
dt_status dt_ckpt_state_load(dt_store *st, const char *dir, dt_ckpt_state *s);
/* Adds a metric (at most DT_CKPT_MAX_METRICS; names up to 63 bytes). */
dt_status dt_ckpt_state_set_metric(dt_ckpt_state *s, const char *name, double value);
/* The metric's value, NAN if absent. */
double dt_ckpt_state_metric(const dt_ckpt_state *s, const char *name);
/* The file's entry, NULL if not listed. */
const dt_ckpt_file_entry *dt_ckpt_state_file(const dt_ckpt_state *s, const char *name);
/* The name of optimizer shard `shard` of `shards`: "optim-RRRRR-of-WWWWW.safetensors". */
void dt_ckpt_optim_name(char name[64], int shard, int shards);

/* Every step-* directory under root, committed or not, by step ascending (malloc'd array).
 * metric: a key of trainer_state.json's "metrics" object to fill info.metric with (NULL: none;
 * needs reading each trainer_state.json). */
dt_status dt_ckpt_list(dt_store *s, const char *root, const char *metric, dt_ckpt_info **out,
                       int *n);

/* How thoroughly a checkpoint is checked. */
typedef enum dt_ckpt_level {
    /* trainer_state.json parses, and every file it lists exists with its size: one stat per
     * file, nothing read. Catches unfinished saves, missing and truncated files; not flipped
     * bits -- for a reader that hashes what it loads anyway (the trainer's resume). */
    DT_CKPT_SIZES = 0,
    /* and every file's xxh3: reads every byte (`dtrain ckpt verify`, `ls --verify`) */
    DT_CKPT_CHECKSUMS = 1,
} dt_ckpt_level;

/* Checks a checkpoint at `level`: trainer_state.json parses and every file it lists has its
 * size (and xxh3); the message names the file and what is wrong (missing, truncated,
 * checksum). *bytes (may be NULL): the files' total size. */
dt_status dt_ckpt_check(dt_store *s, const char *dir, dt_ckpt_level level, int64_t *bytes);
/* dt_ckpt_check at DT_CKPT_CHECKSUMS. */
dt_status dt_ckpt_verify(dt_store *s, const char *dir, int64_t *bytes);
/* The newest checkpoint under root with a step below `before` (INT64_MAX: any) that passes
 * dt_ckpt_check at `level`; each bad or unfinished newer one is reported on `log` (one line
 * naming the file; may be NULL) and skipped. DT_ERR_NOTFOUND when there is none; a failing
 * store (DT_ERR_IO, DT_ERR_STATE) is returned as is, not taken for a bad checkpoint. */
dt_status dt_ckpt_find_before(dt_store *s, const char *root, int64_t before, dt_ckpt_level level,
                              FILE *log, dt_ckpt_info *out);
/* dt_ckpt_find_before(s, root, INT64_MAX, DT_CKPT_CHECKSUMS, log, out). */
dt_status dt_ckpt_find_latest(dt_store *s, const char *root, FILE *log, dt_ckpt_info *out);
/* Reads and parses trainer_state.json of a checkpoint: the text (malloc'd, NUL-terminated). */
dt_status dt_ckpt_read_state(dt_store *s, const char *dir, char **json);

/* Retention, run after committing the checkpoint of step `current` (-1: none): removes every
 * checkpoint directory newer than `current` (an abandoned timeline); then keeps the newest
 * `keep_last` committed checkpoints (0: all)
 * and the `keep_best` best by metric (mode "min" or "max"; keep_best 0: none); never removes
 * the newest committed one; removes uncommitted directories older than it (failed saves).
 * trainer_state.json goes first, so a half-removed checkpoint is never taken for a good one.
 * Reports each directory it removed to `removed` (may be NULL): why is "retention", "incomplete
 * save" or "newer than the run's current step". */
typedef void (*dt_ckpt_removed_fn)(void *ud, const char *dir, int64_t step, const char *why);
dt_status dt_ckpt_retain(dt_store *s, const char *root, int64_t current, int keep_last,
                         int keep_best, const char *metric, const char *mode,
                         dt_ckpt_removed_fn removed, void *ud);

#ifdef __cplusplus
}
#endif
#endif
