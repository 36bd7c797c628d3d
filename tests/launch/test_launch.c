/* The launcher as a library (include/dtrain/launch.h), without the CLI: host lists and
 * hostfiles, the resource checks, the reading of mpirun's output, the retry policy, and the
 * supervision loop driven by a stand-in for mpirun (a shell script that prints what Open MPI
 * prints and exits as a failing or preempted job does; the real mpirun runs in launch.sh).
 *   test_launch REPO */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/dist.h"
#include "dtrain/launch.h"
#include "harness.h"

static char tmp[256];

static void write_file(const char *path, const char *text, int mode) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_hosts(void) {
    dt_launch_opts o;
    dt_launch_opts_init(&o);
    CHECK(o.threads == 1 && o.max_failures == 3 && o.monitor_port == -1, "defaults");
    CHECK_OK(dt_launch_hosts_parse(&o, "node1:2,node2,node3:4"));
    CHECK(o.n_hosts == 3 && o.hosts[0].slots == 2 && o.hosts[1].slots == 1 &&
              o.hosts[2].slots == 4 && !strcmp(o.hosts[2].name, "node3"),
          "parsed %d hosts", o.n_hosts);
    const char *bad[] = {"", "node1:0", "node1:x", ":2", "node1:-1", "a:1,,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dt_launch_opts_init(&o);
        dt_status st = dt_launch_hosts_parse(&o, bad[i]);
        /* "a:1,," has an empty entry that strtok skips: one host, accepted as Open MPI does */
        if (!strcmp(bad[i], "a:1,,")) {
            CHECK(st == DT_OK && o.n_hosts == 1, "'%s'", bad[i]);
            continue;
        }
        CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "--hosts") &&
                  strstr(dt_last_error(), "host:slots"),
              "'%s' refused: %s", bad[i], dt_last_error());
    }

    char path[512];
    snprintf(path, sizeof path, "%s/hosts", tmp);
    write_file(path, "# the cluster\nnode1 slots=2\n\nnode2   # one slot\nnode3 slots=3\n", 0600);
    dt_launch_opts_init(&o);
    CHECK_OK(dt_launch_hostfile_read(&o, path));
    CHECK(o.n_hosts == 3 && o.hosts[0].slots == 2 && o.hosts[1].slots == 1 &&
              !strcmp(o.hosts[1].name, "node2") && o.hosts[2].slots == 3,
          "hostfile: %d hosts", o.n_hosts);
    write_file(path, "node1 slots=zero\n", 0600);
    dt_launch_opts_init(&o);
    CHECK(dt_launch_hostfile_read(&o, path) == DT_ERR_INVALID && strstr(dt_last_error(), path) &&
              strstr(dt_last_error(), "slots=N"),
          "bad slots: %s", dt_last_error());
    write_file(path, "# nothing\n", 0600);
    dt_launch_opts_init(&o);
    CHECK(dt_launch_hostfile_read(&o, path) == DT_ERR_INVALID, "empty hostfile refused");
    snprintf(path, sizeof path, "%s/absent", tmp);
    CHECK(dt_launch_hostfile_read(&o, path) == DT_ERR_IO && strstr(dt_last_error(), path),
          "missing hostfile: %s", dt_last_error());
}

static void test_resources(void) {
    dt_launch_opts o;
    dt_launch_opts_init(&o);
    CHECK_OK(dt_launch_hosts_parse(&o, "localhost:2"));
    o.workers = 3;
    CHECK(dt_launch_check_resources(&o) == DT_ERR_INVALID && strstr(dt_last_error(), "3 workers") &&
              strstr(dt_last_error(), "2 slots") && strstr(dt_last_error(), "localhost:2"),
          "too few slots: %s", dt_last_error());
    o.oversubscribe = 1;
    CHECK_OK(dt_launch_check_resources(&o));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    dt_launch_opts_init(&o);
    o.workers = (int)cpus, o.threads = 2;
    CHECK(dt_launch_check_resources(&o) == DT_ERR_INVALID && strstr(dt_last_error(), "cores"),
          "workers x threads above the cores: %s", dt_last_error());
    o.threads = 1;
    CHECK_OK(dt_launch_check_resources(&o));
}

