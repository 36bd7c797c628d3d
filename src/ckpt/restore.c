/* The restore: a checkpoint's files streamed into the parameters, this rank's optimizer slice
 * and the loader's cursor; choosing the checkpoint, and agreeing on it across ranks
 * (include/dtrain/ckpt_run.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include "dtrain/ckpt_run.h"
#include "dtrain/safetensors.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- restore: one streaming pass per file -------------------------------------------------
 * Each file is read once (dt_store_get_stream: the store reads the next chunk while this thread
 * works on the current one), and every chunk is hashed (streaming xxh3) and its tensor bytes
 * copied straight to their places: parameters, or this rank's optimizer slice. The safetensors
 * header is parsed as soon as it has arrived (it may span chunks), against the size
 * trainer_state.json lists, and turned into a scatter map: file byte ranges -> destinations,
 * sorted by offset, walked once. Only at the end are the file's size and checksum known, so
 * bytes are in place before the file verified: a damaged file leaves the state partly
 * overwritten (*touched), which dt_ckpt_restore handles by loading an older checkpoint over
 * it. A header that does not parse, or tensors that do not fit this model, stop the copying at
 * once but are reported only after the size and checksum checks, as when files were read whole
 * first: a damaged file is named as damaged. */

/* File bytes [off, off + n) go to dst. */
typedef struct scatter {
    size_t off, n;
    char *dst;
} scatter;

typedef struct restore_sink restore_sink;
/* Builds k's scatter map from the file's parsed header. */
typedef dt_status (*restore_plan_fn)(restore_sink *k, const dt_st_file *f);

struct restore_sink {
    const dt_ckpt_ctx *c;
    const char *name; /* "<dir>/<file>": messages */
    size_t want;      /* the size trainer_state.json lists */
    XXH3_state_t *h;
    restore_plan_fn plan;
    const void *plan_arg;
    /* the header: 8 bytes, then hdr_need in all (0: not known yet), collected across chunks */
    char *hdr;
    size_t hdr_need, hdr_have, hdr_cap;
    int parsed;
    dt_status err; /* the header or its tensors do not fit: no more copies; reported at the end */
    char msg[1024];
    scatter *map;
    int n_map, cap_map, next; /* next: the first entry not yet completely copied */
    int *touched;
};

static dt_status sink_add(restore_sink *k, size_t off, size_t n, void *dst) {
    if (!n) return DT_OK;
    if (k->n_map == k->cap_map) {
        int cap = k->cap_map ? 2 * k->cap_map : 64;
        scatter *m = realloc(k->map, (size_t)cap * sizeof *m);
        if (!m) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", k->name);
        k->map = m, k->cap_map = cap;
    }
    k->map[k->n_map++] = (scatter){off, n, dst};
    return DT_OK;
}

