/* The experiment store API (include/dtrain/track.h) against a real SQLite file, read back both
 * through the API and through a raw sqlite3 connection:
 *   - schema: every table, the version row, WAL mode; a newer schema version is refused
 *   - open errors name the path (missing file for readers, /proc, under a regular file, not a
 *     database, s3://)
 *   - flattening of the config YAML into params
 *   - runs: a second begin of the same name is attempt 2 of the same run, params and lineage
 *     replaced; references by id, experiment/name and name (ambiguous, missing)
 *   - metrics: batching (nothing on disk before N rows or T seconds, then a reader sees them
 *     while the writer is open), an exact round trip (values, NaN, steps, wall, attempt), the
 *     summary (n, final, min, max)
 *   - artifacts, tags, run end (status, reason, time; pending metrics flushed), delete
 *   - a write error is sticky and named (metrics table dropped under the writer)
 *   - two processes writing one new file at once (both creating it): no "database is locked",
 *     every row present, and the run both begin gets exactly 2 attempts
 *   - attempts (schema 2): a version-1 store is migrated on open (its runs' latest attempts
 *     kept, later attempts numbered on); a supervisor ends an attempt whose writer was SIGKILLed
 *     (a real child process: the run was 'lost', then failed with the supervisor's reason),
 *     keeps the reason of an attempt its writer ended, adds an attempt no writer began (and a
 *     run that did not exist); metrics of overlapping steps stay told apart by attempt; ending
 *     an older attempt leaves the run's status to the newest; delete removes the attempts
 *   test_track [--writer DB NAME START_TIME | --killed-writer DB]  (child processes) */
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "dtrain/track.h"
#include "harness.h"
#include "track_testutil.h"

enum { W_METRICS = 3000, W_ARTIFACTS = 20, W_SHARED = 500 };

static char dir[256];

static void path_of(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

static void sql_exec(const char *db, const char *sql) {
    sqlite3 *c;
    int ok = sqlite3_open_v2(db, &c, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
             sqlite3_exec(c, sql, NULL, NULL, NULL) == SQLITE_OK;
    CHECK(ok, "raw sql '%s': %s", sql, sqlite3_errmsg(c));
    sqlite3_close(c);
}

/* ---- the concurrent writer (a child process) ------------------------------------------------ */

static int writer_main(const char *db, const char *name, double start) {
    while (dt_track_wall() < start) usleep(1000);
    dt_track *s;
    int64_t run, shared;
    dt_status st = dt_track_open(db, &s);
    if (st == DT_OK) st = dt_track_run_begin(s, "conc", name, 1, "h:1", NULL, NULL, 0, &run);
    if (st == DT_OK) st = dt_track_run_begin(s, "conc", "shared", 1, "h:1", NULL, NULL, 0, &shared);
    if (st == DT_OK) dt_track_set_flush(s, 25, 0.01); /* many small transactions */
    for (int i = 0; st == DT_OK && i < W_METRICS; i++) {
        st = dt_track_metric(s, run, i % 2 ? "loss" : "lr", i, dt_track_wall(), i * 0.5);
        if (st == DT_OK && i < W_SHARED)
            st = dt_track_metric(s, shared, "loss", i, dt_track_wall(), i);
        if (st == DT_OK && i % (W_METRICS / W_ARTIFACTS) == 0)
            st = dt_track_artifact(s, run, "checkpoint", name, i, "{\"loss\": 1}");
        if (i % 100 == 0) usleep(2000);
    }
    if (st == DT_OK) st = dt_track_run_end(s, run, "done", "ok");
    if (st == DT_OK) st = dt_track_run_end(s, shared, "done", "ok");
    dt_status cs = dt_track_close(s);
    if (st == DT_OK) st = cs;
    if (st != DT_OK) fprintf(stderr, "writer %s: %s\n", name, dt_last_error());
    return st == DT_OK ? 0 : 1;
}

/* Begins attempt sup/r, commits loss at steps 1..5, then dies by SIGKILL without ending it
 * (rank 0 of a job whose peer died). */
static int killed_writer_main(const char *db) {
    dt_track *s;
    int64_t run;
    dt_status st = dt_track_open(db, &s);
    if (st == DT_OK) st = dt_track_run_begin(s, "sup", "r", 2, "h:2", NULL, NULL, 0, &run);
    for (int i = 1; st == DT_OK && i <= 5; i++)
        st = dt_track_metric(s, run, "loss", i, dt_track_wall(), 10.0 + i);
    if (st == DT_OK) st = dt_track_flush(s);
    if (st != DT_OK) {
        fprintf(stderr, "killed writer: %s\n", dt_last_error());
        return 1;
    }
    raise(SIGKILL);
    return 2;
}

static void test_concurrent(const char *self) {
    char db[512], start[64];
    path_of(db, sizeof db, "conc/new.db"); /* the folder too is created by both */
    snprintf(start, sizeof start, "%.6f", dt_track_wall() + 0.5);
    pid_t pid[2];
    const char *names[2] = {"w1", "w2"};
    for (int i = 0; i < 2; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            execl("/proc/self/exe", self, "--writer", db, names[i], start, (char *)NULL);
            _exit(127);
        }
    }
    for (int i = 0; i < 2; i++) {
        int ws = 0;
        waitpid(pid[i], &ws, 0);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "concurrent writer %s: status %d", names[i],
              ws);
    }
    dt_track *s;
    CHECK_OK(dt_track_open_existing(db, &s));
    if (!s) return;
    for (int i = 0; i < 2; i++) {
        dt_track_run r;
        CHECK_OK(dt_track_run_find(s, names[i], &r));
        CHECK(r.n_metrics == W_METRICS && !strcmp(r.status, "done") && r.attempts == 1,
              "writer %s: %lld metrics (want %d), status %s, attempts %d", names[i],
              (long long)r.n_metrics, W_METRICS, r.status, r.attempts);
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM artifacts WHERE run_id = %lld",
                 (long long)r.id);
        CHECK(sql_int(db, sql) == W_ARTIFACTS, "writer %s: artifacts %lld", names[i],
              sql_int(db, sql));
    }
    dt_track_run r;
    CHECK_OK(dt_track_run_find(s, "conc/shared", &r));
    CHECK(r.attempts == 2 && r.n_metrics == 2 * W_SHARED,
          "shared run: %d attempts (want 2), %lld metrics (want %d)", r.attempts,
          (long long)r.n_metrics, 2 * W_SHARED);
    dt_track_close(s);
}

