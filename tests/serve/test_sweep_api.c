/* The sweep API (src/serve/api_sweep.c) on a store written by hand, with what a real sweep
 * rarely shows at once: a trial resumed (its metric from the latest attempt), a failed trial and
 * a trial stopped early with lower losses than the best (neither is the best: failed, and not at
 * the furthest step), a diverged trial (NaN: null, not the best), a trial whose first segment
 * runs untagged (found by its name), and a sweep of the same id in another experiment (its
 * trials not mixed in; the bare id is ambiguous). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/track.h"
#include "harness.h"
#include "serve/serve_impl.h"

static int64_t begin(dt_track *s, const char *exp, const char *name, const char *yaml) {
    int64_t id = 0;
    CHECK_OK(dt_track_run_begin(s, exp, name, 1, "h:1", yaml, NULL, 0, &id));
    return id;
}

/* A trial run tagged as the supervisor tags it; losses 3.0 - 0.1 * step up to `last`, except
 * `at_last` at step `last`. */
static int64_t trial(dt_track *s, const char *exp, const char *name, int64_t parent, int no,
                     const char *status, int last, double at_last, const char *lr) {
    char yaml[128], v[32];
    snprintf(yaml, sizeof yaml, "optim:\n  lr: %s\n  weight_decay: 0.1\n", lr);
    int64_t id = begin(s, exp, name, yaml);
    for (int k = 1; k <= last; k++)
        CHECK_OK(dt_track_metric(s, id, "loss", k, dt_track_wall(),
                                 k == last ? at_last : 3.0 - 0.1 * k));
    CHECK_OK(dt_track_tag(s, id, "sweep_id", "sw"));
    snprintf(v, sizeof v, "%lld", (long long)parent);
    CHECK_OK(dt_track_tag(s, id, "sweep.parent", v));
    snprintf(v, sizeof v, "%d", no);
    CHECK_OK(dt_track_tag(s, id, "sweep.trial", v));
    CHECK_OK(dt_track_tag(s, id, "sweep.status", status));
    snprintf(v, sizeof v, "%d", last);
    CHECK_OK(dt_track_tag(s, id, "sweep.step", v));
    CHECK_OK(dt_track_run_end(s, id, !strcmp(status, "failed") ? "failed" : "done", ""));
    return id;
}

static int64_t sweep_run(dt_track *s, const char *exp) {
    int64_t id = begin(s, exp, "sw", "");
    CHECK_OK(dt_track_tag(s, id, "sweep.kind", "sweep"));
    CHECK_OK(dt_track_tag(s, id, "sweep_id", "sw"));
    CHECK_OK(dt_track_tag(s, id, "sweep.trials", "6"));
    CHECK_OK(dt_track_tag(s, id, "sweep.metric", "loss"));
    CHECK_OK(dt_track_tag(s, id, "sweep.mode", "min"));
    CHECK_OK(dt_track_tag(s, id, "sweep.max_steps", "9"));
    CHECK_OK(dt_track_tag(s, id, "sweep.param.optim.lr", "log_uniform"));
    return id;
}

static cJSON *get(dt_serve *sv, const char *path, int want_code) {
    sv_buf b = {0};
    int code = dt_sv_api(sv, path, NULL, NULL, &b);
    CHECK(code == want_code, "%s: HTTP %d, want %d: %s", path, code, want_code, b.p ? b.p : "");
    cJSON *o = b.p ? cJSON_Parse(b.p) : NULL;
    free(b.p);
    return o;
}

