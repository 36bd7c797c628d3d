/* Checkpoint directories on a store: listing, verification, choosing the newest good one,
 * retention (see include/dtrain/checkpoint.h). */
#include <cjson/cJSON.h>
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

dt_status dt_ckpt_read_state(dt_store *s, const char *dir, char **json) {
    char key[1200];
    snprintf(key, sizeof key, "%s/%s", dir, DT_CKPT_STATE);
    void *data;
    size_t n;
    *json = NULL;
    dt_status st = dt_store_get(s, key, &data, &n);
    if (st != DT_OK) return st;
    char *txt = realloc(data, n + 1);
    if (!txt) {
        free(data);
        return dt_error_set(DT_ERR_NOMEM, "checkpoint: %s: out of memory", key);
    }
    txt[n] = 0;
    *json = txt;
    return DT_OK;
}

static double read_metric(dt_store *s, const char *dir, const char *metric) {
    char *txt;
    if (dt_ckpt_read_state(s, dir, &txt) != DT_OK) return NAN;
    cJSON *o = cJSON_Parse(txt);
    free(txt);
    cJSON *m =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metrics"), metric);
    double v = cJSON_IsNumber(m) ? m->valuedouble : NAN;
    cJSON_Delete(o);
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

/* One listed file: its size (a stat at DT_CKPT_SIZES; the whole file at DT_CKPT_CHECKSUMS, and
 * its xxh3). *n: its size. */
static dt_status check_file(dt_store *s, const char *dir, const cJSON *f, dt_ckpt_level level,
                            size_t *n) {
    cJSON *jb = cJSON_GetObjectItemCaseSensitive(f, "bytes");
    cJSON *jh = cJSON_GetObjectItemCaseSensitive(f, "xxh3");
    if (!cJSON_IsNumber(jb) || !cJSON_IsString(jh) || strchr(f->string, '/') || !f->string[0])
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s/%s: bad entry for '%s'", dir,
                            DT_CKPT_STATE, f->string);
    char key[1400], hex[17] = "";
    snprintf(key, sizeof key, "%s/%s", dir, f->string);
    dt_status st;
    if (level == DT_CKPT_SIZES) {
        st = dt_store_stat(s, key, n);
    } else {
        void *data;
        if ((st = dt_store_get(s, key, &data, n)) == DT_OK) {
            snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)XXH3_64bits(data, *n));
            free(data);
        }
    }
    if (st == DT_ERR_NOTFOUND)
        return dt_error_set(st, "checkpoint %s: file %s is missing", dir, f->string);
    if (st != DT_OK) return st;
    if ((double)*n != jb->valuedouble)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: file %s has %zu bytes, expected %.0f "
                            "(truncated or replaced)",
                            dir, f->string, *n, jb->valuedouble);
    if (level != DT_CKPT_SIZES && strcmp(hex, jh->valuestring) != 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "checkpoint %s: file %s: checksum xxh3 %s, expected %s (corrupt)", dir,
                            f->string, hex, jh->valuestring);
    return DT_OK;
}

dt_status dt_ckpt_check(dt_store *s, const char *dir, dt_ckpt_level level, int64_t *bytes) {
    char *txt;
    if (bytes) *bytes = 0;
    dt_status st = dt_ckpt_read_state(s, dir, &txt);
    if (st == DT_ERR_NOTFOUND)
        return dt_error_set(st, "checkpoint %s: no %s (not committed: the save did not finish)",
                            dir, DT_CKPT_STATE);
    if (st != DT_OK) return st;
    cJSON *o = cJSON_Parse(txt);
    free(txt);
    cJSON *files = cJSON_GetObjectItemCaseSensitive(o, "files");
    if (!cJSON_IsObject(files) || !cJSON_GetArraySize(files)) {
        cJSON_Delete(o);
        return dt_error_set(DT_ERR_FORMAT, "checkpoint %s/%s: not valid JSON or no \"files\"", dir,
                            DT_CKPT_STATE);
    }
    cJSON *f;
    cJSON_ArrayForEach(f, files) {
        size_t n;
        if ((st = check_file(s, dir, f, level, &n)) != DT_OK) break;
        if (bytes) *bytes += (int64_t)n;
    }
    cJSON_Delete(o);
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
                         int keep_best, const char *metric, const char *mode, FILE *log) {
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
        if (st == DT_OK && log)
            fprintf(log, "checkpoint %s removed (newer than the run's current step %lld)\n",
                    v[i].dir, (long long)current);
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
        if (st == DT_OK && log)
            fprintf(log, "checkpoint %s removed (%s)\n", v[i].dir,
                    v[i].committed ? "retention" : "incomplete save");
    }
    (void)committed;
    free(keep), free(v);
    return st;
}
