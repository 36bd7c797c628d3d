/* The loader: which samples a batch holds (sampler), making the batch (images: crop, flip,
 * normalise to f32 NCHW; tokens: windows or packed documents), and background threads that make
 * batches ahead into a ring of slots.
 *
 * Batch `index` of `epoch` on rank r holds rank-local samples j in [index*B, (index+1)*B), the
 * epoch-order positions p = j * world + r (mod N when padding), and the samples perm(p). Nothing
 * depends on which thread made a batch or when, so the output is a function of (seed, epoch,
 * rank, index) alone, and a cursor (epoch, index) is all resuming needs. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include "data/dataset.h"
#include "data/loader_image.h"
#include "data/sampler.h"
#include "dtrain/rng.h"

enum { SLOT_FREE = 0, SLOT_FILLING = 1, SLOT_READY = 2, MAX_THREADS = 64 };

typedef struct slot {
    int state;
    int64_t seq;
    dt_status st;
    char err[512];
    dt_batch b;
    int64_t *samples;
    float *images;
    int32_t *labels, *inputs, *targets, *positions;
    float *loss_mask;
    uint32_t *tok_tmp; /* [T + 1] */
    uint8_t *mask_tmp; /* [T + 1] */
    int32_t *pos_tmp;  /* [T + 1] */
} slot;

/* DT_PACK_DOCS: sequence s is pieces [seq_start[s], seq_start[s + 1]) */
typedef struct piece {
    int64_t doc, start, len;
} piece;

typedef struct worker_arg {
    struct dt_loader *l;
    int idx; /* which scratch: the thread's own */
} worker_arg;

struct dt_loader {
    const dt_dataset *d;
    dt_loader_config c;
    int64_t n, per_rank, bpe;
    /* block-aware shuffling (shuffle_window_bytes > 0): samples per chunk, chunks per window,
     * and (s3://) the last window, as epoch * windows + k, whose blocks were queued ahead */
    int64_t chunk, window, n_windows;
    _Atomic int64_t ahead;
    /* images */
    int C, H, W;
    float scale[4], bias[4];
    /* encoded images: the transform, each prefetch thread's decode buffers (the caller's
     * thread uses [0] when there are none) */
    dt_transform_cfg tc;
    dt_enc_scratch scr[MAX_THREADS];
    worker_arg args[MAX_THREADS];
    _Atomic int64_t undecodable; /* images that failed to decode (on_corrupt=skip) */
    /* tokens */
    int64_t T;
    piece *pieces;
    int64_t *seq_start;
    int64_t pack_real; /* DT_PACK_DOCS: tokens of all pieces (the rest of the slots is padding) */
    /* ring of batches */
    int Q;
    slot *slots;
    int64_t start_epoch, start_batch; /* position of sequence number 0 */
    int64_t next_consume, next_produce;
    int held;
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_free;
    pthread_t threads[MAX_THREADS];
    int n_threads, stop;
    _Atomic int64_t warned; /* corrupt blocks warned about so far (skip_corrupt) */
};

/* After a failed block check: with skip_corrupt, warn once per newly found corrupt block and go
 * on (DT_OK); otherwise return the error. */
static dt_status corrupt(dt_loader *l, dt_status st) {
    if (!l->c.skip_corrupt) return st;
    int64_t now = dt_dataset_bad_blocks(l->d), prev = atomic_load(&l->warned);
    while (prev < now)
        if (atomic_compare_exchange_weak(&l->warned, &prev, now)) {
            fprintf(stderr, "dtrain: warning: %s; skipping its records (data.on_corrupt=skip)\n",
                    dt_last_error());
            break;
        }
    dt_error_clear();
    return DT_OK;
}

void dt_loader_config_default(dt_loader_config *c) {
    memset(c, 0, sizeof *c);
    c->batch_size = 32;
    c->world_size = 1;
    c->shuffle = 1;
    c->queue_depth = 4;
    c->crop_padding = 4;
    c->hflip = 1;
    c->image_size = 224;
    c->crop_scale[0] = 0.08, c->crop_scale[1] = 1.0;
    c->crop_ratio[0] = 3.0 / 4.0, c->crop_ratio[1] = 4.0 / 3.0;
    c->dct_scaling = 1;
    for (int i = 0; i < 4; i++) c->mean[i] = 0.0f, c->std[i] = 1.0f;
    c->seq_len = 256;
    c->pack = DT_PACK_CONCAT;
}

/* ---- which samples ---- */

static int block_mode(const dt_loader *l) {
    return l->c.shuffle && l->chunk > 0;
}

