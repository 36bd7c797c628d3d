/* Reading the experiment store: runs, params, lineage, tags, metrics and their summary,
 * artifacts. Readers hold db_mu only for the statement; the WAL lets them read while other
 * processes write. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "track/track_impl.h"

static const char *text(sqlite3_stmt *q, int i) {
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? (const char *)t : "";
}

static double real_or_nan(sqlite3_stmt *q, int i) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

#define RUN_COLS                                                                                   \
    "SELECT r.id, e.name, r.name, r.status, r.attempts, r.world_size, r.start_time,"               \
    " r.end_time, r.hosts, r.exit_reason, r.writer_host, r.writer_pid,"                            \
    " (SELECT MAX(step) FROM metrics m WHERE m.run_id = r.id),"                                    \
    " (SELECT COUNT(*) FROM metrics m WHERE m.run_id = r.id)"                                      \
    " FROM runs r JOIN experiments e ON e.id = r.experiment_id "

static void read_run(sqlite3_stmt *q, dt_track_run *r) {
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(q, 0);
    snprintf(r->experiment, sizeof r->experiment, "%s", text(q, 1));
    snprintf(r->name, sizeof r->name, "%s", text(q, 2));
    snprintf(r->status, sizeof r->status, "%s", text(q, 3));
    r->attempts = sqlite3_column_int(q, 4);
    r->world = sqlite3_column_int(q, 5);
    r->start_time = sqlite3_column_double(q, 6);
    r->end_time = sqlite3_column_double(q, 7);
    snprintf(r->hosts, sizeof r->hosts, "%s", text(q, 8));
    snprintf(r->exit_reason, sizeof r->exit_reason, "%s", text(q, 9));
    snprintf(r->writer_host, sizeof r->writer_host, "%s", text(q, 10));
    r->writer_pid = sqlite3_column_int64(q, 11);
    r->last_step = sqlite3_column_type(q, 12) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 12);
    r->n_metrics = sqlite3_column_int64(q, 13);
    /* "running" but its process is gone (SIGKILL, a lost node): only decidable on its host */
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    r->lost = !strcmp(r->status, "running") && r->writer_pid > 0 && !strcmp(host, r->writer_host) &&
              kill((pid_t)r->writer_pid, 0) != 0 && errno == ESRCH;
}

/* Steps `q` (already bound), calling `row` per result; finalizes and unlocks. */
dt_status dt_trk_each_row(dt_track *s, sqlite3_stmt *q, int (*row)(sqlite3_stmt *q, void *ud),
                          void *ud) {
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        if (row(q, ud)) break;
    dt_status st = rc == SQLITE_ROW || rc == SQLITE_DONE ? DT_OK : dt_trk_fail(s, "cannot read");
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_mu);
    return st;
}

/* Locks db_mu and prepares (unlocked again on failure). */
dt_status dt_trk_prep(dt_track *s, const char *sql, sqlite3_stmt **q) {
    pthread_mutex_lock(&s->db_mu);
    dt_status st = dt_trk_prepare(s, sql, q);
    if (st != DT_OK) pthread_mutex_unlock(&s->db_mu);
    return st;
}

dt_status dt_trk_prep_run(dt_track *s, const char *sql, int64_t run, sqlite3_stmt **q) {
    dt_status st = dt_trk_prep(s, sql, q);
    if (st == DT_OK) sqlite3_bind_int64(*q, 1, run);
    return st;
}

typedef struct cb_pair {
    void *cb, *ud;
} cb_pair;

static int run_row(sqlite3_stmt *q, void *ud) {
    cb_pair *p = ud;
    dt_track_run r;
    read_run(q, &r);
    return ((dt_track_run_cb)p->cb)(p->ud, &r);
}

dt_status dt_track_runs(dt_track *s, const char *experiment, const char *status, dt_track_run_cb cb,
                        void *ud) {
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prep(s,
                    RUN_COLS "WHERE (?1 IS NULL OR e.name = ?1) AND (?2 IS NULL OR r.status = ?2)"
                             " ORDER BY r.start_time DESC, r.id DESC",
                    &q);
    if (st != DT_OK) return st;
    dt_trk_bind_text(q, 1, experiment && experiment[0] ? experiment : NULL);
    dt_trk_bind_text(q, 2, status && status[0] ? status : NULL);
    cb_pair p = {(void *)cb, ud};
    return dt_trk_each_row(s, q, run_row, &p);
}

dt_status dt_track_runs_tagged(dt_track *s, const char *key, const char *value, dt_track_run_cb cb,
                               void *ud) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prep(s,
                               RUN_COLS "WHERE EXISTS (SELECT 1 FROM tags t WHERE t.run_id = r.id"
                                        " AND t.key = ?1 AND t.value = ?2)"
                                        " ORDER BY r.start_time DESC, r.id DESC",
                               &q);
    if (st != DT_OK) return st;
    dt_trk_bind_text(q, 1, key);
    dt_trk_bind_text(q, 2, value);
    cb_pair p = {(void *)cb, ud};
    return dt_trk_each_row(s, q, run_row, &p);
}

