/* The loader: over 3 epochs with 1, 2 and 3 ranks every sample is seen exactly once per epoch
 * across ranks, ranks are disjoint with equal shares (remainder dropped or padded), the order is
 * identical across runs and prefetch thread counts for a seed and different for another seed;
 * normalisation and augmentation (crop with padding, flip) are exact and reproducible; token
 * windows and document packing hold the right tokens, targets, positions and loss mask; the
 * cursor resumes byte-identically in-process (test_data_resume does it across processes). */
#include <math.h>
#include "data_testutil.h"
#include "dtrain/rng.h"

static const char *g_tmp;

static dt_dataset *open_ds(const char *name) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    dt_dataset *d = NULL;
    CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
    return d;
}

/* Samples of `epochs` epochs for one rank: out[e * per_rank + j]. */
static int64_t run_rank(const dt_dataset *d, const dt_loader_config *c, int epochs, int64_t *out) {
    dt_loader *l;
    if (dt_loader_open(d, c, &l) != DT_OK) {
        CHECK(0, "loader_create: %s", dt_last_error());
        return 0;
    }
    int64_t bpe = dt_loader_batches_per_epoch(l), n = 0;
    for (int64_t k = 0; k < bpe * epochs; k++) {
        dt_batch b;
        if (dt_loader_next(l, &b) != DT_OK) break;
        if (b.epoch != k / bpe || b.index != k % bpe) {
            CHECK(0, "batch %lld is at epoch %lld index %lld", (long long)k, (long long)b.epoch,
                  (long long)b.index);
            break;
        }
        for (int64_t i = 0; i < b.n; i++) out[n++] = b.samples[i];
    }
    dt_loader_close(l);
    return n;
}

/* Coverage, disjointness, equal shares, determinism, for N samples and world sizes 1-3. */
static void test_sampler(const dt_dataset *d, int pad, int threads) {
    const int64_t N = dt_dataset_get_info(d)->records;
    const int epochs = 3;
    int64_t *first = NULL; /* rank-0 order, world 1, seed 1 */
    for (int world = 1; world <= 3; world++) {
        int64_t share = pad ? (N + world - 1) / world : N / world;
        int64_t *all = malloc((size_t)(world * epochs * share) * 8);
        int64_t got_total = 0;
        for (int r = 0; r < world; r++) {
            dt_loader_config c;
            dt_loader_config_default(&c);
            c.batch_size = 32, c.seed = 1, c.rank = r, c.world_size = world;
            c.pad_remainder = pad, c.prefetch_threads = threads;
            int64_t got = run_rank(d, &c, epochs, all + r * epochs * share);
            CHECK(got == epochs * share, "world %d rank %d: %lld samples, want %lld", world, r,
                  (long long)got, (long long)(epochs * share));
            got_total += got;
        }
        if (got_total != world * epochs * share) {
            free(all);
            continue;
        }
        for (int e = 0; e < epochs; e++) {
            int *seen = calloc((size_t)N, sizeof *seen);
            int64_t dup = 0, outside = 0, missing = 0;
            for (int r = 0; r < world; r++)
                for (int64_t j = 0; j < share; j++) {
                    int64_t s = all[(r * epochs + e) * share + j];
                    if (s < 0 || s >= N) {
                        outside++;
                        continue;
                    }
                    dup += seen[s]++ > 0;
                }
            for (int64_t s = 0; s < N; s++) missing += !seen[s];
            int64_t want_dup = pad ? world * share - N : 0;
            int64_t want_missing = pad ? 0 : N - world * share;
            CHECK(
                !outside && dup == want_dup && missing == want_missing,
                "N %lld world %d epoch %d pad %d: %lld duplicates (want %lld), %lld missing (want "
                "%lld)",
                (long long)N, world, e, pad, (long long)dup, (long long)want_dup,
                (long long)missing, (long long)want_missing);
            free(seen);
        }
        /* epochs differ in order */
        int same_epochs = !memcmp(all, all + share, (size_t)share * 8);
        CHECK(!same_epochs, "world %d: epochs 0 and 1 have the same order", world);
        if (world == 1) {
            first = malloc((size_t)(epochs * share) * 8);
            memcpy(first, all, (size_t)(epochs * share) * 8);
            /* the order is not the identity */
            int64_t fixed = 0;
            for (int64_t j = 0; j < share; j++) fixed += all[j] == j;
            CHECK(fixed < N / 10, "shuffle leaves %lld of %lld in place", (long long)fixed,
                  (long long)N);
        }
        free(all);
    }
    /* same seed again (other thread count): identical; another seed: different */
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 32, c.seed = 1, c.pad_remainder = pad, c.prefetch_threads = threads ? 0 : 2;
    int64_t *again = malloc((size_t)(epochs * N) * 8);
    run_rank(d, &c, epochs, again);
    CHECK(first && !memcmp(first, again, (size_t)(epochs * N) * 8),
          "same seed, %d vs %d threads: same order over 3 epochs", threads, c.prefetch_threads);
    c.seed = 2;
    run_rank(d, &c, epochs, again);
    CHECK(first && memcmp(first, again, (size_t)(epochs * N) * 8), "another seed: another order");
    free(again);
    free(first);
}