static void batch_samples(const dt_loader *l, int64_t epoch, int64_t index, int64_t *out,
                          int64_t *count) {
    const dt_loader_config *c = &l->c;
    int64_t j0 = index * c->batch_size, j1 = j0 + c->batch_size;
    if (j1 > l->per_rank) j1 = l->per_rank;
    dt_perm pm;
    dt_block_order bo;
    const int blocks = block_mode(l);
    if (blocks)
        dt_block_order_init(&bo, l->n, l->chunk, l->window, c->seed, (uint64_t)epoch);
    else if (c->shuffle)
        dt_perm_init(&pm, l->n, c->seed, (uint64_t)epoch);
#define ORDER(p)                                                                                   \
    (blocks ? dt_block_order_apply(&bo, (p)) : c->shuffle ? dt_perm_apply(&pm, (p)) : (p))
    if (c->global_batch > 0) { /* this rank's contiguous part of global batch `index` */
        int64_t p0 = index * c->global_batch + c->global_offset;
        for (int64_t k = 0; k < c->batch_size; k++) out[k] = ORDER(p0 + k);
        *count = c->batch_size;
        return;
    }
    for (int64_t j = j0; j < j1; j++) {
        /* interleaved ranks; block-aware: contiguous parts, so ranks read disjoint windows */
        int64_t p = (blocks ? c->rank * l->per_rank + j : j * c->world_size + c->rank) % l->n;
        out[j - j0] = ORDER(p);
    }
#undef ORDER
    *count = j1 - j0;
}

/* DT_PACK_DOCS: the shard and the first token (in it) of piece pc. */
static void piece_span(const dt_loader *l, const piece *pc, int *sh, int64_t *t0) {
    *sh = dt_dataset_shard_of_record(l->d, pc->doc);
    *t0 = (int64_t)l->d->shards[*sh].offsets[pc->doc - l->d->rec_start[*sh]] + pc->start;
}

/* From s3://: queues the payload blocks that samples [n] read to be fetched (no wait). Token
 * windows (concat) are spans of the token stream; a docs-packed sequence is its pieces from
 * the packing plan (document, start, length): the same blocks packed_tokens then reads. */
static void prefetch_samples(const dt_loader *l, const int64_t *samples, int64_t n) {
    const dt_dataset *d = l->d;
    if (!d->remote) return;
    if (d->info.kind != DT_DATA_TOKENS || l->c.pack != DT_PACK_DOCS) {
        dt_dataset_prefetch(d, samples, n, d->info.kind == DT_DATA_TOKENS ? l->T : 0);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t k = samples[i];
        if (k < 0 || k >= l->n) continue;
        for (int64_t p = l->seq_start[k]; p < l->seq_start[k + 1]; p++) {
            int sh;
            int64_t t0;
            piece_span(l, &l->pieces[p], &sh, &t0);
            dt_dataset_prefetch_tokens(d, sh, t0, l->pieces[p].len);
        }
    }
}

/* Block-aware shuffling from s3://: queues the blocks of window `g` (epoch * windows + k). */
static void prefetch_window(const dt_loader *l, int64_t g) {
    int64_t epoch = g / l->n_windows, k = g % l->n_windows, buf[256];
    dt_block_order bo;
    dt_block_order_init(&bo, l->n, l->chunk, l->window, l->c.seed, (uint64_t)epoch);
    for (int64_t i = k * l->window; i < (k + 1) * l->window && i < bo.n_chunks; i++) {
        int64_t a = dt_block_order_chunk(&bo, i) * l->chunk, b = a + l->chunk;
        if (b > l->n) b = l->n;
        while (a < b) {
            int64_t m = 0;
            for (; m < 256 && a < b; m++) buf[m] = a++;
            prefetch_samples(l, buf, m);
        }
    }
}

/* The windows of the batch at `pos` (its first epoch-order position) and the next one, once. */
static void prefetch_ahead(dt_loader *l, int64_t epoch, int64_t pos) {
    if (!l->d->remote || !block_mode(l)) return;
    dt_block_order bo;
    dt_block_order_init(&bo, l->n, l->chunk, l->window, l->c.seed, (uint64_t)epoch);
    int64_t g = epoch * l->n_windows + dt_block_order_window_of(&bo, pos % l->n);
    int64_t prev = atomic_load(&l->ahead);
    while (prev < g + 1)
        if (atomic_compare_exchange_weak(&l->ahead, &prev, g + 1)) {
            for (int64_t x = prev + 1 > g ? prev + 1 : g; x <= g + 1; x++) prefetch_window(l, x);
            break;
        }
}

/* ---- images ---- */

/* One image, uint8 HWC -> f32 CHW, x * scale[c] + bias[c] with scale = 1 / (255 std) and
 * bias = -mean / std: (x / 255 - mean) / std within 2 ulp, one fused multiply-add per pixel. */
static void image_normalize(const dt_loader *l, const uint8_t *src, float *dst) {
    const int C = l->C;
    const int64_t HW = (int64_t)l->H * l->W;
    for (int c = 0; c < C; c++) {
        const float a = l->scale[c], b = l->bias[c];
        float *o = dst + c * HW;
        /* omp simd: -O2 does not vectorise loops by itself */
        if (C == 1) {
#pragma omp simd
            for (int64_t p = 0; p < HW; p++) o[p] = (float)src[p] * a + b;
        } else {
#pragma omp simd
            for (int64_t p = 0; p < HW; p++) o[p] = (float)src[p * C + c] * a + b;
        }
    }
}

/* n pixels (stride C bytes) -> o[0..n), x * a + b. Single-channel rows take 8 pixels per step
 * with AVX2 (rows are short, 28-32 pixels: compiler-vectorised loops spend most of their time in
 * prologue and epilogue there). */
