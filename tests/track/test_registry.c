/* The model registry (include/dtrain/registry.h) against real SQLite files and real files on
 * disk, read back through the API and a raw sqlite3 connection:
 *   - schema 3: a new store has the registry tables; a version-2 store (the tables dropped,
 *     version row 2) gains them when opened, its runs intact; a newer version is refused
 *   - versions number 1, 2, ... per model; the snapshot holds the run's lineage, params and
 *     final metrics (or the given ones) and stays after the run is deleted
 *   - immutability: UPDATE and DELETE of model_versions through raw sqlite3 fail
 *   - aliases set, move, remove; bad alias names; resolve NAME, NAME@latest, NAME@N,
 *     NAME@alias and its errors
 *   - verify: a good folder passes; a changed, a truncated and a missing file are each reported
 *     by name, a FIFO in a file's place too (not read); the content hash changes with any file's
 *     hash; a file name leaving the folder is refused when registering
 *   - two processes registering versions of one model at once (15 each: versions 1..30, none
 *     lost or doubled) while a third resolves the latest in a loop: no error, never a partial
 *     version
 *   test_registry [--reader DB | --writer DB FOLDER]  (child processes) */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "dtrain/registry.h"
#include "dtrain/track.h"
#include "harness.h"
#include "track_testutil.h"

static char dir[256];

/* SQLITE_OK or the error code; the message into msg. */
static int sql_exec(const char *db, const char *sql, char *msg, size_t n) {
    sqlite3 *c;
    char *e = NULL;
    int rc = sqlite3_open_v2(db, &c, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(c, sql, NULL, NULL, &e);
    if (msg) snprintf(msg, n, "%s", e ? e : "");
    sqlite3_free(e);
    sqlite3_close(c);
    return rc;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
}

/* A folder with two files, and their registry entries. */
typedef struct art {
    char path[512];
    dt_registry_file f[2];
    char names[2][32];
} art;

static void make_art(art *a, const char *name, const char *content) {
    snprintf(a->path, sizeof a->path, "%s/%s", dir, name);
    mkdir(a->path, 0755);
    const char *body[2] = {content, "{\"step\": 1}"};
    for (int i = 0; i < 2; i++) {
        snprintf(a->names[i], sizeof a->names[i], i ? "trainer_state.json" : "model.safetensors");
        char p[600];
        snprintf(p, sizeof p, "%s/%s", a->path, a->names[i]);
        write_file(p, body[i]);
        a->f[i].name = a->names[i];
        CHECK_OK(dt_registry_hash_file(p, &a->f[i].bytes, &a->f[i].xxh3));
    }
}

static int reader_main(const char *db) {
    /* lists every version until 30 exist; each version read must be whole */
    for (int iter = 0; iter < 100000; iter++) {
        dt_track *s;
        if (dt_track_open_existing(db, &s) != DT_OK) {
            usleep(1000);
            continue;
        }
        dt_registry_version v;
        dt_status st = dt_registry_resolve(s, "conc", &v);
        int latest = st == DT_OK ? v.version : 0;
        if (st == DT_OK && (strlen(v.hash) != 16 || !strstr(v.files_json, "model.safetensors"))) {
            fprintf(stderr, "reader: partial version %d\n", v.version);
            return 1;
        }
        if (st != DT_OK && st != DT_ERR_NOTFOUND) {
            fprintf(stderr, "reader: %s\n", dt_last_error());
            return 1;
        }
        dt_registry_version_free(&v);
        dt_track_close(s);
        if (latest == 30) return 0;
    }
    fprintf(stderr, "reader: never saw version 30\n");
    return 1;
}

/* Registers 15 versions of "conc" (steps 101..115) of the folder at `path`. */
static int writer_main(const char *db, const char *path) {
    dt_registry_file f[2] = {{.name = "model.safetensors"}, {.name = "trainer_state.json"}};
    char p[700];
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", path, f[i].name);
        if (dt_registry_hash_file(p, &f[i].bytes, &f[i].xxh3) != DT_OK) return 1;
    }
    dt_track *s;
    if (dt_track_open(db, &s) != DT_OK) return 1;
    int bad = 0;
    for (int i = 1; i <= 15; i++) {
        dt_registry_source src = {
            .name = "conc", .path = path, .step = 100 + i, .files = f, .n_files = 2};
        if (dt_registry_register(s, &src, NULL) != DT_OK) {
            fprintf(stderr, "writer: %s\n", dt_last_error());
            bad++;
        }
    }
    dt_track_close(s);
    return bad != 0;
}

static int collect_steps(void *ud, const dt_registry_version *v) {
    int64_t *steps = ud; /* steps[version] */
    if (v->version >= 1 && v->version <= 30) steps[v->version] = v->step;
    return 0;
}

