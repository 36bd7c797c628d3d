/* S3-compatible object storage (AWS S3, SeaweedFS, MinIO, ...) through libcurl; requests,
 * signing and retries are in s3_http.c. A put below opts.multipart_threshold is one PUT;
 * larger ones are a multipart upload (opts.parallel_parts parts in flight, on threads that each
 * hold a curl handle) that becomes visible only when completed, and is aborted on failure, so a
 * reader never sees part of an object. The store is safe to use from several threads: curl
 * handles (and their open connections) are kept in a small pool. Credentials: the environment,
 * else the AWS tools' shared credentials file, which must be mode 600 (credentials(), below). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>
#include "store/s3_http.h"
#include "core/fsmode.h"
#include "store/storage_impl.h"

enum { POOL = 32 };
#define MIN_PART ((size_t)5 << 20) /* S3 refuses smaller parts (except the last) */
#define MAX_PUT ((size_t)5 << 30)  /* S3's limit for one PUT */
#define MAX_PARTS 10000

typedef struct s3_store {
    s3_conf c;
    pthread_mutex_t mu;
    CURL *idle[POOL]; /* curl handles not in use (each keeps its connections alive) */
    int nidle;
} s3_store;

static s3_store *impl(dt_store *s) {
    return s->impl;
}

static CURL *take(s3_store *p) {
    CURL *h = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->nidle) h = p->idle[--p->nidle];
    pthread_mutex_unlock(&p->mu);
    return h ? h : curl_easy_init();
}

static void give(s3_store *p, CURL *h) {
    pthread_mutex_lock(&p->mu);
    if (p->nidle < POOL) p->idle[p->nidle++] = h, h = NULL;
    pthread_mutex_unlock(&p->mu);
    if (h) curl_easy_cleanup(h);
}

/* One request on a pooled handle, on the calling thread (sets the last error). */
static dt_status run(s3_store *p, const s3_req *r, s3_resp *resp) {
    memset(resp, 0, sizeof *resp);
    CURL *h = take(p);
    if (!h)
        return dt_error_set(DT_ERR_NOMEM, "storage %s: %s: cannot create a curl handle", r->op,
                            p->c.url);
    dt_status st = dt_s3_do(h, &p->c, r, resp);
    give(p, h);
    if (st != DT_OK) dt_error_set(st, "%s", resp->msg);
    return st;
}

static dt_status s3_put_single(s3_store *p, const char *key, const void *data, size_t n) {
    s3_req r = {.op = "put",
                .method = "PUT",
                .key = key,
                .body = data,
                .n = n,
                .content_type = "application/octet-stream"};
    s3_resp resp;
    dt_status st = run(p, &r, &resp);
    dt_s3_resp_free(&resp);
    return st;
}

/* ---- multipart upload ---- */

typedef struct mp {
    s3_store *p;
    const char *key, *data;
    size_t n, part;
    int nparts;
    char *uid; /* upload ID, percent-encoded for the query */
    char (*etags)[128];
    atomic_int next, failed;
    pthread_mutex_t mu;
    dt_status st; /* first failure */
    char msg[1024];
} mp;

static void mp_fail(mp *m, dt_status st, const char *msg) {
    pthread_mutex_lock(&m->mu);
    if (m->st == DT_OK) m->st = st, snprintf(m->msg, sizeof m->msg, "%s", msg);
    pthread_mutex_unlock(&m->mu);
    atomic_store(&m->failed, 1);
}

