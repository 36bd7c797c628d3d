/* Writing runs: begin (or a new attempt), params and lineage, tags, end, delete. Each is one
 * BEGIN IMMEDIATE transaction (artifacts are buffered with the metrics: metrics.c; the
 * supervisor's writes: attempt.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "track/track_impl.h"

dt_status dt_trk_step_done(dt_track *s, sqlite3_stmt *q, const char *what) {
    dt_status st = sqlite3_step(q) == SQLITE_DONE ? DT_OK : dt_trk_fail(s, what);
    sqlite3_finalize(q);
    return st;
}

dt_status dt_trk_add_experiment(dt_track *s, const char *experiment, double now) {
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prepare(s, "INSERT OR IGNORE INTO experiments(name, created) VALUES(?1, ?2)", &q);
    if (st != DT_OK) return st;
    sqlite3_bind_text(q, 1, experiment, -1, SQLITE_STATIC);
    sqlite3_bind_double(q, 2, now);
    return dt_trk_step_done(s, q, "cannot add the experiment");
}

dt_status dt_trk_find_run(dt_track *s, const char *experiment, const char *name, int64_t *run,
                          int *attempts) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(s,
                                  "SELECT r.id, r.attempts FROM runs r JOIN experiments e ON"
                                  " e.id = r.experiment_id WHERE e.name = ?1 AND r.name = ?2",
                                  &q);
    if (st != DT_OK) return st;
    sqlite3_bind_text(q, 1, experiment, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    *run = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    *attempts = rc == SQLITE_ROW ? sqlite3_column_int(q, 1) : 0;
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? DT_OK : dt_trk_fail(s, "cannot read runs");
}

typedef struct begin_args {
    const char *experiment, *name, *hosts, *yaml;
    int world;
    const dt_track_kv *lineage;
    int n_lineage;
    int64_t run;
    int attempt;
    sqlite3_stmt *param; /* while flattening */
    dt_status param_st;
} begin_args;

