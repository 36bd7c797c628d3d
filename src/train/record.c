/* run.json in the run directory: what was trained on what, by which code, with what result
 * (data lineage until the experiment store exists). Written at start and rewritten at the end,
 * atomically (temporary file + rename), mode DT_FILE_MODE (0640) less the umask. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/fsmode.h"
#include "dtrain/runtime.h"
#include "train/train_impl.h"

#ifndef DT_GIT_REV
#define DT_GIT_REV "unknown"
#endif

static void add_dataset(cJSON *o, const char *key, const dt_dataset *d, const char *path) {
    if (!d) return;
    const dt_dataset_info *in = dt_dataset_get_info(d);
    cJSON *x = cJSON_AddObjectToObject(o, key);
    cJSON_AddStringToObject(x, "path", path);
    cJSON_AddStringToObject(x, "name", in->name);
    cJSON_AddStringToObject(x, "split", in->split);
    cJSON_AddStringToObject(x, "fingerprint", in->fingerprint);
    cJSON_AddNumberToObject(x, "records", (double)in->records);
}

/* What run.json and `dtrain train --json` say of the run. */
static cJSON *run_object(dt_trainer *t, const char *status) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char ts[64];
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "updated", ts);
    cJSON_AddStringToObject(o, "dtrain_version", dt_version());
    cJSON_AddStringToObject(o, "code_revision", DT_GIT_REV);
    cJSON_AddStringToObject(o, "model",
                            t->model == DT_MODEL_RESNET  ? "resnet"
                            : t->model == DT_MODEL_LLAMA ? "llama"
                                                         : t->custom.name);
    cJSON_AddNumberToObject(o, "parameters", (double)t->n);
    cJSON_AddStringToObject(o, "config", "config.yaml");
    add_dataset(o, "train_data", t->train_ds, t->v.data.train);
    add_dataset(o, "val_data", t->val_ds, t->v.data.val);
    cJSON_AddNumberToObject(o, "steps_done", (double)t->prog.step);
    cJSON_AddNumberToObject(o, "steps_total", (double)t->prog.total_steps);
    if (t->prog.step) cJSON_AddNumberToObject(o, "train_loss", t->prog.loss);
    if (t->have_eval) {
        cJSON *e = cJSON_AddObjectToObject(o, "eval");
        cJSON_AddNumberToObject(e, "loss", t->eval.loss);
        cJSON_AddNumberToObject(e, "accuracy", t->eval.accuracy);
        if (t->task == DT_TASK_LM) cJSON_AddNumberToObject(e, "perplexity", t->eval.perplexity);
        cJSON_AddNumberToObject(e, "samples", (double)t->eval.samples);
    }
    char url[2400];
    int64_t step = dt_train_ckpt_last(t, url, sizeof url);
    if (step >= 0) {
        cJSON *c = cJSON_AddObjectToObject(o, "checkpoint"); /* this attempt's newest commit */
        cJSON_AddNumberToObject(c, "step", (double)step);
        cJSON_AddStringToObject(c, "url", url);
    }
    if (t->exported[0]) cJSON_AddStringToObject(o, "export", t->exported);
    int64_t id = dt_train_track_run_id(t); /* the experiment store's (dtrain runs, models) */
    if (id > 0) cJSON_AddNumberToObject(o, "run_id", (double)id);
    return o;
}

dt_status dt_train_record(dt_trainer *t, const char *status) {
    char path[4200], tmp[4300];
    cJSON *o = run_object(t, status);
    char *txt = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!txt) return dt_error_set(DT_ERR_NOMEM, "run.json: out of memory");
    snprintf(path, sizeof path, "%s/run.json", t->run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = dt_fcreate(tmp, "w");
    int bad = !f || fputs(txt, f) < 0 || fputc('\n', f) < 0;
    if (f && fclose(f) != 0) bad = 1;
    free(txt);
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return dt_error_set(DT_ERR_IO, "%s: cannot write", path);
    }
    return DT_OK;
}

char *dt_trainer_summary_json(dt_trainer *t, dt_status run_status) {
    if (!t || t->rank != 0) return NULL;
    const char *status = run_status != DT_OK ? "failed" : t->prog.preempted ? "preempted" : "done";
    cJSON *o = run_object(t, status);
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "run_dir", t->run_dir);
    const char *name = strrchr(t->run_dir, '/');
    cJSON_AddStringToObject(o, "run_name", name ? name + 1 : t->run_dir);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

int dt_train_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

void dt_train_rss(double *rss_mib, double *peak_mib) {
    *rss_mib = *peak_mib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) *rss_mib = (double)kb / 1024.0;
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) *peak_mib = (double)kb / 1024.0;
    }
    fclose(f);
}