/* Normalised pixels, and crops/flips that are exact shifts of the source. */
static void test_images(const dt_dataset *d) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    const int C = in->channels, H = in->height, W = in->width, P = 2;
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 16, c.seed = 5;
    float mean[3] = {0.5f, 0.25f, 0.125f}, stdv[3] = {0.5f, 0.2f, 0.3f};
    for (int k = 0; k < 3; k++) c.mean[k] = mean[k], c.std[k] = stdv[k];
    dt_loader *l;
    CHECK_OK(dt_loader_open(d, &c, &l));
    if (!l) return;
    dt_batch b;
    CHECK_OK(dt_loader_next(l, &b));
    int bad = 0;
    for (int64_t i = 0; i < b.n; i++) {
        int32_t lab;
        const uint8_t *px = dt_dataset_image(d, b.samples[i], &lab);
        bad += lab != b.labels[i];
        for (int ch = 0; ch < C; ch++)
            for (int p = 0; p < H * W; p++) {
                float want = ((float)px[p * C + ch] / 255.0f - mean[ch]) / stdv[ch];
                bad += fabsf(b.images[(i * C + ch) * H * W + p] - want) > 1e-5f;
            }
    }
    CHECK(bad == 0, "normalisation: %d values differ (tolerance 1e-5 absolute)", bad);
    dt_loader_close(l);

    /* augmentation: each image is the source shifted by (dy - P, dx - P), maybe flipped */
    c.augment = 1, c.crop_padding = P, c.hflip = 1;
    float *keep = NULL;
    int64_t keep_n = 0;
    for (int threads = 0; threads <= 2; threads++) {
        c.prefetch_threads = threads;
        CHECK_OK(dt_loader_open(d, &c, &l));
        if (!l) return;
        int found_flip = 0, found_shift = 0, unexplained = 0;
        for (int rep = 0; rep < 4; rep++) {
            CHECK_OK(dt_loader_next(l, &b));
            int64_t chw = (int64_t)C * H * W;
            if (threads == 0 && rep == 3) {
                keep = malloc((size_t)(b.n * chw) * 4);
                memcpy(keep, b.images, (size_t)(b.n * chw) * 4);
                keep_n = b.n;
            } else if (rep == 3) {
                CHECK(keep && keep_n == b.n && !memcmp(keep, b.images, (size_t)(b.n * chw) * 4),
                      "augmented batch 3 identical with %d threads", threads);
            }
            for (int64_t i = 0; i < b.n; i++) {
                const uint8_t *px = dt_dataset_image(d, b.samples[i], NULL);
                int ok = 0;
                for (int dy = 0; dy <= 2 * P && !ok; dy++)
                    for (int dx = 0; dx <= 2 * P && !ok; dx++)
                        for (int fl = 0; fl < 2 && !ok; fl++) {
                            int match = 1;
                            for (int ch = 0; ch < C && match; ch++)
                                for (int y = 0; y < H && match; y++)
                                    for (int x = 0; x < W && match; x++) {
                                        int sy = y + dy - P, sx = (fl ? W - 1 - x : x) + dx - P;
                                        int v = sy < 0 || sy >= H || sx < 0 || sx >= W
                                                    ? 0
                                                    : px[(sy * W + sx) * C + ch];
                                        float want = ((float)v / 255.0f - mean[ch]) / stdv[ch];
                                        match = fabsf(b.images[i * chw + (ch * H + y) * W + x] -
                                                      want) < 1e-5f;
                                    }
                            if (match) {
                                ok = 1;
                                found_flip |= fl;
                                found_shift |= dy != P || dx != P;
                            }
                        }
                unexplained += !ok;
            }
        }
        CHECK(unexplained == 0 && found_flip && found_shift,
              "augmentation (%d threads): %d images are no crop/flip of their source; flips seen "
              "%d, shifts seen %d",
              threads, unexplained, found_flip, found_shift);
        dt_loader_close(l);
    }
    free(keep);
}

