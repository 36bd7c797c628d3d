/* The device interface (include/dtrain/device.h): parsing and resolving device specs, argument
 * checks, and dispatch to the CPU or CUDA backend (device_cpu.c, device_cuda.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "device/device_impl.h"

struct dt_stream {
    dt_device dev;
    void *h; /* backend handle */
};

struct dt_stream_graph {
    dt_device dev;
    void *h; /* the backend's instantiated graph */
};

struct dt_event {
    dt_device dev;
    void *h;
    int recorded;
};

const char *dt_device_name(dt_device d, char *buf, size_t n) {
    if (!buf || n == 0) return "";
    if (d.kind == DT_DEVICE_CPU)
        snprintf(buf, n, "cpu");
    else if (d.kind == DT_DEVICE_CUDA && d.index < 0)
        snprintf(buf, n, "cuda");
    else if (d.kind == DT_DEVICE_CUDA)
        snprintf(buf, n, "cuda:%d", d.index);
    else
        snprintf(buf, n, "device-kind-%d", (int)d.kind);
    return buf;
}

dt_status dt_device_count(dt_device_kind kind, int *n) {
    if (!n) return dt_error_set(DT_ERR_INVALID, "device count: NULL output");
    *n = 0;
    if (kind == DT_DEVICE_CPU) {
        *n = 1;
        return DT_OK;
    }
    if (kind != DT_DEVICE_CUDA)
        return dt_error_set(DT_ERR_INVALID, "device count: unknown device kind %d", (int)kind);
    const dt_device_backend *be = dt_device_cuda_backend();
    return be ? be->count(n) : DT_OK;
}

/* *be = the backend of d after checking that d exists; the error otherwise. */
static dt_status backend_of(dt_device d, const char *op, const dt_device_backend **be) {
    char nm[DT_DEVICE_NAME_MAX];
    dt_device_name(d, nm, sizeof nm);
    *be = NULL;
    if (d.kind == DT_DEVICE_CPU) {
        if (d.index != 0)
            return dt_error_set(DT_ERR_INVALID, "device %s: %s: the CPU device has index 0 only",
                                nm, op);
        *be = &dt_device_cpu_backend;
        return DT_OK;
    }
    if (d.kind != DT_DEVICE_CUDA)
        return dt_error_set(DT_ERR_INVALID, "device %s: %s: unknown device kind", nm, op);
    const dt_device_backend *cu = dt_device_cuda_backend();
    if (!cu)
        return dt_error_set(DT_ERR_STATE,
                            "device %s: %s: this dtrain was built without CUDA (-DDT_CUDA=OFF)", nm,
                            op);
    int n = 0;
    dt_status st = cu->count(&n);
    if (st != DT_OK) return st;
    if (d.index < 0 || d.index >= n)
        return dt_error_set(DT_ERR_RANGE, "device %s: %s: %d CUDA device%s visible", nm, op, n,
                            n == 1 ? "" : "s");
    *be = cu;
    return DT_OK;
}

int dt_device_cuda_built(void) {
    return dt_device_cuda_backend() != NULL;
}

dt_status dt_device_parse(const char *spec, dt_device *out, int *is_auto) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "device parse: NULL output");
    out->kind = DT_DEVICE_CPU;
    out->index = 0;
    if (is_auto) *is_auto = 0;
    if (!spec) return dt_error_set(DT_ERR_INVALID, "device parse: NULL spec");
    if (!strcmp(spec, "auto")) {
        if (is_auto) *is_auto = 1;
        return DT_OK;
    }
    if (!strcmp(spec, "cpu")) return DT_OK;
    if (!strcmp(spec, "cuda")) {
        out->kind = DT_DEVICE_CUDA;
        out->index = -1;
        return DT_OK;
    }
    if (!strncmp(spec, "cuda:", 5) && spec[5] >= '0' && spec[5] <= '9') {
        char *end;
        errno = 0;
        long v = strtol(spec + 5, &end, 10);
        if (*end == '\0' && errno == 0 && v <= 1024) {
            out->kind = DT_DEVICE_CUDA;
            out->index = (int)v;
            return DT_OK;
        }
    }
    return dt_error_set(DT_ERR_INVALID,
                        "device '%s': expected auto, cpu, cuda or cuda:N (N a GPU index)", spec);
}

