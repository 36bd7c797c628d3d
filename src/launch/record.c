/* The launcher's records: <run>/launch.json and its rows in the experiment store. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/fsmode.h"
#include "dtrain/checkpoint.h"
#include "dtrain/mlflow.h"
#include "dtrain/storage.h"
#include "launch/launch_impl.h"

void dt_launch_record_write(const char *path, const void *cjson_record) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *txt = cJSON_Print((const cJSON *)cjson_record);
    FILE *f = txt ? dt_fcreate(tmp, "w") : NULL;
    if (f) {
        fputs(txt, f);
        fputc('\n', f);
        if (fclose(f) == 0) rename(tmp, path);
    }
    free(txt);
}

/* The first store error: one warning; the launcher records nothing more (the job goes on). */
static void track_off(dt_launch_track *t, const char *what) {
    fprintf(stderr,
            "dtrain launch: warning: tracking: %s: %s; the launcher records no more attempts in "
            "the experiment store (training goes on)\n",
            what, dt_last_error());
    dt_track_close(t->store);
    t->store = NULL;
}

void dt_launch_track_attempt_start(dt_launch_track *t) {
    t->started = dt_track_wall();
    if (t->store && dt_track_run_attempts(t->store, t->experiment, t->run, &t->before) != DT_OK)
        track_off(t, "cannot read the run");
}

/* ckpt.resume=auto takes the newest committed checkpoint whose files are all there. */
long long dt_launch_track_resume_step(const dt_launch_track *t) {
    dt_store *st;
    if (dt_store_open(t->ckpt_url, NULL, &st) != DT_OK) return -1;
    char root[2300];
    snprintf(root, sizeof root, "%s/%s/checkpoints", t->experiment, t->run);
    dt_ckpt_info info;
    long long step = dt_ckpt_find_before(st, root, INT64_MAX, DT_CKPT_SIZES, NULL, &info) == DT_OK
                         ? info.step
                         : -1;
    dt_store_close(st);
    return step;
}

void dt_launch_track_attempt_end(dt_launch_track *t, const char *status, const char *reason,
                                 int restarts) {
    if (!t->store) return;
    dt_track_attempt_end_info in = {.attempts_before = t->before,
                                    .start_time = t->started,
                                    .world = t->world,
                                    .hosts = t->hosts[0] ? t->hosts : t->local,
                                    .status = status,
                                    .exit_reason = reason};
    int64_t run;
    char n[32];
    snprintf(n, sizeof n, "%d", restarts);
    if (dt_track_attempt_end(t->store, t->experiment, t->run, &in, &run) != DT_OK) {
        track_off(t, "cannot end the attempt");
        return;
    }
    if (dt_track_tag(t->store, run, "restarts", n) != DT_OK ||
        (t->hosts[0] && dt_track_tag(t->store, run, "launch.hosts", t->hosts) != DT_OK)) {
        track_off(t, "cannot tag the run");
        return;
    }
    int attempts = 0;
    if (t->mlflow[0] &&
        dt_track_run_attempts(t->store, t->experiment, t->run, &attempts) == DT_OK &&
        dt_mlflow_attempt_end(t->mlflow, t->spool, t->experiment, t->run, attempts, status, reason,
                              restarts) != DT_OK)
        fprintf(stderr, "dtrain launch: warning: tracking: %s\n", dt_last_error());
}

void dt_launch_track_close(dt_launch_track *t) {
    if (t->store && dt_track_close(t->store) != DT_OK)
        fprintf(stderr, "dtrain launch: warning: tracking: %s\n", dt_last_error());
    t->store = NULL;
}
