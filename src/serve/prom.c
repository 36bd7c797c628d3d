/* GET /metrics: the Prometheus text exposition format 0.0.4, computed from the experiment store
 * at each scrape (so any run is covered, live or finished) plus the launcher's counters.
 *
 * Every series has the labels experiment and run. What comes from where:
 *   dtrain_step, dtrain_loss, dtrain_learning_rate, ...   the newest value of each logged metric
 *       (latest attempt, highest step), all read in one statement: one consistent snapshot;
 *       dtrain_step is the newest loss's step (another key may lag it by one log interval
 *       when the store's batched write split a step's values)
 *   dtrain_step_seconds (histogram)   the time between consecutive logged steps of an attempt
 *       divided by the steps between them (with train.log_every=1: each step's wall time)
 *   dtrain_checkpoint_*               the newest committed checkpoint: its age, its size (local
 *       checkpoints: the files in its folder) and its duration (commit time minus the time its
 *       step was logged; only when that step has a loss row)
 *   dtrain_restarts_total             the launcher's count (dtrain launch), else attempts - 1
 *   dtrain_worker_resident_bytes      the launcher's workers on this host (/proc)
 *   dtrain_batch_part, dtrain_compute_rate   each worker's part of the global batch and its
 *       measured compute rate (logged as batch_part.R, compute_rate.R), with a rank label
 *   dtrain_worker_device_info   1 per worker, its device in a label (device="cpu" or "cuda:K":
 *       logged as device.R, -1 or K)
 * A family is only written when some run has a value for it. */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "serve/serve_impl.h"

enum { MAX_RUNS = 20, MAX_WORKERS = 256, MAX_RANKS = 256 };

/* Per-worker keys "KEY.R" (src/train/shares.c) and the gauges with a rank label they become. */
static const struct {
    const char *prefix, *name, *help;
    int device; /* the value names a device: a device label and the value 1 (an info metric) */
} RANKED[] = {
    {"batch_part.", "dtrain_batch_part",
     "Samples of each global batch this worker takes (uneven dist.batch_shares, auto included).",
     0},
    {"compute_rate.", "dtrain_compute_rate",
     "Samples per second of forward and backward compute this worker measured "
     "(dist.batch_shares=auto).",
     0},
    {"gpu_mem.", "dtrain_gpu_memory_bytes",
     "Memory in use on this worker's GPU at the newest log line (total less free: dtrain's "
     "buffers, the CUDA context, cuBLASLt's and NCCL's; train.device=cuda).",
     0},
    {"gpu_mem_peak.", "dtrain_gpu_memory_peak_bytes",
     "The highest memory in use on this worker's GPU over the run's log lines so far.", 0},
    {"device.", "dtrain_worker_device_info",
     "1 per worker; its device (train.device as resolved: cpu or cuda:K) in the device label.", 1},
};
enum { N_RANKED = sizeof RANKED / sizeof RANKED[0] };

/* Logged keys (src/train/track_glue.c) and the gauges they become. */
static const struct {
    const char *key, *name, *help;
} GAUGES[] = {
    {"loss", "dtrain_loss", "Training loss at the newest logged step (mean over workers)."},
    {"lr", "dtrain_learning_rate", "Learning rate at the newest logged step."},
    {"grad_norm", "dtrain_grad_norm", "Global gradient norm at the newest logged step."},
    {"samples_per_s", "dtrain_samples_per_second",
     "Throughput over the last log interval, all workers (samples/s)."},
    {"tokens_per_s", "dtrain_tokens_per_second",
     "Throughput over the last log interval, all workers (tokens/s; language models)."},
    {"data_wait", "dtrain_data_wait_ratio",
     "Share of step time spent waiting for data over the last log interval."},
    {"comm_wait", "dtrain_comm_wait_ratio",
     "Share of step time spent waiting for the gradient all-reduce over the last log interval."},
    {"data_wait_s", "dtrain_data_wait_seconds",
     "Seconds the steps of the run's current attempt have waited for data so far."},
    {"comm_wait_s", "dtrain_allreduce_wait_seconds",
     "Seconds the steps of the run's current attempt have waited for the gradient all-reduce "
     "(and ZeRO-3 parameter gathers) so far."},
    {"comm_bytes", "dtrain_allreduce_bytes",
     "Gradient bytes each worker reduced in the newest logged step (less than the model's "
     "gradients when embedding tables sent only the rows the batch looked up)."},
    {"comm_cpu", "dtrain_comm_cpu_ratio",
     "CPU time of the communication thread (all-reduces, ZeRO gathers) as a share of step time "
     "over the last log interval: compute it took from the worker where they share cores."},
    {"comm_cpu_s", "dtrain_comm_cpu_seconds",
     "CPU seconds the communication thread has used in the run's current attempt so far."},
    {"eval_loss", "dtrain_eval_loss", "Loss of the newest evaluation."},
    {"eval_accuracy", "dtrain_eval_accuracy", "Accuracy of the newest evaluation."},
    {"eval_perplexity", "dtrain_eval_perplexity", "Perplexity of the newest evaluation."},
};
enum { N_GAUGES = sizeof GAUGES / sizeof GAUGES[0] };