static int by_offset(const void *a, const void *b) {
    const scatter *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Remembers the failure (dt_last_error's message) to report after the size and checksum. */
static void sink_defer(restore_sink *k, dt_status st) {
    k->err = st;
    snprintf(k->msg, sizeof k->msg, "%s", dt_last_error());
}

/* Takes header bytes from the chunk at c [n] (file offset off); parses the header once it is
 * all there. The buffer grows with the bytes that arrived, not to the size the header's first 8
 * bytes claim (up to the listed file size and 100 MB), so a short file claiming a long header
 * costs no more memory than its length. */
static void sink_header(restore_sink *k, size_t off, const char *c, size_t n) {
    for (;;) {
        size_t need = k->hdr_need ? k->hdr_need : 8;
        if (k->hdr_have < need && off + n > k->hdr_have) {
            size_t take = need - k->hdr_have, from = k->hdr_have - off;
            if (take > n - from) take = n - from;
            if (k->hdr_have + take > k->hdr_cap) {
                size_t cap =
                    k->hdr_cap * 2 > k->hdr_have + take ? k->hdr_cap * 2 : k->hdr_have + take;
                if (cap > need) cap = need;
                char *h = realloc(k->hdr, cap);
                if (!h) {
                    sink_defer(k, dt_error_set(DT_ERR_NOMEM, "%s: out of memory", k->name));
                    return;
                }
                k->hdr = h, k->hdr_cap = cap;
            }
            memcpy(k->hdr + k->hdr_have, c + from, take);
            k->hdr_have += take;
        }
        if (k->hdr_have < need) return; /* the rest comes with the next chunks */
        if (k->hdr_need) break;
        size_t hn;
        dt_status st = dt_st_header_size(k->name, k->hdr, k->want, &hn);
        if (st != DT_OK) {
            sink_defer(k, st);
            return;
        }
        k->hdr_need = hn;
    }
    dt_st_file *f;
    dt_status st = dt_st_open_header(k->name, k->hdr, k->hdr_need, k->want, &f);
    if (st == DT_OK) {
        st = k->plan(k, f);
        dt_st_close(f);
    }
    if (st != DT_OK) {
        sink_defer(k, st);
        return;
    }
    /* safetensors tensors do not overlap (checked), nor do the parts of them taken */
    qsort(k->map, (size_t)k->n_map, sizeof *k->map, by_offset);
    k->parsed = 1;
}

static dt_status sink_chunk(void *ud, size_t off, const void *p, size_t n) {
    restore_sink *k = ud;
    const char *c = p;
    XXH3_64bits_update(k->h, c, n);
    if (k->err) return DT_OK; /* hash on: a damaged file is reported as such */
    if (!k->parsed) sink_header(k, off, c, n);
    if (!k->parsed) return DT_OK;
    size_t end = off + n;
    for (; k->next < k->n_map && k->map[k->next].off < end; k->next++) {
        const scatter *e = &k->map[k->next];
        size_t a = e->off > off ? e->off : off, b = e->off + e->n < end ? e->off + e->n : end;
        if (b > a) memcpy(e->dst + (a - e->off), c + (a - off), b - a), *k->touched = 1;
        if (e->off + e->n > end) break; /* continues in the next chunk */
    }
    return DT_OK;
}

/* Reads file `name` of checkpoint dir in one pass, copying its tensors where plan says, and
 * checks it against trainer_state.json's entry: its size and xxh3. This is the resume's only
 * check of the contents (see dt_ckpt_restore). *n: the bytes read. */
static dt_status restore_file(const dt_ckpt_ctx *c, dt_store *s, const char *dir,
                              const dt_ckpt_state *state, const char *name, restore_plan_fn plan,
                              const void *plan_arg, int *touched, size_t *n) {
    const dt_ckpt_file_entry *e = dt_ckpt_state_file(state, name);
    *n = 0;
    if (!e)
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s does not list %s", dir, DT_CKPT_STATE,
                            name);
    char key[1400];
    snprintf(key, sizeof key, "%s/%s", dir, name);
    size_t want = (size_t)e->bytes; /* the decoder checked it is a size */
    restore_sink k = {
        .c = c, .name = key, .want = want, .plan = plan, .plan_arg = plan_arg, .touched = touched};
    k.h = XXH3_createState();
    k.hdr = malloc(8), k.hdr_cap = 8;
    if (!k.h || !k.hdr || XXH3_64bits_reset(k.h) != XXH_OK) {
        XXH3_freeState(k.h), free(k.hdr);
        return dt_error_set(DT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
    }
    /* One byte of slack tells a longer file from one of the listed size. */
    dt_status st = dt_store_get_stream(s, key, want + 1, sink_chunk, &k, n);
    if (st == DT_ERR_NOTFOUND) {
        st = dt_error_set(st, "checkpoint %s: file %s is missing", dir, name);
    } else if (st == DT_ERR_RANGE) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "checkpoint %s: file %s is longer than the %zu bytes listed (replaced)",
                          dir, name, want);
    } else if (st == DT_OK) {
        uint64_t hash = XXH3_64bits_digest(k.h);
        if (*n != want) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "checkpoint %s: file %s has %zu bytes, expected %zu (truncated or "
                              "replaced)",
                              dir, name, *n, want);
        } else if (hash != e->xxh3) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "checkpoint %s: file %s: checksum xxh3 %016" PRIx64
                              ", expected %016" PRIx64 " (corrupt)",
                              dir, name, hash, e->xxh3);
        } else if (k.err != DT_OK) {
            st = dt_error_set(k.err, "%s", k.msg);
        } else if (!k.parsed) { /* a verified file too short to hold its own header */
            size_t hn;
            st = dt_st_header_size(key, k.hdr, *n, &hn);
            if (st == DT_OK)
                st = dt_error_set(DT_ERR_FORMAT, "%s: header incomplete (%zu bytes)", key, *n);
        }
    }
    XXH3_freeState(k.h);
    free(k.hdr), free(k.map);
    return st;
}

