/* train.precision: bf16 end to end, on the tiny Llama (fortunes, AdamW + clipping) and a narrow
 * ResNet-18 (Fashion-MNIST, SGD with batchnorm), 6 steps each:
 *   - the first step's loss (same batch, same initial weights: only the forward's rounding
 *     differs) lies within 1% of the fp32 run's and is not equal to it;
 *   - after 6 steps the bf16 run's weights differ from the fp32 run's and its loss lies within
 *     10% (training amplifies any rounding difference: the ResNet's 6-step fp32 loss alone moves
 *     by 0.3% between an optimised and a sanitizer build);
 *   - a bf16 run checkpointed at step 3 and resumed to 6 ends with the bits of the uninterrupted
 *     bf16 run (f32 master weights and optimizer state are checkpointed; the rounding is a
 *     pure function of them and the batch).
 * Runs with DT_CPU_BF16=emulate (the exact f32 emulation where the CPU has no bf16 kernels),
 * and as train_bf16_native (DT_TEST_BF16=native) with the CPU's bf16 kernels: the Llama's
 * linear layers and the ResNet's convolutions and classifier through oneDNN's bf16 primitives
 * (the Llama's attention is its own f32 op, no matmul); skipped, 77, on a CPU without them.
 * argv: DATA_DIR (fmnist/ and fortunes/ of the import fixtures), REPO_DIR. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static const char *data_dir, *repo;

/* Trains `steps` of model ("llama" or "resnet") at precision; returns the flat parameters and
 * batchnorm statistics (malloc'd, *n floats) and the last step's loss. */
static float *train(const char *model, const char *precision, int steps, const char *name,
                    const char *resume, size_t *n, double *loss) {
    char yaml[1024], data[1200], prec[64], st[64], rn[128], rs[64];
    int llama = !strcmp(model, "llama");
    snprintf(yaml, sizeof yaml, "%s/examples/%s", repo,
             llama ? "llama-tiny-fortunes.yaml" : "resnet18-fmnist.yaml");
    snprintf(data, sizeof data, "data.train=%s/%s", data_dir,
             llama ? "fortunes/train" : "fmnist/test");
    snprintf(prec, sizeof prec, "train.precision=%s", precision);
    snprintf(st, sizeof st, "train.steps=%d", steps);
    snprintf(rn, sizeof rn, "output.run_name=%s", name);
    snprintf(rs, sizeof rs, "ckpt.resume=%s", resume);
    char *over[] = {data,
                    "data.val=",
                    llama ? "data.batch=4" : "data.batch=32",
                    llama ? "data.seq_len=64" : "model.width=4",
                    "data.workers=1",
                    llama ? "data.workers=1" : "data.augment=false",
                    "schedule.warmup_steps=2",
                    "schedule.total_steps=6",
                    "train.eval_every=0",
                    "train.log_every=1",
                    "ckpt.every_steps=3",
                    "output.dir=runs-test",
                    "output.export=false",
                    prec,
                    st,
                    rn,
                    rs};
    dt_config *cfg = NULL;
    dt_trainer *t = NULL;
    dt_status s = dt_config_from_args(yaml, sizeof over / sizeof over[0], over, &cfg);
    CHECK(s == DT_OK, "%s config: %s", name, dt_last_error());
    if (s == DT_OK) s = dt_trainer_open(cfg, NULL, &t);
    dt_config_free(cfg);
    CHECK(s == DT_OK, "%s trainer: %s", name, dt_last_error());
    if (s != DT_OK) return NULL;
    dt_trainer_set_log(t, NULL);
    CHECK_OK(dt_trainer_run(t));
    CHECK(dt_trainer_progress(t)->step == steps, "%s: ended at step %lld, expected %d", name,
          (long long)dt_trainer_progress(t)->step, steps);
    *loss = dt_trainer_progress(t)->loss;
    size_t m, ns;
    float *p = dt_graph_flat_param(dt_trainer_graph(t), &m);
    float *sv = dt_graph_flat_state(dt_trainer_graph(t), &ns);
    float *out = malloc((m + ns) * sizeof *out);
    memcpy(out, p, m * sizeof *out), memcpy(out + m, sv, ns * sizeof *out);
    *n = m + ns;
    dt_trainer_close(t);
    return out;
}

static void check_model(const char *model) {
    char a[64], b[64], c[64];
    snprintf(a, sizeof a, "bf16-%s-fp32", model);
    snprintf(b, sizeof b, "bf16-%s-whole", model);
    snprintf(c, sizeof c, "bf16-%s-resumed", model);
    size_t n32 = 0, nw = 0, nr = 0, nh = 0;
    double l32 = NAN, lw = NAN, lr = NAN, lh = NAN, f1 = NAN, b1 = NAN;
    char a1[64], b1n[64];
    snprintf(a1, sizeof a1, "bf16-%s-fp32-1", model);
    snprintf(b1n, sizeof b1n, "bf16-%s-bf16-1", model);
    size_t n1 = 0;
    free(train(model, "fp32", 1, a1, "never", &n1, &f1));
    free(train(model, "bf16", 1, b1n, "never", &n1, &b1));
    printf("  %s: first-step loss fp32 %.6f, bf16 %.6f\n", model, f1, b1);
    CHECK(fabs(b1 - f1) <= 0.01 * fabs(f1) && b1 != f1,
          "%s: bf16 first-step loss %.9g within 1%% of fp32 %.9g and not equal", model, b1, f1);
    float *f32 = train(model, "fp32", 6, a, "never", &n32, &l32);
    float *whole = train(model, "bf16", 6, b, "never", &nw, &lw);
    float *half = train(model, "bf16", 3, c, "never", &nh, &lh);
    float *resumed = train(model, "bf16", 6, c, "auto", &nr, &lr);
    if (f32 && whole && resumed) {
        double dmax = 0;
        for (size_t i = 0; i < n32 && n32 == nw; i++) {
            double d = fabs((double)f32[i] - whole[i]);
            dmax = d > dmax ? d : dmax;
        }
        printf("  %s: loss fp32 %.6f, bf16 %.6f; largest weight difference %.3g\n", model, l32, lw,
               dmax);
        CHECK(n32 == nw && dmax > 0, "%s: bf16 weights differ from fp32", model);
        CHECK(fabs(lw - l32) <= 0.10 * fabs(l32), "%s: bf16 loss %.6f within 10%% of fp32 %.6f",
              model, lw, l32);
        CHECK(lw != l32, "%s: bf16 loss differs from fp32 (%.9g)", model, lw);
        CHECK(nw == nr && !memcmp(whole, resumed, nw * sizeof *whole),
              "%s: bf16 resumed at step 3 == uninterrupted, bit for bit", model);
        CHECK(lw == lr, "%s: the resumed run's last loss %.9g == uninterrupted %.9g", model, lr,
              lw);
    }
    free(f32), free(whole), free(half), free(resumed);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    data_dir = argv[1], repo = argv[2];
    const char *want = getenv("DT_TEST_BF16");
    if (want && !strcmp(want, "native") && dt_bf16_gemm_mode() != DT_BF16_NATIVE) {
        printf("train_bf16: skipped: this CPU has no bf16 kernels (native mode)\n");
        return 77;
    }
    check_model("llama");
    check_model("resnet");
    return dt_test_finish("train_bf16");
}
