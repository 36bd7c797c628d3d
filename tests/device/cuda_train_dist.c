/* Two ranks training on CUDA devices against one process (tests cuda_train_dist_host and
 * cuda_train_dist_nccl), or a GPU rank beside a CPU rank (cuda_train_dist_mixed: rank 0 on
 * cuda:0, rank 1 on the CPU, each against its own device's one process): the tiny Llama of
 * cuda_train_util.h, 6 AdamW steps with clipping and 2 accumulation micro-batches, global batch 4 x
 * 32 tokens: one process with data.batch=4 (dist.backend=single), then the 2 ranks of this mpirun
 * job with data.batch=2 each and dist.gpu_comm=MODE -- their batches together are the one process's
 * (the loader interleaves). Every step's gradient norm (after the all-reduce: the global batch's)
 * must agree within 2e-3 relative, and each rank's trained parameters with its own one-process
 * run's within cuda_train_compare_params's tolerance (the split batch sums in another order;
 * clipping and AdamW compound that). Rank 0's start line must name the way taken ("gpu comm: MODE
 * (", for mixed "gpu comm: host (GPU and CPU ranks)").
 *
 * GPUs: with 2 or more each rank takes its local rank's; with 1 both share cuda:0 (host only:
 * NCCL needs one GPU per rank). argv: MODE (host|nccl) REPO_DIR [probe]. probe (run without
 * mpirun, first): exit 77 -- skipped -- when this build has no CUDA, no GPU is visible, or for
 * nccl fewer than 2 GPUs or no loadable NCCL; else 0. Runs in the working directory's
 * runs-test/. CUDA_TRAIN_DIST_STEPS=K (K < 6) and CUDA_TRAIN_DIST_ACCUM=1 shorten the runs (for
 * the CPU emulation, scripts/cuda-emu.sh, where a step takes minutes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "dtrain/gpu_comm.h"
#include "cuda_train_util.h"
#include "harness.h"

enum { STEPS = 6 };
static const double LR = 1e-2;

static int steps = STEPS, accum = 2;

typedef struct run_out {
    double norm[STEPS];
    float *p;
    size_t n;
    char *log; /* rank 0 of the ranks' run: its log */
} run_out;