static const double BUCKETS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
enum { N_BUCKETS = sizeof BUCKETS / sizeof BUCKETS[0] };

typedef struct loss_pt {
    int64_t step;
    double wall;
    int attempt;
} loss_pt;

typedef struct run_data {
    dt_track_run r;
    double val[N_GAUGES];
    int have[N_GAUGES];
    int64_t step; /* the newest loss's step (else the newest step); -1 if none */
    int loss_step;
    /* step time histogram */
    uint64_t bucket[N_BUCKETS], count;
    double sum;
    loss_pt *pts;
    size_t n_pts, cap_pts;
    /* checkpoints */
    int n_ckpt;
    int64_t ckpt_step;
    int ckpt_attempt;
    double ckpt_created;
    char ckpt_uri[4096];
    double ckpt_bytes, ckpt_seconds; /* < 0: unknown */
    double ranked[N_RANKED][MAX_RANKS];
    int n_ranked[N_RANKED]; /* 1 + the highest rank with a value; NAN marks the missing */
} run_data;

static int latest_cb(void *ud, const dt_track_metric_row *m) {
    run_data *d = ud;
    /* the loss's step when there is one: the store writes in batches that may split one
     * step's values, and the step is read beside the loss */
    if (!strcmp(m->key, "loss"))
        d->step = m->step, d->loss_step = 1;
    else if (m->step > d->step && !d->loss_step)
        d->step = m->step;
    for (int i = 0; i < N_GAUGES; i++)
        if (!strcmp(GAUGES[i].key, m->key)) d->val[i] = m->value, d->have[i] = 1;
    for (int i = 0; i < N_RANKED; i++) {
        size_t l = strlen(RANKED[i].prefix);
        char *end;
        if (strncmp(m->key, RANKED[i].prefix, l)) continue;
        long r = strtol(m->key + l, &end, 10);
        if (end == m->key + l || *end || r < 0 || r >= MAX_RANKS) continue;
        for (int k = d->n_ranked[i]; k < r; k++) d->ranked[i][k] = NAN;
        if (r >= d->n_ranked[i]) d->n_ranked[i] = (int)r + 1;
        d->ranked[i][r] = m->value;
    }
    return 0;
}

static int loss_cb(void *ud, const dt_track_metric_row *m) {
    run_data *d = ud;
    if (d->n_pts == d->cap_pts) {
        size_t cap = d->cap_pts ? 2 * d->cap_pts : 1024;
        loss_pt *p = realloc(d->pts, cap * sizeof *p);
        if (!p) return 1;
        d->pts = p, d->cap_pts = cap;
    }
    d->pts[d->n_pts++] = (loss_pt){m->step, m->wall, m->attempt};
    return 0;
}

static int ckpt_cb(void *ud, const dt_track_artifact_row *a) {
    run_data *d = ud;
    if (strcmp(a->kind, "checkpoint") || a->removed > 0) return 0;
    d->n_ckpt++;
    /* rows come in id order: the last is the newest commit */
    d->ckpt_step = a->step, d->ckpt_attempt = a->attempt, d->ckpt_created = a->created;
    snprintf(d->ckpt_uri, sizeof d->ckpt_uri, "%s", a->uri);
    return 0;
}

