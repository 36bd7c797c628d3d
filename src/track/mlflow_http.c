/* MLflow's REST API over libcurl (see mlflow_impl.h): one request with the client's auth, and
 * the ops a run is made of -- begin (experiments/get-by-name or create, runs/search or create),
 * log-batch, update -- and the dispatch of the upload (mlflow_artifacts.c) and registry
 * (mlflow_models.c) ops. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "track/mlflow_impl.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_rc;

static void curl_init(void) {
    curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int dt_mlflow_is_uri(const char *uri) {
    return uri && (!strncmp(uri, "http://", 7) || !strncmp(uri, "https://", 8));
}

double mlf_ms(double wall) {
    return floor(wall * 1000.0 + 0.5);
}

static int env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1"));
}

dt_status mlf_http_init(mlf_http *h, const char *uri, long timeout_s) {
    memset(h, 0, sizeof *h);
    const char *host = uri + (strncmp(uri, "https://", 8) ? 7 : 8);
    size_t n = strlen(uri);
    if (!dt_mlflow_is_uri(uri) || !host[0] || host[0] == '/' || strpbrk(host, " \t\r\n") ||
        n >= sizeof h->base)
        return dt_error_set(DT_ERR_INVALID,
                            "tracking.uri '%s': not an MLflow server address (http://HOST:PORT"
                            " or https://HOST[:PORT][/PATH])",
                            uri);
    while (n > 0 && uri[n - 1] == '/') n--;
    memcpy(h->base, uri, n);
    pthread_once(&curl_once, curl_init);
    if (curl_rc != CURLE_OK || !(h->c = curl_easy_init()))
        return dt_error_set(DT_ERR_INTERNAL, "tracking.uri %s: libcurl initialisation failed", uri);
    h->timeout_s = timeout_s;
    h->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    /* as MLflow's client (mlflow/utils/rest_utils.py): a token wins over a user and password */
    const char *tok = getenv("MLFLOW_TRACKING_TOKEN"), *u = getenv("MLFLOW_TRACKING_USERNAME"),
               *p = getenv("MLFLOW_TRACKING_PASSWORD");
    if (tok && tok[0]) {
        char line[4096];
        snprintf(line, sizeof line, "Authorization: Bearer %s", tok);
        h->hdr = curl_slist_append(h->hdr, line);
    } else if (u && u[0] && p) {
        snprintf(h->user, sizeof h->user, "%s", u);
        snprintf(h->pass, sizeof h->pass, "%s", p);
    }
    if (!h->hdr) {
        mlf_http_free(h);
        return dt_error_set(DT_ERR_NOMEM, "tracking.uri %s: out of memory", uri);
    }
    return DT_OK;
}

void mlf_http_free(mlf_http *h) {
    if (h->c) curl_easy_cleanup(h->c);
    curl_slist_free_all(h->hdr);
    memset(h, 0, sizeof *h);
}

static size_t on_data(char *d, size_t sz, size_t nm, void *ud) {
    mlf_body *b = ud;
    size_t k = sz * nm;
    if (b->n + k > (16u << 20)) return 0; /* no MLflow answer is that large */
    char *q = realloc(b->p, b->n + k + 1);
    if (!q) return 0;
    memcpy(q + b->n, d, k);
    b->p = q, b->n += k, q[b->n] = 0;
    return k;
}

void mlf_setup(mlf_http *h, const char *url, struct curl_slist *hdr, mlf_body *b, char *err) {
    CURL *c = h->c;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, h->timeout_s < 5 ? h->timeout_s : 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, h->timeout_s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    if (h->user[0]) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERNAME, h->user);
        curl_easy_setopt(c, CURLOPT_PASSWORD, h->pass);
    }
    if (env_true("MLFLOW_TRACKING_INSECURE_TLS")) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    const char *ca = getenv("MLFLOW_TRACKING_SERVER_CERT_PATH");
    if (ca && ca[0]) curl_easy_setopt(c, CURLOPT_CAINFO, ca);
}

dt_status mlf_result(mlf_http *h, const char *url, CURLcode rc, mlf_body *b, const char *err,
                     cJSON **resp) {
    long code = 0;
    curl_easy_getinfo(h->c, CURLINFO_RESPONSE_CODE, &code);
    dt_status st = DT_OK;
    h->ec[0] = 0;
    if (rc != CURLE_OK) {
        st = dt_error_set(DT_ERR_IO, "mlflow %s: %s", url, err[0] ? err : curl_easy_strerror(rc));
    } else if (code < 200 || code >= 300) {
        /* MLflow's errors: {"error_code": "INVALID_PARAMETER_VALUE", "message": "..."} */
        cJSON *e = b->p ? cJSON_Parse(b->p) : NULL;
        const char *ec = cJSON_GetStringValue(cJSON_GetObjectItem(e, "error_code")),
                   *msg = cJSON_GetStringValue(cJSON_GetObjectItem(e, "message"));
        if (ec) snprintf(h->ec, sizeof h->ec, "%s", ec);
        char text[600];
        snprintf(text, sizeof text, "%s%s%s", ec ? ec : "", ec ? ": " : "",
                 msg ? msg : (b->p ? b->p : ""));
        for (char *x = text; *x; x++)
            if (*x == '\n' || *x == '\r') *x = ' ';
        st = dt_error_set(code >= 500 || code == 429                     ? DT_ERR_IO
                          : ec && !strcmp(ec, "RESOURCE_DOES_NOT_EXIST") ? DT_ERR_NOTFOUND
                                                                         : DT_ERR_INVALID,
                          "mlflow %s: HTTP %ld %s", url, code, text);
        cJSON_Delete(e);
    } else if (resp && !(*resp = cJSON_Parse(b->p ? b->p : "{}"))) {
        st = dt_error_set(DT_ERR_IO, "mlflow %s: the answer is not JSON", url);
    }
    free(b->p);
    b->p = NULL, b->n = 0;
    return st;
}