static int env_rank(void) {
    const char *k[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (int i = 0; i < 3; i++)
        if (getenv(k[i])) return atoi(getenv(k[i]));
    return 0;
}

static int train(const char *repo, const char *dir, const char *device, int ranks, const char *mode,
                 run_out *r) {
    char yaml[1100], data[1200], model[1200], dev[64], rn[128], batch[32], gc[64], cwd[1024];
    char ts[32], ac[32];
    if (!CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd")) return -1;
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(data, sizeof data, "data.train=%s/%s/data", cwd, dir);
    snprintf(model, sizeof model, "model.hf_path=%s/%s/model", cwd, dir);
    snprintf(dev, sizeof dev, "train.device=%s", device);
    snprintf(rn, sizeof rn, "output.run_name=cuda-dist-%s-%d-of-%d", mode, env_rank(), ranks);
    snprintf(batch, sizeof batch, "data.batch=%d", 4 / ranks);
    snprintf(gc, sizeof gc, "dist.gpu_comm=%s", strcmp(mode, "mixed") ? mode : "auto");
    snprintf(ts, sizeof ts, "train.steps=%d", steps);
    snprintf(ac, sizeof ac, "train.grad_accum=%d", accum);
    char *over[] = {data,
                    model,
                    "data.val=",
                    batch,
                    "data.seq_len=32",
                    "data.workers=1",
                    "schedule.warmup_steps=2",
                    "schedule.total_steps=6",
                    ts,
                    "train.log_every=1",
                    "train.eval_every=0",
                    ac,
                    "optim.clip_norm=0.5",
                    "optim.weight_decay=0.1",
                    "optim.lr=1e-2",
                    "ckpt.every_steps=0",
                    "ckpt.resume=never",
                    "output.dir=runs-test",
                    "output.export=false",
                    dev,
                    rn,
                    gc,
                    ranks > 1 ? "dist.backend=mpi" : "dist.backend=single"};
    dt_config *cfg = NULL;
    dt_trainer *t = NULL;
    dt_status s = dt_config_from_args(yaml, sizeof over / sizeof over[0], over, &cfg);
    if (!CHECK(s == DT_OK, "%s config: %s", rn, dt_last_error())) return -1;
    s = dt_trainer_open(cfg, NULL, &t);
    dt_config_free(cfg);
    if (!CHECK(s == DT_OK, "%s trainer: %s", rn, dt_last_error())) return -1;
    size_t len = 0;
    FILE *log = ranks > 1 ? open_memstream(&r->log, &len) : NULL;
    dt_trainer_set_log(t, log);
    for (int k = 0; k < steps && s == DT_OK; k++) {
        s = dt_trainer_step(t);
        r->norm[k] = dt_trainer_progress(t)->grad_norm;
    }
    CHECK(s == DT_OK, "%s step: %s", rn, dt_last_error());
    /* the steps are done: run only logs, finishes and brings the weights to the host */
    if (s == DT_OK) CHECK_OK(s = dt_trainer_run(t));
    float *p = dt_graph_flat_param(dt_trainer_graph(t), &r->n);
    r->p = malloc(r->n * sizeof(float));
    if (r->p) memcpy(r->p, p, r->n * sizeof(float));
    dt_trainer_close(t);
    if (log) fclose(log);
    return s == DT_OK && r->p ? 0 : -1;
}

static int probe(const char *mode) {
    int gpus = 0;
    if (dt_device_count(DT_DEVICE_CUDA, &gpus) != DT_OK) gpus = 0;
    if (!dt_device_cuda_built() || gpus == 0) {
        printf("cuda_train_dist %s: skipped: no CUDA device (or built without CUDA)\n", mode);
        return 77;
    }
    char why[512];
    if (strcmp(mode, "host") && strcmp(mode, "nccl") && strcmp(mode, "mixed")) {
        printf("cuda_train_dist: mode '%s' (host, nccl or mixed)\n", mode);
        return 2;
    }
    if (!strcmp(mode, "nccl") && (gpus < 2 || !dt_nccl_load(why, sizeof why))) {
        printf("cuda_train_dist nccl: skipped: %s\n",
               gpus < 2 ? "fewer than 2 GPUs (NCCL needs one per rank)" : why);
        return 77;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "host", *repo = argc > 2 ? argv[2] : "..";
    if (argc > 3 && !strcmp(argv[3], "probe")) return probe(mode);
    int pr = probe(mode);
    if (pr != 0) return pr;
    const char *e = getenv("CUDA_TRAIN_DIST_STEPS");
    if (e && atoi(e) >= 1 && atoi(e) < STEPS) steps = atoi(e);
    if ((e = getenv("CUDA_TRAIN_DIST_ACCUM")) && !strcmp(e, "1")) accum = 1;
    int gpus = 0, rank = env_rank(), mixed = !strcmp(mode, "mixed");
    dt_device_count(DT_DEVICE_CUDA, &gpus);
    /* mixed: rank 1 trains on the CPU, beside rank 0's GPU */
    const char *device = mixed ? (rank == 0 ? "cuda:0" : "cpu") : gpus >= 2 ? "cuda" : "cuda:0";
    char dir[128];
    snprintf(dir, sizeof dir, "runs-test/cuda-train-dist-%s-rank%d", mode, rank);
    char data[160], model[160];
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(model, sizeof model, "%s/model", dir);
    run_out one = {0}, two = {0};
    if (cuda_train_write_tiny(data, model, 64) != 0) return dt_test_finish("cuda_train_dist");
    /* the one-process run first: it does not start MPI, which the ranks' run then finalises */
    if (train(repo, dir, device, 1, mode, &one) == 0 &&
        train(repo, dir, device, 2, mode, &two) == 0) {
        for (int k = 0; k < steps; k++) {
            printf("rank %d step %d: |g| 2 ranks %.7g, 1 process %.7g\n", rank, k + 1, two.norm[k],
                   one.norm[k]);
            CHECK(isfinite(one.norm[k]) && one.norm[k] > 0, "step %d: norm %g", k + 1, one.norm[k]);
            CHECK(fabs(two.norm[k] - one.norm[k]) <= 2e-3 * one.norm[k],
                  "rank %d step %d: gradient norm 2 ranks %.8g, 1 process %.8g", rank, k + 1,
                  two.norm[k], one.norm[k]);
        }
        if (CHECK(one.n == two.n, "%zu vs %zu parameters", one.n, two.n)) {
            char what[64];
            snprintf(what, sizeof what, "rank %d %s", rank, mode);
            cuda_train_compare_params(what, one.p, two.p, one.n, LR, steps);
        }
        if (rank == 0) {
            char want[64];
            snprintf(want, sizeof want, "%s", mixed ? "gpu comm: host (GPU and CPU ranks)" : "");
            if (!mixed) snprintf(want, sizeof want, "gpu comm: %s (", mode);
            CHECK(two.log && strstr(two.log, want), "rank 0's log has no '%s'", want);
            const char *line = two.log ? strstr(two.log, "gpu comm: ") : NULL;
            if (line) printf("%.*s\n", (int)strcspn(line, "\n"), line);
        }
    }
    free(one.p), free(two.p), free(one.log), free(two.log);
    return dt_test_finish("cuda_train_dist");
}
