/* `dtrain launch`: runs, supervises and recovers a multi-worker training job.
 *
 *   dtrain launch -n N [--hosts h1:slots,h2:slots | --hostfile F] [--threads-per-worker T]
 *                 [--max-failures K] [--oversubscribe] CONFIG [key=value ...]
 *
 * The launcher validates the config and the resources before starting anything, names the run
 * (output.run_name, or a timestamp) so that every attempt shares its checkpoints, and starts N
 * workers through mpirun (which places them on the hosts). It streams their output with a
 * "[wR] " prefix. When the job fails -- a worker killed, a node lost, a non-zero exit -- it
 * records the cause, waits (exponential backoff) and starts the whole job again with
 * ckpt.resume=auto, up to K times (-1: no limit). Config and data errors (exit 2) are not
 * retried, nor are failures that make no progress three times in a row. SIGTERM/SIGINT to the
 * launcher become SIGUSR1 to mpirun, which forwards it to every worker: they agree on a step,
 * save a checkpoint and exit 75; the launcher then exits 75 too. Every attempt is recorded in
 * <output.dir>/<experiment>/<run>/launch.json, and in the experiment store (tracking.uri): rank 0
 * begins each attempt there and writes its metrics; once the attempt's processes have exited,
 * the launcher ends it with what only it knows -- the worker that died and how, the restart and
 * the checkpoint it resumes from, giving up -- and tags the run (restarts, the host list). The
 * two never write at the same time. A store the launcher cannot open is one warning, and the
 * workers run with tracking.uri=off (no second warning); training goes on. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cli/cli.h"
#include "core/file.h"
#include "core/fsmode.h"
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "dtrain/serve.h"
#include "dtrain/track.h"

#define MAX_HOSTS 256
#define EXIT_PREEMPTED 75

typedef struct host {
    char name[256];
    int slots;
} host;

typedef struct launch_opts {
    int n, threads, max_failures, oversubscribe;
    host hosts[MAX_HOSTS];
    int n_hosts;
    const char *mpirun, *mpirun_args, *config;
    double backoff_s;
    int n_over;
    char **over;
    const char *track_off; /* "tracking.uri=off" when the launcher found the store unusable */
} launch_opts;

static volatile sig_atomic_t stop_signal;
static volatile pid_t child_pid;
/* --monitor-port: the monitoring server (include/dtrain/serve.h) and the attempt it reports */
static dt_serve *monitor;
static int monitor_attempt;

static void on_signal(int sig) {
    stop_signal = sig;
    pid_t p = child_pid;
    if (p > 0) kill(p, SIGUSR1); /* mpirun forwards SIGUSR1 to every worker */
}

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtrain launch -n N [--hosts h1:slots,h2:slots | --hostfile FILE]\n"
            "                     [--threads-per-worker T] [--max-failures K] [--oversubscribe]\n"
            "                     [--mpirun PATH] [--mpirun-args \"ARGS\"] [--backoff SECONDS]\n"
            "                     [--monitor-port P [--monitor-addr A] [--monitor-token T]]\n"
            "                     CONFIG.yaml [section.key=value ...]\n"
            "Runs N workers of `dtrain train` through mpirun, restarts the job from its newest\n"
            "checkpoint when it fails (up to K times, default 3; -1 = no limit), forwards SIGTERM\n"
            "so that workers checkpoint before exiting (exit status 75). --monitor-port serves\n"
            "the run's dashboard at / and Prometheus metrics at /metrics (default address\n"
            "127.0.0.1; --monitor-token, DTRAIN_MONITOR_TOKEN or DTRAIN_MONITOR_TOKEN_FILE (a\n"
            "file private to its owner): bearer token required). Another address needs a token,\n"
            "or DTRAIN_MONITOR_INSECURE=1 to serve it to anyone who can reach it.\n");
    return 2;
}