/* Two processes registering versions of one model at once, a third reading throughout. */
static void test_concurrent(const char *self) {
    char db[512];
    snprintf(db, sizeof db, "%s/conc.db", dir);
    dt_track *s;
    CHECK_OK(dt_track_open(db, &s));
    dt_track_close(s);
    art a;
    make_art(&a, "conc", "weights");
    pid_t pid[2];
    for (int k = 0; k < 2; k++)
        if ((pid[k] = fork()) == 0) {
            if (k)
                execl(self, self, "--writer", db, a.path, (char *)NULL);
            else
                execl(self, self, "--reader", db, (char *)NULL);
            _exit(127);
        }
    CHECK_OK(dt_track_open(db, &s));
    int bad = 0;
    for (int i = 1; i <= 15; i++) {
        dt_registry_source src = {
            .name = "conc", .path = a.path, .step = i, .files = a.f, .n_files = 2};
        if (dt_registry_register(s, &src, NULL) != DT_OK) bad++;
    }
    CHECK(!bad, "15 registrations beside another writer and a reader: %d failed (%s)", bad,
          dt_last_error());
    for (int k = 0; k < 2; k++) {
        int status = 0;
        waitpid(pid[k], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the %s process: status %d",
              k ? "writer" : "reader", status);
    }
    /* versions 1..30, each once: 15 of each writer */
    int64_t steps[31];
    memset(steps, 0, sizeof steps);
    CHECK_OK(dt_registry_versions(s, "conc", collect_steps, steps));
    int mine = 0, theirs = 0;
    for (int v = 1; v <= 30; v++) mine += steps[v] >= 1 && steps[v] <= 15, theirs += steps[v] > 100;
    CHECK(mine == 15 && theirs == 15, "versions 1..30 numbered across both writers: %d + %d", mine,
          theirs);
    dt_track_close(s);
}

static int count_cb(void *ud, const dt_registry_version *v) {
    ++*(int *)ud;
    return 0;
}

typedef struct problems {
    int n;
    char what[8][64];
} problems;

static void on_problem(void *ud, const dt_registry_problem *p) {
    problems *l = ud;
    if (l->n < 8) snprintf(l->what[l->n], sizeof l->what[0], "%s:%s", p->file, p->what);
    l->n++;
}

