/* dtrain runs ls|show|compare|export|plot|rm [--db PATH | --output-dir DIR]
 *
 * Reads the experiment store (include/dtrain/track.h) that `dtrain train` writes, by default
 * runs/dtrain.db (output.dir's default), while runs are live or after they ended:
 *   ls       runs, newest first (--experiment E, --status S, --sweep ID: a sweep and its
 *            trials): id, experiment, name, status ("lost" when a running run's process on
 *            this host is gone), attempts, workers, start, duration, last step, final loss
 *   show     one run: status and exit reason, attempts, hosts, lineage, tags, metric summary
 *            (final, min, max), artifacts (checkpoints and the exported model), the model
 *            versions registered from it, params
 *   compare  params that differ and final/best metrics side by side (src/cli/runs_report.c)
 *   export   one run as CSV (its metrics) or JSON (everything) (src/cli/runs_report.c), or
 *            as an MLflow file store (src/cli/runs_mlflow.c)
 *   plot     metric curves of one or more runs as SVG or PNG (src/cli/runs_plot.c)
 *   rm       deletes runs from the store (their files stay); a live run only with --force
 * A run is named by its id, experiment/name, or a name unique in the store. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/cli_runs.h"
#include "cli/json_out.h"
#include "dtrain/dtrain.h"
#include "dtrain/registry.h"
#include "track/track_json.h"

enum { EXIT_GOOD = 0, EXIT_BAD = 1, EXIT_USAGE = 2, MAX_REFS = 64 };

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: dtrain runs ls [--experiment E] [--status S] [--sweep ID] [--json]\n"
        "       dtrain runs show RUN\n"
        "       dtrain runs compare RUN RUN [RUN ...]\n"
        "       dtrain runs export RUN --format csv|json [-o FILE]\n"
        "       dtrain runs export RUN --format mlflow -o DIR\n"
        "       dtrain runs plot RUN[,RUN...] [--metric KEY[,KEY...]] -o FILE.svg|FILE.png\n"
        "       dtrain runs rm [--force] RUN [RUN ...]\n"
        "       dtrain runs sync [--output-dir DIR] [--uri URI] [SPOOL|RUN_DIR ...]\n"
        "each with --db PATH, or --output-dir DIR for DIR/dtrain.db (default runs/dtrain.db,\n"
        "where output.dir's default puts it; tracking.uri in the config moves it).\n"
        "RUN: a run id, EXPERIMENT/NAME, or a NAME unique in the store.\n"
        "  ls       runs, newest first; 'lost': running, but its process here is gone;\n"
        "           --json: {\"runs\": [{id, experiment, name, status, attempts, world,\n"
        "           start, end, last_step, n_metrics, hosts, duration, loss}], status, exit_code}\n"
        "  show     status, attempts, hosts, lineage, tags, metrics, artifacts, model\n"
        "           versions registered from it (dtrain models), params\n"
        "  compare  the params that differ (output.run_name aside) and every metric's final\n"
        "           value and best (min loss/perplexity, max accuracy), side by side\n"
        "  export   csv: key,step,wall,value,attempt per metric value; json: the whole run;\n"
        "           mlflow: an MLflow file store in DIR (mlflow ui --backend-store-uri DIR)\n"
        "  plot     metric curves (default loss) of the runs on one chart per metric\n"
        "  rm       deletes runs from the store (files stay); a running one needs --force\n"
        "  sync     replays what runs could not send to their MLflow server (tracking.uri\n"
        "           http://...): each RUN_DIR/mlflow-spool.jsonl, by default all under DIR\n"
        "exit status: 0 done, 1 the store or a run cannot be read or written, 2 bad\n"
        "arguments\n");
}

/* ---- helpers shared with runs_report.c ------------------------------------------------------ */

int dt_runs_kv_add(void *ud, const char *key, const char *value) {
    dt_runs_kv *l = ud;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **k = realloc(l->key, (size_t)cap * sizeof *k);
        if (k) l->key = k;
        char **v = realloc(l->value, (size_t)cap * sizeof *v);
        if (v) l->value = v;
        if (!k || !v) return 1;
        l->cap = cap;
    }
    l->key[l->n] = strdup(key);
    l->value[l->n] = strdup(value);
    l->n++;
    return 0;
}