static int parse_int(const char *s, int *out) {
    char *e;
    long v = strtol(s, &e, 10);
    if (!*s || *e || v < -1 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

/* "h1:2,h2:1" (a host without ":slots" has 1 slot). */
static int parse_hosts(const char *s, launch_opts *o) {
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (o->n_hosts == MAX_HOSTS) return -1;
        host *h = &o->hosts[o->n_hosts++];
        char *c = strrchr(tok, ':');
        h->slots = 1;
        if (c) {
            *c = 0;
            if (parse_int(c + 1, &h->slots) || h->slots < 1) return -1;
        }
        if (!*tok || strlen(tok) >= sizeof h->name) return -1;
        snprintf(h->name, sizeof h->name, "%s", tok);
    }
    return o->n_hosts ? 0 : -1;
}

/* Open MPI's hostfile format: "host [slots=N]" per line, '#' comments. */
static int parse_hostfile(const char *path, launch_opts *o) {
    FILE *f;
    if (dt_file_fopen_regular(path, "r", &f)) {
        fprintf(stderr, "dtrain launch: --hostfile %s\n", dt_last_error());
        return -1;
    }
    char line[1024];
    int bad = 0;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char name[256];
        int slots = 1;
        if (sscanf(line, "%255s", name) != 1) continue;
        char *sl = strstr(line, "slots=");
        if (sl && (sscanf(sl + 6, "%d", &slots) != 1 || slots < 1)) bad = 1;
        if (o->n_hosts == MAX_HOSTS) bad = 1;
        if (bad) break;
        host *h = &o->hosts[o->n_hosts++];
        snprintf(h->name, sizeof h->name, "%s", name);
        h->slots = slots;
    }
    fclose(f);
    if (bad || !o->n_hosts) {
        fprintf(stderr, "dtrain launch: --hostfile %s: expected lines \"HOST [slots=N]\"\n", path);
        return -1;
    }
    return 0;
}

