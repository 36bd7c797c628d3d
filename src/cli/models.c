/* dtrain models register|ls|show|diff|alias|export|verify|sync [--db PATH | --output-dir DIR]
 * [--json]
 *
 * The model registry (include/dtrain/registry.h) in the experiment store that `dtrain train`
 * writes (default runs/dtrain.db):
 *   register  RUN|CHECKPOINT --name NAME [--description T]: a new version of NAME. RUN (as
 *             `dtrain runs` names runs): its newest recorded checkpoint that is committed and
 *             passes verification; CHECKPOINT: a checkpoint folder (step-*), whose run is the one
 *             that recorded it, if any. The checkpoint is verified (every file's xxh3) first.
 *   ls        models, or the versions of one
 *   show      one version: run, lineage, metrics, aliases, the artefact and its integrity
 *   diff      params, lineage and metrics that differ between two versions
 *   alias     NAME VERSION ALIAS (moves the alias), or --remove NAME ALIAS
 *   export    NAME[@REF] -o DIR [--format hf|peft|merged] [--base DIR] (src/cli/models_show.c)
 *   verify    NAME[@REF]: every file against its registration
 *   sync      [NAME]: versions and aliases without their MLflow twin sent (src/cli/models_mlflow.c)
 * NAME alone is the latest version; NAME@3, NAME@latest and NAME@ALIAS name one. With --json
 * each command prints one JSON object. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/cli_models.h"
#include "dtrain/dtrain.h"
#include "dtrain/sweep.h"

enum { MAX_POS = 8 };

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: dtrain models register RUN|CHECKPOINT|sweep:ID --name NAME [--description T]\n"
        "       dtrain models ls [NAME]\n"
        "       dtrain models show NAME[@REF]\n"
        "       dtrain models diff NAME@REF NAME@REF\n"
        "       dtrain models alias NAME VERSION ALIAS | alias --remove NAME ALIAS\n"
        "       dtrain models export NAME[@REF] -o DIR [--format hf|peft|merged] [--base DIR]\n"
        "       dtrain models verify NAME[@REF]\n"
        "       dtrain models sync [NAME] [--mlflow URI]\n"
        "each with --json (one JSON object on stdout) and --db PATH, or --output-dir DIR for\n"
        "DIR/dtrain.db (default runs/dtrain.db); register, alias and sync with --mlflow URI|off:\n"
        "the MLflow server that gets the version too (default: the run's tracking.uri when\n"
        "it is http(s)://)\n"
        "REF: a version number, latest, or an alias; NAME alone is the latest version.\n"
        "RUN: a run id, EXPERIMENT/NAME or a NAME unique in the store: its newest committed\n"
        "checkpoint that verifies. CHECKPOINT: a checkpoint folder (.../checkpoints/step-N).\n"
        "sweep:ID: the best trial's run of the sweep ID (dtrain sweep --name ID) in the\n"
        "output dir (--output-dir, the folder of --db, or runs).\n"
        "  register  a new, immutable version: the checkpoint's files and their xxh3, the\n"
        "            run's lineage, params and metrics at that step\n"
        "  ls        models (versions, latest, aliases), or the versions of NAME\n"
        "  show      run, lineage, metrics, aliases, the artefact and whether it is intact\n"
        "  diff      the params, lineage and metrics that differ\n"
        "  alias     points ALIAS at VERSION (moving it), or removes it\n"
        "  export    verifies the artefact, then writes DIR: hf (a Hugging Face folder; a\n"
        "            whole model), peft (the adapter) or merged (LoRA checkpoints); --base:\n"
        "            the model folder when the run's model.hf_path is not found from here\n"
        "  verify    re-hashes every file of the version; exit 1 naming each changed one\n"
        "  sync      sends each version (of NAME, or all) and alias that MLflow lacks, e.g.\n"
        "            made before MLflow was used (the run is created there if missing);\n"
        "            exit 1 when one was refused\n"
        "exit status: 0 done, 1 failed (or a changed artefact), 2 usage error\n");
}

void dt_models_print_json(cJSON *o) {
    char *t = cJSON_Print(o);
    if (t) printf("%s\n", t);
    free(t);
    cJSON_Delete(o);
}

void dt_models_time(double t, char *buf, size_t n) {
    time_t s = (time_t)t;
    struct tm tmv;
    gmtime_r(&s, &tmv);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tmv);
}

static cJSON *parsed_or_empty(const char *text, int array) {
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    return o ? o : array ? cJSON_CreateArray() : cJSON_CreateObject();
}

cJSON *dt_models_version_json(const dt_registry_version *v) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", v->name);
    cJSON_AddNumberToObject(o, "version", v->version);
    cJSON_AddItemToObject(o, "run_id",
                          v->run_id ? cJSON_CreateNumber((double)v->run_id) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "run", v->run);
    cJSON_AddBoolToObject(o, "run_exists", v->run_exists);
    cJSON_AddStringToObject(o, "path", v->path);
    cJSON_AddNumberToObject(o, "step", (double)v->step);
    cJSON_AddNumberToObject(o, "created", v->created);
    cJSON_AddStringToObject(o, "hash", v->hash);
    cJSON *al = cJSON_CreateArray();
    char buf[sizeof v->aliases];
    snprintf(buf, sizeof buf, "%s", v->aliases);
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        cJSON_AddItemToArray(al, cJSON_CreateString(t));
    cJSON_AddItemToObject(o, "aliases", al);
    cJSON_AddItemToObject(o, "lineage", parsed_or_empty(v->lineage_json, 0));
    cJSON_AddItemToObject(o, "metrics", parsed_or_empty(v->metrics_json, 0));
    cJSON_AddItemToObject(o, "params", parsed_or_empty(v->params_json, 0));
    cJSON_AddItemToObject(o, "files", parsed_or_empty(v->files_json, 1));
    return o;
}

/* ---- register -------------------------------------------------------------------------------- */