/* The token stream of the dataset (all documents) with masks and document starts. */
static void token_stream(const dt_dataset *d, uint32_t *tok, uint8_t *mask, uint8_t *start) {
    int64_t n = 0;
    for (int64_t i = 0; i < dt_dataset_get_info(d)->records; i++) {
        const uint32_t *t;
        const uint8_t *m;
        int64_t len;
        dt_dataset_doc(d, i, &t, &m, &len);
        for (int64_t k = 0; k < len; k++, n++) {
            tok[n] = t[k], mask[n] = m ? m[k] : 1, start[n] = k == 0;
        }
    }
}

/* Document packing on a mask-less dataset whose document k-th token is (i * 1000 + k) % vocab:
 * inside a document each target is input + 1, so every trained pair can be checked; over an
 * epoch every (input, target) pair of every document is trained on exactly once. */
static const dt_dataset *g_nomask;

static void test_packing(const dt_dataset *d, int64_t T) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    const int64_t V = in->vocab_size;
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 8, c.seq_len = T, c.seed = 3, c.prefetch_threads = 1, c.pack = DT_PACK_DOCS;
    dt_loader *l;
    CHECK_OK(dt_loader_open(d, &c, &l));
    if (!l) return;
    int64_t want = 0, trained = 0, pads = 0, ends = 0;
    for (int64_t i = 0; i < in->records; i++) {
        const uint32_t *t;
        int64_t len;
        dt_dataset_doc(d, i, &t, NULL, &len);
        if (len > 1) want += len - 1;
    }
    int bad = 0;
    for (int64_t k = 0; k < dt_loader_batches_per_epoch(l); k++) {
        dt_batch b;
        CHECK_OK(dt_loader_next(l, &b));
        for (int64_t i = 0; i < b.n * T; i++) {
            int in_seq = i % T;
            if (b.loss_mask[i] == 1) {
                trained++;
                bad += b.targets[i] != (b.inputs[i] + 1) % V;
            } else if (b.targets[i] == in->pad_id && b.positions[i] == 0 &&
                       b.inputs[i] == in->pad_id) {
                pads++;
            } else {
                ends++; /* the last token of a piece: nothing to predict inside the sequence */
                bad += b.targets[i] != in->pad_id;
            }
            if (in_seq && b.positions[i] != 0 && b.positions[i] != b.positions[i - 1] + 1) bad++;
        }
    }
    CHECK(bad == 0 && trained == want && pads > 0 && ends > 0,
          "packing: %d wrong values; %lld trained pairs (want %lld), %lld padded, %lld piece ends",
          bad, (long long)trained, (long long)want, (long long)pads, (long long)ends);
    /* the packing efficiency: the real tokens among the epoch's (T + 1)-token slots; the inputs
     * show all but each sequence's last slot */
    double n = (double)dt_loader_dataset_samples(l),
           real = dt_loader_pack_efficiency(l) * n * (T + 1);
    CHECK(real >= (double)(trained + ends) - 1e-6 && real <= (double)(trained + ends) + n + 1e-6 &&
              dt_loader_pack_efficiency(l) < 1,
          "packing efficiency %.4f: %.1f real slots, the inputs hold %lld",
          dt_loader_pack_efficiency(l), real, (long long)(trained + ends));
    dt_loader_close(l);
}