dt_status mlf_call(mlf_http *h, const char *path, const cJSON *json, int del, cJSON **resp) {
    char url[2048], err[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s/api/2.0/mlflow/%s", h->base, path);
    char *req = json ? cJSON_PrintUnformatted(json) : NULL;
    if (json && !req) return dt_error_set(DT_ERR_NOMEM, "mlflow %s: out of memory", url);
    mlf_body b = {0};
    mlf_setup(h, url, h->hdr, &b, err);
    if (del) curl_easy_setopt(h->c, CURLOPT_CUSTOMREQUEST, "DELETE");
    if (req) curl_easy_setopt(h->c, CURLOPT_POSTFIELDS, req);
    CURLcode rc = curl_easy_perform(h->c);
    free(req);
    return mlf_result(h, url, rc, &b, err, resp);
}

static dt_status call(mlf_http *h, const char *path, const cJSON *json, cJSON **resp) {
    return mlf_call(h, path, json, 0, resp);
}

/* The id of experiment `name`, created when missing (a creation raced by another writer is
 * looked up again). */
static dt_status experiment_id(mlf_http *h, const char *name, char *id, size_t n) {
    char *esc = curl_easy_escape(h->c, name, 0);
    if (!esc) return dt_error_set(DT_ERR_NOMEM, "mlflow: out of memory");
    char path[1200];
    snprintf(path, sizeof path, "experiments/get-by-name?experiment_name=%s", esc);
    curl_free(esc);
    dt_status st = DT_ERR_NOTFOUND;
    for (int tries = 0; tries < 2 && st == DT_ERR_NOTFOUND; tries++) {
        cJSON *r = NULL;
        st = call(h, path, NULL, &r);
        if (st == DT_OK) {
            const char *x = cJSON_GetStringValue(
                cJSON_GetObjectItem(cJSON_GetObjectItem(r, "experiment"), "experiment_id"));
            if (x) snprintf(id, n, "%s", x);
            cJSON_Delete(r);
            return x ? DT_OK : dt_error_set(DT_ERR_IO, "mlflow %s: no experiment_id", h->base);
        }
        if (st != DT_ERR_NOTFOUND) return st;
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "name", name);
        st = call(h, "experiments/create", q, &r);
        cJSON_Delete(q);
        if (st == DT_OK) {
            const char *x = cJSON_GetStringValue(cJSON_GetObjectItem(r, "experiment_id"));
            if (x) snprintf(id, n, "%s", x);
            cJSON_Delete(r);
            return x ? DT_OK : dt_error_set(DT_ERR_IO, "mlflow %s: no experiment_id", h->base);
        }
        if (st == DT_ERR_INVALID) st = DT_ERR_NOTFOUND; /* RESOURCE_ALREADY_EXISTS: look again */
    }
    return st;
}

static const char *run_id_of(const cJSON *run) {
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "info"), "run_id"));
}

static dt_status update(mlf_http *h, const char *run_id, const char *status, double end_ms) {
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "run_id", run_id);
    cJSON_AddStringToObject(q, "status", status);
    if (end_ms > 0) cJSON_AddNumberToObject(q, "end_time", end_ms);
    dt_status st = call(h, "runs/update", q, NULL);
    cJSON_Delete(q);
    return st;
}

/* The newest run named `name` in experiment eid: DT_OK with its id, else DT_ERR_NOTFOUND. */
static dt_status search_run(mlf_http *h, const char *eid, const char *name,
                            char run_id[MLF_RUN_ID_MAX]) {
    if (strchr(name, '\'') || strchr(name, '\\')) return DT_ERR_NOTFOUND; /* never found */
    char filter[400];
    snprintf(filter, sizeof filter, "attributes.run_name = '%s'", name);
    cJSON *q = cJSON_CreateObject(), *r = NULL;
    cJSON_AddItemToObject(q, "experiment_ids", cJSON_CreateStringArray(&(const char *){eid}, 1));
    cJSON_AddStringToObject(q, "filter", filter);
    cJSON_AddNumberToObject(q, "max_results", 1);
    cJSON_AddItemToObject(
        q, "order_by", cJSON_CreateStringArray(&(const char *){"attributes.start_time DESC"}, 1));
    dt_status st = call(h, "runs/search", q, &r);
    cJSON_Delete(q);
    if (st != DT_OK) return st;
    const char *id = run_id_of(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "runs"), 0));
    if (id) snprintf(run_id, MLF_RUN_ID_MAX, "%s", id);
    cJSON_Delete(r);
    return id ? DT_OK : DT_ERR_NOTFOUND;
}

