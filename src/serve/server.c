/* The monitoring server's HTTP side: the listening socket (bound here, so a port in use is a
 * clear error naming ADDR:PORT before libmicrohttpd starts), bearer-token checks, and routing.
 * libmicrohttpd runs one internal thread that polls every connection; requests are answered
 * from the store synchronously (each is a few small SQLite statements). A malformed request is
 * answered 400 by libmicrohttpd itself; nothing a client sends can stop the server or the
 * process that hosts it (SIGPIPE is not raised: libmicrohttpd sends with MSG_NOSIGNAL). A request
 * line of a single word (no URI at all) is not even answered: libmicrohttpd closes the
 * connection. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "serve/serve_impl.h"

enum { CONN_TIMEOUT_S = 15, MAX_CONNECTIONS = 64 };

void sv_printf(sv_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && b->n + (size_t)n < b->cap) {
            b->n += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->n + (size_t)n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
}

void sv_puts(sv_buf *b, const char *s) {
    sv_printf(b, "%s", s);
}

dt_track *sv_store(dt_serve *s) {
    if (!s->store && dt_track_open_existing(s->db_path, &s->store) != DT_OK) s->store = NULL;
    return s->store;
}

void sv_store_reset(dt_serve *s) {
    dt_track_close(s->store);
    s->store = NULL;
}

/* Compares every byte whatever the first difference, so the time taken tells nothing about how
 * much of a guessed token was right. */
static int token_ok(const char *want, const char *header) {
    static const char prefix[] = "Bearer ";
    if (!header || strncmp(header, prefix, sizeof prefix - 1)) return 0;
    const char *got = header + sizeof prefix - 1;
    size_t lw = strlen(want), lg = strlen(got);
    unsigned diff = (unsigned)(lw ^ lg);
    for (size_t i = 0; i < lw; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)got[i % (lg ? lg : 1)];
    return diff == 0 && lg > 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type, sv_buf *b) {
    if (b->failed) {
        free(b->p);
        *b = (sv_buf){0};
        sv_puts(b, "out of memory\n");
        code = MHD_HTTP_INTERNAL_SERVER_ERROR, type = "text/plain; charset=utf-8";
    }
    struct MHD_Response *r =
        b->p ? MHD_create_response_from_buffer(b->n, b->p, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(b->p);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"dtrain\"");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result text(struct MHD_Connection *c, unsigned code, const char *msg) {
    sv_buf b = {0};
    sv_puts(&b, msg);
    return reply(c, code, "text/plain; charset=utf-8", &b);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    dt_serve *s = cls;
    (void)upload, (void)con_cls;
    if (*upload_size) { /* a body is not wanted: drop it, answer once it is read */
        *upload_size = 0;
        return MHD_YES;
    }
    /* RFC 6750: the header, or the access_token query parameter (what a browser opening the
     * dashboard can send; the page then sends the header on its own requests) */
    const char *qt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "access_token");
    char qbuf[600];
    snprintf(qbuf, sizeof qbuf, "Bearer %s", qt ? qt : "");
    if (s->token[0] &&
        !token_ok(s->token, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")) &&
        !(qt && token_ok(s->token, qbuf)))
        return text(c, MHD_HTTP_UNAUTHORIZED,
                    "401 unauthorized: this server needs \"Authorization: Bearer TOKEN\"\n");
    /* RFC 9112 3.2: an HTTP/1.1 request without Host is a 400 (libmicrohttpd lets it pass) */
    if (!strcmp(version, MHD_HTTP_VERSION_1_1) &&
        !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))
        return text(c, MHD_HTTP_BAD_REQUEST, "400 bad request: HTTP/1.1 needs a Host header\n");
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "405 method not allowed: only GET\n");
    sv_buf b = {0};
    if (!strcmp(url, "/metrics")) {
        sv_prometheus(s, &b);
        return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &b);
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        sv_puts(&b, sv_dashboard_html);
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", &b);
    }
    if (!strncmp(url, "/api/", 5)) {
        const char *key = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key");
        const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
        int code = sv_api(s, url + 5, key, since, &b);
        return reply(c, (unsigned)code, "application/json", &b);
    }
    return text(c, MHD_HTTP_NOT_FOUND, "404 not found: try /, /metrics or /api/runs\n");
}

