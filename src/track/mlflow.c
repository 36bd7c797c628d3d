/* The MLflow client's queue, sender thread and spool (include/dtrain/mlflow.h). Callers append
 * ops (begin, params and tags batches, end) and metric rows under a mutex; the thread turns the
 * rows into log-batch ops of at most MLF_MAX_METRICS every EVERY_S seconds (sooner when that
 * many are waiting) and sends every op in order, retrying with backoff; what still fails is a
 * line of the spool file. Once the begin itself has been spooled, the rest of the run follows it
 * there, so that a replay creates the run once and logs to it. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "track/mlflow_impl.h"

enum { KEY_MAX = 128, TRIES = 5, MAX_WARNINGS = 3, MAX_ROWS = 1 << 18, TIMEOUT_S = 10 };
static const double EVERY_S = 2.0, FIRST_BACKOFF_S = 0.5;

typedef struct row {
    char key[KEY_MAX];
    int64_t step;
    double ms, value;
} row;

struct dt_mlflow {
    mlf_http http;
    char *spool;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int have_th, quit;
    cJSON *ops; /* queued ops, oldest first (under mu) */
    row *rows;  /* queued metric values (under mu) */
    size_t n, cap;
    /* the thread's own */
    char run_id[MLF_RUN_ID_MAX];
    int spool_all, down, warnings;
    int off; /* the server refused the run itself: nothing more is sent or spooled */
    int spooled, dropped;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void wait_until(dt_mlflow *m, double at) { /* with mu held; returns early on quit */
    struct timespec dl = {.tv_sec = (time_t)at};
    dl.tv_nsec = (long)((at - (double)dl.tv_sec) * 1e9);
    pthread_cond_timedwait(&m->cv, &m->mu, &dl);
}

static void warn(dt_mlflow *m, const char *what) {
    if (m->warnings++ < MAX_WARNINGS)
        fprintf(stderr, "warning: tracking: %s; %s\n", dt_last_error(), what);
}

/* A params batch the server refused: most likely a resumed run whose config changed (MLflow
 * never changes a param's value), which refuses the whole batch. Sent again one param at a time,
 * so that only the changed ones are left as first logged (named in one warning). DT_OK when
 * every request got an answer. */
static dt_status params_one_by_one(dt_mlflow *m, const cJSON *op) {
    cJSON *ps = cJSON_GetObjectItem(op, "params");
    if (cJSON_GetArraySize(ps) < 2 || cJSON_GetObjectItem(op, "metrics")) return DT_ERR_INVALID;
    char names[600] = "";
    int kept = 0;
    for (cJSON *p = ps->child; p; p = p->next) {
        cJSON *one = cJSON_CreateObject(), *a = cJSON_CreateArray();
        cJSON_AddStringToObject(one, "op", "batch");
        cJSON_AddItemToObject(one, "params", a);
        cJSON_AddItemReferenceToArray(a, p);
        dt_status st = mlf_exec(&m->http, one, m->run_id);
        cJSON_Delete(one);
        if (st == DT_ERR_IO) return st;
        if (st != DT_OK && kept++ < 8) {
            size_t l = strlen(names);
            snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "",
                     cJSON_GetStringValue(cJSON_GetObjectItem(p, "key")));
        }
    }
    if (kept && m->warnings++ < MAX_WARNINGS)
        fprintf(stderr,
                "warning: tracking: mlflow %s: %d param%s of run %s %s from what it first "
                "logged (%s%s); MLflow keeps the first values\n",
                m->http.base, kept, kept == 1 ? "" : "s", m->run_id,
                kept == 1 ? "differs" : "differ", names, kept > 8 ? ", ..." : "");
    return DT_OK;
}

static void send_op(dt_mlflow *m, cJSON *op, int quitting) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(op, "op"));
    int is_begin = kind && !strcmp(kind, "begin");
    dt_status st = DT_ERR_IO;
    /* a server that just failed gets one try per op (none while closing): a down server costs
     * the thread one timeout per batch, and closing at most one */
    if (m->off) {
        m->dropped++;
        return;
    }
    int tries = m->spool_all ? 0 : m->down ? !quitting : quitting ? 1 : TRIES;
    double backoff = FIRST_BACKOFF_S;
    for (int i = 0; i < tries; i++) {
        st = mlf_exec(&m->http, op, m->run_id);
        if (st != DT_ERR_IO) break;
        if (i + 1 < tries) {
            pthread_mutex_lock(&m->mu);
            double at = now_s() + backoff;
            while (!m->quit && now_s() < at) wait_until(m, at);
            int quit = m->quit; /* closing: no more waiting */
            pthread_mutex_unlock(&m->mu);
            if (quit) break;
            backoff *= 2;
        }
    }
    if (st == DT_OK) {
        m->down = 0;
        return;
    }
    if (st != DT_ERR_IO && params_one_by_one(m, op) == DT_OK) return;
    if (st != DT_ERR_IO) { /* refused: sending it again would be refused again */
        m->dropped++;
        warn(m, is_begin ? "nothing of this run is sent to MLflow" : "that request is dropped");
        m->off = is_begin;
        return;
    }
    if (tries) {
        m->down = 1;
        char what[4200];
        snprintf(what, sizeof what,
                 "what cannot be sent goes to %s (replay it with `dtrain runs sync`); training "
                 "goes on",
                 m->spool ? m->spool : "nowhere (no spool file)");
        if (!m->spooled) warn(m, what);
    }
    if (is_begin) m->spool_all = 1;
    if (!is_begin && !cJSON_GetObjectItem(op, "run_id") && m->run_id[0])
        cJSON_AddStringToObject(op, "run_id", m->run_id);
    cJSON_AddStringToObject(op, "uri", m->http.base); /* where `dtrain runs sync` sends it */
    if (!m->spool)
        dt_error_set(DT_ERR_IO, "mlflow %s: no spool file", m->http.base);
    else if (mlf_spool_append(m->spool, op) == DT_OK) {
        m->spooled++;
    } else {
        m->dropped++;
        warn(m, "values are lost");
    }
}

