/* Endpoint safety of the monitoring server (src/serve/server.c, include/dtrain/serve.h), over
 * real sockets to the real libmicrohttpd server in this process, serving a small experiment
 * store:
 *   - where it may listen: loopback (127.0.0.0/8, ::1, localhost) without a token; any other
 *     address (0.0.0.0, ::, this host's own address) refused without a token, with a one-line
 *     message naming the address and how to give a token; allowed with a token or `insecure`;
 *   - token files: used only when private to the owner (mode 600), like ssh keys;
 *   - no state change: every method but GET/HEAD is 405 (401 first where a token is needed), and
 *     the store is unchanged afterwards; a request body is never waited for;
 *   - oversized requests: a huge header, URL or header count are 431/414, a header just under
 *     the limit is served;
 *   - path traversal: nothing but the built-in routes is served (404, never a file's bytes);
 *   - DNS rebinding: a server without a token answers only Hosts that are loopback names or IP
 *     addresses.
 * Each reply is read from the socket and its status line checked. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "dtrain/serve.h"
#include "dtrain/track.h"
#include "harness.h"

static char g_dir[256], g_db[512];
static const char *g_connect = "127.0.0.1"; /* where requests go */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void make_store(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dt-endpoint-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(g_db, sizeof g_db, "%s/dtrain.db", g_dir);
    dt_track *s;
    CHECK_OK(dt_track_open(g_db, &s));
    int64_t r;
    CHECK_OK(dt_track_run_begin(s, "exp", "run-a", 1, "h:1", "optim:\n  lr: 0.1\n", NULL, 0, &r));
    for (int i = 1; i <= 5; i++) CHECK_OK(dt_track_metric(s, r, "loss", i, 100.0 + i, 1.0 / i));
    CHECK_OK(dt_track_run_end(s, r, "done", "finished"));
    CHECK_OK(dt_track_close(s));
}

/* A reply: status code (0: the connection closed without one), the whole text. */
typedef struct reply {
    int code;
    char *text;
    size_t n;
    double secs;
    int complete; /* keep_open: the whole reply (headers and Content-Length bytes) came */
} reply;

static void reply_free(reply *r) {
    free(r->text);
    *r = (reply){0};
}

/* Sends `n` bytes on a new connection to 127.0.0.1:port (what the server takes of them: it may
 * answer and close early), half-closes unless keep_open, and reads until the server closes or
 * `wait_s` passes. */
static reply request_raw(int port, const char *data, size_t n, int keep_open, double wait_s) {
    reply r = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = inet_addr(g_connect)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        CHECK(0, "connect to port %d: %s", port, strerror(errno));
        if (fd >= 0) close(fd);
        return r;
    }
    double t0 = now_s();
    for (size_t done = 0; done < n;) {
        ssize_t k = send(fd, data + done, n - done, MSG_NOSIGNAL);
        if (k <= 0) break;
        done += (size_t)k;
    }
    if (!keep_open) shutdown(fd, SHUT_WR);
    size_t cap = 1 << 16;
    r.text = malloc(cap);
    for (;;) {
        double left = wait_s - (now_s() - t0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        if (r.n + 4096 > cap) r.text = realloc(r.text, cap *= 2);
        ssize_t k = recv(fd, r.text + r.n, cap - r.n - 1, 0);
        if (k <= 0) break;
        r.n += (size_t)k;
        /* keep_open: the reply is complete once its headers and Content-Length bytes are in */
        if (keep_open) {
            r.text[r.n] = 0;
            char *e = strstr(r.text, "\r\n\r\n"), *cl = strcasestr(r.text, "Content-Length:");
            if (e && cl && cl < e && (size_t)(e + 4 - r.text) + strtoul(cl + 15, NULL, 10) <= r.n) {
                r.complete = 1;
                break;
            }
        }
    }
    r.secs = now_s() - t0;
    close(fd);
    r.text[r.n] = 0;
    if (!strncmp(r.text, "HTTP/1.", 7) && r.n > 12) r.code = atoi(r.text + 9);
    return r;
}

/* One request: METHOD PATH HTTP/1.1 with Host (unless host is NULL), a bearer token if given,
 * and `extra` header lines. */
