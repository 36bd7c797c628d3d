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
 * Reports what it removed on log (may be NULL). */
dt_status dt_ckpt_retain(dt_store *s, const char *root, int64_t current, int keep_last,
                         int keep_best, const char *metric, const char *mode, FILE *log);

#ifdef __cplusplus
}
#endif
#endif
