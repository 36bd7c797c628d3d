/* The trainer's side of the experiment store (include/dtrain/track.h): rank 0 opens
 * tracking.uri (default <output.dir>/dtrain.db), begins the run (or a new attempt of it) with
 * the resolved config and lineage, logs train metrics at each log line and eval metrics at each
 * evaluation, records committed checkpoints and the exported model, and ends the run.
 *
 * With tracking.uri an MLflow server (http:// or https://), the SQLite store stays the local
 * record at <output.dir>/dtrain.db and the same run is sent to the server as well
 * (include/dtrain/mlflow.h: a background sender, spooled to <run dir>/mlflow-spool.jsonl when
 * the server is down): the resolved config as params, the lineage as dtrain.* tags, every
 * metric, the attempt number (tag and metric), the last checkpoint and the exported model as
 * tags, the final status, and at close the run's artefacts (src/train/track_artifacts.c).
 *
 * Tracking never stops training: the first error of any call is one warning line on stderr and
 * tracking is off for the rest of the run (the flag is atomic: the checkpoint writer thread
 * records artifacts). Metrics are buffered by the store, so a log line never waits on disk. */
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/file.h"
#include <xxhash.h>
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "dtrain/mlflow.h"
#include "dtrain/track.h"
#include "train/train_impl.h"

#ifndef DT_GIT_REV
#define DT_GIT_REV "unknown"
#endif

enum { HOST_CHARS = 64, MAX_HASH_GIB = 4, MAX_FILES = 64 };

typedef struct dt_train_track dt_train_track;
struct dt_train_track {
    dt_track *store;
    dt_mlflow *ml; /* NULL unless tracking.uri names an MLflow server */
    int64_t run;
    atomic_int off; /* after the first error */
    int ended;
};

static void warn_off(dt_trainer *t, const char *what) {
    dt_train_track *k = t->tk;
    if (atomic_exchange(&k->off, 1)) return;
    fprintf(stderr,
            "warning: tracking: %s: %s; experiment tracking is off for the rest of this run "
            "(training goes on)\n",
            what, dt_last_error());
}

static int on(const dt_trainer *t) {
    return t->tk && !atomic_load(&t->tk->off);
}

/* Every rank's host name (an all-reduce of character codes, once), as "host:ranks,...". */
static void gather_hosts(dt_trainer *t, char *out, size_t n) {
    char me[HOST_CHARS + 1] = "";
    gethostname(me, HOST_CHARS);
    snprintf(out, n, "%s:1", me);
    if (t->world < 2 || t->world > 4096) return;
    double *buf = calloc((size_t)t->world * HOST_CHARS, sizeof *buf);
    if (!buf) return;
    for (int i = 0; me[i]; i++) buf[(size_t)t->rank * HOST_CHARS + i] = (unsigned char)me[i];
    if (dt_comm_allreduce_f64(t->comm, buf, (size_t)t->world * HOST_CHARS) == DT_OK &&
        t->rank == 0) {
        out[0] = '\0';
        for (int r = 0; r < t->world; r++) {
            char h[HOST_CHARS + 1] = "";
            for (int i = 0; i < HOST_CHARS; i++) h[i] = (char)buf[(size_t)r * HOST_CHARS + i];
            int seen = 0, count = 0;
            for (int q = 0; q < t->world; q++) {
                int same = 1;
                for (int i = 0; i < HOST_CHARS && same; i++)
                    same = buf[(size_t)q * HOST_CHARS + i] == (double)(unsigned char)h[i];
                if (same && q < r) seen = 1;
                count += same;
            }
            size_t l = strlen(out);
            if (!seen) snprintf(out + l, n - l, "%s%s:%d", l ? "," : "", h, count);
        }
    }
    free(buf);
}

/* xxh3-64 of a pretrained model's config.json and weight files (the base of a finetune). Files
 * over MAX_HASH_GIB in all are not read again: the hash is left out. */
