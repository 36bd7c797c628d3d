/* S3 requests over libcurl (see s3_http.h). */
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "store/s3_http.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

dt_status dt_s3_global_init(void) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return dt_error_set(DT_ERR_INTERNAL, "storage: libcurl initialisation failed: %s",
                            curl_easy_strerror(curl_init_rc));
    return DT_OK;
}

size_t dt_s3_encode(char *out, size_t cap, const char *s, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
                    (keep_slash && ch == '/');
        if (plain) {
            if (o + 1 < cap) out[o] = (char)ch;
            o++;
        } else {
            if (o + 3 < cap) out[o] = '%', out[o + 1] = hex[ch >> 4], out[o + 2] = hex[ch & 15];
            o += 3;
        }
    }
    if (cap) out[o < cap ? o : cap - 1] = 0;
    return o;
}

static void hex_of(const unsigned char *md, unsigned len, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < len; i++)
        out[2 * i] = hex[md[i] >> 4], out[2 * i + 1] = hex[md[i] & 15];
    out[2 * len] = 0;
}

/* The payload's SHA-256 for x-amz-content-sha256: S3 checks it, so a body corrupted on the way
 * is refused instead of stored. */
static int sha256_hex(const void *data, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (!EVP_Digest(n ? data : "", n, md, &len, EVP_sha256(), NULL) || len != 32) return -1;
    hex_of(md, len, out);
    return 0;
}

int dt_s3_multipart_etag(char (*etags)[128], int nparts, char out[128]) {
    unsigned char *bin = malloc((size_t)nparts * 16 + 1), md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (!bin) return -1;
    for (int i = 0; i < nparts; i++) {
        const char *e = etags[i];
        if (strlen(e) != 34 || e[0] != '"' || e[33] != '"') return free(bin), -1;
        for (int j = 0; j < 16; j++) {
            unsigned v;
            if (sscanf(e + 1 + 2 * j, "%2x", &v) != 1) return free(bin), -1;
            bin[16 * i + j] = (unsigned char)v;
        }
    }
    int ok = EVP_Digest(bin, (size_t)nparts * 16, md, &len, EVP_md5(), NULL) && len == 16;
    free(bin);
    if (!ok) return -1;
    char h[33];
    hex_of(md, 16, h);
    snprintf(out, 128, "\"%s-%d\"", h, nparts);
    return 0;
}

const char *dt_s3_xml_next(const char *p, const char *end, const char *tag, const char **v,
                           size_t *vn) {
    char open[80], close[80];
    int ol = snprintf(open, sizeof open, "<%s>", tag),
        cl = snprintf(close, sizeof close, "</%s>", tag);
    const char *a = memmem(p, (size_t)(end - p), open, (size_t)ol);
    if (!a) return NULL;
    a += ol;
    const char *b = memmem(a, (size_t)(end - a), close, (size_t)cl);
    if (!b) return NULL;
    *v = a, *vn = (size_t)(b - a);
    return b + cl;
}

