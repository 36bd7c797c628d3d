/* Reading an open dataset: records by global index (images, documents, encoded images), the
 * shard that holds them, and their first-touch block checks. */
#include <inttypes.h>
#include "data/dataset.h"
#include "data/remote.h"

static int find_le(const int64_t *start, int n, int64_t x) {
    /* Largest s with start[s] <= x, over s in [0, n). */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (start[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int dt_dataset_shard_of_record(const dt_dataset *d, int64_t i) {
    return find_le(d->rec_start, d->n_shards, i);
}
int dt_dataset_shard_of_token(const dt_dataset *d, int64_t t) {
    /* Empty token shards share a start; take the last one that starts at or before t and is
     * non-empty by scanning forward from the binary-search result. */
    int s = find_le(d->tok_start, d->n_shards, t);
    while (s + 1 < d->n_shards && d->tok_start[s + 1] <= t) s++;
    return s;
}

const uint8_t *dt_dataset_image(const dt_dataset *d, int64_t i, int32_t *label) {
    if (d->info.kind != DT_DATA_IMAGE || i < 0 || i >= d->info.records) return NULL;
    int s = dt_dataset_shard_of_record(d, i);
    int64_t j = i - d->rec_start[s];
    /* a remote shard's pixels are fetched (and checked) before the pointer is handed out */
    if (d->remote && dt_dataset_check_image(d, i)) return NULL;
    if (label) *label = d->shards[s].labels[j];
    return d->shards[s].pixels + j * d->hwc;
}

dt_status dt_dataset_doc(const dt_dataset *d, int64_t i, const uint32_t **tokens,
                         const uint8_t **mask, int64_t *len) {
    if (d->info.kind != DT_DATA_TOKENS)
        return dt_error_set(DT_ERR_INVALID, "%s: dt_dataset_doc on an image dataset", d->dir);
    if (i < 0 || i >= d->info.records)
        return dt_error_set(DT_ERR_RANGE, "%s: document %" PRId64 " out of range [0, %" PRId64 ")",
                            d->dir, i, d->info.records);
    int s = dt_dataset_shard_of_record(d, i);
    const dt_shard *sh = &d->shards[s];
    int64_t j = i - d->rec_start[s];
    uint64_t a = sh->offsets[j], b = sh->offsets[j + 1];
    if (d->remote) { /* fetched before the pointer is handed out */
        dt_status st = dt_dataset_check_tokens(d, s, (int64_t)a, (int64_t)(b - a));
        if (st) return st;
    }
    *tokens = sh->tokens + a;
    if (mask) *mask = sh->mask ? sh->mask + a : NULL;
    *len = (int64_t)(b - a);
    return DT_OK;
}

dt_status dt_dataset_encoded(const dt_dataset *d, int64_t i, const uint8_t **bytes, size_t *len,
                             int32_t *label, int32_t *w, int32_t *h) {
    if (d->info.kind != DT_DATA_ENCODED)
        return dt_error_set(DT_ERR_INVALID, "%s: dt_dataset_encoded on a dataset of another kind",
                            d->dir);
    if (i < 0 || i >= d->info.records)
        return dt_error_set(DT_ERR_RANGE, "%s: image %" PRId64 " out of range [0, %" PRId64 ")",
                            d->dir, i, d->info.records);
    int s = dt_dataset_shard_of_record(d, i);
    dt_shard *sh = &d->shards[s];
    int64_t j = i - d->rec_start[s];
    uint64_t a = sh->offsets[j], b = sh->offsets[j + 1];
    /* the offsets, labels and image info were checked at open; the bytes on first touch */
    dt_status st = dt_shard_check(sh, (uint64_t)(sh->blob - sh->map) + a, b - a);
    if (st) return st;
    *bytes = sh->blob + a;
    *len = (size_t)(b - a);
    if (label) *label = sh->labels[j];
    if (w) *w = (int32_t)sh->imginfo[4 * j];
    if (h) *h = (int32_t)sh->imginfo[4 * j + 1];
    return DT_OK;
}

const char *dt_dataset_class_name(const dt_dataset *d, int32_t k) {
    if (!d->class_names || k < 0 || k >= d->info.classes) return NULL;
    return d->class_names[k];
}

int dt_dataset_shard_count(const dt_dataset *d) {
    return d->n_shards;
}
const char *dt_dataset_shard_path(const dt_dataset *d, int s) {
    return s >= 0 && s < d->n_shards ? d->shards[s].path : NULL;
}
int64_t dt_dataset_shard_bytes(const dt_dataset *d, int s) {
    return s >= 0 && s < d->n_shards ? (int64_t)d->shards[s].size : -1;
}

dt_status dt_dataset_check_image(const dt_dataset *d, int64_t i) {
    int s = dt_dataset_shard_of_record(d, i);
    dt_shard *sh = &d->shards[s];
    int64_t j = i - d->rec_start[s];
    uint64_t px = (uint64_t)(sh->pixels - sh->map) + (uint64_t)(j * d->hwc);
    uint64_t lab = (uint64_t)((const uint8_t *)(sh->labels + j) - sh->map);
    dt_status st = dt_shard_check(sh, px, (uint64_t)d->hwc);
    return st ? st : dt_shard_check(sh, lab, 4);
}

dt_status dt_dataset_check_tokens(const dt_dataset *d, int s, int64_t t0, int64_t n) {
    dt_shard *sh = &d->shards[s];
    dt_status st = dt_shard_check(sh, (uint64_t)((const uint8_t *)(sh->tokens + t0) - sh->map),
                                  (uint64_t)n * 4);
    if (!st && sh->mask) st = dt_shard_check(sh, (uint64_t)(sh->mask + t0 - sh->map), (uint64_t)n);
    return st;
}

int64_t dt_dataset_bad_blocks(const dt_dataset *d) {
    int64_t n = 0;
    for (int i = 0; i < d->n_shards; i++) n += atomic_load(&d->shards[i].bad_blocks);
    return n;
}

void dt_dataset_prefetch_tokens(const dt_dataset *d, int s, int64_t t0, int64_t n) {
    if (!d->remote || n <= 0) return;
    dt_shard *sh = &d->shards[s];
    dt_remote_prefetch(sh, (uint64_t)((const uint8_t *)(sh->tokens + t0) - sh->map),
                       (uint64_t)n * 4);
    if (sh->mask) dt_remote_prefetch(sh, (uint64_t)(sh->mask + t0 - sh->map), (uint64_t)n);
}

void dt_dataset_prefetch(const dt_dataset *d, const int64_t *samples, int64_t n, int64_t seq_len) {
    if (!d->remote) return;
    dt_data_kind kind = d->info.kind;
    for (int64_t i = 0; i < n; i++) {
        int64_t x = samples[i];
        if (kind == DT_DATA_TOKENS) {
            /* the window [x T, x T + T + 1) of the token stream, over the shards it spans */
            int64_t t = x * seq_len, left = seq_len + 1;
            if (!seq_len || t < 0 || t >= d->info.tokens) continue;
            for (int s = dt_dataset_shard_of_token(d, t); left > 0 && s < d->n_shards; s++) {
                dt_shard *sh = &d->shards[s];
                int64_t local = t - d->tok_start[s], have = (int64_t)sh->h.elements - local;
                if (have <= 0) continue;
                int64_t take = have < left ? have : left;
                dt_dataset_prefetch_tokens(d, s, local, take);
                t += take, left -= take;
            }
            continue;
        }
        if (x < 0 || x >= d->info.records) continue;
        int s = dt_dataset_shard_of_record(d, x);
        dt_shard *sh = &d->shards[s];
        int64_t j = x - d->rec_start[s];
        if (kind == DT_DATA_ENCODED)
            dt_remote_prefetch(sh, (uint64_t)(sh->blob - sh->map) + sh->offsets[j],
                               sh->offsets[j + 1] - sh->offsets[j]);
        else
            dt_remote_prefetch(sh, (uint64_t)(sh->pixels - sh->map) + (uint64_t)(j * d->hwc),
                               (uint64_t)d->hwc);
    }
}

int dt_dataset_fetched(const dt_dataset *d, int64_t *blocks, int64_t *bytes) {
    if (!d || !d->remote) return 0;
    dt_remote_fetched(d->remote, blocks, bytes, NULL);
    return 1;
}

int64_t dt_dataset_fetched_ahead(const dt_dataset *d) {
    int64_t blocks = 0, bytes = 0, ahead = 0;
    if (d && d->remote) dt_remote_fetched(d->remote, &blocks, &bytes, &ahead);
    return ahead;
}

int64_t dt_dataset_bytes(const dt_dataset *d) {
    int64_t n = 0;
    for (int i = 0; i < d->n_shards; i++) n += (int64_t)d->shards[i].size;
    return n;
}