/* An executable on PATH (or the path itself when it contains '/'). */
static int find_exe(const char *name, char *out, size_t n) {
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    for (char *d = strtok(buf, ":"); d; d = strtok(NULL, ":")) {
        snprintf(out, n, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return 0;
    }
    return -1;
}

/* Resources that cannot be met are refused before anything starts. */
static int check_resources(const launch_opts *o) {
    if (o->n_hosts) {
        int slots = 0;
        char list[2048] = "";
        for (int i = 0; i < o->n_hosts; i++) {
            slots += o->hosts[i].slots;
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s:%d", i ? ", " : "", o->hosts[i].name,
                     o->hosts[i].slots);
            /* a custom rsh agent (containers, namespaces) knows how to reach its hosts */
            if (!strcmp(o->hosts[i].name, "localhost") ||
                (o->mpirun_args && strstr(o->mpirun_args, "plm_rsh_agent")))
                continue;
            struct addrinfo hints = {.ai_family = AF_UNSPEC}, *res = NULL;
            int e = getaddrinfo(o->hosts[i].name, NULL, &hints, &res);
            if (e) {
                fprintf(stderr, "dtrain launch: host '%s' cannot be resolved: %s\n",
                        o->hosts[i].name, gai_strerror(e));
                return -1;
            }
            freeaddrinfo(res);
        }
        if (o->n > slots && !o->oversubscribe) {
            fprintf(stderr,
                    "dtrain launch: %d workers requested but the hosts offer %d slots (%s); add "
                    "hosts or slots, or --oversubscribe\n",
                    o->n, slots, list);
            return -1;
        }
        return 0;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && (long)o->n * o->threads > cpus && !o->oversubscribe) {
        fprintf(stderr,
                "dtrain launch: %d workers x %d threads need %d cores, this host has %ld (fewer "
                "workers or threads, --hosts, or --oversubscribe)\n",
                o->n, o->threads, o->n * o->threads, cpus);
        return -1;
    }
    return 0;
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

/* What one attempt saw in the workers' output. */
typedef struct attempt_log {
    long long last_step, first_step, resumed_step;
    int failed_rank, failed_code, failed_signal;
} attempt_log;

/* Rewrites mpirun's --tag-output prefix "[1,R]<stdout>:" as "[wR] " and watches for progress
 * and mpirun's report of the failed process. */
static void handle_line(char *line, attempt_log *a) {
    int jobid, rank, off = 0;
    char stream[16];
    const char *text = line;
    if (sscanf(line, "[%d,%d]<%15[a-z]>:%n", &jobid, &rank, stream, &off) == 3 && off > 0) {
        text = line + off;
        printf("[w%d] %s", rank, text);
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
    } else {
        printf("%s", line);
    }
    fflush(stdout);
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
}

/* Runs one attempt; returns the exit status of mpirun (128 + signal if killed). */
static int run_attempt(const launch_opts *o, const char *self, const char *run_name, int resume,
                       attempt_log *a) {
    char *argv[512];
    int k = 0;
    char np[32], threads_env[64], threads_arg[64], run_arg[1200], hosts[4096] = "";
    char extra_buf[4096];
    argv[k++] = (char *)o->mpirun;
    if (geteuid() == 0) argv[k++] = "--allow-run-as-root";
    argv[k++] = "--bind-to";
    argv[k++] = "none";
    argv[k++] = "--tag-output";
    if (o->oversubscribe) argv[k++] = "--oversubscribe";
    if (o->n_hosts) {
        for (int i = 0; i < o->n_hosts; i++) {
            size_t l = strlen(hosts);
            snprintf(hosts + l, sizeof hosts - l, "%s%s:%d", i ? "," : "", o->hosts[i].name,
                     o->hosts[i].slots);
        }
        argv[k++] = "--host";
        argv[k++] = hosts;
    }
    snprintf(np, sizeof np, "%d", o->n);
    argv[k++] = "-np";
    argv[k++] = np;
    snprintf(threads_env, sizeof threads_env, "OMP_NUM_THREADS=%d", o->threads);
    argv[k++] = "-x";
    argv[k++] = threads_env;
    if (o->mpirun_args) {
        snprintf(extra_buf, sizeof extra_buf, "%s", o->mpirun_args);
        for (char *t = strtok(extra_buf, " "); t && k < 400; t = strtok(NULL, " ")) argv[k++] = t;
    }
    argv[k++] = (char *)self;
    argv[k++] = "train";
    argv[k++] = (char *)o->config;
    for (int i = 0; i < o->n_over && k < 500; i++) argv[k++] = o->over[i];
    snprintf(threads_arg, sizeof threads_arg, "train.threads=%d", o->threads);
    snprintf(run_arg, sizeof run_arg, "output.run_name=%s", run_name);
    argv[k++] = threads_arg;
    argv[k++] = run_arg;
    if (resume) argv[k++] = "ckpt.resume=auto";
    if (o->track_off) argv[k++] = (char *)o->track_off;
    argv[k] = NULL;

    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1), dup2(fds[1], 2);
        close(fds[0]), close(fds[1]);
        /* the workers take SIGTERM/SIGINT from us as SIGUSR1, not from the terminal */
        setpgid(0, 0);
        execv(o->mpirun, argv);
        fprintf(stderr, "dtrain launch: cannot run %s: %s\n", o->mpirun, strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    dt_serve_set_job(monitor, pid, monitor_attempt);
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
        handle_line(line, a);
    }
    if (in) fclose(in);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    child_pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void record(const char *path, cJSON *rec) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *txt = cJSON_Print(rec);
    FILE *f = txt ? dt_fcreate(tmp, "w") : NULL;
    if (f) {
        fputs(txt, f);
        fputc('\n', f);
        if (fclose(f) == 0) rename(tmp, path);
    }
    free(txt);
}

/* ---- the experiment store: the launcher's records ------------------------------------------- */

typedef struct launch_track {
    dt_track *store; /* NULL: not tracking (tracking.uri=off, or after the first error) */
    char experiment[1100], run[1100];
    char ckpt_url[8300]; /* ckpt.dir or output.dir: where the resume checkpoint is looked for */
    char hosts[4096];    /* --hosts/--hostfile as "h1:2,h2:1"; "" when none was given */
    char local[300];     /* "<this host>:N" (no host list: mpirun starts every worker here) */
    int world;
    int before; /* the run's attempt count before the running attempt */
    double started;
} launch_track;

/* The first store error: one warning; the launcher records nothing more (the job goes on). */
static void track_off(launch_track *t, const char *what) {
    fprintf(stderr,
            "dtrain launch: warning: tracking: %s: %s; the launcher records no more attempts in "
            "the experiment store (training goes on)\n",
            what, dt_last_error());
    dt_track_close(t->store);
    t->store = NULL;
}

static void track_attempt_start(launch_track *t) {
    t->started = dt_track_wall();
    if (t->store && dt_track_run_attempts(t->store, t->experiment, t->run, &t->before) != DT_OK)
        track_off(t, "cannot read the run");
}

