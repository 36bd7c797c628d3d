/* dtrain runs export RUN --format mlflow -o DIR: the run as an MLflow file store, the `mlruns`
 * layout of mlflow/store/tracking/file_store.py that MlflowClient("file:///DIR") and `mlflow ui
 * --backend-store-uri DIR` read (MLflow 3 keeps it in maintenance: readers set
 * MLFLOW_ALLOW_FILE_STORE=true, or convert it with `mlflow migrate-filestore`): DIR/<exp id>/
 * meta.yaml, DIR/<exp id>/<run id>/{meta.yaml, params/<key> (the value), metrics/<key>
 * ("timestamp_ms value step" lines), tags/<key> (mlflow.runName, mlflow.source.git.commit from
 * lineage code_version, dtrain.<lineage>, dtrain.*, the run's own tags), artifacts/ (config.yaml,
 * dtrain_artifacts.tsv listing checkpoint and model URIs: no copies)}.
 * The experiment is found by name among DIR's (MLflow's own too), else made with an id derived
 * from the name; the run id is the xxh3-128 of (store path, run id, experiment, name), so an
 * export of the same run replaces its folder instead of adding a run. The run is written into a
 * hidden folder, meta.yaml last, then renamed in: readers never see half a run (MLflow skips
 * folders without meta.yaml) and a failed export leaves the earlier one as it was. Metrics keep
 * every attempt's values in (attempt, step) order: MLflow allows repeated steps. MLflow keys are
 * [A-Za-z0-9_.- /] as normalized relative paths (':' too, not on Windows): other bytes become
 * '_', and a key that then clashes with another (or needs it as a folder) gets '/' -> '_' and a
 * "_N" suffix, listed in artifacts/dtrain_renamed_keys.tsv. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include "cli/cli_runs.h"
#include "core/file.h"
#include "core/fsmode.h"
#include "dtrain/dtrain.h"

enum { KEY_MAX = 240, PARAM_MAX = 6000, TAG_MAX = 8000 }; /* MLflow's (250 less a suffix) */

typedef struct ctx {
    char err[PATH_MAX + 256];
    char run[PATH_MAX]; /* the hidden run folder being written */
    dt_runs_kv used;    /* MLflow names taken in the folder being written (value: dtrain key) */
    dt_runs_kv renamed; /* "folder<TAB>dtrain key" -> MLflow name */
    FILE *mf;           /* the metric file being written, of dtrain key mkey */
    char mkey[1024], mpath[PATH_MAX];
    int bad;
} ctx;

static int fail(ctx *c, const char *path, const char *what) {
    if (!c->bad) snprintf(c->err, sizeof c->err, "%s: %s (%s)", path, what, strerror(errno));
    c->bad = 1;
    return -1;
}

/* out (PATH_MAX bytes) = the formatted path; too long is an error. */
static int pathf(ctx *c, char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    if (n >= 0 && n < PATH_MAX) return 0;
    errno = ENAMETOOLONG;
    return fail(c, out, "path too long");
}

static int mkdirs(ctx *c, const char *path) { /* mkdir -p */
    char p[PATH_MAX];
    if (!*path) return errno = ENOENT, fail(c, "\"\"", "cannot create the folder");
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char was = *s;
        struct stat st;
        *s = 0;
        if (mkdir(p, DT_DIR_MODE) != 0 &&
            (errno != EEXIST || stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
            if (errno == EEXIST) errno = ENOTDIR;
            return fail(c, p, "cannot create the folder");
        }
        if (!(*s = was)) return 0;
    }
}

/* Opens `path` for writing, making its folders (a key with '/' is a folder in MLflow). */
static FILE *create(ctx *c, char *path) {
    char *slash = strrchr(path, '/');
    *slash = 0;
    int bad = mkdirs(c, path);
    *slash = '/';
    FILE *f = bad ? NULL : dt_fcreate(path, "w");
    if (!f && !bad) fail(c, path, "cannot create the file");
    return f;
}

static int finish(ctx *c, FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return fail(c, path, "write failed");
    return 0;
}

static int put(ctx *c, char *path, const char *data, size_t n) {
    FILE *f = create(c, path);
    if (!f) return -1;
    fwrite(data, 1, n, f);
    return finish(c, f, path);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}
