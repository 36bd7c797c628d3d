/* The experiment store's file: open, schema (with a version table), WAL, busy timeout, close.
 *
 * Schema (version 3): experiments(name) <- runs(experiment, name, status, attempts, start/end,
 * hosts, world size, exit reason, writer host/pid, config YAML; status to writer: those of the
 * newest attempt) <- params (flattened config), metrics (key, step, wall, value, attempt), tags,
 * artifacts (kind, uri, step, metrics JSON, attempt), lineage (key, value), attempts (attempt,
 * status, start/end, world size, hosts, exit reason, writer host/pid). Version 1 lacked the
 * attempts table: opening such a store adds it, filled with each run's latest attempt (the
 * earlier ones' status was overwritten and is not known). Version 3 adds the model registry
 * (registered_models, model_versions, model_aliases: src/track/registry.c); older stores gain
 * its empty tables when opened. Runs are deleted with explicit
 * DELETEs (no reliance on the per-connection foreign_keys pragma). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/fsinfo.h"
#include "core/fsmode.h"
#include "dtrain/mlflow.h"
#include "track/track_impl.h"

/* A writer may wait this long for another writer's transaction (two launches, a reader's
 * checkpoint of the WAL) before an error. */
#define BUSY_TIMEOUT_MS 30000

static const char *const schema_sql =
    "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS experiments(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " created REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY,"
    " experiment_id INTEGER NOT NULL REFERENCES experiments(id), name TEXT NOT NULL,"
    " status TEXT NOT NULL, attempts INTEGER NOT NULL, start_time REAL NOT NULL,"
    " attempt_start REAL, end_time REAL, hosts TEXT, world_size INTEGER, exit_reason TEXT,"
    " writer_host TEXT, writer_pid INTEGER, config_yaml TEXT, UNIQUE(experiment_id, name));"
    "CREATE TABLE IF NOT EXISTS params(run_id INTEGER NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS metrics(run_id INTEGER NOT NULL, key TEXT NOT NULL,"
    " step INTEGER NOT NULL, wall REAL NOT NULL, value REAL, attempt INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS metrics_by_run ON metrics(run_id, key, attempt, step);"
    "CREATE TABLE IF NOT EXISTS tags(run_id INTEGER NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS artifacts(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL,"
    " kind TEXT NOT NULL, uri TEXT NOT NULL, step INTEGER, metrics TEXT, created REAL NOT NULL,"
    " attempt INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS artifacts_by_run ON artifacts(run_id);"
    "CREATE TABLE IF NOT EXISTS lineage(run_id INTEGER NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(run_id, key)) WITHOUT ROWID;";

/* Version 2 (also part of a new store's schema). */
static const char *const attempts_sql =
    "CREATE TABLE IF NOT EXISTS attempts(run_id INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    " status TEXT NOT NULL, start_time REAL, end_time REAL, world_size INTEGER, hosts TEXT,"
    " exit_reason TEXT, writer_host TEXT, writer_pid INTEGER, PRIMARY KEY(run_id, attempt))"
    " WITHOUT ROWID;";

/* Version 3: the model registry (include/dtrain/registry.h). Versions are immutable: the
 * triggers refuse UPDATE and DELETE from any client, not only from this API. */
static const char *const registry_sql =
    "CREATE TABLE IF NOT EXISTS registered_models(name TEXT PRIMARY KEY, created REAL NOT NULL,"
    " description TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS model_versions(name TEXT NOT NULL"
    " REFERENCES registered_models(name), version INTEGER NOT NULL, run_id INTEGER, run TEXT,"
    " uri TEXT NOT NULL, step INTEGER, created REAL NOT NULL, content_hash TEXT NOT NULL,"
    " files TEXT NOT NULL, lineage TEXT NOT NULL, params TEXT NOT NULL, metrics TEXT NOT NULL,"
    " PRIMARY KEY(name, version)) WITHOUT ROWID;"
    "CREATE TRIGGER IF NOT EXISTS model_versions_no_update BEFORE UPDATE ON model_versions"
    " BEGIN SELECT RAISE(ABORT, 'model versions are immutable'); END;"
    "CREATE TRIGGER IF NOT EXISTS model_versions_no_delete BEFORE DELETE ON model_versions"
    " BEGIN SELECT RAISE(ABORT, 'model versions are immutable'); END;"
    "CREATE TABLE IF NOT EXISTS model_aliases(name TEXT NOT NULL, alias TEXT NOT NULL,"
    " version INTEGER NOT NULL, updated REAL NOT NULL, PRIMARY KEY(name, alias)) WITHOUT ROWID;";