/* ---- single-process tests ---------------------------------------------------------------------
 */

static void test_schema(void) {
    char db[512];
    path_of(db, sizeof db, "a/b/schema.db");
    dt_track *s;
    CHECK_OK(dt_track_open(db, &s));
    CHECK(s && !strcmp(dt_track_path(s), db), "path %s", s ? dt_track_path(s) : "");
    dt_track_close(s);
    const char *tables[] = {"schema_version", "experiments", "runs",    "params",  "metrics",
                            "tags",           "artifacts",   "lineage", "attempts"};
    for (int i = 0; i < 9; i++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM sqlite_master WHERE name = '%s'",
                 tables[i]);
        CHECK(sql_int(db, sql) == 1, "table %s", tables[i]);
    }
    CHECK(sql_int(db, "SELECT MAX(version) FROM schema_version") == DT_TRACK_SCHEMA_VERSION &&
              sql_int(db, "SELECT COUNT(*) FROM schema_version") == 1,
          "schema version");
    CHECK(sql_int(db, "SELECT journal_mode = 'wal' FROM pragma_journal_mode") == 1, "WAL mode");
    /* opening again creates nothing twice */
    CHECK_OK(dt_track_open(db, &s));
    dt_track_close(s);
    CHECK(sql_int(db, "SELECT COUNT(*) FROM schema_version") == 1, "one version row");
    sql_exec(db, "UPDATE schema_version SET version = 99");
    CHECK(dt_track_open_existing(db, &s) == DT_ERR_FORMAT && !s &&
              strstr(dt_last_error(), "newer") && strstr(dt_last_error(), db),
          "newer schema refused: %s", dt_last_error());
}

static void test_open_errors(void) {
    char db[600], file[512];
    dt_track *s = NULL;
    path_of(db, sizeof db, "missing.db");
    CHECK(dt_track_open_existing(db, &s) == DT_ERR_NOTFOUND && strstr(dt_last_error(), db),
          "missing: %s", dt_last_error());
    struct stat sb;
    CHECK(stat(db, &sb) != 0, "a reader created %s", db);
    CHECK(dt_track_open("/proc/dtrain-track-test.db", &s) != DT_OK && !s &&
              strstr(dt_last_error(), "/proc/dtrain-track-test.db"),
          "/proc: %s", dt_last_error());
    path_of(file, sizeof file, "plain-file");
    FILE *f = fopen(file, "w");
    fputs("not a database, just text that is long enough to be a header.........\n", f);
    fclose(f);
    snprintf(db, sizeof db, "%s/x.db", file);
    CHECK(dt_track_open(db, &s) != DT_OK && strstr(dt_last_error(), db), "under a file: %s",
          dt_last_error());
    CHECK(dt_track_open(file, &s) == DT_ERR_FORMAT && strstr(dt_last_error(), file) &&
              strstr(dt_last_error(), "not an experiment store"),
          "not a database: %s", dt_last_error());
    CHECK(dt_track_open("s3://bucket/x.db", &s) == DT_ERR_INVALID, "s3: %s", dt_last_error());
}

