/* The tiny Llama trained for a few steps by dtrain's trainer under MPI; each rank prints where it
 * ran and a hash of its final parameters, so that a run across network namespaces ("hosts")
 * can be compared bit for bit with the same run on one host (tests/dist/netns/run_netns.sh).
 *
 *   netns_train DATA_DIR REPO_DIR OUT_DIR [STEPS=6]
 *
 * DATA_DIR holds fortunes/train (the fortunes_data fixture); OUT_DIR is the trainer's output.dir.
 * Every rank prints one line (the launcher's output interleaves them; each line is one write):
 *
 *   netns_train: rank R of N host HOST netns net:[INODE] params P loss L hash 0123456789abcdef
 *
 * The hash is FNV-1a 64 over the bytes of the flat parameter buffer, so two runs print the same
 * hash only when every parameter has the same bits. The exit status is 0 when training ran. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/dtrain.h"

static dt_comm *world_comm; /* created first, so that MPI outlives the trainer's communicator */

/* FNV-1a, 64 bit, over n bytes. */
static uint64_t fnv1a64(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The trainer's config: the fortunes example, shortened; SGD with momentum and clipping, so that
 * the gradient all-reduce, the squared-norm all-reduce and the loss all-reduce all take part. */
static dt_status make_trainer(const char *data, const char *repo, const char *out, int steps,
                              dt_trainer **t) {
    char yaml[1200], tr[1200], od[1200], st[64], wu[64];
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(tr, sizeof tr, "data.train=%s/fortunes/train", data);
    snprintf(od, sizeof od, "output.dir=%s", out);
    snprintf(st, sizeof st, "train.steps=%d", steps);
    snprintf(wu, sizeof wu, "schedule.warmup_steps=%d", steps > 2 ? 2 : 0);
    char *over[] = {tr,
                    od,
                    st,
                    "dist.backend=auto",
                    "data.batch=4",
                    "data.val=",
                    "data.seq_len=64",
                    "optim.name=sgd",
                    "optim.lr=0.05",
                    "optim.momentum=0.9",
                    "optim.clip_norm=1",
                    wu,
                    "output.export=false",
                    "output.run_name=netns",
                    "train.threads=1",
                    "dist.bucket_mb=0.25",
                    NULL};
    /* NETNS_OVERRIDE: one more KEY=VALUE (run_netns.sh: the one-host run of 3 ranks without
     * the shared-memory all-reduce, whose summation order differs from MPI's) */
    int n_over = (int)(sizeof over / sizeof over[0]) - 1;
    char *extra = getenv("NETNS_OVERRIDE");
    if (extra && *extra) over[n_over++] = extra;
    dt_config *cfg;
    dt_status s = dt_config_from_args(yaml, n_over, over, &cfg);
    if (s != DT_OK) return s;
    s = dt_trainer_open(cfg, NULL, t);
    dt_config_free(cfg);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: netns_train DATA_DIR REPO_DIR OUT_DIR [STEPS=6]\n");
        return 2;
    }
    int steps = argc > 4 ? atoi(argv[4]) : 6;
    if (dt_comm_open("auto", NULL, NULL, &world_comm) != DT_OK) {
        fprintf(stderr, "netns_train: comm: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(world_comm), world = dt_comm_size(world_comm);
    char host[256] = "?", ns[128] = "?";
    gethostname(host, sizeof host - 1);
    ssize_t k = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    ns[k > 0 ? k : 0] = 0;

    dt_trainer *t = NULL;
    dt_status s = make_trainer(argv[1], argv[2], argv[3], steps, &t);
    if (s == DT_OK) {
        dt_trainer_set_log(t, NULL);
        s = dt_trainer_run(t);
    }
    if (s != DT_OK) {
        fprintf(stderr, "netns_train: rank %d of %d on %s: %s\n", rank, world, host,
                dt_last_error());
        dt_trainer_close(t);
        dt_comm_set_failed(world_comm);
        dt_comm_close(world_comm);
        return 1;
    }
    size_t n = 0;
    const float *p = dt_graph_flat_param(dt_trainer_graph(t), &n);
    uint64_t h = fnv1a64(p, n * sizeof *p);
    char line[1024];
    snprintf(line, sizeof line,
             "netns_train: rank %d of %d host %s netns %s params %zu loss %.6f hash %016" PRIx64
             "\n",
             rank, world, host, ns, n, dt_trainer_progress(t)->loss, h);
    fputs(line, stdout);
    fflush(stdout);
    dt_trainer_close(t);
    dt_comm_close(world_comm);
    return 0;
}
