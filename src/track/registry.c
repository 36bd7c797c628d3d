/* The model registry in the experiment store (include/dtrain/registry.h): registering a
 * version (one BEGIN IMMEDIATE transaction: the number, the snapshots of the run, the file
 * list and its hash), aliases, and reading versions back. The file checks are in
 * registry_verify.c. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include "core/bytes.h"
#include "core/file.h"
#include "dtrain/registry.h"
#include "track/track_impl.h"

enum { NAME_MAX_LEN = 128, ALIAS_MAX_LEN = 64, MAX_FILES = 100000 };

static int name_chars_ok(const char *s, size_t max) {
    size_t n = s ? strlen(s) : 0;
    if (!n || n > max) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return 0;
    return 1;
}

static int all_digits(const char *s) {
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

static dt_status check_name(const char *name) {
    if (!name_chars_ok(name, NAME_MAX_LEN))
        return dt_error_set(DT_ERR_INVALID,
                            "model name '%s': use 1-%d letters, digits, '.', '_' or '-'",
                            name ? name : "", NAME_MAX_LEN);
    return DT_OK;
}

void dt_registry_version_free(dt_registry_version *v) {
    if (!v) return;
    free(v->lineage_json), free(v->params_json), free(v->metrics_json), free(v->files_json);
    v->lineage_json = v->params_json = v->metrics_json = v->files_json = NULL;
}

/* ---- registering ----------------------------------------------------------------------------- */

typedef struct reg_args {
    const dt_registry_source *src;
    char path[PATH_MAX];
    int version;
} reg_args;

static const char *col_text(sqlite3_stmt *q, int i) {
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? (const char *)t : "";
}

/* {key: value} of "SELECT key, value ... WHERE run_id = ?1" (text values), into o. */
static dt_status kv_object(dt_track *s, const char *sql, int64_t run, cJSON *o) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(s, sql, &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, run);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        cJSON_AddStringToObject(o, col_text(q, 0), col_text(q, 1));
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? DT_OK : dt_trk_fail(s, "cannot read the run for the registry");
}

/* The final value of each metric of the run (latest attempt, highest step), into o. */
static dt_status final_metrics(dt_track *s, int64_t run, cJSON *o) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(s,
                                  "SELECT key, value FROM metrics WHERE run_id = ?1"
                                  " ORDER BY key, attempt, step, rowid",
                                  &q);
    if (st != DT_OK) return st;
    sqlite3_bind_int64(q, 1, run);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        cJSON *v = sqlite3_column_type(q, 1) == SQLITE_NULL
                       ? cJSON_CreateNull()
                       : cJSON_CreateNumber(sqlite3_column_double(q, 1));
        if (cJSON_GetObjectItemCaseSensitive(o, col_text(q, 0)))
            cJSON_ReplaceItemInObjectCaseSensitive(o, col_text(q, 0), v);
        else
            cJSON_AddItemToObject(o, col_text(q, 0), v);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? DT_OK : dt_trk_fail(s, "cannot read the run's metrics");
}

static int add_param(void *ud, const char *key, const char *value) {
    return !cJSON_AddStringToObject(ud, key, value);
}

static int by_file_name(const void *a, const void *b) {
    return strcmp(((const dt_registry_file *)a)->name, ((const dt_registry_file *)b)->name);
}

/* The files sorted by name as a JSON array, and the content hash: xxh3-64 of one line
 * "name\tbytes\txxh3\n" per file in that order. */