typedef struct kvs {
    int n;
    char k[128][64], v[128][128];
} kvs;

static int kv_cb(void *ud, const char *key, const char *value) {
    kvs *l = ud;
    if (l->n < 128) {
        snprintf(l->k[l->n], 64, "%s", key);
        snprintf(l->v[l->n], 128, "%s", value);
        l->n++;
    }
    return 0;
}

static const char *kv_get(const kvs *l, const char *key) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->k[i], key)) return l->v[i];
    return NULL;
}

static void test_flatten(void) {
    kvs l = {0};
    CHECK_OK(dt_track_flatten_yaml("a:\n  b: 1\n  c: [x, y]\nd:\n  e: \"q r\"\n  f:\n    g: no\n",
                                   kv_cb, &l));
    CHECK(l.n == 4, "4 keys, got %d", l.n);
    const char *b = kv_get(&l, "a.b"), *c = kv_get(&l, "a.c"), *e = kv_get(&l, "d.e"),
               *g = kv_get(&l, "d.f.g");
    CHECK(b && !strcmp(b, "1") && c && !strcmp(c, "[x, y]") && e && !strcmp(e, "q r") && g &&
              !strcmp(g, "no"),
          "values %s %s %s %s", b, c, e, g);
    CHECK(dt_track_flatten_yaml("a: [b\n", kv_cb, &l) == DT_ERR_FORMAT, "bad YAML refused");
}

typedef struct rows {
    int n;
    char key[4096][16];
    int64_t step[4096];
    double wall[4096], value[4096];
    int attempt[4096];
} rows;

static int row_cb(void *ud, const dt_track_metric_row *m) {
    rows *r = ud;
    if (r->n < 4096) {
        snprintf(r->key[r->n], 16, "%s", m->key);
        r->step[r->n] = m->step, r->wall[r->n] = m->wall, r->value[r->n] = m->value;
        r->attempt[r->n] = m->attempt;
        r->n++;
    }
    return 0;
}

static int summ_cb(void *ud, const dt_track_summary *m) {
    if (!strcmp(m->key, "loss")) *(dt_track_summary *)ud = *m;
    return 0;
}

static int art_cb(void *ud, const dt_track_artifact_row *a) {
    int *n = ud;
    CHECK(!strcmp(a->kind, "checkpoint") && !strcmp(a->uri, "/ck/step-10") && a->step == 10 &&
              strstr(a->metrics_json, "2.5") && a->attempt == 2,
          "artifact %s %s %lld %s attempt %d", a->kind, a->uri, (long long)a->step, a->metrics_json,
          a->attempt);
    ++*n;
    return 0;
}

/* Polls a reader until the run shows `want` metric rows (the writer's thread flushed). */
static long long wait_rows(const char *db, long long want, double timeout) {
    long long n = -1;
    for (double t0 = dt_track_wall(); dt_track_wall() - t0 < timeout; usleep(10000))
        if ((n = sql_int(db, "SELECT COUNT(*) FROM metrics")) >= want) break;
    return n;
}

