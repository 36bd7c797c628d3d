/* The launcher: runs, supervises and recovers a multi-worker training job (`dtrain launch`).
 *
 *   dt_launch_opts o;
 *   dt_launch_opts_init(&o);                  // 1 thread per worker, 3 retries, 1 s backoff
 *   o.workers = 2, o.config = "job.yaml";
 *   dt_launch_hosts_parse(&o, "node1:2,node2:1");   // optional; or dt_launch_hostfile_read
 *   int code;
 *   if (dt_launch_run(&o, &code) != DT_OK) ... // nothing started: dt_last_error() says why
 *   exit(code);                               // 0 done, 75 preempted (checkpoint saved), 1 failed
 *
 * dt_launch_run validates the config and the resources before starting anything, names the run
 * (output.run_name, or a timestamp: dt_trainer_run_name) so that every attempt shares its
 * checkpoints, and starts the workers (`dtrain train`) through mpirun, which places them on the
 * hosts. Their output is printed with a "[wR] " prefix. When the job fails -- a worker killed, a
 * node lost, a non-zero exit -- it records the cause, waits (exponential backoff) and starts the
 * whole job again with ckpt.resume=auto, as the policy below decides. dt_launch_stop (from a
 * signal handler) becomes SIGUSR1 to mpirun, which forwards it to every worker: they agree on a
 * step, save a checkpoint and exit 75; dt_launch_run then returns 75 too.
 *
 * Every attempt is recorded in <output.dir>/<experiment>/<run>/launch.json and in the
 * experiment store (tracking.uri): rank 0 begins each attempt there and writes its metrics; once
 * the attempt's processes have exited, the launcher ends it with what only it knows (the worker
 * that died and how, the restart and the checkpoint it resumes from, giving up) and tags the run
 * (restarts, the host list). The two never write at the same time. A store the launcher cannot
 * open is one warning, and the workers run with tracking.uri=off; training goes on.
 *
 * The pieces are public so that they can be tested alone: the host list, the reading of
 * mpirun's output (dt_launch_attempt_line), the retry policy (dt_launch_policy_next). */
#ifndef DTRAIN_LAUNCH_H
#define DTRAIN_LAUNCH_H

#include <stddef.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_LAUNCH_MAX_HOSTS 256
#define DT_LAUNCH_EXIT_PREEMPTED 75 /* EX_TEMPFAIL: a checkpoint was saved, resume me */

typedef struct dt_launch_host {
    char name[256];
    int slots;
} dt_launch_host;

typedef struct dt_launch_opts {
    int workers;      /* total worker processes (-n) */
    int threads;      /* threads per worker (train.threads, OMP_NUM_THREADS) */
    int max_failures; /* restarts allowed; -1 = no limit */
    int oversubscribe;
    double backoff_s; /* first wait before a restart; doubled per failure up to 60 s */
    dt_launch_host hosts[DT_LAUNCH_MAX_HOSTS];
    int n_hosts;             /* 0: every worker on this host */
    const char *mpirun;      /* a name on PATH or a path; default "mpirun" */
    const char *mpirun_args; /* extra mpirun arguments, split at spaces; NULL: none */
    const char *worker;      /* the dtrain binary the workers run; NULL: this executable */
    const char *config;      /* the job's YAML config */
    int n_over;
    char **over; /* "section.key=value" overrides */
    /* monitoring: the dashboard and /metrics of the run while it trains (include/dtrain/serve.h) */
    int monitor_port; /* -1: off; 0: any free port */
    const char *monitor_addr, *monitor_token, *monitor_token_file;
    int monitor_insecure;
    /* out (NULL: not wanted): the run directory (output.dir/experiment/run), set once the run is
     * named, so a caller can read its launch.json and run.json afterwards */
    char *run_dir_out;
    size_t run_dir_out_n;
} dt_launch_opts;

/* Defaults: 1 thread per worker, 3 retries, 1 s backoff, mpirun from PATH, no monitor. */
void dt_launch_opts_init(dt_launch_opts *o);
/* Appends "h1:2,h2:1" (a host without ":slots" has 1 slot) to o->hosts. */
dt_status dt_launch_hosts_parse(dt_launch_opts *o, const char *list);
/* Appends the hosts of an Open MPI hostfile: "HOST [slots=N]" per line, '#' comments. */
dt_status dt_launch_hostfile_read(dt_launch_opts *o, const char *path);
/* Refuses resources that cannot be met: slots (or this host's cores) fewer than workers x
 * threads without oversubscribe, a host name that does not resolve. DT_ERR_INVALID. */