/* Uploads parts (taken in order from m->next) until none is left or one has failed. */
static void *mp_worker(void *arg) {
    mp *m = arg;
    CURL *h = take(m->p);
    char *q = malloc(strlen(m->uid) + 64);
    if (!h || !q) {
        mp_fail(m, DT_ERR_NOMEM, "storage put: out of memory for a part upload");
        if (h) give(m->p, h);
        free(q);
        return NULL;
    }
    while (!atomic_load(&m->failed)) {
        int i = atomic_fetch_add(&m->next, 1);
        if (i >= m->nparts) break;
        size_t off = (size_t)i * m->part, len = m->n - off < m->part ? m->n - off : m->part;
        sprintf(q, "partNumber=%d&uploadId=%s", i + 1, m->uid);
        s3_req r = {.op = "put",
                    .method = "PUT",
                    .key = m->key,
                    .query = q,
                    .body = m->data + off,
                    .n = len};
        s3_resp resp;
        dt_status st = dt_s3_do(h, &m->p->c, &r, &resp);
        if (st == DT_OK && !resp.etag[0]) {
            snprintf(resp.msg, sizeof resp.msg,
                     "storage put: %s: '%s': part %d: no ETag in the reply", m->p->c.url, m->key,
                     i + 1);
            st = DT_ERR_IO;
        }
        if (st != DT_OK)
            mp_fail(m, st, resp.msg);
        else
            memcpy(m->etags[i], resp.etag, sizeof m->etags[i]);
        dt_s3_resp_free(&resp);
    }
    free(q);
    give(m->p, h);
    return NULL;
}

static char *complete_xml(mp *m, size_t *len) {
    size_t cap = 64 + (size_t)m->nparts * (64 + 6 * 128), o = 0;
    char *x = malloc(cap);
    if (!x) return NULL;
    o += (size_t)sprintf(x, "<CompleteMultipartUpload>");
    for (int i = 0; i < m->nparts; i++) {
        o += (size_t)sprintf(x + o, "<Part><PartNumber>%d</PartNumber><ETag>", i + 1);
        for (const char *e = m->etags[i]; *e; e++) /* escape for XML */
            o += (size_t)(*e == '&'   ? sprintf(x + o, "&amp;")
                          : *e == '<' ? sprintf(x + o, "&lt;")
                          : *e == '>' ? sprintf(x + o, "&gt;")
                                      : sprintf(x + o, "%c", *e));
        o += (size_t)sprintf(x + o, "</ETag></Part>");
    }
    o += (size_t)sprintf(x + o, "</CompleteMultipartUpload>");
    *len = o;
    return x;
}

/* A Complete that was retried may have succeeded the first time with the reply lost: then the
 * upload is gone (404 NoSuchUpload) and the object's ETag is the one of our parts. */
static int completed_anyway(s3_store *p, mp *m) {
    char want[128];
    if (dt_s3_multipart_etag(m->etags, m->nparts, want) != 0) return 0;
    s3_req r = {.op = "put", .method = "HEAD", .key = m->key};
    s3_resp resp;
    int ok = run(p, &r, &resp) == DT_OK && !strcmp(resp.etag, want);
    dt_s3_resp_free(&resp);
    return ok;
}

