/* Queries for the monitoring server (include/dtrain/serve.h): the newest value of every metric
 * of a run, and one metric's values after a step. Like query.c, a statement holds db_mu only
 * while it runs; WAL lets it read while the trainer writes. */
#include "dtrain/serve.h"
#include "track/track_impl.h"

dt_status dt_track_metrics_latest(dt_track *s, int64_t run_id, dt_track_metric_cb cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prep_run(s,
                        "SELECT key, step, wall, value, attempt FROM (SELECT key, step, wall,"
                        " value, attempt, ROW_NUMBER() OVER (PARTITION BY key ORDER BY attempt"
                        " DESC, step DESC, rowid DESC) AS rn FROM metrics WHERE run_id = ?1)"
                        " WHERE rn = 1 ORDER BY key",
                        run_id, &q);
    return st != DT_OK ? st : dt_trk_metric_rows(s, q, cb, ud);
}

dt_status dt_track_metrics_since(dt_track *s, int64_t run_id, const char *key, int64_t since_step,
                                 dt_track_metric_cb cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prep_run(s,
                        "SELECT key, step, wall, value, attempt FROM (SELECT key, step, wall,"
                        " value, attempt, ROW_NUMBER() OVER (PARTITION BY step ORDER BY attempt"
                        " DESC, rowid DESC) AS rn FROM metrics WHERE run_id = ?1 AND key = ?2"
                        " AND step > ?3) WHERE rn = 1 ORDER BY step",
                        run_id, &q);
    if (st != DT_OK) return st;
    dt_trk_bind_text(q, 2, key);
    sqlite3_bind_int64(q, 3, since_step);
    return dt_trk_metric_rows(s, q, cb, ud);
}
