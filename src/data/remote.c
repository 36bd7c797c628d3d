/* Datasets in an object store: ranged block fetches, the bounded block cache, waiting for a
 * store that does not answer (see remote.h). One mutex guards every block's state, the queue
 * and the cache; the fetch threads do the GETs and the hashing outside it. */
#include "data/remote.h"
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "dtrain/storage.h"

/* Block states beside shard_read.c's 0 unchecked (here: not resident), 1 good, 2 corrupt. */
enum { B_ABSENT = 0, B_GOOD = 1, B_BAD = 2, B_QUEUED = 3, B_FETCHING = 4, B_FAILED = 5 };
enum { MAX_SHARDS_Q = 1 << 16, PREFETCH_MAX = 4096, RING = 4, MAX_READERS = 128, PAGE = 4096 };
#define KEEP (1u << 30) /* pin of the record tables' blocks: never dropped */

typedef struct dt_remote_shard {
    dt_remote *r;
    char *key;
    uint64_t *last_use; /* [n_blocks] the cache's clock at the last use */
    uint32_t *pins;     /* [n_blocks] readers holding the block (+ KEEP) */
    uint8_t *unused;    /* [n_blocks] 1: fetched (or queued) ahead and not read yet */
    char err[512];      /* the message of a fetch that failed for good */
} dt_remote_shard;

typedef struct req {
    dt_shard *s;
    uint64_t k;
} req;

/* The blocks a reading thread holds: its last RING dt_remote_check calls. */
typedef struct reader {
    pthread_t tid;
    int used, pos;
    uint64_t tick; /* the cache's clock at its last call: the oldest entry is reused */
    struct {
        dt_shard *s;
        uint64_t k0, k1;
    } ring[RING];
} reader;