static dt_status s3_put_multipart(s3_store *p, const char *key, const void *data, size_t n) {
    s3_resp resp;
    s3_req r = {.op = "put",
                .method = "POST",
                .key = key,
                .query = "uploads=",
                .content_type = "application/octet-stream"};
    dt_status st = run(p, &r, &resp);
    if (st != DT_OK) return dt_s3_resp_free(&resp), st;
    const char *v;
    size_t vn;
    char *raw = NULL;
    if (!resp.body || !dt_s3_xml_next(resp.body, resp.body + resp.n, "UploadId", &v, &vn) || !vn ||
        !(raw = malloc(vn + 1)) || dt_s3_xml_text(v, vn, raw, vn + 1) != 0) {
        free(raw), dt_s3_resp_free(&resp);
        return dt_error_set(DT_ERR_FORMAT,
                            "storage put: %s: '%s': no UploadId in the reply to "
                            "CreateMultipartUpload",
                            p->c.url, key);
    }
    dt_s3_resp_free(&resp);

    mp m = {.p = p, .key = key, .data = data, .n = n};
    m.part = p->c.opts.part_size > MIN_PART ? p->c.opts.part_size : MIN_PART;
    if ((n + m.part - 1) / m.part > MAX_PARTS) m.part = (n + MAX_PARTS - 1) / MAX_PARTS;
    m.nparts = (int)((n + m.part - 1) / m.part);
    size_t ul = 3 * strlen(raw) + 1;
    m.uid = malloc(ul);
    m.etags = calloc((size_t)m.nparts, sizeof *m.etags);
    char *q = malloc(ul + 16);
    if (!m.uid || !m.etags || !q) {
        free(raw), free(m.uid), free(m.etags), free(q);
        return dt_error_set(DT_ERR_NOMEM, "storage put: %s: '%s': out of memory", p->c.url, key);
    }
    dt_s3_encode(m.uid, ul, raw, 0);
    sprintf(q, "uploadId=%s", m.uid);
    pthread_mutex_init(&m.mu, NULL);

    int nth = p->c.opts.parallel_parts < 1    ? 1
              : p->c.opts.parallel_parts > 64 ? 64
                                              : p->c.opts.parallel_parts;
    if (nth > m.nparts) nth = m.nparts;
    pthread_t th[64];
    int started = 0;
    while (started < nth - 1 && pthread_create(&th[started], NULL, mp_worker, &m) == 0) started++;
    mp_worker(&m); /* this thread uploads too */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);

    st = m.st;
    if (st != DT_OK) {
        dt_error_set(st, "%s", m.msg);
    } else {
        size_t xl;
        char *xml = complete_xml(&m, &xl);
        if (!xml) {
            st = dt_error_set(DT_ERR_NOMEM, "storage put: %s: '%s': out of memory", p->c.url, key);
        } else {
            s3_req c = {.op = "put",
                        .method = "POST",
                        .key = key,
                        .query = q,
                        .body = xml,
                        .n = xl,
                        .content_type = "application/xml",
                        .error_in_200 = 1};
            st = run(p, &c, &resp);
            if (st == DT_ERR_NOTFOUND && resp.attempts > 1 && !strcmp(resp.code, "NoSuchUpload")) {
                char keep[1024];
                snprintf(keep, sizeof keep, "%s", dt_last_error());
                st = completed_anyway(p, &m)
                         ? DT_OK
                         : dt_error_set(DT_ERR_IO,
                                        "%s; a retried Complete found the upload gone "
                                        "and the object is not the one uploaded",
                                        keep);
            }
            dt_s3_resp_free(&resp);
            free(xml);
        }
    }
    if (st != DT_OK) {
        /* nothing was made visible; abort so the server drops the parts */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", dt_last_error());
        s3_req a = {.op = "put", .method = "DELETE", .key = key, .query = q};
        dt_status ast = run(p, &a, &resp);
        dt_s3_resp_free(&resp);
        dt_error_set(st, "%s%s", keep,
                     ast == DT_OK || ast == DT_ERR_NOTFOUND
                         ? "; multipart upload aborted"
                         : "; aborting the multipart upload failed too (its "
                           "parts stay invisible until the bucket's lifecycle "
                           "rule removes them)");
    }
    pthread_mutex_destroy(&m.mu);
    free(raw), free(m.uid), free(m.etags), free(q);
    return st;
}

static dt_status s3_put(dt_store *s, const char *key, const void *data, size_t n) {
    const dt_store_opts *o = &impl(s)->c.opts;
    dt_status st = n == 0 || (n < o->multipart_threshold && n <= MAX_PUT)
                       ? s3_put_single(impl(s), key, data, n)
                       : s3_put_multipart(impl(s), key, data, n);
    /* a 404 here is NoSuchBucket or NoSuchUpload: the put failed, no key is "not found" */
    return st == DT_ERR_NOTFOUND ? DT_ERR_IO : st;
}

static dt_status s3_get(dt_store *s, const char *key, void **data, size_t *n) {
    s3_req r = {.op = "get", .method = "GET", .key = key};
    s3_resp resp;
    dt_status st = run(impl(s), &r, &resp);
    if (st != DT_OK) return dt_s3_resp_free(&resp), st;
    if (!resp.body && !(resp.body = malloc(1))) {
        return dt_error_set(DT_ERR_NOMEM, "storage get: %s: '%s': out of memory", s->url, key);
    }
    if (resp.length >= 0 && (size_t)resp.length != resp.n) {
        dt_s3_resp_free(&resp);
        return dt_error_set(DT_ERR_IO, "storage get: %s: '%s': got %zu bytes of %lld", s->url, key,
                            resp.n, resp.length);
    }
    *data = resp.body, *n = resp.n;
    return DT_OK;
}