static dt_status files_snapshot(reg_args *a, char **json, char hash[17]) {
    const dt_registry_source *src = a->src;
    dt_registry_file *f = malloc((size_t)src->n_files * sizeof *f);
    XXH3_state_t *h = XXH3_createState();
    cJSON *arr = cJSON_CreateArray();
    dt_status st = f && h && arr && XXH3_64bits_reset(h) == XXH_OK
                       ? DT_OK
                       : dt_error_set(DT_ERR_NOMEM, "registry: out of memory");
    if (st == DT_OK) memcpy(f, src->files, (size_t)src->n_files * sizeof *f);
    if (st == DT_OK) qsort(f, (size_t)src->n_files, sizeof *f, by_file_name);
    for (int i = 0; st == DT_OK && i < src->n_files; i++) {
        if (i && !strcmp(f[i].name, f[i - 1].name)) {
            st = dt_error_set(DT_ERR_INVALID, "model %s: file %s listed twice", src->name,
                              f[i].name);
            break;
        }
        char hex[17], line[PATH_MAX + 64];
        dt_hex64(f[i].xxh3, hex);
        int n = snprintf(line, sizeof line, "%s\t%" PRId64 "\t%s\n", f[i].name, f[i].bytes, hex);
        XXH3_64bits_update(h, line, (size_t)n);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", f[i].name);
        cJSON_AddNumberToObject(e, "bytes", (double)f[i].bytes);
        cJSON_AddStringToObject(e, "xxh3", hex);
        cJSON_AddItemToArray(arr, e);
    }
    if (st == DT_OK) {
        dt_hex64(XXH3_64bits_digest(h), hash);
        *json = cJSON_PrintUnformatted(arr);
        if (!*json) st = dt_error_set(DT_ERR_NOMEM, "registry: out of memory");
    }
    cJSON_Delete(arr);
    XXH3_freeState(h);
    free(f);
    return st;
}

/* Each file is a plain name in the folder, a regular file of its recorded size. */
static dt_status check_files(reg_args *a) {
    const dt_registry_source *src = a->src;
    if (src->n_files < 1 || src->n_files > MAX_FILES || !src->files)
        return dt_error_set(DT_ERR_INVALID, "model %s: %s: no files to register", src->name,
                            a->path);
    for (int i = 0; i < src->n_files; i++) {
        const dt_registry_file *f = &src->files[i];
        if (!f->name || !dt_plain_name(f->name))
            return dt_error_set(DT_ERR_INVALID, "model %s: '%s' is not a file name of %s",
                                src->name, f->name ? f->name : "", a->path);
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", a->path, f->name);
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
            return dt_error_set(DT_ERR_NOTFOUND, "model %s: %s: missing", src->name, p);
        if ((int64_t)sb.st_size != f->bytes)
            return dt_error_set(DT_ERR_FORMAT, "model %s: %s: %lld bytes, expected %" PRId64,
                                src->name, p, (long long)sb.st_size, f->bytes);
    }
    return DT_OK;
}

static char *print_or_empty(cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    return t ? t : strdup("{}");
}