typedef struct reg_opts {
    const char *name, *description;
    const char *sweeps; /* where sweep:ID is looked for: the output dir (runs by default) */
} reg_opts;

/* sweep:ID -> the sweep's best trial's run (its newest verified checkpoint is registered), into
 * run[n]; 0, or -1 with the one line printed. */
static int sweep_best(const char *id, const char *dir, char *run, size_t n) {
    char path[PATH_MAX + 64];
    dt_sweep_result r;
    if (dt_sweep_find(dir, id, path, sizeof path) != DT_OK || dt_sweep_summary(path, &r) != DT_OK) {
        fprintf(stderr, "dtrain models register: sweep:%s: %s\n", id, dt_last_error());
        return -1;
    }
    if (r.best < 0) {
        fprintf(stderr,
                "dtrain models register: sweep:%s: no trial has reported its metric yet (%s)\n", id,
                path);
        return -1;
    }
    fprintf(stderr, "sweep %s: best trial %d, run %s (%.6g)\n", id, r.best, r.best_run,
            r.best_value);
    snprintf(run, n, "%s", r.best_run);
    return 0;
}

static int cmd_register(dt_track *s, const char *ref, const reg_opts *ro, const dt_models_args *a) {
    int version = 0;
    char best[300];
    if (!strncmp(ref, "sweep:", 6)) {
        if (sweep_best(ref + 6, ro->sweeps, best, sizeof best) != 0) return MODELS_BAD;
        ref = best;
    }
    dt_status st = dt_registry_register_ref(s, ro->name, ro->description, ref, stderr, &version);
    dt_registry_version v;
    char ref2[200];
    snprintf(ref2, sizeof ref2, "%s@%d", ro->name, version);
    if (st == DT_OK) st = dt_registry_resolve(s, ref2, &v);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain models register: %s\n", dt_last_error());
        return MODELS_BAD;
    }
    cJSON *o = a->json ? dt_models_version_json(&v) : NULL;
    if (!a->json) {
        cJSON *files = cJSON_Parse(v.files_json);
        printf("registered %s version %d: %s (step %lld)%s%s%s, %d files, hash %s\n", v.name,
               v.version, v.path, (long long)v.step, v.run[0] ? " of run " : "", v.run,
               v.run[0] ? "" : " (no run recorded it)", cJSON_GetArraySize(files), v.hash);
        cJSON_Delete(files);
    }
    int bad = dt_models_mlflow_register(&v, a->mlflow, ro->description, o);
    if (o) dt_models_print_json(o);
    dt_registry_version_free(&v);
    return bad ? MODELS_BAD : MODELS_OK;
}

/* ---- alias ----------------------------------------------------------------------------------- */