static cJSON *kv(const char *k, const char *v, size_t max) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", k);
    if (strlen(v) <= max) {
        cJSON_AddStringToObject(o, "value", v);
    } else {
        char *cut = strndup(v, max);
        cJSON_AddStringToObject(o, "value", cut ? cut : "");
        free(cut);
    }
    return o;
}

/* Moves the queued rows into log-batch ops (with mu held). */
static void rows_to_ops(dt_mlflow *m) {
    for (size_t i = 0; i < m->n;) {
        cJSON *op = cJSON_CreateObject(), *a = cJSON_CreateArray();
        cJSON_AddStringToObject(op, "op", "batch");
        cJSON_AddItemToObject(op, "metrics", a);
        for (int k = 0; k < MLF_MAX_METRICS && i < m->n; k++, i++) {
            const row *r = &m->rows[i];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "key", r->key);
            /* %.17g: the same double on the server (cJSON's own printing may keep 15 digits
             * of a value that 15 digits do not give back exactly); protobuf's JSON form of a
             * double that is not finite */
            char num[40];
            snprintf(num, sizeof num, "%.17g", r->value);
            if (isfinite(r->value))
                cJSON_AddRawToObject(x, "value", num);
            else
                cJSON_AddStringToObject(x, "value",
                                        isnan(r->value) ? "NaN"
                                        : r->value > 0  ? "Infinity"
                                                        : "-Infinity");
            cJSON_AddNumberToObject(x, "timestamp", r->ms);
            cJSON_AddNumberToObject(x, "step", (double)r->step);
            cJSON_AddItemToArray(a, x);
        }
        cJSON_AddItemToArray(m->ops, op);
    }
    m->n = 0;
}