static void test_tokens(const dt_dataset *d) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    uint32_t *tok = malloc((size_t)in->tokens * 4);
    uint8_t *mask = malloc((size_t)in->tokens), *start = malloc((size_t)in->tokens);
    token_stream(d, tok, mask, start);
    const int64_t T = 64;
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 8, c.seq_len = T, c.seed = 3, c.prefetch_threads = 2;
    dt_loader *l;
    CHECK_OK(dt_loader_open(d, &c, &l));
    if (!l) goto out;
    CHECK(dt_loader_dataset_samples(l) == (in->tokens - 1) / T, "windows: %lld",
          (long long)dt_loader_dataset_samples(l));
    int bad = 0;
    int64_t *seen = calloc((size_t)dt_loader_dataset_samples(l), 8);
    for (int64_t k = 0; k < dt_loader_batches_per_epoch(l); k++) {
        dt_batch b;
        CHECK_OK(dt_loader_next(l, &b));
        for (int64_t i = 0; i < b.n; i++) {
            int64_t w = b.samples[i], t0 = w * T;
            seen[w]++;
            int32_t pos = 0;
            for (int64_t t = 0; t < T; t++) {
                if (t > 0) pos = start[t0 + t] ? 0 : pos + 1;
                bad += b.inputs[i * T + t] != (int32_t)tok[t0 + t];
                bad += b.targets[i * T + t] != (int32_t)tok[t0 + t + 1];
                bad += b.loss_mask[i * T + t] != (float)mask[t0 + t + 1];
                bad += b.positions[i * T + t] != pos;
            }
        }
    }
    int64_t once = 0;
    for (int64_t w = 0; w < dt_loader_dataset_samples(l); w++) once += seen[w] == 1;
    CHECK(bad == 0 && once == dt_loader_dataset_samples(l),
          "concat windows: %d wrong values, %lld of %lld windows seen once", bad, (long long)once,
          (long long)dt_loader_dataset_samples(l));
    free(seen);
    dt_loader_close(l);

    free(tok), free(mask), free(start);
    tok = NULL, mask = NULL, start = NULL;
    test_packing(g_nomask, T);
out:
    free(tok), free(mask), free(start);
}

/* In-process resume and cursor checks. */
static void test_cursor(const dt_dataset *d) {
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 48, c.seed = 9, c.augment = 1, c.prefetch_threads = 2;
    dt_loader *a, *b;
    CHECK_OK(dt_loader_open(d, &c, &a));
    CHECK_OK(dt_loader_open(d, &c, &b));
    if (!a || !b) return;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    size_t img = (size_t)in->channels * in->height * in->width * 4;
    int64_t bpe = dt_loader_batches_per_epoch(a), k = bpe - 2; /* resume across an epoch end */
    dt_batch x, y;
    for (int64_t i = 0; i < k; i++) dt_loader_next(a, &x);
    dt_data_cursor cur, back;
    dt_loader_cursor(a, &cur);
    CHECK(cur.epoch == 0 && cur.batch == k, "cursor at epoch %lld batch %lld", (long long)cur.epoch,
          (long long)cur.batch);
    char s[256];
    dt_data_cursor_format(&cur, s, sizeof s);
    CHECK_OK(dt_data_cursor_parse(s, &back));
    CHECK(!memcmp(&cur, &back, sizeof cur), "cursor text round trip: %s", s);
    CHECK_OK(dt_loader_seek(b, &back));
    int same = 1;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(dt_loader_next(a, &x));
        CHECK_OK(dt_loader_next(b, &y));
        same &= x.epoch == y.epoch && x.index == y.index && x.n == y.n &&
                !memcmp(x.samples, y.samples, (size_t)x.n * 8) &&
                !memcmp(x.images, y.images, (size_t)x.n * img) &&
                !memcmp(x.labels, y.labels, (size_t)x.n * 4);
    }
    CHECK(same, "resumed loader yields the same 5 batches, byte for byte (across an epoch end)");
    dt_data_cursor bad = back;
    bad.seed = 10;
    tu_check_error("cursor with another seed", dt_loader_seek(b, &bad), "seed", NULL);
    bad = back, bad.world_size = 2;
    tu_check_error("cursor with another world size", dt_loader_seek(b, &bad), "world size", NULL);
    bad = back, bad.fingerprint[0] ^= 1;
    tu_check_error("cursor of another dataset", dt_loader_seek(b, &bad), "fingerprint", NULL);
    bad = back, bad.batch = bpe;
    tu_check_error("cursor past the epoch", dt_loader_seek(b, &bad), "outside", NULL);
    tu_check_error("malformed cursor", dt_data_cursor_parse("epoch=1 batch=x", &bad), "cursor",
                   NULL);
    dt_loader_close(a);
    dt_loader_close(b);

    dt_loader *l;
    c.batch_size = 0;
    tu_check_error("batch size 0", dt_loader_open(d, &c, &l), "batch size", NULL);
    c.batch_size = 8, c.rank = 3, c.world_size = 3;
    tu_check_error("rank >= world", dt_loader_open(d, &c, &l), "rank 3 of world 3", NULL);
    c.rank = 0, c.world_size = 1, c.std[0] = 0;
    tu_check_error("zero std", dt_loader_open(d, &c, &l), "std[0]", NULL);
}

