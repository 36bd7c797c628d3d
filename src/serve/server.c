/* The monitoring server's HTTP side: the listening socket (bound here, so a port in use is a
 * clear error naming ADDR:PORT before libmicrohttpd starts), bearer-token checks, and routing.
 * libmicrohttpd runs one internal thread that polls every connection; requests are answered
 * from the store synchronously (each is a few small SQLite statements). A malformed request is
 * answered 400 by libmicrohttpd itself; nothing a client sends can stop the server or the
 * process that hosts it (SIGPIPE is not raised: libmicrohttpd sends with MSG_NOSIGNAL). A request
 * line of a single word (no URI at all) is not even answered: libmicrohttpd closes the
 * connection.
 *
 * Endpoint safety (docs/security.md; tests/security/test_endpoint.c): an address other than
 * loopback needs a token (or opts.insecure); the token may come from a file private to its owner;
 * only GET and HEAD are answered and every answer is queued as soon as the headers are in, so a
 * request body is never read (libmicrohttpd closes the connection after the answer); the request
 * line and headers fit in CONN_MEMORY or are 414/431; nothing outside the built-in routes is
 * served; without a token, only requests whose Host is loopback or an IP address (DNS
 * rebinding). */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core/fsmode.h"
#include "serve/serve_impl.h"

/* CONN_MEMORY: each connection's buffer for the request line and headers (and the reply's
 * headers); a request whose line and headers do not fit is answered 414 (URL) or 431 (headers)
 * by libmicrohttpd. 32 KiB (libmicrohttpd's default, stated here so that it stays the bound):
 * room for a browser's cookies for 127.0.0.1, which every local web service shares. */
enum { CONN_TIMEOUT_S = 15, MAX_CONNECTIONS = 64, CONN_MEMORY = 32 << 10 };

void dt_sv_printf(sv_buf *b, const char *fmt, ...) {
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

void dt_sv_puts(sv_buf *b, const char *s) {
    dt_sv_printf(b, "%s", s);
}

dt_track *dt_sv_store(dt_serve *s) {
    if (!s->store && dt_track_open_existing(s->db_path, &s->store) != DT_OK) s->store = NULL;
    return s->store;
}

void dt_sv_store_reset(dt_serve *s) {
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
        dt_sv_puts(b, "out of memory\n");
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
    dt_sv_puts(&b, msg);
    return reply(c, code, "text/plain; charset=utf-8", &b);
}

/* DNS rebinding: a web page the user opens can point its own host name at 127.0.0.1 and then
 * read a server without a token as if it were its own site. What the browser cannot fake is the
 * Host header, which carries that name: a server without a token answers only Hosts that are an
 * IP address or localhost (*.localhost never leaves the machine). No Host at all (HTTP/1.0) is
 * not a browser's request. */
static int host_is_local(const char *host) {
    if (!host) return 1;
    char h[256];
    size_t n = strlen(host);
    if (n >= sizeof h) return 0;
    memcpy(h, host, n + 1);
    char *name = h, *end;
    if (h[0] == '[') { /* [v6]:port */
        name = h + 1;
        if (!(end = strchr(name, ']')) || (end[1] && end[1] != ':')) return 0;
        *end = '\0';
        struct in6_addr a6;
        return inet_pton(AF_INET6, name, &a6) == 1;
    }
    if ((end = strchr(h, ':'))) *end = '\0';
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1) return 1;
    size_t l = strlen(name);
    while (l && name[l - 1] == '.') name[--l] = '\0'; /* "localhost." */
    return !strcasecmp(name, "localhost") || (l > 10 && !strcasecmp(name + l - 10, ".localhost"));
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    dt_serve *s = cls;
    (void)upload, (void)con_cls;
    if (*upload_size) { /* not reached (the first call answers); a body is dropped unread */
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
    if (!s->token[0] && !s->insecure &&
        !host_is_local(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)))
        return text(c, MHD_HTTP_FORBIDDEN,
                    "403 forbidden: this server answers only requests addressed to 127.0.0.1, "
                    "[::1] or localhost (a web page's own host name pointed at this machine is "
                    "not let in)\n");
    sv_buf b = {0};
    if (!strcmp(url, "/metrics")) {
        dt_sv_prometheus(s, &b);
        return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &b);
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        dt_sv_puts(&b, dt_sv_dashboard_html);
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", &b);
    }
    if (!strcmp(url, "/sweeps")) {
        dt_sv_puts(&b, dt_sv_sweep_html);
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", &b);
    }
    if (!strncmp(url, "/api/", 5)) {
        const char *key = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key");
        const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
        int code = dt_sv_api(s, url + 5, key, since, &b);
        return reply(c, (unsigned)code, "application/json", &b);
    }
    return text(c, MHD_HTTP_NOT_FOUND, "404 not found: try /, /sweeps, /metrics or /api/runs\n");
}

