/* Checkpoint directories on a store: listing, verification, choosing the newest good one,
 * retention (see include/dtrain/checkpoint.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "dtrain/checkpoint.h"

static int cmp_step(const void *a, const void *b) {
    const dt_ckpt_info *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

/* trainer_state.json is a few KB (the parameter layout: ~100 bytes a tensor); a larger one is
 * refused before it is read whole. */
#define MAX_STATE_BYTES ((size_t)64 << 20)

typedef struct text_buf {
    char *p;
    size_t n, cap;
} text_buf;

static dt_status text_chunk(void *ud, size_t off, const void *p, size_t n) {
    text_buf *b = ud;
    (void)off;
    if (b->n + n + 1 > b->cap) { /* grows with what arrived, never by a size claimed */
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return DT_OK;
}

dt_status dt_ckpt_read_state(dt_store *s, const char *dir, char **json) {
    char key[1200];
    snprintf(key, sizeof key, "%s/%s", dir, DT_CKPT_STATE);
    *json = NULL;
    text_buf b = {0};
    size_t n = 0;
    dt_status st = dt_store_get_stream(s, key, MAX_STATE_BYTES, text_chunk, &b, &n);
    if (st == DT_ERR_RANGE)
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: more than %zu bytes, the limit of a %s",
                          key, MAX_STATE_BYTES, DT_CKPT_STATE);
    if (st == DT_OK && !b.p && !(b.p = malloc(1)))
        st = dt_error_set(DT_ERR_NOMEM, "checkpoint: %s: out of memory", key);
    if (st != DT_OK) {
        free(b.p);
        return st;
    }
    b.p[b.n] = 0;
    *json = b.p;
    return DT_OK;
}

static double read_metric(dt_store *s, const char *dir, const char *metric) {
    dt_ckpt_state st;
    if (dt_ckpt_state_load(s, dir, &st) != DT_OK) return NAN;
    double v = dt_ckpt_state_metric(&st, metric);
    dt_ckpt_state_free(&st);
    return v;
}

dt_status dt_ckpt_list(dt_store *s, const char *root, const char *metric, dt_ckpt_info **out,
                       int *n) {
    *out = NULL, *n = 0;
    char prefix[1100];
    snprintf(prefix, sizeof prefix, "%s/", root);
    char **keys;
    int nk;
    dt_status st = dt_store_list(s, prefix, &keys, &nk);
    if (st != DT_OK) return st;
    dt_ckpt_info *v = calloc((size_t)nk + 1, sizeof *v);
    if (!v) {
        dt_store_list_free(keys, nk);
        return dt_error_set(DT_ERR_NOMEM, "checkpoint list: out of memory");
    }
    int cnt = 0;
    size_t pl = strlen(prefix);
    for (int i = 0; i < nk; i++) {
        const char *rel = keys[i] + pl; /* "step-000000100/model.safetensors" */
        long long step;
        int len = 0;
        if (sscanf(rel, "step-%lld%n", &step, &len) != 1 || rel[len] != '/') continue;
        char dir[1100];
        snprintf(dir, sizeof dir, "%.*s", (int)(pl + (size_t)len), keys[i]);
        dt_ckpt_info *c = cnt ? &v[cnt - 1] : NULL;
        if (!c || strcmp(c->dir, dir) != 0) {
            c = &v[cnt++];
            snprintf(c->dir, sizeof c->dir, "%s", dir);
            c->step = step;
            c->metric = NAN;
        }
        if (!strcmp(rel + len + 1, DT_CKPT_STATE)) c->committed = 1;
        size_t b = 0;
        if (dt_store_stat(s, keys[i], &b) == DT_OK) c->bytes += (int64_t)b;
    }
    dt_store_list_free(keys, nk);
    qsort(v, (size_t)cnt, sizeof *v, cmp_step);
    for (int i = 0; metric && i < cnt; i++)
        if (v[i].committed) v[i].metric = read_metric(s, v[i].dir, metric);
    *out = v, *n = cnt;
    return DT_OK;
}

static dt_status hash_chunk(void *ud, size_t off, const void *p, size_t n) {
    (void)off;
    return XXH3_64bits_update(ud, p, n) == XXH_OK
               ? DT_OK
               : dt_error_set(DT_ERR_INTERNAL, "checkpoint: xxh3 update failed");
}