/* One GET of bytes [off, off + len): 206 with those bytes (fewer where the object ends), or
 * 416 when it ends before off (no byte there: *got 0). */
static dt_status s3_get_range(dt_store *s, const char *key, uint64_t off, size_t len, void *buf,
                              size_t *got) {
    char range[64];
    snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    s3_req r = {.op = "get", .method = "GET", .key = key, .range = range};
    s3_resp resp;
    dt_status st = run(impl(s), &r, &resp);
    if (st != DT_OK && resp.http == 416) {
        dt_s3_resp_free(&resp);
        *got = 0;
        return DT_OK;
    }
    if (st != DT_OK) return dt_s3_resp_free(&resp), st;
    /* a server that ignores Range answers 200 with the whole object: take our part of it */
    const char *p = resp.body ? resp.body : "";
    size_t n = resp.n;
    if (resp.http == 200) {
        p += off < n ? off : n;
        n = off < n ? n - (size_t)off : 0;
    }
    *got = n < len ? n : len;
    memcpy(buf, p, *got);
    dt_s3_resp_free(&resp);
    return DT_OK;
}

static dt_status s3_stat(dt_store *s, const char *key, size_t *n) {
    s3_req r = {.op = "stat", .method = "HEAD", .key = key};
    s3_resp resp;
    dt_status st = run(impl(s), &r, &resp);
    dt_s3_resp_free(&resp);
    if (st != DT_OK) return st;
    if (resp.length < 0)
        return dt_error_set(DT_ERR_FORMAT, "storage stat: %s: '%s': no Content-Length in the reply",
                            s->url, key);
    *n = (size_t)resp.length;
    return DT_OK;
}

/* ListObjectsV2 pages (1000 keys each) under root prefix + prefix, following continuation
 * tokens. Keys are XML text (entities decoded here). */
static dt_status s3_list(dt_store *s, const char *prefix, char ***keys, int *n, int *cap) {
    s3_store *p = impl(s);
    size_t rl = strlen(p->c.prefix), fl = rl + strlen(prefix);
    char *full = malloc(fl + 1), *efull = malloc(3 * fl + 1), *token = NULL, *q = NULL;
    dt_status st = DT_OK;
    if (!full || !efull) goto nomem;
    sprintf(full, "%s%s", p->c.prefix, prefix);
    dt_s3_encode(efull, 3 * fl + 1, full, 0);
    for (int page = 0;; page++) {
        size_t ql = 3 * (token ? strlen(token) : 0) + 3 * fl + 64;
        free(q);
        if (!(q = malloc(ql))) goto nomem;
        int o = 0;
        if (token) {
            o = sprintf(q, "continuation-token=");
            dt_s3_encode(q + o, ql - (size_t)o, token, 0);
            o = (int)strlen(q);
            q[o++] = '&';
        }
        sprintf(q + o, "list-type=2&prefix=%s", efull); /* sorted: SigV4's canonical order */
        s3_req r = {.op = "list", .method = "GET", .query = q};
        s3_resp resp;
        st = run(p, &r, &resp);
        if (st != DT_OK) {
            dt_s3_resp_free(&resp);
            break;
        }
        const char *b = resp.body ? resp.body : "", *end = b + resp.n, *v, *blk;
        size_t vn, bn;
        if (!strstr(b, "<ListBucketResult")) {
            dt_s3_resp_free(&resp);
            st = dt_error_set(DT_ERR_FORMAT,
                              "storage list: %s: '%s': the reply is not a "
                              "ListBucketResult",
                              s->url, prefix);
            break;
        }
        for (const char *c = b;
             st == DT_OK && (c = dt_s3_xml_next(c, end, "Contents", &blk, &bn));) {
            if (!dt_s3_xml_next(blk, blk + bn, "Key", &v, &vn)) continue;
            char *k = malloc(vn + 1);
            if (!k) {
                st = dt_error_set(DT_ERR_NOMEM, "storage list: %s: out of memory", s->url);
            } else if (dt_s3_xml_text(v, vn, k, vn + 1) != 0) {
                st = dt_error_set(DT_ERR_FORMAT, "storage list: %s: malformed key in the listing",
                                  s->url);
            } else if (!strncmp(k, full, fl) && k[0] &&
                       k[strlen(k) - 1] != '/') { /* '/'-terminated: a folder marker */
                st = dt_store_list_add(keys, n, cap, k + rl);
            }
            free(k);
        }
        int more =
            dt_s3_xml_next(b, end, "IsTruncated", &v, &vn) && vn == 4 && !memcmp(v, "true", 4);
        char *next = NULL;
        if (st == DT_OK && more) {
            if (!dt_s3_xml_next(b, end, "NextContinuationToken", &v, &vn) || !vn ||
                !(next = malloc(vn + 1)) || dt_s3_xml_text(v, vn, next, vn + 1) != 0 ||
                (token && !strcmp(token, next)) || page > 10000000) {
                st = dt_error_set(DT_ERR_FORMAT,
                                  "storage list: %s: '%s': truncated listing "
                                  "without a usable continuation token",
                                  s->url, prefix);
                free(next), next = NULL;
            }
        }
        dt_s3_resp_free(&resp);
        free(token);
        token = next;
        if (st != DT_OK || !more) break;
    }
    free(full), free(efull), free(token), free(q);
    return st;
nomem:
    free(full), free(efull), free(token), free(q);
    return dt_error_set(DT_ERR_NOMEM, "storage list: %s: out of memory", s->url);
}

