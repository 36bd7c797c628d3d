/* Queries for the monitoring server (include/dtrain/serve.h): the newest value of every metric
 * of a run, and one metric's values after a step. Like query.c, a statement holds db_mu only
 * while it runs; WAL lets it read while the trainer writes. */
#include <math.h>
#include "dtrain/serve.h"
#include "track/track_impl.h"

static dt_status run_rows(dt_track *s, sqlite3_stmt *q, dt_track_metric_cb cb, void *ud) {
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const unsigned char *k = sqlite3_column_text(q, 0);
        dt_track_metric_row m = {
            k ? (const char *)k : "", sqlite3_column_int64(q, 1), sqlite3_column_double(q, 2),
            sqlite3_column_type(q, 3) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 3),
            sqlite3_column_int(q, 4)};
        if (cb(ud, &m)) break;
    }
    dt_status st = rc == SQLITE_ROW || rc == SQLITE_DONE ? DT_OK : dt_trk_fail(s, "cannot read");
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_mu);
    return st;
}

static dt_status prep(dt_track *s, const char *sql, sqlite3_stmt **q) {
    pthread_mutex_lock(&s->db_mu);
    dt_status st = dt_trk_prepare(s, sql, q);
    if (st != DT_OK) pthread_mutex_unlock(&s->db_mu);
    return st;
}

dt_status dt_track_metrics_latest(dt_track *s, int64_t run_id, dt_track_metric_cb cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st = prep(s,
                        "SELECT key, step, wall, value, attempt FROM (SELECT key, step, wall,"
                        " value, attempt, ROW_NUMBER() OVER (PARTITION BY key ORDER BY attempt"
                        " DESC, step DESC, rowid DESC) AS rn FROM metrics WHERE run_id = ?1)"
                        " WHERE rn = 1 ORDER BY key",
                        &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, run_id);
    return run_rows(s, q, cb, ud);
}

dt_status dt_track_metrics_since(dt_track *s, int64_t run_id, const char *key, int64_t since_step,
                                 dt_track_metric_cb cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st = prep(s,
                        "SELECT key, step, wall, value, attempt FROM (SELECT key, step, wall,"
                        " value, attempt, ROW_NUMBER() OVER (PARTITION BY step ORDER BY attempt"
                        " DESC, rowid DESC) AS rn FROM metrics WHERE run_id = ?1 AND key = ?2"
                        " AND step > ?3) WHERE rn = 1 ORDER BY step",
                        &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, run_id);
    dt_trk_bind_text(q, 2, key);
    sqlite3_bind_int64(q, 3, since_step);
    return run_rows(s, q, cb, ud);
}