static void *sender_main(void *arg) {
    dt_mlflow *m = arg;
    pthread_mutex_lock(&m->mu);
    double last = now_s();
    for (;;) {
        while (!m->quit && !cJSON_GetArraySize(m->ops) && m->n < MLF_MAX_METRICS &&
               now_s() < last + EVERY_S)
            wait_until(m, last + EVERY_S);
        last = now_s();
        rows_to_ops(m);
        cJSON *ops = m->ops;
        m->ops = cJSON_CreateArray();
        int quitting = m->quit;
        pthread_mutex_unlock(&m->mu);
        for (cJSON *op = ops ? ops->child : NULL; op; op = op->next) send_op(m, op, quitting);
        cJSON_Delete(ops);
        pthread_mutex_lock(&m->mu);
        if (quitting && !m->n && !cJSON_GetArraySize(m->ops)) break;
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

dt_status dt_mlflow_open(const char *uri, const char *spool_path, dt_mlflow **out) {
    *out = NULL;
    dt_mlflow *m = calloc(1, sizeof *m);
    if (!m) return dt_error_set(DT_ERR_NOMEM, "tracking.uri %s: out of memory", uri);
    dt_status st = mlf_http_init(&m->http, uri ? uri : "", TIMEOUT_S);
    if (st != DT_OK) {
        free(m);
        return st;
    }
    m->spool = spool_path ? strdup(spool_path) : NULL;
    m->ops = cJSON_CreateArray();
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (!m->ops || (spool_path && !m->spool) || pthread_create(&m->th, NULL, sender_main, m) != 0) {
        st = dt_error_set(DT_ERR_STATE, "tracking.uri %s: cannot start the MLflow sender", uri);
        dt_mlflow_close(m);
        return st;
    }
    m->have_th = 1;
    *out = m;
    return DT_OK;
}

static void queue(dt_mlflow *m, cJSON *op) {
    pthread_mutex_lock(&m->mu);
    rows_to_ops(m); /* keep the order of calls */
    cJSON_AddItemToArray(m->ops, op);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* params or tags as batch ops of MLF_MAX_PARAMS_TAGS each */
static void queue_kv(dt_mlflow *m, const char *part, const dt_track_kv *kvs, int n, size_t max) {
    for (int i = 0; i < n;) {
        cJSON *op = cJSON_CreateObject(), *a = cJSON_CreateArray();
        cJSON_AddStringToObject(op, "op", "batch");
        cJSON_AddItemToObject(op, part, a);
        for (int k = 0; k < MLF_MAX_PARAMS_TAGS && i < n; i++)
            if (kvs[i].key && kvs[i].key[0] && kvs[i].value)
                cJSON_AddItemToArray(a, kv(kvs[i].key, kvs[i].value, max)), k++;
        queue(m, op);
    }
}

dt_status dt_mlflow_run_begin(dt_mlflow *m, const char *experiment, const char *run_name,
                              const dt_track_kv *params, int n_params, const dt_track_kv *tags,
                              int n_tags) {
    if (!m || !experiment || !experiment[0] || !run_name || !run_name[0])
        return dt_error_set(DT_ERR_INVALID, "mlflow run: experiment and run name must be given");
    cJSON *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "op", "begin");
    cJSON_AddStringToObject(op, "experiment", experiment);
    cJSON_AddStringToObject(op, "run_name", run_name);
    cJSON_AddNumberToObject(op, "start_time", mlf_ms(now_s()));
    queue(m, op);
    queue_kv(m, "params", params, n_params, MLF_MAX_PARAM_VALUE);
    queue_kv(m, "tags", tags, n_tags, MLF_MAX_TAG_VALUE);
    return DT_OK;
}

dt_status dt_mlflow_metric(dt_mlflow *m, const char *key, int64_t step, double wall, double value) {
    if (!m || !key || !key[0] || strlen(key) >= KEY_MAX)
        return dt_error_set(DT_ERR_INVALID, "mlflow metric: key '%s' is empty or too long",
                            key ? key : "");
    dt_status st = DT_OK;
    pthread_mutex_lock(&m->mu);
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        row *r = cap <= MAX_ROWS ? realloc(m->rows, cap * sizeof *r) : NULL;
        if (r)
            m->rows = r, m->cap = cap;
        else
            st = dt_error_set(DT_ERR_NOMEM, "mlflow %s: %zu values not yet sent", m->http.base,
                              m->n);
    }
    if (st == DT_OK) {
        row *r = &m->rows[m->n++];
        snprintf(r->key, sizeof r->key, "%s", key);
        r->step = step, r->ms = mlf_ms(wall), r->value = value;
        if (m->n >= MLF_MAX_METRICS) pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

dt_status dt_mlflow_tag(dt_mlflow *m, const char *key, const char *value) {
    if (!m || !key || !key[0] || !value)
        return dt_error_set(DT_ERR_INVALID, "mlflow tag: key and value must be given");
    queue_kv(m, "tags", &(dt_track_kv){key, value}, 1, MLF_MAX_TAG_VALUE);
    return DT_OK;
}

const char *dt_mlflow_status(const char *s) {
    return !strcmp(s, "done") ? "FINISHED" : !strcmp(s, "failed") ? "FAILED" : "KILLED";
}

dt_status dt_mlflow_artifact(dt_mlflow *m, const char *file, const char *artifact_path,
                             const char *xxh3) {
    if (!m || !file || !artifact_path)
        return dt_error_set(DT_ERR_INVALID, "mlflow artifact: file and path must be given");
    cJSON *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "op", "upload");
    cJSON_AddStringToObject(op, "file", file);
    cJSON_AddStringToObject(op, "path", artifact_path);
    if (xxh3) cJSON_AddStringToObject(op, "xxh3", xxh3);
    queue(m, op);
    return DT_OK;
}

dt_status dt_mlflow_run_end(dt_mlflow *m, const char *status) {
    if (!m || !status) return dt_error_set(DT_ERR_INVALID, "mlflow run end: no status");
    cJSON *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "op", "end");
    cJSON_AddStringToObject(op, "status", status);
    cJSON_AddNumberToObject(op, "end_time", mlf_ms(now_s()));
    queue(m, op);
    return DT_OK;
}

dt_status dt_mlflow_close(dt_mlflow *m) {
    if (!m) return DT_OK;
    if (m->have_th) {
        pthread_mutex_lock(&m->mu);
        m->quit = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->th, NULL);
    }
    dt_status st = DT_OK;
    if (m->spooled)
        st = dt_error_set(DT_ERR_IO,
                          "mlflow %s: %d request%s could not be sent and %s in %s; replay with"
                          " `dtrain runs sync`",
                          m->http.base, m->spooled, m->spooled == 1 ? "" : "s",
                          m->spooled == 1 ? "is" : "are", m->spool);
    else if (m->dropped)
        st = dt_error_set(DT_ERR_IO, "mlflow %s: %d request%s refused or lost", m->http.base,
                          m->dropped, m->dropped == 1 ? " was" : "s were");
    mlf_http_free(&m->http);
    cJSON_Delete(m->ops);
    free(m->rows), free(m->spool);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
    return st;
}