static int cmd_alias(dt_track *s, int remove, char **pos, int n, const dt_models_args *a) {
    int version = remove ? 0 : atoi(pos[1]);
    const char *alias = pos[remove ? 1 : 2];
    dt_status st = remove ? dt_registry_alias_remove(s, pos[0], alias)
                          : dt_registry_alias_set(s, pos[0], version, alias);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain models alias: %s\n", dt_last_error());
        return MODELS_BAD;
    }
    cJSON *o = a->json ? cJSON_CreateObject() : NULL;
    if (a->json) {
        cJSON_AddStringToObject(o, "name", pos[0]);
        cJSON_AddStringToObject(o, "alias", alias);
        cJSON_AddItemToObject(o, "version",
                              remove ? cJSON_CreateNull() : cJSON_CreateNumber(version));
    } else if (remove) {
        printf("removed alias %s of %s\n", alias, pos[0]);
    } else {
        printf("%s@%s -> version %d\n", pos[0], alias, version);
    }
    int bad = dt_models_mlflow_alias(s, pos[0], version, alias, a->mlflow, o);
    if (o) dt_models_print_json(o);
    return bad ? MODELS_BAD : MODELS_OK;
}

/* ---- ls -------------------------------------------------------------------------------------- */

static int print_model(void *ud, const dt_registry_model *m) {
    cJSON *arr = ud;
    char t[32];
    dt_models_time(m->created, t, sizeof t);
    if (arr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", m->name);
        cJSON_AddStringToObject(o, "description", m->description);
        cJSON_AddNumberToObject(o, "created", m->created);
        cJSON_AddNumberToObject(o, "versions", m->versions);
        cJSON_AddNumberToObject(o, "latest", m->latest);
        cJSON_AddItemToArray(arr, o);
    } else {
        printf("%-32s %8d %6d  %-19s  %s\n", m->name, m->versions, m->latest, t, m->description);
    }
    return 0;
}

static int print_version(void *ud, const dt_registry_version *v) {
    cJSON *arr = ud;
    char t[32];
    dt_models_time(v->created, t, sizeof t);
    if (arr)
        cJSON_AddItemToArray(arr, dt_models_version_json(v));
    else
        printf("%-7d %-8lld %-32s %-19s %-16s %-16s %s\n", v->version, (long long)v->step,
               v->run[0] ? v->run : "-", t, v->aliases[0] ? v->aliases : "-", v->hash, v->path);
    return 0;
}

