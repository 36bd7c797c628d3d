/* The keyed permutation behind shuffling and the val split: a 4-round Feistel network over the
 * smallest even-bit domain that holds n, with cycle walking back into [0, n). The round keys are
 * Philox outputs for (seed, epoch), so every (seed, epoch) gives an unrelated permutation, and
 * position -> sample costs a few multiplies: no per-epoch array, O(1) random access. */
#ifndef DT_DATA_SAMPLER_H
#define DT_DATA_SAMPLER_H

#include <stdint.h>

typedef struct dt_perm {
    uint64_t n, mask; /* domain is 2^(2*half) >= n; mask = 2^half - 1 */
    int half;
    uint64_t k[4];
} dt_perm;

void dt_perm_init(dt_perm *p, int64_t n, uint64_t seed, uint64_t epoch);
/* Image of position i (< n). */
int64_t dt_perm_apply(const dt_perm *p, int64_t i);
/* Position of sample x (< n): the inverse of dt_perm_apply. */
int64_t dt_perm_invert(const dt_perm *p, int64_t x);

/* Block-aware shuffling (data.shuffle_window_mb): the samples [0, n) are cut into chunks of
 * `chunk` consecutive samples (the last one shorter), the chunks are permuted with a dt_perm for
 * (seed, epoch), and the permuted chunk list is taken `window` chunks at a time: the samples of
 * each such window are permuted among themselves with a dt_perm keyed by (seed, epoch, window).
 * Position p -> sample stays O(1): the window boundaries follow from where the short chunk
 * lands (one inverse permutation). Positions [w0, w1) of one window read only that window's
 * chunks, so a reader that walks the order touches a bounded set of consecutive byte ranges. */
typedef struct dt_block_order {
    int64_t n, chunk, window, n_chunks;
    int64_t short_at, short_len; /* chunk-order position of the last (short) chunk, its size */
    uint64_t seed, epoch;
    dt_perm chunks;
    int64_t cached; /* window whose inner permutation `inner` holds (-1: none) */
    dt_perm inner;
} dt_block_order;

void dt_block_order_init(dt_block_order *o, int64_t n, int64_t chunk, int64_t window, uint64_t seed,
                         uint64_t epoch);
/* Sample at position p (< n); caches the inner permutation of p's window in o. */
int64_t dt_block_order_apply(dt_block_order *o, int64_t p);
/* Window of position p, and the positions [*w0, *w1) window k covers. */
int64_t dt_block_order_window_of(const dt_block_order *o, int64_t p);
void dt_block_order_window_span(const dt_block_order *o, int64_t k, int64_t *w0, int64_t *w1);
/* Chunk at chunk-order position i (< n_chunks): samples [c * chunk, min(n, (c + 1) * chunk)). */
int64_t dt_block_order_chunk(const dt_block_order *o, int64_t i);
/* Windows in the epoch. */
int64_t dt_block_order_windows(const dt_block_order *o);

#endif
