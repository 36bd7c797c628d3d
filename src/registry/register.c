/* Registering by reference (include/dtrain/registry.h, dt_registry_register_ref): which
 * checkpoint a run or a folder names, verified (src/ckpt/checkpoint.c), its file list and
 * metrics handed to dt_registry_register (src/track/registry.c, the store's side). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dtrain/checkpoint.h"
#include "dtrain/registry.h"
#include "dtrain/storage.h"

/* The checkpoint folder `dir` (local) verified -- every file's size and xxh3 against
 * trainer_state.json -- and its state decoded. */
static dt_status verify_ckpt(const char *dir, dt_ckpt_state *cs) {
    char parent[PATH_MAX], key[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash || !slash[1]) return dt_error_set(DT_ERR_INVALID, "%s: not a checkpoint", dir);
    snprintf(key, sizeof key, "%s", slash + 1);
    if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    dt_store *st;
    dt_status s = dt_store_open(parent, NULL, &st);
    if (s != DT_OK) return s;
    s = dt_ckpt_verify(st, key, NULL);
    if (s == DT_OK) s = dt_ckpt_state_load(st, key, cs);
    dt_store_close(st);
    return s;
}

typedef struct ckpt_ref {
    int64_t step, id;
    char uri[PATH_MAX];
} ckpt_ref;

typedef struct find_ckpt {
    dt_track *s;
    const char *want; /* a checkpoint path: find the run that recorded it */
    int64_t run;
    int n, cap; /* a run's checkpoints, newest first after sorting */
    ckpt_ref *c;
} find_ckpt;

static int on_artifact(void *ud, const dt_track_artifact_row *a) {
    find_ckpt *f = ud;
    if (strcmp(a->kind, "checkpoint") || a->removed > 0) return 0;
    if (f->want) {
        if (!strcmp(a->uri, f->want)) f->run = -1; /* found: the caller's run */
        return f->run == -1;
    }
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        void *p = realloc(f->c, (size_t)cap * sizeof *f->c);
        if (!p) return 1;
        f->c = p, f->cap = cap;
    }
    f->c[f->n].step = a->step, f->c[f->n].id = a->id;
    snprintf(f->c[f->n].uri, sizeof f->c[f->n].uri, "%s", a->uri);
    f->n++;
    return 0;
}

static int on_run(void *ud, const dt_track_run *r) {
    find_ckpt *f = ud;
    f->run = 0;
    dt_track_artifacts(f->s, r->id, on_artifact, f);
    if (f->run == -1) f->run = r->id;
    return f->run > 0;
}

static int newest_first(const void *a, const void *b) {
    const ckpt_ref *x = a, *y = b;
    return x->step != y->step ? (x->step < y->step) - (x->step > y->step)
                              : (x->id < y->id) - (x->id > y->id);
}

/* A run's newest recorded checkpoint that verifies: into dir and cs; each newer one that does
 * not is one line on log. */
static dt_status newest_good(dt_track *s, const char *ref, FILE *log, char *dir, size_t n,
                             int64_t *run, dt_ckpt_state *cs) {
    dt_track_run r;
    find_ckpt f = {.s = s};
    dt_status st = dt_track_run_find(s, ref, &r);
    if (st != DT_OK) return st;
    *run = r.id;
    if ((st = dt_track_artifacts(s, r.id, on_artifact, &f)) == DT_OK && f.n)
        qsort(f.c, (size_t)f.n, sizeof *f.c, newest_first);
    for (int i = 0; st == DT_OK && i < f.n; i++) {
        const char *u = f.c[i].uri;
        if (!strncmp(u, "file://", 7)) u += 7;
        dt_status cst =
            strstr(u, "://")
                ? dt_error_set(DT_ERR_INVALID,
                               "%s: not a local folder (the registry keeps local checkpoints)", u)
                : verify_ckpt(u, cs);
        if (cst == DT_OK) {
            snprintf(dir, n, "%s", u);
            break;
        }
        if (log)
            fprintf(log, "registry: skipped checkpoint step %lld of run %s/%s: %s\n",
                    (long long)f.c[i].step, r.experiment, r.name, dt_last_error());
        dt_ckpt_state_free(cs);
        dt_ckpt_state_init(cs);
    }
    if (st == DT_OK && !dir[0])
        st = dt_error_set(DT_ERR_NOTFOUND,
                          "run %s/%s: no committed checkpoint that verifies (of %d recorded)",
                          r.experiment, r.name, f.n);
    free(f.c);
    return st;
}

