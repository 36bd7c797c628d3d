/* Hyperparameter sweeps (`dtrain sweep`): a spec (a base config, overrides, parameters to vary,
 * a sampler, a metric, an early-stopping rule), the trials sampled from it, the schedulers that
 * stop trials early (ASHA, the median rule), and the supervisor that runs the trials as normal
 * `dtrain train` processes on slots of this machine, or as `dtrain launch` jobs across hosts.
 *
 *   dt_sweep_spec *s;
 *   dt_sweep_spec_load("sweep.yaml", &s);          // every key checked against the schema
 *   dt_sweep_trial *t; int n;
 *   dt_sweep_sample(s, &t, &n);                     // grid, random or Sobol
 *   ...
 *   free(t); dt_sweep_spec_free(s);
 *
 * A trial is a list of `key=value` overrides on top of the base config and the spec's own
 * overrides. Trials are numbered 0, 1, ... in sampling order. */
#ifndef DTRAIN_SWEEP_H
#define DTRAIN_SWEEP_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_SWEEP_MAX_PARAMS 24
#define DT_SWEEP_MAX_VALUES 64
#define DT_SWEEP_MAX_OVER 32
#define DT_SWEEP_MAX_TRIALS 1024
#define DT_SWEEP_MAX_RUNGS 16
#define DT_SWEEP_KEY 96
#define DT_SWEEP_VAL 256

typedef enum dt_sweep_sampler {
    DT_SWEEP_GRID = 0,
    DT_SWEEP_RANDOM = 1,
    DT_SWEEP_SOBOL = 2
} dt_sweep_sampler;

typedef enum dt_sweep_kind {
    DT_SWEEP_VALUES = 0,  /* values: [...]: crossed by the grid, chosen from by random/Sobol */
    DT_SWEEP_CHOICE = 1,  /* choice: [...]: the same as values (a name Ray Tune users know) */
    DT_SWEEP_UNIFORM = 2, /* min, max: uniform in [min, max] */
    DT_SWEEP_LOG = 3,     /* min, max, distribution: log_uniform: exp(uniform(log min, log max)) */
    DT_SWEEP_INT = 4      /* min, max, distribution: int: an integer in [min, max], uniformly */
} dt_sweep_kind;

typedef enum dt_sweep_rule {
    DT_SWEEP_NONE = 0,  /* every trial trains to max_steps */
    DT_SWEEP_ASHA = 1,  /* asynchronous successive halving */
    DT_SWEEP_MEDIAN = 2 /* the median stopping rule */
} dt_sweep_rule;

typedef struct dt_sweep_param {
    char key[DT_SWEEP_KEY];
    dt_sweep_kind kind;
    double lo, hi;
    int n_values;
    char values[DT_SWEEP_MAX_VALUES][DT_SWEEP_VAL];
    /* when: {KEY: VALUE}: the parameter exists only in trials whose KEY (an earlier parameter)
     * has VALUE (compared as the override text); "" = always */
    char when_key[DT_SWEEP_KEY], when_value[DT_SWEEP_VAL];
} dt_sweep_param;

typedef struct dt_sweep_spec {
    char path[4096]; /* the sweep file */
    char base[4096]; /* the base config, made absolute (relative to the sweep file's folder) */
    int n_over;
    char over[DT_SWEEP_MAX_OVER][DT_SWEEP_VAL + DT_SWEEP_KEY];
    int n_params;
    dt_sweep_param params[DT_SWEEP_MAX_PARAMS];
    dt_sweep_sampler sampler;
    uint64_t seed;
    int shuffle;        /* grid: 1 = the trials in a permutation drawn from seed */
    int trials;         /* random/Sobol: how many; grid: 0 = the whole grid, else its first N */
    int max_concurrent; /* trials running at once (0: the slots) */
    int metric_val;     /* 1: val_loss (eval_loss in the store), 0: train_loss (loss) */
    int mode_max;       /* 1: bigger is better */
    dt_sweep_rule rule;
    int64_t max_steps;    /* train.steps of a trial that is never stopped */
    int64_t grace_period; /* the first rung (ASHA), the first decision (median) */
    int reduction_factor; /* ASHA's rf (>= 2) */
    int min_samples;      /* median rule: other trials needed at a rung before stopping any */
} dt_sweep_spec;

/* Reads and checks a sweep file: unknown or misspelt spec keys, parameter keys that are not
 * config keys (or are output.* / tracking.* / train.steps, which the sweep owns), values of the
 * wrong type or out of the key's range (each value is set on a default config), a base config
 * that does not load with the overrides. One line naming the file, the key and what is wrong. */
dt_status dt_sweep_spec_load(const char *path, dt_sweep_spec **out);
void dt_sweep_spec_free(dt_sweep_spec *s);

typedef struct dt_sweep_trial {
    int n;
    char key[DT_SWEEP_MAX_PARAMS][DT_SWEEP_KEY];
    char value[DT_SWEEP_MAX_PARAMS][DT_SWEEP_VAL];
} dt_sweep_trial;

/* The trials of the spec, in order (*out malloc'ed; free()). Grid: the cartesian product of the
 * parameters' values, the first parameter varying slowest, a conditional parameter crossed only
 * where its condition holds; with shuffle, the whole grid in a Fisher-Yates permutation keyed
 * by seed (Philox), then cut to `trials` (a random subset). Random: Philox draws keyed by (seed,
 * trial, parameter). Sobol: point trial + 1 of the unscrambled Sobol sequence (the origin is
 * skipped), one dimension per parameter. */
dt_status dt_sweep_sample(const dt_sweep_spec *s, dt_sweep_trial **out, int *n);