static void rm_tree(const char *p) {
    nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* At most `max` bytes, not cutting a UTF-8 sequence (MLflow truncates longer values too). */
static size_t clip(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80) max--;
    return max;
}

static int clash(const char *a, const char *b) { /* equal, or one is a folder of the other */
    size_t na = strlen(a), nb = strlen(b), n = na < nb ? na : nb;
    return !strncmp(a, b, n) && (na == nb || (na > nb ? a : b)[n] == '/');
}

/* The MLflow name (out: KEY_MAX + 16 bytes) of dtrain key `key` in the folder being written. */
static const char *claim(ctx *c, const char *folder, const char *key, char *out) {
    int o = 0;
    for (const char *s = key; *s && o < KEY_MAX; s++) {
        if (*s == '/' && (o == 0 || out[o - 1] == '/')) continue; /* no empty components */
        out[o++] = isalnum((unsigned char)*s) || strchr("_.- /", *s) ? *s : '_';
    }
    while (o > 0 && out[o - 1] == '/') o--;
    out[o] = 0;
    if (!o) strcpy(out, "_");
    for (char *p = out; p; p = strchr(p, '/') ? strchr(p, '/') + 1 : NULL) /* no . .. ..x/ */
        if (p[0] == '.' &&
            (!p[1] || p[1] == '/' || (p[1] == '.' && (p == out || !p[2] || p[2] == '/'))))
            p[0] = '_';
    char base[KEY_MAX + 1];
    snprintf(base, sizeof base, "%s", out);
    for (int k = 1, hit = 1; hit; k++) {
        hit = 0;
        for (int i = 0; i < c->used.n && !hit; i++) hit = clash(c->used.key[i], out);
        for (char *p = base; hit && *p; p++) *p = *p == '/' ? '_' : *p;
        if (hit) snprintf(out, KEY_MAX + 16, k == 1 ? "%s" : "%s_%d", base, k);
    }
    char what[1200];
    snprintf(what, sizeof what, "%s\t%s", folder, key);
    if (dt_runs_kv_add(&c->used, out, key) != 0 ||
        (strcmp(out, key) && dt_runs_kv_add(&c->renamed, what, out) != 0))
        errno = ENOMEM, fail(c, key, "out of memory");
    return out;
}

static int kv_put(ctx *c, const char *folder, const char *key, const char *v, size_t max) {
    char name[KEY_MAX + 16], path[PATH_MAX];
    claim(c, folder, key, name);
    if (c->bad || pathf(c, path, "%s/%s/%s", c->run, folder, name)) return -1;
    return put(c, path, v, clip(v, max));
}
static int param_cb(void *ud, const char *k, const char *v) {
    return kv_put(ud, "params", k, v, PARAM_MAX) != 0;
}
static int tag_cb(void *ud, const char *k, const char *v) {
    return kv_put(ud, "tags", k, v, TAG_MAX) != 0;
}
static int lineage_cb(void *ud, const char *k, const char *v) {
    char key[1100];
    snprintf(key, sizeof key, "dtrain.%s", k);
    return tag_cb(ud, strcmp(k, "code_version") ? key : "mlflow.source.git.commit", v);
}

static int metric_cb(void *ud, const dt_track_metric_row *m) {
    ctx *c = ud;
    if (!c->mf || strcmp(c->mkey, m->key)) { /* rows come grouped by key */
        char name[KEY_MAX + 16];
        if (c->mf && finish(c, c->mf, c->mpath)) return c->mf = NULL, 1;
        snprintf(c->mkey, sizeof c->mkey, "%s", m->key);
        claim(c, "metrics", m->key, name);
        if (c->bad || pathf(c, c->mpath, "%s/metrics/%s", c->run, name)) return c->mf = NULL, 1;
        if (!(c->mf = create(c, c->mpath))) return 1;
    }
    char v[40];
    snprintf(v, sizeof v, isnan(m->value) ? "nan" : "%.17g", m->value); /* exact doubles */
    fprintf(c->mf, "%lld %s %lld\n", (long long)llround(m->wall * 1000), v, (long long)m->step);
    return 0;
}

static int artifact_cb(void *ud, const dt_track_artifact_row *a) {
    if (a->removed > 0) return 0; /* the list names what exists */
    fprintf(ud, "%s\t%lld\t%d\t%s\t%s\n", a->kind, (long long)a->step, a->attempt, a->uri,
            a->metrics_json);
    return 0;
}