dt_status dt_device_resolve(const char *spec, const char *what, int local_rank, dt_device *out) {
    if (!what) what = "device";
    if (!out) return dt_error_set(DT_ERR_INVALID, "%s: NULL output", what);
    int is_auto = 0;
    dt_device d;
    if (dt_device_parse(spec, &d, &is_auto) != DT_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        return dt_error_set(DT_ERR_INVALID, "%s: %s", what, msg);
    }
    if (local_rank < 0) local_rank = 0;
    *out = d;
    if (d.kind == DT_DEVICE_CPU && !is_auto) return DT_OK;
    int n = 0;
    dt_status st = dt_device_count(DT_DEVICE_CUDA, &n);
    if (st != DT_OK) return st;
    if (is_auto) {
        if (n == 0) return DT_OK; /* cpu */
        d.kind = DT_DEVICE_CUDA;
        d.index = -1;
    }
    if (!dt_device_cuda_built())
        return dt_error_set(DT_ERR_STATE,
                            "%s: %s: this dtrain was built without CUDA "
                            "(-DDT_CUDA=OFF)",
                            what, spec);
    if (d.index < 0) d.index = local_rank;
    char nm[DT_DEVICE_NAME_MAX];
    dt_device_name(d, nm, sizeof nm);
    if (d.index >= n) {
        if (n == 0) return dt_error_set(DT_ERR_RANGE, "%s: %s: no CUDA device visible", what, nm);
        return dt_error_set(DT_ERR_RANGE, "%s: %s%s: %d CUDA device%s visible", what, nm,
                            !strcmp(spec, nm) ? "" : " (the local rank's GPU)", n,
                            n == 1 ? "" : "s");
    }
    *out = d;
    return DT_OK;
}

int dt_device_local_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end == '\0' && r >= 0 && r < 1 << 20) return (int)r;
    }
    return 0;
}

/* The backend or the status of its error (backend_of has set the message). */
#define BACKEND_OR_RETURN(be, d, op)                                                               \
    const dt_device_backend *be;                                                                   \
    do {                                                                                           \
        dt_status be_st_ = backend_of(d, op, &be);                                                 \
        if (be_st_ != DT_OK) return be_st_;                                                        \
    } while (0)

dt_status dt_device_query(dt_device d, dt_device_info *info) {
    if (!info) return dt_error_set(DT_ERR_INVALID, "device query: NULL output");
    memset(info, 0, sizeof *info);
    BACKEND_OR_RETURN(be, d, "query");
    return be->query(d.index, info);
}

dt_status dt_device_use(dt_device d) {
    BACKEND_OR_RETURN(be, d, "use");
    return be->use(d.index);
}

dt_status dt_device_alloc(dt_device d, size_t bytes, void **ptr) {
    if (!ptr) return dt_error_set(DT_ERR_INVALID, "device alloc: NULL output");
    *ptr = NULL;
    BACKEND_OR_RETURN(be, d, "alloc");
    return bytes ? be->alloc(d.index, bytes, ptr) : DT_OK;
}

void dt_device_free(dt_device d, void *ptr) {
    if (!ptr) return;
    const dt_device_backend *be;
    if (backend_of(d, "free", &be) == DT_OK) be->free(d.index, ptr);
}

dt_status dt_device_memset(dt_device d, void *ptr, int value, size_t bytes) {
    BACKEND_OR_RETURN(be, d, "memset");
    if (!bytes) return DT_OK;
    if (!ptr)
        return dt_error_set(DT_ERR_INVALID, "device memset: NULL pointer for %zu bytes", bytes);
    return be->memset(d.index, ptr, value, bytes);
}

dt_status dt_host_alloc_pinned(dt_device d, size_t bytes, void **ptr) {
    if (!ptr) return dt_error_set(DT_ERR_INVALID, "pinned alloc: NULL output");
    *ptr = NULL;
    BACKEND_OR_RETURN(be, d, "pinned alloc");
    return bytes ? be->host_alloc(d.index, bytes, ptr) : DT_OK;
}

void dt_host_free_pinned(dt_device d, void *ptr) {
    if (!ptr) return;
    const dt_device_backend *be;
    if (backend_of(d, "pinned free", &be) == DT_OK) be->host_free(d.index, ptr);
}