static dt_status register_tx(dt_track *s, void *ud) {
    reg_args *a = ud;
    const dt_registry_source *src = a->src;
    double now = dt_track_wall();
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(
        s, "INSERT OR IGNORE INTO registered_models(name, created, description) VALUES(?1, ?2, ?3)",
        &q);
    if (st != DT_OK) return st;
    sqlite3_bind_text(q, 1, src->name, -1, SQLITE_STATIC);
    sqlite3_bind_double(q, 2, now);
    dt_trk_bind_text(q, 3, src->description);
    if ((st = dt_trk_step_done(s, q, "cannot add the model")) != DT_OK) return st;
    if ((st = dt_trk_prepare(s,
                             "SELECT COALESCE(MAX(version), 0) FROM model_versions WHERE name = ?1",
                             &q)) != DT_OK)
        return st;
    sqlite3_bind_text(q, 1, src->name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    a->version = rc == SQLITE_ROW ? sqlite3_column_int(q, 0) + 1 : 0;
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW) return dt_trk_fail(s, "cannot number the version");
    /* snapshots of the run: what the version came from, kept if the run changes or goes */
    char run[520] = "";
    cJSON *lin = cJSON_CreateObject(), *par = cJSON_CreateObject(), *met = NULL;
    if (src->run_id > 0) {
        if ((st = dt_trk_prepare(s,
                                 "SELECT e.name || '/' || r.name FROM runs r JOIN experiments e"
                                 " ON e.id = r.experiment_id WHERE r.id = ?1",
                                 &q)) != DT_OK)
            goto out;
        sqlite3_bind_int64(q, 1, src->run_id);
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) snprintf(run, sizeof run, "%s", col_text(q, 0));
        sqlite3_finalize(q);
        if (rc != SQLITE_ROW) {
            st = rc == SQLITE_DONE ? dt_error_set(DT_ERR_NOTFOUND, "model %s: no run %lld in %s",
                                                  src->name, (long long)src->run_id, s->path)
                                   : dt_trk_fail(s, "cannot read the run");
            goto out;
        }
        if ((st = kv_object(s, "SELECT key, value FROM lineage WHERE run_id = ?1 ORDER BY key",
                            src->run_id, lin)) != DT_OK ||
            (!src->config_yaml &&
             (st = kv_object(s, "SELECT key, value FROM params WHERE run_id = ?1 ORDER BY key",
                             src->run_id, par)) != DT_OK))
            goto out;
    }
    if (src->config_yaml && (st = dt_track_flatten_yaml(src->config_yaml, add_param, par)) != DT_OK)
        goto out;
    if (src->metrics_json && src->metrics_json[0]) {
        met = cJSON_Parse(src->metrics_json);
        if (!cJSON_IsObject(met)) {
            st = dt_error_set(DT_ERR_INVALID, "model %s: the metrics are not a JSON object",
                              src->name);
            goto out;
        }
    } else {
        met = cJSON_CreateObject();
        if (src->run_id > 0 && (st = final_metrics(s, src->run_id, met)) != DT_OK) goto out;
    }
    char *files = NULL, hash[17], *lt = print_or_empty(lin), *pt = print_or_empty(par),
         *mt = print_or_empty(met);
    if ((st = files_snapshot(a, &files, hash)) == DT_OK &&
        (st = dt_trk_prepare(s,
                             "INSERT INTO model_versions(name, version, run_id, run, uri, step,"
                             " created, content_hash, files, lineage, params, metrics)"
                             " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                             &q)) == DT_OK) {
        sqlite3_bind_text(q, 1, src->name, -1, SQLITE_STATIC);
        sqlite3_bind_int(q, 2, a->version);
        if (src->run_id > 0)
            sqlite3_bind_int64(q, 3, src->run_id);
        else
            sqlite3_bind_null(q, 3);
        sqlite3_bind_text(q, 4, run, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 5, a->path, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 6, src->step);
        sqlite3_bind_double(q, 7, now);
        sqlite3_bind_text(q, 8, hash, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 9, files, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 10, lt, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 11, pt, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 12, mt, -1, SQLITE_STATIC);
        st = dt_trk_step_done(s, q, "cannot write the model version");
    }
    free(files), free(lt), free(pt), free(mt);
out:
    cJSON_Delete(lin), cJSON_Delete(par), cJSON_Delete(met);
    return st;
}

dt_status dt_registry_register(dt_track *s, const dt_registry_source *src, int *version) {
    if (version) *version = 0;
    if (!s || !src) return dt_error_set(DT_ERR_INVALID, "registry: no store or source");
    dt_status st = check_name(src->name);
    if (st != DT_OK) return st;
    reg_args a = {.src = src};
    if (!src->path || !src->path[0] || !realpath(src->path, a.path))
        return dt_error_set(DT_ERR_NOTFOUND, "model %s: %s: no such folder", src->name,
                            src->path ? src->path : "");
    if ((st = check_files(&a)) != DT_OK) return st;
    if ((st = dt_trk_tx(s, "cannot register the model", register_tx, &a)) != DT_OK) return st;
    if (version) *version = a.version;
    return DT_OK;
}

/* ---- aliases --------------------------------------------------------------------------------- */

typedef struct alias_args {
    const char *name, *alias;
    int version;
} alias_args;

static dt_status alias_set_tx(dt_track *s, void *ud) {
    alias_args *a = ud;
    sqlite3_stmt *q;
    dt_status st = dt_trk_prepare(
        s, "SELECT COUNT(*) FROM model_versions WHERE name = ?1 AND version = ?2", &q);
    if (st != DT_OK) return st;
    sqlite3_bind_text(q, 1, a->name, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, a->version);
    int rc = sqlite3_step(q), n = rc == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW) return dt_trk_fail(s, "cannot read model versions");
    if (!n)
        return dt_error_set(DT_ERR_NOTFOUND, "model %s has no version %d in %s", a->name,
                            a->version, s->path);
    if ((st = dt_trk_prepare(s,
                             "INSERT OR REPLACE INTO model_aliases(name, alias, version, updated)"
                             " VALUES(?1, ?2, ?3, ?4)",
                             &q)) != DT_OK)
        return st;
    sqlite3_bind_text(q, 1, a->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, a->alias, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 3, a->version);
    sqlite3_bind_double(q, 4, dt_track_wall());
    return dt_trk_step_done(s, q, "cannot set the alias");
}