/* model.safetensors: every trainable and state parameter, by name, into its value. */
static dt_status plan_model(restore_sink *k, const dt_st_file *f) {
    dt_graph *g = k->c->g;
    dt_status st = DT_OK;
    for (int i = 0; i < dt_graph_param_count(g) && st == DT_OK; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (pi->flags & DT_PARAM_FROZEN) continue;
        dt_tensor src;
        size_t off;
        const dt_tensor *dst = dt_graph_value(g, pi->id);
        if ((st = dt_st_locate(f, pi->name, &src, &off)) != DT_OK) break;
        if (src.dtype != DT_F32 || (size_t)dt_tensor_numel(&src) != pi->numel)
            st = dt_error_set(
                DT_ERR_FORMAT, "%s: tensor %s: %s of %lld elements, expected f32 of %zu", k->name,
                pi->name, dt_dtype_name(src.dtype), (long long)dt_tensor_numel(&src), pi->numel);
        else
            st = sink_add(k, off, pi->numel * sizeof(float), dst->data);
    }
    return st;
}

/* One saved optimizer shard, covering [a, b) of the flat layout: what overlaps this rank's
 * slice [lo, hi) of each buffer. */
typedef struct optim_part {
    const dt_optim_state *os;
    size_t a, b, lo, hi;
} optim_part;

static dt_status plan_optim(restore_sink *k, const dt_st_file *f) {
    const optim_part *q = k->plan_arg;
    const dt_optim_state *os = q->os;
    dt_status st = DT_OK;
    for (int j = 0; j < os->n_buffers && st == DT_OK; j++) {
        dt_tensor src;
        size_t off;
        if ((st = dt_st_locate(f, os->names[j], &src, &off)) != DT_OK) break;
        if ((size_t)dt_tensor_numel(&src) < q->hi - q->a || src.dtype != DT_F32)
            st = dt_error_set(DT_ERR_FORMAT, "%s: %s has %lld elements, expected %zu", k->name,
                              os->names[j], (long long)dt_tensor_numel(&src), q->b - q->a);
        else
            st = sink_add(k, off + (q->lo - q->a) * sizeof(float), (q->hi - q->lo) * sizeof(float),
                          os->buffers[j] + (q->lo - os->lo));
    }
    return st;
}

/* The optimizer slice [lo, hi) from the saved shards (any saved world size: the shards are
 * contiguous slices of one flat layout, so resharding is a matter of copying overlaps). */
static dt_status load_optim(const dt_ckpt_ctx *c, dt_store *s, const char *dir,
                            const dt_ckpt_state *state, int *touched, int64_t *loaded) {
    if (state->layout_shards < 1 || state->layout_shard < 1)
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s: bad layout in %s", dir, DT_CKPT_STATE);
    int shards = state->layout_shards;
    size_t ss = (size_t)state->layout_shard, n = c->n;
    dt_optim_state os;
    dt_status st = dt_optim_get_state(c->opt, &os);
    if (st != DT_OK) return st;
    /* r x ss below must not wrap, and the shards must cover every parameter (a layout that
     * does not would leave the rest of the optimizer state as it was, silently) */
    size_t cover;
    if (__builtin_mul_overflow((size_t)shards, ss, &cover) || cover < n)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: %s: layout of %d shards of %zu elements does not fit "
                            "%zu parameters",
                            dir, DT_CKPT_STATE, shards, ss, n);
    for (int r = 0; r < shards && st == DT_OK; r++) {
        size_t a = (size_t)r * ss, b = a + ss < n ? a + ss : n;
        size_t lo = a > os.lo ? a : os.lo, hi = b < os.hi ? b : os.hi;
        if (hi <= lo) continue;
        char fname[64];
        dt_ckpt_optim_name(fname, r, shards);
        optim_part q = {&os, a, b, lo, hi};
        size_t got;
        st = restore_file(c, s, dir, state, fname, plan_optim, &q, touched, &got);
        *loaded += (int64_t)got;
    }
    if (st != DT_OK) return st;
    /* a missing one is 0 (older checkpoints) */
    return dt_optim_set_step(c->opt, state->optimizer_step < 0 ? 0 : state->optimizer_step);
}