/* {"loss": 2.3, ...} of the checkpoint's metrics (null: not finite); "" when it has none. */
static void metrics_text(const dt_ckpt_state *cs, char *out, size_t n) {
    out[0] = '\0';
    if (!cs->n_metrics) return;
    cJSON *m = cJSON_CreateObject();
    for (int i = 0; i < cs->n_metrics; i++)
        cJSON_AddItemToObject(m, cs->metrics[i].name,
                              cs->metrics[i].value == cs->metrics[i].value
                                  ? cJSON_CreateNumber(cs->metrics[i].value)
                                  : cJSON_CreateNull());
    char *t = cJSON_PrintUnformatted(m);
    if (t) snprintf(out, n, "%s", t);
    free(t);
    cJSON_Delete(m);
}

dt_status dt_registry_register_ref(dt_track *s, const char *name, const char *description,
                                   const char *ref, FILE *log, int *version) {
    if (version) *version = 0;
    if (!s || !ref || !ref[0]) return dt_error_set(DT_ERR_INVALID, "registry: no store or run");
    char dir[PATH_MAX] = "";
    int64_t run = 0;
    dt_ckpt_state cs;
    dt_ckpt_state_init(&cs);
    struct stat sb;
    dt_status st = DT_OK;
    if (stat(ref, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        /* a checkpoint folder: recorded by a run of this store? */
        if (!realpath(ref, dir)) return dt_error_set(DT_ERR_IO, "%s: %s", ref, strerror(errno));
        find_ckpt f = {.s = s, .want = dir};
        if ((st = dt_track_runs(s, NULL, NULL, on_run, &f)) == DT_OK) run = f.run > 0 ? f.run : 0;
        if (st == DT_OK) st = verify_ckpt(dir, &cs);
    } else {
        st = newest_good(s, ref, log, dir, sizeof dir, &run, &cs);
    }
    /* the files as trainer_state.json lists them (just verified), and trainer_state.json */
    dt_registry_file *files = NULL;
    char metrics[DT_CKPT_MAX_METRICS * 100];
    int nf = 0;
    if (st == DT_OK && !(files = calloc((size_t)cs.n_files + 1, sizeof *files)))
        st = dt_error_set(DT_ERR_NOMEM, "registry: out of memory");
    for (int i = 0; st == DT_OK && i < cs.n_files; i++, nf++)
        files[nf] = (dt_registry_file){cs.files[i].name, cs.files[i].bytes, cs.files[i].xxh3};
    if (st == DT_OK) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", dir, DT_CKPT_STATE);
        files[nf].name = DT_CKPT_STATE;
        st = dt_registry_hash_file(p, &files[nf].bytes, &files[nf].xxh3);
        nf++;
    }
    if (st == DT_OK) {
        metrics_text(&cs, metrics, sizeof metrics);
        dt_registry_source src = {.name = name,
                                  .description = description,
                                  .run_id = run,
                                  .path = dir,
                                  .step = cs.step,
                                  .files = files,
                                  .n_files = nf,
                                  .metrics_json = metrics[0] ? metrics : NULL,
                                  .config_yaml = cs.config};
        st = dt_registry_register(s, &src, version);
    }
    free(files);
    dt_ckpt_state_free(&cs);
    return st;
}