static cJSON *by_trial(cJSON *trials, int no) {
    cJSON *t;
    cJSON_ArrayForEach(t, trials) {
        if (cJSON_GetObjectItem(t, "trial")->valueint == no) return t;
    }
    return NULL;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

int main(void) {
    char dir[] = "/tmp/dt_sweep_api_XXXXXX", db[256];
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp")) return dt_test_finish("test_sweep_api");
    snprintf(db, sizeof db, "%s/dtrain.db", dir);
    dt_track *s = NULL;
    CHECK_OK(dt_track_open(db, &s));
    int64_t parent = sweep_run(s, "e");
    trial(s, "e", "sw-t000", parent, 0, "done", 9, 2.0, "0.01");
    /* resumed: attempt 2 logs step 9 again, lower; the API must take the latest attempt's */
    int64_t t0 = begin(s, "e", "sw-t000", "optim:\n  lr: 0.01\n  weight_decay: 0.1\n");
    CHECK_OK(dt_track_metric(s, t0, "loss", 9, dt_track_wall(), 1.5));
    CHECK_OK(dt_track_run_end(s, t0, "done", ""));
    trial(s, "e", "sw-t001", parent, 1, "failed", 9, 1.0, "0.02");
    trial(s, "e", "sw-t002", parent, 2, "stopped", 3, 0.5, "0.0003");
    trial(s, "e", "sw-t004", parent, 4, "done", 9, NAN, "0.03");
    trial(s, "e", "sw-t005", parent, 5, "done", 9, 1.7, "0.001");
    /* first segment running, not tagged yet; a run merely named alike is not a trial */
    int64_t t3 = begin(s, "e", "sw-t003", "optim:\n  lr: 0.005\n  weight_decay: 0.1\n");
    CHECK_OK(dt_track_metric(s, t3, "loss", 1, dt_track_wall(), 2.9));
    begin(s, "e", "sw-t00x", "");
    /* the same sweep id in experiment f: its own parent */
    int64_t other = sweep_run(s, "f");
    trial(s, "f", "sw-t000", other, 0, "done", 9, 0.1, "0.5");
    CHECK_OK(dt_track_flush(s));

    dt_serve sv = {0};
    snprintf(sv.db_path, sizeof sv.db_path, "%s", db);
    cJSON *l = get(&sv, "sweeps", 200);
    CHECK(cJSON_GetArraySize(l) == 2, "two sweeps listed");
    cJSON *x;
    cJSON_ArrayForEach(x, l) {
        CHECK(!strcmp(str(x, "id"), "sw") && cJSON_GetObjectItem(x, "trials")->valueint == 6,
              "sweep %s/%s: id sw, 6 trials", str(x, "experiment"), str(x, "id"));
    }
    cJSON_Delete(l);

    cJSON *o = get(&sv, "sweeps/e/sw", 200);
    cJSON *tr = cJSON_GetObjectItem(o, "trials"), *p = cJSON_GetObjectItem(o, "params");
    CHECK(cJSON_GetArraySize(tr) == 6, "6 trials of e/sw (not f's, not sw-t00x): %d",
          cJSON_GetArraySize(tr));
    CHECK(cJSON_GetArraySize(p) == 1 && !strcmp(str(cJSON_GetArrayItem(p, 0), "key"), "optim.lr") &&
              !strcmp(str(cJSON_GetArrayItem(p, 0), "kind"), "log_uniform"),
          "one parameter, optim.lr, log_uniform");
    CHECK(!strcmp(str(o, "metric"), "loss") && !strcmp(str(o, "mode"), "min") &&
              cJSON_GetObjectItem(o, "max_steps")->valuedouble == 9,
          "metric loss, min, max_steps 9");
    cJSON *a = by_trial(tr, 0), *b = by_trial(tr, 1), *c = by_trial(tr, 2), *r = by_trial(tr, 3),
          *n = by_trial(tr, 4);
    CHECK(a && cJSON_GetObjectItem(a, "metric")->valuedouble == 1.5,
          "trial 0: the resumed attempt's loss at step 9 (1.5)");
    CHECK(a && !strcmp(str(cJSON_GetObjectItem(a, "params"), "optim.lr"), "0.01") &&
              !cJSON_GetObjectItem(cJSON_GetObjectItem(a, "params"), "optim.weight_decay"),
          "trial 0's params: the swept key alone");
    CHECK(b && !strcmp(str(b, "status"), "failed"), "trial 1 failed");
    CHECK(c && !strcmp(str(c, "status"), "stopped") &&
              cJSON_GetObjectItem(c, "step")->valueint == 3 &&
              cJSON_GetObjectItem(c, "metric")->valuedouble == 0.5,
          "trial 2 stopped at step 3 with 0.5");
    CHECK(r && !strcmp(str(r, "status"), "running") && !strcmp(str(r, "run"), "sw-t003") &&
              cJSON_IsNull(cJSON_GetObjectItem(r, "metric")) &&
              cJSON_GetObjectItem(r, "step")->valueint == -1,
          "trial 3 running, found by name, no report yet");
    CHECK(n && cJSON_IsNull(cJSON_GetObjectItem(n, "metric")), "trial 4's NaN is null");
    cJSON *best = cJSON_GetObjectItem(o, "best");
    CHECK(best && !strcmp(str(best, "run"), "sw-t000") &&
              cJSON_GetObjectItem(best, "metric")->valuedouble == 1.5 &&
              cJSON_GetObjectItem(best, "step")->valueint == 9,
          "best: trial 0 (1.5 at step 9; not the failed 1.0 nor the stopped 0.5)");
    cJSON_Delete(o);

    o = get(&sv, "sweeps/f/sw", 200);
    tr = cJSON_GetObjectItem(o, "trials");
    CHECK(cJSON_GetArraySize(tr) == 1 &&
              cJSON_GetObjectItem(by_trial(tr, 0), "metric")->valuedouble == 0.1,
          "f/sw: its one trial");
    cJSON_Delete(o);
    o = get(&sv, "sweeps/sw", 404);
    CHECK(strstr(str(o, "error"), "sw") != NULL, "the bare id of two sweeps: 404 naming it: %s",
          str(o, "error"));
    cJSON_Delete(o);
    o = get(&sv, "sweeps/e/sw-t000", 404);
    CHECK(strstr(str(o, "error"), "not a sweep") != NULL, "a trial: 404 not a sweep");
    cJSON_Delete(o);
    o = get(&sv, "sweeps/e/nosuch", 404);
    CHECK(strstr(str(o, "error"), "nosuch") != NULL, "an unknown sweep: 404 naming it");
    cJSON_Delete(o);
    dt_sv_store_reset(&sv);
    CHECK_OK(dt_track_close(s));

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return dt_test_finish("test_sweep_api");
}