/* A YAML double-quoted scalar: any name reads back through PyYAML's safe_load. */
static void yaml_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputs("\"\n", f);
}

/* The `name:` of a meta.yaml as PyYAML (MLflow) or yaml_str writes it: plain, 'single' or
 * "double" quoted, on one line (longer names that PyYAML folds are not found: a new experiment). */
static int yaml_name(const char *path, char *out, size_t n) {
    FILE *f = NULL;
    dt_file_fopen_regular(path, "r", &f); /* none: a new experiment */
    char line[2048];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "name: ", 6)) continue;
        char *s = line + 6, q = *s == '"' || *s == '\'' ? *s++ : 0;
        size_t o = 0;
        for (; *s && *s != '\n' && o + 1 < n; s++) {
            if (q && *s == q && !(q == '\'' && s[1] == '\'')) break;
            if (q == '\'' && *s == '\'')
                s++;                                   /* '' is ' */
            else if (q == '"' && *s == '\\' && s[1]) { /* \xNN, \n, \t, \" ... */
                char hex[3] = {s[2], s[2] ? s[3] : 0, 0};
                if (*++s == 'x' && isxdigit((unsigned char)hex[0]) &&
                    isxdigit((unsigned char)hex[1])) {
                    out[o++] = (char)strtol(hex, NULL, 16), s += 2;
                    continue;
                }
                if (*s == 'n' || *s == 't') *s = *s == 'n' ? '\n' : '\t';
            }
            out[o++] = *s;
        }
        while (!q && o > 0 && out[o - 1] == ' ') o--;
        out[o] = 0, found = 1;
    }
    if (f) fclose(f);
    return found;
}

/* file:// URI of an absolute path, percent-encoded as MLflow's (pathlib's as_uri) is. */
static void file_uri(char *out, size_t n, const char *path) {
    size_t o = snprintf(out, n, "file://");
    for (const unsigned char *p = (const unsigned char *)path; *p && o + 4 < n; p++)
        o += (size_t)snprintf(out + o, n - o, isalnum(*p) || strchr("-._~/", *p) ? "%c" : "%%%02X",
                              *p);
}

/* root/id/meta.yaml, written whole then renamed in. */
static int new_experiment(ctx *c, const char *root, const char *id, const char *name) {
    char dir[PATH_MAX], tmp[PATH_MAX], fin[PATH_MAX], uri[3 * PATH_MAX];
    if (pathf(c, dir, "%s/%s", root, id) || pathf(c, tmp, "%s/.meta.yaml.%d", dir, (int)getpid()) ||
        pathf(c, fin, "%s/meta.yaml", dir))
        return -1;
    FILE *f = create(c, tmp);
    if (!f) return -1;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long long ms = (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    file_uri(uri, sizeof uri, dir);
    fprintf(f, "artifact_location: %s\ncreation_time: %lld\nexperiment_id: '%s'\n", uri, ms, id);
    fprintf(f, "last_update_time: %lld\nlifecycle_stage: active\nname: ", ms);
    yaml_str(f, name);
    if (finish(c, f, tmp) || (rename(tmp, fin) != 0 && fail(c, fin, "cannot write")))
        return remove(tmp), -1;
    return 0;
}

/* The id of DIR's experiment `name`, else of a new one numbered from the name (MLflow's ids are
 * integers too). An empty DIR first gets the "Default" experiment 0, as MLflow makes one. */
static int experiment(ctx *c, const char *root, const char *name, char id[64]) {
    DIR *d = opendir(root);
    if (!d) return fail(c, root, "cannot read the folder");
    int entries = 0, found = 0;
    char path[PATH_MAX], got[1024];
    for (struct dirent *e; !found && (e = readdir(d));) {
        entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        if (e->d_name[0] == '.' || strlen(e->d_name) >= 64) continue;
        if (!pathf(c, path, "%s/%s/meta.yaml", root, e->d_name) &&
            yaml_name(path, got, sizeof got) && !strcmp(got, name))
            memcpy(id, e->d_name, strlen(e->d_name) + 1), found = 1;
    }
    closedir(d);
    if (found || c->bad) return c->bad ? -1 : 0;
    if (!entries && (new_experiment(c, root, "0", "Default") || pathf(c, path, "%s/.trash", root) ||
                     mkdirs(c, path)))
        return -1;
    if (!entries && !strcmp(name, "Default")) return snprintf(id, 64, "0"), 0;
    unsigned long long v =
        100000000000000000ULL + XXH3_64bits(name, strlen(name)) % 900000000000000000ULL;
    struct stat st;
    do snprintf(id, 64, "%llu", v++);
    while (!pathf(c, path, "%s/%s", root, id) && stat(path, &st) == 0);
    return c->bad ? -1 : new_experiment(c, root, id, name);
}

/* Moves every earlier export of run `rid` out of the way (in any experiment, .trash too): the
 * one in experiment `eid` to `old`, the others are removed. */
static void set_aside(ctx *c, const char *root, const char *eid, const char *rid, const char *old) {
    for (int trash = 0; trash < 2; trash++) {
        char dir[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
        DIR *d = pathf(c, dir, trash ? "%s/.trash" : "%s", root) ? NULL : opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));) {
            struct stat st;
            if (e->d_name[0] == '.' || pathf(c, p, "%s/%s/%s", dir, e->d_name, rid) ||
                stat(p, &st) != 0 || pathf(c, q, "%s/%s/.%s.gone", dir, e->d_name, rid))
                continue;
            if (!trash && !strcmp(e->d_name, eid)) snprintf(q, sizeof q, "%s", old);
            rm_tree(q);
            if (rename(p, q) == 0 && strcmp(q, old)) rm_tree(q);
        }
        if (d) closedir(d);
    }
}