static int by_name(const void *a, const void *b) {
    return strcmp(a, b);
}

static int hash_model(const char *path, char *hex) {
    char(*files)[PATH_MAX] = malloc(MAX_FILES * sizeof *files);
    XXH3_state_t *h = XXH3_createState();
    char *buf = malloc(1 << 20);
    int ok = files && h && buf && XXH3_64bits_reset(h) == XXH_OK, nf = 0;
    DIR *d = ok ? opendir(path) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && nf < MAX_FILES) {
            size_t l = strlen(e->d_name);
            if ((l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) ||
                !strcmp(e->d_name, "config.json"))
                if (snprintf(files[nf], PATH_MAX, "%s/%s", path, e->d_name) < PATH_MAX) nf++;
        }
        closedir(d);
        qsort(files, (size_t)nf, sizeof *files, by_name); /* readdir's order is arbitrary */
    } else if (ok) {
        snprintf(files[nf++], PATH_MAX, "%s", path);
    }
    uint64_t total = 0;
    for (int i = 0; ok && i < nf; i++) {
        FILE *f;
        if (dt_file_fopen_regular(files[i], "rb", &f)) ok = 0;
        size_t r;
        while (ok && (r = fread(buf, 1, 1 << 20, f)) > 0) {
            XXH3_64bits_update(h, buf, r);
            if ((total += r) > ((uint64_t)MAX_HASH_GIB << 30)) ok = 0;
        }
        if (f) fclose(f);
    }
    if (ok) snprintf(hex, 17, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(h));
    XXH3_freeState(h);
    free(buf), free(files);
    return ok;
}

static void absolute(const char *p, char *out, size_t n);

typedef struct kv_list {
    dt_track_kv *kv;
    int n, cap;
} kv_list;

static int kv_add(void *ud, const char *key, const char *value) {
    kv_list *l = ud;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 128;
        dt_track_kv *k = realloc(l->kv, (size_t)cap * sizeof *k);
        if (!k) return 1;
        l->kv = k, l->cap = cap;
    }
    char *a = strdup(key), *b = strdup(value);
    if (!a || !b) {
        free(a), free(b);
        return 1;
    }
    l->kv[l->n++] = (dt_track_kv){a, b};
    return 0;
}

static void kv_free(kv_list *l) {
    for (int i = 0; i < l->n; i++) free((char *)l->kv[i].key), free((char *)l->kv[i].value);
    free(l->kv);
}

/* The run on the MLflow server: the config flattened as in the SQLite store's params, the
 * lineage as dtrain.<key> tags. */
static void mlflow_begin(dt_trainer *t, const char *name, const dt_track_kv *lin, int n_lin) {
    dt_train_track *k = t->tk;
    kv_list params = {0}, tags = {0};
    if (t->config_yaml) dt_track_flatten_yaml(t->config_yaml, kv_add, &params);
    char key[128];
    for (int i = 0; i < n_lin; i++) {
        snprintf(key, sizeof key, "dtrain.%s", lin[i].key);
        kv_add(&tags, key, lin[i].value);
    }
    char world[16];
    snprintf(world, sizeof world, "%d", t->world);
    kv_add(&tags, "dtrain.world_size", world);
    kv_add(&tags, "dtrain.run_dir", t->run_dir);
    if (dt_mlflow_run_begin(k->ml, t->v.output.experiment, name, params.kv, params.n, tags.kv,
                            tags.n) != DT_OK)
        fprintf(stderr, "warning: tracking: %s\n", dt_last_error());
    kv_free(&params), kv_free(&tags);
}