/* The step of the checkpoint the next attempt resumes from (ckpt.resume=auto takes the newest
 * committed one whose files are all there); -1 when there is none or it cannot be told. */
static long long resume_step(const launch_track *t) {
    dt_store *st;
    if (dt_store_open(t->ckpt_url, NULL, &st) != DT_OK) return -1;
    char root[2300];
    snprintf(root, sizeof root, "%s/%s/checkpoints", t->experiment, t->run);
    dt_ckpt_info info;
    long long step = dt_ckpt_find_before(st, root, INT64_MAX, DT_CKPT_SIZES, NULL, &info) == DT_OK
                         ? info.step
                         : -1;
    dt_store_close(st);
    return step;
}

/* Ends the attempt that just exited (status, reason: NULL keeps rank 0's) and tags the run. */
static void track_attempt_end(launch_track *t, const char *status, const char *reason,
                              int restarts) {
    if (!t->store) return;
    dt_track_attempt_end_info in = {.attempts_before = t->before,
                                    .start_time = t->started,
                                    .world = t->world,
                                    .hosts = t->hosts[0] ? t->hosts : t->local,
                                    .status = status,
                                    .exit_reason = reason};
    int64_t run;
    char n[32];
    snprintf(n, sizeof n, "%d", restarts);
    if (dt_track_attempt_end(t->store, t->experiment, t->run, &in, &run) != DT_OK) {
        track_off(t, "cannot end the attempt");
        return;
    }
    if (dt_track_tag(t->store, run, "restarts", n) != DT_OK ||
        (t->hosts[0] && dt_track_tag(t->store, run, "launch.hosts", t->hosts) != DT_OK))
        track_off(t, "cannot tag the run");
}