static reply request(int port, const char *method, const char *path, const char *host,
                     const char *token, const char *extra) {
    size_t n = strlen(path) + (extra ? strlen(extra) : 0) + 1024;
    char *buf = malloc(n);
    int k = snprintf(buf, n, "%s %s HTTP/1.1\r\n", method, path);
    if (host) k += snprintf(buf + k, n - (size_t)k, "Host: %s\r\n", host);
    if (token) k += snprintf(buf + k, n - (size_t)k, "Authorization: Bearer %s\r\n", token);
    k += snprintf(buf + k, n - (size_t)k, "%sConnection: close\r\n\r\n", extra ? extra : "");
    reply r = request_raw(port, buf, (size_t)k, 0, 10);
    free(buf);
    return r;
}

static int status_of(int port, const char *method, const char *path, const char *host,
                     const char *token) {
    reply r = request(port, method, path, host, token, NULL);
    int c = r.code;
    reply_free(&r);
    return c;
}

static const char *body_of(const reply *r) {
    const char *e = r->text ? strstr(r->text, "\r\n\r\n") : NULL;
    return e ? e + 4 : "";
}

static dt_serve *start(const char *addr, const char *token, const char *token_file, int insecure,
                       dt_status *st) {
    dt_serve_opts o = {.addr = addr,
                       .port = 0,
                       .db = g_db,
                       .token = token,
                       .token_file = token_file,
                       .insecure = insecure};
    dt_serve *s = NULL;
    *st = dt_serve_open(&o, &s);
    return s;
}

/* ---- where the server may listen ---------------------------------------------------------- */

static void expect_refused(const char *addr) {
    dt_status st;
    dt_serve *s = start(addr, NULL, NULL, 0, &st);
    const char *m = dt_last_error();
    CHECK(st == DT_ERR_INVALID && !s, "%s without a token: status %d (%s)", addr, (int)st, m);
    CHECK(strstr(m, addr) && strstr(m, "without a token") && strstr(m, "DTRAIN_MONITOR_TOKEN") &&
              strstr(m, "DTRAIN_MONITOR_INSECURE") && !strchr(m, '\n'),
          "%s: one line naming the address and how to give a token: %s", addr, m);
    dt_serve_close(s);
}

static void expect_served(const char *addr, const char *token, int insecure, int may_lack) {
    dt_status st;
    dt_serve *s = start(addr, token, NULL, insecure, &st);
    /* may_lack: an address this machine may not have (IPv6 off): then binding fails, but the
     * refusal for want of a token must not be what stopped it */
    CHECK(st == DT_OK || (may_lack && st == DT_ERR_IO), "%s (token %s, insecure %d): %d %s", addr,
          token ? "yes" : "no", insecure, (int)st, dt_last_error());
    if (s && !strchr(addr, ':')) { /* IPv4: it answers there (0.0.0.0: on 127.0.0.1 too) */
        int want = token ? 401 : 200;
        g_connect = !strcmp(addr, "0.0.0.0") || !strcmp(addr, "localhost") ? "127.0.0.1" : addr;
        CHECK(status_of(dt_serve_port(s), "GET", "/metrics", "127.0.0.1", NULL) == want,
              "%s answers %d", addr, want);
        g_connect = "127.0.0.1";
    }
    dt_serve_close(s);
}

/* This host's first IPv4 address that is not loopback, or "" */
static void own_address(char *out, size_t cap) {
    out[0] = 0;
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) != 0) return;
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            if ((ntohl(a.s_addr) >> 24) != 127) {
                inet_ntop(AF_INET, &a, out, (socklen_t)cap);
                break;
            }
        }
    freeifaddrs(ifs);
}

static void test_bind_rules(void) {
    expect_refused("0.0.0.0");
    expect_refused("::");
    expect_refused("::ffff:0.0.0.0");
    char own[64];
    own_address(own, sizeof own);
    if (own[0])
        expect_refused(own);
    else
        printf("note: no non-loopback IPv4 address on this host; that case not run\n");
    /* loopback: fine without a token */
    expect_served("127.0.0.1", NULL, 0, 0);
    expect_served("127.0.0.2", NULL, 0, 0); /* all of 127.0.0.0/8 is loopback on Linux */
    expect_served("localhost", NULL, 0, 0);
    expect_served("::1", NULL, 0, 1);
    expect_served("::ffff:127.0.0.1", NULL, 0, 1);
    /* elsewhere: with a token, or opted in */
    expect_served("0.0.0.0", "tok-0123456789", 0, 0);
    expect_served("0.0.0.0", NULL, 1, 0);
    expect_served("::", "tok-0123456789", 0, 1);
    if (own[0]) expect_served(own, "tok-0123456789", 0, 0);
}