static void test_lines(void) {
    dt_launch_attempt a;
    dt_launch_attempt_init(&a);
    int rank;
    const char *t = dt_launch_attempt_line(&a, "[3,0]<stdout>:step 5/100 loss 2.3\n", &rank);
    CHECK(rank == 0 && !strcmp(t, "step 5/100 loss 2.3\n"), "tagged line: rank %d '%s'", rank, t);
    dt_launch_attempt_line(&a, "[3,1]<stdout>:step 99/100\n", &rank); /* rank 1: not progress */
    CHECK(rank == 1 && a.last_step == 5, "rank 1's steps ignored: %lld", a.last_step);
    dt_launch_attempt_line(&a, "[3,0]<stdout>:step 7/100\n", &rank);
    dt_launch_attempt_line(&a, "[3,0]<stderr>:resumed from d/step-000000040: step 40\n", &rank);
    CHECK(a.first_step == 5 && a.last_step == 7 && a.resumed_step == 40,
          "steps %lld..%lld resumed %lld", a.first_step, a.last_step, a.resumed_step);
    CHECK(a.failed_rank == -1, "no failure yet");
    char cause[512];
    dt_launch_attempt_cause(&a, 0, cause, sizeof cause);
    CHECK(!strcmp(cause, "finished"), "%s", cause);
    dt_launch_attempt_cause(&a, 75, cause, sizeof cause);
    CHECK(!strcmp(cause, "preempted: checkpoint saved"), "%s", cause);
    dt_launch_attempt_cause(&a, 1, cause, sizeof cause);
    CHECK(!strcmp(cause, "mpirun exited with status 1"), "%s", cause);

    t = dt_launch_attempt_line(
        &a,
        "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
        "(Killed).\n",
        &rank);
    CHECK(rank == -1 && a.failed_rank == 1 && a.failed_signal == 9, "killed: rank %d sig %d",
          a.failed_rank, a.failed_signal);
    dt_launch_attempt_cause(&a, 137, cause, sizeof cause);
    CHECK(strstr(cause, "worker 1 killed by signal 9") != NULL, "%s", cause);

    dt_launch_attempt_init(&a);
    dt_launch_attempt_line(&a, "  Process name: [[25211,1],0]\n", &rank);
    dt_launch_attempt_line(&a, "  Exit code:    2\n", &rank);
    CHECK(a.failed_rank == 0 && a.failed_code == 2, "exit report: rank %d code %d", a.failed_rank,
          a.failed_code);
    dt_launch_attempt_cause(&a, 2, cause, sizeof cause);
    CHECK(!strcmp(cause, "worker 0 exited with status 2 (config or data error)"), "%s", cause);
    CHECK(!strcmp(dt_launch_attempt_reason(&a, 2), "config-or-data"), "reason of exit 2");
}

/* The hang watchdog's line (include/dtrain/dist.h) names the cause; exit 76 alone says hang. */
static void test_hang_lines(void) {
    dt_launch_attempt a;
    dt_launch_attempt_init(&a);
    int rank;
    char cause[512];
    dt_launch_attempt_line(&a, "[3,0]<stdout>:step 36/120 loss 3.1\n", &rank);
    dt_launch_attempt_line(&a,
                           "[3,0]<stderr>:dtrain: rank 0 (host vm): all-reduce (shared memory) of "
                           "gradient bucket 2 at step 37 made no progress for 5 s "
                           "(dist.timeout_s): rank 1 (host vm, pid 4242) has not reached it; "
                           "aborting the job (exit status 76)\n",
                           &rank);
    CHECK(rank == 0, "the hang line is rank 0's");
    dt_launch_attempt_cause(&a, DT_COMM_EXIT_HANG, cause, sizeof cause);
    CHECK(!strcmp(cause, "hang: rank 0 (host vm): all-reduce (shared memory) of gradient bucket 2 "
                         "at step 37 made no progress for 5 s (dist.timeout_s): rank 1 (host vm, "
                         "pid 4242) has not reached it"),
          "the cause names the stuck rank: %s", cause);
    {
        /* without the stuck rank's name (another host): up to what the line says of it */
        dt_launch_attempt b;
        dt_launch_attempt_init(&b);
        dt_launch_attempt_line(&b,
                               "[3,0]<stderr>:dtrain: rank 0 (host vm): barrier made no progress "
                               "for 5 s (dist.timeout_s): a peer rank is stuck or dead; "
                               "aborting the job (exit status 76)\n",
                               &rank);
        dt_launch_attempt_cause(&b, DT_COMM_EXIT_HANG, cause, sizeof cause);
        CHECK(!strcmp(cause, "hang: rank 0 (host vm): barrier made no progress for 5 s "
                             "(dist.timeout_s): a peer rank is stuck or dead"),
              "%s", cause);
    }
    CHECK(!strcmp(dt_launch_attempt_reason(&a, DT_COMM_EXIT_HANG), "hang"), "reason hang");
    dt_launch_policy p;
    double w;
    dt_launch_policy_init(&p, 3, 0.5);
    CHECK(dt_launch_policy_next(&p, &a, DT_COMM_EXIT_HANG, 0, &w) == DT_LAUNCH_RESTART && w == 0.5,
          "a hang is retried from the newest checkpoint");
    dt_launch_attempt_init(&a);
    dt_launch_attempt_cause(&a, DT_COMM_EXIT_HANG, cause, sizeof cause);
    CHECK(strstr(cause, "hang: ") == cause && strstr(cause, "dist.timeout_s"), "%s", cause);
    CHECK(!strcmp(dt_launch_attempt_reason(&a, 137), "failed"), "reason of 137 without report");
    a.failed_signal = 9;
    CHECK(!strcmp(dt_launch_attempt_reason(&a, 137), "killed"), "reason killed");
}