static int write_run(ctx *c, dt_track *s, const dt_track_run *r, const char *fin, const char *eid,
                     const char *rid, const char *store) {
    char p[PATH_MAX], uri[3 * PATH_MAX], num[3][32];
    /* MLflow's own tags first, so that a run's tag of the same name is the one renamed */
    snprintf(num[0], 32, "%lld", (long long)r->id);
    snprintf(num[1], 32, "%d", r->attempts);
    snprintf(num[2], 32, "%d", r->world);
    const char *sys[][2] = {{"mlflow.runName", r->name},
                            {"mlflow.source.name", "dtrain"},
                            {"dtrain.store", store},
                            {"dtrain.run_id", num[0]},
                            {"dtrain.status", r->status},
                            {"dtrain.attempts", num[1]},
                            {"dtrain.world_size", num[2]},
                            {"dtrain.hosts", r->hosts},
                            {"dtrain.exit_reason", r->exit_reason}};
    for (int i = 0; i < 9 && !c->bad; i++) /* no empty exit_reason of a running run */
        if (*sys[i][1]) tag_cb(c, sys[i][0], sys[i][1]);
    dt_status st = c->bad ? DT_OK : dt_track_lineage(s, r->id, lineage_cb, c);
    if (st == DT_OK && !c->bad) st = dt_track_tags(s, r->id, tag_cb, c);
    dt_runs_kv_free(&c->used); /* each folder has its own names */
    if (st == DT_OK && !c->bad) st = dt_track_params(s, r->id, param_cb, c);
    dt_runs_kv_free(&c->used);
    if (st == DT_OK && !c->bad) st = dt_track_metrics(s, r->id, NULL, metric_cb, c);
    if (c->mf) finish(c, c->mf, c->mpath), c->mf = NULL;
    FILE *f = NULL;
    if (st == DT_OK && !c->bad && !pathf(c, p, "%s/artifacts/dtrain_artifacts.tsv", c->run) &&
        (f = create(c, p))) {
        fprintf(f, "kind\tstep\tattempt\turi\tmetrics\n");
        st = dt_track_artifacts(s, r->id, artifact_cb, f);
        finish(c, f, p);
    }
    char *yaml = NULL;
    if (st == DT_OK && !c->bad) st = dt_track_config_yaml(s, r->id, &yaml);
    if (st == DT_OK && yaml && *yaml && !pathf(c, p, "%s/artifacts/config.yaml", c->run))
        put(c, p, yaml, strlen(yaml));
    free(yaml);
    if (st == DT_OK && !c->bad && c->renamed.n &&
        !pathf(c, p, "%s/artifacts/dtrain_renamed_keys.tsv", c->run) && (f = create(c, p))) {
        fprintf(f, "folder\tdtrain key\tmlflow key\n");
        for (int i = 0; i < c->renamed.n; i++)
            fprintf(f, "%s\t%s\n", c->renamed.key[i], c->renamed.value[i]);
        finish(c, f, p);
    }
    if (st != DT_OK && !c->bad) snprintf(c->err, sizeof c->err, "%s", dt_last_error()), c->bad = 1;
    /* a run without metrics or params still has the folders MLflow checks for */
    const char *sub[] = {"metrics", "params", "artifacts"};
    for (int i = 0; i < 3 && !c->bad; i++)
        if (!pathf(c, p, "%s/%s", c->run, sub[i])) mkdirs(c, p);
    if (c->bad || pathf(c, p, "%s/meta.yaml", c->run) || !(f = create(c, p))) return -1;
    /* MLflow's RunStatus: RUNNING 1, FINISHED 3, FAILED 4, KILLED 5; a "running" run whose
     * process is gone (lost) was killed, and so was a preempted one */
    int code = !strcmp(r->status, "done")                  ? 3
               : !strcmp(r->status, "failed")              ? 4
               : !strcmp(r->status, "running") && !r->lost ? 1
                                                           : 5;
    file_uri(uri, sizeof uri, fin);
    fprintf(f, "artifact_uri: %s/artifacts\nend_time: ", uri);
    if (r->end_time > 0)
        fprintf(f, "%lld\n", (long long)llround(r->end_time * 1000));
    else
        fprintf(f, "null\n");
    fprintf(f, "entry_point_name: ''\nexperiment_id: '%s'\nlifecycle_stage: active\n", eid);
    fprintf(f, "run_id: %s\nrun_name: ", rid);
    yaml_str(f, r->name);
    fprintf(f, "source_name: ''\nsource_type: 4\nsource_version: ''\nstart_time: %lld\n",
            (long long)llround(r->start_time * 1000));
    fprintf(f, "status: %d\ntags: []\nuser_id: unknown\n", code);
    return finish(c, f, p);
}