static dt_status check_alias(const char *alias) {
    if (!name_chars_ok(alias, ALIAS_MAX_LEN) || all_digits(alias) || !strcmp(alias, "latest"))
        return dt_error_set(DT_ERR_INVALID,
                            "alias '%s': use 1-%d letters, digits, '.', '_' or '-', not all "
                            "digits and not 'latest' (those name versions)",
                            alias ? alias : "", ALIAS_MAX_LEN);
    return DT_OK;
}

dt_status dt_registry_alias_set(dt_track *s, const char *name, int version, const char *alias) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "registry: no store");
    dt_status st = check_name(name);
    if (st == DT_OK) st = check_alias(alias);
    if (st != DT_OK) return st;
    alias_args a = {.name = name, .alias = alias, .version = version};
    return dt_trk_tx(s, "cannot set the alias", alias_set_tx, &a);
}

static dt_status alias_remove_tx(dt_track *s, void *ud) {
    alias_args *a = ud;
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prepare(s, "DELETE FROM model_aliases WHERE name = ?1 AND alias = ?2", &q);
    if (st != DT_OK) return st;
    sqlite3_bind_text(q, 1, a->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, a->alias, -1, SQLITE_STATIC);
    if ((st = dt_trk_step_done(s, q, "cannot remove the alias")) != DT_OK) return st;
    if (!sqlite3_changes(s->db))
        return dt_error_set(DT_ERR_NOTFOUND, "model %s has no alias '%s' in %s", a->name, a->alias,
                            s->path);
    return DT_OK;
}

dt_status dt_registry_alias_remove(dt_track *s, const char *name, const char *alias) {
    if (!s || !name || !alias) return dt_error_set(DT_ERR_INVALID, "registry: no store or name");
    alias_args a = {.name = name, .alias = alias};
    return dt_trk_tx(s, "cannot remove the alias", alias_remove_tx, &a);
}

/* ---- reading --------------------------------------------------------------------------------- */

typedef struct cb_pair {
    void *cb, *ud;
} cb_pair;

static int model_row(sqlite3_stmt *q, void *ud) {
    cb_pair *p = ud;
    dt_registry_model m = {.name = col_text(q, 0),
                           .description = col_text(q, 1),
                           .created = sqlite3_column_double(q, 2),
                           .versions = sqlite3_column_int(q, 3),
                           .latest = sqlite3_column_int(q, 4)};
    return ((dt_registry_model_cb)p->cb)(p->ud, &m);
}

dt_status dt_registry_models(dt_track *s, dt_registry_model_cb cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prep(s,
                               "SELECT m.name, m.description, m.created, COUNT(v.version),"
                               " COALESCE(MAX(v.version), 0) FROM registered_models m"
                               " LEFT JOIN model_versions v ON v.name = m.name"
                               " GROUP BY m.name ORDER BY m.name",
                               &q);
    if (st != DT_OK) return st;
    cb_pair p = {(void *)cb, ud};
    return dt_trk_each_row(s, q, model_row, &p);
}

#define VERSION_COLS                                                                               \
    "SELECT v.name, v.version, v.run_id, v.run, v.uri, v.step, v.created, v.content_hash,"         \
    " v.lineage, v.params, v.metrics, v.files,"                                                    \
    " (SELECT group_concat(alias, ',') FROM (SELECT alias FROM model_aliases a"                    \
    "  WHERE a.name = v.name AND a.version = v.version ORDER BY alias)),"                          \
    " EXISTS(SELECT 1 FROM runs r WHERE r.id = v.run_id) FROM model_versions v "

/* The row into *v (strings duplicated); 1 when out of memory. */
static int read_version(sqlite3_stmt *q, dt_registry_version *v) {
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", col_text(q, 0));
    v->version = sqlite3_column_int(q, 1);
    v->run_id = sqlite3_column_int64(q, 2);
    snprintf(v->run, sizeof v->run, "%s", col_text(q, 3));
    snprintf(v->path, sizeof v->path, "%s", col_text(q, 4));
    v->step = sqlite3_column_type(q, 5) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 5);
    v->created = sqlite3_column_double(q, 6);
    snprintf(v->hash, sizeof v->hash, "%s", col_text(q, 7));
    v->lineage_json = strdup(col_text(q, 8));
    v->params_json = strdup(col_text(q, 9));
    v->metrics_json = strdup(col_text(q, 10));
    v->files_json = strdup(col_text(q, 11));
    snprintf(v->aliases, sizeof v->aliases, "%s", col_text(q, 12));
    v->run_exists = sqlite3_column_int(q, 13);
    return !v->lineage_json || !v->params_json || !v->metrics_json || !v->files_json;
}

