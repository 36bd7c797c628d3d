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
    int slot;     /* while running across hosts: its slot (slots.c); not saved */
    char run[160];
    char why[256];
} sweep_trial;

#define DT_SWEEP_MAX_SLOTS 256 /* trials at once across hosts */

typedef struct sweep_state {
    dt_sweep_spec spec;
    char id[128], dir[4096], json[4200];
    char experiment[256], out_dir[4096], store[4200];
    int slots, threads, n;
    /* Trials as `dtrain launch` jobs (slots.c): across hosts ("h1:4,h2:2", "" for this machine
     * only) or of several workers each; saved, so that --resume places them alike. */
    int launch, workers;
    char hosts[2048], mpirun[1024], mpirun_args[2048];
    char slot_host[DT_SWEEP_MAX_SLOTS][256]; /* per slot: its host ("" this machine) */
    unsigned char slot_busy[DT_SWEEP_MAX_SLOTS];
    sweep_trial *t;
    double started;
    char status[32];
} sweep_state;

extern const char *const dt_sweep_status_names[];

/* Slots and threads from the options (and, on --resume, what sweep.json saved): s->slots trials
 * at once, s->threads threads each; with hosts or workers > 1, s->launch and the slot table.
 * Errors name the option. */
dt_status dt_sweep_slots_init(sweep_state *s, const dt_sweep_opts *o);
/* A free slot, marked busy (-1: none; the supervisor starts no more than s->slots). */
int dt_sweep_slot_take(sweep_state *s);
void dt_sweep_slot_give(sweep_state *s, int slot);

/* sweep.json: the spec (as read), the trials and what happened to each. Atomic rewrite. */
dt_status dt_sweep_state_save(const sweep_state *s);
/* Reads it back (st->t malloc'ed). */
dt_status dt_sweep_state_load(const char *path, sweep_state *s);

#endif