static void begin(dt_trainer *t, const dt_config *cfg, const char *hosts) {
    dt_train_track *k = t->tk;
    char chash[17], mhash[17], model[4096];
    snprintf(chash, sizeof chash, "%016" PRIx64,
             (uint64_t)XXH3_64bits(t->config_yaml ? t->config_yaml : "",
                                   t->config_yaml ? strlen(t->config_yaml) : 0));
    dt_track_kv lin[10] = {
        {"code_version", DT_GIT_REV}, {"dtrain_version", dt_version()}, {"config_hash", chash}};
    int n = 3;
    lin[n++] = (dt_track_kv){"dataset.train", dt_dataset_get_info(t->train_ds)->fingerprint};
    if (t->val_ds)
        lin[n++] = (dt_track_kv){"dataset.val", dt_dataset_get_info(t->val_ds)->fingerprint};
    if (t->v.model.init == DT_CFG_INIT_PRETRAINED && t->v.model.hf_path[0]) {
        dt_config_resolve_path(cfg, t->v.model.hf_path, model, sizeof model);
        lin[n++] = (dt_track_kv){"base_model", model};
        if (hash_model(model, mhash)) lin[n++] = (dt_track_kv){"base_model_hash", mhash};
    }
    /* where the model's config.json and the data were, absolute: the config may name them
     * relative to its own folder, which a reader of the store (`dtrain models export`) does not
     * know */
    char mpath[PATH_MAX], dpath[PATH_MAX], buf[PATH_MAX];
    if (t->v.model.hf_path[0]) {
        dt_config_resolve_path(cfg, t->v.model.hf_path, buf, sizeof buf);
        absolute(buf, mpath, sizeof mpath);
        lin[n++] = (dt_track_kv){"model.path", mpath};
    }
    dt_config_resolve_path(cfg, t->v.data.train, buf, sizeof buf);
    absolute(buf, dpath, sizeof dpath);
    lin[n++] = (dt_track_kv){"dataset.train.path", dpath};
    const char *name = strrchr(t->run_dir, '/');
    name = name ? name + 1 : t->run_dir;
    char step[32];
    snprintf(step, sizeof step, "%" PRId64, t->prog.step);
    if (k->ml) {
        mlflow_begin(t, name, lin, n);
        if (t->prog.step > 0) dt_mlflow_tag(k->ml, "dtrain.resumed_from_step", step);
    }
    if (dt_track_run_begin(k->store, t->v.output.experiment, name, t->world, hosts, t->config_yaml,
                           lin, n, &k->run) != DT_OK) {
        warn_off(t, "cannot begin the run");
        return;
    }
    if (t->prog.step > 0 && dt_track_tag(k->store, k->run, "resumed_from_step", step) != DT_OK)
        warn_off(t, "cannot tag the run");
    /* the attempt, as the SQLite store counts it: a tag (the newest) and a metric at the step
     * the attempt starts from (the history of restarts) */
    int attempts = 0;
    if (k->ml &&
        dt_track_run_attempts(k->store, t->v.output.experiment, name, &attempts) == DT_OK &&
        attempts > 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", attempts);
        dt_mlflow_tag(k->ml, "dtrain.attempt", num);
        dt_mlflow_metric(k->ml, "attempt", t->prog.step, dt_track_wall(), attempts);
    }
}

void dt_train_track_open(dt_trainer *t, const dt_config *cfg) {
    const char *uri = t->v.tracking.uri;
    if (!strcmp(uri, "off")) return; /* the same config on every rank: all skip */
    char hosts[4096], path[4200];
    gather_hosts(t, hosts, sizeof hosts);
    if (t->rank != 0) return;
    int ml = dt_mlflow_is_uri(uri);
    dt_track_local_uri(uri, t->v.output.dir, path, sizeof path);
    uri = path;
    dt_train_track *k = calloc(1, sizeof *k);
    if (!k) return;
    t->tk = k;
    char spool[sizeof t->run_dir + 32];
    snprintf(spool, sizeof spool, "%s/mlflow-spool.jsonl", t->run_dir);
    if (ml && dt_mlflow_open(t->v.tracking.uri, spool, &k->ml) != DT_OK)
        fprintf(stderr, "warning: tracking: %s; nothing is sent to MLflow (training goes on)\n",
                dt_last_error());
    if (dt_track_open(uri, &k->store) != DT_OK) {
        warn_off(t, "tracking.uri");
        return;
    }
    begin(t, cfg, hosts);
}