void dt_runs_kv_free(dt_runs_kv *l) {
    for (int i = 0; i < l->n; i++) free(l->key[i]), free(l->value[i]);
    free(l->key), free(l->value);
    memset(l, 0, sizeof *l);
}

static int summ_add(void *ud, const dt_track_summary *m) {
    dt_runs_summ *l = ud;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        dt_track_summary *p = realloc(l->m, (size_t)cap * sizeof *p);
        if (!p) return 1;
        l->m = p, l->cap = cap;
    }
    l->m[l->n] = *m;
    l->m[l->n].key = strdup(m->key);
    l->n++;
    return 0;
}

dt_status dt_runs_summ_load(dt_track *s, int64_t run, dt_runs_summ *out) {
    memset(out, 0, sizeof *out);
    return dt_track_metric_summary(s, run, summ_add, out);
}

void dt_runs_summ_free(dt_runs_summ *l) {
    for (int i = 0; i < l->n; i++) free((char *)l->m[i].key);
    free(l->m);
    memset(l, 0, sizeof *l);
}

const dt_track_summary *dt_runs_summ_find(const dt_runs_summ *l, const char *key) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->m[i].key, key)) return &l->m[i];
    return NULL;
}

int dt_runs_best_dir(const char *key) {
    if (strstr(key, "acc")) return 1;
    if (strstr(key, "loss") || strstr(key, "perplexity")) return -1;
    return 0;
}

const char *dt_runs_num(double v, char *buf, size_t n) {
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.6g", v);
    return buf;
}

static void fmt_time(double t, char *buf, size_t n) {
    time_t s = (time_t)t;
    struct tm tmv;
    gmtime_r(&s, &tmv);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tmv);
}

static void fmt_duration(double s, char *buf, size_t n) {
    long long x = (long long)(s + 0.5);
    if (x >= 3600)
        snprintf(buf, n, "%lldh%02lldm", x / 3600, x / 60 % 60);
    else if (x >= 60)
        snprintf(buf, n, "%lldm%02llds", x / 60, x % 60);
    else
        snprintf(buf, n, "%llds", x);
}

static double duration(const dt_track_run *r) {
    return (r->end_time > 0 ? r->end_time : (double)time(NULL)) - r->start_time;
}

/* ---- ls ------------------------------------------------------------------------------------- */

typedef struct run_list {
    int n, cap;
    dt_track_run *r;
} run_list;

static int run_add(void *ud, const dt_track_run *r) {
    run_list *l = ud;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        dt_track_run *p = realloc(l->r, (size_t)cap * sizeof *p);
        if (!p) return 1;
        l->r = p, l->cap = cap;
    }
    l->r[l->n++] = *r;
    return 0;
}

typedef struct tag_match {
    const char *key, *value;
    int found;
} tag_match;

static int on_tag(void *ud, const char *key, const char *value) {
    tag_match *m = ud;
    if (!strcmp(key, m->key) && !strcmp(value, m->value)) m->found = 1;
    return m->found;
}

/* --sweep ID: the sweep's own run and its trials, which carry the tag sweep_id=ID. */
static int in_sweep(dt_track *s, int64_t run, const char *sweep) {
    tag_match m = {"sweep_id", sweep, 0};
    return dt_track_tags(s, run, on_tag, &m) == DT_OK && m.found;
}

/* --json: one object {"runs": [...], "status", "exit_code"}, a run per row of the table. */
static cJSON *run_obj(const dt_track_run *r, double loss) {
    cJSON *o = dt_track_run_json(r);
    cJSON_AddNumberToObject(o, "duration", duration(r));
    cJSON_AddNumberToObject(o, "loss", loss); /* NaN (none) prints as null */
    return o;
}

