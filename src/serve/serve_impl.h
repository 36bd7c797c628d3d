/* Internal state of the monitoring server (include/dtrain/serve.h): server.c owns the socket,
 * libmicrohttpd and the routes; prom.c writes /metrics; api.c the JSON API; dashboard.c holds
 * the built-in page. */
#ifndef DTRAIN_SERVE_IMPL_H
#define DTRAIN_SERVE_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include "dtrain/serve.h"
#include "dtrain/track.h"

/* A growing response body; `failed` after an allocation failure (the route answers 500). */
typedef struct sv_buf {
    char *p;
    size_t n, cap;
    int failed;
} sv_buf;

void dt_sv_printf(sv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dt_sv_puts(sv_buf *b, const char *s);

struct dt_serve {
    struct MHD_Daemon *mhd;
    int fd;
    int port;
    char addr[256];
    char token[512];
    int insecure; /* dt_serve_opts.insecure: no loopback or Host check without a token */
    char db_path[4096];
    char experiment[256], run[256];
    /* the store, opened on the first request that finds it (only the server thread uses it) */
    dt_track *store;
    /* the launcher's job (dt_serve_set_job) */
    pthread_mutex_t mu;
    pid_t mpirun_pid;
    int restarts, have_job;
};

/* The store, opened if needed; NULL with dt_last_error() set when there is none (yet). */
dt_track *dt_sv_store(dt_serve *s);
/* A request failed on the store: closed, reopened by the next request. */
void dt_sv_store_reset(dt_serve *s);

/* /metrics (Prometheus text format 0.0.4). */
void dt_sv_prometheus(dt_serve *s, sv_buf *b);
/* The JSON API: fills `b` and returns the HTTP status. `path` is after "/api/". */
int dt_sv_api(dt_serve *s, const char *path, const char *key, const char *since, sv_buf *b);
/* The dashboard page. */
extern const char dt_sv_dashboard_html[];

#endif