/* 1 -> 2: the attempts table, with the one attempt per run a version-1 store remembers. */
static const char *const migrate_2_sql =
    "INSERT OR IGNORE INTO attempts(run_id, attempt, status, start_time, end_time, world_size,"
    " hosts, exit_reason, writer_host, writer_pid) SELECT id, attempts, status,"
    " COALESCE(attempt_start, start_time), end_time, world_size, hosts, exit_reason,"
    " writer_host, writer_pid FROM runs WHERE attempts > 0;"
    "INSERT INTO schema_version(version) VALUES(2);";

double dt_track_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *dt_track_path(const dt_track *s) {
    return s ? s->path : "";
}

dt_status dt_trk_fail(dt_track *s, const char *what) {
    int code = sqlite3_errcode(s->db);
    const char *m = sqlite3_errmsg(s->db);
    if (code == SQLITE_NOTADB)
        return dt_error_set(DT_ERR_FORMAT, "%s: not an experiment store (%s)", s->path, m);
    /* a full disk or quota: SQLite says "database or disk is full"; the file system is named.
     * The failed transaction is rolled back: the store keeps everything committed before. */
    int sys = sqlite3_system_errno(s->db);
    if (code == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT) {
        int e = sys == EDQUOT ? EDQUOT : ENOSPC;
        char note[DT_FS_NOTE_LEN];
        return dt_error_set(DT_ERR_IO, "%s: %s: %s: %s%s", s->path, what, m, strerror(e),
                            dt_fs_full_note(s->path, e, note, sizeof note));
    }
    return dt_error_set(DT_ERR_IO, "%s: %s: %s", s->path, what, m);
}

dt_status dt_trk_prepare(dt_track *s, const char *sql, sqlite3_stmt **st) {
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) return dt_trk_fail(s, "query");
    return DT_OK;
}

void dt_trk_bind_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

dt_status dt_trk_tx(dt_track *s, const char *what, dt_status (*fn)(dt_track *s, void *ud),
                    void *ud) {
    pthread_mutex_lock(&s->db_mu);
    dt_status st = DT_OK;
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        st = dt_trk_fail(s, what);
    } else {
        st = fn(s, ud);
        if (st == DT_OK && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            st = dt_trk_fail(s, what);
        if (st != DT_OK) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    }
    pthread_mutex_unlock(&s->db_mu);
    return st;
}

/* mkdir -p of the folder that holds `path`. */
static int make_parent(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    char *end = strrchr(p, '/');
    if (!end || end == p) return 0;
    *end = '\0';
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        char keep = *c;
        *c = '\0';
        if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST) return -1;
        *c = keep;
        if (!keep) break;
    }
    return 0;
}

static dt_status schema_tx(dt_track *s, void *ud) {
    int create = *(int *)ud;
    if (create && (sqlite3_exec(s->db, schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
                   sqlite3_exec(s->db, attempts_sql, NULL, NULL, NULL) != SQLITE_OK))
        return dt_trk_fail(s, "cannot create the schema");
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(s, "SELECT MAX(version) FROM schema_version", &q);
    if (st != DT_OK) return st;
    int rc = sqlite3_step(q);
    int have = rc == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL;
    int version = have ? sqlite3_column_int(q, 0) : 0;
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW) return dt_trk_fail(s, "cannot read the schema version");
    if (have && version > DT_TRACK_SCHEMA_VERSION)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: experiment store schema version %d is newer than this dtrain's "
                            "(%d); use a newer dtrain",
                            s->path, version, DT_TRACK_SCHEMA_VERSION);
    if (create && sqlite3_exec(s->db, registry_sql, NULL, NULL, NULL) != SQLITE_OK)
        return dt_trk_fail(s, "cannot create the schema");
    if (!have && create &&
        sqlite3_exec(s->db, "INSERT INTO schema_version(version) VALUES(3)", NULL, NULL, NULL) !=
            SQLITE_OK)
        return dt_trk_fail(s, "cannot write the schema version");
    /* Migrations, inside this transaction: two processes opening an old store take turns, and
     * the second finds it done. Readers migrate too (they open read-write, like writers). */
    if (have && version < 2 &&
        (sqlite3_exec(s->db, attempts_sql, NULL, NULL, NULL) != SQLITE_OK ||
         sqlite3_exec(s->db, migrate_2_sql, NULL, NULL, NULL) != SQLITE_OK))
        return dt_trk_fail(s, "cannot migrate the experiment store to schema version 2");
    if (have && version < 3 &&
        (sqlite3_exec(s->db, registry_sql, NULL, NULL, NULL) != SQLITE_OK ||
         sqlite3_exec(s->db, "INSERT INTO schema_version(version) VALUES(3)", NULL, NULL, NULL) !=
             SQLITE_OK))
        return dt_trk_fail(s, "cannot migrate the experiment store to schema version 3");
    return DT_OK;
}