static dt_launch_attempt progress(long long last) {
    dt_launch_attempt a;
    dt_launch_attempt_init(&a);
    a.last_step = last;
    return a;
}

static void test_policy(void) {
    dt_launch_policy p;
    double w;
    dt_launch_attempt a = progress(10);
    dt_launch_policy_init(&p, 3, 0.5);
    CHECK(dt_launch_policy_next(&p, &a, 0, 0, &w) == DT_LAUNCH_DONE && p.failures == 0, "done");
    CHECK(dt_launch_policy_next(&p, &a, 75, 1, &w) == DT_LAUNCH_PREEMPTED && p.failures == 0,
          "preempted");
    CHECK(dt_launch_policy_next(&p, &a, 137, 1, &w) == DT_LAUNCH_STOPPED && p.failures == 0,
          "stop requested, no checkpoint");
    CHECK(dt_launch_policy_next(&p, &a, 2, 0, &w) == DT_LAUNCH_NOT_RETRIED && p.failures == 1,
          "exit 2 not retried");
    dt_launch_policy_init(&p, 3, 0.5);
    dt_launch_attempt cfg = progress(-1);
    cfg.failed_code = 2;
    CHECK(dt_launch_policy_next(&p, &cfg, 1, 0, &w) == DT_LAUNCH_NOT_RETRIED,
          "a worker's exit 2 not retried");
    CHECK(dt_launch_policy_next(&p, &a, 127, 0, &w) == DT_LAUNCH_NOT_RETRIED, "127 not retried");

    /* backoff doubles per failure; --max-failures 3 allows three restarts */
    dt_launch_policy_init(&p, 3, 0.5);
    double want[] = {0.5, 1.0, 2.0};
    for (int i = 0; i < 3; i++) {
        a = progress(10 * (i + 1));
        CHECK(dt_launch_policy_next(&p, &a, 137, 0, &w) == DT_LAUNCH_RESTART && w == want[i],
              "failure %d: restart after %.2f s (want %.2f)", i + 1, w, want[i]);
    }
    a = progress(40);
    CHECK(dt_launch_policy_next(&p, &a, 137, 0, &w) == DT_LAUNCH_GAVE_UP && p.failures == 4,
          "fourth failure gives up");
    /* the wait stops doubling once it reaches 60 s */
    dt_launch_policy_init(&p, -1, 40);
    for (int i = 0; i < 4; i++) {
        a = progress(i + 1);
        CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_RESTART, "no limit");
    }
    CHECK(w == 80, "capped doubling: %.1f", w);
    /* three failures in a row without progress end it, whatever the limit */
    dt_launch_policy_init(&p, -1, 0);
    a = progress(50);
    CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_RESTART, "progress");
    a = progress(50);
    CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_RESTART, "1 without progress");
    a = progress(20);
    CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_RESTART, "2 without progress");
    a = progress(60);
    CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_RESTART && p.no_progress == 0,
          "progress resets the count");
    for (int i = 0; i < 2; i++) {
        a = progress(60);
        CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_RESTART, "again");
    }
    a = progress(60);
    CHECK(dt_launch_policy_next(&p, &a, 1, 0, &w) == DT_LAUNCH_NO_PROGRESS, "third in a row");
}

/* A stand-in for mpirun: logs its arguments, prints rank 0's progress in --tag-output form and
 * exits with the next status from $tmp/codes (one per attempt). */
static void make_mpirun(const char *codes) {
    char path[512], script[2048];
    snprintf(path, sizeof path, "%s/codes", tmp);
    write_file(path, codes, 0600);
    snprintf(path, sizeof path, "%s/mpirun", tmp);
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "d=%s\n"
             "n=$(cat $d/n 2>/dev/null || echo 0); echo $((n + 1)) > $d/n\n"
             "echo \"$*\" >> $d/args\n"
             "echo \"[7,0]<stdout>:step $((n * 10 + 5))/100 loss 1.0\"\n"
             "code=$(sed -n \"$((n + 1))p\" $d/codes)\n"
             "[ \"$code\" = 137 ] && echo 'mpirun noticed that process rank 1 with PID 0 on node "
             "h exited on signal 9 (Killed).'\n"
             "exit $code\n",
             tmp);
    write_file(path, script, 0700);
    snprintf(path, sizeof path, "%s/n", tmp);
    unlink(path);
    snprintf(path, sizeof path, "%s/args", tmp);
    unlink(path);
}