/* libmicrohttpd's own errors (a malformed request line, a dropped connection) are the client's
 * problem, not the host's: kept off the training output. */
static void quiet_log(void *cls, const char *fmt, va_list ap) {
    (void)cls, (void)fmt, (void)ap;
}

static dt_status listen_on(dt_serve *s) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int e = getaddrinfo(s->addr, port, &hints, &res);
    if (e) return dt_error_set(DT_ERR_INVALID, "monitor: address %s: %s", s->addr, gai_strerror(e));
    int err = 0;
    s->fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->fd < 0)
        err = errno;
    else if (setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
             bind(s->fd, res->ai_addr, res->ai_addrlen) || listen(s->fd, 64))
        err = errno;
    freeaddrinfo(res);
    if (err) {
        if (s->fd >= 0) close(s->fd);
        s->fd = -1;
        return dt_error_set(
            DT_ERR_IO, "monitor: cannot listen on %s:%d: %s%s", s->addr, s->port, strerror(err),
            err == EADDRINUSE ? " (another server has the port; choose another)" : "");
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(s->fd, (struct sockaddr *)&sa, &sl) == 0)
        s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    return DT_OK;
}

dt_status dt_serve_start(const dt_serve_opts *o, dt_serve **out) {
    *out = NULL;
    if (!o || !o->db || !o->db[0])
        return dt_error_set(DT_ERR_INVALID, "monitor: no experiment store given");
    if (o->port < 0 || o->port > 65535)
        return dt_error_set(DT_ERR_INVALID, "monitor: port %d: expected 0-65535", o->port);
    dt_serve *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "monitor: out of memory");
    s->fd = -1;
    s->port = o->port;
    snprintf(s->addr, sizeof s->addr, "%s", o->addr && o->addr[0] ? o->addr : "127.0.0.1");
    snprintf(s->token, sizeof s->token, "%s", o->token ? o->token : "");
    const char *db = o->db;
    if (!strncmp(db, "file://", 7)) db += 7;
    snprintf(s->db_path, sizeof s->db_path, "%s", db);
    snprintf(s->experiment, sizeof s->experiment, "%s", o->experiment ? o->experiment : "");
    snprintf(s->run, sizeof s->run, "%s", o->run ? o->run : "");
    pthread_mutex_init(&s->mu, NULL);
    if (o->token && strlen(o->token) >= sizeof s->token) {
        dt_serve_stop(s);
        return dt_error_set(DT_ERR_INVALID, "monitor: token longer than %zu characters",
                            sizeof s->token - 1);
    }
    dt_status st = listen_on(s);
    if (st != DT_OK) {
        dt_serve_stop(s);
        return st;
    }
    s->mhd =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handle,
                         s, MHD_OPTION_EXTERNAL_LOGGER, quiet_log, NULL, MHD_OPTION_LISTEN_SOCKET,
                         s->fd, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS, MHD_OPTION_END);
    if (!s->mhd) {
        dt_serve_stop(s);
        return dt_error_set(DT_ERR_IO, "monitor: cannot start the HTTP server on %s:%d",
                            o->addr && o->addr[0] ? o->addr : "127.0.0.1", o->port);
    }
    s->fd = -1; /* libmicrohttpd closes the listening socket when it stops */
    *out = s;
    return DT_OK;
}

int dt_serve_port(const dt_serve *s) {
    return s ? s->port : 0;
}

void dt_serve_set_job(dt_serve *s, pid_t mpirun_pid, int restarts) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->mpirun_pid = mpirun_pid, s->restarts = restarts, s->have_job = 1;
    pthread_mutex_unlock(&s->mu);
}

void dt_serve_stop(dt_serve *s) {
    if (!s) return;
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->fd >= 0) close(s->fd);
    dt_track_close(s->store);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