static int cmd_ls(dt_track *s, const char *experiment, const char *status, const char *sweep,
                  int json) {
    run_list l = {0};
    if (dt_track_runs(s, experiment, status, run_add, &l) != DT_OK) {
        char m[2048];
        snprintf(m, sizeof m, "%s", dt_last_error());
        fprintf(stderr, "dtrain runs ls: %s\n", m);
        free(l.r);
        return dt_cli_json_end(NULL, EXIT_BAD, m);
    }
    cJSON *out = json ? cJSON_CreateObject() : NULL;
    cJSON *arr = out ? cJSON_AddArrayToObject(out, "runs") : NULL;
    if (!json)
        printf("%-5s %-24s %-20s %-10s %-8s %-5s %-19s %-9s %-7s %s\n", "ID", "EXPERIMENT", "RUN",
               "STATUS", "ATTEMPTS", "WORLD", "STARTED (UTC)", "DURATION", "STEP", "LOSS");
    int shown = 0;
    for (int i = 0; i < l.n; i++) {
        const dt_track_run *r = &l.r[i];
        if (sweep && !in_sweep(s, r->id, sweep)) continue;
        shown++;
        dt_runs_summ sm;
        char start[32], dur[32], loss[32] = "-", step[32] = "-";
        double lv = NAN;
        if (dt_runs_summ_load(s, r->id, &sm) == DT_OK) {
            const dt_track_summary *m = dt_runs_summ_find(&sm, "loss");
            if (m) dt_runs_num(m->last, loss, sizeof loss), lv = m->last;
        }
        dt_runs_summ_free(&sm);
        if (arr) {
            cJSON_AddItemToArray(arr, run_obj(r, lv));
            continue;
        }
        fmt_time(r->start_time, start, sizeof start);
        fmt_duration(duration(r), dur, sizeof dur);
        if (r->last_step >= 0) snprintf(step, sizeof step, "%lld", (long long)r->last_step);
        printf("%-5lld %-24s %-20s %-10s %-8d %-5d %-19s %-9s %-7s %s\n", (long long)r->id,
               r->experiment, r->name, r->lost ? "lost" : r->status, r->attempts, r->world, start,
               dur, step, loss);
    }
    if (!shown && !json)
        printf("(no runs%s%s%s%s%s%s)\n", experiment ? " in experiment " : "",
               experiment ? experiment : "", status ? " with status " : "", status ? status : "",
               sweep ? " of sweep " : "", sweep ? sweep : "");
    free(l.r);
    return dt_cli_json_end(out, EXIT_GOOD, NULL);
}

/* ---- show ----------------------------------------------------------------------------------- */

static int print_kv(void *ud, const char *key, const char *value) {
    printf("  %-28s %s\n", key, value);
    return 0;
}

static int print_artifact(void *ud, const dt_track_artifact_row *a) {
    char gone[64] = "";
    if (a->removed > 0) {
        char t[32];
        fmt_time(a->removed, t, sizeof t);
        snprintf(gone, sizeof gone, "  (removed %s UTC)", t);
    }
    printf("  %-10s step %-8lld attempt %d  %s  %s%s\n", a->kind, (long long)a->step, a->attempt,
           a->uri, a->metrics_json, gone);
    return 0;
}

/* "    #2 failed   2026-11-30 05:28:35 UTC, 3s, vm pid 4242: reason" */
static int print_attempt(void *ud, const dt_track_attempt *a) {
    char t0[32], dur[32];
    fmt_time(a->start_time, t0, sizeof t0);
    fmt_duration((a->end_time > 0 ? a->end_time : (double)time(NULL)) - a->start_time, dur,
                 sizeof dur);
    printf("    #%-3d %-10s %s UTC, %s%s, %s pid %lld%s%s\n", a->attempt, a->status, t0, dur,
           a->end_time > 0 ? "" : " so far", a->writer_host, (long long)a->writer_pid,
           a->exit_reason[0] ? ": " : "", a->exit_reason);
    return 0;
}

typedef struct run_versions {
    int64_t run;
    int n;
} run_versions;

static int print_run_version(void *ud, const dt_registry_version *v) {
    run_versions *rv = ud;
    if (v->run_id != rv->run) return 0;
    rv->n++;
    printf("  %s@%d  step %-8lld %s%s%s\n", v->name, v->version, (long long)v->step, v->path,
           v->aliases[0] ? "  aliases " : "", v->aliases);
    return 0;
}