/* Point `index` (0 = the origin) of the unscrambled Sobol sequence in `dims` dimensions
 * (1 <= dims <= DT_SWEEP_MAX_PARAMS), Gray-code order, as scipy.stats.qmc.Sobol(scramble=False)
 * yields them. Joe and Kuo's direction numbers (new-joe-kuo-6.21201). */
dt_status dt_sobol_point(uint32_t index, int dims, double *x);

/* ---- Early stopping ------------------------------------------------------------------------ */

/* ASHA as Ray Tune's AsyncHyperBandScheduler (one bracket): rungs at grace * rf^k steps,
 * k < floor(log(max_t / grace) / log(rf)) + 1; a trial reaching a rung continues when its
 * metric is not below the (1 - 1/rf) quantile (linear interpolation) of the values recorded at
 * that rung before it, else it stops; a result at max_t stops the trial (it is done). */
typedef struct dt_asha {
    int rf, mode_max, n_rungs;
    int64_t max_t, rung[DT_SWEEP_MAX_RUNGS]; /* ascending */
    int n_rec[DT_SWEEP_MAX_RUNGS];
    int rec_trial[DT_SWEEP_MAX_RUNGS][DT_SWEEP_MAX_TRIALS];
    double rec_val[DT_SWEEP_MAX_RUNGS][DT_SWEEP_MAX_TRIALS];
} dt_asha;

dt_status dt_asha_init(dt_asha *a, int64_t grace, int64_t max_t, int rf, int mode_max);
/* A result of `trial` at `step`: 1 continue, 0 stop. */
int dt_asha_on_result(dt_asha *a, int trial, int64_t step, double metric);
/* The rung after `step` (the next step the trial must report at), max_t after the last. */
int64_t dt_asha_next(const dt_asha *a, int64_t step);

/* The median stopping rule (Golovin et al., Google Vizier; Ray Tune's MedianStoppingRule, here
 * decided at reports only): a trial reporting at step t >= grace stops when its best value so
 * far is worse than the median of the other trials' running means (their values reported up to
 * t, averaged), once at least min_samples other trials have reported at or past t. Values are
 * kept per trial in report order. */
typedef struct dt_median {
    int mode_max, min_samples;
    int64_t grace;
    int n_trials;
    int n_rep[DT_SWEEP_MAX_TRIALS];
    int64_t *step[DT_SWEEP_MAX_TRIALS];
    double *val[DT_SWEEP_MAX_TRIALS];
} dt_median;

dt_status dt_median_init(dt_median *m, int64_t grace, int min_samples, int mode_max);
int dt_median_on_result(dt_median *m, int trial, int64_t step, double metric);
void dt_median_free(dt_median *m);

/* ---- Running a sweep ----------------------------------------------------------------------- */

typedef struct dt_sweep_opts {
    const char *exe;  /* the dtrain binary the trials run */
    int slots;        /* trials at once on this machine */
    int threads;      /* train.threads of each trial */
    int quiet;        /* no per-trial lines on stdout */
    const char *name; /* the sweep id (NULL: sweep-YYYYMMDD-HHMMSS) */
    FILE *log;        /* progress lines (NULL: stdout) */
    /* Trials across hosts: "h1:4,h2:2" (an Open MPI host list; or hostfile, a file of
     * "HOST slots=N" lines). Each trial is then a `dtrain launch -n workers --hosts H:workers`
     * job on one host, and a host of S slots runs S / workers trials at once (slots above must be
     * 0: the hosts give them). The hosts must see output.dir at the same path (a shared file
     * system): the trials write their checkpoints and the store there, and the sweep reads their
     * metrics from it. NULL: this machine. */
    const char *hosts, *hostfile;
    int workers;             /* MPI workers of each trial (0: 1; > 1 also on this machine) */
    const char *mpirun;      /* dtrain launch --mpirun (NULL: its default) */
    const char *mpirun_args; /* dtrain launch --mpirun-args (NULL: none) */
} dt_sweep_opts;

typedef struct dt_sweep_result {
    char id[128], dir[4096];
    int trials, done, stopped, failed;
    int best;           /* trial index, -1 if none */
    double best_value;  /* its metric */
    char best_run[256]; /* its run name */
    int interrupted;    /* stopped by a signal (resume with dt_sweep_resume) */
} dt_sweep_result;

/* Starts a new sweep: samples the trials, writes <output.dir>/<experiment>/<id>/sweep.json,
 * records the sweep as a run of the store (tag sweep.kind=sweep) and runs the trials. */
dt_status dt_sweep_run(const dt_sweep_spec *s, const dt_sweep_opts *o, dt_sweep_result *r);
/* Continues the sweep whose sweep.json is at `json_path`: finished trials are kept, trials that
 * were running are resumed from their newest checkpoint. */
dt_status dt_sweep_resume(const char *json_path, const dt_sweep_opts *o, dt_sweep_result *r);
/* Finds <dir>/<experiment>/<id>/sweep.json for an id (dir: the output.dir, "runs" by default). */
dt_status dt_sweep_find(const char *dir, const char *id, char *path, size_t n);
/* Prints the sweep whose sweep.json is at `json_path`: its status, each trial (run, status,
 * step, metric, params) and the best; json: one JSON object (sweep.json's
 * content plus "best"). */
dt_status dt_sweep_show(const char *json_path, FILE *f, int json);
/* The summary of a sweep.json (what dt_sweep_run returns), for `--json` after a run. */
dt_status dt_sweep_summary(const char *json_path, dt_sweep_result *r);
/* Asks a running dt_sweep_run/resume to stop (signal-safe): trials get SIGTERM, checkpoint and
 * exit 75; the sweep saves its state and returns with r->interrupted. */
void dt_sweep_request_stop(void);

#ifdef __cplusplus
}
#endif
#endif