/* The size of a local checkpoint folder (its files); -1 for remote or missing ones. */
static double dir_bytes(const char *uri) {
    if (!strncmp(uri, "file://", 7)) uri += 7;
    if (strstr(uri, "://")) return -1;
    DIR *dir = opendir(uri);
    if (!dir) return -1;
    double total = 0;
    struct dirent *e;
    char p[8192];
    while ((e = readdir(dir))) {
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", uri, e->d_name);
        if (e->d_name[0] != '.' && stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            total += (double)sb.st_size;
    }
    closedir(dir);
    return total;
}

static dt_status collect(dt_track *st, run_data *d) {
    d->step = -1, d->ckpt_bytes = d->ckpt_seconds = -1;
    dt_status rc = dt_track_metrics_latest(st, d->r.id, latest_cb, d);
    if (rc == DT_OK) rc = dt_track_metrics(st, d->r.id, "loss", loss_cb, d);
    if (rc == DT_OK) rc = dt_track_artifacts(st, d->r.id, ckpt_cb, d);
    if (rc != DT_OK) return rc;
    /* rows are in (attempt, step) order: consecutive rows of one attempt give step times */
    for (size_t i = 1; i < d->n_pts; i++) {
        const loss_pt *a = &d->pts[i - 1], *b = &d->pts[i];
        if (a->attempt != b->attempt || b->step <= a->step) continue;
        double t = (b->wall - a->wall) / (double)(b->step - a->step);
        if (!(t >= 0) || !isfinite(t)) continue;
        d->count++, d->sum += t;
        for (int k = 0; k < N_BUCKETS; k++)
            if (t <= BUCKETS[k]) d->bucket[k]++;
    }
    if (d->n_ckpt) {
        d->ckpt_bytes = dir_bytes(d->ckpt_uri);
        for (size_t i = 0; i < d->n_pts; i++)
            if (d->pts[i].step == d->ckpt_step && d->pts[i].attempt == d->ckpt_attempt &&
                d->ckpt_created >= d->pts[i].wall)
                d->ckpt_seconds = d->ckpt_created - d->pts[i].wall;
    }
    return DT_OK;
}

/* A label value: backslash, double quote and newline escaped (the format's rules). */
static void label(sv_buf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\')
            dt_sv_puts(b, "\\\\");
        else if (*v == '"')
            dt_sv_puts(b, "\\\"");
        else if (*v == '\n')
            dt_sv_puts(b, "\\n");
        else
            dt_sv_printf(b, "%c", *v);
    }
}

static void labels(sv_buf *b, const dt_track_run *r) {
    dt_sv_puts(b, "experiment=\"");
    label(b, r->experiment);
    dt_sv_puts(b, "\",run=\"");
    label(b, r->name);
    dt_sv_puts(b, "\"");
}

static void value(sv_buf *b, double v) {
    if (isnan(v))
        dt_sv_puts(b, " NaN\n");
    else if (isinf(v))
        dt_sv_puts(b, v > 0 ? " +Inf\n" : " -Inf\n");
    else
        dt_sv_printf(b, " %.17g\n", v);
}

static void family(sv_buf *b, const char *name, const char *type, const char *help) {
    dt_sv_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(sv_buf *b, const char *name, const dt_track_run *r, double v) {
    dt_sv_printf(b, "%s{", name);
    labels(b, &r[0]);
    dt_sv_puts(b, "}");
    value(b, v);
}

typedef struct run_list {
    run_data *d;
    int n;
} run_list;

static int run_cb(void *ud, const dt_track_run *r) {
    run_list *l = ud;
    l->d[l->n++].r = *r;
    return l->n == MAX_RUNS;
}

/* The launcher's workers: mpirun's children (and theirs) on this host, their rank from the
 * environment Open MPI gives them, their resident memory from /proc. */
typedef struct worker {
    int rank;
    double rss;
} worker;

static long read_ppid(long pid) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%ld/status", pid);
    FILE *f = fopen(p, "r");
    long ppid = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "PPid: %ld", &ppid) == 1) break;
    if (f) fclose(f);
    return ppid;
}

static int read_worker(long pid, worker *w) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%ld/status", pid);
    FILE *f = fopen(p, "r");
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) return 0;
    w->rss = (double)kb * 1024.0, w->rank = -1;
    snprintf(p, sizeof p, "/proc/%ld/environ", pid);
    f = fopen(p, "r");
    if (!f) return 0;
    enum { ENV_MAX = 1 << 16 };
    char *env = malloc(ENV_MAX);
    size_t n = env ? fread(env, 1, ENV_MAX - 1, f) : 0;
    fclose(f);
    if (!env) return 0;
    env[n] = 0;
    for (size_t i = 0; i < n; i += strlen(env + i) + 1)
        if (!strncmp(env + i, "OMPI_COMM_WORLD_RANK=", 21) || !strncmp(env + i, "PMIX_RANK=", 10))
            w->rank = atoi(strchr(env + i, '=') + 1);
    free(env);
    return w->rank >= 0;
}

