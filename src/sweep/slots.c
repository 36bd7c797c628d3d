/* Where a sweep's trials run: slots of this machine (one `dtrain train` process each, the cores
 * split between them), or `dtrain launch` jobs -- across the hosts of --hosts/--hostfile, or of
 * several workers each on this machine. A host of S slots holds S / workers trials at once; a
 * trial takes one slot for the whole of a segment (to its next rung) and gives it back when its
 * process ends, so a promoted trial may continue on another host (its checkpoint is in the
 * shared output.dir). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/launch.h"
#include "sweep/sweep_impl.h"

/* this machine's cores split between the slots (and each trial's workers) */
static int split_cores(int slots, int workers) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cores / ((long)slots * workers);
    return t > 0 ? (int)t : 1;
}

static dt_status host_slots(sweep_state *s, const dt_launch_opts *lo, const char *what) {
    s->slots = 0;
    for (int h = 0; h < lo->n_hosts; h++)
        for (int k = 0; k + s->workers <= lo->hosts[h].slots; k += s->workers) {
            if (s->slots == DT_SWEEP_MAX_SLOTS)
                return dt_error_set(DT_ERR_INVALID, "%s: more than %d trials at once", what,
                                    DT_SWEEP_MAX_SLOTS);
            snprintf(s->slot_host[s->slots++], sizeof s->slot_host[0], "%s", lo->hosts[h].name);
        }
    if (!s->slots)
        return dt_error_set(DT_ERR_INVALID,
                            "%s: no host has %d slots for a trial's %d workers "
                            "(--workers-per-trial)",
                            what, s->workers, s->workers);
    return DT_OK;
}

dt_status dt_sweep_slots_init(sweep_state *s, const dt_sweep_opts *o) {
    memset(s->slot_busy, 0, sizeof s->slot_busy);
    if (o->workers > 0) s->workers = o->workers;
    if (s->workers < 1) s->workers = 1;
    if (o->mpirun) snprintf(s->mpirun, sizeof s->mpirun, "%s", o->mpirun);
    if (o->mpirun_args) snprintf(s->mpirun_args, sizeof s->mpirun_args, "%s", o->mpirun_args);
    const char *what = o->hostfile ? "--hostfile" : "--hosts";
    int across = o->hosts || o->hostfile || s->hosts[0]; /* saved: --resume */
    if (across && o->slots > 0)
        return dt_error_set(DT_ERR_INVALID, "--slots with %s: the hosts' slots are the sweep's",
                            o->hosts || o->hostfile ? what : "a sweep across hosts");
    if (across) {
        dt_launch_opts lo;
        dt_launch_opts_init(&lo);
        dt_status st = o->hostfile ? dt_launch_hostfile_read(&lo, o->hostfile)
                       : o->hosts  ? dt_launch_hosts_parse(&lo, o->hosts)
                                   : dt_launch_hosts_parse(&lo, s->hosts); /* --resume */
        if (st != DT_OK) return st;
        if ((st = host_slots(s, &lo, what)) != DT_OK) return st;
        size_t l = 0;
        for (int h = 0; h < lo.n_hosts && l < sizeof s->hosts; h++)
            l += (size_t)snprintf(s->hosts + l, sizeof s->hosts - l, "%s%s:%d", h ? "," : "",
                                  lo.hosts[h].name, lo.hosts[h].slots);
        s->launch = 1;
        /* the other hosts' cores are not known here: dtrain launch's default, 1 a worker */
        s->threads = o->threads > 0 ? o->threads : s->threads > 0 ? s->threads : 1;
    } else {
        s->slots = o->slots > 0 ? o->slots : s->slots;
        if (s->slots <= 0) s->slots = s->spec.max_concurrent > 0 ? s->spec.max_concurrent : 1;
        if (s->slots > DT_SWEEP_MAX_SLOTS && s->workers > 1)
            return dt_error_set(DT_ERR_INVALID, "--slots %d: at most %d trials of several workers",
                                s->slots, DT_SWEEP_MAX_SLOTS);
        s->launch = s->workers > 1;
        for (int k = 0; s->launch && k < s->slots; k++) s->slot_host[k][0] = '\0';
        s->threads = o->threads > 0   ? o->threads
                     : s->threads > 0 ? s->threads /* --resume */
                                      : split_cores(s->slots, s->workers);
    }
    if (s->spec.max_concurrent > 0 && s->slots > s->spec.max_concurrent)
        s->slots = s->spec.max_concurrent; /* the first slots: the first hosts' */
    return DT_OK;
}

int dt_sweep_slot_take(sweep_state *s) {
    if (!s->launch) return 0; /* this machine's slots are interchangeable */
    for (int k = 0; k < s->slots; k++)
        if (!s->slot_busy[k]) {
            s->slot_busy[k] = 1;
            return k;
        }
    return -1;
}

void dt_sweep_slot_give(sweep_state *s, int slot) {
    if (s->launch && slot >= 0 && slot < s->slots) s->slot_busy[slot] = 0;
}