static int put_param(void *ud, const char *key, const char *value) {
    begin_args *a = ud;
    sqlite3_reset(a->param);
    sqlite3_bind_text(a->param, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(a->param, 3, value, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(a->param) != SQLITE_DONE) {
        a->param_st = DT_ERR_IO;
        return 1;
    }
    return 0;
}

static dt_status begin_tx(dt_track *s, void *ud) {
    begin_args *a = ud;
    double now = dt_track_wall();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    sqlite3_stmt *q;
    dt_status st = dt_trk_add_experiment(s, a->experiment, now);
    if (st != DT_OK) return st;
    /* an existing run of that name: a new attempt */
    if ((st = dt_trk_find_run(s, a->experiment, a->name, &a->run, &a->attempt)) != DT_OK) return st;
    a->attempt++;
    const char *sql =
        a->run ? "UPDATE runs SET status = 'running', attempts = ?3, attempt_start = ?4,"
                 " end_time = NULL, exit_reason = NULL, hosts = ?5, world_size = ?6,"
                 " writer_host = ?7, writer_pid = ?8, config_yaml = ?9 WHERE id = ?10"
               : "INSERT INTO runs(experiment_id, name, status, attempts, start_time,"
                 " attempt_start, hosts, world_size, writer_host, writer_pid, config_yaml)"
                 " SELECT id, ?2, 'running', ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?9 FROM experiments"
                 " WHERE name = ?1";
    if ((st = dt_trk_prepare(s, sql, &q)) != DT_OK) return st;
    if (!a->run) {
        sqlite3_bind_text(q, 1, a->experiment, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, a->name, -1, SQLITE_STATIC);
    }
    sqlite3_bind_int(q, 3, a->attempt);
    sqlite3_bind_double(q, 4, now);
    dt_trk_bind_text(q, 5, a->hosts);
    sqlite3_bind_int(q, 6, a->world);
    sqlite3_bind_text(q, 7, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 8, (int64_t)getpid());
    dt_trk_bind_text(q, 9, a->yaml);
    if (a->run) sqlite3_bind_int64(q, 10, a->run);
    if ((st = dt_trk_step_done(s, q, "cannot write the run")) != DT_OK) return st;
    if (!a->run) a->run = sqlite3_last_insert_rowid(s->db);
    /* the attempt's own row (REPLACE: a run deleted and begun again reuses nothing, but a
     * version-1 store's migrated row may hold this number) */
    if ((st = dt_trk_prepare(s,
                             "INSERT OR REPLACE INTO attempts(run_id, attempt, status, start_time,"
                             " world_size, hosts, writer_host, writer_pid)"
                             " VALUES(?1, ?2, 'running', ?3, ?4, ?5, ?6, ?7)",
                             &q)) != DT_OK)
        return st;
    sqlite3_bind_int64(q, 1, a->run);
    sqlite3_bind_int(q, 2, a->attempt);
    sqlite3_bind_double(q, 3, now);
    sqlite3_bind_int(q, 4, a->world);
    dt_trk_bind_text(q, 5, a->hosts);
    sqlite3_bind_text(q, 6, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 7, (int64_t)getpid());
    if ((st = dt_trk_step_done(s, q, "cannot write the attempt")) != DT_OK) return st;
    /* this attempt's config and lineage replace the previous attempt's */
    static const char *const clear[] = {"DELETE FROM params WHERE run_id = ?1",
                                        "DELETE FROM lineage WHERE run_id = ?1"};
    for (int i = 0; i < 2; i++) {
        if ((st = dt_trk_prepare(s, clear[i], &q)) != DT_OK) return st;
        sqlite3_bind_int64(q, 1, a->run);
        if ((st = dt_trk_step_done(s, q, "cannot replace params")) != DT_OK) return st;
    }
    if ((st = dt_trk_prepare(s,
                             "INSERT OR REPLACE INTO params(run_id, key, value) VALUES(?1, ?2, ?3)",
                             &a->param)) != DT_OK)
        return st;
    sqlite3_bind_int64(a->param, 1, a->run);
    a->param_st = DT_OK;
    if (a->yaml && a->yaml[0]) st = dt_track_flatten_yaml(a->yaml, put_param, a);
    if (st == DT_OK && a->param_st != DT_OK) st = dt_trk_fail(s, "cannot write params");
    sqlite3_finalize(a->param);
    if (st != DT_OK) return st;
    if ((st = dt_trk_prepare(
             s, "INSERT OR REPLACE INTO lineage(run_id, key, value) VALUES(?1, ?2, ?3)", &q)) !=
        DT_OK)
        return st;
    for (int i = 0; i < a->n_lineage && st == DT_OK; i++) {
        if (!a->lineage[i].key || !a->lineage[i].value) continue;
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, a->run);
        sqlite3_bind_text(q, 2, a->lineage[i].key, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 3, a->lineage[i].value, -1, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) st = dt_trk_fail(s, "cannot write lineage");
    }
    sqlite3_finalize(q);
    return st;
}

dt_status dt_track_run_begin(dt_track *s, const char *experiment, const char *run_name, int world,
                             const char *hosts, const char *config_yaml, const dt_track_kv *lineage,
                             int n_lineage, int64_t *run_id) {
    if (!s || !experiment || !experiment[0] || !run_name || !run_name[0])
        return dt_error_set(DT_ERR_INVALID, "track run: experiment and run name must be given");
    begin_args a = {.experiment = experiment,
                    .name = run_name,
                    .hosts = hosts,
                    .yaml = config_yaml,
                    .world = world,
                    .lineage = lineage,
                    .n_lineage = n_lineage};
    dt_status st = dt_trk_tx(s, "cannot begin the run", begin_tx, &a);
    if (st != DT_OK) return st;
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->n_begun && s->begun_run[i] != a.run) i++;
    if (i < DT_TRK_BEGUN_MAX) {
        if (i == s->n_begun) s->n_begun++;
        s->begun_run[i] = a.run, s->begun_attempt[i] = a.attempt;
    }
    pthread_mutex_unlock(&s->mu);
    if (run_id) *run_id = a.run;
    return DT_OK;
}

typedef struct row_args {
    int64_t run;
    const char *a, *b;
} row_args;

static dt_status tag_tx(dt_track *s, void *ud) {
    row_args *r = ud;
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prepare(s, "INSERT OR REPLACE INTO tags(run_id, key, value) VALUES(?1, ?2, ?3)", &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, r->run);
    sqlite3_bind_text(q, 2, r->a, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, r->b, -1, SQLITE_STATIC);
    return dt_trk_step_done(s, q, "cannot write the tag");
}