static dt_status s3_del(dt_store *s, const char *key) {
    s3_req r = {.op = "delete", .method = "DELETE", .key = key};
    s3_resp resp;
    dt_status st = run(impl(s), &r, &resp);
    dt_s3_resp_free(&resp);
    if (st == DT_ERR_NOTFOUND) dt_error_clear(), st = DT_OK; /* already gone */
    return st;
}

static void s3_close(dt_store *s) {
    s3_store *p = impl(s);
    if (!p) return;
    for (int i = 0; i < p->nidle; i++) curl_easy_cleanup(p->idle[i]);
    pthread_mutex_destroy(&p->mu);
    explicit_bzero(&p->c, sizeof p->c);
    free(p);
}

/* get_into, get_stream: the front end gets the whole object (one GET, retried whole), then copies
 * it or hands it over in chunks */
static const dt_store_ops s3_ops = {"s3",   s3_put,   s3_get, s3_stat, s3_list,
                                    s3_del, s3_close, NULL,   NULL,    s3_get_range};

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int copy_cred(char *dst, size_t cap, const char *v, size_t n) {
    if (n >= cap) return -1;
    memcpy(dst, v, n);
    dst[n] = '\0';
    return 0;
}

static char *trim(char *a, char *b) { /* [a, b) without surrounding blanks; *b = 0 */
    while (a < b && (*a == ' ' || *a == '\t')) a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r')) b--;
    *b = '\0';
    return a;
}

/* The profile's keys from the text of a shared credentials file (the AWS tools' INI layout):
 *   [default]                       # a section per profile
 *   aws_access_key_id = AKID        # keys are case-insensitive, values trimmed
 *   aws_secret_access_key = SECRET
 *   aws_session_token = TOKEN       # optional
 * Comments start with # or ;. Messages give line numbers, never a line's text (it may hold a
 * secret). */
