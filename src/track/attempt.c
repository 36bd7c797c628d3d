/* A supervisor's side of the store (dtrain launch): the attempt count of a run by name, and the
 * end of an attempt whose processes have all exited -- possibly killed before they could end it
 * themselves, or before they began it at all. The supervisor writes only between attempts, so
 * it never competes with the attempt's own writer for a run's rows; the transaction still runs
 * under the busy timeout like every other (two launches on one store). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "track/track_impl.h"

typedef struct find_args {
    const char *experiment, *name;
    int64_t run;
    int attempts;
} find_args;

/* The run's id and attempt count (run 0 when missing). */
static dt_status find_run(dt_track *s, find_args *f) {
    return dt_trk_find_run(s, f->experiment, f->name, &f->run, &f->attempts);
}

static dt_status count_tx(dt_track *s, void *ud) {
    return find_run(s, ud);
}

dt_status dt_track_run_attempts(dt_track *s, const char *experiment, const char *run_name,
                                int *attempts) {
    if (!s || !experiment || !run_name || !attempts)
        return dt_error_set(DT_ERR_INVALID,
                            "track attempts: experiment and run name must be given");
    find_args f = {.experiment = experiment, .name = run_name};
    /* a read, but in a transaction like the writes: one consistent snapshot, under db_mu */
    dt_status st = dt_trk_tx(s, "cannot read runs", count_tx, &f);
    *attempts = st == DT_OK ? f.attempts : 0;
    return st;
}

typedef struct end_args {
    find_args f;
    const dt_track_attempt_end_info *in;
} end_args;

/* Adds attempt f->attempts + 1, ended, recorded as written by this process (the supervisor),
 * creating the experiment and the run when missing. */
static dt_status add_attempt(dt_track *s, end_args *a) {
    const dt_track_attempt_end_info *in = a->in;
    double now = dt_track_wall();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    int attempt = a->f.attempts + 1;
    sqlite3_stmt *q;
    dt_status st;
    if (!a->f.run && (st = dt_trk_add_experiment(s, a->f.experiment, now)) != DT_OK) return st;
    const char *sql =
        a->f.run ? "UPDATE runs SET status = ?3, attempts = ?4, attempt_start = ?5, end_time = ?6,"
                   " exit_reason = ?7, hosts = ?8, world_size = ?9, writer_host = ?10,"
                   " writer_pid = ?11 WHERE id = ?12"
                 : "INSERT INTO runs(experiment_id, name, status, attempts, start_time,"
                   " attempt_start, end_time, exit_reason, hosts, world_size, writer_host,"
                   " writer_pid) SELECT id, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8, ?9, ?10, ?11"
                   " FROM experiments WHERE name = ?1";
    if ((st = dt_trk_prepare(s, sql, &q)) != DT_OK) return st;
    if (!a->f.run) {
        sqlite3_bind_text(q, 1, a->f.experiment, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, a->f.name, -1, SQLITE_STATIC);
    } else {
        sqlite3_bind_int64(q, 12, a->f.run);
    }
    double start = in->start_time > 0 ? in->start_time : now;
    sqlite3_bind_text(q, 3, in->status, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 4, attempt);
    sqlite3_bind_double(q, 5, start);
    sqlite3_bind_double(q, 6, now);
    dt_trk_bind_text(q, 7, in->exit_reason);
    dt_trk_bind_text(q, 8, in->hosts);
    sqlite3_bind_int(q, 9, in->world);
    sqlite3_bind_text(q, 10, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 11, (int64_t)getpid());
    if ((st = dt_trk_step_done(s, q, "cannot write the run")) != DT_OK) return st;
    if (!a->f.run) a->f.run = sqlite3_last_insert_rowid(s->db);
    if ((st = dt_trk_prepare(s,
                             "INSERT OR REPLACE INTO attempts(run_id, attempt, status, start_time,"
                             " end_time, world_size, hosts, exit_reason, writer_host, writer_pid)"
                             " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                             &q)) != DT_OK)
        return st;
    sqlite3_bind_int64(q, 1, a->f.run);
    sqlite3_bind_int(q, 2, attempt);
    sqlite3_bind_text(q, 3, in->status, -1, SQLITE_STATIC);
    sqlite3_bind_double(q, 4, start);
    sqlite3_bind_double(q, 5, now);
    sqlite3_bind_int(q, 6, in->world);
    dt_trk_bind_text(q, 7, in->hosts);
    dt_trk_bind_text(q, 8, in->exit_reason);
    sqlite3_bind_text(q, 9, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 10, (int64_t)getpid());
    return dt_trk_step_done(s, q, "cannot write the attempt");
}

static dt_status attempt_end_tx(dt_track *s, void *ud) {
    end_args *a = ud;
    dt_status st = find_run(s, &a->f);
    if (st != DT_OK) return st;
    if (!a->f.run || a->f.attempts <= a->in->attempts_before) return add_attempt(s, a);
    return dt_trk_end_attempt(s, a->f.run, a->f.attempts, 1, a->in->status, a->in->exit_reason);
}

dt_status dt_track_attempt_end(dt_track *s, const char *experiment, const char *run_name,
                               const dt_track_attempt_end_info *info, int64_t *run_id) {
    if (!s || !experiment || !experiment[0] || !run_name || !run_name[0] || !info ||
        !info->status || !info->status[0])
        return dt_error_set(DT_ERR_INVALID,
                            "track attempt end: experiment, run name and status must be given");
    end_args a = {.f = {.experiment = experiment, .name = run_name}, .in = info};
    dt_status st = dt_trk_tx(s, "cannot end the attempt", attempt_end_tx, &a);
    if (st == DT_OK && run_id) *run_id = a.f.run;
    return st;
}
