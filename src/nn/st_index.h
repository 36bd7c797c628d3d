/* A model's weights as safetensors files: one file, a folder's model.safetensors, or the shards
 * that the folder's model.safetensors.index.json names (src/nn/st_index.c). Internal to nn/: the
 * trainer's loader (model_io.c) and `dtrain generate`'s (llama_infer_load.c) read through it.
 *
 * The index (Hugging Face's sharded checkpoints) is one JSON object:
 *   {"metadata": {"total_size": N, ...},          optional; an object if present, not read
 *    "weight_map": {"<tensor name>": "<shard file name>", ...}}
 * Every rule broken is refused with one line naming the index, the key and the rule: not JSON,
 * or text after the object; not an object; a key given twice (at the top or in weight_map);
 * "metadata" not an object; "weight_map" missing, not an object, or empty; a value that is not a
 * string, or not a plain file name of the folder (no '/', "." or ".."); a shard that does not
 * exist; more than DT_ST_MAX_SHARDS distinct shards. Other top-level keys are ignored, as
 * transformers ignores them. */
#ifndef DTRAIN_NN_ST_INDEX_H
#define DTRAIN_NN_ST_INDEX_H

#include "dtrain/safetensors.h"

/* Distinct shard files one index may name (a 405B model has 191); bounds the open mappings. */
#define DT_ST_MAX_SHARDS 1024

/* The shard files of dir/model.safetensors.index.json: *n distinct plain file names of dir, in
 * the order the weight_map first names them, in a malloc'd array of malloc'd strings (free with
 * dt_st_index_free). The index is read whole under DT_MAX_META_BYTES. */
dt_status dt_st_index_read(const char *dir, char ***files, int *n);
void dt_st_index_free(char **files, int n);

/* Open safetensors files; paths[i] is the path files[i] was opened from. */
typedef struct dt_st_sources {
    int n;
    char **paths;
    dt_st_file **files;
} dt_st_sources;

/* Opens `path` if it is not a directory; else the directory's index's shards if it has a
 * model.safetensors.index.json, else its model.safetensors. A shard that is a symbolic link is
 * followed wherever it leads, deliberately: the Hugging Face hub cache is built of them
 * (snapshots/<rev>/model-00001-of-00004.safetensors -> ../../blobs/<sha256>), and whoever made
 * the folder chose them; the index, which may come from anywhere, names only files of the
 * folder. On failure *s holds nothing (dt_st_sources_close is still safe). */
dt_status dt_st_sources_open(const char *path, dt_st_sources *s);
void dt_st_sources_close(dt_st_sources *s);
/* Which file holds tensor `name` (*t its view), or -1 if none does (no error is set). */
int dt_st_sources_find(const dt_st_sources *s, const char *name, dt_tensor *t);

#endif
