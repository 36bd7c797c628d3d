/* Helpers of `dtrain runs` (dt_cli_runs in cli/cli.h; src/cli/runs.c, runs_report.c). Exit
 * status: 0 done, 1 failed (no store, no such run, I/O), 2 usage error. */
#ifndef DTRAIN_CLI_RUNS_H
#define DTRAIN_CLI_RUNS_H

#include <stdio.h>
#include "dtrain/track.h"

/* A growable list of key/value pairs (params, lineage), in the store's (key) order. */
typedef struct dt_runs_kv {
    int n, cap;
    char **key, **value;
} dt_runs_kv;
int dt_runs_kv_add(void *ud, const char *key, const char *value); /* a dt_track_kv_cb */
void dt_runs_kv_free(dt_runs_kv *l);

/* Per-key summaries of one run's metrics. */
typedef struct dt_runs_summ {
    int n, cap;
    dt_track_summary *m; /* m[i].key owned */
} dt_runs_summ;
dt_status dt_runs_summ_load(dt_track *s, int64_t run, dt_runs_summ *out);
void dt_runs_summ_free(dt_runs_summ *l);
const dt_track_summary *dt_runs_summ_find(const dt_runs_summ *l, const char *key);
/* +1 when larger is better (accuracy), -1 when smaller is (loss, perplexity), 0 neither. */
int dt_runs_best_dir(const char *key);
/* A value for a table: %.6g, "-" for NaN. */
const char *dt_runs_num(double v, char *buf, size_t n);

int dt_runs_compare(dt_track *s, int n, char **refs);
int dt_runs_export(dt_track *s, const char *ref, const char *format, const char *out_path);
/* The run as an MLflow file store under out_dir (src/cli/runs_mlflow.c). */
int dt_runs_export_mlflow(dt_track *s, const char *ref, const char *out_dir);
/* Curves of `metrics` (comma-separated keys) for the runs refs[0..n) (each may itself be a
 * comma-separated list) into out_path, SVG or PNG by its extension (src/cli/runs_plot.c). */
int dt_runs_plot(dt_track *s, int n, char **refs, const char *metrics, const char *out_path);
/* `dtrain runs sync [--output-dir DIR] [--uri URI] [PATH ...]`: argv after "sync"; replays
 * MLflow spool files (src/cli/runs_sync.c). */
int dt_runs_sync(int argc, char **argv);

#endif