static dt_status check_layout(const dt_ckpt_ctx *c, const char *dir, const dt_ckpt_state *state) {
    size_t n = state->layout_n < 0 ? (size_t)-1 : (size_t)state->layout_n;
    if (n != c->n)
        return dt_error_set(DT_ERR_INVALID,
                            "checkpoint %s: %zu trainable parameters, this model has %zu "
                            "(different model or config)",
                            dir, n, c->n);
    int k = 0;
    for (int i = 0; i < dt_graph_param_count(c->g); i++) {
        const dt_param_info *pi = dt_graph_param_info(c->g, i);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        const dt_ckpt_param_entry *a = k < state->n_params ? &state->params[k] : NULL;
        k++;
        if (!a || strcmp(a->name, pi->name) || a->offset != (int64_t)pi->offset ||
            a->numel != (int64_t)pi->numel)
            return dt_error_set(DT_ERR_INVALID,
                                "checkpoint %s: parameter %d is %s, this model has %s (%zu "
                                "elements): different model",
                                dir, k - 1, a ? a->name : "missing", pi->name, pi->numel);
    }
    return DT_OK;
}

/* "6,2" (or "equal" for none) into buf[n]. */
static void fmt_parts(const int64_t *p, int k, char *buf, size_t n) {
    snprintf(buf, n, "equal");
    for (int r = 0, l = 0; r < k && (size_t)l < n; r++)
        l += snprintf(buf + l, n - (size_t)l, r ? ",%lld" : "%lld", (long long)p[r]);
}

/* Uneven batch shares resume only into the same parts (world size and each rank's batch): the
 * data cursor's global batch index means the same positions only then. Equal parts on both
 * sides are the usual path (another world size allowed). */
static dt_status check_parts(const dt_ckpt_ctx *c, const char *dir, const dt_ckpt_state *s) {
    int world = dt_comm_size(c->comm);
    if (!c->batch_parts && !s->n_batch_parts) return DT_OK;
    int same = c->batch_parts && s->n_batch_parts == world;
    for (int r = 0; same && r < world; r++) same = c->batch_parts[r] == s->batch_parts[r];
    if (same) return DT_OK;
    /* dist.batch_shares=auto before its re-balance: parts auto chose for the same global batch
     * (the trainer switches to them after the restore) */
    int64_t G = 0, saved_G = 0;
    for (int r = 0; c->batch_parts && r < world; r++) G += c->batch_parts[r];
    for (int r = 0; r < s->n_batch_parts; r++) saved_G += s->batch_parts[r];
    if (c->parts_adopt && s->batch_parts_auto_step > 0 && s->n_batch_parts == world && saved_G == G)
        return DT_OK;
    char saved[200], now[200];
    fmt_parts(s->batch_parts, s->n_batch_parts, saved, sizeof saved);
    fmt_parts(c->batch_parts, c->batch_parts ? world : 0, now, sizeof now);
    return dt_error_set(DT_ERR_INVALID,
                        "checkpoint %s: saved with per-rank batches [%s] on %d ranks, this run has "
                        "[%s] on %d: a resume with uneven dist.batch_shares needs the same world "
                        "size and shares",
                        dir, saved, s->world_size, now, world);
}

/* Loads checkpoint `dir` into this rank: parameters, its optimizer slice, data cursor,
 * progress. *bad: it failed on the checkpoint's contents (a file missing, not matching its
 * size or checksum, not safetensors): an older checkpoint may do. *touched: parameters or
 * optimizer state may already have been overwritten. */
