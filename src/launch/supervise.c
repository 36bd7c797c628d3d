/* The launcher's supervision loop: validate, name the run, start mpirun, read its output, decide
 * (policy.c) and record (record.c) after every attempt. include/dtrain/launch.h has the whole
 * contract. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/fsmode.h"
#include "dtrain/config.h"
#include "dtrain/launch.h"
#include "dtrain/track.h"
#include "dtrain/serve.h"
#include "dtrain/trainer.h"
#include "dtrain/mlflow.h"
#include "launch/launch_impl.h"

/* One job per process: the stop request comes from a signal handler. */
static volatile sig_atomic_t stop_signal;
static volatile pid_t child_pid;

void dt_launch_stop(int sig) {
    stop_signal = sig;
    pid_t p = child_pid;
    if (p > 0) kill(p, SIGUSR1); /* mpirun forwards SIGUSR1 to every worker */
}

static int mkdirs(const char *path) {
    char p[8192];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, DT_DIR_MODE) && errno != EEXIST) return -1;
        *c = '/';
    }
    return mkdir(p, DT_DIR_MODE) && errno != EEXIST ? -1 : 0;
}

static void iso_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tmv);
}

/* What an attempt needs beyond the options. */
typedef struct job {
    const dt_launch_opts *o;
    char mpirun[4096], worker[4096], run_name[1100];
    const char *track_off; /* "tracking.uri=off" when the launcher found the store unusable */
    dt_serve *monitor;
    /* Open MPI's session directory base for this job's mpiruns, "" for mpirun's default. Two
     * mpiruns started at the same moment on one machine (a sweep's trials) race on creating the
     * shared default, /tmp/ompi.<host>.<uid>, and one fails ("orte_session_dir failed: File
     * exists"); a base of its own per job has nothing to race on. */
    char session[400];
} job;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Makes the job's session base under $TMPDIR (or /tmp); left "" (mpirun's default) when the
 * user's --mpirun-args name one or it cannot be made. */
