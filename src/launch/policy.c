/* What the launcher reads from an attempt and decides after it: the workers' progress and
 * mpirun's failure reports, the one-line cause, and the retry policy. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dist.h"
#include "dtrain/launch.h"

void dt_launch_attempt_init(dt_launch_attempt *a) {
    *a = (dt_launch_attempt){.first_step = -1,
                             .last_step = -1,
                             .resumed_step = -1,
                             .failed_rank = -1,
                             .failed_code = -1,
                             .failed_signal = 0};
}

const char *dt_launch_attempt_line(dt_launch_attempt *a, const char *line, int *rank_out) {
    int jobid, rank, off = 0;
    char stream[16];
    const char *text = line;
    *rank_out = -1;
    if (sscanf(line, "[%d,%d]<%15[a-z]>:%n", &jobid, &rank, stream, &off) == 3 && off > 0) {
        text = line + off;
        *rank_out = rank;
        if (rank == 0) {
            long long s, tot;
            if (sscanf(text, "step %lld/%lld", &s, &tot) == 2) {
                if (a->first_step < 0) a->first_step = s;
                a->last_step = s;
            }
            const char *r = strstr(text, "resumed from ");
            const char *st = r ? strstr(r, ": step ") : NULL;
            if (st) a->resumed_step = atoll(st + 7);
        }
        /* the hang watchdog's line: "dtrain: rank R (host H): ... (dist.timeout_s): WHO;
         * aborting ...", WHO naming the rank that has not arrived when the board knows it */
        const char *h = strstr(text, "dtrain: rank "), *k = strstr(text, "(dist.timeout_s)");
        if (h && k > h && strstr(text, "made no progress for") && !a->hang[0]) {
            h += strlen("dtrain: ");
            const char *e = strstr(k, "; aborting the job");
            if (!e) e = strstr(k, "; no hang handler");
            if (!e) e = k + strlen("(dist.timeout_s)");
            int len = (int)(e - h);
            while (len > 0 && (h[len - 1] == '\n' || h[len - 1] == '\r')) len--;
            snprintf(a->hang, sizeof a->hang, "%.*s", len, h);
        }
        return text;
    }
    /* Open MPI 4's reports: "process rank 1 with PID 0 on node vm exited on signal 9 (Killed)"
     * and "Process name: [[25211,1],0]" followed by "Exit code:    75". */
    const char *p = strstr(line, "process rank ");
    int sig;
    if (p && sscanf(p, "process rank %d", &rank) == 1) {
        a->failed_rank = rank;
        const char *q = strstr(p, "on signal ");
        if (q && sscanf(q, "on signal %d", &sig) == 1) a->failed_signal = sig;
    }
    p = strstr(line, "Process name: [[");
    if (p && sscanf(p, "Process name: [[%d,%*d],%d]", &jobid, &rank) == 2) a->failed_rank = rank;
    p = strstr(line, "Exit code:");
    if (p) a->failed_code = atoi(p + 10);
    return line;
}

void dt_launch_attempt_cause(const dt_launch_attempt *a, int code, char *buf, size_t n) {
    if (code == 0)
        snprintf(buf, n, "finished");
    else if (code == DT_LAUNCH_EXIT_PREEMPTED)
        snprintf(buf, n, "preempted: checkpoint saved");
    else if (a->hang[0])
        snprintf(buf, n, "hang: %s", a->hang);
    else if (code == DT_COMM_EXIT_HANG || a->failed_code == DT_COMM_EXIT_HANG)
        snprintf(buf, n,
                 "hang: a worker's collective made no progress within dist.timeout_s "
                 "(exit status %d)",
                 DT_COMM_EXIT_HANG);
    else if (a->failed_rank >= 0 && a->failed_signal)
        snprintf(buf, n, "worker %d killed by signal %d (%s)", a->failed_rank, a->failed_signal,
                 strsignal(a->failed_signal));
    else if (a->failed_rank >= 0 && a->failed_code >= 0)
        snprintf(buf, n, "worker %d exited with status %d%s", a->failed_rank, a->failed_code,
                 a->failed_code == 2 ? " (config or data error)" : "");
    else
        snprintf(buf, n, "mpirun exited with status %d", code);
}

const char *dt_launch_attempt_reason(const dt_launch_attempt *a, int code) {
    if (code == 0) return "finished";
    if (code == DT_LAUNCH_EXIT_PREEMPTED) return "preempted";
    if (a->hang[0] || code == DT_COMM_EXIT_HANG || a->failed_code == DT_COMM_EXIT_HANG)
        return "hang";
    if (a->failed_signal) return "killed";
    if (a->failed_code == 2 || code == 2) return "config-or-data";
    return "failed";
}

void dt_launch_policy_init(dt_launch_policy *p, int max_failures, double backoff_s) {
    *p = (dt_launch_policy){.max_failures = max_failures, .backoff_s = backoff_s, .best_step = -1};
}

dt_launch_verdict dt_launch_policy_next(dt_launch_policy *p, const dt_launch_attempt *a, int code,
                                        int stop_requested, double *wait_s) {
    *wait_s = 0;
    if (code == 0) return DT_LAUNCH_DONE;
    if (code == DT_LAUNCH_EXIT_PREEMPTED) return DT_LAUNCH_PREEMPTED;
    if (stop_requested) return DT_LAUNCH_STOPPED;
    p->failures++;
    /* config and data errors fail the same way every time; 127: the worker binary is missing */
    if (a->failed_code == 2 || code == 2 || code == 127) return DT_LAUNCH_NOT_RETRIED;
    p->no_progress = a->last_step > p->best_step ? 0 : p->no_progress + 1;
    if (a->last_step > p->best_step) p->best_step = a->last_step;
    if (p->no_progress >= 3) return DT_LAUNCH_NO_PROGRESS;
    if (p->max_failures >= 0 && p->failures > p->max_failures) return DT_LAUNCH_GAVE_UP;
    double w = p->backoff_s;
    for (int j = 1; j < p->failures && w < 60; j++) w *= 2;
    *wait_s = w;
    return DT_LAUNCH_RESTART;
}
