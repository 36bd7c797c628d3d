/* Keyed permutation (sampler.h). */
#include "data/sampler.h"
#include "dtrain/data.h"
#include "dtrain/rng.h"

void dt_perm_init(dt_perm *p, int64_t n, uint64_t seed, uint64_t epoch) {
    p->n = n > 0 ? (uint64_t)n : 0;
    int bits = 2;
    while (bits < 64 && (1ull << bits) < p->n) bits += 2;
    p->half = bits / 2;
    p->mask = (1ull << p->half) - 1;
    /* "SHUF" tags the stream so other users of (seed, epoch) counters get other numbers. */
    uint32_t w[8];
    uint32_t c0[4] = {(uint32_t)epoch, (uint32_t)(epoch >> 32), 0x53485546u, 0};
    uint32_t c1[4] = {(uint32_t)epoch, (uint32_t)(epoch >> 32), 0x53485546u, 1};
    dt_philox4x32(seed, c0, w);
    dt_philox4x32(seed, c1, w + 4);
    for (int i = 0; i < 4; i++) p->k[i] = (uint64_t)w[2 * i] << 32 | w[2 * i + 1];
}

/* Round function: a 64-bit mix (splitmix64's finaliser) of the half-block and the round key. */
static inline uint64_t round_fn(uint64_t x, uint64_t k) {
    uint64_t z = x + k;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t feistel(const dt_perm *p, uint64_t x) {
    uint64_t l = x >> p->half, r = x & p->mask;
    for (int i = 0; i < 4; i++) {
        uint64_t t = r;
        r = (l ^ round_fn(r, p->k[i])) & p->mask;
        l = t;
    }
    return l << p->half | r;
}

int64_t dt_perm_apply(const dt_perm *p, int64_t i) {
    uint64_t x = (uint64_t)i;
    do x = feistel(p, x);
    while (x >= p->n);
    return (int64_t)x;
}

int64_t dt_data_permute(int64_t p, int64_t n, uint64_t seed, uint64_t epoch) {
    if (n <= 0 || p < 0 || p >= n) return -1;
    dt_perm pm;
    dt_perm_init(&pm, n, seed, epoch);
    return dt_perm_apply(&pm, p);
}
