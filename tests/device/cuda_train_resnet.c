/* The trainer with train.device=cuda against train.device=cpu on a ResNet: a ResNet-18 with the
 * small stem, 8 channels wide, on an image dataset written here (256 RGB images of 16x16, 4
 * classes: a bright quadrant, the class's, over noise), from examples/resnet18-fmnist.yaml's
 * settings, STEPS steps of 8 images with the same seed and data: SGD with nesterov momentum
 * and 2 accumulated micro-batches, then AdamW with clipping. Per step the loss and the gradient
 * norm of the two runs must agree, and after the last step every trained parameter and every
 * batchnorm running statistic (both downloaded into the host graph by the trainer: the
 * statistics live in the state buffer and travel with the weights). Also: dist.sync_batchnorm
 * on the device is refused in one line. In scripts/cuda-emu.sh only the CPU runs and that
 * refusal can pass (the emulation has no cuDNN: the device runs fail at the first convolution).
 *
 * Tolerances as tests/device/cuda_train_llama.c: loss |cuda - cpu| <= 2e-4 (1 + |cpu|) per
 * step, gradient norm <= 2e-3 relative; parameters and running statistics: at most 1 in 1000
 * elements off by more than 1e-4 max|cpu| + 1e-3 |cpu|, none by more than 2 lr STEPS (the
 * statistics: 1e-2 max|cpu|). Not yet tuned on a GPU (docs/gpu.md).
 *
 * argv: REPO_DIR (default .., the repository from a build directory in it). Runs in the working
 * directory's runs-test/. Exit 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { STEPS = 6, SIDE = 16, NIMG = 256, CLASSES = 4 };

typedef struct run_out {
    double loss[STEPS], norm[STEPS];
    float *p, *st; /* the trained flat parameters and state (running statistics) */
    size_t n, ns;
} run_out;

static const char *repo = "..";
#define DATA_DIR "runs-test/cuda-train-resnet-data"

/* The dataset (rewritten on every run: a stale one from another version is not reused). */
static int write_data(void) {
    if (!CHECK(system("rm -rf " DATA_DIR " && mkdir -p runs-test") == 0, "cannot prepare %s",
               DATA_DIR))
        return -1;
    dt_dataset_spec sp = {.kind = DT_DATA_IMAGE,
                          .height = SIDE,
                          .width = SIDE,
                          .channels = 3,
                          .classes = CLASSES,
                          .name = "quadrants"};
    dt_dataset_writer *w;
    dt_status st = dt_dataset_writer_open(DATA_DIR, &sp, &w);
    uint8_t px[SIDE * SIDE * 3];
    uint32_t r = 99;
    for (int i = 0; i < NIMG && st == DT_OK; i++) {
        int label = i % CLASSES, qy = label / 2, qx = label % 2;
        for (int y = 0; y < SIDE; y++)
            for (int x = 0; x < SIDE; x++)
                for (int c = 0; c < 3; c++) {
                    r = r * 1664525u + 1013904223u;
                    int v = (int)((r >> 24) % 96);
                    if (y / (SIDE / 2) == qy && x / (SIDE / 2) == qx) v += 120 + 20 * c;
                    px[(y * SIDE + x) * 3 + c] = (uint8_t)v;
                }
        if ((st = dt_dataset_writer_add_image(w, px, label)) != DT_OK) dt_dataset_writer_abort(w);
    }
    if (st == DT_OK) st = dt_dataset_writer_close(w);
    return CHECK(st == DT_OK, "writing %s: %s", DATA_DIR, dt_last_error()) ? 0 : -1;
}