static void test_runs_and_metrics(void) {
    char db[512];
    path_of(db, sizeof db, "runs.db");
    dt_track *s, *rd;
    CHECK_OK(dt_track_open(db, &s));
    if (!s) return;
    int64_t id1, id1b, id2;
    dt_track_kv lin1[] = {{"code_version", "abc"}, {"dataset.train", "f00"}};
    dt_track_kv lin2[] = {{"code_version", "def"}};
    CHECK_OK(dt_track_run_begin(s, "exp1", "r1", 2, "n1:2", "optim:\n  lr: 0.003\nold:\n  k: 1\n",
                                lin1, 2, &id1));
    CHECK_OK(dt_track_run_begin(s, "exp1", "r1", 4, "n1:2,n2:2", "optim:\n  lr: 0.001\n", lin2, 1,
                                &id1b));
    CHECK_OK(dt_track_run_begin(s, "exp2", "r1", 1, "n3:1", NULL, NULL, 0, &id2));
    CHECK(id1 == id1b && id2 != id1,
          "same name = same run (%lld %lld), other experiment = other "
          "run (%lld)",
          (long long)id1, (long long)id1b, (long long)id2);
    dt_track_run r;
    char ref[64];
    snprintf(ref, sizeof ref, "%lld", (long long)id1);
    CHECK_OK(dt_track_run_find(s, ref, &r));
    CHECK(r.id == id1 && r.attempts == 2 && !strcmp(r.status, "running") && r.world == 4 &&
              !strcmp(r.hosts, "n1:2,n2:2") && r.end_time == 0 && r.writer_pid == getpid() &&
              !r.lost && r.last_step == -1,
          "attempt 2: attempts %d status %s world %d hosts %s", r.attempts, r.status, r.world,
          r.hosts);
    CHECK(dt_track_run_find(s, "r1", &r) == DT_ERR_INVALID && strstr(dt_last_error(), "exp1/r1") &&
              strstr(dt_last_error(), "exp2/r1"),
          "ambiguous: %s", dt_last_error());
    CHECK_OK(dt_track_run_find(s, "exp2/r1", &r));
    CHECK(r.id == id2, "exp2/r1 -> %lld", (long long)r.id);
    CHECK(dt_track_run_find(s, "nope", &r) == DT_ERR_NOTFOUND && strstr(dt_last_error(), "nope"),
          "missing run: %s", dt_last_error());
    kvs p = {0}, l = {0};
    CHECK_OK(dt_track_params(s, id1, kv_cb, &p));
    CHECK(p.n == 1 && kv_get(&p, "optim.lr") && !strcmp(kv_get(&p, "optim.lr"), "0.001"),
          "params of attempt 2 replace attempt 1's (%d, lr %s)", p.n, kv_get(&p, "optim.lr"));
    CHECK_OK(dt_track_lineage(s, id1, kv_cb, &l));
    CHECK(l.n == 1 && !strcmp(kv_get(&l, "code_version"), "def"), "lineage replaced (%d)", l.n);

    /* batching: nothing is written before N rows or T seconds */
    CHECK_OK(dt_track_open_existing(db, &rd));
    dt_track_set_flush(s, 100000, 1000);
    for (int i = 0; i < 10; i++) CHECK_OK(dt_track_metric(s, id1, "loss", i, 1e9 + i, 10 - i));
    usleep(100000);
    CHECK(sql_int(db, "SELECT COUNT(*) FROM metrics") == 0, "buffered, not written");
    CHECK_OK(dt_track_flush(s));
    CHECK_OK(dt_track_run_find(rd, "exp1/r1", &r));
    CHECK(r.n_metrics == 10 && r.last_step == 9, "flushed: a reader sees %lld",
          (long long)r.n_metrics);
    dt_track_set_flush(s, 50, 1000); /* every N */
    for (int i = 10; i < 60; i++)
        CHECK_OK(dt_track_metric(s, id1, i % 3 ? "loss" : "acc", i, 1e9 + i, i % 7 ? sin(i) : NAN));
    CHECK(wait_rows(db, 60, 5) == 60, "N rows written by the thread");
    dt_track_set_flush(s, 100000, 0.2); /* every T */
    CHECK_OK(dt_track_metric(s, id1, "loss", 60, 1e9 + 60, -3.25));
    CHECK(wait_rows(db, 61, 5) == 61, "written after T seconds");

    /* exact round trip and summary */
    rows *got = calloc(1, sizeof *got);
    CHECK_OK(dt_track_metrics(rd, id1, "loss", row_cb, got));
    int n = 0, bad = 0;
    double mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i <= 60; i++) {
        if (i >= 10 && i < 60 && i % 3 == 0) continue; /* acc */
        double v = i < 10 ? 10 - i : i < 60 ? (i % 7 ? sin(i) : NAN) : -3.25;
        int same = isnan(v) ? isnan(got->value[n]) : got->value[n] == v;
        bad += !same || got->step[n] != i || got->wall[n] != 1e9 + i || got->attempt[n] != 2 ||
               strcmp(got->key[n], "loss");
        if (!isnan(v)) mn = fmin(mn, v), mx = fmax(mx, v);
        n++;
    }
    CHECK(got->n == n && !bad, "loss rows: %d of %d, %d differ", got->n, n, bad);
    dt_track_summary sm = {0};
    CHECK_OK(dt_track_metric_summary(rd, id1, summ_cb, &sm));
    CHECK(sm.last == -3.25 && sm.last_step == 60 && sm.min == mn && sm.max == mx && sm.max == 10 &&
              sm.max_step == 0,
          "summary: last %g@%lld min %g max %g@%lld (want %g %g)", sm.last, (long long)sm.last_step,
          sm.min, sm.max, (long long)sm.max_step, mn, mx);
    free(got);

    /* artifacts (buffered like metrics), tags, end (pending rows are flushed first) */
    dt_track_set_flush(s, 100000, 1000);
    CHECK(dt_track_artifact(s, id1, "checkpoint", "/x", 1, "[1") == DT_ERR_INVALID,
          "bad metrics JSON refused");
    CHECK_OK(dt_track_artifact(s, id1, "checkpoint", "/ck/step-10", 10, "{\"loss\": 2.5}"));
    int na = 0;
    CHECK_OK(dt_track_artifacts(rd, id1, art_cb, &na));
    CHECK(na == 0, "artifact buffered, not yet written (%d)", na);
    CHECK_OK(dt_track_flush(s));
    CHECK_OK(dt_track_artifacts(rd, id1, art_cb, &na));
    CHECK(na == 1, "one artifact, got %d", na);
    CHECK_OK(dt_track_tag(s, id1, "note", "a"));
    CHECK_OK(dt_track_tag(s, id1, "note", "b"));
    kvs t = {0};
    CHECK_OK(dt_track_tags(rd, id1, kv_cb, &t));
    CHECK(t.n == 1 && !strcmp(t.v[0], "b"), "tag replaced");
    dt_track_set_flush(s, 100000, 1000);
    CHECK_OK(dt_track_metric(s, id1, "loss", 61, 1e9 + 61, 1.5));
    CHECK_OK(dt_track_run_end(s, id1, "failed", "boom at step 61"));
    CHECK_OK(dt_track_run_find(rd, "exp1/r1", &r));
    CHECK(!strcmp(r.status, "failed") && !strcmp(r.exit_reason, "boom at step 61") &&
              r.end_time >= r.start_time && r.last_step == 61,
          "end: %s (%s) last step %lld", r.status, r.exit_reason, (long long)r.last_step);

    /* delete: every row of the run, nothing of the other */
    CHECK_OK(dt_track_metric(s, id2, "loss", 1, 1e9, 1));
    CHECK_OK(dt_track_flush(s));
    CHECK_OK(dt_track_run_delete(s, id1));
    CHECK(dt_track_run_delete(s, id1) == DT_ERR_NOTFOUND, "second delete: not found");
    const char *tables[] = {"metrics", "params", "tags", "artifacts", "lineage"};
    for (int i = 0; i < 5; i++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE run_id = %lld", tables[i],
                 (long long)id1);
        CHECK(sql_int(db, sql) == 0, "deleted from %s", tables[i]);
    }
    CHECK(sql_int(db, "SELECT COUNT(*) FROM metrics") == 1, "the other run's metric kept");
    CHECK(dt_track_run_find(rd, "exp1/r1", &r) == DT_ERR_NOTFOUND, "run gone");

    /* a failed write is sticky and named; the rows are dropped, nothing crashes */
    sql_exec(db, "DROP TABLE metrics");
    CHECK_OK(dt_track_metric(s, id2, "loss", 2, 1e9, 2));
    CHECK(dt_track_flush(s) == DT_ERR_IO && strstr(dt_last_error(), db) &&
              strstr(dt_last_error(), "metrics"),
          "write error: %s", dt_last_error());
    CHECK(dt_track_metric(s, id2, "loss", 3, 1e9, 3) == DT_ERR_IO, "sticky");
    CHECK(dt_track_close(s) == DT_ERR_IO, "close reports it");
    dt_track_close(rd);
}