static void metric(dt_trainer *t, const char *key, double v) {
    if (t->tk && t->tk->ml) /* only fails on a bad key or no memory: never stops the run */
        dt_mlflow_metric(t->tk->ml, key, t->prog.step, dt_track_wall(), v);
    if (on(t) &&
        dt_track_metric(t->tk->store, t->tk->run, key, t->prog.step, dt_track_wall(), v) != DT_OK)
        warn_off(t, "cannot record metrics");
}

void dt_train_track_log(dt_trainer *t) {
    if (!t->tk || (!t->tk->ml && atomic_load(&t->tk->off))) return;
    double sps = t->prog.samples_per_s * t->world; /* every rank's samples */
    metric(t, "loss", t->prog.loss);
    metric(t, "lr", t->prog.lr);
    metric(t, "grad_norm", t->prog.grad_norm);
    metric(t, "samples_per_s", sps);
    if (t->task == DT_TASK_LM) metric(t, "tokens_per_s", sps * (double)t->T);
    metric(t, "data_wait", t->prog.data_wait);
    metric(t, "data_wait_s", t->prog.data_wait_total_s);
    if (t->world > 1) {
        metric(t, "comm_wait", t->prog.comm_wait);
        metric(t, "comm_wait_s", t->prog.comm_wait_total_s);
        metric(t, "comm_bytes", t->prog.comm_bytes);
        metric(t, "comm_cpu", t->prog.comm_cpu);
        metric(t, "comm_cpu_s", t->prog.comm_cpu_total_s);
    }
    dt_train_shares_track(t, metric); /* batch_part.R, compute_rate.R */
    dt_train_device_track(t, metric); /* device.R, gpu_mem.R, gpu_mem_peak.R */
}

void dt_train_track_eval(dt_trainer *t, const dt_eval_result *r) {
    metric(t, "eval_loss", r->loss);
    metric(t, "eval_accuracy", r->accuracy);
    if (t->task == DT_TASK_LM) metric(t, "eval_perplexity", r->perplexity);
}

/* A local path made absolute, so the record stays valid from any working directory. */
static void absolute(const char *p, char *out, size_t n) {
    char buf[PATH_MAX];
    if (!strncmp(p, "file://", 7)) p += 7;
    if (!strstr(p, "://") && realpath(p, buf))
        snprintf(out, n, "%s", buf);
    else
        snprintf(out, n, "%s", p);
}

/* The URI a checkpoint is recorded under: the store made absolute, then its key prefix. */
static void ckpt_uri(const char *store_url, const char *dir, char *uri, size_t n) {
    char root[PATH_MAX];
    absolute(store_url, root, sizeof root);
    snprintf(uri, n, "%s/%s", root, dir);
}

/* {"loss": ..., ...}: the metrics as the store records them (null: not finite) */
static void metrics_json(const dt_ckpt_metric *m, int n, char *out, size_t cap) {
    int l = snprintf(out, cap, "{");
    for (int i = 0; i < n && l > 0 && (size_t)l < cap; i++)
        l += snprintf(out + l, cap - (size_t)l,
                      isfinite(m[i].value) ? "%s\"%s\": %.17g" : "%s\"%s\": null", i ? ", " : "",
                      m[i].name, m[i].value);
    if (l > 0 && (size_t)l < cap) snprintf(out + l, cap - (size_t)l, "}");
}