static dt_status parse_credentials(char *txt, const char *url, const char *file,
                                   const char *profile, s3_conf *c) {
    int in = 0, found = 0, line = 0;
    for (char *l = txt, *next; l; l = next) {
        line++;
        next = strchr(l, '\n');
        char *e = next ? next : l + strlen(l);
        if (next) next++;
        l = trim(l, e);
        if (!*l || *l == '#' || *l == ';') continue;
        if (*l == '[') {
            char *r = strchr(l, ']');
            if (!r)
                return dt_error_set(DT_ERR_FORMAT, "storage open: %s: %s line %d: no ']'", url,
                                    file, line);
            in = !strcmp(trim(l + 1, r), profile);
            found |= in;
            continue;
        }
        char *eq = strchr(l, '=');
        if (!eq)
            return dt_error_set(DT_ERR_FORMAT,
                                "storage open: %s: %s line %d: expected 'key = value'", url, file,
                                line);
        if (!in) continue;
        char *k = trim(l, eq), *v = eq + 1;
        v = trim(v, v + strlen(v));
        int bad = 0;
        if (!strcasecmp(k, "aws_access_key_id"))
            bad = copy_cred(c->access_key, sizeof c->access_key, v, strlen(v));
        else if (!strcasecmp(k, "aws_secret_access_key"))
            bad = copy_cred(c->secret_key, sizeof c->secret_key, v, strlen(v));
        else if (!strcasecmp(k, "aws_session_token"))
            bad = copy_cred(c->session_token, sizeof c->session_token, v, strlen(v));
        if (bad)
            return dt_error_set(DT_ERR_INVALID, "storage open: %s: %s line %d: %s is too long", url,
                                file, line, k);
    }
    if (!found)
        return dt_error_set(DT_ERR_INVALID,
                            "storage open: %s: %s has no profile [%s] (AWS_PROFILE picks one; "
                            "default: [default])",
                            url, file, profile);
    const char *missing = !c->access_key[0]   ? "aws_access_key_id"
                          : !c->secret_key[0] ? "aws_secret_access_key"
                                              : NULL;
    if (missing)
        return dt_error_set(DT_ERR_INVALID, "storage open: %s: %s, profile [%s]: no %s", url, file,
                            profile, missing);
    return DT_OK;
}

/* Credentials, as the AWS tools look for them: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
 * AWS_SESSION_TOKEN) from the environment; when AWS_ACCESS_KEY_ID is not set, the shared
 * credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), profile
 * AWS_PROFILE or "default". The file must be private to its owner (mode 600, like ssh keys):
 * credentials that others can read are refused rather than used. Nothing else (the config, the
 * store URL) can hold a credential, so none reaches a run record. */
static dt_status credentials(const char *url, s3_conf *c) {
    const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY"),
               *token = env("AWS_SESSION_TOKEN");
    if (ak) {
        if (!sk)
            return dt_error_set(DT_ERR_INVALID,
                                "storage open: %s: AWS_SECRET_ACCESS_KEY is not set (S3 "
                                "credentials come from the environment: AWS_ACCESS_KEY_ID, "
                                "AWS_SECRET_ACCESS_KEY, or from ~/.aws/credentials)",
                                url);
        if (copy_cred(c->access_key, sizeof c->access_key, ak, strlen(ak)) ||
            copy_cred(c->secret_key, sizeof c->secret_key, sk, strlen(sk)) ||
            (token && copy_cred(c->session_token, sizeof c->session_token, token, strlen(token))))
            return dt_error_set(DT_ERR_INVALID, "storage open: %s: a credential is too long", url);
        return DT_OK;
    }
    char file[4200];
    const char *f = env("AWS_SHARED_CREDENTIALS_FILE"), *home = env("HOME");
    if (f)
        snprintf(file, sizeof file, "%s", f);
    else if (home)
        snprintf(file, sizeof file, "%s/.aws/credentials", home);
    else
        return dt_error_set(DT_ERR_INVALID,
                            "storage open: %s: no S3 credentials: AWS_ACCESS_KEY_ID is not set "
                            "and HOME is not set (no ~/.aws/credentials)",
                            url);
    enum { MAX_FILE = 64 << 10 };
    char *txt = malloc(MAX_FILE);
    if (!txt) return dt_error_set(DT_ERR_NOMEM, "storage open: out of memory");
    char what[4400];
    snprintf(what, sizeof what, "storage open: %s: S3 credentials", url);
    dt_status st = dt_secret_file_read(file, what, txt, MAX_FILE, NULL);
    if (st == DT_ERR_NOTFOUND)
        st = dt_error_set(DT_ERR_INVALID,
                          "storage open: %s: no S3 credentials: AWS_ACCESS_KEY_ID is not set and "
                          "%s does not exist (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                          "or write the file, mode 600; AWS_SHARED_CREDENTIALS_FILE names another)",
                          url, file);
    if (st == DT_OK) {
        const char *profile = env("AWS_PROFILE");
        st = parse_credentials(txt, url, file, profile ? profile : "default", c);
    }
    explicit_bzero(txt, MAX_FILE);
    free(txt);
    return st; /* AWS_SESSION_TOKEN belongs with the environment's keys: not mixed in here */
}

