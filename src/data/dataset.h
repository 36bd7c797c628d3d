/* Internal view of an open dataset, shared by the reader, the loader and the tools. */
#ifndef DT_DATA_DATASET_H
#define DT_DATA_DATASET_H

#include "data/shard.h"
#include "dtrain/data.h"

struct dt_dataset {
    char *dir;
    dt_dataset_info info;
    int n_shards;
    dt_shard *shards;
    int64_t *rec_start;       /* [n_shards + 1] first global record of each shard */
    int64_t *tok_start;       /* [n_shards + 1] first global token of each shard (token datasets) */
    int64_t hwc;              /* bytes per image */
    char **class_names;       /* encoded: [classes] from the manifest, or NULL */
    struct dt_remote *remote; /* an s3:// dataset's fetcher (data/remote.h), or NULL */
};

/* Shard holding global record i (binary search over rec_start). */
int dt_dataset_shard_of_record(const dt_dataset *d, int64_t i);
/* Shard holding global token t. */
int dt_dataset_shard_of_token(const dt_dataset *d, int64_t t);

/* Check the payload blocks that record i (pixels and label) / tokens [t0, t0 + n) of shard s
 * (and their loss mask) lie in, the first time they are touched (dt_shard_check). */
dt_status dt_dataset_check_image(const dt_dataset *d, int64_t i);
dt_status dt_dataset_check_tokens(const dt_dataset *d, int s, int64_t t0, int64_t n);

/* A dataset in an object store: queues the payload blocks of the samples of a batch to be
 * fetched ahead (records; token datasets: the windows of seq_len + 1 tokens starting at sample x
 * seq_len, seq_len 0: none). Nothing for a local dataset. */
void dt_dataset_prefetch(const dt_dataset *d, const int64_t *samples, int64_t n, int64_t seq_len);
/* The same for tokens [t0, t0 + n) of shard s (and their loss mask): a docs-packed sequence's
 * pieces. */
void dt_dataset_prefetch_tokens(const dt_dataset *d, int s, int64_t t0, int64_t n);

/* The fingerprint over a manifest's content (see data.h). `shard_lines` holds one line
 * "records bytes xxh3hex\n" per shard; `names` the class names of an encoded dataset, each
 * ended by '\n' ("" when none: then the fingerprint is what it was before names existed). */
uint64_t dt_dataset_fingerprint(const dt_dataset_info *info, const char *names,
                                const char *shard_lines);
/* Class names joined for the fingerprint ("" for NULL), malloc'd. */
char *dt_dataset_names_line(const char *const *names, int32_t n);

#endif