void dt_train_track_ckpt(dt_trainer *t, int64_t step, const char *store_url, const char *dir,
                         const dt_ckpt_state *state) {
    if (!t->tk) return;
    char uri[PATH_MAX + 1300], m[DT_CKPT_MAX_METRICS * 100];
    ckpt_uri(store_url, dir, uri, sizeof uri);
    if (t->tk->ml) dt_mlflow_tag(t->tk->ml, "dtrain.checkpoint", uri);
    if (!on(t)) return;
    metrics_json(state->metrics, state->n_metrics, m, sizeof m);
    if (dt_track_artifact(t->tk->store, t->tk->run, "checkpoint", uri, step, m) != DT_OK)
        warn_off(t, "cannot record the checkpoint");
}

void dt_train_track_flush(dt_trainer *t) {
    if (on(t) && dt_track_flush(t->tk->store) != DT_OK) warn_off(t, "cannot write the metrics");
}

void dt_train_track_ckpt_removed(dt_trainer *t, int64_t step, const char *store_url,
                                 const char *dir, const char *why) {
    if (!on(t)) return;
    char uri[PATH_MAX + 1300];
    ckpt_uri(store_url, dir, uri, sizeof uri);
    if (dt_track_artifact_removed(t->tk->store, t->tk->run, uri, step, why) != DT_OK)
        warn_off(t, "cannot record a removed checkpoint");
}

void dt_train_track_export(dt_trainer *t, const char *dir) {
    if (!t->tk) return;
    char uri[PATH_MAX], m[512];
    absolute(dir, uri, sizeof uri);
    if (t->tk->ml) dt_mlflow_tag(t->tk->ml, "dtrain.model", uri);
    if (!on(t)) return;
    dt_ckpt_metric ms[3] = {
        {"loss", t->prog.loss}, {"eval_loss", t->eval.loss}, {"eval_accuracy", t->eval.accuracy}};
    metrics_json(ms, t->have_eval ? 3 : 1, m, sizeof m);
    if (dt_track_artifact(t->tk->store, t->tk->run, "model", uri, t->prog.step, m) != DT_OK)
        warn_off(t, "cannot record the exported model");
}

void dt_train_track_end(dt_trainer *t, const char *status, const char *reason) {
    if (!t->tk || t->tk->ended) return;
    t->tk->ended = 1;
    char why[1200];
    if (!reason && !strcmp(status, "done"))
        snprintf(why, sizeof why, "finished %" PRId64 " steps", t->prog.step);
    else if (!reason)
        snprintf(why, sizeof why, "stopped at step %" PRId64 " on request (checkpoint saved)",
                 t->prog.step);
    else
        snprintf(why, sizeof why, "%s", reason);
    if (t->tk->ml) {
        dt_mlflow_tag(t->tk->ml, "dtrain.exit_reason", why);
        dt_mlflow_run_end(t->tk->ml, dt_mlflow_status(status));
    }
    if (on(t) && dt_track_run_end(t->tk->store, t->tk->run, status, why) != DT_OK)
        warn_off(t, "cannot end the run");
}

void dt_train_track_close(dt_trainer *t) {
    dt_train_track *k = t->tk;
    if (!k) return;
    if (!k->ended) { /* dt_trainer_run did not finish (an export error, or never run) */
        char why[1200];
        const char *e = dt_last_error();
        snprintf(why, sizeof why, "ended at step %" PRId64 " of %" PRId64 "%s%s", t->prog.step,
                 t->prog.total_steps, e[0] ? ": " : "", e);
        dt_train_track_end(t, "failed", why);
    }
    if (dt_track_close(k->store) != DT_OK && !atomic_load(&k->off))
        warn_off(t, "cannot write metrics");
    if (k->ml) dt_train_track_artifacts(t, k->ml);
    if (k->ml && dt_mlflow_close(k->ml) != DT_OK)
        fprintf(stderr, "warning: tracking: %s\n", dt_last_error());
    free(k);
    t->tk = NULL;
}

int64_t dt_train_track_run_id(const dt_trainer *t) {
    return on(t) ? t->tk->run : 0;
}