static dt_status load_checkpoint(const dt_ckpt_ctx *c, dt_store *s, const char *dir,
                                 dt_ckpt_resumed *out, int *bad, int *touched, int64_t *loaded) {
    int world = dt_comm_size(c->comm);
    dt_ckpt_state *state = &out->state;
    dt_ckpt_state_free(state);
    *bad = 0;
    dt_status st = dt_ckpt_state_load(s, dir, state);
    if (st == DT_OK && state->world_size < 1)
        st = dt_error_set(DT_ERR_FORMAT,
                          "checkpoint %s: %s has no valid world_size (an integer in [1, 1e7))", dir,
                          DT_CKPT_STATE);
    out->old_world = st == DT_OK ? state->world_size : 0;
    if (st == DT_OK) st = check_layout(c, dir, state);
    if (st == DT_OK) {
        size_t got = 0;
        st = restore_file(c, s, dir, state, DT_CKPT_MODEL, plan_model, NULL, touched, &got);
        *loaded += (int64_t)got;
        if (st == DT_OK) st = load_optim(c, s, dir, state, touched, loaded);
        *bad = st == DT_ERR_FORMAT || st == DT_ERR_NOTFOUND;
    }
    if (st == DT_OK && !state->data_cursor)
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s has no data_cursor string", dir,
                          DT_CKPT_STATE);
    if (st == DT_OK) st = check_parts(c, dir, state);
    dt_data_cursor cur;
    if (st == DT_OK && (st = dt_data_cursor_parse(state->data_cursor, &cur)) == DT_OK) {
        /* uneven parts (the same on both sides, checked): the cursor is rank 0's, and its
         * batch index is the global batch's; this rank's part has its own size */
        if (c->batch_parts) cur.batch_size = c->batch_parts[dt_comm_rank(c->comm)];
        /* Ranks are interleaved: batch b of every rank holds the first (b+1)*B*W positions of
         * the epoch order. Another world size continues at the first position not yet seen,
         * rounded down to its own batches (at most one global batch is seen twice). The batch
         * is any int64 the file holds: the product is checked (dt_loader_seek checks the
         * range of what it gets). */
        int64_t pos, ow = out->old_world;
        if (ow != world && __builtin_mul_overflow(cur.batch, ow, &pos))
            st = dt_error_set(DT_ERR_FORMAT,
                              "checkpoint %s: %s: data_cursor batch %lld x world_size %d "
                              "overflows",
                              dir, DT_CKPT_STATE, (long long)cur.batch, (int)ow);
        else if (ow != world)
            cur.batch = pos / world;
        cur.rank = dt_comm_rank(c->comm), cur.world_size = world;
        if (st == DT_OK) st = dt_loader_seek(c->loader, &cur);
    }
    if (st == DT_OK) {
        out->step = state->step, out->epoch = state->epoch;
        if (out->step < 0 || out->epoch < 0)
            st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s has no valid step/epoch", dir,
                              DT_CKPT_STATE);
    }
    return st;
}

/* A checkpoint URI (ckpt.resume=URI): its parent is the store, its last component the key. */
static dt_status open_named(const char *r, dt_store **own, char *dir, size_t dir_n) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", r);
    size_t l = strlen(parent);
    while (l > 1 && parent[l - 1] == '/') parent[--l] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash || !slash[1])
        return dt_error_set(DT_ERR_INVALID, "ckpt.resume: '%s' is not a checkpoint directory", r);
    snprintf(dir, dir_n, "%s", slash + 1);
    *slash = 0;
    return dt_store_open(parent, NULL, own);
}

/* Resume in one pass over the checkpoint's bytes. Rank 0 chooses the checkpoint with the cheap
 * check (dt_ckpt_find_before at DT_CKPT_SIZES: committed, every file there with its size: one
 * stat per file), and every rank then hashes each file it loads (restore_file) -- instead of
 * reading and hashing every file once to choose and again to load. The contents are thus checked
 * by whichever rank reads them; a file no rank reads (an optimizer shard overlapping no rank's
 * slice) holds nothing this run uses. The ranks agree on the outcome with one all-reduce: if any
 * rank found a damaged file, every rank warns (the rank that found it naming the file) and rank 0
 * chooses the next older checkpoint for all; any other failure (the store, another model) fails
 * every rank, as before. A checkpoint named by ckpt.resume=URI is not replaced by another: a
 * damaged file there is an error.
 *
 * A damaged file found after parameters or optimizer state were overwritten leaves them mixed:
 * the older checkpoint overwrites them all again. Files stream into place, so that is any file
 * whose size or checksum fails after its tensors were copied (corrupt or truncated), not one
 * that is missing, longer than listed or whose header does not parse. Only if no older
 * checkpoint is left is that an error (rather than starting from step 0 with half-loaded
 * weights); a damaged file that touched nothing still lets the run start from step 0. */
