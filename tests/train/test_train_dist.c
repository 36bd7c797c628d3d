/* `dtrain train` under MPI (run by mpirun -np N): N ranks with per-rank batch b give the same
 * parameters as one process with batch N*b (gradients averaged over the global batch; every
 * rank holds rank 0's bits), checked on the tiny Llama over fortunes with SGD + clipping.
 * argv: DATA_DIR REPO_DIR. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static dt_comm *world_comm; /* created first, so that MPI outlives every trainer */

static float *train(const char *data, const char *repo, const char *backend, int batch, size_t *n) {
    char yaml[1024], tr[1200], be[64], bs[64];
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(tr, sizeof tr, "data.train=%s/fortunes/train", data);
    snprintf(be, sizeof be, "dist.backend=%s", backend);
    snprintf(bs, sizeof bs, "data.batch=%d", batch);
    char *over[] = {tr, be, bs, "data.val=", "data.seq_len=64", "train.steps=8",
                    "optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.clip_norm=1",
                    "schedule.warmup_steps=2", "output.dir=runs-test", "output.export=false",
                    "output.run_name=dist", "train.threads=1", "dist.bucket_mb=0.25"};
    dt_config *cfg;
    if (!CHECK(dt_config_from_args(yaml, sizeof over / sizeof over[0], over, &cfg) == DT_OK,
               "config: %s", dt_last_error()))
        return NULL;
    dt_trainer *t;
    dt_status st = dt_trainer_create(cfg, NULL, &t);
    dt_config_free(cfg);
    if (!CHECK(st == DT_OK, "trainer (%s): %s", backend, dt_last_error())) return NULL;
    dt_trainer_set_log(t, NULL);
    CHECK_OK(dt_trainer_run(t));
    float *p = dt_graph_flat_param(dt_trainer_graph(t), n);
    float *copy = malloc(*n * 4);
    memcpy(copy, p, *n * 4);
    dt_trainer_free(t);
    return copy;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (dt_comm_init("mpi", NULL, NULL, &world_comm) != DT_OK) {
        CHECK(0, "comm: %s", dt_last_error());
        return dt_test_finish("test_train_dist");
    }
    int rank = dt_comm_rank(world_comm), world = dt_comm_size(world_comm);
    size_t n = 0, n1 = 0;
    float *dist = train(argv[1], argv[2], "mpi", 4, &n);
    /* Every rank holds rank 0's parameters: the spread of a checksum over ranks is zero. */
    double s[2] = {0, 0};
    for (size_t i = 0; dist && i < n; i++) s[0] += (double)dist[i] * (double)((i % 7) + 1);
    s[1] = s[0] * s[0];
    CHECK_OK(dt_comm_allreduce_f64(world_comm, s, 2));
    CHECK(fabs(s[1] / world - (s[0] / world) * (s[0] / world)) <= 1e-12 * (s[1] / world),
          "all %d ranks hold the same parameters", world);
    if (rank == 0) {
        float *one = train(argv[1], argv[2], "single", 4 * world, &n1);
        if (dist && one && CHECK(n == n1, "same parameter count"))
            /* the same sums in another order: |a - b| <= 2e-6 + 1e-5 |b| */
            dt_check_close("N ranks x batch b vs 1 process x batch N*b", dist, one, (int64_t)n,
                           2e-6, 1e-5);
        free(one);
        printf("  %d ranks vs 1 process, %zu parameters\n", world, n);
    }
    free(dist);
    int rc = dt_test_finish("test_train_dist");
    dt_comm_free(world_comm);
    return rc;
}