struct dt_remote {
    char *url;
    dt_store *store;
    dt_remote_opts o;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    req *q; /* ring buffer [MAX_SHARDS_Q]: demand fetches at the front, prefetches at the back */
    size_t q_head, q_len;
    pthread_t *th;
    int n_th, stop, down, opening;
    double down_since;
    int64_t resident; /* bytes of resident payload blocks */
    int64_t fetches, fetched_bytes;
    int64_t ahead_fetches; /* of the fetches, those of blocks queued ahead of the readers */
    int64_t pending;       /* blocks queued or being fetched */
    int64_t ahead_bytes;   /* resident blocks fetched ahead and not read yet */
    uint64_t clock;
    dt_shard **shards;
    int n_shards, cap_shards;
    reader readers[MAX_READERS];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dt_remote_is_url(const char *dir) {
    return dir && !strncmp(dir, "s3://", 5);
}

/* One ranged GET (or whole get when buf is NULL), retried while the store does not answer, for
 * up to wait_s; the first failure of an outage prints one line, the first success after it
 * another. Errors other than DT_ERR_IO (missing, short, access denied) are returned at once. */
static dt_status get_wait(dt_remote *r, const char *key, uint64_t off, size_t len, void *buf,
                          uint8_t **whole, size_t *whole_n, size_t max) {
    double t0 = now_s(), backoff = 0.1;
    for (;;) {
        dt_status st;
        if (buf) {
            st = dt_store_get_range(r->store, key, off, len, buf);
        } else {
            void *p = NULL;
            st = dt_store_get(r->store, key, &p, whole_n);
            if (st == DT_OK && *whole_n > max) {
                free(p);
                return dt_error_set(DT_ERR_FORMAT, "%s/%s: %zu bytes, more than the %zu allowed",
                                    r->url, key, *whole_n, max);
            }
            *whole = p;
        }
        if (st != DT_ERR_IO) {
            if (st == DT_OK) {
                pthread_mutex_lock(&r->mu);
                if (r->down) {
                    r->down = 0;
                    fprintf(stderr, "dtrain: data store %s answers again after %.1f s\n", r->url,
                            now_s() - r->down_since);
                }
                pthread_mutex_unlock(&r->mu);
            }
            return st;
        }
        double waited = now_s() - t0;
        if (waited >= r->o.wait_s) {
            char m[400], what[64] = "";
            snprintf(m, sizeof m, "%s", dt_last_error());
            if (buf) snprintf(what, sizeof what, " bytes %" PRIu64 "-%" PRIu64, off, off + len - 1);
            return dt_error_set(DT_ERR_IO,
                                "%s/%s:%s not read: the store did not answer for %.0f s "
                                "(data.store_wait_s): %s",
                                r->url, key, what, waited, m);
        }
        pthread_mutex_lock(&r->mu);
        int stop = r->stop;
        if (!r->down && !stop) {
            r->down = 1;
            r->down_since = now_s();
            fprintf(stderr,
                    "dtrain: data store %s does not answer (%s); training waits for it, up to "
                    "%.0f s (data.store_wait_s)\n",
                    r->url, dt_last_error(), r->o.wait_s);
        }
        pthread_mutex_unlock(&r->mu);
        if (stop) /* the dataset is being closed: no more waiting */
            return dt_error_set(DT_ERR_IO, "%s/%s: not read: the dataset was closed", r->url, key);
        dt_error_clear();
        double left = r->o.wait_s - waited;
        usleep((useconds_t)(1e6 * (backoff < left ? backoff : left)));
        backoff = backoff * 2 < 2.0 ? backoff * 2 : 2.0;
    }
}

dt_status dt_remote_get_meta(dt_remote *r, const char *key, size_t max, uint8_t **data, size_t *n) {
    return get_wait(r, key, 0, 0, NULL, data, n, max);
}

/* ---- the cache (r->mu held) ---- */

static void drop_block(dt_shard *s, uint64_t k) {
    uint64_t a = DT_SHARD_HEADER_BYTES + k * s->h.block_bytes, n = dt_shard_block_len(s, k);
    /* only the pages wholly inside the block: its first and last page may hold a neighbour's
     * bytes (blocks start at byte 256 + k MiB) */
    uint64_t lo = (a + PAGE - 1) / PAGE * PAGE, hi = (a + n) / PAGE * PAGE;
    if (hi > lo) madvise(s->map + lo, (size_t)(hi - lo), MADV_DONTNEED);
    atomic_store(&s->block_state[k], B_ABSENT);
    s->remote->r->resident -= (int64_t)n;
    if (s->remote->unused[k]) s->remote->unused[k] = 0, s->remote->r->ahead_bytes -= (int64_t)n;
}

/* Drops least recently used blocks no reader holds until the cache fits (or none is left):
 * blocks already read first, blocks fetched ahead and not read yet only when no other is left
 * (dropping those would fetch them twice). */
static void evict(dt_remote *r) {
    while (r->resident > r->o.cache_bytes && !r->opening) {
        dt_shard *best = NULL;
        uint64_t bk = 0, bt = UINT64_MAX;
        int bu = 2;
        for (int i = 0; i < r->n_shards; i++) {
            dt_shard *s = r->shards[i];
            dt_remote_shard *rs = s->remote;
            for (uint64_t k = 0; k < s->n_blocks; k++)
                if (!rs->pins[k] && atomic_load(&s->block_state[k]) == B_GOOD &&
                    (rs->unused[k] < bu || (rs->unused[k] == bu && rs->last_use[k] < bt)))
                    best = s, bk = k, bt = rs->last_use[k], bu = rs->unused[k];
        }
        if (!best) return;
        drop_block(best, bk);
    }
}

static int enqueue(dt_remote *r, dt_shard *s, uint64_t k, int front) {
    if (r->q_len >= MAX_SHARDS_Q || (!front && r->q_len >= PREFETCH_MAX)) return 0;
    if (front) {
        r->q_head = (r->q_head + MAX_SHARDS_Q - 1) % MAX_SHARDS_Q;
        r->q[r->q_head] = (req){s, k};
    } else {
        r->q[(r->q_head + r->q_len) % MAX_SHARDS_Q] = (req){s, k};
    }
    r->q_len++;
    r->pending++;
    s->remote->unused[k] = !front;
    atomic_store(&s->block_state[k], B_QUEUED);
    pthread_cond_signal(&r->cv_work);
    return 1;
}

/* A block queued ahead that a reader now waits for: moved to the front of the queue. */
static void promote(dt_remote *r, dt_shard *s, uint64_t k) {
    for (size_t i = 0; i < r->q_len; i++) {
        size_t at = (r->q_head + i) % MAX_SHARDS_Q;
        if (r->q[at].s != s || r->q[at].k != k) continue;
        for (; i > 0; i--, at = (at + MAX_SHARDS_Q - 1) % MAX_SHARDS_Q)
            r->q[at] = r->q[(at + MAX_SHARDS_Q - 1) % MAX_SHARDS_Q];
        r->q[r->q_head] = (req){s, k};
        return;
    }
}

static void *fetcher(void *arg) {
    dt_remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && !r->q_len) pthread_cond_wait(&r->cv_work, &r->mu);
        if (r->stop) break;
        req q = r->q[r->q_head];
        r->q_head = (r->q_head + 1) % MAX_SHARDS_Q, r->q_len--;
        dt_shard *s = q.s;
        dt_remote_shard *rs = s->remote;
        atomic_store(&s->block_state[q.k], B_FETCHING);
        pthread_mutex_unlock(&r->mu);
        uint64_t a = DT_SHARD_HEADER_BYTES + q.k * s->h.block_bytes, n = dt_shard_block_len(s, q.k);
        dt_status st = get_wait(r, rs->key, a, (size_t)n, s->map + a, NULL, NULL, 0);
        int good = st == DT_OK && dt_shard_block_good(s, q.k);
        pthread_mutex_lock(&r->mu);
        r->pending--;
        if (st != DT_OK) {
            snprintf(rs->err, sizeof rs->err, "%s", dt_last_error());
            atomic_store(&s->block_state[q.k], B_FAILED);
            rs->unused[q.k] = 0;
        } else {
            if (rs->unused[q.k]) r->ahead_bytes += (int64_t)n, r->ahead_fetches++;
            atomic_store(&s->block_state[q.k], good ? B_GOOD : B_BAD);
            if (!good) atomic_fetch_add(&s->bad_blocks, 1);
            rs->last_use[q.k] = ++r->clock;
            r->resident += (int64_t)n;
            r->fetches++, r->fetched_bytes += (int64_t)n;
            evict(r);
        }
        pthread_cond_broadcast(&r->cv_done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The calling thread's reader entry: holds [k0, k1] of s, lets go of its oldest hold. */
static void hold(dt_remote *r, dt_shard *s, uint64_t k0, uint64_t k1) {
    pthread_t me = pthread_self();
    reader *rd = NULL, *oldest = &r->readers[0];
    for (int i = 0; i < MAX_READERS && !rd; i++) {
        reader *x = &r->readers[i];
        if (x->used && pthread_equal(x->tid, me)) rd = x;
        if (!x->used ? oldest->used : x->tick < oldest->tick) oldest = x;
    }
    if (!rd) {
        /* a new thread: a free entry, or the one unused longest (threads that ended -- the
         * loader's after a seek -- leave theirs; more than MAX_READERS threads never read at
         * once), whose holds are let go */
        rd = oldest;
        for (int j = 0; rd->used && j < RING; j++)
            for (uint64_t k = rd->ring[j].k0; rd->ring[j].s && k <= rd->ring[j].k1; k++)
                rd->ring[j].s->remote->pins[k]--;
        memset(rd, 0, sizeof *rd);
        rd->used = 1, rd->tid = me;
    }
    rd->tick = r->clock;
    dt_shard *old = rd->ring[rd->pos].s;
    for (uint64_t k = rd->ring[rd->pos].k0; old && k <= rd->ring[rd->pos].k1; k++)
        old->remote->pins[k]--;
    rd->ring[rd->pos].s = s, rd->ring[rd->pos].k0 = k0, rd->ring[rd->pos].k1 = k1;
    rd->pos = (rd->pos + 1) % RING;
    for (uint64_t k = k0; k <= k1; k++) s->remote->pins[k]++;
}

static dt_status block_range(const dt_shard *s, uint64_t off, uint64_t len, uint64_t *k0,
                             uint64_t *k1) {
    uint64_t B = s->h.block_bytes, end = s->h.blocks_offset;
    if (off < DT_SHARD_HEADER_BYTES || off >= end || len > end - off)
        return dt_error_set(DT_ERR_RANGE, "%s: bytes %" PRIu64 "+%" PRIu64 " outside the payload",
                            s->path, off, len);
    *k0 = (off - DT_SHARD_HEADER_BYTES) / B;
    *k1 = (off + len - 1 - DT_SHARD_HEADER_BYTES) / B;
    return DT_OK;
}

dt_status dt_remote_check(dt_shard *s, uint64_t off, uint64_t len) {
    uint64_t k0, k1;
    dt_status st = block_range(s, off, len, &k0, &k1);
    if (st) return st;
    dt_remote_shard *rs = s->remote;
    dt_remote *r = rs->r;
    pthread_mutex_lock(&r->mu);
    hold(r, s, k0, k1);
    for (uint64_t k = k0; k <= k1; k++) {
        uint8_t b = atomic_load(&s->block_state[k]);
        if (b == B_ABSENT) enqueue(r, s, k, 1);
        if (b == B_QUEUED) promote(r, s, k);
    }
    for (uint64_t k = k0; k <= k1 && !st; k++) {
        uint8_t b;
        while ((b = atomic_load(&s->block_state[k])) == B_QUEUED || b == B_FETCHING)
            pthread_cond_wait(&r->cv_done, &r->mu);
        if (b == B_ABSENT) { /* the queue was full: fetched again */
            k--;
            enqueue(r, s, k + 1, 1);
            continue;
        }
        rs->last_use[k] = ++r->clock;
        if (rs->unused[k]) {
            rs->unused[k] = 0;
            if (b == B_GOOD || b == B_BAD) r->ahead_bytes -= (int64_t)dt_shard_block_len(s, k);
        }
        if (b == B_BAD) st = dt_shard_block_error(s, k);
        if (b == B_FAILED) st = dt_error_set(DT_ERR_IO, "%s", rs->err);
    }
    pthread_mutex_unlock(&r->mu);
    return st;
}

void dt_remote_prefetch(dt_shard *s, uint64_t off, uint64_t len) {
    uint64_t k0, k1;
    if (!s->remote || !len || block_range(s, off, len, &k0, &k1)) {
        dt_error_clear();
        return;
    }
    dt_remote *r = s->remote->r;
    pthread_mutex_lock(&r->mu);
    /* at most 3/4 of the cache fetched ahead (resident unread or in flight), so that blocks
     * fetched ahead are not dropped before they are read */
    int64_t B = s->h.block_bytes;
    for (uint64_t k = k0; k <= k1; k++)
        if (atomic_load(&s->block_state[k]) == B_ABSENT &&
            (r->ahead_bytes + (r->pending + 1) * B > r->o.cache_bytes / 4 * 3 ||
             !enqueue(r, s, k, 0)))
            break;
    pthread_mutex_unlock(&r->mu);
}

/* ---- open / close ---- */

dt_status dt_remote_open(const char *url, const dt_remote_opts *o, dt_remote **out) {
    *out = NULL;
    dt_remote *r = calloc(1, sizeof *r);
    if (!r) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    r->o = *o;
    if (r->o.threads < 1) r->o.threads = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv_work, NULL);
    pthread_cond_init(&r->cv_done, NULL);
    r->url = strdup(url);
    r->q = malloc(MAX_SHARDS_Q * sizeof *r->q);
    r->th = calloc((size_t)r->o.threads, sizeof *r->th);
    size_t ul = r->url ? strlen(r->url) : 0;
    while (ul > 5 && r->url[ul - 1] == '/') r->url[--ul] = 0;
    if (!r->url || !r->q || !r->th) {
        dt_remote_close(r);
        return dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    /* few retries inside the store: get_wait retries for as long as data.store_wait_s says */
    dt_store_opts so = dt_store_opts_default();
    so.max_retries = 1;
    so.retry_base_s = 0.1;
    so.timeout_s = 20;
    dt_status st = dt_store_open(r->url, &so, &r->store);
    if (st) {
        dt_remote_close(r);
        return st;
    }
    for (; r->n_th < r->o.threads; r->n_th++)
        if (pthread_create(&r->th[r->n_th], NULL, fetcher, r) != 0) {
            dt_remote_close(r);
            return dt_error_set(DT_ERR_INTERNAL, "%s: cannot start a fetch thread", url);
        }
    *out = r;
    return DT_OK;
}

void dt_remote_close(dt_remote *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv_work);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->n_th; i++) pthread_join(r->th[i], NULL);
    for (int i = 0; i < r->n_shards; i++) r->shards[i]->remote->r = NULL;
    if (r->store) dt_store_close(r->store);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_work);
    pthread_cond_destroy(&r->cv_done);
    free(r->shards);
    free(r->th);
    free(r->q);
    free(r->url);
    free(r);
}