static inline void convert_run(const uint8_t *src, int C, int n, float a, float b, float *o) {
    int x = 0;
#ifdef __AVX2__
    if (C == 1) {
        const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
        for (; x + 8 <= n; x += 8) {
            __m128i u8 = _mm_loadl_epi64((const __m128i *)(src + x));
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u8));
            _mm256_storeu_ps(o + x, _mm256_fmadd_ps(f, va, vb));
        }
    }
#endif
    for (; x < n; x++) o[x] = (float)src[(int64_t)x * C] * a + b;
}

/* o[x] = t[n - 1 - x] */
static inline void reverse_copy(float *o, const float *t, int n) {
    int x = 0;
#ifdef __AVX2__
    const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    for (; x + 8 <= n; x += 8)
        _mm256_storeu_ps(o + x, _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + n - 8 - x), rev));
#endif
    for (; x < n; x++) o[x] = t[n - 1 - x];
}

/* Crop at (dy, dx) from the image padded by `pad` on every side, optionally flip it
 * horizontally, and normalise as image_normalize does, in one pass. Padding is black before
 * normalisation, as torchvision pads. */
static void image_crop_flip(const dt_loader *l, const uint8_t *src, float *dst, int dy, int dx,
                            int pad, int flip) {
    const int C = l->C, H = l->H, W = l->W;
    /* output columns [x0, x1) read source columns x + dx - pad inside the image */
    const int x0 = pad - dx > 0 ? pad - dx : 0, x1 = W + pad - dx < W ? W + pad - dx : W;
    float tmp[W > 0 ? W : 1];
    for (int c = 0; c < C; c++) {
        const float a = l->scale[c], b = l->bias[c];
        float *o = dst + (int64_t)c * H * W;
        for (int y = 0; y < H; y++, o += W) {
            int sy = y + dy - pad;
            if (sy < 0 || sy >= H || x0 >= x1) {
                for (int x = 0; x < W; x++) o[x] = b;
                continue;
            }
            const uint8_t *row = src + ((int64_t)sy * W + (x0 + dx - pad)) * C + c;
            float *t = flip ? tmp : o;
            for (int x = 0; x < x0; x++) t[x] = b;
            convert_run(row, C, x1 - x0, a, b, t + x0);
            for (int x = x1; x < W; x++) t[x] = b;
            if (flip) reverse_copy(o, tmp, W);
        }
    }
}

static dt_status fill_images(dt_loader *l, slot *s, int64_t epoch, int64_t n) {
    const dt_loader_config *c = &l->c;
    int64_t chw = (int64_t)l->C * l->H * l->W;
    int pad = c->augment ? c->crop_padding : 0;
    /* Samples are scattered over the mapping: prefetch a few images ahead so their cache misses
     * overlap instead of stalling one image at a time. */
    enum { AHEAD = 4 };
    const int64_t hwc = chw;
    for (int64_t i = 0; i < n && i < AHEAD; i++) {
        const uint8_t *q = dt_dataset_image(l->d, s->samples[i], NULL);
        for (int64_t off = 0; off < hwc; off += 64) __builtin_prefetch(q + off);
    }
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n) {
            const uint8_t *q = dt_dataset_image(l->d, s->samples[i + AHEAD], NULL);
            for (int64_t off = 0; off < hwc; off += 64) __builtin_prefetch(q + off);
        }
        int64_t id = s->samples[i], src = id;
        /* skip_corrupt: the next intact record stands in (augmentation stays keyed by id) */
        dt_status st;
        for (int64_t tries = 0; (st = dt_dataset_check_image(l->d, src)) != DT_OK; tries++) {
            if ((st = corrupt(l, st)) != DT_OK) return st;
            if (tries + 1 >= l->d->info.records)
                return dt_error_set(DT_ERR_FORMAT, "%s: every record is corrupt", l->d->dir);
            src = (src + 1) % l->d->info.records;
        }
        int32_t label;
        const uint8_t *px = dt_dataset_image(l->d, src, &label);
        int dy = pad, dx = pad, flip = 0;
        if (c->augment) {
            /* Keyed by (seed, epoch, sample): "AUG!" tags the stream. */
            uint32_t r[4], ctr[4] = {(uint32_t)id, (uint32_t)((uint64_t)id >> 32), (uint32_t)epoch,
                                     0x41554721u ^ (uint32_t)((uint64_t)epoch >> 32)};
            dt_philox4x32(c->seed, ctr, r);
            dy = (int)(r[0] % (uint32_t)(2 * pad + 1));
            dx = (int)(r[1] % (uint32_t)(2 * pad + 1));
            flip = c->hflip && (r[2] & 1);
        }
        if (!c->augment)
            image_normalize(l, px, s->images + i * chw);
        else
            image_crop_flip(l, px, s->images + i * chw, dy, dx, pad, flip);
        s->labels[i] = label;
    }
    return DT_OK;
}

/* Encoded images: decode + transform each sample into its place in the slot. With
 * skip_corrupt, a record in a corrupt block or one that does not decode is replaced by the next
 * one that does (its draws stay keyed by the sample's id, as for stored images). */