/* ---- attempts (schema 2) --------------------------------------------------------------------- */

typedef struct atts {
    int n;
    dt_track_attempt a[8];
} atts;

static int att_cb(void *ud, const dt_track_attempt *a) {
    atts *l = ud;
    if (l->n < 8) l->a[l->n++] = *a;
    return 0;
}

static atts attempts_of(dt_track *s, int64_t run) {
    atts l = {0};
    CHECK_OK(dt_track_attempts(s, run, att_cb, &l));
    return l;
}

/* A store as dtrain with schema version 1 wrote it (the DDL of that version, verbatim in the
 * parts that matter: runs carried only the latest attempt's status). */
static void test_migrate_v1(void) {
    char db[512];
    path_of(db, sizeof db, "v1.db");
    sqlite3 *c = NULL;
    CHECK(sqlite3_open(db, &c) == SQLITE_OK, "create %s", db); /* an empty file */
    sqlite3_close(c);
    sql_exec(db,
             "PRAGMA journal_mode=WAL;"
             "CREATE TABLE schema_version(version INTEGER NOT NULL);"
             "CREATE TABLE experiments(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
             " created REAL NOT NULL);"
             "CREATE TABLE runs(id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL"
             " REFERENCES experiments(id), name TEXT NOT NULL, status TEXT NOT NULL,"
             " attempts INTEGER NOT NULL, start_time REAL NOT NULL, attempt_start REAL,"
             " end_time REAL, hosts TEXT, world_size INTEGER, exit_reason TEXT, writer_host TEXT,"
             " writer_pid INTEGER, config_yaml TEXT, UNIQUE(experiment_id, name));"
             "CREATE TABLE params(run_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
             " PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
             "CREATE TABLE metrics(run_id INTEGER NOT NULL, key TEXT NOT NULL, step INTEGER NOT"
             " NULL, wall REAL NOT NULL, value REAL, attempt INTEGER NOT NULL);"
             "CREATE TABLE tags(run_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
             " PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
             "CREATE TABLE artifacts(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, kind TEXT"
             " NOT NULL, uri TEXT NOT NULL, step INTEGER, metrics TEXT, created REAL NOT NULL,"
             " attempt INTEGER NOT NULL);"
             "CREATE TABLE lineage(run_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
             " PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
             "INSERT INTO schema_version VALUES(1);"
             "INSERT INTO experiments VALUES(1, 'old', 1e9);"
             "INSERT INTO runs VALUES(7, 1, 'r', 'failed', 3, 1e9, 1e9 + 50, 1e9 + 60, 'n:2', 2,"
             " 'oom at step 9', 'n', 42, 'a: 1');"
             "INSERT INTO metrics VALUES(7, 'loss', 9, 1e9 + 59, 1.5, 3);");
    dt_track *s;
    CHECK_OK(dt_track_open_existing(db, &s)); /* a reader migrates too */
    if (!s) return;
    CHECK(sql_int(db, "SELECT MAX(version) FROM schema_version") == DT_TRACK_SCHEMA_VERSION,
          "migrated to the current version");
    atts l = attempts_of(s, 7);
    CHECK(l.n == 1 && l.a[0].attempt == 3 && !strcmp(l.a[0].status, "failed") &&
              !strcmp(l.a[0].exit_reason, "oom at step 9") && l.a[0].start_time == 1e9 + 50 &&
              l.a[0].end_time == 1e9 + 60 && l.a[0].world == 2 && l.a[0].writer_pid == 42,
          "the latest attempt of a version-1 run: %d rows, #%d %s (%s)", l.n, l.a[0].attempt,
          l.a[0].status, l.a[0].exit_reason);
    dt_track_run r;
    CHECK_OK(dt_track_run_find(s, "old/r", &r));
    CHECK(r.n_metrics == 1 && r.attempts == 3 && !strcmp(r.status, "failed"),
          "the old run reads as before");
    int64_t id;
    CHECK_OK(dt_track_run_begin(s, "old", "r", 1, "m:1", NULL, NULL, 0, &id));
    CHECK_OK(dt_track_run_end(s, id, "done", "resumed"));
    l = attempts_of(s, id);
    CHECK(id == 7 && l.n == 2 && l.a[1].attempt == 4 && !strcmp(l.a[1].status, "done") &&
              !strcmp(l.a[0].status, "failed"),
          "the next attempt is #4 (%d rows)", l.n);
    dt_track_close(s);
    CHECK_OK(dt_track_open(db, &s)); /* opening again migrates nothing twice */
    dt_track_close(s);
    /* one row per migration: 1 -> 2 -> 3 */
    CHECK(sql_int(db, "SELECT COUNT(*) FROM schema_version") == 3 &&
              sql_int(db, "SELECT COUNT(*) FROM attempts") == 2,
          "one migration");
}

