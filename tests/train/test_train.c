/* The trainer end to end on real data:
 *   fmnist   a narrow ResNet-18 on Fashion-MNIST reaches >= 85% test accuracy in < 3 minutes;
 *   repeat   the same config and seed give bit-identical weights, another seed different ones
 *            (with augmentation and 2 prefetch threads);
 *   fortunes a tiny Llama lowers the validation loss well below the unigram baseline.
 * argv: DATA_DIR (holding fmnist/ and fortunes/ made by the import fixtures), REPO_DIR. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static const char *data_dir, *repo;

static dt_trainer *make(const char *yaml, int n, char **over) {
    dt_config *cfg = NULL;
    dt_status st = dt_config_from_args(yaml, n, over, &cfg);
    CHECK(st == DT_OK, "config: %s", dt_last_error());
    if (st != DT_OK) return NULL;
    dt_trainer *t = NULL;
    st = dt_trainer_open(cfg, NULL, &t);
    CHECK(st == DT_OK, "trainer: %s", dt_last_error());
    dt_config_free(cfg);
    return t;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_fmnist(void) {
    char yaml[1024], train[1024], val[1024];
    snprintf(yaml, sizeof yaml, "%s/examples/resnet18-fmnist.yaml", repo);
    snprintf(train, sizeof train, "data.train=%s/fmnist/train", data_dir);
    snprintf(val, sizeof val, "data.val=%s/fmnist/test", data_dir);
    /* Narrow (width 8) and one epoch, so it fits in CI; the full example is `make test-slow`. */
    char *over[] = {train,
                    val,
                    "model.width=8",
                    "data.augment=false",
                    "train.epochs=1",
                    "train.eval_every=0",
                    "train.log_every=100",
                    "schedule.warmup_steps=50",
                    "output.dir=runs-test",
                    "output.run_name=fmnist",
                    "ckpt.every_steps=0"};
    double t0 = now();
    dt_trainer *t = make(yaml, sizeof over / sizeof over[0], over);
    if (!t) return;
    CHECK_OK(dt_trainer_run(t));
    double secs = now() - t0;
    const dt_eval_result *r = dt_trainer_last_eval(t);
    CHECK(r && r->samples == 10000, "evaluated all 10000 test images");
    CHECK(r && r->accuracy >= 0.85, "fmnist accuracy %.2f%% >= 85%%", r ? 100 * r->accuracy : 0);
    printf("  fmnist: %.2f%% in %.0f s\n", r ? 100 * r->accuracy : 0, secs);
    dt_trainer_close(t);
}

/* The full example (ResNet-18 width 64, augmentation, 15 epochs): >= 92% (label slow). */
static void test_fmnist_full(void) {
    char yaml[1024], train[1200], val[1200];
    snprintf(yaml, sizeof yaml, "%s/examples/resnet18-fmnist.yaml", repo);
    snprintf(train, sizeof train, "data.train=%s/fmnist/train", data_dir);
    snprintf(val, sizeof val, "data.val=%s/fmnist/test", data_dir);
    char *over[] = {train, val, "output.dir=runs-test", "output.run_name=fmnist-full",
                    "ckpt.every_steps=0"};
    double t0 = now();
    dt_trainer *t = make(yaml, sizeof over / sizeof over[0], over);
    if (!t) return;
    CHECK_OK(dt_trainer_run(t));
    const dt_eval_result *r = dt_trainer_last_eval(t);
    CHECK(r && r->accuracy >= 0.92, "full ResNet-18 accuracy %.2f%% >= 92%%",
          r ? 100 * r->accuracy : 0);
    printf("  fmnist full: %.2f%% in %.0f s\n", r ? 100 * r->accuracy : 0, now() - t0);
    dt_trainer_close(t);
}

static float *train_params(const char *seed, const char *name, size_t *n) {
    char yaml[1024], train[1024], sd[64], rn[64];
    snprintf(yaml, sizeof yaml, "%s/examples/resnet18-fmnist.yaml", repo);
    snprintf(train, sizeof train, "data.train=%s/fmnist/test", data_dir);
    snprintf(sd, sizeof sd, "train.seed=%s", seed);
    snprintf(rn, sizeof rn, "output.run_name=%s", name);
    char *over[] = {train,
                    "data.val=",
                    "model.width=4",
                    "data.batch=32",
                    "data.augment=true",
                    "data.workers=2",
                    "train.steps=25",
                    "train.grad_accum=2",
                    "schedule.warmup_steps=5",
                    "optim.clip_norm=1",
                    "output.dir=runs-test",
                    "output.export=false",
                    sd,
                    rn};
    dt_trainer *t = make(yaml, sizeof over / sizeof over[0], over);
    if (!t) return NULL;
    dt_trainer_set_log(t, NULL);
    CHECK_OK(dt_trainer_run(t));
    size_t m, ns;
    float *p = dt_graph_flat_param(dt_trainer_graph(t), &m);
    float *s = dt_graph_flat_state(dt_trainer_graph(t), &ns);
    float *out = malloc((m + ns) * 4);
    memcpy(out, p, m * 4), memcpy(out + m, s, ns * 4);
    *n = m + ns;
    dt_trainer_close(t);
    return out;
}