dt_status dt_track_tag(dt_track *s, int64_t run_id, const char *key, const char *value) {
    if (!s || !key || !key[0] || !value)
        return dt_error_set(DT_ERR_INVALID, "track tag: key and value must be given");
    row_args r = {.run = run_id, .a = key, .b = value};
    return dt_trk_tx(s, "cannot write the tag", tag_tx, &r);
}

typedef struct end_args {
    int64_t run;
    int attempt; /* 0: the newest */
    const char *status, *reason;
} end_args;

static dt_status end_tx(dt_track *s, void *ud) {
    end_args *r = ud;
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(s, "SELECT attempts FROM runs WHERE id = ?1", &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, r->run);
    int rc = sqlite3_step(q), newest = rc == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dt_trk_fail(s, "cannot read runs");
    if (rc != SQLITE_ROW)
        return dt_error_set(DT_ERR_NOTFOUND, "%s: no run %lld", s->path, (long long)r->run);
    int attempt = r->attempt > 0 ? r->attempt : newest;
    return dt_trk_end_attempt(s, r->run, attempt, attempt >= newest, r->status, r->reason);
}

dt_status dt_trk_end_attempt(dt_track *s, int64_t run, int attempt, int newest, const char *status,
                             const char *reason) {
    double now = dt_track_wall();
    sqlite3_stmt *q;
    /* reason NULL keeps the recorded one */
    dt_status st = dt_trk_prepare(s,
                                  "UPDATE attempts SET status = ?3, exit_reason = COALESCE(?4,"
                                  " exit_reason), end_time = ?5 WHERE run_id = ?1 AND attempt = ?2",
                                  &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_int(q, 2, attempt);
    sqlite3_bind_text(q, 3, status, -1, SQLITE_STATIC);
    dt_trk_bind_text(q, 4, reason);
    sqlite3_bind_double(q, 5, now);
    if ((st = dt_trk_step_done(s, q, "cannot end the attempt")) != DT_OK || !newest) return st;
    if ((st = dt_trk_prepare(s,
                             "UPDATE runs SET status = ?2, exit_reason = COALESCE(?3, exit_reason),"
                             " end_time = ?4 WHERE id = ?1",
                             &q)) != DT_OK)
        return st;
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_text(q, 2, status, -1, SQLITE_STATIC);
    dt_trk_bind_text(q, 3, reason);
    sqlite3_bind_double(q, 4, now);
    return dt_trk_step_done(s, q, "cannot end the run");
}

dt_status dt_track_run_end(dt_track *s, int64_t run_id, const char *status,
                           const char *exit_reason) {
    if (!s || !status || !status[0])
        return dt_error_set(DT_ERR_INVALID, "track run end: status must be given");
    dt_status st = dt_track_flush(s);
    if (st != DT_OK) return st;
    end_args r = {.run = run_id, .status = status, .reason = exit_reason};
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_begun; i++)
        if (s->begun_run[i] == run_id) r.attempt = s->begun_attempt[i];
    pthread_mutex_unlock(&s->mu);
    return dt_trk_tx(s, "cannot end the run", end_tx, &r);
}

static dt_status delete_tx(dt_track *s, void *ud) {
    int64_t run = *(int64_t *)ud;
    static const char *const sql[] = {
        "DELETE FROM metrics WHERE run_id = ?1", "DELETE FROM params WHERE run_id = ?1",
        "DELETE FROM tags WHERE run_id = ?1",    "DELETE FROM artifacts WHERE run_id = ?1",
        "DELETE FROM lineage WHERE run_id = ?1", "DELETE FROM attempts WHERE run_id = ?1",
        "DELETE FROM runs WHERE id = ?1"};
    dt_status st = DT_OK;
    for (int i = 0; i < 7 && st == DT_OK; i++) {
        sqlite3_stmt *q;
        if ((st = dt_trk_prepare(s, sql[i], &q)) != DT_OK) break;
        sqlite3_bind_int64(q, 1, run);
        st = dt_trk_step_done(s, q, "cannot delete the run");
    }
    if (st == DT_OK && !sqlite3_changes(s->db))
        return dt_error_set(DT_ERR_NOTFOUND, "%s: no run %lld", s->path, (long long)run);
    return st;
}

dt_status dt_track_run_delete(dt_track *s, int64_t run_id) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "track delete: no store");
    return dt_trk_tx(s, "cannot delete the run", delete_tx, &run_id);
}