/* ---- token files --------------------------------------------------------------------------- */

static void write_file(const char *path, const char *text, mode_t mode) {
    unlink(path);
    FILE *f = fopen(path, "w");
    if (!f) {
        CHECK(0, "%s: %s", path, strerror(errno));
        return;
    }
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void test_token_file(void) {
    char tf[600], link[600];
    snprintf(tf, sizeof tf, "%s/token", g_dir);
    snprintf(link, sizeof link, "%s/token-link", g_dir);
    const char *secret = "tf-SECRET-4711";
    char text[128];
    snprintf(text, sizeof text, "%s  \nsecond line ignored\n", secret);

    /* 600: used; its first line without trailing blanks is the token */
    write_file(tf, text, 0600);
    dt_status st;
    dt_serve *s = start("127.0.0.1", NULL, tf, 0, &st);
    CHECK(st == DT_OK, "token file 600: %s", dt_last_error());
    if (s) {
        int p = dt_serve_port(s);
        CHECK(status_of(p, "GET", "/metrics", "127.0.0.1", NULL) == 401, "no token: 401");
        CHECK(status_of(p, "GET", "/metrics", "127.0.0.1", "tf-SECRET-471") == 401, "prefix: 401");
        CHECK(status_of(p, "GET", "/metrics", "127.0.0.1", secret) == 200, "the file's token: 200");
        reply r = request(p, "GET", "/metrics", "127.0.0.1", "wrong", NULL);
        CHECK(r.code == 401 && !strstr(r.text, secret), "a 401 does not show the token");
        reply_free(&r);
    }
    dt_serve_close(s);
    /* a token file makes a non-loopback address acceptable */
    s = start("0.0.0.0", NULL, tf, 0, &st);
    CHECK(st == DT_OK, "0.0.0.0 with a token file: %s", dt_last_error());
    if (s)
        CHECK(status_of(dt_serve_port(s), "GET", "/", "127.0.0.1", NULL) == 401,
              "0.0.0.0 with a token file: 401 without it");
    dt_serve_close(s);
    /* a symlink to a private file is fine (dotfile managers link them) */
    unlink(link);
    CHECK(symlink(tf, link) == 0, "symlink");
    s = start("127.0.0.1", NULL, link, 0, &st);
    CHECK(st == DT_OK, "symlink to a 600 file: %s", dt_last_error());
    dt_serve_close(s);

    /* readable or writable by group or others: refused, naming file, mode and the fix */
    const mode_t bad[] = {0644, 0640, 0604, 0620, 0602, 0660};
    for (int i = 0; i < 6; i++) {
        write_file(tf, text, bad[i]);
        char mode[8];
        snprintf(mode, sizeof mode, "%04o", (unsigned)bad[i]);
        s = start("127.0.0.1", NULL, tf, 0, &st);
        const char *m = dt_last_error();
        CHECK(st == DT_ERR_INVALID && !s && strstr(m, tf) && strstr(m, mode) &&
                  strstr(m, "chmod 600") && !strstr(m, secret) && !strchr(m, '\n'),
              "token file %s: refused with a message naming it: %s", mode, m);
        dt_serve_close(s);
    }
    write_file(tf, text, 0644); /* through the symlink too: the target's mode counts */
    s = start("127.0.0.1", NULL, link, 0, &st);
    CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "0644"), "symlink to a 644 file: %s",
          dt_last_error());
    dt_serve_close(s);
    if (geteuid() == 0) { /* owned by someone else (only root can make such a file here) */
        write_file(tf, text, 0600);
        CHECK(chown(tf, 65534, 65534) == 0, "chown");
        s = start("127.0.0.1", NULL, tf, 0, &st);
        CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "owned by uid 65534"),
              "a file of another user: %s", dt_last_error());
        dt_serve_close(s);
    }
    struct {
        const char *text, *want;
    } odd[] = {{"\n", "empty"},
               {"", "empty"},
               {"has space\n", "space or a control"},
               {"tab\there\n", "space or a control"}};
    for (int i = 0; i < 4; i++) {
        write_file(tf, odd[i].text, 0600);
        s = start("127.0.0.1", NULL, tf, 0, &st);
        CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), odd[i].want) &&
                  strstr(dt_last_error(), tf),
              "token file %d: %s", i, dt_last_error());
        dt_serve_close(s);
    }
    char big[2048];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    write_file(tf, big, 0600);
    s = start("127.0.0.1", NULL, tf, 0, &st);
    CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "more than"), "2 KB token file: %s",
          dt_last_error());
    dt_serve_close(s);
    unlink(tf);
    s = start("127.0.0.1", NULL, tf, 0, &st);
    CHECK(st == DT_ERR_NOTFOUND && strstr(dt_last_error(), tf), "missing token file: %s",
          dt_last_error());
    dt_serve_close(s);
    s = start("127.0.0.1", NULL, g_dir, 0, &st);
    CHECK(st != DT_OK && strstr(dt_last_error(), "not a regular file"), "a folder: %s",
          dt_last_error());
    dt_serve_close(s);
    s = start("127.0.0.1", "has space", NULL, 0, &st);
    CHECK(st == DT_ERR_INVALID && !strstr(dt_last_error(), "has space"),
          "a token with a space: refused without echoing it: %s", dt_last_error());
    dt_serve_close(s);
    unlink(link);
}