int dt_cli_launch(int argc, char **argv) {
    launch_opts o = {.n = 0, .threads = 1, .max_failures = 3, .backoff_s = 1.0};
    const char *hostfile = NULL, *mpirun = "mpirun";
    const char *mon_addr = NULL, *mon_token = getenv("DTRAIN_MONITOR_TOKEN");
    int mon_port = -1;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
        if (!strcmp(a, "--oversubscribe")) {
            o.oversubscribe = 1;
            continue;
        }
        if (!v) return usage(stderr);
        i++;
        if (!strcmp(a, "-n") || !strcmp(a, "--workers")) {
            if (parse_int(v, &o.n) || o.n < 1) {
                fprintf(stderr, "dtrain launch: -n %s: expected a number of workers >= 1\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--threads-per-worker")) {
            if (parse_int(v, &o.threads) || o.threads < 1) {
                fprintf(stderr, "dtrain launch: --threads-per-worker %s: expected >= 1\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--max-failures")) {
            if (parse_int(v, &o.max_failures)) {
                fprintf(stderr,
                        "dtrain launch: --max-failures %s: expected -1 (no limit) or >= 0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--hosts")) {
            if (parse_hosts(v, &o)) {
                fprintf(stderr, "dtrain launch: --hosts %s: expected host:slots[,host:slots...]\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--hostfile")) {
            hostfile = v;
        } else if (!strcmp(a, "--mpirun")) {
            mpirun = v;
        } else if (!strcmp(a, "--mpirun-args")) {
            o.mpirun_args = v;
        } else if (!strcmp(a, "--monitor-port")) {
            if (parse_int(v, &mon_port) || mon_port < 0 || mon_port > 65535) {
                fprintf(stderr, "dtrain launch: --monitor-port %s: expected 0-65535\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--monitor-addr")) {
            mon_addr = v;
        } else if (!strcmp(a, "--monitor-token")) {
            mon_token = v;
        } else if (!strcmp(a, "--backoff")) {
            o.backoff_s = atof(v);
        } else {
            fprintf(stderr, "dtrain launch: unknown option %s\n", a);
            return usage(stderr);
        }
    }
    if (i >= argc || o.n < 1) return usage(stderr);
    if (hostfile && o.n_hosts) {
        fprintf(stderr, "dtrain launch: give --hosts or --hostfile, not both\n");
        return 2;
    }
    if (hostfile && parse_hostfile(hostfile, &o)) return 2;
    o.config = argv[i];
    o.n_over = argc - i - 1, o.over = argv + i + 1;

    /* 1. the config, before anything starts */
    dt_config *cfg;
    if (dt_config_from_args(o.config, o.n_over, o.over, &cfg) != DT_OK) {
        fprintf(stderr, "dtrain launch: %s\n", dt_last_error());
        return 2;
    }
    const dt_config_values *v = dt_config_get_values(cfg);
    char run_name[1100], run_dir[8192], rec_path[8300];
    if (v->output.run_name[0]) {
        snprintf(run_name, sizeof run_name, "%s", v->output.run_name);
    } else {
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(run_name, sizeof run_name, "%Y%m%d-%H%M%S", &tmv);
    }
    char root_buf[4096]; /* output.dir outlives the config (freed below) */
    snprintf(root_buf, sizeof root_buf, "%s", v->output.dir);
    const char *root = root_buf;
    if (!strncmp(root, "file://", 7)) root += 7;
    snprintf(run_dir, sizeof run_dir, "%s/%s/%s", root, v->output.experiment, run_name);
    /* the store the workers' rank 0 writes (src/train/track_glue.c), for the monitor */
    char mon_db[8300], experiment[1100];
    if (v->tracking.uri[0])
        snprintf(mon_db, sizeof mon_db, "%s", v->tracking.uri);
    else
        snprintf(mon_db, sizeof mon_db, "%s/dtrain.db", root);
    snprintf(experiment, sizeof experiment, "%s", v->output.experiment);
    launch_track trk = {.world = o.n};
    snprintf(trk.experiment, sizeof trk.experiment, "%s", v->output.experiment);
    snprintf(trk.run, sizeof trk.run, "%s", run_name);
    snprintf(trk.ckpt_url, sizeof trk.ckpt_url, "%s", v->ckpt.dir[0] ? v->ckpt.dir : v->output.dir);
    for (int h = 0; h < o.n_hosts; h++) {
        size_t l = strlen(trk.hosts);
        snprintf(trk.hosts + l, sizeof trk.hosts - l, "%s%s:%d", h ? "," : "", o.hosts[h].name,
                 o.hosts[h].slots);
    }
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    snprintf(trk.local, sizeof trk.local, "%s:%d", me, o.n);
    dt_config_free(cfg);
    /* 2. resources and tools */
    char mpirun_path[4096], self[4096];
    if (find_exe(mpirun, mpirun_path, sizeof mpirun_path)) {
        fprintf(stderr, "dtrain launch: %s not found (install openmpi-bin, or --mpirun PATH)\n",
                mpirun);
        return 2;
    }
    o.mpirun = mpirun_path;
    if (check_resources(&o)) return 2;
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return fprintf(stderr, "dtrain launch: cannot find the dtrain binary\n"), 1;
    self[sl] = 0;
    if (!strncmp(root, "s3://", 5) || mkdirs(run_dir)) {
        fprintf(stderr, "dtrain launch: cannot create the run directory %s\n", run_dir);
        return 2;
    }
    snprintf(rec_path, sizeof rec_path, "%s/launch.json", run_dir);

    dt_cli_on_stop(on_signal);

    cJSON *rec = cJSON_CreateObject();
    char ts[64];
    iso_now(ts, sizeof ts);
    cJSON_AddStringToObject(rec, "run", run_name);
    cJSON_AddStringToObject(rec, "started", ts);
    cJSON_AddNumberToObject(rec, "workers", o.n);
    cJSON_AddNumberToObject(rec, "threads_per_worker", o.threads);
    cJSON_AddNumberToObject(rec, "max_failures", o.max_failures);
    cJSON *atts = cJSON_AddArrayToObject(rec, "attempts");
    cJSON_AddStringToObject(rec, "status", "running");
    printf("dtrain launch: run %s, %d worker%s x %d thread%s%s%s; record %s\n", run_name, o.n,
           o.n > 1 ? "s" : "", o.threads, o.threads > 1 ? "s" : "", o.n_hosts ? " on " : "",
           o.n_hosts ? "the given hosts" : "", rec_path);
    fflush(stdout);

    /* Tracking never stops the job either. The store is opened now, before any worker: when it
     * cannot be, the workers would fail the same way, so they run with tracking off and the
     * problem is this one warning. */
    int tracking = strcmp(mon_db, "off") != 0;
    if (tracking && dt_track_open(mon_db, &trk.store) != DT_OK) {
        fprintf(stderr,
                "dtrain launch: warning: tracking: %s; experiment tracking is off for this job "
                "(training goes on)\n",
                dt_last_error());
        trk.store = NULL, tracking = 0;
        o.track_off = "tracking.uri=off";
    }
    /* Monitoring never stops the job: a server that cannot start is one warning. */
    if (mon_port >= 0 && !tracking && strcmp(mon_db, "off")) {
        fprintf(stderr, "dtrain launch: warning: --monitor-port: no experiment store to serve "
                        "(see above); monitoring is off (the job goes on)\n");
    } else if (mon_port >= 0 && !strcmp(mon_db, "off")) {
        fprintf(stderr, "dtrain launch: warning: --monitor-port: tracking.uri=off, no store to "
                        "serve; monitoring is off (the job goes on)\n");
    } else if (mon_port >= 0) {
        dt_serve_opts mo = {.addr = mon_addr,
                            .port = mon_port,
                            .token = mon_token,
                            .db = mon_db,
                            .experiment = experiment,
                            .run = run_name,
                            /* as for `dtrain serve` (src/cli/serve.c) */
                            .token_file = getenv("DTRAIN_MONITOR_TOKEN_FILE"),
                            .insecure = getenv("DTRAIN_MONITOR_INSECURE") &&
                                        !strcmp(getenv("DTRAIN_MONITOR_INSECURE"), "1")};
        if (dt_serve_start(&mo, &monitor) != DT_OK)
            fprintf(stderr, "dtrain launch: warning: %s; monitoring is off (the job goes on)\n",
                    dt_last_error());
        else
            printf("dtrain launch: monitor on http://%s:%d/ (dashboard) and /metrics\n",
                   mon_addr && mon_addr[0] ? mon_addr : "127.0.0.1", dt_serve_port(monitor));
        fflush(stdout);
    }
    int failures = 0, no_progress = 0, rc = 1;
    long long best_step = -1;
    const char *status = "failed";
    for (int attempt = 0;; attempt++) {
        attempt_log a = {.last_step = -1,
                         .first_step = -1,
                         .resumed_step = -1,
                         .failed_rank = -1,
                         .failed_code = -1,
                         .failed_signal = 0};
        char t0[64], t1[64];
        iso_now(t0, sizeof t0);
        monitor_attempt = attempt;
        track_attempt_start(&trk);
        int code = run_attempt(&o, self, run_name, attempt > 0, &a);
        dt_serve_set_job(monitor, 0, attempt);
        iso_now(t1, sizeof t1);
        char cause[512];
        if (code == 0)
            snprintf(cause, sizeof cause, "finished");
        else if (code == EXIT_PREEMPTED)
            snprintf(cause, sizeof cause, "preempted: checkpoint saved");
        else if (a.failed_rank >= 0 && a.failed_signal)
            snprintf(cause, sizeof cause, "worker %d killed by signal %d (%s)", a.failed_rank,
                     a.failed_signal, strsignal(a.failed_signal));
        else if (a.failed_rank >= 0 && a.failed_code >= 0)
            snprintf(cause, sizeof cause, "worker %d exited with status %d%s", a.failed_rank,
                     a.failed_code, a.failed_code == 2 ? " (config or data error)" : "");
        else
            snprintf(cause, sizeof cause, "mpirun exited with status %d", code);
        cJSON *at = cJSON_CreateObject();
        cJSON_AddNumberToObject(at, "attempt", attempt);
        cJSON_AddStringToObject(at, "started", t0);
        cJSON_AddStringToObject(at, "ended", t1);
        cJSON_AddNumberToObject(at, "exit_status", code);
        cJSON_AddStringToObject(at, "cause", cause);
        if (a.failed_rank >= 0 && code != 0)
            cJSON_AddNumberToObject(at, "failed_worker", a.failed_rank);
        cJSON_AddNumberToObject(at, "resumed_from_step", (double)a.resumed_step);
        cJSON_AddNumberToObject(at, "last_step", (double)a.last_step);
        cJSON_AddItemToArray(atts, at);
        record(rec_path, rec);
        /* the store: rank 0 ended the attempt itself unless it died; the launcher's word is
         * final (why: the workers' exit as mpirun reported it, and what happens next) */
        char why[1200];
        if (code == 0) {
            track_attempt_end(&trk, "done", NULL, attempt);
            status = "done", rc = 0;
            break;
        }
        if (code == EXIT_PREEMPTED) {
            fprintf(stderr, "dtrain launch: %s; resume with the same command (ckpt.resume=auto)\n",
                    stop_signal ? "stopped on request, checkpoint saved" : cause);
            track_attempt_end(&trk, "preempted", NULL, attempt);
            status = "preempted", rc = EXIT_PREEMPTED;
            break;
        }
        if (stop_signal) { /* the workers did not confirm a checkpoint (exit 75) */
            fprintf(stderr,
                    "dtrain launch: stopped on request, but the workers did not save a "
                    "checkpoint (%s); the newest committed checkpoint is the resume point\n",
                    cause);
            snprintf(why, sizeof why, "%s; stopped on request without a checkpoint", cause);
            track_attempt_end(&trk, "stopped", why, attempt);
            status = "stopped", rc = 1;
            break;
        }
        failures++;
        fprintf(stderr, "dtrain launch: attempt %d failed: %s\n", attempt, cause);
        /* config and data errors fail the same way every time */
        if (a.failed_code == 2 || code == 2 || code == 127) {
            fprintf(stderr, "dtrain launch: not retrying a config or data error\n");
            snprintf(why, sizeof why, "%s; not retried%s", cause,
                     strstr(cause, "config or data error") ? "" : " (a config or data error)");
            track_attempt_end(&trk, "failed", why, attempt);
            break;
        }
        no_progress = a.last_step > best_step ? 0 : no_progress + 1;
        if (a.last_step > best_step) best_step = a.last_step;
        if (no_progress >= 3) {
            fprintf(stderr, "dtrain launch: 3 attempts in a row made no progress; giving up\n");
            snprintf(why, sizeof why, "%s; gave up: 3 attempts in a row made no progress", cause);
            track_attempt_end(&trk, "failed", why, attempt);
            break;
        }
        if (o.max_failures >= 0 && failures > o.max_failures) {
            fprintf(stderr, "dtrain launch: giving up after %d failure%s (--max-failures %d)\n",
                    failures, failures > 1 ? "s" : "", o.max_failures);
            snprintf(why, sizeof why, "%s; gave up after %d failure%s (--max-failures %d)", cause,
                     failures, failures > 1 ? "s" : "", o.max_failures);
            track_attempt_end(&trk, "failed", why, attempt);
            break;
        }
        if (trk.store) {
            char from[64] = "the start (no checkpoint yet)", lim[32] = ", no limit";
            long long rs = resume_step(&trk);
            if (rs >= 0) snprintf(from, sizeof from, "checkpoint step %lld", rs);
            if (o.max_failures >= 0) snprintf(lim, sizeof lim, "/%d", o.max_failures);
            snprintf(why, sizeof why, "%s; restarting from %s (restart %d%s)", cause, from,
                     failures, lim);
            track_attempt_end(&trk, "failed", why, failures);
        }
        double wait = o.backoff_s;
        for (int j = 1; j < failures && wait < 60; j++) wait *= 2;
        fprintf(stderr,
                "dtrain launch: restarting from the newest checkpoint in %.1f s (failure %d%s)\n",
                wait, failures, o.max_failures >= 0 ? "" : ", no limit");
        struct timespec ts_wait = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        while (nanosleep(&ts_wait, &ts_wait) != 0 && errno == EINTR && !stop_signal) {
        }
        if (stop_signal) {
            snprintf(why, sizeof why, "%s; stopped on request before the restart", cause);
            track_attempt_end(&trk, "failed", why, attempt);
            status = "preempted", rc = EXIT_PREEMPTED;
            break;
        }
    }
    iso_now(ts, sizeof ts);
    cJSON_AddStringToObject(rec, "ended", ts);
    cJSON_ReplaceItemInObject(rec, "status", cJSON_CreateString(status));
    cJSON_AddNumberToObject(rec, "failures", failures);
    record(rec_path, rec);
    cJSON_Delete(rec);
    dt_serve_stop(monitor);
    monitor = NULL;
    if (trk.store && dt_track_close(trk.store) != DT_OK)
        fprintf(stderr, "dtrain launch: warning: tracking: %s\n", dt_last_error());
    return rc;
}