static int count_step(void *ud, const dt_track_metric_row *m) {
    int *n = ud; /* n[attempt] of the rows at step 4 */
    if (m->step == 4 && m->attempt >= 1 && m->attempt <= 2) n[m->attempt]++;
    return 0;
}

/* The launcher's records around attempts: killed, resumed, never begun; a missing run. */
static void test_supervisor(const char *self) {
    char db[512];
    path_of(db, sizeof db, "sup.db");
    dt_track *sup;
    CHECK_OK(dt_track_open(db, &sup));
    if (!sup) return;
    int before = -1;
    CHECK_OK(dt_track_run_attempts(sup, "sup", "r", &before));
    CHECK(before == 0, "no run yet: %d attempts", before);
    /* attempt 1: its writer (a child process) is SIGKILLed after committing steps 1..5 */
    double t0 = dt_track_wall();
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", self, "--killed-writer", db, (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "the writer died by SIGKILL (%d)", ws);
    dt_track_run r;
    CHECK_OK(dt_track_run_find(sup, "sup/r", &r));
    CHECK(!strcmp(r.status, "running") && r.lost && r.attempts == 1 && r.n_metrics == 5,
          "killed: status %s, lost %d, %lld metrics", r.status, r.lost, (long long)r.n_metrics);
    dt_track_attempt_end_info in = {.attempts_before = before,
                                    .start_time = t0,
                                    .world = 2,
                                    .hosts = "h:2",
                                    .status = "failed",
                                    .exit_reason = "worker 1 killed by signal 9; restarting"};
    int64_t id = 0;
    CHECK_OK(dt_track_attempt_end(sup, "sup", "r", &in, &id));
    CHECK_OK(dt_track_run_find(sup, "sup/r", &r));
    CHECK(id == r.id && !strcmp(r.status, "failed") && !r.lost && r.attempts == 1 &&
              !strcmp(r.exit_reason, in.exit_reason) && r.end_time >= t0,
          "ended by the supervisor: %s (%s), lost %d", r.status, r.exit_reason, r.lost);
    atts l = attempts_of(sup, id);
    CHECK(l.n == 1 && !strcmp(l.a[0].status, "failed") &&
              !strcmp(l.a[0].exit_reason, in.exit_reason) && l.a[0].writer_pid == pid &&
              l.a[0].end_time >= l.a[0].start_time && l.a[0].start_time >= t0,
          "attempt 1: %s (%s) writer %lld (child %d)", l.a[0].status, l.a[0].exit_reason,
          (long long)l.a[0].writer_pid, (int)pid);
    /* attempt 2: resumed from step 3 (steps 4, 5 again), ended by its writer; the supervisor's
     * "done" without a reason keeps the writer's */
    CHECK_OK(dt_track_run_attempts(sup, "sup", "r", &before));
    dt_track *w;
    CHECK_OK(dt_track_open(db, &w));
    int64_t wid = 0;
    CHECK_OK(dt_track_run_begin(w, "sup", "r", 2, "h:2", NULL, NULL, 0, &wid));
    for (int i = 4; i <= 8; i++) CHECK_OK(dt_track_metric(w, wid, "loss", i, dt_track_wall(), i));
    CHECK_OK(dt_track_run_end(w, wid, "done", "finished 8 steps"));
    dt_track_close(w);
    in.attempts_before = before, in.status = "done", in.exit_reason = NULL;
    CHECK_OK(dt_track_attempt_end(sup, "sup", "r", &in, NULL));
    CHECK_OK(dt_track_run_find(sup, "sup/r", &r));
    l = attempts_of(sup, id);
    CHECK(before == 1 && wid == id && r.attempts == 2 && !strcmp(r.status, "done") &&
              !strcmp(r.exit_reason, "finished 8 steps") && l.n == 2 &&
              !strcmp(l.a[0].status, "failed") && !strcmp(l.a[1].status, "done") &&
              !strcmp(l.a[1].exit_reason, "finished 8 steps") && l.a[1].writer_pid == getpid(),
          "attempt 2: run %s (%s), %d attempts; #1 %s, #2 %s (%s)", r.status, r.exit_reason,
          r.attempts, l.a[0].status, l.a[1].status, l.a[1].exit_reason);
    int at4[3] = {0};
    CHECK_OK(dt_track_metrics(sup, id, "loss", count_step, at4));
    CHECK(at4[1] == 1 && at4[2] == 1 && r.n_metrics == 10,
          "step 4 once per attempt (%d, %d), %lld rows", at4[1], at4[2], (long long)r.n_metrics);
    /* attempt 3: the workers died before any began it: the supervisor adds it */
    CHECK_OK(dt_track_run_attempts(sup, "sup", "r", &before));
    in.attempts_before = before, in.status = "failed", in.world = 3, in.hosts = "a:2,b:1";
    in.exit_reason = "worker 0 exited with status 1; gave up after 1 failure";
    in.start_time = dt_track_wall();
    CHECK_OK(dt_track_attempt_end(sup, "sup", "r", &in, NULL));
    CHECK_OK(dt_track_run_find(sup, "sup/r", &r));
    l = attempts_of(sup, id);
    CHECK(r.attempts == 3 && !strcmp(r.status, "failed") &&
              !strcmp(r.exit_reason, in.exit_reason) && r.world == 3 && l.n == 3 &&
              l.a[2].attempt == 3 && !strcmp(l.a[2].hosts, "a:2,b:1") &&
              l.a[2].start_time == in.start_time && l.a[2].end_time >= in.start_time &&
              l.a[2].writer_pid == getpid() && !strcmp(l.a[1].status, "done"),
          "an attempt no writer began: %d attempts, %s (%s), #3 hosts %s", r.attempts, r.status,
          r.exit_reason, l.a[2].hosts);
    /* a run nobody began: created, with its one failed attempt */
    in.attempts_before = 0, in.exit_reason = "worker 0 exited with status 2 (config or data error)";
    CHECK_OK(dt_track_attempt_end(sup, "sup", "never", &in, &wid));
    CHECK_OK(dt_track_run_find(sup, "sup/never", &r));
    l = attempts_of(sup, wid);
    CHECK(r.id == wid && r.attempts == 1 && !strcmp(r.status, "failed") && l.n == 1 &&
              !strcmp(l.a[0].exit_reason, in.exit_reason),
          "a missing run is created: %d attempts, %s", r.attempts, r.status);
    /* the supervisor's failure replaces a writer's own "failed" and its reason */
    CHECK_OK(dt_track_run_attempts(sup, "sup", "r", &before));
    CHECK_OK(dt_track_open(db, &w));
    CHECK_OK(dt_track_run_begin(w, "sup", "r", 2, "h:2", NULL, NULL, 0, &wid));
    CHECK_OK(dt_track_run_end(w, wid, "failed", "ended at step 3: comm error"));
    dt_track_close(w);
    in.attempts_before = before, in.exit_reason = "worker 1 killed by signal 9; gave up";
    CHECK_OK(dt_track_attempt_end(sup, "sup", "r", &in, NULL));
    l = attempts_of(sup, id);
    CHECK(l.n == 4 && !strcmp(l.a[3].exit_reason, in.exit_reason), "#4 reason: %s",
          l.a[3].exit_reason);
    /* ending an older attempt leaves the run to its newest */
    dt_track *w2;
    int64_t a1, a2;
    CHECK_OK(dt_track_open(db, &w));
    CHECK_OK(dt_track_open(db, &w2));
    CHECK_OK(dt_track_run_begin(w, "sup", "two", 1, NULL, NULL, NULL, 0, &a1));
    CHECK_OK(dt_track_run_begin(w2, "sup", "two", 1, NULL, NULL, NULL, 0, &a2));
    CHECK_OK(dt_track_run_end(w, a1, "failed", "old"));
    CHECK_OK(dt_track_run_find(sup, "sup/two", &r));
    l = attempts_of(sup, a1);
    CHECK(a1 == a2 && !strcmp(r.status, "running") && l.n == 2 &&
              !strcmp(l.a[0].status, "failed") && !strcmp(l.a[1].status, "running"),
          "an older attempt ended: run %s, #1 %s, #2 %s", r.status, l.a[0].status, l.a[1].status);
    CHECK_OK(dt_track_run_end(w2, a2, "done", "new"));
    CHECK_OK(dt_track_run_find(sup, "sup/two", &r));
    CHECK(!strcmp(r.status, "done") && !strcmp(r.exit_reason, "new"), "newest ended: %s", r.status);
    dt_track_close(w), dt_track_close(w2);
    /* bad input; delete */
    in.status = NULL;
    CHECK(dt_track_attempt_end(sup, "sup", "r", &in, NULL) == DT_ERR_INVALID, "no status");
    CHECK(dt_track_run_attempts(sup, NULL, "r", &before) == DT_ERR_INVALID, "no experiment");
    CHECK_OK(dt_track_run_delete(sup, id));
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM attempts WHERE run_id = %lld", (long long)id);
    CHECK(sql_int(db, sql) == 0, "delete removes the attempts");
    dt_track_close(sup);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--writer"))
        return writer_main(argv[2], argv[3], strtod(argv[4], NULL));
    if (argc == 3 && !strcmp(argv[1], "--killed-writer")) return killed_writer_main(argv[2]);
    snprintf(dir, sizeof dir, "/tmp/dt-track-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_concurrent(argv[0]); /* first: no threads in this process yet when it forks */
    test_supervisor(argv[0]); /* forks before it opens anything that starts a thread */
    test_migrate_v1();
    test_schema();
    test_open_errors();
    test_flatten();
    test_runs_and_metrics();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return dt_test_finish("test_track");
}
