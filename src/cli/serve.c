/* `dtrain serve`: the monitoring server (include/dtrain/serve.h) on its own, for any store:
 *
 *   dtrain serve [--db PATH | --output-dir DIR] [--addr A] [--port P] [--token T |
 *                --token-file F] [--insecure]
 *
 * Serves the dashboard at / and Prometheus metrics at /metrics until SIGINT/SIGTERM. The token
 * may also come from DTRAIN_MONITOR_TOKEN or DTRAIN_MONITOR_TOKEN_FILE (both kept out of `ps`;
 * the file must be mode 600). An address other than loopback needs a token, or --insecure
 * (DTRAIN_MONITOR_INSECURE=1). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli.h"
#include "dtrain/dtrain.h"
#include "dtrain/serve.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
    stop = sig;
}

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtrain serve [--db PATH | --output-dir DIR] [--addr ADDR] [--port PORT]\n"
            "                    [--token TOKEN | --token-file FILE] [--insecure]\n"
            "Serves the experiment store (default runs/dtrain.db): the dashboard at /, Prometheus\n"
            "metrics at /metrics, JSON at /api/runs. Binds 127.0.0.1:8765 by default; with a\n"
            "token (or DTRAIN_MONITOR_TOKEN, or the first line of a mode-600 file:\n"
            "--token-file, DTRAIN_MONITOR_TOKEN_FILE) every request needs \"Authorization:\n"
            "Bearer TOKEN\" (a browser: ?access_token=TOKEN). An address other than loopback is\n"
            "refused without a token unless --insecure (DTRAIN_MONITOR_INSECURE=1).\n");
    return f == stdout ? 0 : 2;
}

int dt_cli_serve(int argc, char **argv) {
    const char *insecure = getenv("DTRAIN_MONITOR_INSECURE");
    dt_serve_opts o = {.addr = "127.0.0.1",
                       .port = 8765,
                       .token = getenv("DTRAIN_MONITOR_TOKEN"),
                       .token_file = getenv("DTRAIN_MONITOR_TOKEN_FILE"),
                       .insecure = insecure && !strcmp(insecure, "1")};
    char db[4200] = "runs/dtrain.db";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!strcmp(a, "--insecure")) {
            o.insecure = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "dtrain serve: %s needs a value\n", a);
            return usage(stderr);
        }
        i++;
        if (!strcmp(a, "--db")) {
            snprintf(db, sizeof db, "%s", v);
        } else if (!strcmp(a, "--output-dir")) {
            snprintf(db, sizeof db, "%s/dtrain.db", v);
        } else if (!strcmp(a, "--addr")) {
            o.addr = v;
        } else if (!strcmp(a, "--port")) {
            char *e;
            long p = strtol(v, &e, 10);
            if (!*v || *e || p < 0 || p > 65535) {
                fprintf(stderr, "dtrain serve: --port %s: expected 0-65535\n", v);
                return 2;
            }
            o.port = (int)p;
        } else if (!strcmp(a, "--token")) {
            o.token = v, o.token_file = NULL;
        } else if (!strcmp(a, "--token-file")) {
            o.token_file = v, o.token = NULL;
        } else {
            fprintf(stderr, "dtrain serve: unknown option %s\n", a);
            return usage(stderr);
        }
    }
    o.db = db;
    if (access(!strncmp(db, "file://", 7) ? db + 7 : db, F_OK) != 0)
        fprintf(stderr,
                "dtrain serve: warning: %s does not exist yet; serving it once a run "
                "creates it\n",
                db);
    dt_serve *srv;
    if (dt_serve_open(&o, &srv) != DT_OK) {
        fprintf(stderr, "dtrain serve: %s\n", dt_last_error());
        return 1;
    }
    dt_cli_on_stop(on_signal);
    signal(SIGPIPE, SIG_IGN);
    printf("dtrain serve: http://%s:%d/ (dashboard), /metrics (Prometheus); store %s%s\n",
           strchr(o.addr, ':') ? "[ipv6]" : o.addr, dt_serve_port(srv), db,
           (o.token && o.token[0]) || (o.token_file && o.token_file[0]) ? "; bearer token required"
           : o.insecure                                                 ? "; no token (--insecure)"
                                                                        : "");
    fflush(stdout);
    while (!stop) pause();
    dt_serve_close(srv);
    return 0;
}