static int cmd_ls(dt_track *s, const char *name, const dt_models_args *a) {
    cJSON *arr = a->json ? cJSON_CreateArray() : NULL;
    dt_status st;
    if (!name) {
        if (!arr)
            printf("%-32s %8s %6s  %-19s  %s\n", "MODEL", "VERSIONS", "LATEST", "CREATED (UTC)",
                   "DESCRIPTION");
        st = dt_registry_models(s, print_model, arr);
    } else {
        if (!arr)
            printf("%-7s %-8s %-32s %-19s %-16s %-16s %s\n", "VERSION", "STEP", "RUN",
                   "CREATED (UTC)", "ALIASES", "HASH", "PATH");
        st = dt_registry_versions(s, name, print_version, arr);
    }
    if (st != DT_OK) {
        fprintf(stderr, "dtrain models ls: %s\n", dt_last_error());
        cJSON_Delete(arr);
        return MODELS_BAD;
    }
    if (arr) {
        cJSON *o = cJSON_CreateObject();
        if (name) cJSON_AddStringToObject(o, "name", name);
        cJSON_AddItemToObject(o, name ? "versions" : "models", arr);
        dt_models_print_json(o);
    }
    return MODELS_OK;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

int dt_cli_models(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? MODELS_USAGE : MODELS_OK;
    }
    dt_models_args a = {.cmd = argv[1]};
    const char *db = NULL, *dir = NULL;
    reg_opts ro = {0};
    char *pos[MAX_POS];
    int n = 0, remove = 0;
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--db")                           ? &db
                           : !strcmp(s, "--output-dir")                 ? &dir
                           : !strcmp(s, "--name")                       ? &ro.name
                           : !strcmp(s, "--description")                ? &ro.description
                           : !strcmp(s, "-o") || !strcmp(s, "--output") ? &a.out
                           : !strcmp(s, "--format")                     ? &a.format
                           : !strcmp(s, "--base")                       ? &a.base
                           : !strcmp(s, "--mlflow")                     ? &a.mlflow
                                                                        : NULL;
        if (opt && i + 1 < argc) {
            *opt = argv[++i];
        } else if (!strcmp(s, "--json")) {
            a.json = 1;
        } else if (!strcmp(s, "--remove")) {
            remove = 1;
        } else if (opt || (s[0] == '-' && s[1])) {
            fprintf(stderr, "dtrain models %s: %s %s\n", a.cmd, s,
                    opt ? "needs a value" : "is not an option");
            return MODELS_USAGE;
        } else if (n < MAX_POS) {
            pos[n++] = argv[i];
        } else {
            fprintf(stderr, "dtrain models %s: too many arguments\n", a.cmd);
            return MODELS_USAGE;
        }
    }
    static const struct {
        const char *cmd;
        int lo, hi;
        const char *what;
    } cmds[] = {{"register", 1, 1, "needs one RUN or CHECKPOINT"},
                {"ls", 0, 1, "takes at most one NAME"},
                {"show", 1, 1, "needs one NAME[@REF]"},
                {"diff", 2, 2, "needs two NAME@REF"},
                {"alias", 3, 3, "needs NAME VERSION ALIAS (or --remove NAME ALIAS)"},
                {"export", 1, 1, "needs one NAME[@REF]"},
                {"verify", 1, 1, "needs one NAME[@REF]"},
                {"sync", 0, 1, "takes at most one NAME"}};
    int c = -1;
    for (int i = 0; i < (int)(sizeof cmds / sizeof *cmds); i++)
        if (!strcmp(a.cmd, cmds[i].cmd)) c = i;
    if (c < 0) {
        fprintf(stderr, "dtrain models: unknown command '%s'\n", a.cmd);
        usage(stderr);
        return MODELS_USAGE;
    }
    int lo = cmds[c].lo - (remove && c == 4), hi = cmds[c].hi - (remove && c == 4);
    if (n < lo || n > hi) {
        fprintf(stderr, "dtrain models %s: %s\n", a.cmd, cmds[c].what);
        return MODELS_USAGE;
    }
    if (c == 0 && !ro.name) {
        fprintf(stderr, "dtrain models register: --name NAME is required\n");
        return MODELS_USAGE;
    }
    if (c == 4 && !remove &&
        !(atoi(pos[1]) > 0 && strspn(pos[1], "0123456789") == strlen(pos[1]))) {
        fprintf(stderr, "dtrain models alias: VERSION '%s' is not a version number\n", pos[1]);
        return MODELS_USAGE;
    }
    if (c == 5 && !a.out) {
        fprintf(stderr, "dtrain models export: -o DIR is required\n");
        return MODELS_USAGE;
    }
    if (c == 5 && a.format && strcmp(a.format, "hf") && strcmp(a.format, "peft") &&
        strcmp(a.format, "merged")) {
        fprintf(stderr, "dtrain models export: --format hf, peft or merged\n");
        return MODELS_USAGE;
    }
    if (db && dir) {
        fprintf(stderr, "dtrain models %s: give --db or --output-dir, not both\n", a.cmd);
        return MODELS_USAGE;
    }
    char path[4200];
    if (!db) snprintf(path, sizeof path, "%s/dtrain.db", dir ? dir : "runs");
    dt_track *s; /* registering may create the store; the others only read or change one */
    if ((c == 0 ? dt_track_open(db ? db : path, &s) : dt_track_open_existing(db ? db : path, &s)) !=
        DT_OK) {
        fprintf(stderr, "dtrain models %s: %s\n", a.cmd, dt_last_error());
        return MODELS_BAD;
    }
    /* sweeps live beside the store: --output-dir, the folder of --db, else runs */
    char sweeps[4200];
    snprintf(sweeps, sizeof sweeps, "%s", dir ? dir : db ? db : "runs");
    if (!dir && db) {
        char *slash = strrchr(sweeps, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(sweeps, sizeof sweeps, ".");
    }
    ro.sweeps = sweeps;
    int rc = c == 0   ? cmd_register(s, pos[0], &ro, &a)
             : c == 1 ? cmd_ls(s, n ? pos[0] : NULL, &a)
             : c == 2 ? dt_models_show(s, pos[0], &a)
             : c == 3 ? dt_models_diff(s, pos[0], pos[1], &a)
             : c == 4 ? cmd_alias(s, remove, pos, n, &a)
             : c == 5 ? dt_models_export(s, pos[0], &a)
             : c == 6 ? dt_models_verify(s, pos[0], &a)
                      : dt_models_mlflow_sync(s, n ? pos[0] : NULL, a.mlflow, a.json);
    dt_track_close(s);
    return rc;
}
