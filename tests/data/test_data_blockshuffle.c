/* Block-aware shuffling (data.shuffle_window_mb): the sampler's order is a permutation of the
 * epoch for every (seed, epoch) and differs between epochs and seeds; each window's positions
 * draw only from that window's chunks (at most `window` of them) and the windows tile the
 * epoch; positions looked up in any order after a fresh init (a resume mid-epoch) give the same
 * samples; dt_perm_invert inverts dt_perm_apply. Through the loader on a local 10 MiB dataset:
 * with 1-3 ranks every sample is seen once per epoch across ranks (the remainder dropped), the
 * ranks' shares are disjoint and start in different windows, a loader resumed mid-epoch from a
 * cursor continues with the same batches, and any 64 consecutive samples of a rank touch at
 * most 4 MiB-regions of the data (a whole-set shuffle touches nearly all 10: checked, so the
 * bound can fail). */
#include "data/sampler.h"
#include "data_testutil.h"

/* CHECK_OK as an expression */
#define OK(expr) CHECK((expr) == DT_OK, "%s: %s", #expr, dt_last_error())

static void test_order(int64_t n, int64_t chunk, int64_t window) {
    uint8_t *seen = malloc((size_t)n);
    int64_t *first = malloc((size_t)n * 8), *cur = malloc((size_t)n * 8);
    for (uint64_t seed = 1; seed <= 2; seed++)
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            dt_block_order o;
            dt_block_order_init(&o, n, chunk, window, seed, epoch);
            memset(seen, 0, (size_t)n);
            int ok = 1;
            for (int64_t p = 0; p < n && ok; p++) {
                int64_t x = dt_block_order_apply(&o, p);
                ok = CHECK(x >= 0 && x < n && !seen[x],
                           "n %lld chunk %lld window %lld: position %lld -> %lld (repeat or out "
                           "of range)",
                           (long long)n, (long long)chunk, (long long)window, (long long)p,
                           (long long)x);
                if (ok) seen[x] = 1, cur[p] = x;
            }
            if (!ok) continue;
            /* windows tile [0, n), each drawing from its own chunks only */
            int64_t nw = dt_block_order_windows(&o), end = 0;
            for (int64_t k = 0; k < nw && ok; k++) {
                int64_t w0, w1;
                dt_block_order_window_span(&o, k, &w0, &w1);
                ok = CHECK(w0 == end && w1 > w0,
                           "window %lld spans [%lld, %lld), expected from %lld", (long long)k,
                           (long long)w0, (long long)w1, (long long)end);
                end = w1;
                for (int64_t p = w0; p < w1 && ok; p++) {
                    ok = CHECK(dt_block_order_window_of(&o, p) == k,
                               "position %lld not in window %lld", (long long)p, (long long)k);
                    int64_t c = cur[p] / chunk, hit = 0;
                    for (int64_t i = k * window; i < (k + 1) * window && i < o.n_chunks; i++)
                        hit |= dt_block_order_chunk(&o, i) == c;
                    ok = ok && CHECK(hit,
                                     "n %lld: position %lld of window %lld reads chunk %lld, "
                                     "not one of the window's",
                                     (long long)n, (long long)p, (long long)k, (long long)c);
                }
            }
            CHECK(!ok || end == n, "the windows end at %lld of %lld", (long long)end, (long long)n);
            /* a fresh order looked up backwards from the middle (a resume) */
            dt_block_order r;
            dt_block_order_init(&r, n, chunk, window, seed, epoch);
            for (int64_t p = n - 1; p >= n / 2 && ok; p -= 3)
                ok = CHECK(dt_block_order_apply(&r, p) == cur[p], "resumed position %lld differs",
                           (long long)p);
            if (seed == 1 && epoch == 0) {
                memcpy(first, cur, (size_t)n * 8);
            } else if (n >= 20) {
                int same = !memcmp(first, cur, (size_t)n * 8);
                CHECK(!same, "n %lld: seed %llu epoch %llu repeats seed 1 epoch 0's order",
                      (long long)n, (unsigned long long)seed, (unsigned long long)epoch);
            }
        }
    /* inside one window of several chunks the order mixes them (not chunk after chunk) */
    if (n >= 4 * chunk && window >= 2 && chunk >= 4) {
        dt_block_order o;
        dt_block_order_init(&o, n, chunk, window, 7, 0);
        int64_t c0 = dt_block_order_apply(&o, 0) / chunk, mixed = 0;
        for (int64_t p = 1; p < chunk; p++) mixed |= dt_block_order_apply(&o, p) / chunk != c0;
        CHECK(mixed, "n %lld: the first %lld positions all read chunk %lld", (long long)n,
              (long long)chunk, (long long)c0);
    }
    dt_perm pm;
    dt_perm_init(&pm, n, 5, 1);
    for (int64_t x = 0; x < n; x += 1 + n / 97)
        CHECK(dt_perm_apply(&pm, dt_perm_invert(&pm, x)) == x &&
                  dt_perm_invert(&pm, dt_perm_apply(&pm, x)) == x,
              "dt_perm_invert(%lld) of %lld", (long long)x, (long long)n);
    free(seen), free(first), free(cur);
}