/* One listed file (its name and size checked by the decoder): its size (a stat at DT_CKPT_SIZES;
 * at DT_CKPT_CHECKSUMS the file streamed through xxh3, never more than the size listed, and
 * never held in memory whole). */
static dt_status check_file(dt_store *s, const char *dir, const dt_ckpt_file_entry *f,
                            dt_ckpt_level level, size_t *n) {
    size_t want = (size_t)f->bytes;
    char key[1400];
    snprintf(key, sizeof key, "%s/%s", dir, f->name);
    uint64_t hash = 0;
    dt_status st;
    *n = 0;
    if (level == DT_CKPT_SIZES) {
        st = dt_store_stat(s, key, n);
    } else {
        XXH3_state_t *h = XXH3_createState();
        if (!h || XXH3_64bits_reset(h) != XXH_OK) {
            XXH3_freeState(h);
            return dt_error_set(DT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
        }
        st = dt_store_get_stream(s, key, want, hash_chunk, h, n);
        hash = XXH3_64bits_digest(h);
        XXH3_freeState(h);
        if (st == DT_ERR_RANGE)
            return dt_error_set(DT_ERR_FORMAT,
                                "checkpoint %s: file %s is longer than the %zu bytes listed "
                                "(replaced)",
                                dir, f->name, want);
    }
    if (st == DT_ERR_NOTFOUND)
        return dt_error_set(st, "checkpoint %s: file %s is missing", dir, f->name);
    if (st != DT_OK) return st;
    if (*n != want)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: file %s has %zu bytes, expected %zu "
                            "(truncated or replaced)",
                            dir, f->name, *n, want);
    if (level != DT_CKPT_SIZES && hash != f->xxh3)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: file %s: checksum xxh3 %016" PRIx64
                            ", expected %016" PRIx64 " (corrupt)",
                            dir, f->name, hash, f->xxh3);
    return DT_OK;
}

dt_status dt_ckpt_check(dt_store *s, const char *dir, dt_ckpt_level level, int64_t *bytes) {
    if (bytes) *bytes = 0;
    dt_ckpt_state cs;
    dt_status st = dt_ckpt_state_load(s, dir, &cs);
    if (st == DT_ERR_NOTFOUND)
        return dt_error_set(st, "checkpoint %s: no %s (not committed: the save did not finish)",
                            dir, DT_CKPT_STATE);
    if (st != DT_OK) return st;
    if (!cs.n_files) {
        dt_ckpt_state_free(&cs);
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s/%s: lists no \"files\"", dir,
                            DT_CKPT_STATE);
    }
    for (int i = 0; i < cs.n_files && st == DT_OK; i++) {
        size_t n;
        st = check_file(s, dir, &cs.files[i], level, &n);
        if (bytes) *bytes += (int64_t)n;
    }
    dt_ckpt_state_free(&cs);
    return st;
}

dt_status dt_ckpt_verify(dt_store *s, const char *dir, int64_t *bytes) {
    return dt_ckpt_check(s, dir, DT_CKPT_CHECKSUMS, bytes);
}

dt_status dt_ckpt_find_before(dt_store *s, const char *root, int64_t before, dt_ckpt_level level,
                              FILE *log, dt_ckpt_info *out) {
    dt_ckpt_info *v;
    int n;
    dt_status st = dt_ckpt_list(s, root, NULL, &v, &n);
    if (st != DT_OK) return st;
    for (int i = n - 1; i >= 0; i--) {
        if (v[i].step >= before) continue;
        if (!v[i].committed) { /* a save that did not finish: not a checkpoint */
            if (log)
                fprintf(log, "warning: skipping %s: no %s (a save that did not finish)\n", v[i].dir,
                        DT_CKPT_STATE);
            continue;
        }
        int64_t b;
        dt_status vs = dt_ckpt_check(s, v[i].dir, level, &b);
        if (vs == DT_ERR_IO || vs == DT_ERR_STATE || vs == DT_ERR_NOMEM) {
            /* the store failed, not the checkpoint: falling back to an older one would
             * silently lose progress */
            free(v);
            return vs;
        }
        if (vs == DT_OK) {
            *out = v[i];
            out->verified = level == DT_CKPT_CHECKSUMS, out->bytes = b;
            free(v);
            return DT_OK;
        }
        if (log) fprintf(log, "warning: skipping a bad checkpoint: %s\n", dt_last_error());
    }
    free(v);
    return dt_error_set(DT_ERR_NOTFOUND, "checkpoint: no good checkpoint under %s/%s",
                        dt_store_url(s), root);
}