dt_status dt_launch_check_resources(const dt_launch_opts *o);

/* What one attempt showed in the workers' output. */
typedef struct dt_launch_attempt {
    long long first_step, last_step; /* rank 0's "step N/M" lines; -1 before the first */
    long long resumed_step;          /* "resumed from ...: step N"; -1: not resumed */
    int failed_rank, failed_code, failed_signal; /* mpirun's report; -1 / 0 when none */
    /* A worker's hang watchdog (dist.timeout_s, include/dtrain/dist.h): its first line, from
     * "rank R (host H): ..." to "(dist.timeout_s)"; "" when none fired. */
    char hang[320];
} dt_launch_attempt;

void dt_launch_attempt_init(dt_launch_attempt *a);
/* Reads one line of mpirun --tag-output ("[JOB,RANK]<stdout>:TEXT") into `a`; returns the
 * worker's text (a pointer into `line`) and its rank in *rank, or the whole line and -1 for
 * mpirun's own output, whose failure reports ("process rank R ... exited on signal S", "Process
 * name: [[J,1],R]", "Exit code: C") it also reads. */
const char *dt_launch_attempt_line(dt_launch_attempt *a, const char *line, int *rank);
/* One line: "finished", "worker 1 killed by signal 9 (Killed)", "hang: rank 0 (host a):
 * all-reduce of gradient bucket 3 at step 120 made no progress for 60 s (dist.timeout_s)", ...
 * for exit status `code`. */
void dt_launch_attempt_cause(const dt_launch_attempt *a, int code, char *buf, size_t n);
/* One word for launch.json's "reason": "finished", "preempted", "hang" (a worker's watchdog
 * fired: its line was seen or mpirun exited DT_COMM_EXIT_HANG), "killed" (a worker died of a
 * signal), "config-or-data" (exit 2), "failed" (anything else). */
const char *dt_launch_attempt_reason(const dt_launch_attempt *a, int code);

/* The retry policy: config and data errors (exit 2, 127) are not retried, nor are three
 * attempts in a row that made no progress (rank 0's last step did not pass the best so far),
 * nor more than max_failures failures. */
typedef struct dt_launch_policy {
    int max_failures;
    double backoff_s;
    int failures;    /* failed attempts so far */
    int no_progress; /* failed attempts in a row without progress */
    long long best_step;
} dt_launch_policy;

typedef enum dt_launch_verdict {
    DT_LAUNCH_DONE,        /* exit 0 */
    DT_LAUNCH_PREEMPTED,   /* exit 75: the workers saved a checkpoint */
    DT_LAUNCH_STOPPED,     /* a stop was requested and the workers did not confirm a save */
    DT_LAUNCH_NOT_RETRIED, /* a config or data error */
    DT_LAUNCH_NO_PROGRESS, /* the third failure in a row without progress */
    DT_LAUNCH_GAVE_UP,     /* more than max_failures failures */
    DT_LAUNCH_RESTART,     /* restart after *wait_s seconds */
} dt_launch_verdict;

void dt_launch_policy_init(dt_launch_policy *p, int max_failures, double backoff_s);
/* Decides what follows an attempt that exited with `code` (mpirun's status, 128 + signal when
 * killed); counts the failure; sets *wait_s for DT_LAUNCH_RESTART. */
dt_launch_verdict dt_launch_policy_next(dt_launch_policy *p, const dt_launch_attempt *a, int code,
                                        int stop_requested, double *wait_s);

/* Runs the job to its end; *exit_code: 0 done, 75 preempted (checkpoint saved; resume with the
 * same command), 1 failed or stopped without a checkpoint. Returns an error (and starts no
 * worker) when the config, the resources, mpirun or the run directory are not usable. */
dt_status dt_launch_run(const dt_launch_opts *o, int *exit_code);
/* Asks the running job to checkpoint and stop. Async-signal-safe: call it from SIGTERM/SIGINT. */
void dt_launch_stop(int sig);

#ifdef __cplusplus
}
#endif
#endif
