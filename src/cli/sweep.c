/* `dtrain sweep`: the command line of hyperparameter sweeps (src/sweep/,
 * include/dtrain/sweep.h).
 *
 *   dtrain sweep SWEEP.yaml [--slots N] [--threads-per-slot T] [--name ID] [--dry-run]
 *                      [--hosts h1:S,h2:S | --hostfile F] [--workers-per-trial W]
 *                      [--mpirun PATH] [--mpirun-args "ARGS"]
 *   dtrain sweep --resume ID [--output-dir DIR] [--slots N] [--threads-per-slot T]
 *   dtrain sweep show ID [--output-dir DIR]
 *
 * Every form takes --json (what it produced, as one JSON object on stdout, with "status" and
 * "exit_code"; the progress lines go to stderr; a refusal is an object too: cli/json_out.h) and
 * -q. Exit status: 0 every trial finished or was stopped early, 1 a trial failed (or the store
 * could not be read), 2 the sweep file or the options are wrong (nothing was started), 75
 * stopped by SIGTERM/SIGINT (trials checkpointed: --resume continues). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/json_out.h"
#include "dtrain/sweep.h"

static int usage(FILE *f) {
    fprintf(
        f, "usage: dtrain sweep SWEEP.yaml [--slots N] [--threads-per-slot T] [--name ID]\n"
           "                   [--hosts h1:S,h2:S | --hostfile FILE] [--workers-per-trial W]\n"
           "                   [--mpirun PATH] [--mpirun-args \"ARGS\"] [--dry-run] [--json] [-q]\n"
           "       dtrain sweep --resume ID [--output-dir DIR] [--slots N] [--json] [-q]\n"
           "       dtrain sweep show ID [--output-dir DIR] [--json]\n"
           "Runs the trials of SWEEP.yaml (a base config, overrides, parameters to vary; grid,\n"
           "random or Sobol sampling; ASHA or median-rule early stopping) as `dtrain train`\n"
           "processes, N at once on this machine with T threads each (default: the cores split\n"
           "between the slots); each trial is a tracked run tagged with the sweep's id.\n"
           "--hosts/--hostfile: each trial is a `dtrain launch -n W --hosts HOST:W` job on one\n"
           "host, S / W of them at once on a host of S slots (T threads a worker, default 1);\n"
           "output.dir must be the same shared folder on every host. --workers-per-trial W\n"
           "alone: trials of W workers on this machine.\n"
           "--resume continues a sweep that was killed or stopped; show lists its trials.\n"
           "--json: one JSON object on stdout (status, id, trials, best, exit_code); the\n"
           "progress lines go to stderr\n"
           "exit status: 0 every trial done or stopped early, 1 a trial failed, 2 bad sweep\n"
           "file or options (nothing started), 75 stopped by SIGTERM/SIGINT (--resume)\n");
    return 2;
}

static int parse_pos(const char *s, int *out) {
    char *e;
    long v = strtol(s, &e, 10);
    if (!*s || *e || v < 1 || v > 4096) return -1;
    *out = (int)v;
    return 0;
}

static void stop(int sig) {
    (void)sig;
    dt_sweep_request_stop();
}

/* The one-line error on stderr (and, with --json, the object saying it); returns rc. */
static int refuse(int rc) {
    char m[2048];
    snprintf(m, sizeof m, "%s", dt_last_error());
    fprintf(stderr, "dtrain sweep: %s\n", m);
    return dt_cli_json_end(NULL, rc, m);
}

/* What a run or resume produced; cJSON escapes the strings (an output path may hold quotes or
 * backslashes) and writes a NaN best as null. */
static cJSON *result_json(const dt_sweep_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status",
                            r->interrupted ? "stopped"
                            : r->failed    ? "failed"
                                           : "done");
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "dir", r->dir);
    cJSON_AddNumberToObject(o, "trials", r->trials);
    cJSON_AddNumberToObject(o, "done", r->done);
    cJSON_AddNumberToObject(o, "stopped", r->stopped);
    cJSON_AddNumberToObject(o, "failed", r->failed);
    cJSON_AddBoolToObject(o, "interrupted", r->interrupted);
    if (r->best < 0) {
        cJSON_AddNullToObject(o, "best");
    } else {
        cJSON *b = cJSON_AddObjectToObject(o, "best");
        cJSON_AddNumberToObject(b, "trial", r->best);
        cJSON_AddStringToObject(b, "run", r->best_run);
        cJSON_AddNumberToObject(b, "value", r->best_value);
    }
    return o;
}

/* `sweep show ID --json`: sweep.json with "best", as an object (its "status" is the sweep's). */
static int show_json(const char *path) {
    char *txt = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&txt, &n);
    if (!f) return dt_error_set(DT_ERR_NOMEM, "sweep show: out of memory"), refuse(1);
    dt_status st = dt_sweep_show(path, f, 1);
    fclose(f);
    cJSON *o = st == DT_OK ? cJSON_ParseWithLength(txt, n) : NULL;
    free(txt);
    if (st != DT_OK) return refuse(1);
    if (!o) return dt_error_set(DT_ERR_FORMAT, "%s: not JSON", path), refuse(1);
    return dt_cli_json_end(o, 0, NULL);
}