static int cmd_show(dt_track *s, const char *ref) {
    dt_track_run r;
    if (dt_track_run_find(s, ref, &r) != DT_OK) {
        fprintf(stderr, "dtrain runs show: %s\n", dt_last_error());
        return EXIT_BAD;
    }
    char t0[32], t1[32] = "-", dur[32];
    fmt_time(r.start_time, t0, sizeof t0);
    if (r.end_time > 0) fmt_time(r.end_time, t1, sizeof t1);
    fmt_duration(duration(&r), dur, sizeof dur);
    printf("run %lld: %s/%s\n", (long long)r.id, r.experiment, r.name);
    if (r.lost)
        printf("  status      lost (recorded as %s, but its process is gone)\n", r.status);
    else
        printf("  status      %s\n", r.status);
    if (r.exit_reason[0]) printf("  exit        %s\n", r.exit_reason);
    printf("  attempts    %d\n", r.attempts);
    dt_track_attempts(s, r.id, print_attempt, NULL); /* each attempt's status and reason */
    printf("  world       %d (hosts %s)\n", r.world, r.hosts);
    printf("  started     %s UTC\n  ended       %s%s\n  duration    %s\n", t0, t1,
           r.end_time > 0 ? " UTC" : "", dur);
    printf("  writer      %s pid %lld\n", r.writer_host, (long long)r.writer_pid);
    printf("lineage:\n");
    dt_status st = dt_track_lineage(s, r.id, print_kv, NULL);
    if (st == DT_OK) printf("tags:\n");
    if (st == DT_OK) st = dt_track_tags(s, r.id, print_kv, NULL);
    dt_runs_summ sm;
    if (st == DT_OK) st = dt_runs_summ_load(s, r.id, &sm);
    if (st == DT_OK) {
        printf("metrics: %lld values, last step %lld\n", (long long)r.n_metrics,
               (long long)r.last_step);
        printf("  %-20s %6s %14s %8s %14s %8s %14s %8s\n", "KEY", "N", "FINAL", "STEP", "MIN",
               "STEP", "MAX", "STEP");
        for (int i = 0; i < sm.n; i++) {
            const dt_track_summary *m = &sm.m[i];
            char a[32], b[32], c[32];
            printf("  %-20s %6lld %14s %8lld %14s %8lld %14s %8lld\n", m->key, (long long)m->n,
                   dt_runs_num(m->last, a, sizeof a), (long long)m->last_step,
                   dt_runs_num(m->min, b, sizeof b), (long long)m->min_step,
                   dt_runs_num(m->max, c, sizeof c), (long long)m->max_step);
        }
        dt_runs_summ_free(&sm);
        printf("artifacts:\n");
        st = dt_track_artifacts(s, r.id, print_artifact, NULL);
    }
    if (st == DT_OK) {
        printf("model versions:\n"); /* registered from this run (dtrain models) */
        run_versions rv = {.run = r.id};
        st = dt_registry_versions(s, NULL, print_run_version, &rv);
        if (st == DT_OK && !rv.n) printf("  (none)\n");
    }
    if (st == DT_OK) printf("params:\n");
    if (st == DT_OK) st = dt_track_params(s, r.id, print_kv, NULL);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain runs show: %s\n", dt_last_error());
        return EXIT_BAD;
    }
    return EXIT_GOOD;
}

/* ---- rm ------------------------------------------------------------------------------------- */

