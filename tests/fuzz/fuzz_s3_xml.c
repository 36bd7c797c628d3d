/* Fuzz target: the S3 replies dtrain parses (src/store/storage_s3.c, src/store/s3_http.c):
 * ListObjectsV2 pages (keys as XML text with entities, IsTruncated, continuation tokens), the
 * UploadId of CreateMultipartUpload, CompleteMultipartUpload's reply (an <Error> inside a 200),
 * and <Error><Code>/<Message> bodies of failed requests.
 *
 * The replies come from a scripted HTTP server on 127.0.0.1 inside this process (the S3 backend
 * is pointed at it with AWS_ENDPOINT_URL; nothing leaves the host), so the real request code
 * runs: dt_store_list, dt_store_put (multipart) and dt_store_get on an s3:// store.
 *
 * Input: byte 0 picks the operation (mod 3: list, multipart put, get), byte 1 the HTTP status of
 * the replies that may fail, then up to four reply bodies separated by FZ_SEP; request i gets
 * body min(i, last). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "dtrain/storage.h"
#include "fuzz_util.h"

/* ---- the scripted server ---- */

typedef struct script {
    int op, status;
    const uint8_t *body[4];
    size_t len[4];
    int nbody;
    int nreq; /* requests answered so far for this input */
} script;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static script g_script;
static dt_store *g_store;

/* The status and body of request `i` of the current input. */
static void answer(int i, const char *method, int *status, const uint8_t **body, size_t *len,
                   int *etag) {
    const script *s = &g_script;
    if (!s->nbody) { /* between inputs */
        *status = 500, *body = NULL, *len = 0, *etag = 0;
        return;
    }
    int b = i < s->nbody ? i : s->nbody - 1;
    *body = s->body[b], *len = s->len[b], *etag = 0;
    *status = 200;
    if (s->op == 0) { /* list: every page as given; the last one with the status */
        if (i >= s->nbody - 1) *status = s->status;
    } else if (s->op == 1) { /* multipart: create, part, complete, abort/head */
        if (!strcmp(method, "PUT")) *etag = 1, *len = 0;
        if (i >= 2) *status = s->status;
    } else {
        *status = s->status;
    }
}

static int read_head(int fd, char *buf, size_t cap, size_t *have, size_t *head_len) {
    for (;;) {
        char *e = memmem(buf, *have, "\r\n\r\n", 4);
        if (e) {
            *head_len = (size_t)(e + 4 - buf);
            return 0;
        }
        if (*have == cap) return -1;
        ssize_t k = read(fd, buf + *have, cap - *have);
        if (k <= 0) return -1;
        *have += (size_t)k;
    }
}

static size_t header_value(const char *head, size_t n, const char *name, char *out, size_t cap) {
    size_t nl = strlen(name);
    out[0] = 0;
    for (const char *l = head; l && l < head + n;) {
        const char *e = memmem(l, (size_t)(head + n - l), "\r\n", 2);
        if (!e) break;
        if ((size_t)(e - l) > nl && !strncasecmp(l, name, nl) && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (v < e && *v == ' ') v++;
            size_t vl = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
            memcpy(out, v, vl), out[vl] = 0;
            return vl;
        }
        l = e + 2;
    }
    return 0;
}

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k <= 0) return;
        c += k, n -= (size_t)k;
    }
}

/* One keep-alive connection: requests in order, each answered from the script. */
static void *serve(void *arg) {
    int fd = (int)(intptr_t)arg;
    static _Thread_local char buf[1 << 16];
    size_t have = 0, hl = 0;
    while (read_head(fd, buf, sizeof buf, &have, &hl) == 0) {
        char method[16] = "", v[64];
        sscanf(buf, "%15s", method);
        size_t cl = header_value(buf, hl, "content-length", v, sizeof v) ? strtoul(v, NULL, 10) : 0;
        if (header_value(buf, hl, "expect", v, sizeof v) && !strcasecmp(v, "100-continue"))
            write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        /* drop the request body (what was read past the head first) */
        size_t extra = have - hl, from_buf = extra < cl ? extra : cl;
        memmove(buf, buf + hl + from_buf, have - hl - from_buf);
        have -= hl + from_buf;
        for (size_t left = cl - from_buf; left;) {
            char sink[4096];
            ssize_t k = read(fd, sink, left < sizeof sink ? left : sizeof sink);
            if (k <= 0) goto out;
            left -= (size_t)k;
        }
        int status, etag;
        const uint8_t *body;
        size_t len;
        /* The reply is copied under the lock: the input's bytes are only valid while the
         * harness waits for the store call (a request after it got an empty 500). Head and
         * body go out in one write: two small writes wait for a delayed ACK (40 ms). */
        pthread_mutex_lock(&g_mu);
        answer(g_script.nreq++, method, &status, &body, &len, &etag);
        int head_only = !strcmp(method, "HEAD");
        char *out = malloc(512 + len);
        if (!out) abort();
        int n = snprintf(out, 512, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s\r\n", status, len,
                         etag ? "ETag: \"0123456789abcdef0123456789abcdef\"\r\n" : "");
        if (!head_only && len) memcpy(out + n, body, len);
        pthread_mutex_unlock(&g_mu);
        write_all(fd, out, (size_t)n + (head_only ? 0 : len));
        free(out);
    }
out:
    close(fd);
    return NULL;
}

static void *accept_loop(void *arg) {
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

static void setup(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        perror("fuzz_s3_xml: listen");
        abort();
    }
    pthread_t t;
    pthread_create(&t, NULL, accept_loop, (void *)(intptr_t)fd);
    pthread_detach(t);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", ntohs(a.sin_port));
    setenv("AWS_ENDPOINT_URL", ep, 1);
    setenv("AWS_ACCESS_KEY_ID", "fuzz-access-key", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "fuzz-secret-key", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    dt_store_opts o = dt_store_opts_default();
    o.max_retries = 1, o.retry_base_s = 0.001, o.timeout_s = 5;
    o.multipart_threshold = 1, o.parallel_parts = 1; /* every put is a one-part upload */
    if (dt_store_open("s3://fuzz-bucket/run/ck", &o, &g_store) != DT_OK) {
        fprintf(stderr, "fuzz_s3_xml: %s\n", dt_last_error());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int statuses[8] = {200, 200, 404, 403, 500, 503, 400, 301};
    if (!g_store) setup();
    if (size < 2) return 0;
    pthread_mutex_lock(&g_mu);
    memset(&g_script, 0, sizeof g_script);
    g_script.op = data[0] % 3;
    g_script.status = statuses[data[1] % 8];
    g_script.nbody = fz_split(data + 2, size - 2, g_script.body, g_script.len, 4);
    pthread_mutex_unlock(&g_mu);
    if (g_script.op == 0) {
        char **keys = NULL;
        int n = 0;
        if (dt_store_list(g_store, "step-000000100/", &keys, &n) == DT_OK)
            dt_store_list_free(keys, n);
    } else if (g_script.op == 1) {
        dt_store_put(g_store, "step-000000100/model.safetensors", "0123456789", 10);
    } else {
        void *p = NULL;
        size_t n = 0;
        if (dt_store_get(g_store, "step-000000100/trainer_state.json", &p, &n) == DT_OK) free(p);
    }
    pthread_mutex_lock(&g_mu);
    g_script.nbody = 0; /* the input is about to be freed */
    pthread_mutex_unlock(&g_mu);
    return 0;
}