/* ---- methods: nothing changes state --------------------------------------------------------- */

static int run_count(void) {
    dt_track *t;
    if (dt_track_open_existing(g_db, &t) != DT_OK) return -1;
    dt_track_run r;
    int n = dt_track_run_find(t, "exp/run-a", &r) == DT_OK;
    dt_track_close(t);
    return n;
}

static void test_methods(int open_port, int tok_port, const char *token) {
    const char *methods[] = {"POST", "PUT",      "DELETE", "PATCH", "OPTIONS", "TRACE", "MKCOL",
                             "MOVE", "PROPFIND", "COPY",   "LOCK",  "UNLOCK",  "FOO"};
    const char *paths[] = {"/",
                           "/metrics",
                           "/api/runs",
                           "/api/runs/1",
                           "/api/runs/exp/run-a",
                           "/sweeps",
                           "/api/sweeps",
                           "/api/sweeps/exp/run-a"};
    enum { N_PATHS = sizeof paths / sizeof *paths };
    int bad = 0, total = 0;
    for (int m = 0; m < 13; m++)
        for (int p = 0; p < N_PATHS; p++) {
            int a = status_of(open_port, methods[m], paths[p], "127.0.0.1", NULL);
            int b = status_of(tok_port, methods[m], paths[p], "127.0.0.1", NULL);
            int c = status_of(tok_port, methods[m], paths[p], "127.0.0.1", token);
            total += 3;
            if (a != 405 || b != 401 || c != 405) {
                bad++;
                printf("  %s %s: open %d, no token %d, token %d\n", methods[m], paths[p], a, b, c);
            }
        }
    CHECK(bad == 0,
          "%d methods x %d paths: 405 without a token needed, 401 without the token, "
          "405 with it (%d of %d requests otherwise)",
          13, (int)N_PATHS, bad, total);
    /* with a body, also an endless one: answered at once, the body never waited for */
    const char *post = "POST /api/runs/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
                       "1000000000\r\n\r\nabc";
    reply r = request_raw(open_port, post, strlen(post), 1, 5);
    CHECK(r.code == 405 && r.complete,
          "POST with a 1 GB Content-Length, body not sent: %d, the whole reply while the body "
          "was still due (%.2f s)",
          r.code, r.secs);
    reply_free(&r);
    const char *chunked = "PUT /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: "
                          "chunked\r\n\r\nffffff\r\nxyz";
    r = request_raw(open_port, chunked, strlen(chunked), 1, 5);
    CHECK(r.code == 405 && r.complete,
          "chunked PUT, body never ending: %d, the whole reply while the body was still due "
          "(%.2f s)",
          r.code, r.secs);
    reply_free(&r);
    const char *getbody = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
                          "1000000000\r\n\r\nabc";
    r = request_raw(open_port, getbody, strlen(getbody), 1, 5);
    CHECK(r.code > 0 && r.complete,
          "GET announcing a 1 GB body: answered %d while the body was still due (%.2f s)", r.code,
          r.secs);
    reply_free(&r);
    /* HEAD: the headers of GET, no body */
    r = request(open_port, "HEAD", "/metrics", "127.0.0.1", NULL, NULL);
    CHECK(r.code == 200 && body_of(&r)[0] == 0, "HEAD /metrics: %d, %zu body bytes", r.code,
          strlen(body_of(&r)));
    reply_free(&r);
    CHECK(run_count() == 1 && status_of(open_port, "GET", "/api/runs/1", "127.0.0.1", NULL) == 200,
          "after every DELETE/PUT/POST the run is still in the store and served");
}

