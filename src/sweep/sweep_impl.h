/* Internal to src/sweep: the state of a running sweep, kept in sweep.json (state.c) and driven
 * by the supervisor (run.c). */
#ifndef DT_SWEEP_IMPL_H
#define DT_SWEEP_IMPL_H

#include <sys/types.h>
#include "dtrain/sweep.h"

typedef enum trial_status {
    T_PENDING = 0, /* not started */
    T_RUNNING,     /* a process trains it to `target` */
    T_PROMOTED,    /* continued past a rung: waits for a slot to train to `target` */
    T_STOPPED,     /* stopped early at `step` */
    T_DONE,        /* trained to max_steps */
    T_FAILED       /* its process failed */
} trial_status;

typedef struct sweep_trial {
    dt_sweep_trial p;
    trial_status status;
    int64_t step, target; /* last step reported, the step it trains to */
    int n_reports;
    int64_t rep_step[DT_SWEEP_MAX_RUNGS + 1];
    double rep_val[DT_SWEEP_MAX_RUNGS + 1];
    int segments; /* processes started (a promotion resumes the run: one more attempt) */
    pid_t pid;    /* while running */
    char run[160];
    char why[256];
} sweep_trial;

typedef struct sweep_state {
    dt_sweep_spec spec;
    char id[128], dir[4096], json[4200];
    char experiment[256], out_dir[4096], store[4200];
    int slots, threads, n;
    sweep_trial *t;
    double started;
    char status[32];
} sweep_state;

extern const char *const dt_sweep_status_names[];

/* sweep.json: the spec (as read), the trials and what happened to each. Atomic rewrite. */
dt_status dt_sweep_state_save(const sweep_state *s);
/* Reads it back (st->t malloc'ed). */
dt_status dt_sweep_state_load(const char *path, sweep_state *s);

#endif