static int cmd_rm(dt_track *s, int n, char **refs, int force) {
    int rc = EXIT_GOOD;
    for (int i = 0; i < n; i++) {
        dt_track_run r;
        if (dt_track_run_find(s, refs[i], &r) != DT_OK) {
            fprintf(stderr, "dtrain runs rm: %s\n", dt_last_error());
            rc = EXIT_BAD;
            continue;
        }
        if (!strcmp(r.status, "running") && !r.lost && !force) {
            fprintf(stderr,
                    "dtrain runs rm: run %lld (%s/%s) is running (pid %lld on %s): stop it "
                    "first, or give --force\n",
                    (long long)r.id, r.experiment, r.name, (long long)r.writer_pid, r.writer_host);
            rc = EXIT_BAD;
            continue;
        }
        if (dt_track_run_delete(s, r.id) != DT_OK) {
            fprintf(stderr, "dtrain runs rm: %s\n", dt_last_error());
            rc = EXIT_BAD;
            continue;
        }
        printf("removed run %lld (%s/%s): %lld metric values\n", (long long)r.id, r.experiment,
               r.name, (long long)r.n_metrics);
    }
    return rc;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

int dt_cli_runs(int argc, char **argv) {
    int json = dt_cli_json_take(&argc, argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_GOOD;
    }
    if (!strcmp(argv[1], "sync")) return dt_runs_sync(argc - 2, argv + 2); /* no store needed */
    const char *cmd = argv[1], *db = NULL, *dir = NULL, *experiment = NULL, *status = NULL;
    const char *sweep = NULL;
    const char *format = NULL, *out = NULL, *metric = NULL;
    char *refs[MAX_REFS];
    int n = 0, force = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **opt = !strcmp(a, "--db")                               ? &db
                           : !strcmp(a, "--output-dir")                     ? &dir
                           : !strcmp(a, "--experiment") || !strcmp(a, "-e") ? &experiment
                           : !strcmp(a, "--status")                         ? &status
                           : !strcmp(a, "--sweep")                          ? &sweep
                           : !strcmp(a, "--format")                         ? &format
                           : !strcmp(a, "-o")                               ? &out
                           : !strcmp(a, "--metric")                         ? &metric
                                                                            : NULL;
        if (opt && i + 1 < argc) {
            *opt = argv[++i];
        } else if (opt || (a[0] == '-' && a[1] && strcmp(a, "--force"))) {
            fprintf(stderr, "dtrain runs %s: %s %s\n", cmd, a,
                    opt ? "needs a value" : "is not an option");
            return EXIT_USAGE;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (n < MAX_REFS) {
            refs[n++] = argv[i];
        }
    }
    int want = !strcmp(cmd, "ls")                               ? 0
               : !strcmp(cmd, "show") || !strcmp(cmd, "export") ? 1
               : !strcmp(cmd, "plot")                           ? 4
               : !strcmp(cmd, "compare")                        ? 2
               : !strcmp(cmd, "rm")                             ? 3
                                                                : -1;
    if (want < 0) {
        fprintf(stderr, "dtrain runs: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((want == 0 && n) || (want == 1 && n != 1) || (want == 2 && n < 2) ||
        ((want == 3 || want == 4) && !n)) {
        fprintf(stderr, "dtrain runs %s: %s\n", cmd,
                want == 0   ? "takes no run"
                : want == 1 ? "needs one run"
                : want == 2 ? "needs two runs or more"
                            : "needs a run");
        return EXIT_USAGE;
    }
    if (!strcmp(cmd, "export") && (!format || (strcmp(format, "csv") && strcmp(format, "json") &&
                                               strcmp(format, "mlflow")))) {
        fprintf(stderr, "dtrain runs export: --format csv, json or mlflow\n");
        return EXIT_USAGE;
    }
    if ((!strcmp(cmd, "export") && !strcmp(format, "mlflow") && !out) || (want == 4 && !out)) {
        fprintf(stderr, "dtrain runs %s: -o %s is required\n", cmd, want == 4 ? "FILE" : "DIR");
        return EXIT_USAGE;
    }
    if (db && dir) {
        fprintf(stderr, "dtrain runs %s: give --db or --output-dir, not both\n", cmd);
        return EXIT_USAGE;
    }
    if (json && want != 0) {
        fprintf(stderr,
                "dtrain runs %s: --json is for ls (one run as JSON: runs export RUN "
                "--format json)\n",
                cmd);
        return EXIT_USAGE;
    }
    if (json && dt_cli_json_begin("runs ls") != 0) return EXIT_BAD;
    char path[4200];
    if (!db) snprintf(path, sizeof path, "%s/dtrain.db", dir ? dir : "runs");
    dt_track *s;
    if (dt_track_open_existing(db ? db : path, &s) != DT_OK) {
        char m[2048];
        snprintf(m, sizeof m, "%s", dt_last_error());
        fprintf(stderr, "dtrain runs %s: %s\n", cmd, m);
        return dt_cli_json_end(NULL, EXIT_BAD, m);
    }
    int rc = want == 0              ? cmd_ls(s, experiment, status, sweep, json)
             : !strcmp(cmd, "show") ? cmd_show(s, refs[0])
             : !strcmp(cmd, "export") && !strcmp(format, "mlflow")
                 ? dt_runs_export_mlflow(s, refs[0], out)
             : !strcmp(cmd, "export") ? dt_runs_export(s, refs[0], format, out)
             : want == 4              ? dt_runs_plot(s, n, refs, metric ? metric : "loss", out)
             : want == 2              ? dt_runs_compare(s, n, refs)
                                      : cmd_rm(s, n, refs, force);
    dt_track_close(s);
    return rc;
}