static dt_status copy_check(dt_device d, void *dst, const void *src, size_t bytes, dt_copy_kind k,
                            const char *op) {
    char nm[DT_DEVICE_NAME_MAX];
    dt_device_name(d, nm, sizeof nm);
    if (k != DT_COPY_H2D && k != DT_COPY_D2H && k != DT_COPY_D2D)
        return dt_error_set(DT_ERR_INVALID, "device %s: %s: unknown copy kind %d", nm, op, (int)k);
    if (bytes && (!dst || !src))
        return dt_error_set(DT_ERR_INVALID, "device %s: %s of %zu bytes: NULL %s", nm, op, bytes,
                            !dst ? "destination" : "source");
    return DT_OK;
}

dt_status dt_device_copy(dt_device d, void *dst, const void *src, size_t bytes, dt_copy_kind k) {
    BACKEND_OR_RETURN(be, d, "copy");
    dt_status st = copy_check(d, dst, src, bytes, k, "copy");
    if (st != DT_OK || !bytes) return st;
    return be->copy(d.index, dst, src, bytes, k, NULL);
}

/* Checks that s exists and belongs to d. */
static dt_status same_device(dt_device d, const dt_device *other, const char *op,
                             const char *what) {
    if (d.kind == other->kind && d.index == other->index) return DT_OK;
    char a[DT_DEVICE_NAME_MAX], b[DT_DEVICE_NAME_MAX];
    return dt_error_set(DT_ERR_INVALID, "device %s: %s: the %s belongs to %s",
                        dt_device_name(d, a, sizeof a), op, what,
                        dt_device_name(*other, b, sizeof b));
}

dt_status dt_device_copy_async(dt_device d, void *dst, const void *src, size_t bytes,
                               dt_copy_kind k, dt_stream *s) {
    BACKEND_OR_RETURN(be, d, "async copy");
    if (!s) return dt_error_set(DT_ERR_INVALID, "device async copy: NULL stream");
    dt_status st = same_device(d, &s->dev, "async copy", "stream");
    if (st == DT_OK) st = copy_check(d, dst, src, bytes, k, "async copy");
    if (st != DT_OK || !bytes) return st;
    return be->copy(d.index, dst, src, bytes, k, s->h);
}

dt_status dt_stream_create(dt_device d, dt_stream **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "stream create: NULL output");
    *out = NULL;
    BACKEND_OR_RETURN(be, d, "stream create");
    dt_stream *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "stream create: no memory");
    s->dev = d;
    dt_status st = be->stream_create(d.index, &s->h);
    if (st != DT_OK) {
        free(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_stream_destroy(dt_stream *s) {
    if (!s) return;
    const dt_device_backend *be;
    if (backend_of(s->dev, "stream destroy", &be) == DT_OK) be->stream_destroy(s->dev.index, s->h);
    free(s);
}

dt_status dt_stream_sync(dt_stream *s) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "stream sync: NULL stream");
    BACKEND_OR_RETURN(be, s->dev, "stream sync");
    return be->stream_sync(s->dev.index, s->h);
}

dt_device dt_stream_device(const dt_stream *s) {
    dt_device cpu = {DT_DEVICE_CPU, 0};
    return s ? s->dev : cpu;
}

void *dt_stream_handle(const dt_stream *s) {
    return s ? s->h : NULL;
}

dt_status dt_event_create(dt_device d, dt_event **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "event create: NULL output");
    *out = NULL;
    BACKEND_OR_RETURN(be, d, "event create");
    dt_event *e = calloc(1, sizeof *e);
    if (!e) return dt_error_set(DT_ERR_NOMEM, "event create: no memory");
    e->dev = d;
    dt_status st = be->event_create(d.index, &e->h);
    if (st != DT_OK) {
        free(e);
        return st;
    }
    *out = e;
    return DT_OK;
}

void dt_event_destroy(dt_event *e) {
    if (!e) return;
    const dt_device_backend *be;
    if (backend_of(e->dev, "event destroy", &be) == DT_OK) be->event_destroy(e->dev.index, e->h);
    free(e);
}

dt_status dt_event_record(dt_event *e, dt_stream *s) {
    if (!e || !s)
        return dt_error_set(DT_ERR_INVALID, "event record: NULL %s", !e ? "event" : "stream");
    BACKEND_OR_RETURN(be, e->dev, "event record");
    dt_status st = same_device(e->dev, &s->dev, "event record", "stream");
    if (st == DT_OK) st = be->event_record(e->dev.index, e->h, s->h);
    if (st == DT_OK) e->recorded = 1;
    return st;
}