static void test_registry(void) {
    char db[512], msg[512];
    snprintf(db, sizeof db, "%s/reg.db", dir);
    dt_track *s;
    CHECK_OK(dt_track_open(db, &s));
    int64_t run;
    dt_track_kv lin[2] = {{"code_version", "abc123"}, {"config_hash", "00ff"}};
    CHECK_OK(dt_track_run_begin(s, "exp", "r1", 1, "h:1", "optim:\n  lr: 0.003\n", lin, 2, &run));
    CHECK_OK(dt_track_metric(s, run, "loss", 5, 1.0, 3.0));
    CHECK_OK(dt_track_metric(s, run, "loss", 10, 2.0, 2.5));
    CHECK_OK(dt_track_run_end(s, run, "done", NULL));
    art a, b;
    make_art(&a, "ckpt-a", "weights A");
    make_art(&b, "ckpt-b", "weights B");
    dt_registry_source src = {.name = "fortunes",
                              .description = "tiny llama",
                              .run_id = run,
                              .path = a.path,
                              .step = 10,
                              .files = a.f,
                              .n_files = 2};
    int v1 = 0, v2 = 0;
    CHECK_OK(dt_registry_register(s, &src, &v1));
    src.path = b.path, src.files = b.f, src.metrics_json = "{\"eval_loss\": 2.25}";
    src.config_yaml = "optim:\n  lr: 0.001\n"; /* the checkpoint's own config: its params */
    CHECK_OK(dt_registry_register(s, &src, &v2));
    CHECK(v1 == 1 && v2 == 2, "versions %d %d", v1, v2);

    dt_registry_version r;
    CHECK_OK(dt_registry_resolve(s, "fortunes@1", &r));
    CHECK(r.version == 1 && r.run_id == run && !strcmp(r.run, "exp/r1") && r.step == 10 &&
              strstr(r.lineage_json, "\"code_version\":\"abc123\"") &&
              strstr(r.params_json, "\"optim.lr\":\"0.003\"") &&
              strstr(r.metrics_json, "\"loss\":2.5") && r.run_exists,
          "snapshot of v1: run %s lineage %s params %s metrics %s", r.run, r.lineage_json,
          r.params_json, r.metrics_json);
    char h1[17];
    snprintf(h1, sizeof h1, "%s", r.hash);
    dt_registry_version_free(&r);
    CHECK_OK(dt_registry_resolve(s, "fortunes", &r));
    CHECK(r.version == 2 && strstr(r.metrics_json, "eval_loss") && strcmp(r.hash, h1),
          "bare name: the latest (%d), given metrics %s, another hash", r.version, r.metrics_json);
    dt_registry_version_free(&r);
    CHECK_OK(dt_registry_resolve(s, "fortunes@latest", &r));
    CHECK(r.version == 2, "@latest: %d", r.version);
    dt_registry_version_free(&r);

    /* aliases */
    CHECK_OK(dt_registry_alias_set(s, "fortunes", 1, "champion"));
    CHECK_OK(dt_registry_resolve(s, "fortunes@champion", &r));
    CHECK(r.version == 1 && !strcmp(r.aliases, "champion"), "alias on v1: %d %s", r.version,
          r.aliases);
    dt_registry_version_free(&r);
    CHECK_OK(dt_registry_alias_set(s, "fortunes", 2, "champion"));
    CHECK_OK(dt_registry_resolve(s, "fortunes@champion", &r));
    CHECK(r.version == 2, "the alias moved to v2: %d", r.version);
    dt_registry_version_free(&r);
    CHECK_OK(dt_registry_resolve(s, "fortunes@1", &r));
    CHECK(!r.aliases[0], "v1 lost the alias: '%s'", r.aliases);
    dt_registry_version_free(&r);
    CHECK(dt_registry_alias_set(s, "fortunes", 3, "x") == DT_ERR_NOTFOUND &&
              strstr(dt_last_error(), "no version 3"),
          "alias to a missing version: %s", dt_last_error());
    CHECK(dt_registry_alias_set(s, "fortunes", 1, "latest") == DT_ERR_INVALID &&
              dt_registry_alias_set(s, "fortunes", 1, "12") == DT_ERR_INVALID &&
              dt_registry_alias_set(s, "fortunes", 1, "a b") == DT_ERR_INVALID,
          "bad alias names refused");
    CHECK_OK(dt_registry_alias_remove(s, "fortunes", "champion"));
    CHECK(dt_registry_alias_remove(s, "fortunes", "champion") == DT_ERR_NOTFOUND,
          "removing it twice");
    CHECK(dt_registry_resolve(s, "fortunes@champion", &r) == DT_ERR_NOTFOUND &&
              strstr(dt_last_error(), "fortunes@champion"),
          "a removed alias: %s", dt_last_error());
    CHECK(dt_registry_resolve(s, "fortunes@7", &r) == DT_ERR_NOTFOUND &&
              dt_registry_resolve(s, "nosuch", &r) == DT_ERR_NOTFOUND &&
              dt_registry_resolve(s, "fortunes@", &r) == DT_ERR_INVALID &&
              dt_registry_resolve(s, "a/b", &r) == DT_ERR_INVALID,
          "bad references");
    src.name = "bad name";
    CHECK(dt_registry_register(s, &src, NULL) == DT_ERR_INVALID, "a bad model name");
    src.name = "other", src.path = "/nonexistent/x";
    CHECK(dt_registry_register(s, &src, NULL) == DT_ERR_NOTFOUND, "a missing folder");
    int nv = 0;
    CHECK_OK(dt_registry_versions(s, "fortunes", count_cb, &nv));
    CHECK(nv == 2, "two versions listed: %d", nv);

    /* immutable, whoever writes */
    CHECK(sql_exec(db, "UPDATE model_versions SET uri = '/x' WHERE version = 1", msg, sizeof msg) !=
                  SQLITE_OK &&
              strstr(msg, "immutable"),
          "raw UPDATE refused: %s", msg);
    CHECK(sql_exec(db, "DELETE FROM model_versions", msg, sizeof msg) != SQLITE_OK &&
              strstr(msg, "immutable"),
          "raw DELETE refused: %s", msg);
    CHECK(sql_int(db, "SELECT COUNT(*) FROM model_versions") == 2, "both versions still there");

    /* verify */
    CHECK_OK(dt_registry_resolve(s, "fortunes@1", &r));
    problems pl = {0};
    CHECK_OK(dt_registry_verify(&r, on_problem, &pl));
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors", a.path);
    write_file(p, "weights a"); /* same size, other bytes */
    CHECK(dt_registry_verify(&r, on_problem, &pl) == DT_ERR_FORMAT && pl.n == 1 &&
              !strcmp(pl.what[0], "model.safetensors:checksum") &&
              strstr(dt_last_error(), "model.safetensors") && strstr(dt_last_error(), "fortunes@1"),
          "a changed file: %d problems, %s; %s", pl.n, pl.what[0], dt_last_error());
    snprintf(p, sizeof p, "%s/trainer_state.json", a.path);
    write_file(p, "{}");
    snprintf(p, sizeof p, "%s/model.safetensors", a.path);
    unlink(p);
    pl.n = 0;
    CHECK(dt_registry_verify(&r, on_problem, &pl) == DT_ERR_FORMAT && pl.n == 2 &&
              !strcmp(pl.what[0], "model.safetensors:missing") &&
              !strcmp(pl.what[1], "trainer_state.json:size") && strstr(dt_last_error(), "2 files"),
          "missing and truncated: %d: %s %s; %s", pl.n, pl.what[0], pl.what[1], dt_last_error());
    dt_registry_version_free(&r);

    /* hostile names and files: a name leaving the folder is refused; a FIFO in a file's place
     * is reported, not read (which would block) */
    dt_registry_file evil[1] = {{.name = "../reg.db", .bytes = 1}};
    dt_registry_source es = {.name = "evil", .path = b.path, .files = evil, .n_files = 1};
    CHECK(dt_registry_register(s, &es, NULL) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "not a file name"),
          "a name outside the folder: %s", dt_last_error());
    snprintf(p, sizeof p, "%s/model.safetensors", b.path);
    unlink(p);
    CHECK(mkfifo(p, 0600) == 0, "mkfifo %s", p);
    CHECK_OK(dt_registry_resolve(s, "fortunes@2", &r));
    pl.n = 0;
    CHECK(dt_registry_verify(&r, on_problem, &pl) == DT_ERR_FORMAT && pl.n == 1 &&
              !strcmp(pl.what[0], "model.safetensors:unreadable"),
          "a FIFO in a file's place: %d %s", pl.n, pl.what[0]);
    dt_registry_version_free(&r);

    /* the snapshot outlives the run */
    CHECK_OK(dt_track_run_delete(s, run));
    CHECK_OK(dt_registry_resolve(s, "fortunes@1", &r));
    CHECK(!r.run_exists && !strcmp(r.run, "exp/r1") && strstr(r.lineage_json, "abc123"),
          "after the run is deleted: exists %d, %s", r.run_exists, r.lineage_json);
    dt_registry_version_free(&r);
    dt_track_close(s);
}

