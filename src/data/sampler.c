/* Keyed permutation (sampler.h). */
#include "data/sampler.h"
#include "dtrain/data.h"
#include "dtrain/rng.h"

/* Round keys from two Philox blocks at counters {c0, c1, c2, c3 + 0/1}. */
static void perm_keys(dt_perm *p, int64_t n, uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2,
                      uint32_t c3) {
    p->n = n > 0 ? (uint64_t)n : 0;
    int bits = 2;
    while (bits < 64 && (1ull << bits) < p->n) bits += 2;
    p->half = bits / 2;
    p->mask = (1ull << p->half) - 1;
    uint32_t w[8];
    uint32_t ca[4] = {c0, c1, c2, c3}, cb[4] = {c0, c1, c2, c3 + 1};
    dt_philox4x32(seed, ca, w);
    dt_philox4x32(seed, cb, w + 4);
    for (int i = 0; i < 4; i++) p->k[i] = (uint64_t)w[2 * i] << 32 | w[2 * i + 1];
}

void dt_perm_init(dt_perm *p, int64_t n, uint64_t seed, uint64_t epoch) {
    /* "SHUF" tags the stream so other users of (seed, epoch) counters get other numbers. */
    perm_keys(p, n, seed, (uint32_t)epoch, (uint32_t)(epoch >> 32), 0x53485546u, 0);
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

static inline uint64_t feistel_inv(const dt_perm *p, uint64_t y) {
    uint64_t l = y >> p->half, r = y & p->mask;
    for (int i = 3; i >= 0; i--) {
        uint64_t t = l;
        l = (r ^ round_fn(l, p->k[i])) & p->mask;
        r = t;
    }
    return l << p->half | r;
}

int64_t dt_perm_invert(const dt_perm *p, int64_t x) {
    /* cycle walking backwards: the inverse of a cycle-walked bijection */
    uint64_t y = (uint64_t)x;
    do y = feistel_inv(p, y);
    while (y >= p->n);
    return (int64_t)y;
}

int64_t dt_data_permute(int64_t p, int64_t n, uint64_t seed, uint64_t epoch) {
    if (n <= 0 || p < 0 || p >= n) return -1;
    dt_perm pm;
    dt_perm_init(&pm, n, seed, epoch);
    return dt_perm_apply(&pm, p);
}

/* ---- block-aware order ---- */

void dt_block_order_init(dt_block_order *o, int64_t n, int64_t chunk, int64_t window, uint64_t seed,
                         uint64_t epoch) {
    o->n = n > 0 ? n : 0;
    o->chunk = chunk > 0 ? chunk : 1;
    o->window = window > 0 ? window : 1;
    o->n_chunks = (o->n + o->chunk - 1) / o->chunk;
    o->seed = seed, o->epoch = epoch;
    /* "BLKS": the chunk order */
    perm_keys(&o->chunks, o->n_chunks, seed, (uint32_t)epoch, (uint32_t)(epoch >> 32), 0x424C4B53u,
              0);
    o->short_len = o->n - (o->n_chunks - 1) * o->chunk;
    o->short_at = o->n_chunks > 0 ? dt_perm_invert(&o->chunks, o->n_chunks - 1) : 0;
    o->cached = -1;
}

int64_t dt_block_order_windows(const dt_block_order *o) {
    return (o->n_chunks + o->window - 1) / o->window;
}

int64_t dt_block_order_chunk(const dt_block_order *o, int64_t i) {
    return dt_perm_apply(&o->chunks, i);
}

/* Every window holds window * chunk samples, but the one holding the short chunk has `deficit`
 * fewer and the last one may hold fewer chunks. */
void dt_block_order_window_span(const dt_block_order *o, int64_t k, int64_t *w0, int64_t *w1) {
    const int64_t full = o->window * o->chunk, deficit = o->chunk - o->short_len;
    const int64_t ks = o->short_at / o->window;
    int64_t a = k * full - (k > ks ? deficit : 0), b = (k + 1) * full - (k + 1 > ks ? deficit : 0);
    *w0 = a < o->n ? a : o->n;
    *w1 = b < o->n ? b : o->n;
}

int64_t dt_block_order_window_of(const dt_block_order *o, int64_t p) {
    const int64_t full = o->window * o->chunk, deficit = o->chunk - o->short_len;
    const int64_t ks = o->short_at / o->window;
    /* windows up to ks start at k * full; later ones `deficit` earlier */
    if (p < (ks + 1) * full - deficit) return p / full;
    return (p + deficit) / full;
}

int64_t dt_block_order_apply(dt_block_order *o, int64_t p) {
    int64_t k = dt_block_order_window_of(o, p), w0, w1;
    dt_block_order_window_span(o, k, &w0, &w1);
    if (o->cached != k) {
        /* "WIND": the order inside window k of (seed, epoch) */
        perm_keys(&o->inner, w1 - w0, o->seed, (uint32_t)o->epoch, (uint32_t)k,
                  0x57494E44u ^ (uint32_t)((uint64_t)k >> 32), (uint32_t)(o->epoch >> 32) << 1);
        o->cached = k;
    }
    int64_t x = dt_perm_apply(&o->inner, p - w0); /* offset inside the window's samples */
    /* the window's chunks in chunk order: all full except the short one (if it lies here) */
    int64_t i0 = k * o->window, is = o->short_at - i0, i, first;
    if (is < 0 || is >= o->window || x < is * o->chunk) { /* before the short chunk */
        i = x / o->chunk, first = i * o->chunk;
    } else if (x < is * o->chunk + o->short_len) {
        i = is, first = is * o->chunk;
    } else {
        int64_t after = x - is * o->chunk - o->short_len;
        i = is + 1 + after / o->chunk;
        first = x - after % o->chunk;
    }
    return dt_perm_apply(&o->chunks, i0 + i) * o->chunk + (x - first);
}
