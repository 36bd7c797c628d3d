/* `dtrain train CONFIG [section.key=value ...]`: one process (or one rank under mpirun later). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/cli_plan.h"
#include "cli/json_out.h"
#include "dtrain/dtrain.h"
#include "dtrain/trainer.h"

/* Exit status after a preemption checkpoint (SIGTERM/SIGINT): EX_TEMPFAIL, "try again" -- the
 * launcher (or the user) resumes with ckpt.resume=auto. */
#define DT_EXIT_PREEMPTED 75

/* SIGTERM/SIGINT are blocked in every thread (the mask is set before any thread exists, so
 * MPI's, OpenMP's, the loader's and the writers' threads inherit it) and taken by this one with
 * sigwait: no compute or MPI call is ever interrupted by them (measured: a signal landing in a
 * rank's backward pass corrupted the heap about one time in six). */
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static dt_trainer *running;

static void *signal_main(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0) continue;
        static int interrupts;
        pthread_mutex_lock(&run_mu);
        int have = running != NULL;
        if (have) dt_trainer_request_stop(running);
        pthread_mutex_unlock(&run_mu);
        /* Before training: stop now. During it, SIGTERM and SIGUSR1 may well arrive twice (the
         * pod's own SIGTERM and the launcher's through mpirun): the same request. Only a second
         * Ctrl-C means "stop now, without a checkpoint". */
        if (!have || (sig == SIGINT && ++interrupts > 1)) _exit(128 + sig);
    }
    return NULL;
}

/* Returns rc after the one-line error (and, with --json, the object saying it). Under mpirun
 * only rank 0 prints the object. */
static int refuse(int rc) {
    char m[2048];
    snprintf(m, sizeof m, "%s", dt_last_error());
    fprintf(stderr, "dtrain train: %s\n", m);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank && strcmp(rank, "0")) return rc;
    return dt_cli_json_end(NULL, rc, m);
}

int dt_cli_train(int argc, char **argv) {
    int want_json = dt_cli_json_take(&argc, argv); /* before the config's overrides */
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f,
                "usage: dtrain train CONFIG.yaml [section.key=value ...] [--json]\n"
                "       dtrain train --help-config   (every key, type, default, meaning)\n"
                "--json: one JSON object on stdout at the end (status, run_dir, run_id, steps,\n"
                "losses, eval, checkpoint, export, exit_code); the log goes to stderr\n"
                "exit status: 0 done, 1 failed, 2 bad config or input (nothing trained),\n"
                "75 stopped on SIGTERM/SIGINT after a checkpoint (resume with ckpt.resume=auto)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--help-config")) return dt_cli_help_config();
    if (want_json && dt_cli_json_begin("train") != 0) return 1;
    dt_config *cfg = NULL;
    if (dt_config_from_args(argv[1], argc - 2, argv + 2, &cfg) != DT_OK) return refuse(2);
    static sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set,
              SIGUSR1); /* mpirun forwards SIGUSR1 to every rank: dtrain launch uses it */
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_main, &stop_set);
    pthread_detach(sig_thread);
    dt_trainer *t = NULL;
    dt_status st = dt_trainer_open(cfg, NULL, &t);
    if (st != DT_OK) {
        dt_config_free(cfg);
        /* a model/data/config mismatch is the user's input: found before any work */
        return refuse(st == DT_ERR_INVALID ? 2 : 1);
    }
    /* SIGTERM/SIGINT: finish the step, save a checkpoint, exit 75 */
    pthread_mutex_lock(&run_mu);
    running = t;
    pthread_mutex_unlock(&run_mu);
    st = dt_trainer_run(t);
    pthread_mutex_lock(&run_mu);
    running = NULL;
    pthread_mutex_unlock(&run_mu);
    char err[2048] = "";
    if (st != DT_OK) {
        snprintf(err, sizeof err, "%s", dt_last_error());
        fprintf(stderr, "dtrain train: %s\n", err);
    }
    int preempted = dt_trainer_progress(t)->preempted;
    char *summary = dt_cli_json_on() ? dt_trainer_summary_json(t, st) : NULL;
    dt_trainer_close(t);
    dt_config_free(cfg);
    int rc = st != DT_OK ? 1 : preempted ? DT_EXIT_PREEMPTED : 0;
    /* other ranks print nothing: rank 0's object speaks for the run */
    if (!summary) return rc;
    cJSON *o = cJSON_Parse(summary);
    free(summary);
    return dt_cli_json_end(o, rc, err[0] ? err : NULL);
}