static dt_status fill_encoded(dt_loader *l, slot *s, int64_t epoch, int64_t n,
                              dt_enc_scratch *scr) {
    const dt_loader_config *c = &l->c;
    const int64_t chw = (int64_t)l->C * l->H * l->W, records = l->d->info.records;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = s->samples[i], src = id;
        for (int64_t tries = 0;; tries++) {
            int undecodable;
            dt_status st = dt_enc_sample(l->d, &l->tc, c->dct_scaling, c->seed, epoch, id, src, scr,
                                         s->images + i * chw, &s->labels[i], &undecodable);
            if (st == DT_OK) break;
            if (st == DT_ERR_NOMEM || !c->skip_corrupt) return st;
            if (undecodable) {
                /* intact bytes that are not an image: warned about for the first few */
                int64_t k = atomic_fetch_add(&l->undecodable, 1);
                if (k < 8)
                    fprintf(stderr,
                            "dtrain: warning: %s; using the next record "
                            "(data.on_corrupt=skip)%s\n",
                            dt_last_error(), k == 7 ? "; further ones not reported" : "");
                dt_error_clear();
            } else if ((st = corrupt(l, st)) != DT_OK) {
                return st;
            }
            if (tries + 1 >= records)
                return dt_error_set(DT_ERR_FORMAT, "%s: no record decodes", l->d->dir);
            src = (src + 1) % records;
        }
    }
    return DT_OK;
}

/* ---- tokens ---- */

/* Document-relative position of global token t: finds its document. */
static void token_doc(const dt_dataset *d, int64_t t, int *shard, int64_t *doc_in_shard) {
    int s = dt_dataset_shard_of_token(d, t);
    const dt_shard *sh = &d->shards[s];
    uint64_t local = (uint64_t)(t - d->tok_start[s]);
    /* last document whose offset <= local (documents may be empty: take the last) */
    int64_t lo = 0, hi = (int64_t)sh->h.records - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (sh->offsets[mid] <= local)
            lo = mid;
        else
            hi = mid - 1;
    }
    *shard = s, *doc_in_shard = lo;
}

/* DT_PACK_CONCAT: tokens [k*T, k*T + T + 1) of the stream of all documents; positions count
 * from 0 at the window start and at every document start inside it. */
/* Copies tokens [local, local + take) of shard sh (and their mask) to tmp position got;
 * skip_corrupt: a corrupt span becomes padding with loss mask 0. */
static dt_status copy_tokens(dt_loader *l, slot *s, int sh, int64_t local, int64_t take,
                             int64_t got) {
    const dt_shard *x = &l->d->shards[sh];
    dt_status st = dt_dataset_check_tokens(l->d, sh, local, take);
    if (st) {
        if ((st = corrupt(l, st)) != DT_OK) return st;
        int32_t pad = l->d->info.pad_id >= 0 ? l->d->info.pad_id : 0;
        for (int64_t i = 0; i < take; i++)
            s->tok_tmp[got + i] = (uint32_t)pad, s->mask_tmp[got + i] = 0,
                             s->pos_tmp[got + i] = (int32_t)i;
        return DT_OK;
    }
    for (int64_t i = 0; i < take; i++) {
        s->tok_tmp[got + i] = x->tokens[local + i];
        s->mask_tmp[got + i] = x->mask ? x->mask[local + i] : 1;
        s->pos_tmp[got + i] = (int32_t)i;
    }
    return DT_OK;
}

static dt_status window_tokens(dt_loader *l, slot *s, int64_t k) {
    const dt_dataset *d = l->d;
    int64_t t0 = k * l->T, need = l->T + 1;
    int sh;
    int64_t doc;
    token_doc(d, t0, &sh, &doc);
    int64_t got = 0, local = t0 - d->tok_start[sh];
    while (got < need) {
        const dt_shard *x = &d->shards[sh];
        if (local >= (int64_t)x->h.elements) {
            sh++, local = 0, doc = 0;
            continue;
        }
        while (doc + 1 < (int64_t)x->h.records && (int64_t)x->offsets[doc + 1] <= local) doc++;
        int64_t dend = (int64_t)x->offsets[doc + 1];
        int64_t take = dend - local < need - got ? dend - local : need - got;
        dt_status st = copy_tokens(l, s, sh, local, take, got);
        if (st) return st;
        got += take, local += take;
    }
    return DT_OK;
}

/* DT_PACK_DOCS: the pieces of sequence k, then padding. pos_tmp < 0 marks padding; a piece
 * boundary is where pos_tmp[t + 1] == 0. */
static dt_status packed_tokens(dt_loader *l, slot *s, int64_t k) {
    int64_t got = 0;
    for (int64_t p = l->seq_start[k]; p < l->seq_start[k + 1]; p++) {
        int sh;
        int64_t t0;
        piece_span(l, &l->pieces[p], &sh, &t0);
        dt_status st = copy_tokens(l, s, sh, t0, l->pieces[p].len, got);
        if (st) return st;
        got += l->pieces[p].len;
    }
    int32_t pad = l->d->info.pad_id >= 0 ? l->d->info.pad_id : 0;
    for (; got < l->T + 1; got++)
        s->tok_tmp[got] = (uint32_t)pad, s->mask_tmp[got] = 0, s->pos_tmp[got] = -1;
    return DT_OK;
}

