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

#endif
