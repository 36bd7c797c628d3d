/* The dtrain command: dispatches to subcommands (src/cli/<name>.c). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/cli_data.h"
#include "cli/cli_plan.h"
#include "dtrain/dtrain.h"
#ifdef DT_HAVE_MPI
#include <mpi.h>
#endif

#ifndef DT_GOMP_SPINCOUNT
#define DT_GOMP_SPINCOUNT "1000"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtrain <command> [args]\n"
            "commands:\n"
            "  data        import | inspect | verify datasets (shards + manifest)\n"
            "  ckpt        ls | verify | show checkpoints (path, file://, s3://)\n"
            "  plan        per-worker memory of a training config, without weights\n"
            "  runs        ls | show | compare | export | rm runs in the experiment store\n"
            "  models      register | ls | show | diff | alias | export | verify model versions\n"
            "  serve       dashboard and Prometheus /metrics for the experiment store\n"
            "  launch      run N workers through mpirun, restart from checkpoints on failure\n"
            "  sweep       hyperparameter sweeps: grid/random/Sobol trials, ASHA early stopping\n"
            "  lora        merge a LoRA adapter into its base model (Hugging Face folders)\n"
            "  generate    text generation with a Llama model (Hugging Face folder)\n"
            "  train       train a model from a YAML config (--help-config: every key)\n"
            "  version     print the version\n");
}

/* OpenMP threads that spin while waiting for work (libgomp's default) collapse when anything
 * else wants the cores -- a loader thread, another rank, a neighbour's job: measured here, 80x
 * slower with one competing process. libgomp reads its settings before main(), so the first
 * time round the command re-executes itself with a short spin before sleeping, unless the user
 * chose a policy (OMP_WAIT_POLICY / GOMP_SPINCOUNT). */
static void set_openmp_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("DT_OMP_SET")) return;
    setenv("GOMP_SPINCOUNT", DT_GOMP_SPINCOUNT, 1);
    setenv("DT_OMP_SET", "1", 1);
    /* The kernel names a process (its comm: ps, top, the OOM killer's log) after the file that
     * was exec'd: through /proc/self/exe that would be "exe", so exec the binary's own path. */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv); /* e.g. the binary was replaced since it started */
    /* on failure, go on with the defaults */
}

void dt_cli_on_stop(void (*fn)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* A hung collective (dist.timeout_s; its line is already written): the job ends with exit status
 * 76 -- every rank at once through MPI_Abort where that is allowed from the watchdog's thread,
 * else this process alone (mpirun then ends the others), so `dtrain launch` can retry it. */
static void end_hung_job(void *ud, const dt_comm_hang *h) {
    (void)ud;
#ifdef DT_HAVE_MPI
    if (h->mpi_abort_ok) MPI_Abort(MPI_COMM_WORLD, h->code);
#endif
    _exit(h->code);
}

int main(int argc, char **argv) {
    set_openmp_wait(argv);
    dt_comm_set_hang_handler(end_hung_job, NULL);
    /* "dtrain" even where the re-exec above went through /proc/self/exe or the binary was
     * installed under another name (threads started later inherit it) */
    prctl(PR_SET_NAME, "dtrain", 0, 0, 0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("dtrain %s\n", dt_version());
        return 0;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "data")) return dt_cli_data(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return dt_cli_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt")) return dt_cli_ckpt(argc - 1, argv + 1);
    if (!strcmp(cmd, "launch")) return dt_cli_launch(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return dt_cli_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "lora")) return dt_cli_lora(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return dt_cli_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "runs")) return dt_cli_runs(argc - 1, argv + 1);
    if (!strcmp(cmd, "models")) return dt_cli_models(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return dt_cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "sweep")) return dt_cli_sweep(argc - 1, argv + 1);
    fprintf(stderr, "dtrain: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