/* ---- oversized requests ------------------------------------------------------------------- */

static void test_oversized(int port, const char *token) {
    size_t big = 200000;
    char *path = malloc(big + 2);
    path[0] = '/';
    memset(path + 1, 'a', big);
    path[big + 1] = 0;
    reply r = request(port, "GET", path, "127.0.0.1", token, NULL);
    CHECK(r.code == 414, "a 200 KB URL: %d (expected 414)", r.code);
    reply_free(&r);
    snprintf(path, 64, "/metrics?key=");
    memset(path + 13, 'k', 40000);
    path[40013] = 0;
    r = request(port, "GET", path, "127.0.0.1", token, NULL);
    CHECK(r.code == 414, "a 40 KB query string: %d (expected 414)", r.code);
    reply_free(&r);
    free(path);

    char *hdr = malloc(big + 64);
    snprintf(hdr, 64, "X-Big: ");
    memset(hdr + 7, 'b', big);
    snprintf(hdr + 7 + big, 8, "\r\n");
    r = request(port, "GET", "/metrics", "127.0.0.1", token, hdr);
    CHECK(r.code == 431, "a 200 KB header: %d (expected 431)", r.code);
    reply_free(&r);
    /* 2000 small headers (40 KB in all) */
    size_t k = 0;
    for (int i = 0; i < 2000; i++) k += (size_t)sprintf(hdr + k, "X-H%d: v\r\n", i);
    r = request(port, "GET", "/metrics", "127.0.0.1", token, hdr);
    CHECK(r.code == 431, "2000 headers, %zu bytes: %d (expected 431)", k, r.code);
    reply_free(&r);
    /* under the limit: a browser's 8 KB of cookies for 127.0.0.1 is served */
    snprintf(hdr, 64, "Cookie: ");
    memset(hdr + 8, 'c', 8000);
    snprintf(hdr + 8008, 8, "\r\n");
    r = request(port, "GET", "/metrics", "127.0.0.1", token, hdr);
    CHECK(r.code == 200, "an 8 KB Cookie header: %d (expected 200)", r.code);
    reply_free(&r);
    free(hdr);
    CHECK(status_of(port, "GET", "/api/runs", "127.0.0.1", token) == 200,
          "still serving after the oversized requests");
}

/* ---- paths: only the built-in routes ----------------------------------------------------------
 */

static void test_traversal(int open_port, int tok_port, const char *token) {
    const char *paths[] = {"/../../../../etc/passwd",
                           "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                           "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
                           "/..%2f..%2f..%2fetc%2fpasswd",
                           "/api/../../../etc/passwd",
                           "/api/runs/../../../../etc/passwd",
                           "/api/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
                           "/api/runs/..%2f..%2f..%2fetc%2fpasswd/metrics?key=loss",
                           "/api/sweeps/../../../../etc/passwd",
                           "/api/sweeps/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
                           "/sweeps/../../etc/passwd",
                           "/index.html/../../etc/passwd",
                           "/metrics/../../etc/passwd",
                           "//etc/passwd",
                           "/etc/passwd",
                           "/proc/self/environ",
                           "/dtrain.db",
                           "/static/../dtrain.db",
                           "/%00",
                           "/index.html%00.txt",
                           "/....//....//etc/passwd",
                           "/\\..\\..\\etc\\passwd"};
    int n = (int)(sizeof paths / sizeof *paths), bad = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < 2; t++) {
            reply r = request(t ? tok_port : open_port, "GET", paths[i], "127.0.0.1",
                              t ? token : NULL, NULL);
            const char *b = body_of(&r);
            /* never a file's bytes: no passwd line, no environment, no SQLite header */
            int leak = strstr(b, "root:") || strstr(b, "PATH=") || strstr(b, "SQLite format");
            if (r.code != 404 || leak) {
                bad++;
                printf("  GET %s (%s): %d%s\n", paths[i], t ? "token" : "open", r.code,
                       leak ? ", FILE CONTENTS" : "");
            }
            reply_free(&r);
        }
    CHECK(bad == 0,
          "%d traversal paths, with and without a token: 404, no file contents (%d "
          "otherwise)",
          n, bad);
}