/* %HH decoding of the path and query values, as libmicrohttpd's own, except that %00 stays as
 * it is: a decoded NUL would end the path early ("/index.html%00.txt" read as "/index.html"),
 * so such a path matches no route and is a 404. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    char *w = s;
    for (const char *r = s; *r; r++) {
        unsigned v;
        char hex[3] = {r[0] == '%' ? r[1] : 0, r[0] == '%' && r[1] ? r[2] : 0, 0};
        if (hex[0] && hex[1] && strspn(hex, "0123456789abcdefABCDEF") == 2 &&
            sscanf(hex, "%2x", &v) == 1 && v) {
            *w++ = (char)v;
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* libmicrohttpd's own errors (a malformed request line, a dropped connection) are the client's
 * problem, not the host's: kept off the training output. */
static void quiet_log(void *cls, const char *fmt, va_list ap) {
    (void)cls, (void)fmt, (void)ap;
}

/* 127.0.0.0/8, ::1, and ::ffff:127.x.y.z: reachable from this host only. */
static int is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family != AF_INET6) return 0;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static dt_status listen_on(dt_serve *s, int insecure) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int e = getaddrinfo(s->addr, port, &hints, &res);
    if (e) return dt_error_set(DT_ERR_INVALID, "monitor: address %s: %s", s->addr, gai_strerror(e));
    /* the address actually bound (a host name resolves to it) decides, not how it was spelt */
    if (!s->token[0] && !insecure && !is_loopback(res->ai_addr)) {
        freeaddrinfo(res);
        return dt_error_set(DT_ERR_INVALID,
                            "monitor: refusing to serve on %s without a token: other hosts could "
                            "read every run (give a token: DTRAIN_MONITOR_TOKEN or "
                            "DTRAIN_MONITOR_TOKEN_FILE; or serve on 127.0.0.1; "
                            "DTRAIN_MONITOR_INSECURE=1 serves it to anyone)",
                            s->addr);
    }
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

/* The token: o->token, else the first line of o->token_file (a secret file: src/core/fsmode.h).
 * Spaces and control characters are refused (they cannot be sent in the header intact); the
 * messages never hold the token. */
static dt_status set_token(dt_serve *s, const dt_serve_opts *o) {
    if (o->token && o->token[0]) {
        if (strlen(o->token) >= sizeof s->token)
            return dt_error_set(DT_ERR_INVALID, "monitor: token longer than %zu characters",
                                sizeof s->token - 1);
        snprintf(s->token, sizeof s->token, "%s", o->token);
    } else if (o->token_file && o->token_file[0]) {
        dt_status st = dt_secret_file_read(o->token_file, "monitor: token file", s->token,
                                           sizeof s->token, NULL);
        if (st != DT_OK) return st;
        size_t n = strcspn(s->token, "\r\n"); /* the first line, without trailing blanks */
        while (n && (s->token[n - 1] == ' ' || s->token[n - 1] == '\t')) n--;
        s->token[n] = '\0';
        if (!s->token[0])
            return dt_error_set(DT_ERR_INVALID, "monitor: token file %s: the first line is empty",
                                o->token_file);
    } else {
        return DT_OK;
    }
    for (const char *c = s->token; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f) {
            explicit_bzero(s->token, sizeof s->token);
            return dt_error_set(DT_ERR_INVALID,
                                "monitor: the token%s%s has a space or a control character",
                                o->token && o->token[0] ? "" : " in ",
                                o->token && o->token[0] ? "" : o->token_file);
        }
    return DT_OK;
}

dt_status dt_serve_open(const dt_serve_opts *o, dt_serve **out) {
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

    s->insecure = o->insecure;
    const char *db = o->db;
    if (!strncmp(db, "file://", 7)) db += 7;
    snprintf(s->db_path, sizeof s->db_path, "%s", db);
    snprintf(s->experiment, sizeof s->experiment, "%s", o->experiment ? o->experiment : "");
    snprintf(s->run, sizeof s->run, "%s", o->run ? o->run : "");
    pthread_mutex_init(&s->mu, NULL);
    dt_status st = set_token(s, o);
    if (st == DT_OK) st = listen_on(s, o->insecure);
    if (st != DT_OK) {
        dt_serve_close(s);
        return st;
    }
    s->mhd = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handle, s,
        MHD_OPTION_EXTERNAL_LOGGER, quiet_log, NULL, MHD_OPTION_LISTEN_SOCKET, s->fd,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
    if (!s->mhd) {
        dt_serve_close(s);
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

void dt_serve_close(dt_serve *s) {
    if (!s) return;
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->fd >= 0) close(s->fd);
    dt_track_close(s->store);
    pthread_mutex_destroy(&s->mu);
    explicit_bzero(s->token, sizeof s->token);
    free(s);
}