typedef struct version_state {
    dt_registry_version_cb cb;
    void *ud;
    dt_registry_version *out; /* resolve: the one row */
    int n, nomem;
} version_state;

static int version_row(sqlite3_stmt *q, void *ud) {
    version_state *vs = ud;
    dt_registry_version v;
    vs->n++;
    if (read_version(q, &v)) {
        dt_registry_version_free(&v);
        vs->nomem = 1;
        return 1;
    }
    if (vs->out) {
        *vs->out = v;
        return 1;
    }
    int stop = vs->cb(vs->ud, &v);
    dt_registry_version_free(&v);
    return stop;
}

dt_status dt_registry_versions(dt_track *s, const char *name, dt_registry_version_cb cb, void *ud) {
    sqlite3_stmt *q;
    dt_status st = dt_trk_prep(
        s, VERSION_COLS "WHERE ?1 IS NULL OR v.name = ?1 ORDER BY v.name, v.version", &q);
    if (st != DT_OK) return st;
    dt_trk_bind_text(q, 1, name);
    version_state vs = {.cb = cb, .ud = ud};
    st = dt_trk_each_row(s, q, version_row, &vs);
    if (st == DT_OK && vs.nomem) st = dt_error_set(DT_ERR_NOMEM, "registry: out of memory");
    return st;
}

/* The version number `ref`'s suffix names: a number, "latest" (or none), or an alias. */
static dt_status ref_version(dt_track *s, const char *name, const char *at, const char *ref,
                             int *version) {
    int by_alias = at && at[0] && !all_digits(at) && strcmp(at, "latest");
    if (at && at[0] && all_digits(at)) {
        *version = atoi(at);
        return DT_OK;
    }
    sqlite3_stmt *q;
    dt_status st =
        dt_trk_prep(s,
                    by_alias ? "SELECT version FROM model_aliases WHERE name = ?1 AND alias = ?2"
                             : "SELECT MAX(version) FROM model_versions WHERE name = ?1",
                    &q);
    if (st != DT_OK) return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
    if (by_alias) sqlite3_bind_text(q, 2, at, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    *version = rc == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_mu);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dt_trk_fail(s, "cannot read model versions");
    if (*version <= 0)
        return dt_error_set(DT_ERR_NOTFOUND, "model '%s': %s in %s", ref,
                            by_alias ? "no such alias" : "no such model (no versions)", s->path);
    return DT_OK;
}

dt_status dt_registry_resolve(dt_track *s, const char *ref, dt_registry_version *out) {
    memset(out, 0, sizeof *out);
    if (!s || !ref) return dt_error_set(DT_ERR_INVALID, "registry: no store or reference");
    char name[NAME_MAX_LEN + 2];
    const char *at = strchr(ref, '@');
    size_t n = at ? (size_t)(at - ref) : strlen(ref);
    if (n >= sizeof name || (at && !at[1]))
        return dt_error_set(DT_ERR_INVALID,
                            "model '%s': give NAME, NAME@VERSION, NAME@ALIAS or NAME@latest", ref);
    memcpy(name, ref, n);
    name[n] = '\0';
    dt_status st = check_name(name);
    if (st != DT_OK) return st;
    int version;
    if ((st = ref_version(s, name, at ? at + 1 : NULL, ref, &version)) != DT_OK) return st;
    sqlite3_stmt *q;
    if ((st = dt_trk_prep(s, VERSION_COLS "WHERE v.name = ?1 AND v.version = ?2", &q)) != DT_OK)
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(q, 2, version);
    version_state vs = {.out = out};
    st = dt_trk_each_row(s, q, version_row, &vs);
    if (st == DT_OK && vs.nomem) st = dt_error_set(DT_ERR_NOMEM, "registry: out of memory");
    if (st == DT_OK && !vs.n)
        st = dt_error_set(DT_ERR_NOTFOUND, "model '%s': no version %d of %s in %s", ref, version,
                          name, s->path);
    if (st != DT_OK) dt_registry_version_free(out);
    return st;
}