static size_t utf8_put(char *o, unsigned long cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static int xml_text(const char *v, size_t vn, char *out, size_t cap) {
    static const struct {
        const char *name;
        char ch;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    size_t o = 0;
    for (size_t i = 0; i < vn;) {
        if (v[i] == 0) return -1;
        if (v[i] != '&') {
            if (o + 1 >= cap) return -1;
            out[o++] = v[i++];
            continue;
        }
        const char *e = memchr(v + i, ';', vn - i);
        if (!e || e - (v + i) > 12) return -1;
        size_t elen = (size_t)(e - (v + i)) + 1; /* "&...;" */
        int done = 0;
        if (o + 4 >= cap && o + elen >= cap) return -1; /* decoded: <= min(4, elen) bytes */
        for (size_t k = 0; k < sizeof named / sizeof *named && !done; k++)
            if (elen - 1 == strlen(named[k].name) && !memcmp(v + i + 1, named[k].name, elen - 1))
                out[o++] = named[k].ch, done = 1;
        if (!done) {
            if (v[i + 1] != '#' || elen < 4) return -1;
            int hexa = v[i + 2] == 'x';
            unsigned long cp = 0;
            for (const char *d = v + i + 2 + hexa; d < e; d++) {
                int dv = *d >= '0' && *d <= '9'           ? *d - '0'
                         : hexa && *d >= 'a' && *d <= 'f' ? *d - 'a' + 10
                         : hexa && *d >= 'A' && *d <= 'F' ? *d - 'A' + 10
                                                          : -1;
                if (dv < 0) return -1;
                cp = cp * (hexa ? 16 : 10) + (unsigned long)dv;
                if (cp > 0x10FFFF) return -1;
            }
            if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
            o += utf8_put(out + o, cp);
        }
        i += elen;
    }
    if (o >= cap) return -1;
    out[o] = 0;
    return 0;
}

/* On failure out holds "" rather than the undecoded prefix without its terminator (callers
 * print it: found by the s3_xml fuzzer, regress/s3_xml/stack-overflow-unterminated-message). */
int dt_s3_xml_text(const char *v, size_t vn, char *out, size_t cap) {
    int rc = xml_text(v, vn, out, cap);
    if (rc != 0 && cap) out[0] = 0;
    return rc;
}

/* ---- one request ---- */

/* snprintf for messages that may be cut short (vsnprintf: no truncation warnings). */
static void msgf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msgf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

typedef struct xfer {
    CURL *h;
    s3_resp *r;
    const char *src; /* request body */
    size_t src_n, src_off;
    int nomem;
} xfer;

static size_t read_cb(char *buf, size_t size, size_t nitems, void *ud) {
    xfer *x = ud;
    size_t k = size * nitems, left = x->src_n - x->src_off;
    if (k > left) k = left;
    memcpy(buf, x->src + x->src_off, k);
    x->src_off += k;
    return k;
}

static int seek_cb(void *ud, curl_off_t off, int origin) {
    xfer *x = ud;
    if (origin != SEEK_SET || off < 0 || (size_t)off > x->src_n) return CURL_SEEKFUNC_CANTSEEK;
    x->src_off = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

static size_t write_cb(char *p, size_t size, size_t nitems, void *ud) {
    xfer *x = ud;
    s3_resp *r = x->r;
    size_t k = size * nitems;
    if (r->n + k + 1 > r->cap) {
        /* first chunk of a GET: room for the whole object at once (Content-Length) */
        curl_off_t cl = -1;
        curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        size_t want = r->cap ? 2 * r->cap : 4096;
        if (cl > 0 && (uint64_t)cl < SIZE_MAX / 2 && (size_t)cl + 1 > want) want = (size_t)cl + 1;
        if (want < r->n + k + 1) want = r->n + k + 1;
        char *b = realloc(r->body, want);
        if (!b) return x->nomem = 1, 0;
        r->body = b, r->cap = want;
    }
    memcpy(r->body + r->n, p, k);
    r->n += k;
    r->body[r->n] = 0;
    return k;
}

static size_t header_cb(char *p, size_t size, size_t nitems, void *ud) {
    s3_resp *r = ((xfer *)ud)->r;
    size_t k = size * nitems;
    if (k >= 5 && !strncmp(p, "HTTP/", 5)) r->etag[0] = 0; /* a new response (after 100) */
    if (k > 5 && !strncasecmp(p, "etag:", 5)) {
        size_t a = 5, b = k;
        while (a < b && (p[a] == ' ' || p[a] == '\t')) a++;
        while (b > a && (p[b - 1] == '\r' || p[b - 1] == '\n' || p[b - 1] == ' ')) b--;
        if (b - a < sizeof r->etag) memcpy(r->etag, p + a, b - a), r->etag[b - a] = 0;
    }
    return k;
}

static int curl_transient(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static int code_transient(const char *code) {
    static const char *const t[] = {"SlowDown",           "RequestTimeout", "InternalError",
                                    "ServiceUnavailable", "Throttling",     NULL};
    for (int i = 0; t[i]; i++)
        if (!strcmp(code, t[i])) return 1;
    return 0;
}

/* Jittered exponential backoff: base * 2^attempt, scaled by a uniform factor in [0.5, 1). */
static void backoff(double base, int attempt) {
    static _Thread_local uint64_t rng;
    if (!rng) rng = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&rng ^ 0x9E3779B97F4A7C15ull;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    double d = base * (double)(1u << (attempt < 16 ? attempt : 16));
    if (d > 30) d = 30;
    d *= 0.5 + 0.5 * (double)(rng >> 11) / 9007199254740992.0;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Code and Message of an S3 <Error> body into r->code and msg. */
static void error_fields(s3_resp *r, char *msg, size_t cap) {
    const char *v;
    size_t vn;
    r->code[0] = msg[0] = 0;
    if (!r->body || !memmem(r->body, r->n, "<Error>", 7)) return;
    const char *end = r->body + r->n;
    if (dt_s3_xml_next(r->body, end, "Code", &v, &vn) && vn < sizeof r->code)
        dt_s3_xml_text(v, vn, r->code, sizeof r->code);
    if (dt_s3_xml_next(r->body, end, "Message", &v, &vn) && vn < cap)
        dt_s3_xml_text(v, vn, msg, cap);
}

dt_status dt_s3_do(CURL *h, const s3_conf *c, const s3_req *r, s3_resp *out) {
    const char *key = r->key ? r->key : "";
    char *path = NULL, *url = NULL, sha[65], what[1400];
    struct curl_slist *hdr = NULL;
    dt_status st = DT_ERR_IO;
    memset(out, 0, sizeof *out);
    out->length = -1;

    /* http(s)://host/bucket[/prefix/key][?query] */
    size_t plen = strlen(c->prefix) + strlen(key);
    path = malloc(plen + 1);
    if (path) snprintf(path, plen + 1, "%s%s", r->key ? c->prefix : "", key);
    size_t ulen =
        strlen(c->endpoint) + strlen(c->bucket) + 3 * plen + (r->query ? strlen(r->query) : 0) + 8;
    url = malloc(ulen);
    if (!path || !url) goto nomem;
    int u = snprintf(url, ulen, "%s/%s%s", c->endpoint, c->bucket, r->key ? "/" : "");
    dt_s3_encode(url + u, ulen - (size_t)u, path, 1);
    if (r->query && *r->query) strcat(url, "?"), strcat(url, r->query);
    snprintf(what, sizeof what, "%s %s", r->method, url);

    if (sha256_hex(r->body, r->n, sha) != 0) {
        msgf(out->msg, sizeof out->msg, "storage %s: %s: %s: cannot hash the payload", r->op,
             c->url, what);
        st = DT_ERR_INTERNAL;
        goto done;
    }
    char line[4200];
    snprintf(line, sizeof line, "x-amz-content-sha256: %s", sha);
    struct curl_slist *t = curl_slist_append(hdr, line);
    if (!t) goto nomem;
    hdr = t;
    if (r->content_type) {
        snprintf(line, sizeof line, "Content-Type: %s", r->content_type);
        if (!(t = curl_slist_append(hdr, line))) goto nomem;
        hdr = t;
    }
    if (r->range) {
        snprintf(line, sizeof line, "Range: %s", r->range);
        if (!(t = curl_slist_append(hdr, line))) goto nomem;
        hdr = t;
    }
    if (c->session_token[0]) {
        snprintf(line, sizeof line, "x-amz-security-token: %s", c->session_token);
        if (!(t = curl_slist_append(hdr, line))) goto nomem;
        hdr = t;
    }

    long stall = c->opts.timeout_s >= 1 ? (long)(c->opts.timeout_s + 0.5) : 1;
    int max_retries = c->opts.max_retries > 0 ? c->opts.max_retries : 0;
    for (int attempt = 0;; attempt++) {
        char errbuf[CURL_ERROR_SIZE] = "";
        xfer x = {.h = h, .r = out, .src = r->body, .src_n = r->n};
        out->n = 0, out->http = 0, out->etag[0] = 0, out->length = -1;
        out->attempts = attempt + 1;
        if (out->body) out->body[0] = 0;
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, c->sigv4);
        curl_easy_setopt(h, CURLOPT_USERNAME, c->access_key);
        curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret_key);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, stall);
        /* a request that moves less than 1 byte/s for timeout_s seconds has stalled */
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        if (!strcmp(r->method, "HEAD")) {
            curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        } else if (!strcmp(r->method, "PUT")) {
            curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
            curl_easy_setopt(h, CURLOPT_READDATA, &x);
            curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_cb);
            curl_easy_setopt(h, CURLOPT_SEEKDATA, &x);
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->n);
        } else if (!strcmp(r->method, "POST")) {
            curl_easy_setopt(h, CURLOPT_POST, 1L);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->n ? (const char *)r->body : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->n);
        } else if (strcmp(r->method, "GET") != 0) {
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
        }
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->http);
        if (x.nomem) goto nomem;

        int transient;
        char smsg[512];
        if (rc != CURLE_OK) {
            transient = curl_transient(rc);
            st = DT_ERR_IO;
            msgf(out->msg, sizeof out->msg, "storage %s: %s: %s%s%s%s: %s", r->op, c->url,
                 r->key ? "'" : "", key, r->key ? "': " : "", what,
                 errbuf[0] ? errbuf : curl_easy_strerror(rc));
        } else {
            int is_err = out->http < 200 || out->http > 299;
            smsg[0] = 0;
            if (is_err || r->error_in_200) error_fields(out, smsg, sizeof smsg);
            if (!is_err && r->error_in_200 && out->code[0]) is_err = 1;
            if (!is_err) {
                curl_off_t cl = -1;
                curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                out->length = cl;
                st = DT_OK;
                goto done;
            }
            if (out->http == 404) {
                st = DT_ERR_NOTFOUND, transient = 0;
            } else if (out->http == 401 || out->http == 403) {
                st = DT_ERR_STATE, transient = 0;
            } else {
                st = DT_ERR_IO;
                transient = out->http >= 500 || out->http == 429 || code_transient(out->code);
            }
            msgf(out->msg, sizeof out->msg, "storage %s: %s: %s%s%s%s%s: HTTP %ld%s%s%s%s%s", r->op,
                 c->url, r->key ? "'" : "", key, r->key ? "': " : "",
                 st == DT_ERR_STATE ? "access denied: " : "", what, out->http,
                 out->code[0] ? " " : "", out->code, smsg[0] ? " (" : "", smsg, smsg[0] ? ")" : "");
            if (st == DT_ERR_STATE) {
                size_t l = strlen(out->msg);
                msgf(out->msg + l, sizeof out->msg - l,
                     "; check the credentials (access key %s) and the bucket's permissions",
                     c->access_key);
            }
        }
        if (!transient || attempt >= max_retries) {
            if (attempt > 0) {
                size_t l = strlen(out->msg);
                msgf(out->msg + l, sizeof out->msg - l, " (after %d attempts)", attempt + 1);
            }
            goto done;
        }
        backoff(c->opts.retry_base_s > 0 ? c->opts.retry_base_s : 0.2, attempt);
    }

nomem:
    st = DT_ERR_NOMEM;
    msgf(out->msg, sizeof out->msg, "storage %s: %s: '%s': out of memory", r->op, c->url, key);
done:
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hdr);
    free(path);
    free(url);
    return st;
}

void dt_s3_resp_free(s3_resp *r) {
    free(r->body);
    r->body = NULL, r->n = r->cap = 0;
}