dt_status dt_ckpt_find_latest(dt_store *s, const char *root, FILE *log, dt_ckpt_info *out) {
    return dt_ckpt_find_before(s, root, INT64_MAX, DT_CKPT_CHECKSUMS, log, out);
}

/* Removes a checkpoint directory: trainer_state.json first. */
static dt_status remove_dir(dt_store *s, const char *dir) {
    char key[1200];
    snprintf(key, sizeof key, "%s/%s", dir, DT_CKPT_STATE);
    dt_status st = dt_store_delete(s, key);
    if (st != DT_OK) return st;
    char prefix[1200], **keys;
    int nk;
    snprintf(prefix, sizeof prefix, "%s/", dir);
    if ((st = dt_store_list(s, prefix, &keys, &nk)) != DT_OK) return st;
    for (int i = 0; i < nk && st == DT_OK; i++) st = dt_store_delete(s, keys[i]);
    dt_store_list_free(keys, nk);
    return st;
}

dt_status dt_ckpt_retain(dt_store *s, const char *root, int64_t current, int keep_last,
                         int keep_best, const char *metric, const char *mode,
                         dt_ckpt_removed_fn removed, void *ud) {
    dt_ckpt_info *v;
    int n;
    dt_status st = dt_ckpt_list(s, root, keep_best > 0 ? metric : NULL, &v, &n);
    if (st != DT_OK) return st;
    /* Directories newer than the checkpoint just committed belong to an abandoned timeline (a
     * corrupt checkpoint skipped at resume, a run restarted with resume=never): they go, and
     * the current one counts as the newest. */
    for (int i = 0; current >= 0 && i < n && st == DT_OK; i++) {
        if (v[i].step <= current) continue;
        st = remove_dir(s, v[i].dir);
        if (st == DT_OK && removed)
            removed(ud, v[i].dir, v[i].step, "newer than the run's current step");
        v[i].committed = 0, v[i].step = -1; /* gone */
    }
    if (st != DT_OK) {
        free(v);
        return st;
    }
    int newest = -1, committed = 0;
    for (int i = 0; i < n; i++)
        if (v[i].committed) newest = i, committed++;
    char *keep = calloc((size_t)n + 1, 1);
    if (!keep) {
        free(v);
        return dt_error_set(DT_ERR_NOMEM, "checkpoint retention: out of memory");
    }
    /* the newest keep_last committed ones (all when 0), and always the newest */
    int seen = 0;
    for (int i = n - 1; i >= 0; i--)
        if (v[i].committed && (keep_last <= 0 || seen++ < keep_last)) keep[i] = 1;
    if (newest >= 0) keep[newest] = 1;
    /* the best keep_best by metric */
    int want_max = mode && !strcmp(mode, "max");
    for (int k = 0; k < keep_best; k++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (!v[i].committed || isnan(v[i].metric) || keep[i] == 2) continue;
            if (best < 0 ||
                (want_max ? v[i].metric > v[best].metric : v[i].metric < v[best].metric))
                best = i;
        }
        if (best < 0) break;
        keep[best] = 2; /* 2: kept as one of the best (not counted again) */
    }
    for (int i = 0; i < n && st == DT_OK; i++) {
        if (keep[i] || v[i].step < 0) continue;
        /* uncommitted: only directories older than the newest commit (failed saves); a newer
         * one may be a save in flight */
        if (!v[i].committed && (newest < 0 || v[i].step > v[newest].step)) continue;
        st = remove_dir(s, v[i].dir);
        if (st == DT_OK && removed)
            removed(ud, v[i].dir, v[i].step, v[i].committed ? "retention" : "incomplete save");
    }
    (void)committed;
    free(keep), free(v);
    return st;
}
