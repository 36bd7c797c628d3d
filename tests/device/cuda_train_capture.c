/* The step as a CUDA graph (train.cuda_graph, src/train/device_capture.c) on a GPU: a small
 * Llama (2 layers, 32 wide, vocabulary 48) trained STEPS steps on cuda with the step captured
 * (auto) and eager (off), same seed and data, AdamW with clipping and weight decay, then SGD
 * with momentum, then AdamW on LoRA adapters with dropout 0.1 over the random base in bf16 (a
 * replay must draw its own step's mask: the step is read from device memory, refreshed from
 * pinned memory by the recorded copy). The captured graph issues the same kernels on the same
 * values, so every step's
 * loss and gradient norm and every trained parameter must be the same bits (memcmp), and the
 * log must say that the step was recorded (not silently eager). Then a captured run stopped
 * after HALF steps (its final checkpoint) and resumed to STEPS must end with the same bits as
 * the uninterrupted one. argv: REPO_DIR (default ..). Runs in runs-test/. Exit 77 without a
 * GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { STEPS = 6, HALF = 3, VOCAB = 48 };
#define DIR "runs-test/cuda-train-capture"

typedef struct result {
    double loss[STEPS], norm[STEPS];
    float *p;
    size_t n;
    int recorded;     /* the log said "the step is recorded" */
    int resumed_from; /* the step the run started from */
} result;

static const char *repo = "..";