static void test_schema(void) {
    char db[512];
    snprintf(db, sizeof db, "%s/old.db", dir);
    dt_track *s;
    CHECK_OK(dt_track_open(db, &s));
    int64_t run;
    CHECK_OK(dt_track_run_begin(s, "e", "old", 1, NULL, NULL, NULL, 0, &run));
    dt_track_close(s);
    CHECK(sql_int(db, "SELECT MAX(version) FROM schema_version") == 3 &&
              sql_int(db, "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('registered_models',"
                          " 'model_versions', 'model_aliases', 'model_versions_no_update',"
                          " 'model_versions_no_delete')") == 5,
          "a new store: version 3 and the registry's tables and triggers");
    /* the same store as version 2 wrote it */
    CHECK(sql_exec(db,
                   "DROP TRIGGER model_versions_no_update; DROP TRIGGER model_versions_no_delete;"
                   "DROP TABLE model_versions; DROP TABLE model_aliases;"
                   "DROP TABLE registered_models; DELETE FROM schema_version;"
                   "INSERT INTO schema_version VALUES(2);",
                   NULL, 0) == SQLITE_OK,
          "made a version-2 store");
    CHECK_OK(dt_track_open_existing(db, &s)); /* a reader migrates, like every opener */
    if (!s) return;
    dt_track_run r;
    CHECK_OK(dt_track_run_find(s, "e/old", &r));
    art a;
    make_art(&a, "old-art", "w");
    dt_registry_source src = {
        .name = "m", .run_id = run, .path = a.path, .step = -1, .files = a.f, .n_files = 2};
    int v = 0;
    CHECK_OK(dt_registry_register(s, &src, &v));
    CHECK(v == 1, "registered into the migrated store: %d", v);
    dt_track_close(s);
    CHECK(sql_int(db, "SELECT MAX(version) FROM schema_version") == 3 &&
              sql_int(db,
                      "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'model_versions_no_%'") ==
                  2,
          "migrated to 3 with the triggers");
    sql_exec(db, "INSERT INTO schema_version VALUES(4)", NULL, 0);
    CHECK(dt_track_open_existing(db, &s) == DT_ERR_FORMAT && strstr(dt_last_error(), "newer") &&
              strstr(dt_last_error(), "version 4"),
          "a newer store refused: %s", dt_last_error());
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--reader")) return reader_main(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--writer")) return writer_main(argv[2], argv[3]);
    snprintf(dir, sizeof dir, "/tmp/dt-registry-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_concurrent(argv[0]); /* first: forks before this process starts threads */
    test_registry();
    test_schema();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return dt_test_finish("test_registry");
}
