/* dtrain runs compare / export (see src/cli/runs.c).
 *
 * compare: a header row of runs, then the params whose values differ between them (the
 * flattened resolved config; output.run_name aside: it names the runs in the header), then per
 * metric key its final value (latest attempt, highest step) and, for losses/perplexity and
 * accuracies, its best (min, max) with the step, side by side.
 * export: csv = one row per metric value (key,step,wall,value,attempt; NaN as empty); json = the
 * run, params, lineage, tags, artifacts (their metrics as objects) and every metric value. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli_runs.h"
#include "core/fsmode.h"
#include "dtrain/dtrain.h"
#include "track/track_json.h"

enum { EXIT_GOOD = 0, EXIT_BAD = 1, COL = 22, CELL = 320 };

static const char *lookup(const dt_runs_kv *l, const char *key) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->key[i], key)) return l->value[i];
    return NULL;
}

static void row(const char *label, int n, char **cells) {
    printf("%-30s", label);
    for (int i = 0; i < n; i++) printf(" %-*s", COL, cells[i]);
    printf("\n");
}

/* Every key of any run once, in first-seen order. */
static int add_key(dt_runs_kv *keys, const char *k) {
    return lookup(keys, k) ? 0 : dt_runs_kv_add(keys, k, "");
}

int dt_runs_compare(dt_track *s, int n, char **refs) {
    dt_track_run *r = calloc((size_t)n, sizeof *r);
    dt_runs_kv *par = calloc((size_t)n, sizeof *par), keys = {0}, mkeys = {0};
    dt_runs_summ *sm = calloc((size_t)n, sizeof *sm);
    char **cell = calloc((size_t)n, sizeof *cell);
    char *buf = calloc((size_t)n, CELL);
    int rc = r && par && sm && cell && buf ? EXIT_GOOD : EXIT_BAD;
    for (int i = 0; rc == EXIT_GOOD && i < n; i++) {
        cell[i] = buf + CELL * i;
        if (dt_track_run_find(s, refs[i], &r[i]) != DT_OK ||
            dt_track_params(s, r[i].id, dt_runs_kv_add, &par[i]) != DT_OK ||
            dt_runs_summ_load(s, r[i].id, &sm[i]) != DT_OK) {
            fprintf(stderr, "dtrain runs compare: %s\n", dt_last_error());
            rc = EXIT_BAD;
        }
    }
    if (rc == EXIT_GOOD) {
        for (int i = 0; i < n; i++) {
            snprintf(cell[i], CELL, "%lld: %s", (long long)r[i].id, r[i].name);
            for (int k = 0; k < par[i].n; k++) add_key(&keys, par[i].key[k]);
            for (int k = 0; k < sm[i].n; k++) add_key(&mkeys, sm[i].m[k].key);
        }
        row("run", n, cell);
        for (int i = 0; i < n; i++) snprintf(cell[i], CELL, "%s", r[i].experiment);
        row("experiment", n, cell);
        for (int i = 0; i < n; i++)
            snprintf(cell[i], CELL, "%s (%d attempt%s)", r[i].status, r[i].attempts,
                     r[i].attempts == 1 ? "" : "s");
        row("status", n, cell);
        printf("params that differ:\n");
        int ndiff = 0;
        for (int k = 0; k < keys.n; k++) {
            const char *key = keys.key[k], *v0 = lookup(&par[0], key);
            int differ = 0;
            for (int i = 1; i < n; i++) {
                const char *v = lookup(&par[i], key);
                differ |= !v0 || !v || strcmp(v0, v);
            }
            if (!differ || !strcmp(key, "output.run_name")) continue;
            for (int i = 0; i < n; i++) {
                const char *v = lookup(&par[i], key);
                snprintf(cell[i], CELL, "%s", !v ? "(none)" : v[0] ? v : "\"\"");
            }
            char label[256];
            snprintf(label, sizeof label, "  %s", key);
            row(label, n, cell);
            ndiff++;
        }
        if (!ndiff) printf("  (none)\n");
        printf("metrics (value @ step):\n");
        for (int k = 0; k < mkeys.n; k++) {
            const char *key = mkeys.key[k];
            int dir = dt_runs_best_dir(key);
            for (int what = 0; what < (dir ? 2 : 1); what++) {
                for (int i = 0; i < n; i++) {
                    const dt_track_summary *m = dt_runs_summ_find(&sm[i], key);
                    char v[64];
                    if (!m) {
                        snprintf(cell[i], CELL, "-");
                        continue;
                    }
                    double x = what == 0 ? m->last : dir > 0 ? m->max : m->min;
                    long long at = what == 0 ? m->last_step : dir > 0 ? m->max_step : m->min_step;
                    snprintf(cell[i], CELL, "%s @ %lld", dt_runs_num(x, v, sizeof v), at);
                }
                char label[256];
                snprintf(label, sizeof label, "  %s %s", key,
                         what == 0 ? "final"
                         : dir > 0 ? "best (max)"
                                   : "best (min)");
                row(label, n, cell);
            }
        }
    }
    for (int i = 0; par && sm && i < n; i++) dt_runs_kv_free(&par[i]), dt_runs_summ_free(&sm[i]);
    dt_runs_kv_free(&keys), dt_runs_kv_free(&mkeys);
    free(r), free(par), free(sm), free(cell), free(buf);
    return rc;
}