static dt_status restore(const dt_ckpt_ctx *c, const char *r, dt_ckpt_resumed *out,
                         dt_store **own) {
    int rank = dt_comm_rank(c->comm), world = dt_comm_size(c->comm);
    dt_store *s = c->store;
    char *dir = out->dir;
    dt_status st = DT_OK;
    int named = strcmp(r, "auto") != 0;
    if (named) {
        if ((st = open_named(r, own, dir, sizeof out->dir)) != DT_OK) return st;
        s = *own;
        if (rank == 0 && (st = dt_ckpt_check(s, dir, DT_CKPT_SIZES, NULL)) != DT_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            st = dt_error_set(st, "ckpt.resume: %s", m);
        }
    }
    FILE *log = c->log ? c->log : stderr;
    int64_t before = INT64_MAX; /* rank 0: candidates are older than the last one skipped */
    int touched_any = 0;
    double t0 = now();
    int64_t loaded = 0;
    for (;;) {
        if (!named && rank == 0) {
            dt_ckpt_info info;
            st = dt_ckpt_find_before(s, c->root, before, DT_CKPT_SIZES, log, &info);
            if (st == DT_OK)
                snprintf(dir, sizeof out->dir, "%s", info.dir), before = info.step;
            else if (st == DT_ERR_NOTFOUND)
                st = DT_OK, dir[0] = 0;
        }
        /* every rank learns rank 0's choice (or its error) */
        if (world > 1) {
            double e = st != DT_OK;
            dt_status cs = dt_comm_allreduce_f64(c->comm, &e, 1);
            if (cs == DT_OK) cs = dt_comm_broadcast(c->comm, dir, sizeof out->dir, 0);
            if (cs != DT_OK)
                st = cs;
            else if (e > 0 && st == DT_OK)
                st = dt_error_set(DT_ERR_IO, "ckpt.resume: rank 0 could not choose a checkpoint");
        }
        if (st == DT_OK && !dir[0] && touched_any)
            st = dt_error_set(DT_ERR_FORMAT,
                              "ckpt.resume: no good checkpoint under %s/%s, and the damaged one "
                              "skipped was partly loaded: remove it, or start over with "
                              "ckpt.resume=never",
                              dt_store_url(s), c->root);
        if (st != DT_OK || !dir[0]) {
            if (st == DT_OK && c->log)
                fprintf(c->log, "no checkpoint under %s/%s: starting from step 0\n",
                        dt_store_url(s), c->root);
            return st;
        }
        int bad = 0, touched = 0;
        loaded = 0;
        st = load_checkpoint(c, s, dir, out, &bad, &touched, &loaded);
        /* agree: ranks that failed, that failed on a damaged file, that overwrote state */
        double o[3] = {st != DT_OK, st != DT_OK && bad, touched};
        if (world > 1) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            dt_status cs = dt_comm_allreduce_f64(c->comm, o, 3);
            if (cs != DT_OK) return st != DT_OK ? dt_error_set(st, "%s", m) : cs;
            if (st != DT_OK) dt_error_set(st, "%s", m);
        }
        touched_any |= o[2] > 0;
        if (o[0] == 0) break;
        if (named || o[1] < o[0]) { /* not (only) damaged files, or no other choice */
            if (st == DT_OK)
                st = dt_error_set(DT_ERR_STATE, "ckpt.resume: another rank could not load %s", dir);
            else if (named) {
                char m[1024];
                snprintf(m, sizeof m, "%s", dt_last_error());
                st = dt_error_set(st, "ckpt.resume: %s", m);
            }
            return st;
        }
        if (st != DT_OK)
            fprintf(log, "warning: skipping a bad checkpoint: %s\n", dt_last_error());
        else if (rank == 0)
            fprintf(log,
                    "warning: skipping a bad checkpoint: %s: another rank found a damaged file "
                    "(its message names it)\n",
                    dir);
        fflush(log);
        st = DT_OK;
    }
    double load_s = now() - t0; /* choosing (and any skipped ones) + loading */
    if (c->ddp) st = dt_ddp_release_params(c->ddp);
    out->found = st == DT_OK;
    if (st == DT_OK && c->log)
        fprintf(c->log, "checkpoint %s loaded: %.1f MB read and verified in %.2f s (%.0f MB/s)\n",
                dir, (double)loaded / 1e6, load_s,
                load_s > 0 ? (double)loaded / 1e6 / load_s : 0.0);
    if (st == DT_OK && c->log)
        fprintf(c->log, "resumed from %s/%s: step %lld%s\n", dt_store_url(s), dir,
                (long long)out->step,
                out->old_world != world ? " (another world size: optimizer state resharded, data "
                                          "continues at the first unseen global batch)"
                                        : "");
    return st;
}

dt_status dt_ckpt_restore(const dt_ckpt_ctx *c, const char *resume, dt_ckpt_resumed *out) {
    memset(out, 0, sizeof *out);
    dt_ckpt_state_init(&out->state);
    out->step = out->epoch = -1;
    if (!strcmp(resume, "never")) return DT_OK;
    dt_store *own = NULL;
    dt_status st = restore(c, resume, out, &own);
    dt_store_close(own);
    if (st != DT_OK || !out->found) {
        dt_ckpt_state_free(&out->state);
        out->found = 0;
    }
    return st;
}