/* ---- DNS rebinding -------------------------------------------------------------------------- */

static void test_host(int open_port, int tok_port, const char *token, int insecure_port) {
    const char *good[] = {"127.0.0.1",     "127.0.0.1:8765",    "localhost",  "LOCALHOST:1",
                          "localhost.",    "dash.localhost:80", "[::1]:8765", "[::1]",
                          "10.1.2.3:8765", "192.168.0.7"};
    const char *bad[] = {"evil.example",
                         "evil.example:8765",
                         "127.0.0.1.nip.io",
                         "localhost.evil.com",
                         "xlocalhost",
                         "[::1",
                         "[::1]x",
                         "[evil]:80",
                         ""};
    for (int i = 0; i < 10; i++)
        CHECK(status_of(open_port, "GET", "/api/runs", good[i], NULL) == 200,
              "Host %s on the open server: 200", good[i]);
    for (int i = 0; i < 9; i++) {
        reply r = request(open_port, "GET", "/api/runs", bad[i], NULL, NULL);
        CHECK(r.code == 403 && !strstr(body_of(&r), "run-a"),
              "Host '%s' on the open server: %d (expected 403, no run data)", bad[i], r.code);
        reply_free(&r);
    }
    CHECK(status_of(open_port, "GET", "/api/runs", "evil.example", NULL) == 403,
          "rebinding guard on /api/runs");
    CHECK(status_of(open_port, "GET", "/metrics", "evil.example", NULL) == 403,
          "rebinding guard on /metrics");
    reply r = request_raw(open_port, "GET /metrics HTTP/1.0\r\n\r\n", 25, 0, 10);
    CHECK(r.code == 200, "HTTP/1.0 without Host (not a browser): %d", r.code);
    reply_free(&r);
    /* a token is what protects a server others can reach: any Host with it */
    CHECK(status_of(tok_port, "GET", "/api/runs", "evil.example", token) == 200,
          "Host evil.example with the token: 200");
    CHECK(status_of(tok_port, "GET", "/api/runs", "evil.example", NULL) == 401,
          "Host evil.example without the token: 401");
    CHECK(status_of(insecure_port, "GET", "/api/runs", "gpu-node-3.cluster:8765", NULL) == 200,
          "insecure server: any Host name");
}

int main(void) {
    make_store();
    test_bind_rules();
    test_token_file();
    const char *token = "endpoint-token-8080";
    dt_status st;
    dt_serve *open_srv = start("127.0.0.1", NULL, NULL, 0, &st);
    CHECK_OK(st);
    dt_serve *tok_srv = start("127.0.0.1", token, NULL, 0, &st);
    CHECK_OK(st);
    dt_serve *ins_srv = start("127.0.0.1", NULL, NULL, 1, &st);
    CHECK_OK(st);
    if (open_srv && tok_srv && ins_srv) {
        int op = dt_serve_port(open_srv), tp = dt_serve_port(tok_srv);
        CHECK(status_of(op, "GET", "/api/runs", "127.0.0.1", NULL) == 200, "the open server");
        CHECK(status_of(tp, "GET", "/api/runs", "127.0.0.1", token) == 200, "the token server");
        test_methods(op, tp, token);
        test_oversized(op, NULL);
        test_oversized(tp, token);
        test_traversal(op, tp, token);
        test_host(op, tp, token, dt_serve_port(ins_srv));
    }
    dt_serve_close(open_srv);
    dt_serve_close(tok_srv);
    dt_serve_close(ins_srv);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return dt_test_finish("test_endpoint");
}