static dt_status fill_tokens(dt_loader *l, slot *s, int64_t n) {
    const int64_t T = l->T;
    int32_t pad = l->d->info.pad_id >= 0 ? l->d->info.pad_id : 0;
    for (int64_t i = 0; i < n; i++) {
        dt_status st = l->c.pack == DT_PACK_DOCS ? packed_tokens(l, s, s->samples[i])
                                                 : window_tokens(l, s, s->samples[i]);
        if (st) return st;
        int32_t *in = s->inputs + i * T, *tg = s->targets + i * T, *ps = s->positions + i * T;
        float *lm = s->loss_mask + i * T;
        for (int64_t t = 0; t < T; t++) {
            int real = s->pos_tmp[t] >= 0;
            /* the next token belongs to the same piece unless a new piece (or padding) starts */
            int same = s->pos_tmp[t + 1] > 0 || (l->c.pack == DT_PACK_CONCAT);
            in[t] = real ? (int32_t)s->tok_tmp[t] : pad;
            ps[t] = real ? s->pos_tmp[t] : 0;
            tg[t] = real && same ? (int32_t)s->tok_tmp[t + 1] : pad;
            lm[t] = real && same && s->mask_tmp[t + 1] ? 1.0f : 0.0f;
        }
    }
    return DT_OK;
}

static dt_status fill(dt_loader *l, slot *s, int64_t seq, dt_enc_scratch *scr) {
    int64_t g = l->start_batch + seq;
    int64_t epoch = l->start_epoch + g / l->bpe, index = g % l->bpe, n;
    batch_samples(l, epoch, index, s->samples, &n);
    prefetch_ahead(l, epoch,
                   l->c.global_batch > 0 ? index * l->c.global_batch + l->c.global_offset
                                         : l->c.rank * l->per_rank + index * l->c.batch_size);
    dt_data_kind kind = l->d->info.kind;
    /* an s3:// dataset: the batch's blocks are fetched in parallel while it is made */
    prefetch_samples(l, s->samples, n);
    dt_status st = kind == DT_DATA_IMAGE     ? fill_images(l, s, epoch, n)
                   : kind == DT_DATA_ENCODED ? fill_encoded(l, s, epoch, n, scr)
                                             : fill_tokens(l, s, n);
    dt_batch *b = &s->b;
    memset(b, 0, sizeof *b);
    b->epoch = epoch, b->index = index, b->n = n;
    b->samples = s->samples;
    if (kind != DT_DATA_TOKENS) {
        b->images = s->images, b->labels = s->labels;
    } else {
        b->inputs = s->inputs, b->targets = s->targets;
        b->loss_mask = s->loss_mask, b->positions = s->positions;
    }
    if (st) snprintf(s->err, sizeof s->err, "%s", dt_last_error());
    return st;
}

/* ---- threads ---- */

static void *worker(void *arg) {
    dt_loader *l = ((worker_arg *)arg)->l;
    dt_enc_scratch *scr = &l->scr[((worker_arg *)arg)->idx];
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->slots[l->next_produce % l->Q].state != SLOT_FREE)
            pthread_cond_wait(&l->cv_free, &l->mu);
        if (l->stop) break;
        int64_t k = l->next_produce++;
        slot *s = &l->slots[k % l->Q];
        s->state = SLOT_FILLING;
        s->seq = k;
        pthread_mutex_unlock(&l->mu);
        dt_status st = fill(l, s, k, scr);
        pthread_mutex_lock(&l->mu);
        s->st = st;
        s->state = SLOT_READY;
        pthread_cond_broadcast(&l->cv_ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void stop_threads(dt_loader *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_free);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
    l->n_threads = 0;
    l->stop = 0;
}

static dt_status start_threads(dt_loader *l) {
    for (int i = 0; i < l->Q; i++) l->slots[i].state = SLOT_FREE;
    l->next_consume = l->next_produce = 0;
    l->held = -1;
    for (int i = 0; i < l->c.prefetch_threads; i++) {
        l->args[i] = (worker_arg){l, i};
        if (pthread_create(&l->threads[i], NULL, worker, &l->args[i]) != 0) {
            stop_threads(l);
            return dt_error_set(DT_ERR_INTERNAL, "loader: cannot start prefetch thread %d", i);
        }
        l->n_threads = i + 1;
    }
    return DT_OK;
}

/* ---- packing table ---- */