/* *be = the backend of a recorded event; `op` names the call. */
static dt_status recorded(dt_event *e, const char *op, const dt_device_backend **be) {
    *be = NULL;
    if (!e) return dt_error_set(DT_ERR_INVALID, "%s: NULL event", op);
    dt_status st = backend_of(e->dev, op, be);
    if (st != DT_OK) return st;
    if (!e->recorded) {
        char nm[DT_DEVICE_NAME_MAX];
        *be = NULL;
        return dt_error_set(DT_ERR_STATE, "device %s: %s: the event was never recorded",
                            dt_device_name(e->dev, nm, sizeof nm), op);
    }
    return DT_OK;
}

dt_status dt_stream_wait_event(dt_stream *s, dt_event *e) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "stream wait: NULL stream");
    const dt_device_backend *be;
    dt_status st = recorded(e, "stream wait", &be);
    if (st != DT_OK) return st;
    st = same_device(s->dev, &e->dev, "stream wait", "event");
    return st == DT_OK ? be->stream_wait(s->dev.index, s->h, e->h) : st;
}

dt_status dt_event_sync(dt_event *e) {
    const dt_device_backend *be;
    dt_status st = recorded(e, "event sync", &be);
    return st == DT_OK ? be->event_sync(e->dev.index, e->h) : st;
}

dt_status dt_event_query(dt_event *e, int *done) {
    if (!done) return dt_error_set(DT_ERR_INVALID, "event query: NULL output");
    *done = 0;
    const dt_device_backend *be;
    dt_status st = recorded(e, "event query", &be);
    return st == DT_OK ? be->event_query(e->dev.index, e->h, done) : st;
}

dt_status dt_event_elapsed_ms(dt_event *a, dt_event *b, float *ms) {
    if (!ms) return dt_error_set(DT_ERR_INVALID, "event elapsed: NULL output");
    *ms = 0;
    const dt_device_backend *be, *be_b;
    dt_status st = recorded(a, "event elapsed", &be);
    if (st == DT_OK) st = recorded(b, "event elapsed", &be_b);
    if (st != DT_OK) return st;
    st = same_device(a->dev, &b->dev, "event elapsed", "second event");
    return st == DT_OK ? be->event_elapsed(a->dev.index, a->h, b->h, ms) : st;
}

dt_status dt_stream_capture_begin(dt_stream *s) {
    if (!s) return dt_error_set(DT_ERR_INVALID, "stream capture begin: NULL stream");
    BACKEND_OR_RETURN(be, s->dev, "stream capture begin");
    return be->capture_begin(s->dev.index, s->h);
}

dt_status dt_stream_capture_end(dt_stream *s, dt_stream_graph **out) {
    if (!s || !out)
        return dt_error_set(DT_ERR_INVALID, "stream capture end: NULL %s",
                            !s ? "stream" : "output");
    *out = NULL;
    BACKEND_OR_RETURN(be, s->dev, "stream capture end");
    dt_stream_graph *g = calloc(1, sizeof *g);
    void *h = NULL;
    /* the capture is ended even when no memory is left for the handle */
    dt_status st = be->capture_end(s->dev.index, s->h, &h);
    if (st == DT_OK && !g) {
        be->graph_destroy(s->dev.index, h);
        st = dt_error_set(DT_ERR_NOMEM, "stream capture end: no memory");
    }
    if (st != DT_OK) {
        free(g);
        return st;
    }
    g->dev = s->dev, g->h = h;
    *out = g;
    return DT_OK;
}

dt_status dt_stream_graph_launch(dt_stream_graph *g, dt_stream *s) {
    if (!g || !s)
        return dt_error_set(DT_ERR_INVALID, "stream graph launch: NULL %s",
                            !g ? "graph" : "stream");
    BACKEND_OR_RETURN(be, g->dev, "stream graph launch");
    dt_status st = same_device(g->dev, &s->dev, "stream graph launch", "stream");
    return st == DT_OK ? be->graph_launch(g->dev.index, g->h, s->h) : st;
}

void dt_stream_graph_destroy(dt_stream_graph *g) {
    if (!g) return;
    const dt_device_backend *be;
    if (backend_of(g->dev, "stream graph destroy", &be) == DT_OK)
        be->graph_destroy(g->dev.index, g->h);
    free(g);
}