static int dry_run(const dt_sweep_spec *s, int json) {
    dt_sweep_trial *t;
    int n;
    if (dt_sweep_sample(s, &t, &n) != DT_OK) return refuse(2);
    cJSON *o = json ? cJSON_CreateObject() : NULL,
          *a = o ? cJSON_AddArrayToObject(o, "trials") : NULL;
    for (int i = 0; i < n; i++) {
        cJSON *p = a ? cJSON_CreateObject() : NULL;
        if (a) cJSON_AddItemToArray(a, p);
        if (!json) printf("%d", i);
        for (int k = 0; k < t[i].n; k++) {
            if (json)
                cJSON_AddStringToObject(p, t[i].key[k], t[i].value[k]);
            else
                printf(" %s=%s", t[i].key[k], t[i].value[k]);
        }
        if (!json) printf("\n");
    }
    free(t);
    return dt_cli_json_end(o, 0, NULL);
}

int dt_cli_sweep(int argc, char **argv) {
    dt_sweep_opts o = {0};
    const char *resume = NULL, *out_dir = NULL, *show = NULL, *file = NULL;
    int json = dt_cli_json_take(&argc, argv), dry = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
        if (!strcmp(a, "-q"))
            o.quiet = 1;
        else if (!strcmp(a, "--dry-run"))
            dry = 1;
        else if (a[0] != '-') {
            if (!file && !show && !strcmp(a, "show") && v)
                show = argv[++i];
            else if (!file && !show)
                file = a;
            else
                return usage(stderr);
        } else if (!v) {
            return usage(stderr);
        } else if (!strcmp(a, "--slots") || !strcmp(a, "--threads-per-slot") ||
                   !strcmp(a, "--workers-per-trial")) {
            int *dst = !strcmp(a, "--slots")              ? &o.slots
                       : !strcmp(a, "--threads-per-slot") ? &o.threads
                                                          : &o.workers;
            if (parse_pos(v, dst)) {
                fprintf(stderr, "dtrain sweep: %s '%s': expected an integer in 1..4096\n", a, v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--name"))
            o.name = argv[++i];
        else if (!strcmp(a, "--resume"))
            resume = argv[++i];
        else if (!strcmp(a, "--output-dir"))
            out_dir = argv[++i];
        else if (!strcmp(a, "--hosts"))
            o.hosts = argv[++i];
        else if (!strcmp(a, "--hostfile"))
            o.hostfile = argv[++i];
        else if (!strcmp(a, "--mpirun"))
            o.mpirun = argv[++i];
        else if (!strcmp(a, "--mpirun-args"))
            o.mpirun_args = argv[++i];
        else
            return usage(stderr);
    }
    if (!!file + !!resume + !!show != 1) return usage(stderr);
    /* from here stdout is stderr until the object is printed (the progress lines included) */
    if (json && dt_cli_json_begin("sweep") != 0) return 1;
    char path[PATH_MAX + 64], exe[PATH_MAX];
    if (show || resume) {
        if (dt_sweep_find(out_dir, show ? show : resume, path, sizeof path) != DT_OK)
            return refuse(2);
        if (show && json) return show_json(path);
        if (show) return dt_sweep_show(path, stdout, 0) == DT_OK ? 0 : refuse(1);
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        dt_error_set(DT_ERR_IO, "cannot find the dtrain binary (/proc/self/exe)");
        return refuse(1);
    }
    exe[n] = 0;
    o.exe = exe;
    dt_sweep_result r;
    dt_status st;
    if (resume) {
        dt_cli_on_stop(stop);
        st = dt_sweep_resume(path, &o, &r);
    } else {
        dt_sweep_spec *s;
        if (dt_sweep_spec_load(file, &s) != DT_OK) return refuse(2);
        if (dry) {
            int rc = dry_run(s, json);
            dt_sweep_spec_free(s);
            return rc;
        }
        dt_cli_on_stop(stop);
        st = dt_sweep_run(s, &o, &r);
        dt_sweep_spec_free(s);
    }
    if (st != DT_OK) return refuse(st == DT_ERR_INVALID ? 2 : 1);
    int rc = r.interrupted ? 75 : r.failed ? 1 : 0;
    if (json) return dt_cli_json_end(result_json(&r), rc, NULL);
    if (!o.quiet) {
        printf("sweep %s: %d trials, %d done, %d stopped early, %d failed%s\n", r.id, r.trials,
               r.done, r.stopped, r.failed, r.interrupted ? " (interrupted: --resume)" : "");
        if (r.best >= 0) printf("best: trial %d (%s): %.6g\n", r.best, r.best_run, r.best_value);
    }
    return rc;
}