static dt_status build_packing(dt_loader *l) {
    const dt_dataset *d = l->d;
    const int64_t cap = l->T + 1;
    int64_t np = 0, maxp = d->info.records + d->info.tokens / l->T + 2;
    l->pieces = malloc((size_t)maxp * sizeof *l->pieces);
    l->seq_start = malloc((size_t)(maxp + 1) * sizeof *l->seq_start);
    if (!l->pieces || !l->seq_start) return dt_error_set(DT_ERR_NOMEM, "loader: out of memory");
    int64_t ns = 0, fill = 0;
    l->seq_start[0] = 0;
    for (int64_t doc = 0; doc < d->info.records; doc++) {
        /* the length from the document offsets alone (an s3:// dataset's tokens stay remote) */
        int sh = dt_dataset_shard_of_record(d, doc);
        const uint64_t *off = d->shards[sh].offsets + (doc - d->rec_start[sh]);
        int64_t len = (int64_t)(off[1] - off[0]);
        if (len < 2) continue; /* nothing to predict */
        for (int64_t start = 0; start + 1 < len;) {
            int64_t take = len - start < cap ? len - start : cap;
            if (fill + take > cap) { /* close the current sequence */
                l->seq_start[++ns] = np;
                fill = 0;
            }
            l->pieces[np++] = (piece){doc, start, take};
            fill += take;
            start += take - 1; /* chunks of a long document overlap by one token */
            if (take < cap) break;
        }
    }
    if (fill) l->seq_start[++ns] = np;
    l->n = ns;
    for (int64_t p = 0; p < np; p++) l->pack_real += l->pieces[p].len;
    return DT_OK;
}

/* ---- block-aware shuffling ---- */

/* Chunks of about one to four payload blocks' worth of samples (the dataset's bytes per sample
 * from its shards' sizes, the same for a local and an s3:// copy), about window / 8 each, and as
 * many chunks per window as fit in shuffle_window_bytes. A chunk's samples are consecutive
 * bytes, so it spans its blocks plus at most one it shares with a neighbour chunk: bigger
 * chunks fetch fewer shared blocks twice, more chunks per window mix better. */
static void block_sizes(dt_loader *l) {
    const int64_t win = l->c.shuffle_window_bytes;
    int64_t B = l->d->n_shards > 0 ? l->d->shards[0].h.block_bytes : 0;
    if (B <= 0) B = 1 << 20;
    int64_t per = dt_dataset_bytes(l->d) / l->n;
    if (per < 1) per = 1;
    int64_t cb = win / 8 < B ? B : win / 8 > 4 * B ? 4 * B : win / 8;
    if (cb > win) cb = win;
    l->chunk = cb / per > 0 ? cb / per : 1;
    l->window = win / cb > 0 ? win / cb : 1;
    int64_t n_chunks = (l->n + l->chunk - 1) / l->chunk;
    l->n_windows = (n_chunks + l->window - 1) / l->window;
    atomic_store(&l->ahead, -1);
}

/* ---- public ---- */