static void session_make(job *j) {
    j->session[0] = 0;
    if (j->o->mpirun_args && strstr(j->o->mpirun_args, "tmpdir_base")) return;
    const char *tmp = getenv("TMPDIR");
    snprintf(j->session, sizeof j->session, "%s/dtrain-mpi-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(j->session)) j->session[0] = 0;
}

/* What a killed attempt's daemons left in it goes with the job. */
static void session_remove(job *j) {
    if (j->session[0]) nftw(j->session, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Runs one attempt; returns the exit status of mpirun (128 + signal if killed). */
static int run_attempt(job *j, int resume, int attempt, dt_launch_attempt *a) {
    const dt_launch_opts *o = j->o;
    char *argv[512];
    int k = 0;
    char np[32], threads_env[64], threads_arg[64], run_arg[1200], hosts[4096];
    char extra_buf[4096];
    argv[k++] = j->mpirun;
    if (geteuid() == 0) argv[k++] = "--allow-run-as-root";
    argv[k++] = "--bind-to";
    argv[k++] = "none";
    argv[k++] = "--tag-output";
    if (o->oversubscribe) argv[k++] = "--oversubscribe";
    if (j->session[0]) argv[k++] = "--mca", argv[k++] = "orte_tmpdir_base", argv[k++] = j->session;
    if (o->n_hosts) {
        dt_launch_hosts_format(o, ",", hosts, sizeof hosts);
        argv[k++] = "--host";
        argv[k++] = hosts;
    }
    snprintf(np, sizeof np, "%d", o->workers);
    argv[k++] = "-np";
    argv[k++] = np;
    snprintf(threads_env, sizeof threads_env, "OMP_NUM_THREADS=%d", o->threads);
    argv[k++] = "-x";
    argv[k++] = threads_env;
    if (o->mpirun_args) {
        snprintf(extra_buf, sizeof extra_buf, "%s", o->mpirun_args);
        for (char *t = strtok(extra_buf, " "); t && k < 400; t = strtok(NULL, " ")) argv[k++] = t;
    }
    argv[k++] = j->worker;
    argv[k++] = "train";
    argv[k++] = (char *)o->config;
    for (int i = 0; i < o->n_over && k < 500; i++) argv[k++] = o->over[i];
    snprintf(threads_arg, sizeof threads_arg, "train.threads=%d", o->threads);
    snprintf(run_arg, sizeof run_arg, "output.run_name=%s", j->run_name);
    argv[k++] = threads_arg;
    argv[k++] = run_arg;
    if (resume) argv[k++] = "ckpt.resume=auto";
    if (j->track_off) argv[k++] = (char *)j->track_off;
    argv[k] = NULL;

    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout), fflush(stderr);
    /* mpirun's stdout and stderr into the pipe, in a process group of its own: the workers take
     * SIGTERM/SIGINT from us as SIGUSR1, not from the terminal. posix_spawn reports a failed
     * exec here, in this process (no child that would have to end itself). */
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    extern char **environ;
    int se = posix_spawn(&pid, j->mpirun, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (se != 0) {
        close(fds[0]), close(fds[1]);
        fprintf(stderr, "dtrain launch: cannot run %s: %s\n", j->mpirun, strerror(se));
        return 127; /* as a shell reports a command it cannot run */
    }
    child_pid = pid;
    dt_serve_set_job(j->monitor, pid, attempt);
    if (stop_signal) kill(pid, SIGUSR1); /* a signal that came while we were starting */
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    char line[8192];
    while (in) {
        errno = 0;
        if (!fgets(line, sizeof line, in)) {
            if (errno == EINTR) {
                clearerr(in);
                continue;
            }
            break;
        }
        int rank;
        const char *text = dt_launch_attempt_line(a, line, &rank);
        if (rank >= 0)
            printf("[w%d] %s", rank, text);
        else
            printf("%s", line);
        fflush(stdout);
    }
    if (in) fclose(in);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    child_pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Monitoring never stops the job: a server that cannot start is one warning. */
static void monitor_start(job *j, const char *db, int tracking, const char *experiment) {
    const dt_launch_opts *o = j->o;
    if (o->monitor_port < 0) return;
    if (!strcmp(db, "off")) {
        fprintf(stderr, "dtrain launch: warning: --monitor-port: tracking.uri=off, no store to "
                        "serve; monitoring is off (the job goes on)\n");
        return;
    }
    if (!tracking) {
        fprintf(stderr, "dtrain launch: warning: --monitor-port: no experiment store to serve "
                        "(see above); monitoring is off (the job goes on)\n");
        return;
    }
    dt_serve_opts mo = {.addr = o->monitor_addr,
                        .port = o->monitor_port,
                        .token = o->monitor_token,
                        .token_file = o->monitor_token_file,
                        .insecure = o->monitor_insecure,
                        .db = db,
                        .experiment = experiment,
                        .run = j->run_name};
    if (dt_serve_open(&mo, &j->monitor) != DT_OK) {
        fprintf(stderr, "dtrain launch: warning: %s; monitoring is off (the job goes on)\n",
                dt_last_error());
        j->monitor = NULL;
        return;
    }
    printf("dtrain launch: monitor on http://%s:%d/ (dashboard) and /metrics\n",
           o->monitor_addr && o->monitor_addr[0] ? o->monitor_addr : "127.0.0.1",
           dt_serve_port(j->monitor));
    fflush(stdout);
}

/* Validates the config, names the run and fills the store's identity; nothing is started. */
static dt_status prepare(job *j, dt_launch_track *trk, char *run_dir, size_t run_dir_n, char *db,
                         size_t db_n, char *experiment, size_t exp_n) {
    const dt_launch_opts *o = j->o;
    if (o->workers < 1) return dt_error_set(DT_ERR_INVALID, "-n %d: expected >= 1", o->workers);
    if (!o->config) return dt_error_set(DT_ERR_INVALID, "no config file given");
    dt_config *cfg;
    dt_status st = dt_config_from_args(o->config, o->n_over, o->over, &cfg);
    if (st != DT_OK) return st;
    const dt_config_values *v = dt_config_get_values(cfg);
    dt_trainer_run_name(v->output.run_name, j->run_name, sizeof j->run_name);
    const char *root = v->output.dir;
    if (!strncmp(root, "file://", 7)) root += 7;
    int s3 = !strncmp(root, "s3://", 5);
    snprintf(run_dir, run_dir_n, "%s/%s/%s", root, v->output.experiment, j->run_name);
    /* the store the workers' rank 0 writes (src/train/track_glue.c), for the monitor */
    /* an MLflow server gets the workers' run and the launcher's attempt ends (record.c) */
    dt_track_local_uri(v->tracking.uri, root, db, db_n);
    snprintf(experiment, exp_n, "%s", v->output.experiment);
    trk->world = o->workers;
    snprintf(trk->experiment, sizeof trk->experiment, "%s", v->output.experiment);
    snprintf(trk->run, sizeof trk->run, "%s", j->run_name);
    /* the attempt's end goes to the MLflow run as well (rank 0 cannot record its own death) */
    if (dt_mlflow_is_uri(v->tracking.uri)) {
        snprintf(trk->mlflow, sizeof trk->mlflow, "%s", v->tracking.uri);
        snprintf(trk->spool, sizeof trk->spool, "%s/mlflow-spool.jsonl", run_dir);
    }
    snprintf(trk->ckpt_url, sizeof trk->ckpt_url, "%s",
             v->ckpt.dir[0] ? v->ckpt.dir : v->output.dir);
    dt_launch_hosts_format(o, ",", trk->hosts, sizeof trk->hosts);
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    snprintf(trk->local, sizeof trk->local, "%s:%d", me, o->workers);
    dt_config_free(cfg);

    /* resources and tools */
    if (dt_launch_find_exe(o->mpirun, j->mpirun, sizeof j->mpirun))
        return dt_error_set(DT_ERR_INVALID, "%s not found (install openmpi-bin, or --mpirun PATH)",
                            o->mpirun);
    if ((st = dt_launch_check_resources(o)) != DT_OK) return st;
    if (o->worker) {
        snprintf(j->worker, sizeof j->worker, "%s", o->worker);
    } else {
        ssize_t sl = readlink("/proc/self/exe", j->worker, sizeof j->worker - 1);
        if (sl <= 0) return dt_error_set(DT_ERR_INTERNAL, "cannot find the dtrain binary");
        j->worker[sl] = 0;
    }
    if (s3 || mkdirs(run_dir))
        return dt_error_set(DT_ERR_INVALID, "cannot create the run directory %s", run_dir);
    return DT_OK;
}

/* The store's status and launch.json's for a verdict that ends the job. */
static const char *verdict_status(dt_launch_verdict v) {
    switch (v) {
    case DT_LAUNCH_DONE:
        return "done";
    case DT_LAUNCH_PREEMPTED:
        return "preempted";
    case DT_LAUNCH_STOPPED:
        return "stopped";
    default:
        return "failed";
    }
}

dt_status dt_launch_run(const dt_launch_opts *o, int *exit_code) {
    *exit_code = 1;
    job j = {.o = o};
    dt_launch_track trk = {0};
    char run_dir[8192], rec_path[8300], db[8300], experiment[1100];
    dt_status st =
        prepare(&j, &trk, run_dir, sizeof run_dir, db, sizeof db, experiment, sizeof experiment);
    if (st != DT_OK) return st;
    if (o->run_dir_out && o->run_dir_out_n)
        snprintf(o->run_dir_out, o->run_dir_out_n, "%s", run_dir);
    snprintf(rec_path, sizeof rec_path, "%s/launch.json", run_dir);

    cJSON *rec = cJSON_CreateObject();
    char ts[64];
    iso_now(ts, sizeof ts);
    cJSON_AddStringToObject(rec, "run", j.run_name);
    cJSON_AddStringToObject(rec, "started", ts);
    cJSON_AddNumberToObject(rec, "workers", o->workers);
    cJSON_AddNumberToObject(rec, "threads_per_worker", o->threads);
    cJSON_AddNumberToObject(rec, "max_failures", o->max_failures);
    cJSON *atts = cJSON_AddArrayToObject(rec, "attempts");
    cJSON_AddStringToObject(rec, "status", "running");
    printf("dtrain launch: run %s, %d worker%s x %d thread%s%s; record %s\n", j.run_name,
           o->workers, o->workers > 1 ? "s" : "", o->threads, o->threads > 1 ? "s" : "",
           o->n_hosts ? " on the given hosts" : "", rec_path);
    fflush(stdout);

    /* Tracking never stops the job either. The store is opened now, before any worker: when it
     * cannot be, the workers would fail the same way, so they run with tracking off and the
     * problem is this one warning. */
    int tracking = strcmp(db, "off") != 0;
    if (tracking && dt_track_open(db, &trk.store) != DT_OK) {
        fprintf(stderr,
                "dtrain launch: warning: tracking: %s; experiment tracking is off for this job "
                "(training goes on)\n",
                dt_last_error());
        trk.store = NULL, tracking = 0;
        j.track_off = "tracking.uri=off";
    }
    monitor_start(&j, db, tracking, experiment);
    session_make(&j);

    dt_launch_policy pol;
    dt_launch_policy_init(&pol, o->max_failures, o->backoff_s);
    const char *status = "failed";
    for (int attempt = 0;; attempt++) {
        dt_launch_attempt a;
        dt_launch_attempt_init(&a);
        char t0[64], t1[64], cause[512], why[1200];
        iso_now(t0, sizeof t0);
        dt_launch_track_attempt_start(&trk);
        int code = run_attempt(&j, attempt > 0, attempt, &a);
        dt_serve_set_job(j.monitor, 0, attempt);
        iso_now(t1, sizeof t1);
        dt_launch_attempt_cause(&a, code, cause, sizeof cause);
        cJSON *at = cJSON_CreateObject();
        cJSON_AddNumberToObject(at, "attempt", attempt);
        cJSON_AddStringToObject(at, "started", t0);
        cJSON_AddStringToObject(at, "ended", t1);
        cJSON_AddNumberToObject(at, "exit_status", code);
        cJSON_AddStringToObject(at, "cause", cause);
        cJSON_AddStringToObject(at, "reason", dt_launch_attempt_reason(&a, code));
        if (a.failed_rank >= 0 && code != 0)
            cJSON_AddNumberToObject(at, "failed_worker", a.failed_rank);
        cJSON_AddNumberToObject(at, "resumed_from_step", (double)a.resumed_step);
        cJSON_AddNumberToObject(at, "last_step", (double)a.last_step);
        cJSON_AddItemToArray(atts, at);
        dt_launch_record_write(rec_path, rec);

        /* the store: rank 0 ended the attempt itself unless it died; the launcher's word is
         * final (why: the workers' exit as mpirun reported it, and what happens next) */
        double wait;
        dt_launch_verdict vd = dt_launch_policy_next(&pol, &a, code, stop_signal != 0, &wait);
        if (vd != DT_LAUNCH_RESTART) status = verdict_status(vd);
        if (vd == DT_LAUNCH_DONE) {
            dt_launch_track_attempt_end(&trk, "done", NULL, attempt);
            *exit_code = 0;
            break;
        }
        if (vd == DT_LAUNCH_PREEMPTED) {
            fprintf(stderr, "dtrain launch: %s; resume with the same command (ckpt.resume=auto)\n",
                    stop_signal ? "stopped on request, checkpoint saved" : cause);
            dt_launch_track_attempt_end(&trk, "preempted", NULL, attempt);
            *exit_code = DT_LAUNCH_EXIT_PREEMPTED;
            break;
        }
        if (vd == DT_LAUNCH_STOPPED) { /* the workers did not confirm a checkpoint (exit 75) */
            fprintf(stderr,
                    "dtrain launch: stopped on request, but the workers did not save a "
                    "checkpoint (%s); the newest committed checkpoint is the resume point\n",
                    cause);
            snprintf(why, sizeof why, "%s; stopped on request without a checkpoint", cause);
            dt_launch_track_attempt_end(&trk, "stopped", why, attempt);
            break;
        }
        fprintf(stderr, "dtrain launch: attempt %d failed: %s\n", attempt, cause);
        if (vd == DT_LAUNCH_NOT_RETRIED) {
            fprintf(stderr, "dtrain launch: not retrying a config or data error\n");
            snprintf(why, sizeof why, "%s; not retried%s", cause,
                     strstr(cause, "config or data error") ? "" : " (a config or data error)");
            dt_launch_track_attempt_end(&trk, "failed", why, attempt);
            break;
        }
        if (vd == DT_LAUNCH_NO_PROGRESS) {
            fprintf(stderr, "dtrain launch: 3 attempts in a row made no progress; giving up\n");
            snprintf(why, sizeof why, "%s; gave up: 3 attempts in a row made no progress", cause);
            dt_launch_track_attempt_end(&trk, "failed", why, attempt);
            break;
        }
        if (vd == DT_LAUNCH_GAVE_UP) {
            int f = pol.failures;
            fprintf(stderr, "dtrain launch: giving up after %d failure%s (--max-failures %d)\n", f,
                    f > 1 ? "s" : "", o->max_failures);
            snprintf(why, sizeof why, "%s; gave up after %d failure%s (--max-failures %d)", cause,
                     f, f > 1 ? "s" : "", o->max_failures);
            dt_launch_track_attempt_end(&trk, "failed", why, attempt);
            break;
        }
        if (trk.store) {
            char from[64] = "the start (no checkpoint yet)", lim[32] = ", no limit";
            long long rs = dt_launch_track_resume_step(&trk);
            if (rs >= 0) snprintf(from, sizeof from, "checkpoint step %lld", rs);
            if (o->max_failures >= 0) snprintf(lim, sizeof lim, "/%d", o->max_failures);
            snprintf(why, sizeof why, "%s; restarting from %s (restart %d%s)", cause, from,
                     pol.failures, lim);
            dt_launch_track_attempt_end(&trk, "failed", why, pol.failures);
        }
        fprintf(stderr,
                "dtrain launch: restarting from the newest checkpoint in %.1f s (failure %d%s)\n",
                wait, pol.failures, o->max_failures >= 0 ? "" : ", no limit");
        struct timespec ts_wait = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        while (nanosleep(&ts_wait, &ts_wait) != 0 && errno == EINTR && !stop_signal) {
        }
        if (stop_signal) {
            snprintf(why, sizeof why, "%s; stopped on request before the restart", cause);
            dt_launch_track_attempt_end(&trk, "failed", why, attempt);
            status = "preempted", *exit_code = DT_LAUNCH_EXIT_PREEMPTED;
            break;
        }
    }
    iso_now(ts, sizeof ts);
    cJSON_AddStringToObject(rec, "ended", ts);
    cJSON_ReplaceItemInObject(rec, "status", cJSON_CreateString(status));
    cJSON_AddNumberToObject(rec, "failures", pol.failures);
    dt_launch_record_write(rec_path, rec);
    cJSON_Delete(rec);
    dt_serve_close(j.monitor);
    dt_launch_track_close(&trk);
    session_remove(&j);
    return DT_OK;
}