int main(void) {
    char tmp[4096], dir[4200];
    g_tmp = tu_tempdir(tmp, sizeof tmp, "loader");
    if (!CHECK(g_tmp, "mkdtemp")) return dt_test_finish("test_data_loader");
    snprintf(dir, sizeof dir, "%s/img1002", g_tmp);
    CHECK_OK(tu_make_images(dir, 1002, 4, 4, 1, 10, 6000)); /* 1002 = 6 * 167: divisible by 1-3 */
    snprintf(dir, sizeof dir, "%s/img1000", g_tmp);
    CHECK_OK(tu_make_images(dir, 1000, 4, 4, 1, 10, 6000)); /* remainder 1 with 3 ranks */
    snprintf(dir, sizeof dir, "%s/rgb", g_tmp);
    CHECK_OK(tu_make_images(dir, 300, 6, 5, 3, 10, 4000));
    snprintf(dir, sizeof dir, "%s/gray", g_tmp);
    CHECK_OK(tu_make_images(dir, 200, 13, 19, 1, 10, 0)); /* rows of 19: vector + scalar tail */
    snprintf(dir, sizeof dir, "%s/tok", g_tmp);
    CHECK_OK(tu_make_tokens(dir, 400, 150, 3000, 1, 16000));
    snprintf(dir, sizeof dir, "%s/tok-nomask", g_tmp);
    CHECK_OK(tu_make_tokens(dir, 300, 200, 3000, 0, 16000)); /* some documents longer than T */
    dt_dataset *d1002 = open_ds("img1002"), *d1000 = open_ds("img1000"), *rgb = open_ds("rgb");
    dt_dataset *gray = open_ds("gray");
    dt_dataset *tok = open_ds("tok"), *nomask = open_ds("tok-nomask");
    g_nomask = nomask;
    if (d1002 && d1000 && rgb && gray && tok && nomask) {
        test_sampler(d1002, 0, 0);
        test_sampler(d1002, 1, 2);
        test_sampler(d1000, 0, 1);
        test_sampler(d1000, 1, 2);
        test_images(rgb);
        test_images(gray);
        test_tokens(tok);
        test_cursor(rgb);
        /* the permutation itself is a bijection for awkward sizes */
        for (int64_t n = 1; n <= 70; n += 23) {
            int ok = 1;
            int64_t *hit = calloc((size_t)n, 8);
            for (int64_t p = 0; p < n; p++) {
                int64_t s = dt_data_permute(p, n, 11, 4);
                if (s < 0 || s >= n || hit[s]++) ok = 0;
            }
            CHECK(ok, "dt_data_permute is a bijection of [0, %lld)", (long long)n);
            free(hit);
        }
    }
    dt_dataset_close(d1002);
    dt_dataset_close(d1000);
    dt_dataset_close(rgb);
    dt_dataset_close(gray);
    dt_dataset_close(tok);
    dt_dataset_close(nomask);
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_loader");
}