static void test_supervise(const char *repo) {
    char cfg[1024], outdir[600], mpirun[600], over_dir[700];
    snprintf(cfg, sizeof cfg, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(outdir, sizeof outdir, "%s/runs", tmp);
    snprintf(mpirun, sizeof mpirun, "%s/mpirun", tmp);
    snprintf(over_dir, sizeof over_dir, "output.dir=%s", outdir);
    char *over[] = {over_dir, "tracking.uri=off", "output.run_name=sup"};
    dt_launch_opts o;
    dt_launch_opts_init(&o);
    o.workers = 2, o.oversubscribe = 1, o.backoff_s = 0.01;
    o.mpirun = mpirun, o.worker = "/bin/true", o.config = cfg;
    o.over = over, o.n_over = 3;

    /* killed, then finished: one restart with ckpt.resume=auto, both attempts recorded */
    make_mpirun("137\n0\n");
    int code = -1;
    CHECK_OK(dt_launch_run(&o, &code));
    CHECK(code == 0, "killed then done: exit %d", code);
    char p[1200];
    snprintf(p, sizeof p, "%s/llama-tiny-fortunes/sup/launch.json", outdir);
    char *rec = read_file(p);
    CHECK(rec && strstr(rec, "\"status\":\t\"done\"") && strstr(rec, "\"failures\":\t1") &&
              strstr(rec, "worker 1 killed by signal 9") && strstr(rec, "\"attempt\":\t1") &&
              strstr(rec, "\"last_step\":\t15"),
          "launch.json: %s", rec ? rec : "(missing)");
    snprintf(p, sizeof p, "%s/args", tmp);
    char *args = read_file(p);
    char *second = args ? strchr(args, '\n') : NULL;
    CHECK(args && strstr(args, "-np 2") && strstr(args, "--oversubscribe") &&
              strstr(args, "/bin/true train") && strstr(args, "train.threads=1") &&
              strstr(args, "output.run_name=sup"),
          "mpirun arguments: %s", args ? args : "(none)");
    char first[4096] = "";
    if (second) snprintf(first, sizeof first, "%.*s", (int)(second - args), args);
    CHECK(second && !strstr(first, "ckpt.resume=auto") && strstr(second, "ckpt.resume=auto"),
          "only the restart resumes: %s", args ? args : "");

    /* preempted: exit 75 passes through, not a failure */
    make_mpirun("75\n");
    CHECK_OK(dt_launch_run(&o, &code));
    snprintf(p, sizeof p, "%s/llama-tiny-fortunes/sup/launch.json", outdir);
    rec = read_file(p);
    CHECK(code == 75 && rec && strstr(rec, "\"status\":\t\"preempted\""), "preempted: exit %d",
          code);

    /* --max-failures 1: two kills give up with exit 1 */
    make_mpirun("137\n137\n0\n");
    o.max_failures = 1;
    CHECK_OK(dt_launch_run(&o, &code));
    rec = read_file(p);
    CHECK(code == 1 && rec && strstr(rec, "\"status\":\t\"failed\"") &&
              strstr(rec, "\"failures\":\t2"),
          "gave up: exit %d %s", code, rec ? rec : "");

    /* refused before anything starts: a bad config key, a missing mpirun */
    char *bad_over[] = {over_dir, "tracking.uri=off", "output.run_name=never", "train.nope=1"};
    o.over = bad_over, o.n_over = 4;
    CHECK(dt_launch_run(&o, &code) != DT_OK && strstr(dt_last_error(), "train.nope"),
          "unknown key refused: %s", dt_last_error());
    o.n_over = 3;
    o.mpirun = "no-such-mpirun-here";
    CHECK(dt_launch_run(&o, &code) == DT_ERR_INVALID && strstr(dt_last_error(), "not found"),
          "missing mpirun: %s", dt_last_error());
    snprintf(p, sizeof p, "%s/llama-tiny-fortunes/never", outdir);
    struct stat sb;
    CHECK(stat(p, &sb) != 0, "no run directory for a refused job");
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: test_launch REPO\n"), 2;
    snprintf(tmp, sizeof tmp, "/tmp/dt_launch_XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    test_hosts();
    test_resources();
    test_lines();
    test_hang_lines();
    test_policy();
    test_supervise(argv[1]);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp);
    return dt_test_finish("test_launch");
}
