/* The upload op (mlflow_impl.h): one local file PUT to the run's artifact store through the
 * tracking server's artifact proxy (`mlflow server --serve-artifacts`, the default of MLflow 2+;
 * REST /api/2.0/mlflow-artifacts/artifacts/<experiment>/<run>/artifacts/<path>, where the run's
 * artifact_uri is mlflow-artifacts:/<experiment>/<run>/artifacts). The file is streamed from disk
 * (a read callback, no whole-file buffer) and hashed (xxh3-64) as it is sent: when the op
 * recorded a hash and the bytes sent differ from it, the file changed after it was listed and
 * the upload is reported as refused. Uploading the same path again overwrites it, so a replay
 * is harmless. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "track/mlflow_impl.h"

dt_status mlf_artifact_uri(mlf_http *h, const char *run_id, char *out, size_t n) {
    char path[200];
    snprintf(path, sizeof path, "runs/get?run_id=%s", run_id);
    cJSON *r = NULL;
    dt_status st = mlf_call(h, path, NULL, 0, &r);
    if (st != DT_OK) return st;
    const char *u = cJSON_GetStringValue(cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "run"), "info"), "artifact_uri"));
    if (u) snprintf(out, n, "%s", u);
    cJSON_Delete(r);
    return u ? DT_OK
             : dt_error_set(DT_ERR_IO, "mlflow %s: run %s has no artifact_uri", h->base, run_id);
}

/* h->art_root for run_id: from runs/get's artifact_uri, once per run. */
static dt_status artifact_root(mlf_http *h, const char *run_id) {
    if (!strcmp(h->art_run, run_id) && h->art_root[0]) return DT_OK;
    char u[1024];
    dt_status st = mlf_artifact_uri(h, run_id, u, sizeof u);
    if (st != DT_OK) return st;
    static const char pfx[] = "mlflow-artifacts:";
    if (strncmp(u, pfx, sizeof pfx - 1)) {
        st = dt_error_set(DT_ERR_INVALID,
                          "mlflow %s: run %s keeps its artefacts at %s, not behind the server's "
                          "artifact proxy (mlflow-artifacts:; start the server with "
                          "--serve-artifacts and --artifacts-destination); nothing uploaded",
                          h->base, run_id, u);
    } else {
        const char *rest = u + sizeof pfx - 1;
        if (rest[0] == '/' && rest[1] == '/') { /* mlflow-artifacts://HOST:PORT/path */
            rest = strchr(rest + 2, '/');
            if (!rest) rest = "";
        }
        size_t n = strlen(rest);
        while (n && rest[n - 1] == '/') n--;
        int w =
            snprintf(h->art_root, sizeof h->art_root, "%s/api/2.0/mlflow-artifacts/artifacts%s%.*s",
                     h->base, rest[0] == '/' ? "" : "/", (int)n, rest);
        if (w < 0 || (size_t)w >= sizeof h->art_root)
            st = dt_error_set(DT_ERR_INVALID, "mlflow %s: artifact_uri %s is too long", h->base, u);
        else
            snprintf(h->art_run, sizeof h->art_run, "%s", run_id);
    }
    return st;
}

typedef struct src {
    FILE *f;
    XXH3_state_t *x;
    int64_t n;
} src;

static size_t on_read(char *buf, size_t sz, size_t nm, void *ud) {
    src *s = ud;
    size_t k = fread(buf, 1, sz * nm, s->f);
    if (k == 0 && ferror(s->f)) return CURL_READFUNC_ABORT;
    XXH3_64bits_update(s->x, buf, k);
    s->n += (int64_t)k;
    return k;
}

/* A relative artefact path: segments of [A-Za-z0-9._-], no "." or ".." segment. */
static int path_ok(const char *p) {
    if (!p[0] || p[0] == '/' || strlen(p) > 500) return 0;
    for (const char *seg = p; *seg;) {
        size_t n = strcspn(seg, "/");
        if (!n || (n == 1 && seg[0] == '.') || (n == 2 && !strncmp(seg, "..", 2))) return 0;
        for (size_t i = 0; i < n; i++) {
            char c = seg[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-'))
                return 0;
        }
        seg += n + (seg[n] == '/');
    }
    return 1;
}

dt_status mlf_upload(mlf_http *h, const cJSON *op, const char *run_id) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(op, "file")),
               *path = cJSON_GetStringValue(cJSON_GetObjectItem(op, "path")),
               *want = cJSON_GetStringValue(cJSON_GetObjectItem(op, "xxh3"));
    if (!file || !path || !path_ok(path))
        return dt_error_set(DT_ERR_INVALID, "mlflow upload: bad file or artefact path '%s'",
                            path ? path : "");
    dt_status st = artifact_root(h, run_id);
    if (st != DT_OK) return st;
    src s = {.f = fopen(file, "rb"), .x = XXH3_createState()};
    if (!s.f || !s.x) {
        int e = errno;
        if (s.f) fclose(s.f);
        XXH3_freeState(s.x);
        return dt_error_set(DT_ERR_NOTFOUND, "mlflow upload: %s: %s", file, strerror(e));
    }
    XXH3_64bits_reset(s.x);
    fseek(s.f, 0, SEEK_END);
    long size = ftell(s.f);
    rewind(s.f);
    char url[2200], err[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s/%s", h->art_root, path); /* path_ok: nothing to escape */
    /* the client's headers (auth) but a binary body, and no "Expect: 100-continue" wait */
    struct curl_slist *hdr = NULL;
    for (struct curl_slist *x = h->hdr; x; x = x->next)
        if (strncmp(x->data, "Content-Type:", 13)) hdr = curl_slist_append(hdr, x->data);
    hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
    hdr = curl_slist_append(hdr, "Expect:");
    mlf_body b = {0};
    mlf_setup(h, url, hdr, &b, err);
    CURL *c = h->c;
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L); /* PUT */
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &s);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)(size < 0 ? 0 : size));
    /* a large file takes as long as it takes: only a stalled transfer times out */
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 0L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, h->timeout_s);
    CURLcode rc = hdr ? curl_easy_perform(c) : CURLE_OUT_OF_MEMORY;
    st = mlf_result(h, url, rc, &b, err, NULL);
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(s.x));
    fclose(s.f);
    XXH3_freeState(s.x);
    curl_slist_free_all(hdr);
    if (st == DT_OK && (s.n != size || (want && strcmp(want, got))))
        st = dt_error_set(DT_ERR_INVALID,
                          "mlflow upload: %s changed since it was listed (xxh3 %s, sent %s)", file,
                          want ? want : "-", got);
    return st;
}