/* Fetches file bytes [a, b) into the mapping at once (header, block table). */
static dt_status fetch_now(dt_remote *r, dt_shard *s, const char *key, uint64_t a, uint64_t b) {
    return get_wait(r, key, a, (size_t)(b - a), s->map + a, NULL, NULL, 0);
}

dt_status dt_remote_shard_open(dt_remote *r, const char *file, uint64_t bytes, dt_shard *s) {
    memset(s, 0, sizeof *s);
    size_t ul = strlen(r->url) + strlen(file) + 2;
    s->path = malloc(ul);
    dt_remote_shard *rs = calloc(1, sizeof *rs);
    if (!s->path || !rs || !(rs->key = strdup(file))) {
        free(s->path), free(rs ? rs->key : NULL), free(rs);
        s->path = NULL;
        return dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    snprintf(s->path, ul, "%s/%s", r->url, file);
    rs->r = r;
    s->remote = rs;
    size_t have = 0;
    dt_status st = dt_store_stat(r->store, file, &have);
    if (st == DT_OK && have != bytes)
        st = dt_error_set(DT_ERR_FORMAT, "%s: the object has %zu bytes, the manifest says %" PRIu64,
                          s->path, have, bytes);
    if (st == DT_OK && bytes < DT_SHARD_HEADER_BYTES)
        st =
            dt_error_set(DT_ERR_FORMAT, "%s: truncated: %" PRIu64 " bytes, a shard header needs %u",
                         s->path, bytes, DT_SHARD_HEADER_BYTES);
    if (st == DT_OK) {
        /* anonymous and not reserved: only the fetched blocks take memory */
        void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            st = dt_error_set(DT_ERR_NOMEM, "%s: cannot map %" PRIu64 " bytes", s->path, bytes);
        else
            s->map = m, s->size = (size_t)bytes;
    }
    dt_shard_header h;
    if (st == DT_OK) st = fetch_now(r, s, file, 0, DT_SHARD_HEADER_BYTES);
    if (st == DT_OK) st = dt_shard_header_decode(s->path, s->map, s->size, &h);
    if (st == DT_OK && h.version < 2)
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: a version 1 shard has no block checksums to stream with: "
                          "re-import the data",
                          s->path);
    uint32_t B = h.block_bytes;
    if (st == DT_OK && (B < 4096 || B > (1u << 30) || (B & (B - 1)) ||
                        h.blocks_offset < DT_SHARD_HEADER_BYTES || h.blocks_offset > bytes))
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: block size %u (byte 216) or table offset %" PRIu64
                          " (byte 208) out of range",
                          s->path, B, h.blocks_offset);
    uint64_t nb = st ? 0 : (h.blocks_offset - DT_SHARD_HEADER_BYTES + B - 1) / B;
    if (st == DT_OK) {
        rs->last_use = calloc((size_t)nb + 1, sizeof *rs->last_use);
        rs->pins = calloc((size_t)nb + 1, sizeof *rs->pins);
        rs->unused = calloc((size_t)nb + 1, 1);
        if (!rs->last_use || !rs->pins || !rs->unused)
            st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    if (st == DT_OK) st = fetch_now(r, s, file, h.blocks_offset, bytes);
    pthread_mutex_lock(&r->mu);
    if (st == DT_OK && r->n_shards == r->cap_shards) {
        int cap = r->cap_shards ? 2 * r->cap_shards : 16;
        dt_shard **p = realloc(r->shards, (size_t)cap * sizeof *p);
        if (!p)
            st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        else
            r->shards = p, r->cap_shards = cap;
    }
    r->opening++; /* nothing is dropped while the record tables are read */
    pthread_mutex_unlock(&r->mu);
    if (st) {
        pthread_mutex_lock(&r->mu);
        r->opening--;
        pthread_mutex_unlock(&r->mu);
        dt_shard_close(s);
        return st;
    }
    /* the record tables' blocks are fetched through dt_shard_check by the checks */
    st = dt_shard_validate(s, 0); /* closes s on error */
    pthread_mutex_lock(&r->mu);
    r->opening--;
    if (st == DT_OK) {
        for (uint32_t i = 0; i < s->h.n_sections; i++) {
            uint32_t id = s->h.sec[i].id;
            uint64_t k0, k1;
            if ((id == DT_SEC_LABELS || id == DT_SEC_OFFSETS || id == DT_SEC_IMGINFO) &&
                s->h.sec[i].bytes &&
                block_range(s, s->h.sec[i].offset, s->h.sec[i].bytes, &k0, &k1) == DT_OK)
                for (uint64_t k = k0; k <= k1; k++) rs->pins[k] |= KEEP;
        }
        r->shards[r->n_shards++] = s;
        evict(r);
    }
    pthread_mutex_unlock(&r->mu);
    return st;
}

void dt_remote_fetched(dt_remote *r, int64_t *blocks, int64_t *bytes, int64_t *ahead) {
    pthread_mutex_lock(&r->mu);
    *blocks = r->fetches, *bytes = r->fetched_bytes;
    if (ahead) *ahead = r->ahead_fetches;
    pthread_mutex_unlock(&r->mu);
}

void dt_remote_shard_free(dt_shard *s) {
    dt_remote_shard *rs = s->remote;
    free(rs->key);
    free(rs->last_use);
    free(rs->pins);
    free(rs->unused);
    free(rs);
    s->remote = NULL;
}
