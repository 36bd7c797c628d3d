/* S3 requests for storage_s3.c: path-style URLs, SigV4 signing by libcurl, the payload's
 * SHA-256 in x-amz-content-sha256, retries with jittered exponential backoff on connection
 * errors, timeouts, 5xx and throttling, error classification, and a minimal XML reader for the
 * few S3 responses we parse. Everything here is thread-safe: a failure message is returned in
 * the response (worker threads cannot use the thread-local dt_error_set). */
#ifndef DT_STORE_S3_HTTP_H
#define DT_STORE_S3_HTTP_H

#include <curl/curl.h>
#include "dtrain/storage.h"

typedef struct s3_conf {
    char endpoint[1024]; /* scheme://host[:port][/path], no trailing '/' */
    char bucket[256];
    char prefix[1024]; /* "" or "PREFIX/": prepended to every key */
    char sigv4[96];    /* "aws:amz:REGION:s3" */
    char access_key[256];
    char secret_key[256];     /* never copied into a message */
    char session_token[4096]; /* AWS_SESSION_TOKEN (temporary credentials), or "" */
    const char *url;          /* the store URL, for messages */
    dt_store_opts opts;
} s3_conf;

typedef struct s3_req {
    const char *op;     /* "put", "get", ... (messages) */
    const char *method; /* GET, HEAD, PUT, POST, DELETE */
    const char *key;    /* key under the store's root; NULL: the bucket itself */
    const char *query;  /* canonical query string (sorted, encoded), or NULL */
    const void *body;   /* request body (PUT, POST) */
    size_t n;
    const char *content_type; /* or NULL */
    int error_in_200;  /* a 200 whose body is an <Error> is an error (CompleteMultipartUpload) */
    const char *range; /* "bytes=A-B" (a ranged GET), or NULL */
} s3_req;

typedef struct s3_resp {
    long http; /* status of the last attempt (0: no response) */
    int attempts;
    char *body; /* response body, NUL-terminated (malloc'd; dt_s3_resp_free) */
    size_t n, cap;
    long long length; /* Content-Length (HEAD), -1 if unknown */
    char etag[128];   /* ETag header, quotes included */
    char code[64];    /* S3 error Code, if any */
    char msg[1024];   /* why it failed, naming the request (never the secret) */
} s3_resp;

/* One-time libcurl initialisation (pthread_once). */
dt_status dt_s3_global_init(void);
/* Runs the request with retries on handle h (reset before each attempt). DT_OK on 2xx;
 * DT_ERR_NOTFOUND on 404; DT_ERR_STATE on 401/403 ("access denied", not retried); DT_ERR_IO on
 * other failures after opts.max_retries retries; DT_ERR_NOMEM. out->msg says why. */
dt_status dt_s3_do(CURL *h, const s3_conf *c, const s3_req *r, s3_resp *out);
void dt_s3_resp_free(s3_resp *r);

/* Percent-encodes s as S3 canonical URIs want (every byte but A-Z a-z 0-9 - _ . ~, and '/'
 * when keep_slash). Returns the encoded length; the output is complete only if it is < cap. */
size_t dt_s3_encode(char *out, size_t cap, const char *s, int keep_slash);

/* Finds the next <tag>text</tag> in [p, end): *v, *vn = the raw text. Returns the position
 * after the closing tag, or NULL if there is none. */
const char *dt_s3_xml_next(const char *p, const char *end, const char *tag, const char **v,
                           size_t *vn);
/* Decodes XML entities (&amp; &lt; &gt; &quot; &apos; &#N; &#xH;) of raw text into out
 * (cap >= vn + 1 always suffices). Returns 0, or -1 on a malformed entity or a NUL. */
int dt_s3_xml_text(const char *v, size_t vn, char *out, size_t cap);

/* MD5 of a part list's ETags as S3 forms a multipart object's ETag ("<hex>-<nparts>", quoted);
 * returns 0, or -1 if a part ETag is not a quoted MD5. */
int dt_s3_multipart_etag(char (*etags)[128], int nparts, char out[128]);

#endif
