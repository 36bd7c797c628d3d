/* The monitoring server: a Prometheus endpoint and a dashboard over the experiment store
 * (include/dtrain/track.h), served by libmicrohttpd on one background thread.
 *
 *   dt_serve_opts o = {.addr = "127.0.0.1", .port = 8765, .db = "runs/dtrain.db"};
 *   dt_serve *srv;
 *   if (dt_serve_open(&o, &srv) != DT_OK) fprintf(stderr, "%s\n", dt_last_error());
 *   dt_serve_set_job(srv, mpirun_pid, restarts);   // the launcher's own counters (optional)
 *   dt_serve_close(srv);
 *
 * Routes (every one needs "Authorization: Bearer TOKEN" when a token is set; 401 otherwise):
 *   GET /metrics                      Prometheus text format 0.0.4, labels experiment and run
 *   GET /                             the dashboard (HTML, JS and CSS built in; no internet)
 *   GET /api/runs                     runs, newest first (JSON)
 *   GET /api/runs/ID                  one run: status, attempts, config, params, artifacts
 *   GET /api/runs/ID/metrics?key=K&since=S   K's values at steps > S (latest attempt per step)
 *   GET /sweeps                       the sweep page: trials, curves, parallel coordinates
 *   GET /api/sweeps                   sweeps (runs tagged sweep.kind=sweep), newest first
 *   GET /api/sweeps/ID                one sweep: its parameters and trials, the best so far
 *
 * Why the server reads the store instead of being fed by the trainer: the store already holds
 * every value rank 0 logs, is readable while a run writes (WAL), and so the same server works
 * for any run, live or finished, from the launcher or from `dtrain serve`. The store is opened
 * lazily (it may not exist before the first run begins) and a store error is reported as
 * dtrain_store_up 0, never as a crash: monitoring never stops training. */
#ifndef DTRAIN_SERVE_H
#define DTRAIN_SERVE_H

#include <stdint.h>
#include <sys/types.h>
#include "dtrain/status.h"
#include "dtrain/track.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_serve dt_serve;

typedef struct dt_serve_opts {
    const char *addr;  /* address to bind; NULL or "": 127.0.0.1 (loopback only) */
    int port;          /* 0: any free port (dt_serve_port tells which) */
    const char *token; /* NULL or "": no authentication */
    const char *db;    /* the experiment store's path */
    /* /metrics publishes only this run when set (the launcher's); else the newest runs */
    const char *experiment, *run;
    /* the token's file when `token` is NULL or "": its first line, the file private to its
     * owner (mode 600; refused otherwise, like ssh keys) */
    const char *token_file;
    /* Serving on an address other than loopback (127.0.0.0/8, ::1) without a token is refused
     * (DT_ERR_INVALID, naming the address and how to give a token) unless this is set: it
     * would show every run to anyone who can reach the host. */
    int insecure;
} dt_serve_opts;

/* Binds, listens and starts the server thread. A port in use or an address that cannot be
 * bound is DT_ERR_IO naming "ADDR:PORT" and the reason; a non-loopback address without a token
 * (and without `insecure`) or an unusable token file is DT_ERR_INVALID. Only GET and HEAD are
 * answered (405 otherwise: no route changes anything), a request body is never read, request
 * headers and URL together are limited to 16 KiB (431 or 414 beyond), and nothing but the
 * routes below is served (no files: a path like /../etc/passwd is a 404). */
dt_status dt_serve_open(const dt_serve_opts *o, dt_serve **out);
/* The port listened on. */
int dt_serve_port(const dt_serve *s);
/* The launcher's view of its job: the mpirun process (its children on this host are the
 * workers, whose resident memory /metrics reports; 0 when none runs) and the restarts so far.
 * Thread-safe. */
void dt_serve_set_job(dt_serve *s, pid_t mpirun_pid, int restarts);
/* Stops the thread, closes the socket and the store. NULL is fine. */
void dt_serve_close(dt_serve *s);

/* ---- Store queries the server uses (src/track/query_live.c) ------------------------------- */

/* Per metric key, its newest value: the latest attempt's highest step. One statement, so the
 * values are of one consistent snapshot. */
dt_status dt_track_metrics_latest(dt_track *s, int64_t run_id, dt_track_metric_cb cb, void *ud);
/* `key`'s values at steps > since_step in step order, each step's value from the latest attempt
 * that logged it (a resumed run's curve, without the steps it repeated). */
dt_status dt_track_metrics_since(dt_track *s, int64_t run_id, const char *key, int64_t since_step,
                                 dt_track_metric_cb cb, void *ud);

#ifdef __cplusplus
}
#endif
#endif
