/* Internals shared by the launcher's files (src/launch/). */
#ifndef DT_LAUNCH_IMPL_H
#define DT_LAUNCH_IMPL_H

#include <stddef.h>
#include "dtrain/launch.h"
#include "dtrain/track.h"

/* An executable on PATH (or the path itself when it contains '/'): 0 when found. */
int dt_launch_find_exe(const char *name, char *out, size_t n);
/* "h1:2<sep>h2:1" */
void dt_launch_hosts_format(const dt_launch_opts *o, const char *sep, char *buf, size_t n);

/* The launcher's records in the experiment store, between attempts (record.c). */
typedef struct dt_launch_track {
    dt_track *store; /* NULL: not tracking (tracking.uri=off, or after the first error) */
    char experiment[1100], run[1100];
    char ckpt_url[8300]; /* ckpt.dir or output.dir: where the resume checkpoint is looked for */
    char hosts[4096];    /* --hosts/--hostfile as "h1:2,h2:1"; "" when none was given */
    char local[300];     /* "<this host>:N" (no host list: mpirun starts every worker here) */
    char mlflow[2048];   /* tracking.uri when it is an MLflow server, else "" */
    char spool[8300];    /* <run dir>/mlflow-spool.jsonl */
    int world;
    int before; /* the run's attempt count before the running attempt */
    double started;
} dt_launch_track;

void dt_launch_track_attempt_start(dt_launch_track *t);
/* Ends the attempt that just exited (status, reason: NULL keeps rank 0's) and tags the run. */
void dt_launch_track_attempt_end(dt_launch_track *t, const char *status, const char *reason,
                                 int restarts);
/* The step of the checkpoint the next attempt resumes from; -1 when none or unknown. */
long long dt_launch_track_resume_step(const dt_launch_track *t);
void dt_launch_track_close(dt_launch_track *t);

/* launch.json: written whole to PATH.tmp and renamed over PATH. */
void dt_launch_record_write(const char *path, const void *cjson_record);

#endif