dt_status dt_store_s3_open(dt_store *s, const char *bucket_prefix) {
    dt_status st = dt_s3_global_init();
    if (st != DT_OK) return st;
    const char *slash = strchr(bucket_prefix, '/');
    size_t bl = slash ? (size_t)(slash - bucket_prefix) : strlen(bucket_prefix);
    if (memchr(bucket_prefix, '@', bl)) /* s3://KEY:SECRET@bucket: not echoed into any log */
        return dt_error_set(DT_ERR_INVALID,
                            "storage open: an s3:// URL with user information ('...@' before the "
                            "bucket) is refused and not shown: credentials come from "
                            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials");
    if (bl == 0 || bl >= 64 ||
        strspn(bucket_prefix, "abcdefghijklmnopqrstuvwxyz0123456789.-_") < bl)
        return dt_error_set(DT_ERR_INVALID,
                            "storage open: %s: invalid bucket name (expected "
                            "s3://BUCKET[/PREFIX], BUCKET of a-z 0-9 . - _)",
                            s->url);
    const char *pre = slash ? slash + 1 : "";
    size_t pl = strlen(pre);
    while (pl && pre[pl - 1] == '/') pl--;
    if (pl >= sizeof((s3_conf *)0)->prefix - 1)
        return dt_error_set(DT_ERR_INVALID, "storage open: %s: prefix too long", s->url);
    for (size_t i = 0; i < pl;) { /* prefix components: not empty, ".", ".." */
        size_t j = i;
        while (j < pl && pre[j] != '/') j++;
        if (j == i || (j - i == 1 && pre[i] == '.') || (j - i == 2 && !strncmp(pre + i, "..", 2)))
            return dt_error_set(DT_ERR_INVALID, "storage open: %s: invalid prefix", s->url);
        i = j + 1;
    }
    const char *endpoint = env("AWS_ENDPOINT_URL"), *region = env("AWS_REGION");
    if (!region) region = env("AWS_DEFAULT_REGION");
    if (!region) region = "us-east-1";
    if (!endpoint) endpoint = "https://s3.amazonaws.com";
    if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
        return dt_error_set(DT_ERR_INVALID,
                            "storage open: %s: AWS_ENDPOINT_URL '%s' is not an "
                            "http:// or https:// URL",
                            s->url, endpoint);
    if (!region[0] || strlen(region) > 40 ||
        strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(region))
        return dt_error_set(DT_ERR_INVALID, "storage open: %s: invalid region '%s'", s->url,
                            region);
    s3_store *p = calloc(1, sizeof *p);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "storage open: out of memory");
    s3_conf *c = &p->c;
    size_t el = strlen(endpoint);
    while (el && endpoint[el - 1] == '/') el--;
    if (el >= sizeof c->endpoint) {
        free(p);
        return dt_error_set(DT_ERR_INVALID, "storage open: %s: AWS_ENDPOINT_URL is too long",
                            s->url);
    }
    st = credentials(s->url, c);
    if (st != DT_OK) {
        explicit_bzero(c, sizeof *c);
        free(p);
        return st;
    }
    memcpy(c->endpoint, endpoint, el);
    memcpy(c->bucket, bucket_prefix, bl);
    if (pl) snprintf(c->prefix, sizeof c->prefix, "%.*s/", (int)pl, pre);
    snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", region);
    c->url = s->url;
    c->opts = s->opts;
    pthread_mutex_init(&p->mu, NULL);
    s->ops = &s3_ops, s->impl = p;
    return DT_OK;
}