static int find_workers(long mpirun, worker *out, int max) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        long pp = read_ppid(pid);
        if (pp != mpirun && (pp <= 1 || read_ppid(pp) != mpirun)) continue;
        if (read_worker(pid, &out[n])) n++;
    }
    closedir(d);
    return n;
}

void dt_sv_prometheus(dt_serve *s, sv_buf *b) {
    run_list l = {calloc(MAX_RUNS, sizeof(run_data)), 0};
    if (!l.d) {
        b->failed = 1;
        return;
    }
    dt_track *st = dt_sv_store(s);
    int up = st != NULL;
    if (st) {
        dt_status rc;
        if (s->run[0]) {
            char ref[600];
            snprintf(ref, sizeof ref, "%s/%s", s->experiment, s->run);
            rc = dt_track_run_find(st, ref, &l.d[0].r);
            if (rc == DT_OK) l.n = 1;
            if (rc == DT_ERR_NOTFOUND) rc = DT_OK; /* not begun yet */
        } else {
            rc = dt_track_runs(st, NULL, NULL, run_cb, &l);
        }
        for (int i = 0; rc == DT_OK && i < l.n; i++) rc = collect(st, &l.d[i]);
        if (rc != DT_OK) {
            up = 0, l.n = 0;
            dt_sv_store_reset(s); /* reopened by the next scrape */
        }
    }
    family(b, "dtrain_store_up", "gauge",
           "1 if the experiment store could be read for this scrape, else 0.");
    dt_sv_printf(b, "dtrain_store_up %d\n", up);
    double now = dt_track_wall();
    if (l.n) {
        family(b, "dtrain_run_info", "gauge", "1 per run, its status as a label.");
        for (int i = 0; i < l.n; i++) {
            dt_sv_puts(b, "dtrain_run_info{");
            labels(b, &l.d[i].r);
            dt_sv_puts(b, ",status=\"");
            label(b, l.d[i].r.lost ? "lost" : l.d[i].r.status);
            dt_sv_puts(b, "\"} 1\n");
        }
        family(b, "dtrain_run_running", "gauge", "1 while the run is training, else 0.");
        for (int i = 0; i < l.n; i++)
            sample(b, "dtrain_run_running", &l.d[i].r,
                   !strcmp(l.d[i].r.status, "running") && !l.d[i].r.lost);
        family(b, "dtrain_attempts", "gauge", "Attempts of the run (a resume is a new attempt).");
        for (int i = 0; i < l.n; i++) sample(b, "dtrain_attempts", &l.d[i].r, l.d[i].r.attempts);
    }
    int any = 0;
    for (int i = 0; i < l.n; i++) any |= l.d[i].step >= 0;
    if (any) {
        family(b, "dtrain_step", "gauge", "Newest logged optimizer step.");
        for (int i = 0; i < l.n; i++)
            if (l.d[i].step >= 0) sample(b, "dtrain_step", &l.d[i].r, (double)l.d[i].step);
    }
    for (int g = 0; g < N_GAUGES; g++) {
        any = 0;
        for (int i = 0; i < l.n; i++) any |= l.d[i].have[g];
        if (!any) continue;
        family(b, GAUGES[g].name, "gauge", GAUGES[g].help);
        for (int i = 0; i < l.n; i++)
            if (l.d[i].have[g]) sample(b, GAUGES[g].name, &l.d[i].r, l.d[i].val[g]);
    }
    for (int g = 0; g < N_RANKED; g++) {
        any = 0;
        for (int i = 0; i < l.n; i++) any |= l.d[i].n_ranked[g] > 0;
        if (!any) continue;
        family(b, RANKED[g].name, "gauge", RANKED[g].help);
        for (int i = 0; i < l.n; i++)
            for (int r = 0; r < l.d[i].n_ranked[g]; r++) {
                if (isnan(l.d[i].ranked[g][r])) continue;
                dt_sv_printf(b, "%s{", RANKED[g].name);
                labels(b, &l.d[i].r);
                double v = l.d[i].ranked[g][r];
                if (RANKED[g].device && v < 0) {
                    dt_sv_printf(b, ",rank=\"%d\",device=\"cpu\"}", r);
                    v = 1;
                } else if (RANKED[g].device) {
                    dt_sv_printf(b, ",rank=\"%d\",device=\"cuda:%d\"}", r, (int)v);
                    v = 1;
                } else {
                    dt_sv_printf(b, ",rank=\"%d\"}", r);
                }
                value(b, v);
            }
    }
    any = 0;
    for (int i = 0; i < l.n; i++) any |= l.d[i].count > 0;
    if (any) {
        family(b, "dtrain_step_seconds", "histogram",
               "Seconds per optimizer step, between consecutive logged steps.");
        for (int i = 0; i < l.n; i++) {
            const run_data *d = &l.d[i];
            if (!d->count) continue;
            for (int k = 0; k <= N_BUCKETS; k++) {
                dt_sv_puts(b, "dtrain_step_seconds_bucket{");
                labels(b, &d->r);
                if (k < N_BUCKETS)
                    dt_sv_printf(b, ",le=\"%g\"} %" PRIu64 "\n", BUCKETS[k], d->bucket[k]);
                else
                    dt_sv_printf(b, ",le=\"+Inf\"} %" PRIu64 "\n", d->count);
            }
            sample(b, "dtrain_step_seconds_sum", &d->r, d->sum);
            sample(b, "dtrain_step_seconds_count", &d->r, (double)d->count);
        }
    }
    any = 0;
    for (int i = 0; i < l.n; i++) any |= l.d[i].n_ckpt > 0;
    if (any) {
        family(b, "dtrain_checkpoints", "gauge",
               "Committed checkpoints of the run that retention has not removed.");
        for (int i = 0; i < l.n; i++)
            if (l.d[i].n_ckpt) sample(b, "dtrain_checkpoints", &l.d[i].r, l.d[i].n_ckpt);
        family(b, "dtrain_last_checkpoint_step", "gauge", "Step of the newest checkpoint.");
        for (int i = 0; i < l.n; i++)
            if (l.d[i].n_ckpt)
                sample(b, "dtrain_last_checkpoint_step", &l.d[i].r, (double)l.d[i].ckpt_step);
        family(b, "dtrain_last_checkpoint_age_seconds", "gauge",
               "Seconds since the newest checkpoint was committed.");
        for (int i = 0; i < l.n; i++)
            if (l.d[i].n_ckpt)
                sample(b, "dtrain_last_checkpoint_age_seconds", &l.d[i].r,
                       now - l.d[i].ckpt_created);
        family(b, "dtrain_checkpoint_bytes", "gauge",
               "Size of the newest checkpoint (local checkpoints only).");
        for (int i = 0; i < l.n; i++)
            if (l.d[i].n_ckpt && l.d[i].ckpt_bytes >= 0)
                sample(b, "dtrain_checkpoint_bytes", &l.d[i].r, l.d[i].ckpt_bytes);
        family(b, "dtrain_checkpoint_seconds", "gauge",
               "Seconds from the newest checkpoint's step being logged to its commit.");
        for (int i = 0; i < l.n; i++)
            if (l.d[i].n_ckpt && l.d[i].ckpt_seconds >= 0)
                sample(b, "dtrain_checkpoint_seconds", &l.d[i].r, l.d[i].ckpt_seconds);
    }
    pthread_mutex_lock(&s->mu);
    int have_job = s->have_job, restarts = s->restarts;
    long mpirun = (long)s->mpirun_pid;
    pthread_mutex_unlock(&s->mu);
    if (l.n) {
        family(b, "dtrain_restarts_total", "counter",
               "Restarts of the job after a failure (the launcher's count, else attempts - 1).");
        for (int i = 0; i < l.n; i++)
            sample(b, "dtrain_restarts_total", &l.d[i].r,
                   have_job && s->run[0] ? restarts
                                         : (l.d[i].r.attempts > 0 ? l.d[i].r.attempts - 1 : 0));
    }
    if (have_job && mpirun > 0 && l.n && s->run[0]) {
        worker *w = calloc(MAX_WORKERS, sizeof *w);
        int nw = w ? find_workers(mpirun, w, MAX_WORKERS) : 0;
        if (nw) {
            family(b, "dtrain_worker_resident_bytes", "gauge",
                   "Resident memory of each worker on the launcher's host.");
            for (int k = 0; k < nw; k++) {
                dt_sv_puts(b, "dtrain_worker_resident_bytes{");
                labels(b, &l.d[0].r);
                dt_sv_printf(b, ",rank=\"%d\"}", w[k].rank);
                value(b, w[k].rss);
            }
        }
        free(w);
    }
    for (int i = 0; i < MAX_RUNS; i++) free(l.d[i].pts);
    free(l.d);
}