/* ---- export --------------------------------------------------------------------------------- */

static int csv_row(void *ud, const dt_track_metric_row *m) {
    FILE *f = ud;
    fprintf(f, "%s,%lld,%.6f,", m->key, (long long)m->step, m->wall);
    if (!isnan(m->value)) fprintf(f, "%.17g", m->value);
    fprintf(f, ",%d\n", m->attempt);
    return 0;
}

static int json_kv(void *ud, const char *key, const char *value) {
    cJSON_AddStringToObject(ud, key, value);
    return 0;
}

/* Exact doubles: cJSON prints 15 significant digits whenever they read back within a relative
 * epsilon, which loses the last bits; export keeps every value as stored (%.17g). */
static cJSON *num_exact(double v) {
    char b[40];
    if (isnan(v) || isinf(v)) return cJSON_CreateNull();
    snprintf(b, sizeof b, "%.17g", v);
    return cJSON_CreateRaw(b);
}

static int json_metric(void *ud, const dt_track_metric_row *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", m->key);
    cJSON_AddNumberToObject(o, "step", (double)m->step);
    cJSON_AddItemToObject(o, "wall", num_exact(m->wall));
    cJSON_AddItemToObject(o, "value", num_exact(m->value));
    cJSON_AddNumberToObject(o, "attempt", m->attempt);
    cJSON_AddItemToArray(ud, o);
    return 0;
}

static int json_artifact(void *ud, const dt_track_artifact_row *a) {
    cJSON_AddItemToArray(ud, dt_track_artifact_json(a));
    return 0;
}

static int json_attempt(void *ud, const dt_track_attempt *a) {
    cJSON_AddItemToArray(ud, dt_track_attempt_json(a));
    return 0;
}

static cJSON *run_json(dt_track *s, const dt_track_run *r) {
    cJSON *o = cJSON_CreateObject(), *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddNumberToObject(run, "id", (double)r->id);
    cJSON_AddStringToObject(run, "experiment", r->experiment);
    cJSON_AddStringToObject(run, "name", r->name);
    cJSON_AddStringToObject(run, "status", r->status);
    cJSON_AddNumberToObject(run, "attempts", r->attempts);
    cJSON_AddNumberToObject(run, "world_size", r->world);
    cJSON_AddStringToObject(run, "hosts", r->hosts);
    cJSON_AddNumberToObject(run, "start_time", r->start_time);
    cJSON_AddItemToObject(run, "end_time",
                          r->end_time > 0 ? cJSON_CreateNumber(r->end_time) : cJSON_CreateNull());
    cJSON_AddStringToObject(run, "exit_reason", r->exit_reason);
    dt_status st = dt_track_params(s, r->id, json_kv, cJSON_AddObjectToObject(o, "params"));
    if (st == DT_OK)
        st = dt_track_lineage(s, r->id, json_kv, cJSON_AddObjectToObject(o, "lineage"));
    if (st == DT_OK) st = dt_track_tags(s, r->id, json_kv, cJSON_AddObjectToObject(o, "tags"));
    if (st == DT_OK)
        st = dt_track_artifacts(s, r->id, json_artifact, cJSON_AddArrayToObject(o, "artifacts"));
    if (st == DT_OK) /* each attempt's status and reason (the count is run.attempts) */
        st = dt_track_attempts(s, r->id, json_attempt, cJSON_AddArrayToObject(o, "attempts"));
    if (st == DT_OK)
        st = dt_track_metrics(s, r->id, NULL, json_metric, cJSON_AddArrayToObject(o, "metrics"));
    if (st != DT_OK) cJSON_Delete(o);
    return st == DT_OK ? o : NULL;
}

int dt_runs_export(dt_track *s, const char *ref, const char *format, const char *out_path) {
    dt_track_run r;
    if (dt_track_run_find(s, ref, &r) != DT_OK) {
        fprintf(stderr, "dtrain runs export: %s\n", dt_last_error());
        return EXIT_BAD;
    }
    FILE *f = out_path ? dt_fcreate(out_path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "dtrain runs export: %s: cannot create the file\n", out_path);
        return EXIT_BAD;
    }
    dt_status st = DT_OK;
    if (!strcmp(format, "csv")) {
        fprintf(f, "key,step,wall,value,attempt\n");
        st = dt_track_metrics(s, r.id, NULL, csv_row, f);
    } else {
        cJSON *o = run_json(s, &r);
        char *txt = o ? cJSON_Print(o) : NULL;
        if (txt) fprintf(f, "%s\n", txt);
        if (!txt && o) st = dt_error_set(DT_ERR_NOMEM, "export: out of memory");
        if (!o) st = DT_ERR_IO;
        free(txt);
        cJSON_Delete(o);
    }
    int bad = ferror(f);
    if (out_path && fclose(f) != 0) bad = 1;
    if (st != DT_OK || bad) {
        fprintf(stderr, "dtrain runs export: %s\n", st != DT_OK ? dt_last_error() : "write failed");
        return EXIT_BAD;
    }
    return EXIT_GOOD;
}