typedef struct find_state {
    dt_track_run *out;
    int n;
    char names[512];
} find_state;

static int find_row(sqlite3_stmt *q, void *ud) {
    find_state *f = ud;
    dt_track_run r;
    read_run(q, &r);
    if (f->n++ == 0) *f->out = r;
    size_t l = strlen(f->names);
    snprintf(f->names + l, sizeof f->names - l, "%s%s/%s", l ? ", " : "", r.experiment, r.name);
    return 0;
}

dt_status dt_track_run_find(dt_track *s, const char *ref, dt_track_run *out) {
    if (!s || !ref || !ref[0]) return dt_error_set(DT_ERR_INVALID, "run: empty reference");
    char exp[256] = "";
    const char *name = ref, *slash = strrchr(ref, '/');
    int numeric = strspn(ref, "0123456789") == strlen(ref);
    if (slash && !numeric) {
        snprintf(exp, sizeof exp, "%.*s", (int)(slash - ref), ref);
        name = slash + 1;
    }
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prep(s,
                    numeric ? RUN_COLS "WHERE r.id = ?1"
                            : RUN_COLS "WHERE r.name = ?1 AND (?2 IS NULL OR e.name = ?2)",
                    &q);
    if (st != DT_OK) return st;
    if (numeric) {
        sqlite3_bind_int64(q, 1, strtoll(ref, NULL, 10));
    } else {
        sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
        dt_trk_bind_text(q, 2, exp[0] ? exp : NULL);
    }
    find_state f = {.out = out};
    if ((st = dt_trk_each_row(s, q, find_row, &f)) != DT_OK) return st;
    if (f.n == 0) return dt_error_set(DT_ERR_NOTFOUND, "run '%s': not in %s", ref, s->path);
    if (f.n > 1)
        return dt_error_set(DT_ERR_INVALID,
                            "run '%s' is ambiguous (%s): give experiment/name or the id", ref,
                            f.names);
    return DT_OK;
}

static int kv_row(sqlite3_stmt *q, void *ud) {
    cb_pair *p = ud;
    return ((dt_track_kv_cb)p->cb)(p->ud, text(q, 0), text(q, 1));
}

/* Runs `sql` with ?1 = run, calling `row` (with cb, ud) per result. */
static dt_status run_query(dt_track *s, const char *sql, int64_t run,
                           int (*row)(sqlite3_stmt *q, void *ud), void *cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prep_run(s, sql, run, &q);
    if (st != DT_OK) return st;
    cb_pair p = {cb, ud};
    return dt_trk_each_row(s, q, row, &p);
}

static dt_status kv_query(dt_track *s, const char *sql, int64_t run, dt_track_kv_cb cb, void *ud) {
    return run_query(s, sql, run, kv_row, (void *)cb, ud);
}

dt_status dt_track_params(dt_track *s, int64_t run_id, dt_track_kv_cb cb, void *ud) {
    return kv_query(s, "SELECT key, value FROM params WHERE run_id = ?1 ORDER BY key", run_id, cb,
                    ud);
}

dt_status dt_track_lineage(dt_track *s, int64_t run_id, dt_track_kv_cb cb, void *ud) {
    return kv_query(s, "SELECT key, value FROM lineage WHERE run_id = ?1 ORDER BY key", run_id, cb,
                    ud);
}

dt_status dt_track_tags(dt_track *s, int64_t run_id, dt_track_kv_cb cb, void *ud) {
    return kv_query(s, "SELECT key, value FROM tags WHERE run_id = ?1 ORDER BY key", run_id, cb,
                    ud);
}

static int yaml_row(sqlite3_stmt *q, void *ud) {
    char **y = ud;
    *y = strdup(text(q, 0));
    return 1;
}

dt_status dt_track_config_yaml(dt_track *s, int64_t run_id, char **yaml) {
    *yaml = NULL;
    sqlite3_stmt *q;
    dt_status st = dt_trk_prep_run(s, "SELECT config_yaml FROM runs WHERE id = ?1", run_id, &q);
    if (st != DT_OK) return st;
    if ((st = dt_trk_each_row(s, q, yaml_row, yaml)) != DT_OK) return st;
    if (!*yaml && !(*yaml = strdup("")))
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", s->path);
    return DT_OK;
}

static int metric_row(sqlite3_stmt *q, void *ud) {
    cb_pair *p = ud;
    dt_track_metric_row m = {text(q, 0), sqlite3_column_int64(q, 1), sqlite3_column_double(q, 2),
                             real_or_nan(q, 3), sqlite3_column_int(q, 4)};
    return ((dt_track_metric_cb)p->cb)(p->ud, &m);
}