dt_status mlf_find_run(mlf_http *h, const char *exp, const char *name,
                       char run_id[MLF_RUN_ID_MAX]) {
    char eid[64];
    dt_status st = experiment_id(h, exp, eid, sizeof eid);
    if (st == DT_OK) st = search_run(h, eid, name, run_id);
    if (st == DT_ERR_NOTFOUND)
        return dt_error_set(DT_ERR_NOTFOUND, "mlflow %s: no run %s/%s on the server", h->base, exp,
                            name);
    return st;
}

/* The run named `name` in the experiment (the newest, if several), else a new one. */
static dt_status begin(mlf_http *h, const cJSON *op, char run_id[MLF_RUN_ID_MAX]) {
    const char *exp = cJSON_GetStringValue(cJSON_GetObjectItem(op, "experiment")),
               *name = cJSON_GetStringValue(cJSON_GetObjectItem(op, "run_name"));
    if (!exp || !name) return dt_error_set(DT_ERR_INVALID, "mlflow begin: no experiment or name");
    char eid[64];
    dt_status st = experiment_id(h, exp, eid, sizeof eid);
    if (st != DT_OK) return st;
    cJSON *r = NULL;
    st = search_run(h, eid, name, run_id);
    if (st == DT_OK) return update(h, run_id, "RUNNING", 0); /* a resumed run is live again */
    if (st != DT_ERR_NOTFOUND) return st;
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "experiment_id", eid);
    cJSON_AddStringToObject(q, "run_name", name);
    cJSON *t = cJSON_GetObjectItem(op, "start_time");
    if (cJSON_IsNumber(t)) cJSON_AddNumberToObject(q, "start_time", t->valuedouble);
    st = call(h, "runs/create", q, &r);
    cJSON_Delete(q);
    if (st != DT_OK) return st;
    const char *id = run_id_of(cJSON_GetObjectItem(r, "run"));
    if (id) snprintf(run_id, MLF_RUN_ID_MAX, "%s", id);
    cJSON_Delete(r);
    return id ? DT_OK : dt_error_set(DT_ERR_IO, "mlflow %s: runs/create gave no run_id", h->base);
}

dt_status mlf_exec(mlf_http *h, const cJSON *op, char run_id[MLF_RUN_ID_MAX]) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(op, "op"));
    if (kind && !strcmp(kind, "begin")) return begin(h, op, run_id);
    if (kind && !strcmp(kind, "alias")) return mlf_model_op(h, op, ""); /* no run involved */
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(op, "run_id"));
    const char *exp = cJSON_GetStringValue(cJSON_GetObjectItem(op, "experiment")),
               *name = cJSON_GetStringValue(cJSON_GetObjectItem(op, "run_name"));
    if (!id && !run_id[0] && exp && name) {
        dt_status st = mlf_find_run(h, exp, name, run_id);
        if (st != DT_OK) return st;
    }
    if (!id) id = run_id;
    if (!id[0]) return dt_error_set(DT_ERR_INVALID, "mlflow %s: no run to log to", h->base);
    if (kind && !strcmp(kind, "upload")) return mlf_upload(h, op, id);
    if (kind && !strcmp(kind, "model_version")) return mlf_model_op(h, op, id);
    if (kind && !strcmp(kind, "end")) {
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(op, "status"));
        cJSON *t = cJSON_GetObjectItem(op, "end_time");
        return update(h, id, s ? s : "FINISHED", cJSON_IsNumber(t) ? t->valuedouble : 0);
    }
    if (!kind || strcmp(kind, "batch"))
        return dt_error_set(DT_ERR_INVALID, "mlflow: unknown op '%s'", kind ? kind : "");
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "run_id", id);
    static const char *const parts[] = {"params", "tags"};
    for (int i = 0; i < 2; i++) {
        cJSON *a = cJSON_GetObjectItem(op, parts[i]);
        if (a) cJSON_AddItemReferenceToObject(q, parts[i], a);
    }
    /* values read back from a spool are plain numbers again: printed with %.17g, as when they
     * were first sent, so that the server gets (and deduplicates) the same double */
    cJSON *ms = cJSON_Duplicate(cJSON_GetObjectItem(op, "metrics"), 1);
    for (cJSON *x = ms ? ms->child : NULL; x; x = x->next) {
        cJSON *v = cJSON_GetObjectItem(x, "value");
        if (!cJSON_IsNumber(v)) continue;
        char num[40];
        snprintf(num, sizeof num, "%.17g", v->valuedouble);
        cJSON_ReplaceItemInObject(x, "value", cJSON_CreateRaw(num));
    }
    if (ms) cJSON_AddItemToObject(q, "metrics", ms);
    dt_status st = call(h, "runs/log-batch", q, NULL);
    cJSON_Delete(q);
    return st;
}