static int prepare(void) {
    if (!CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/model") == 0, "cannot make " DIR))
        return -1;
    FILE *f = fopen(DIR "/model/config.json", "w");
    if (!CHECK(f != NULL, "cannot write the model config")) return -1;
    fprintf(f,
            "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 32, "
            "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
            "\"num_key_value_heads\": 2, \"max_position_embeddings\": 32, "
            "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, "
            "\"hidden_act\": \"silu\"}\n",
            VOCAB);
    fclose(f);
    /* documents of a repeated short phrase each: learnable in a few steps */
    dt_dataset_spec sp = {.kind = DT_DATA_TOKENS, .vocab_size = VOCAB, .name = "phrases"};
    dt_dataset_writer *w;
    dt_status st = dt_dataset_writer_open(DIR "/data", &sp, &w);
    uint32_t doc[200];
    for (int d = 0; d < 40 && st == DT_OK; d++) {
        int len = 3 + d % 5;
        for (int i = 0; i < 200; i++) doc[i] = (uint32_t)((d * 11 + (i % len) * 5) % VOCAB);
        st = dt_dataset_writer_add_doc(w, doc, NULL, 200);
    }
    st = st == DT_OK ? dt_dataset_writer_close(w) : (dt_dataset_writer_abort(w), st);
    return CHECK(st == DT_OK, "dataset: %s", dt_last_error()) ? 0 : -1;
}

/* steps: this run's train.steps (the schedule is STEPS long either way); name: the run (a
 * second run of a name resumes from its last checkpoint); resume: only dt_trainer_run, which
 * also writes the checkpoints (every 3 steps and at the end). */
static int train(const char *optim, const char *graph, int steps, const char *name, int resume,
                 result *r) {
    char cwd[1024], yaml[1200], hf[1200], data[1200], g[64], o[64], st_[64], rn[128];
    if (!CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd")) return -1;
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(hf, sizeof hf, "model.hf_path=%s/" DIR "/model", cwd);
    snprintf(data, sizeof data, "data.train=%s/" DIR "/data", cwd);
    snprintf(g, sizeof g, "train.cuda_graph=%s", graph);
    int lora = !strcmp(optim, "lora");
    snprintf(o, sizeof o, "optim.name=%s", lora ? "adamw" : optim);
    snprintf(st_, sizeof st_, "train.steps=%d", steps);
    snprintf(rn, sizeof rn, "output.run_name=%s", name);
    int sgd = !strcmp(optim, "sgd");
    char *over[] = {hf,
                    data,
                    g,
                    o,
                    st_,
                    rn,
                    "train.device=cuda",
                    "data.val=",
                    "data.batch=2",
                    "data.seq_len=24",
                    "data.workers=1",
                    "schedule.warmup_steps=2",
                    "schedule.total_steps=6",
                    "train.log_every=1",
                    "train.eval_every=0",
                    "train.grad_accum=1",
                    sgd ? "optim.momentum=0.9" : "optim.clip_norm=0.5",
                    sgd ? "optim.lr=0.1" : "optim.weight_decay=0.1",
                    sgd    ? "optim.nesterov=true"
                    : lora ? "optim.lr=5e-2" /* adapters from B = 0: a faster start */
                           : "optim.lr=1e-2",
                    "ckpt.every_steps=3",
                    "ckpt.resume=auto",
                    "ckpt.async=false",
                    "output.dir=" DIR "/runs",
                    "output.export=false",
                    lora ? "lora.enabled=true" : "lora.enabled=false",
                    "lora.rank=4",
                    "lora.targets=q_proj,v_proj",
                    lora ? "lora.dropout=0.1" : "lora.dropout=0"};
    dt_config *cfg = NULL;
    dt_trainer *t = NULL;
    dt_status s = dt_config_from_args(yaml, sizeof over / sizeof over[0], over, &cfg);
    if (!CHECK(s == DT_OK, "%s %s config: %s", name, graph, dt_last_error())) return -1;
    s = dt_trainer_open(cfg, NULL, &t);
    dt_config_free(cfg);
    if (!CHECK(s == DT_OK, "%s trainer: %s", name, dt_last_error())) return -1;
    char *logtxt = NULL;
    size_t loglen = 0;
    FILE *log = open_memstream(&logtxt, &loglen);
    dt_trainer_set_log(t, log);
    /* from a resume's step; a run of a name used before goes through dt_trainer_run only (the
     * loop that writes checkpoints), the others step one by one for the per-step figures */
    int k0 = (int)dt_trainer_progress(t)->step;
    r->resumed_from = k0;
    for (int k = k0; k < steps && s == DT_OK && !resume; k++) {
        s = dt_trainer_step(t);
        r->loss[k] = dt_trainer_progress(t)->loss, r->norm[k] = dt_trainer_progress(t)->grad_norm;
    }
    CHECK(s == DT_OK, "%s step: %s", name, dt_last_error());
    if (s == DT_OK) CHECK_OK(dt_trainer_run(t)); /* the last checkpoint, the weights to the host */
    size_t n = 0;
    const float *p = dt_graph_flat_param(dt_trainer_graph(t), &n);
    r->p = malloc(n * sizeof(float));
    if (r->p) memcpy(r->p, p, n * sizeof(float));
    r->n = r->p ? n : 0;
    dt_trainer_close(t);
    fclose(log);
    r->recorded = logtxt && strstr(logtxt, "cuda graph: the step is recorded") != NULL;
    printf("--- %s (cuda_graph=%s), log:\n%s", name, graph, logtxt ? logtxt : "");
    free(logtxt);
    return s == DT_OK && r->p ? 0 : -1;
}

static void same_bits(const char *what, const result *a, const result *b, int from) {
    for (int k = from; k < STEPS; k++)
        CHECK(!memcmp(&a->loss[k], &b->loss[k], sizeof(double)) &&
                  !memcmp(&a->norm[k], &b->norm[k], sizeof(double)),
              "%s step %d: loss %.9g vs %.9g, norm %.9g vs %.9g", what, k + 1, a->loss[k],
              b->loss[k], a->norm[k], b->norm[k]);
    if (!CHECK(a->n == b->n && a->n > 0, "%s: %zu vs %zu parameters", what, a->n, b->n)) return;
    size_t diff = 0;
    for (size_t i = 0; i < a->n; i++) diff += memcmp(&a->p[i], &b->p[i], sizeof(float)) != 0;
    CHECK(diff == 0, "%s: %zu of %zu parameters differ", what, diff, a->n);
}

static void compare(const char *optim) {
    result cap = {0}, eag = {0}, half = {0}, resumed = {0};
    char n1[64], n2[64], n3[64];
    snprintf(n1, sizeof n1, "%s-captured", optim);
    snprintf(n2, sizeof n2, "%s-eager", optim);
    snprintf(n3, sizeof n3, "%s-resumed", optim);
    if (train(optim, "auto", STEPS, n1, 0, &cap) == 0 &&
        train(optim, "off", STEPS, n2, 0, &eag) == 0) {
        CHECK(cap.recorded, "%s: the captured run recorded its step", optim);
        CHECK(!eag.recorded, "%s: cuda_graph=off recorded nothing", optim);
        CHECK(cap.loss[STEPS - 1] < cap.loss[0], "%s: loss %g -> %g (did not train)", optim,
              cap.loss[0], cap.loss[STEPS - 1]);
        same_bits(optim, &cap, &eag, 0);
    }
    /* stopped after HALF (its final checkpoint), then resumed: the captured run's bits */
    if (train(optim, "auto", HALF, n3, 1, &half) == 0 &&
        train(optim, "auto", STEPS, n3, 1, &resumed) == 0) {
        CHECK(half.recorded && resumed.recorded, "%s: both parts recorded their step", optim);
        CHECK(resumed.resumed_from == HALF, "%s: resumed from step %d", optim,
              resumed.resumed_from);
        same_bits(n3, &cap, &resumed, STEPS);
    }
    free(cap.p), free(eag.p), free(half.p), free(resumed.p);
}

int main(int argc, char **argv) {
    if (argc > 1) repo = argv[1];
    dt_stream *s;
    cuda_test_device("cuda_train_capture", &s);
    dt_stream_destroy(s);
    if (prepare() == 0) {
        compare("adamw");
        compare("sgd");
        compare("lora");
    }
    return dt_test_finish("cuda_train_capture");
}
