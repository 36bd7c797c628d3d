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
/* The sweep API (api_sweep.c): /api/sweeps and /api/sweeps/ID. */
int dt_sv_api_sweeps(dt_serve *s, sv_buf *b);
int dt_sv_api_sweep(dt_serve *s, const char *ref, sv_buf *b);
/* api.c's answers: {"error": msg} with `code`; `o` printed (and freed) with 200; the store's
 * last error with 503, the store reopened by the next request. */
struct cJSON;
int dt_sv_api_error(sv_buf *b, int code, const char *msg);
int dt_sv_api_emit(sv_buf *b, struct cJSON *o);
int dt_sv_api_store_error(dt_serve *s, sv_buf *b);
/* The start of both pages (dashboard.c, dashboard_sweep.c): the head up to their own CSS, with
 * the rules they share; each page then adds its rules and "</style>". */
/* clang-format off */
#define DT_SV_PAGE_HEAD(title) \
    "<!doctype html>\n" \
    "<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" title "</title>\n" \
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n" \
    "<style>\n" \
    "body{font:14px system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}\n" \
    "header{background:#263238;color:#fff;padding:8px 16px;font-weight:600}\n" \
    "header a{color:#bbdefb;margin-left:16px;font-weight:400}\n" \
    "main{display:flex;gap:16px;padding:16px}\n" \
    "table{border-collapse:collapse;background:#fff;width:100%}\n" \
    "td,th{padding:4px 8px;border-bottom:1px solid #e3e5e8;text-align:left;font-size:13px}\n" \
    "tr.sel{background:#e3f2fd}\n" \
    "a{color:#1565c0;text-decoration:none}\n" \
    "#detail{flex:1;min-width:0}\n" \
    ".card{background:#fff;border:1px solid #e3e5e8;border-radius:6px;padding:10px;margin-bottom:12px}\n" \
    "svg{background:#fff}\n" \
    ".err{color:#c62828}\n"
/* The start of both pages' script: the token (?access_token=, sent on as a header), get(URL)
 * -> its JSON, esc(text) for HTML, page(PATH, HASH) -> a link to the other page that keeps the
 * token (the header's links are rewritten so). */
#define DT_SV_PAGE_SCRIPT \
    "<script>\n" \
    "\"use strict\";\n" \
    "var q=new URLSearchParams(location.search),tok=q.get(\"access_token\");\n" \
    "var hdr=tok?{headers:{Authorization:\"Bearer \"+tok}}:{};\n" \
    "function get(u){return fetch(u,hdr).then(function(r){if(!r.ok)throw new Error(u+\": HTTP \"+r.status);return r.json();});}\n" \
    "function esc(s){return String(s).replace(/[&<>\"]/g,function(c){return{\"&\":\"&amp;\",\"<\":\"&lt;\",\">\":\"&gt;\",'\"':\"&quot;\"}[c];});}\n" \
    "function page(p,h){return p+(tok?\"?access_token=\"+encodeURIComponent(tok):\"\")+(h||\"\");}\n" \
    "Array.prototype.forEach.call(document.querySelectorAll(\"header a\"),function(a){a.href=page(a.getAttribute(\"href\"));});\n"
/* clang-format on */
/* The dashboard page, and the sweep page (dashboard_sweep.c). */
extern const char dt_sv_dashboard_html[];
extern const char dt_sv_sweep_html[];

#endif