static void test_repeat(void) {
    size_t na, nb, nc;
    float *a = train_params("7", "rep-a", &na), *b = train_params("7", "rep-b", &nb),
          *c = train_params("8", "rep-c", &nc);
    if (a && b && c) {
        CHECK(na == nb && memcmp(a, b, na * 4) == 0,
              "same config and seed: bit-identical weights and statistics");
        CHECK(na == nc && memcmp(a, c, na * 4) != 0, "another seed: different weights");
    }
    free(a), free(b), free(c);
}

/* Cross-entropy of the validation tokens under the training set's unigram distribution (add-one
 * smoothing): what a model that ignores context achieves. */
static double unigram_baseline(const char *train_dir, const char *val_dir) {
    dt_dataset *tr, *va;
    if (dt_dataset_open(train_dir, 0, &tr) != DT_OK || dt_dataset_open(val_dir, 0, &va) != DT_OK) {
        CHECK(0, "open fortunes: %s", dt_last_error());
        return NAN;
    }
    int64_t V = dt_dataset_get_info(tr)->vocab_size, total = 0;
    double *cnt = calloc((size_t)V, sizeof *cnt);
    for (int64_t d = 0; d < dt_dataset_get_info(tr)->records; d++) {
        const uint32_t *tok;
        const uint8_t *mask;
        int64_t n;
        if (dt_dataset_doc(tr, d, &tok, &mask, &n) != DT_OK) break;
        for (int64_t i = 0; i < n; i++) cnt[tok[i]] += 1, total++;
    }
    double nll = 0;
    int64_t nv = 0;
    for (int64_t d = 0; d < dt_dataset_get_info(va)->records; d++) {
        const uint32_t *tok;
        const uint8_t *mask;
        int64_t n;
        if (dt_dataset_doc(va, d, &tok, &mask, &n) != DT_OK) break;
        for (int64_t i = 1; i < n; i++, nv++) nll -= log((cnt[tok[i]] + 1) / (double)(total + V));
    }
    free(cnt);
    dt_dataset_close(tr), dt_dataset_close(va);
    return nll / (double)nv;
}

static void test_fortunes(void) {
    char yaml[1024], train[1200], val[1200], tdir[1024], vdir[1024];
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(tdir, sizeof tdir, "%s/fortunes/train", data_dir);
    snprintf(vdir, sizeof vdir, "%s/fortunes/val", data_dir);
    snprintf(train, sizeof train, "data.train=%s", tdir);
    snprintf(val, sizeof val, "data.val=%s", vdir);
    char *over[] = {train,
                    val,
                    "train.steps=300",
                    "train.eval_every=0",
                    "output.dir=runs-test",
                    "output.run_name=fortunes"};
    dt_trainer *t = make(yaml, sizeof over / sizeof over[0], over);
    if (!t) return;
    CHECK_OK(dt_trainer_run(t));
    double base = unigram_baseline(tdir, vdir);
    const dt_eval_result *r = dt_trainer_last_eval(t);
    /* "Well below": at least 0.75 nats under the unigram model (perplexity ~2x lower). */
    CHECK(r && r->loss < base - 0.75, "tiny llama val loss %.3f vs unigram baseline %.3f",
          r ? r->loss : NAN, base);
    printf("  fortunes: val loss %.3f, unigram baseline %.3f\n", r ? r->loss : NAN, base);
    dt_trainer_close(t);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    data_dir = argv[1], repo = argv[2];
    const char *only = argc > 3 ? argv[3] : "";
    if (!*only || !strcmp(only, "fmnist")) test_fmnist();
    if (!*only || !strcmp(only, "repeat")) test_repeat();
    if (!*only || !strcmp(only, "fortunes")) test_fortunes();
    if (!strcmp(only, "fmnist_full")) test_fmnist_full();
    return dt_test_finish("test_train");
}