dt_status dt_loader_open(const dt_dataset *d, const dt_loader_config *cfg, dt_loader **out) {
    *out = NULL;
    const dt_dataset_info *in = &d->info;
    dt_loader_config c = *cfg;
    if (c.batch_size <= 0 || c.world_size <= 0 || c.rank < 0 || c.rank >= c.world_size)
        return dt_error_set(DT_ERR_INVALID,
                            "loader: batch size %" PRId64 ", rank %d of world %d "
                            "invalid",
                            c.batch_size, c.rank, c.world_size);
    if (c.prefetch_threads < 0 || c.prefetch_threads > MAX_THREADS)
        return dt_error_set(DT_ERR_INVALID, "loader: prefetch threads %d outside [0, %d]",
                            c.prefetch_threads, MAX_THREADS);
    if (c.queue_depth <= 0) c.queue_depth = 4;
    if (c.queue_depth < c.prefetch_threads + 1) c.queue_depth = c.prefetch_threads + 1;
    if (in->kind == DT_DATA_IMAGE && c.augment && (c.crop_padding < 0 || c.crop_padding > 1024))
        return dt_error_set(DT_ERR_INVALID, "loader: crop padding %d", c.crop_padding);
    if (in->kind == DT_DATA_TOKENS && (c.seq_len <= 0 || c.seq_len > (1 << 24) ||
                                       (c.pack != DT_PACK_CONCAT && c.pack != DT_PACK_DOCS)))
        return dt_error_set(DT_ERR_INVALID,
                            "loader: sequence length %" PRId64 " or packing mode "
                            "%d invalid",
                            c.seq_len, (int)c.pack);
    dt_loader *l = calloc(1, sizeof *l);
    if (!l) return dt_error_set(DT_ERR_NOMEM, "loader: out of memory");
    l->d = d, l->c = c, l->Q = c.queue_depth, l->held = -1;
    dt_status st = DT_OK;
    if (in->kind == DT_DATA_ENCODED) {
        l->n = in->records;
        st = dt_enc_transform_cfg(&c, &l->tc);
        l->C = 3, l->H = l->W = l->tc.size;
    } else if (in->kind == DT_DATA_IMAGE) {
        l->n = in->records;
        l->C = in->channels, l->H = in->height, l->W = in->width;
        for (int ch = 0; ch < l->C; ch++) {
            if (!(c.std[ch] > 0)) {
                st = dt_error_set(DT_ERR_INVALID, "loader: std[%d] = %g must be positive", ch,
                                  c.std[ch]);
                break;
            }
            l->scale[ch] = 1.0f / (255.0f * c.std[ch]);
            l->bias[ch] = -c.mean[ch] / c.std[ch];
        }
    } else {
        l->T = c.seq_len;
        if (c.pack == DT_PACK_CONCAT)
            l->n = in->tokens > 0 ? (in->tokens - 1) / l->T : 0;
        else
            st = build_packing(l);
    }
    if (!st && l->n <= 0)
        st = dt_error_set(DT_ERR_INVALID,
                          "loader: %s holds no complete sample (%" PRId64 " records, %" PRId64
                          " tokens, sequence length %" PRId64 ")",
                          d->dir, in->records, in->tokens, l->T);
    if (!st) {
        l->per_rank =
            c.pad_remainder ? (l->n + c.world_size - 1) / c.world_size : l->n / c.world_size;
        l->bpe = c.drop_last ? l->per_rank / c.batch_size
                             : (l->per_rank + c.batch_size - 1) / c.batch_size;
        if (c.global_batch > 0) { /* uneven parts: whole global batches of the epoch's order */
            if (!c.drop_last || c.global_offset < 0 ||
                c.global_offset + c.batch_size > c.global_batch)
                st = dt_error_set(DT_ERR_INVALID,
                                  "loader: part [%" PRId64 ", +%" PRId64 ") of a global batch of "
                                  "%" PRId64 " (drop_last %d) invalid",
                                  c.global_offset, c.batch_size, c.global_batch, c.drop_last);
            l->bpe = l->n / c.global_batch;
        }
        if (l->bpe <= 0)
            st = dt_error_set(DT_ERR_INVALID,
                              "loader: %" PRId64 " samples, %d ranks and batch size %" PRId64
                              " give no batch per epoch",
                              l->n, c.world_size, c.batch_size);
    }
    if (!st && c.shuffle && c.shuffle_window_bytes > 0) block_sizes(l);
    l->slots = st ? NULL : calloc((size_t)l->Q, sizeof *l->slots);
    if (!st && !l->slots) st = dt_error_set(DT_ERR_NOMEM, "loader: out of memory");
    int64_t B = c.batch_size;
    for (int i = 0; !st && i < l->Q; i++) {
        slot *s = &l->slots[i];
        s->samples = malloc((size_t)B * 8);
        int ok = s->samples != NULL;
        if (in->kind != DT_DATA_TOKENS) {
            s->images = malloc((size_t)(B * l->C * l->H * l->W) * 4);
            s->labels = malloc((size_t)B * 4);
            ok = ok && s->images && s->labels;
        } else {
            size_t bt = (size_t)(B * l->T) * 4;
            s->inputs = malloc(bt), s->targets = malloc(bt), s->positions = malloc(bt);
            s->loss_mask = malloc(bt);
            s->tok_tmp = malloc((size_t)(l->T + 1) * 4);
            s->mask_tmp = malloc((size_t)(l->T + 1));
            s->pos_tmp = malloc((size_t)(l->T + 1) * 4);
            ok = ok && s->inputs && s->targets && s->positions && s->loss_mask && s->tok_tmp &&
                 s->mask_tmp && s->pos_tmp;
        }
        if (!ok) st = dt_error_set(DT_ERR_NOMEM, "loader: out of memory for %d batches", l->Q);
    }
    if (!st) {
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv_ready, NULL);
        pthread_cond_init(&l->cv_free, NULL);
        st = start_threads(l);
        if (st) {
            pthread_mutex_destroy(&l->mu);
            pthread_cond_destroy(&l->cv_ready);
            pthread_cond_destroy(&l->cv_free);
        } else {
            *out = l;
            return DT_OK;
        }
    }
    /* failed: free without touching the (uninitialised) synchronisation objects */
    for (int i = 0; l->slots && i < l->Q; i++) {
        slot *s = &l->slots[i];
        free(s->samples), free(s->images), free(s->labels), free(s->inputs), free(s->targets);
        free(s->positions), free(s->loss_mask), free(s->tok_tmp), free(s->mask_tmp),
            free(s->pos_tmp);
    }
    free(l->slots), free(l->pieces), free(l->seq_start), free(l);
    return st;
}

dt_status dt_loader_next(dt_loader *l, dt_batch *b) {
    slot *s;
    pthread_mutex_lock(&l->mu);
    if (l->held >= 0) {
        l->slots[l->held].state = SLOT_FREE;
        l->held = -1;
        pthread_cond_broadcast(&l->cv_free);
    }
    int64_t k = l->next_consume;
    s = &l->slots[k % l->Q];
    if (l->n_threads == 0) {
        pthread_mutex_unlock(&l->mu);
        s->st = fill(l, s, k, &l->scr[0]);
        pthread_mutex_lock(&l->mu);
        s->state = SLOT_READY;
        l->next_produce = k + 1;
    } else {
        while (!(s->state == SLOT_READY && s->seq == k)) pthread_cond_wait(&l->cv_ready, &l->mu);
    }
    dt_status st = s->st;
    if (st == DT_OK) {
        l->next_consume++;
        l->held = (int)(k % l->Q);
        *b = s->b;
    } else {
        /* leave the failed batch in place: every later call reports the same error */
        dt_error_set(st, "%s", s->err);
    }
    pthread_mutex_unlock(&l->mu);
    return st;
}

