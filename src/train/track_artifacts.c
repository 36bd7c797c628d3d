/* A run's artefacts on its MLflow server (tracking.uri http(s)://), queued when the run's
 * tracking closes -- after run.json is written -- and sent by the MLflow client's thread
 * (include/dtrain/mlflow.h: streamed from disk, retried, spooled as pending uploads that
 * `dtrain runs sync` sends):
 *   config.yaml, run.json            the run's resolved config and record
 *   model/... or adapter/...         the exported model's files (output.export), one level
 *   dtrain-manifest.tsv              "path  bytes  xxh3" of each file above (16 hex digits),
 *                                    so a reader can verify what it downloads
 * Checkpoints are not uploaded here (a registered one is: `dtrain models register`). */
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dtrain/mlflow.h"
#include "dtrain/registry.h"
#include "train/train_impl.h"

enum { MAX_UPLOADS = 256 };

typedef struct manifest {
    FILE *f; /* the manifest being written */
    dt_mlflow *ml;
    int n;
} manifest;

static void add(manifest *mf, const char *file, const char *path) {
    int64_t bytes = 0;
    uint64_t h = 0;
    struct stat st;
    if (mf->n >= MAX_UPLOADS || stat(file, &st) != 0 || !S_ISREG(st.st_mode) ||
        dt_registry_hash_file(file, &bytes, &h) != DT_OK)
        return;
    char hex[17], abs[PATH_MAX];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    fprintf(mf->f, "%s\t%" PRId64 "\t%s\n", path, bytes, hex);
    /* absolute: a pending upload is sent by `dtrain runs sync` from any working directory */
    dt_mlflow_artifact(mf->ml, realpath(file, abs) ? abs : file, path, hex);
    mf->n++;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of `dir` (sorted), uploaded under `prefix`/. */
static void add_dir(manifest *mf, const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[MAX_UPLOADS];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_UPLOADS;)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "mlflow-", 7) &&
            strcmp(e->d_name, "run.json") && (names[n] = strdup(e->d_name)))
            n++;
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n; i++) {
        char file[8400], path[600];
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        snprintf(path, sizeof path, "%s/%s", prefix, names[i]);
        add(mf, file, path);
        free(names[i]);
    }
}

void dt_train_track_artifacts(dt_trainer *t, dt_mlflow *ml) {
    char mpath[sizeof t->run_dir + 32], file[sizeof t->run_dir + 32];
    snprintf(mpath, sizeof mpath, "%s/mlflow-manifest.tsv", t->run_dir);
    manifest mf = {.f = fopen(mpath, "w"), .ml = ml};
    if (!mf.f) {
        fprintf(stderr, "warning: tracking: %s: cannot write; no artefacts are uploaded\n", mpath);
        return;
    }
    fprintf(mf.f, "path\tbytes\txxh3\n");
    static const char *const run_files[] = {"config.yaml", "run.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(file, sizeof file, "%s/%s", t->run_dir, run_files[i]);
        add(&mf, file, run_files[i]);
    }
    if (t->exported[0]) {
        const char *base = strrchr(t->exported, '/');
        int own = !strcmp(t->exported, t->run_dir) || !base; /* written beside the run files */
        add_dir(&mf, t->exported, own ? "model" : base + 1);
    }
    char abs[PATH_MAX];
    if (fclose(mf.f) != 0)
        fprintf(stderr, "warning: tracking: %s: cannot write the manifest\n", mpath);
    else
        dt_mlflow_artifact(ml, realpath(mpath, abs) ? abs : mpath, "dtrain-manifest.tsv", NULL);
}
