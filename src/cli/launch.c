/* `dtrain launch`: the command line of the launcher (src/launch/, include/dtrain/launch.h).
 *
 *   dtrain launch -n N [--hosts h1:slots,h2:slots | --hostfile F] [--threads-per-worker T]
 *                 [--max-failures K] [--oversubscribe] CONFIG [key=value ...]
 *
 * Argument parsing only: validation, supervision, retries and records are the library's. Exit
 * status: 0 done, 75 preempted (a checkpoint was saved: run the same command to resume), 1
 * failed, 2 refused before anything started (config, resources, mpirun, run directory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/json_out.h"
#include "dtrain/dtrain.h"
#include "dtrain/launch.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtrain launch -n N [--hosts h1:slots,h2:slots | --hostfile FILE]\n"
            "                     [--threads-per-worker T] [--max-failures K] [--oversubscribe]\n"
            "                     [--mpirun PATH] [--mpirun-args \"ARGS\"] [--backoff SECONDS]\n"
            "                     [--monitor-port P [--monitor-addr A] [--monitor-token T]]\n"
            "                     CONFIG.yaml [section.key=value ...] [--json]\n"
            "Runs N workers of `dtrain train` through mpirun, restarts the job from its newest\n"
            "checkpoint when it fails (up to K times, default 3; -1 = no limit), forwards SIGTERM\n"
            "so that workers checkpoint before exiting (exit status 75). --monitor-port serves\n"
            "the run's dashboard at / and Prometheus metrics at /metrics (default address\n"
            "127.0.0.1; --monitor-token, DTRAIN_MONITOR_TOKEN or DTRAIN_MONITOR_TOKEN_FILE (a\n"
            "file private to its owner): bearer token required). Another address needs a token,\n"
            "or DTRAIN_MONITOR_INSECURE=1 to serve it to anyone who can reach it.\n"
            "--json: one JSON object on stdout at the end: status, exit_code, run_dir, run_name,\n"
            "launch (launch.json: the attempts) and run (run.json: steps, losses, eval,\n"
            "checkpoint, export); everything else goes to stderr\n"
            "exit status: 0 done, 1 failed, 2 refused before any worker started, 75 preempted\n"
            "(a checkpoint was saved: the same command resumes)\n");
    return 2;
}

/* A number in [-1, 1000000]. */
static int parse_int(const char *s, int *out) {
    char *e;
    long v = strtol(s, &e, 10);
    if (!*s || *e || v < -1 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

/* The --json object: launch.json and run.json of the run directory. */
static int json_result(const char *run_dir, int rc, const char *error) {
    cJSON *o = cJSON_CreateObject();
    char p[8400];
    snprintf(p, sizeof p, "%s/launch.json", run_dir);
    cJSON *l = run_dir[0] ? dt_cli_json_read(p) : NULL;
    snprintf(p, sizeof p, "%s/run.json", run_dir);
    cJSON *r = run_dir[0] ? dt_cli_json_read(p) : NULL;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(l, "status");
    if (o && cJSON_IsString(s)) cJSON_AddStringToObject(o, "status", s->valuestring);
    if (o && run_dir[0]) {
        cJSON_AddStringToObject(o, "run_dir", run_dir);
        const char *nm = strrchr(run_dir, '/');
        cJSON_AddStringToObject(o, "run_name", nm ? nm + 1 : run_dir);
    }
    if (o && l) cJSON_AddItemToObject(o, "launch", l), l = NULL;
    if (o && r) cJSON_AddItemToObject(o, "run", r), r = NULL;
    cJSON_Delete(l), cJSON_Delete(r);
    return dt_cli_json_end(o, rc, error);
}

int dt_cli_launch(int argc, char **argv) {
    int want_json = dt_cli_json_take(&argc, argv); /* before the config's overrides */
    dt_launch_opts o;
    dt_launch_opts_init(&o);
    o.monitor_token = getenv("DTRAIN_MONITOR_TOKEN");
    o.monitor_token_file = getenv("DTRAIN_MONITOR_TOKEN_FILE");
    o.monitor_insecure =
        getenv("DTRAIN_MONITOR_INSECURE") && !strcmp(getenv("DTRAIN_MONITOR_INSECURE"), "1");
    const char *hostfile = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
        if (!strcmp(a, "--oversubscribe")) {
            o.oversubscribe = 1;
            continue;
        }
        if (!v) return usage(stderr);
        i++;
        if (!strcmp(a, "-n") || !strcmp(a, "--workers")) {
            if (parse_int(v, &o.workers) || o.workers < 1) {
                fprintf(stderr, "dtrain launch: -n %s: expected a number of workers >= 1\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--threads-per-worker")) {
            if (parse_int(v, &o.threads) || o.threads < 1) {
                fprintf(stderr, "dtrain launch: --threads-per-worker %s: expected >= 1\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--max-failures")) {
            if (parse_int(v, &o.max_failures)) {
                fprintf(stderr,
                        "dtrain launch: --max-failures %s: expected -1 (no limit) or >= 0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--hosts")) {
            if (dt_launch_hosts_parse(&o, v) != DT_OK) {
                fprintf(stderr, "dtrain launch: %s\n", dt_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--hostfile")) {
            hostfile = v;
        } else if (!strcmp(a, "--mpirun")) {
            o.mpirun = v;
        } else if (!strcmp(a, "--mpirun-args")) {
            o.mpirun_args = v;
        } else if (!strcmp(a, "--monitor-port")) {
            if (parse_int(v, &o.monitor_port) || o.monitor_port < 0 || o.monitor_port > 65535) {
                fprintf(stderr, "dtrain launch: --monitor-port %s: expected 0-65535\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--monitor-addr")) {
            o.monitor_addr = v;
        } else if (!strcmp(a, "--monitor-token")) {
            o.monitor_token = v;
        } else if (!strcmp(a, "--backoff")) {
            o.backoff_s = atof(v);
        } else {
            fprintf(stderr, "dtrain launch: unknown option %s\n", a);
            return usage(stderr);
        }
    }
    if (i >= argc || o.workers < 1) return usage(stderr);
    if (hostfile && o.n_hosts) {
        fprintf(stderr, "dtrain launch: give --hosts or --hostfile, not both\n");
        return 2;
    }
    if (hostfile && dt_launch_hostfile_read(&o, hostfile) != DT_OK) {
        fprintf(stderr, "dtrain launch: %s\n", dt_last_error());
        return 2;
    }
    o.config = argv[i];
    o.n_over = argc - i - 1, o.over = argv + i + 1;
    char run_dir[8192] = "";
    o.run_dir_out = run_dir, o.run_dir_out_n = sizeof run_dir;
    if (want_json && dt_cli_json_begin("launch") != 0) return 1;

    dt_cli_on_stop(dt_launch_stop);
    int code;
    dt_status st = dt_launch_run(&o, &code);
    if (st != DT_OK) {
        char m[2048];
        snprintf(m, sizeof m, "%s", dt_last_error());
        fprintf(stderr, "dtrain launch: %s\n", m);
        return json_result(run_dir, st == DT_ERR_INTERNAL ? 1 : 2, m);
    }
    return json_result(run_dir, code, NULL);
}