int64_t dt_loader_batches_per_epoch(const dt_loader *l) {
    return l->bpe;
}
double dt_loader_pack_efficiency(const dt_loader *l) {
    if (l->d->info.kind != DT_DATA_TOKENS || l->c.pack != DT_PACK_DOCS || l->n <= 0) return 1.0;
    return (double)l->pack_real / ((double)l->n * (double)(l->T + 1));
}

int64_t dt_loader_dataset_samples(const dt_loader *l) {
    return l->n;
}
int64_t dt_loader_rank_samples(const dt_loader *l) {
    return l->per_rank;
}
void dt_loader_image_shape(const dt_loader *l, int *c, int *h, int *w) {
    *c = l->C, *h = l->H, *w = l->W;
}

void dt_loader_close(dt_loader *l) {
    if (!l) return;
    stop_threads(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_ready);
    pthread_cond_destroy(&l->cv_free);
    for (int i = 0; i < MAX_THREADS; i++) dt_enc_scratch_free(&l->scr[i]);
    for (int i = 0; i < l->Q; i++) {
        slot *s = &l->slots[i];
        free(s->samples), free(s->images), free(s->labels), free(s->inputs), free(s->targets);
        free(s->positions), free(s->loss_mask), free(s->tok_tmp), free(s->mask_tmp),
            free(s->pos_tmp);
    }
    free(l->slots), free(l->pieces), free(l->seq_start), free(l);
}

/* ---- cursor ---- */

void dt_loader_cursor(const dt_loader *l, dt_data_cursor *c) {
    dt_loader *m = (dt_loader *)l;
    pthread_mutex_lock(&m->mu);
    int64_t g = l->start_batch + l->next_consume;
    pthread_mutex_unlock(&m->mu);
    memset(c, 0, sizeof *c);
    c->epoch = l->start_epoch + g / l->bpe;
    c->batch = g % l->bpe;
    c->seed = l->c.seed;
    c->rank = l->c.rank, c->world_size = l->c.world_size;
    c->batch_size = l->c.batch_size;
    c->seq_len = l->d->info.kind == DT_DATA_TOKENS ? l->T : 0;
    memcpy(c->fingerprint, l->d->info.fingerprint, sizeof c->fingerprint);
}

dt_status dt_loader_seek(dt_loader *l, const dt_data_cursor *c) {
    dt_data_cursor me;
    dt_loader_cursor(l, &me);
    const char *field = NULL;
    if (strcmp(c->fingerprint, me.fingerprint))
        field = "dataset fingerprint";
    else if (c->seed != me.seed)
        field = "seed";
    else if (c->world_size != me.world_size)
        field = "world size";
    else if (c->rank != me.rank)
        field = "rank";
    else if (c->batch_size != me.batch_size)
        field = "batch size";
    else if (c->seq_len != me.seq_len)
        field = "sequence length";
    if (field)
        return dt_error_set(DT_ERR_STATE,
                            "loader: the cursor's %s differs from this loader's "
                            "(cursor: seed %" PRIu64 ", world %d, rank %d, batch %" PRId64
                            ", seq %" PRId64 ", data %s)",
                            field, c->seed, c->world_size, c->rank, c->batch_size, c->seq_len,
                            c->fingerprint);
    if (c->epoch < 0 || c->batch < 0 || c->batch >= l->bpe)
        return dt_error_set(DT_ERR_RANGE,
                            "loader: cursor epoch %" PRId64 ", batch %" PRId64
                            " outside [0, %" PRId64 ")",
                            c->epoch, c->batch, l->bpe);
    stop_threads(l);
    l->start_epoch = c->epoch, l->start_batch = c->batch;
    atomic_store(&l->ahead, -1);
    return start_threads(l);
}

int dt_data_cursor_format(const dt_data_cursor *c, char *buf, size_t n) {
    return snprintf(buf, n,
                    "epoch=%" PRId64 " batch=%" PRId64 " seed=%" PRIu64 " rank=%d world=%d "
                    "batch_size=%" PRId64 " seq_len=%" PRId64 " fingerprint=%s",
                    c->epoch, c->batch, c->seed, c->rank, c->world_size, c->batch_size, c->seq_len,
                    c->fingerprint);
}

dt_status dt_data_cursor_parse(const char *s, dt_data_cursor *c) {
    memset(c, 0, sizeof *c);
    long long e, b, bs, sl;
    unsigned long long seed;
    int r, w, used = 0;
    if (sscanf(s,
               "epoch=%lld batch=%lld seed=%llu rank=%d world=%d batch_size=%lld seq_len=%lld "
               "fingerprint=%16[0-9a-f]%n",
               &e, &b, &seed, &r, &w, &bs, &sl, c->fingerprint, &used) != 8 ||
        strlen(c->fingerprint) != 16 || s[used] != '\0')
        return dt_error_set(DT_ERR_FORMAT,
                            "data cursor \"%.200s\" is not \"epoch=E batch=B "
                            "seed=S rank=R world=W batch_size=N seq_len=T fingerprint=HEX\"",
                            s);
    c->epoch = e, c->batch = b, c->seed = seed, c->rank = r, c->world_size = w;
    c->batch_size = bs, c->seq_len = sl;
    return DT_OK;
}