/* WAL and the schema. Two processes opening a new file at once can see SQLITE_BUSY from the
 * journal-mode switch (it takes an exclusive lock without calling the busy handler): retried
 * for up to 6 s. The schema transaction itself waits through the busy timeout. */
static dt_status setup(dt_track *s, int create) {
    for (int tries = 0;; tries++) {
        sqlite3_stmt *q = NULL;
        int rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &q, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(q);
        int wal = rc == SQLITE_ROW && !strcmp((const char *)sqlite3_column_text(q, 0), "wal");
        sqlite3_finalize(q);
        if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 300) {
            usleep(20000);
            continue;
        }
        if (!wal) return dt_trk_fail(s, "cannot switch to WAL mode");
        break;
    }
    return dt_trk_tx(s, "cannot set up the experiment store", schema_tx, &create);
}

static dt_status open_store(const char *uri, int create, dt_track **out) {
    *out = NULL;
    if (!uri || !uri[0]) return dt_error_set(DT_ERR_INVALID, "experiment store: empty path");
    if (!strncmp(uri, "file://", 7)) uri += 7;
    if (strstr(uri, "://"))
        return dt_error_set(DT_ERR_INVALID,
                            "%s: the experiment store must be a local path or file:// (SQLite)",
                            uri);
    dt_track *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", uri);
    snprintf(s->path, sizeof s->path, "%s", uri);
    s->every_n = 512, s->every_s = 2.0;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->db_mu, &a);
    pthread_mutexattr_destroy(&a);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    dt_status st = DT_OK;
    struct stat sb;
    if (!create && stat(s->path, &sb) != 0) {
        st = dt_error_set(DT_ERR_NOTFOUND, "%s: no experiment store here (%s)", s->path,
                          strerror(errno));
    } else if (create && make_parent(s->path) != 0) {
        st = dt_error_set(DT_ERR_IO, "%s: cannot create the folder of the experiment store: %s",
                          s->path, strerror(errno));
    } else {
        /* SQLite creates a new database 0644 (less the umask), readable by everyone: created
         * here first with DT_FILE_MODE (an empty file is an empty database). SQLite gives its
         * -wal and -shm files the database file's mode. */
        int fd = create ? open(s->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, DT_FILE_MODE) : -1;
        if (fd >= 0) close(fd);
        int flags =
            SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
        if (sqlite3_open_v2(s->path, &s->db, flags, NULL) != SQLITE_OK) {
            int e = s->db ? sqlite3_system_errno(s->db) : 0;
            st = dt_error_set(DT_ERR_IO, "%s: cannot open the experiment store: %s%s%s%s", s->path,
                              s->db ? sqlite3_errmsg(s->db) : "out of memory", e ? " (" : "",
                              e ? strerror(e) : "", e ? ")" : "");
        } else {
            sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
            st = setup(s, create);
            /* NORMAL in WAL mode: a commit survives a crashed process (not a power cut) without
             * an fsync per transaction. */
            if (st == DT_OK) sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
        }
    }
    if (st != DT_OK) {
        dt_track_close(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_track_local_uri(const char *tracking_uri, const char *output_dir, char *out, size_t n) {
    if (tracking_uri[0] && !dt_mlflow_is_uri(tracking_uri)) {
        snprintf(out, n, "%s", tracking_uri);
        return;
    }
    if (!strncmp(output_dir, "file://", 7)) output_dir += 7;
    snprintf(out, n, "%s/dtrain.db", output_dir);
}

dt_status dt_track_open(const char *uri, dt_track **out) {
    return open_store(uri, 1, out);
}

dt_status dt_track_open_existing(const char *uri, dt_track **out) {
    return open_store(uri, 0, out);
}

dt_status dt_track_close(dt_track *s) {
    if (!s) return DT_OK;
    dt_status st = DT_OK;
    if (s->db) {
        dt_trk_metrics_stop(s); /* the writer thread's last flush */
        pthread_mutex_lock(&s->mu);
        if (s->err != DT_OK) st = dt_error_set(s->err, "%s", s->err_msg);
        pthread_mutex_unlock(&s->mu);
    }
    sqlite3_close_v2(s->db);
    pthread_mutex_destroy(&s->db_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->rows), free(s->spare);
    free(s);
    return st;
}