/* The config; extra: one more override (NULL: none). */
static dt_status open_trainer(const char *device, const char *optim, const char *extra,
                              dt_trainer **t) {
    char yaml[1024], dev[64], op[64], rn[128];
    snprintf(yaml, sizeof yaml, "%s/examples/resnet18-fmnist.yaml", repo);
    snprintf(dev, sizeof dev, "train.device=%s", device);
    snprintf(op, sizeof op, "optim.name=%s", optim);
    snprintf(rn, sizeof rn, "output.run_name=cuda-train-resnet-%s-%s", optim, device);
    int sgd = !strcmp(optim, "sgd");
    char *over[] = {"data.train=" DATA_DIR,
                    "data.val=",
                    "data.batch=8",
                    "data.image_size=16",
                    "data.augment=false",
                    "data.workers=1",
                    "model.in_channels=3",
                    "model.num_classes=4",
                    "model.width=8",
                    "schedule.warmup_steps=2",
                    "schedule.total_steps=6",
                    "train.steps=6",
                    "train.log_every=1",
                    "train.eval_every=0",
                    sgd ? "train.grad_accum=2" : "train.grad_accum=1",
                    sgd ? "optim.momentum=0.9" : "optim.clip_norm=0.5",
                    sgd ? "optim.nesterov=true" : "optim.nesterov=false",
                    sgd ? "optim.lr=0.05" : "optim.lr=1e-2",
                    "ckpt.every_steps=0",
                    "ckpt.resume=never",
                    "output.dir=runs-test",
                    "output.export=false",
                    dev,
                    op,
                    rn,
                    extra ? (char *)extra : "train.seed=1234"};
    dt_config *cfg = NULL;
    dt_status s = dt_config_from_args(yaml, sizeof over / sizeof over[0], over, &cfg);
    if (s != DT_OK) return s;
    s = dt_trainer_open(cfg, NULL, t);
    dt_config_free(cfg);
    return s;
}

static int train(const char *device, const char *optim, run_out *r) {
    dt_trainer *t = NULL;
    dt_status s = open_trainer(device, optim, NULL, &t);
    if (!CHECK(s == DT_OK, "%s %s trainer: %s", optim, device, dt_last_error())) return -1;
    dt_trainer_set_log(t, NULL);
    for (int k = 0; k < STEPS && s == DT_OK; k++) {
        s = dt_trainer_step(t);
        r->loss[k] = dt_trainer_progress(t)->loss, r->norm[k] = dt_trainer_progress(t)->grad_norm;
        printf("%s %s step %d: loss %.7f\n", optim, device, k + 1, r->loss[k]);
        fflush(stdout);
    }
    CHECK(s == DT_OK, "%s %s step: %s", optim, device, dt_last_error());
    /* the steps are done: run only finishes (and brings the device's weights and state home) */
    if (s == DT_OK) CHECK_OK(dt_trainer_run(t));
    const float *p = dt_graph_flat_param(dt_trainer_graph(t), &r->n);
    const float *st = dt_graph_flat_state(dt_trainer_graph(t), &r->ns);
    r->p = malloc(r->n * sizeof(float));
    r->st = malloc((r->ns + 1) * sizeof(float));
    memcpy(r->p, p, r->n * sizeof(float));
    memcpy(r->st, st, r->ns * sizeof(float));
    dt_trainer_close(t);
    return s == DT_OK ? 0 : -1;
}

static void compare(const char *optim, double lr) {
    run_out c = {0}, g = {0};
    if (train("cpu", optim, &c) != 0 || train("cuda", optim, &g) != 0) goto out;
    cuda_test_steps(optim, STEPS, g.loss, c.loss, g.norm, c.norm);
    if (!CHECK(c.n == g.n && c.n > 0 && c.ns == g.ns && c.ns > 0,
               "%s: %zu vs %zu parameters, %zu vs %zu state", optim, c.n, g.n, c.ns, g.ns))
        goto out;
    char w[64];
    snprintf(w, sizeof w, "%s: trained parameters", optim);
    cuda_test_close_most(w, g.p, c.p, c.n, 2 * lr * STEPS);
    snprintf(w, sizeof w, "%s: running statistics", optim);
    cuda_test_close_most(w, g.st, c.st, c.ns, 0);
out:
    free(c.p), free(g.p), free(c.st), free(g.st);
}

int main(int argc, char **argv) {
    if (argc > 1) repo = argv[1];
    dt_stream *s;
    cuda_test_device("cuda_train_resnet", &s);
    dt_stream_destroy(s);
    if (write_data() != 0) return dt_test_finish("cuda_train_resnet");
    dt_trainer *t = NULL;
    dt_status st = open_trainer("cuda", "sgd", "dist.sync_batchnorm=true", &t);
    CHECK(st != DT_OK && strstr(dt_last_error(), "dist.sync_batchnorm") &&
              !strchr(dt_last_error(), '\n'),
          "sync_batchnorm on cuda: status %d, '%s'", (int)st, dt_last_error());
    if (t) dt_trainer_close(t);
    compare("sgd", 0.05);
    compare("adamw", 1e-2);
    return dt_test_finish("cuda_train_resnet");
}