/* rank r's samples over `epochs` epochs (out[e * share + j]); 0 when the loader fails */
static int64_t rank_samples(const dt_dataset *d, const dt_loader_config *c, int epochs,
                            int64_t *out) {
    dt_loader *l;
    if (!OK(dt_loader_open(d, c, &l))) return 0;
    int64_t bpe = dt_loader_batches_per_epoch(l), n = 0;
    for (int64_t k = 0; k < bpe * epochs; k++) {
        dt_batch b;
        if (!OK(dt_loader_next(l, &b))) break;
        for (int64_t i = 0; i < b.n; i++) out[n++] = b.samples[i];
    }
    dt_loader_close(l);
    return n;
}

/* MiB-regions of the pixels that samples [i, i + 64) of `s` lie in */
static int regions(const int64_t *s, int64_t hwc) {
    uint8_t hit[64] = {0};
    int n = 0;
    for (int i = 0; i < 64; i++) {
        int64_t m = s[i] * hwc >> 20;
        if (m < 64 && !hit[m]) hit[m] = 1, n++;
    }
    return n;
}

static void test_loader(const dt_dataset *d, int64_t N, int64_t hwc) {
    const int epochs = 2;
    int64_t *all = malloc((size_t)(N * epochs) * 8);
    uint8_t *seen = malloc((size_t)N);
    for (int world = 1; world <= 3; world++) {
        int64_t share = N / world, worst = 0;
        for (int r = 0; r < world; r++) {
            dt_loader_config c;
            dt_loader_config_default(&c);
            c.batch_size = 32, c.seed = 3, c.rank = r, c.world_size = world, c.drop_last = 1;
            c.prefetch_threads = r % 2 ? 2 : 0;
            c.shuffle_window_bytes = 1 << 20;
            int64_t got = rank_samples(d, &c, epochs, all + r * epochs * share);
            int64_t want = epochs * (share / 32 * 32);
            CHECK(got == want, "world %d rank %d: %lld samples, want %lld", world, r,
                  (long long)got, (long long)want);
            for (int64_t i = 0; i + 64 <= got; i += 16) {
                int m = regions(all + r * epochs * share + i, hwc);
                if (m > worst) worst = m;
            }
        }
        if (world >= 2) {
            /* ranks 0 and 1 start in different windows: their first 256 samples share at most
             * the one MiB-region where two chunks meet (interleaved ranks would share all) */
            uint8_t r0[64] = {0}, r1[64] = {0};
            int common = 0;
            for (int64_t i = 0; i < 256; i++) {
                r0[(all[i] * hwc >> 20) & 63] = 1;
                r1[(all[epochs * share + i] * hwc >> 20) & 63] = 1;
            }
            for (int m = 0; m < 64; m++) common += r0[m] && r1[m];
            CHECK(common <= 1, "world %d: ranks 0 and 1 both read %d MiB-regions first", world,
                  common);
        }
        CHECK(worst <= 4,
              "world %d: 64 consecutive samples touch %lld MiB-regions, at most 4 "
              "expected with a 1 MiB window",
              world, (long long)worst);
        /* every sample at most once per epoch across ranks, each rank's full share */
        for (int e = 0; e < epochs; e++) {
            memset(seen, 0, (size_t)N);
            int64_t dup = 0, total = 0;
            for (int r = 0; r < world; r++) {
                const int64_t *s = all + r * epochs * share + e * (share / 32 * 32);
                for (int64_t j = 0; j < share / 32 * 32; j++, total++) dup += seen[s[j]]++ > 0;
            }
            CHECK(dup == 0, "world %d epoch %d: %lld samples repeated across ranks", world, e,
                  (long long)dup);
        }
    }
    /* all of an epoch without drop_last at world 1 covers every sample once */
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 32, c.seed = 3, c.shuffle_window_bytes = 1 << 20;
    int64_t got = rank_samples(d, &c, 1, all);
    memset(seen, 0, (size_t)N);
    int64_t distinct = 0;
    for (int64_t j = 0; j < got; j++) distinct += !seen[all[j]]++;
    CHECK(got == N && distinct == N, "one epoch: %lld samples, %lld distinct of %lld",
          (long long)got, (long long)distinct, (long long)N);
    /* the whole-set shuffle is not bounded so: the bound above can fail */
    c.shuffle_window_bytes = 0;
    got = rank_samples(d, &c, 1, all);
    int whole = got >= 64 ? regions(all, hwc) : 0;
    CHECK(whole > 4, "a whole-set shuffle touched only %d MiB-regions in 64 samples", whole);
    /* resume mid-epoch from a cursor: the same remaining batches */
    c.shuffle_window_bytes = 1 << 20, c.rank = 1, c.world_size = 2, c.prefetch_threads = 2;
    dt_loader *a, *b;
    if (OK(dt_loader_open(d, &c, &a)) && OK(dt_loader_open(d, &c, &b))) {
        int64_t bpe = dt_loader_batches_per_epoch(a);
        dt_batch x, y;
        for (int64_t k = 0; k < bpe / 2 + 3; k++) OK(dt_loader_next(a, &x));
        dt_data_cursor cur;
        dt_loader_cursor(a, &cur);
        OK(dt_loader_seek(b, &cur));
        int same = 1;
        for (int64_t k = 0; k < bpe && same; k++) {
            if (!OK(dt_loader_next(a, &x)) || !OK(dt_loader_next(b, &y))) break;
            same = CHECK(x.n == y.n && x.epoch == y.epoch && x.index == y.index &&
                             !memcmp(x.samples, y.samples, (size_t)x.n * 8) &&
                             !memcmp(x.images, y.images, (size_t)x.n * (size_t)hwc * 4),
                         "resumed batch %lld differs", (long long)k);
        }
        dt_loader_close(a);
        dt_loader_close(b);
    }
    free(all), free(seen);
}

int main(void) {
    const int64_t cases[][3] = {{1000, 7, 5}, {1001, 10, 3},  {10, 3, 100}, {64, 8, 1},
                                {1, 1, 1},    {5000, 100, 4}, {999, 1, 1},  {4097, 64, 16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        test_order(cases[i][0], cases[i][1], cases[i][2]);

    char tmp[4096], dir[4200];
    const char *t = tu_tempdir(tmp, sizeof tmp, "blockshuffle");
    if (!CHECK(t, "mkdtemp")) return dt_test_finish("test_data_blockshuffle");
    snprintf(dir, sizeof dir, "%s/img", t);
    /* 40000 images of 16 x 16: 10 MiB of pixels, one shard */
    const int64_t N = 40000, hwc = 256;
    dt_dataset *d = NULL;
    if (OK(tu_make_images(dir, N, 16, 16, 1, 10, 64 << 20)) &&
        OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d)))
        test_loader(d, N, hwc);
    dt_dataset_close(d);
    dt_remove_tree(t);
    return dt_test_finish("test_data_blockshuffle");
}