dt_status dt_trk_metric_rows(dt_track *s, sqlite3_stmt *q, dt_track_metric_cb cb, void *ud) {
    cb_pair p = {(void *)cb, ud};
    return dt_trk_each_row(s, q, metric_row, &p);
}

dt_status dt_track_metrics(dt_track *s, int64_t run_id, const char *key, dt_track_metric_cb cb,
                           void *ud) {
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prep_run(s,
                        "SELECT key, step, wall, value, attempt FROM metrics WHERE run_id = ?1"
                        " AND (?2 IS NULL OR key = ?2) ORDER BY key, attempt, step, rowid",
                        run_id, &q);
    if (st != DT_OK) return st;
    dt_trk_bind_text(q, 2, key);
    return dt_trk_metric_rows(s, q, cb, ud);
}

typedef struct summ {
    dt_track_summary_cb cb;
    void *ud;
    char key[DT_TRK_KEY_MAX + 8];
    dt_track_summary m;
    int have, stop;
} summ;

static void summ_emit(summ *s) {
    if (!s->have || s->stop) return;
    s->m.key = s->key;
    s->stop = s->cb(s->ud, &s->m);
    s->have = 0;
}

/* Rows come in (key, attempt, step) order: the last row of a key is its final value. */
static int summ_metric(void *ud, const dt_track_metric_row *r) {
    summ *s = ud;
    if (s->have && strcmp(s->key, r->key)) summ_emit(s);
    if (s->stop) return 1;
    if (!s->have) {
        memset(&s->m, 0, sizeof s->m);
        snprintf(s->key, sizeof s->key, "%s", r->key);
        s->m.min = s->m.max = s->m.last = NAN;
        s->m.min_step = s->m.max_step = -1;
        s->have = 1;
    }
    s->m.last = r->value, s->m.last_step = r->step;
    if (isnan(r->value)) return 0;
    s->m.n++;
    if (isnan(s->m.min) || r->value <= s->m.min) s->m.min = r->value, s->m.min_step = r->step;
    if (isnan(s->m.max) || r->value >= s->m.max) s->m.max = r->value, s->m.max_step = r->step;
    return 0;
}

dt_status dt_track_metric_summary(dt_track *s, int64_t run_id, dt_track_summary_cb cb, void *ud) {
    summ sm = {.cb = cb, .ud = ud};
    dt_status st = dt_track_metrics(s, run_id, NULL, summ_metric, &sm);
    if (st == DT_OK) summ_emit(&sm);
    return st;
}

static int artifact_row(sqlite3_stmt *q, void *ud) {
    cb_pair *p = ud;
    dt_track_artifact_row a = {.id = sqlite3_column_int64(q, 0),
                               .kind = text(q, 1),
                               .uri = text(q, 2),
                               .step = sqlite3_column_int64(q, 3),
                               .metrics_json = text(q, 4),
                               .created = sqlite3_column_double(q, 5),
                               .attempt = sqlite3_column_int(q, 6),
                               .removed = sqlite3_column_double(q, 7)};
    return ((dt_track_artifact_cb)p->cb)(p->ud, &a);
}

dt_status dt_track_artifacts(dt_track *s, int64_t run_id, dt_track_artifact_cb cb, void *ud) {
    return run_query(s,
                     "SELECT a.id, a.kind, a.uri, a.step, a.metrics, a.created, a.attempt,"
                     " (SELECT MIN(b.created) FROM artifacts b WHERE b.run_id = a.run_id AND"
                     " b.kind = 'removed' AND b.uri = a.uri AND b.id > a.id) FROM artifacts a"
                     " WHERE a.run_id = ?1 AND a.kind <> 'removed' ORDER BY a.id",
                     run_id, artifact_row, (void *)cb, ud);
}

static int attempt_row(sqlite3_stmt *q, void *ud) {
    cb_pair *p = ud;
    dt_track_attempt a = {.attempt = sqlite3_column_int(q, 0),
                          .start_time = sqlite3_column_double(q, 2),
                          .end_time = sqlite3_column_double(q, 3),
                          .world = sqlite3_column_int(q, 4),
                          .writer_pid = sqlite3_column_int64(q, 8)};
    snprintf(a.status, sizeof a.status, "%s", text(q, 1));
    snprintf(a.hosts, sizeof a.hosts, "%s", text(q, 5));
    snprintf(a.exit_reason, sizeof a.exit_reason, "%s", text(q, 6));
    snprintf(a.writer_host, sizeof a.writer_host, "%s", text(q, 7));
    return ((dt_track_attempt_cb)p->cb)(p->ud, &a);
}

dt_status dt_track_attempts(dt_track *s, int64_t run_id, dt_track_attempt_cb cb, void *ud) {
    return run_query(s,
                     "SELECT attempt, status, start_time, end_time, world_size, hosts,"
                     " exit_reason, writer_host, writer_pid FROM attempts WHERE run_id = ?1"
                     " ORDER BY attempt",
                     run_id, attempt_row, (void *)cb, ud);
}
