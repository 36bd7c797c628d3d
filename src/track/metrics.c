/* Metrics and artifacts: buffered in memory, written by a background thread in one transaction
 * every every_n rows or every_s seconds. dt_track_metric and dt_track_artifact only append under
 * a mutex (no I/O), so neither a training step nor the checkpoint writer ever waits for the disk
 * or for another writer's lock. Two buffers swap: callers fill one while the thread writes the
 * other. One batch is written at a time (`writing`), so after dt_track_flush returns every
 * earlier row is committed. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "track/track_impl.h"

/* More unwritten rows than this means the store is not keeping up: an error, not unbounded
 * memory. */
#define MAX_ROWS (1u << 20)

void dt_track_set_flush(dt_track *s, int every_n, double every_s) {
    pthread_mutex_lock(&s->mu);
    s->every_n = every_n > 0 ? every_n : 1;
    s->every_s = every_s > 0 ? every_s : 0.001;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

typedef struct batch {
    const trk_metric *rows;
    size_t n;
} batch;

static dt_status write_batch(dt_track *s, void *ud) {
    const batch *b = ud;
    sqlite3_stmt *q[2] = {NULL, NULL};
    /* attempt 0: the run's attempt now (a run begun by another handle) */
    dt_status st = dt_trk_prepare(
        s,
        "INSERT INTO metrics(run_id, key, step, wall, value, attempt) VALUES(?1, ?2, ?3, ?4, ?5,"
        " COALESCE(NULLIF(?6, 0), (SELECT attempts FROM runs WHERE id = ?1), 1))",
        &q[0]);
    if (st == DT_OK)
        st = dt_trk_prepare(s,
                            "INSERT INTO artifacts(run_id, kind, step, created, metrics, attempt,"
                            " uri) VALUES(?1, ?2, ?3, ?4, ?5, COALESCE(NULLIF(?6, 0),"
                            " (SELECT attempts FROM runs WHERE id = ?1), 1), ?7)",
                            &q[1]);
    for (size_t i = 0; st == DT_OK && i < b->n; i++) {
        const trk_metric *m = &b->rows[i];
        sqlite3_stmt *x = q[m->uri != NULL];
        sqlite3_reset(x);
        sqlite3_bind_int64(x, 1, m->run);
        sqlite3_bind_text(x, 2, m->key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(x, 3, m->step);
        sqlite3_bind_double(x, 4, m->wall);
        if (m->uri) {
            dt_trk_bind_text(x, 5, m->metrics);
            sqlite3_bind_text(x, 7, m->uri, -1, SQLITE_STATIC);
        } else {
            sqlite3_bind_double(x, 5, m->value); /* NaN is stored as NULL */
        }
        sqlite3_bind_int(x, 6, m->attempt);
        if (sqlite3_step(x) != SQLITE_DONE)
            st = dt_trk_fail(s, m->uri ? "cannot write an artifact" : "cannot write metrics");
    }
    sqlite3_finalize(q[0]), sqlite3_finalize(q[1]);
    return st;
}

/* Takes the buffer and writes it; called with s->mu held, returns with it held. */
static dt_status flush_locked(dt_track *s) {
    while (s->writing) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->n) return s->err;
    trk_metric *rows = s->rows;
    size_t n = s->n, cap = s->cap;
    s->rows = s->spare, s->cap = s->spare_cap, s->n = 0;
    s->spare = NULL, s->spare_cap = 0;
    s->writing = 1;
    dt_status st = s->err;
    if (st == DT_OK) { /* after a failure rows are dropped */
        pthread_mutex_unlock(&s->mu);
        batch b = {rows, n};
        st = dt_trk_tx(s, "cannot write metrics", write_batch, &b);
        pthread_mutex_lock(&s->mu);
        if (st != DT_OK && s->err == DT_OK) {
            s->err = st;
            snprintf(s->err_msg, sizeof s->err_msg, "%s", dt_last_error());
        }
    }
    for (size_t i = 0; i < n; i++) free(rows[i].uri), free(rows[i].metrics);
    if (!s->spare) {
        s->spare = rows, s->spare_cap = cap;
    } else {
        free(rows);
    }
    s->writing = 0;
    pthread_cond_broadcast(&s->cv);
    return s->err;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The deadline is recomputed on every wake-up, so dt_track_set_flush applies at once. */
static void *writer_main(void *arg) {
    dt_track *s = arg;
    pthread_mutex_lock(&s->mu);
    double last = now_s();
    for (;;) {
        while (!s->quit && s->n < (size_t)s->every_n) {
            double at = last + s->every_s;
            if (now_s() >= at) break;
            struct timespec dl = {.tv_sec = (time_t)at};
            dl.tv_nsec = (long)((at - (double)dl.tv_sec) * 1e9);
            pthread_cond_timedwait(&s->cv, &s->mu, &dl);
        }
        flush_locked(s);
        last = now_s();
        if (s->quit && !s->n) break;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Appends a row (its uri and metrics are owned by the buffer from here, or freed). */
static dt_status append(dt_track *s, trk_metric *row) {
    pthread_mutex_lock(&s->mu);
    dt_status st = s->err;
    if (st != DT_OK) {
        dt_error_set(st, "%s", s->err_msg);
    } else if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        trk_metric *r = cap <= MAX_ROWS ? realloc(s->rows, cap * sizeof *r) : NULL;
        if (!r)
            st = dt_error_set(DT_ERR_NOMEM,
                              "%s: %zu values not yet written (the store is not keeping up)",
                              s->path, s->n);
        else
            s->rows = r, s->cap = cap;
    }
    if (st == DT_OK && !s->have_th) {
        if (pthread_create(&s->th, NULL, writer_main, s) != 0)
            st = dt_error_set(DT_ERR_STATE, "%s: cannot start the metric writer thread", s->path);
        else
            s->have_th = 1;
    }
    if (st == DT_OK) {
        for (int i = 0; i < s->n_begun; i++)
            if (s->begun_run[i] == row->run) row->attempt = s->begun_attempt[i];
        s->rows[s->n++] = *row;
        if (s->n >= (size_t)s->every_n) pthread_cond_broadcast(&s->cv);
    } else {
        free(row->uri), free(row->metrics);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

dt_status dt_track_metric(dt_track *s, int64_t run_id, const char *key, int64_t step, double wall,
                          double value) {
    if (!s || !key || !key[0] || strlen(key) >= DT_TRK_KEY_MAX)
        return dt_error_set(DT_ERR_INVALID, "track metric: key '%s' is empty or longer than %d",
                            key ? key : "", DT_TRK_KEY_MAX - 1);
    trk_metric m = {.run = run_id, .step = step, .wall = wall, .value = value};
    snprintf(m.key, sizeof m.key, "%s", key);
    return append(s, &m);
}

dt_status dt_track_artifact(dt_track *s, int64_t run_id, const char *kind, const char *uri,
                            int64_t step, const char *metrics_json) {
    if (!s || !kind || !kind[0] || strlen(kind) >= DT_TRK_KEY_MAX || !uri)
        return dt_error_set(DT_ERR_INVALID, "track artifact: kind and uri must be given");
    int has = metrics_json && metrics_json[0];
    if (has) {
        cJSON *j = cJSON_Parse(metrics_json);
        int ok = cJSON_IsObject(j);
        cJSON_Delete(j);
        if (!ok)
            return dt_error_set(DT_ERR_INVALID, "track artifact %s: metrics are not a JSON object",
                                uri);
    }
    trk_metric m = {.run = run_id, .step = step, .wall = dt_track_wall()};
    snprintf(m.key, sizeof m.key, "%s", kind);
    m.uri = strdup(uri);
    m.metrics = has ? strdup(metrics_json) : NULL;
    if (!m.uri || (has && !m.metrics)) {
        free(m.uri), free(m.metrics);
        return dt_error_set(DT_ERR_NOMEM, "track artifact %s: out of memory", uri);
    }
    return append(s, &m);
}

dt_status dt_track_artifact_removed(dt_track *s, int64_t run_id, const char *uri, int64_t step,
                                    const char *why) {
    char m[300];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "reason", why ? why : "");
    int ok = o && cJSON_PrintPreallocated(o, m, sizeof m, 0);
    cJSON_Delete(o);
    if (!ok) return dt_error_set(DT_ERR_INVALID, "track artifact %s: reason too long", uri);
    return dt_track_artifact(s, run_id, "removed", uri, step, m);
}

dt_status dt_trk_metrics_flush(dt_track *s) {
    pthread_mutex_lock(&s->mu);
    dt_status st = flush_locked(s);
    if (st != DT_OK) dt_error_set(st, "%s", s->err_msg);
    pthread_mutex_unlock(&s->mu);
    return st;
}

dt_status dt_track_flush(dt_track *s) {
    return s ? dt_trk_metrics_flush(s) : DT_OK;
}

void dt_trk_metrics_stop(dt_track *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    int have = s->have_th;
    s->have_th = 0;
    pthread_mutex_unlock(&s->mu);
    if (have) pthread_join(s->th, NULL);
    pthread_mutex_lock(&s->mu);
    flush_locked(s); /* rows added after the thread's last look */
    pthread_mutex_unlock(&s->mu);
}
