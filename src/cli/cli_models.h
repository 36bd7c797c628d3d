/* Helpers of `dtrain models` (dt_cli_models in cli/cli.h): src/cli/models.c (dispatch,
 * register, alias, ls) and src/cli/models_show.c (show, diff, verify, export). Exit status: 0
 * done, 1 failed (no store, no such model, a changed artefact, I/O), 2 usage error. */
#ifndef DTRAIN_CLI_MODELS_H
#define DTRAIN_CLI_MODELS_H

#include <cjson/cJSON.h>
#include "dtrain/registry.h"
#include "dtrain/track.h"

enum { MODELS_OK = 0, MODELS_BAD = 1, MODELS_USAGE = 2 };

typedef struct dt_models_args {
    const char *cmd;
    int json;
    const char *out, *format, *base;
    const char *mlflow; /* --mlflow URI|off (register, alias, sync) */
} dt_models_args;

/* Prints the JSON object (pretty) and frees it. */
void dt_models_print_json(cJSON *o);
/* "2026-12-02 10:04:47" (UTC). */
void dt_models_time(double t, char *buf, size_t n);
/* The version as a JSON object (snapshots parsed; integrity added by the caller). */
cJSON *dt_models_version_json(const dt_registry_version *v);

int dt_models_show(dt_track *s, const char *ref, const dt_models_args *a);
int dt_models_diff(dt_track *s, const char *ra, const char *rb, const dt_models_args *a);
int dt_models_verify(dt_track *s, const char *ref, const dt_models_args *a);
/* MLflow's side of register and alias (src/cli/models_mlflow.c): 0 sent, spooled or nothing to
 * send; 1 refused (one line printed). json (may be NULL) gets an "mlflow" object. */
int dt_models_mlflow_register(const dt_registry_version *v, const char *opt, const char *desc,
                              cJSON *json);
int dt_models_mlflow_alias(dt_track *s, const char *name, int version, const char *alias,
                           const char *opt, cJSON *json);
/* `dtrain models sync [NAME]`: every version and alias without its MLflow twin sent to the
 * version's server (--mlflow URI, else its run's tracking.uri); 0 when none failed. */
int dt_models_mlflow_sync(dt_track *s, const char *name, const char *opt, int json);
int dt_models_export(dt_track *s, const char *ref, const dt_models_args *a);

#endif