int dt_runs_export_mlflow(dt_track *s, const char *ref, const char *out_dir) {
    ctx c = {0};
    dt_track_run r;
    if (dt_track_run_find(s, ref, &r) != DT_OK) {
        fprintf(stderr, "dtrain runs export: %s\n", dt_last_error());
        return 1;
    }
    char root[PATH_MAX], store[PATH_MAX], eid[64], rid[33], seed[PATH_MAX + 600];
    char fin[PATH_MAX], old[PATH_MAX];
    if (!mkdirs(&c, out_dir) && !realpath(out_dir, root)) fail(&c, out_dir, "cannot resolve");
    if (!c.bad && !experiment(&c, root, r.experiment, eid)) {
        if (!realpath(dt_track_path(s), store))
            snprintf(store, sizeof store, "%s", dt_track_path(s));
        /* the same run of the same store is the same MLflow run, whatever the export */
        snprintf(seed, sizeof seed, "%s\n%lld\n%s\n%s", store, (long long)r.id, r.experiment,
                 r.name);
        XXH128_hash_t h = XXH3_128bits(seed, strlen(seed));
        snprintf(rid, sizeof rid, "%016llx%016llx", (unsigned long long)h.high64,
                 (unsigned long long)h.low64);
        if (!pathf(&c, c.run, "%s/%s/.%s.tmp%d", root, eid, rid, (int)getpid()) &&
            !pathf(&c, fin, "%s/%s/%s", root, eid, rid) &&
            !pathf(&c, old, "%s/%s/.%s.old%d", root, eid, rid, (int)getpid())) {
            rm_tree(c.run);
            if (!write_run(&c, s, &r, fin, eid, rid, store)) {
                set_aside(&c, root, eid, rid, old);
                if (rename(c.run, fin) != 0) /* the earlier export goes back */
                    fail(&c, fin, "cannot move the run into place"), rename(old, fin);
                rm_tree(old);
            }
            if (c.bad) rm_tree(c.run);
        }
    }
    if (!c.bad)
        printf("mlflow run %s of experiment %s (%s): %s\n", rid, eid, r.experiment, fin);
    else
        fprintf(stderr, "dtrain runs export: %s\n", c.err);
    dt_runs_kv_free(&c.used), dt_runs_kv_free(&c.renamed);
    return c.bad ? 1 : 0;
}
