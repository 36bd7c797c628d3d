/* The trainer with train.device=cuda against train.device=cpu: a small Llama (config.json
 * written here: 2 layers, 64 wide, GQA 4/2 heads, vocabulary 64, tied embeddings) trained for
 * STEPS steps of 4 x 32 tokens with the same seed and data (a token dataset written here: 64
 * documents of 300 tokens, each an arithmetic progression modulo the vocabulary), from
 * examples/llama-tiny-fortunes.yaml's settings, AdamW with clipping and then SGD with
 * momentum (nesterov) and grad accumulation; with CUDA_TRAIN_LLAMA_ONLY=lora (not in the
 * default run yet: it has not passed in full anywhere) LoRA instead (rank 4 on q/v/o/down_proj,
 * adapter dropout 0.1, AdamW at lr 5e-2) on the random base in bf16, whose frozen base reaches
 * the device through the trainer's upload. Per step the loss and the gradient norm of the two
 * runs must agree, and after the last step every trained parameter (downloaded into the host graph
 * by the trainer).
 *
 * Tolerances: loss |cuda - cpu| <= 2e-4 (1 + |cpu|) per step, gradient norm <= 2e-3 relative;
 * parameters: at most 1 in 1000 elements off by more than 1e-4 max|cpu| + 1e-3 |cpu|, and none
 * by more than 2 lr STEPS. The device's GEMMs, attention and reductions sum in other orders
 * than the CPU's (tests/device/cuda_graph_llama.c: a few ulps per op), and the steps compound
 * that: AdamW's update of an element whose gradient is near zero is about lr in size whatever
 * the gradient's rounding, so a few elements may move up to 2 lr apart per step while the loss
 * stays within a few 1e-5.
 *
 * argv: REPO_DIR (default .., the repository from a build directory in it). The environment's
 * CUDA_TRAIN_LLAMA_ONLY=adamw|sgd|lora runs that comparison alone (the emulation takes minutes
 * each, scripts/cuda-emu.sh). Runs in the
 * working directory's runs-test/. Exit 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { STEPS = 6 };

typedef struct run_out {
    double loss[STEPS], norm[STEPS];
    float *p; /* the trained flat parameters */
    size_t n;
} run_out;

static const char *repo = "..";
#define DATA_DIR "runs-test/cuda-train-llama-data"
#define MODEL_DIR "runs-test/cuda-train-llama-model"
#define V 64

/* The dataset (rewritten on every run: a stale one from another version is not reused). */
static int write_data(void) {
    if (!CHECK(system("rm -rf " DATA_DIR " && mkdir -p " MODEL_DIR) == 0, "cannot prepare %s",
               DATA_DIR))
        return -1;
    FILE *f = fopen(MODEL_DIR "/config.json", "w");
    if (!CHECK(f != NULL, "cannot write %s/config.json", MODEL_DIR)) return -1;
    fprintf(f,
            "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 64, "
            "\"intermediate_size\": 160, \"num_hidden_layers\": 2, "
            "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            "\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, "
            "\"rope_theta\": 10000.0, \"tie_word_embeddings\": true, "
            "\"hidden_act\": \"silu\"}\n",
            V);
    fclose(f);
    dt_dataset_spec sp = {.kind = DT_DATA_TOKENS, .vocab_size = V, .name = "progressions"};
    dt_dataset_writer *w;
    dt_status st = dt_dataset_writer_open(DATA_DIR, &sp, &w);
    uint32_t tok[300], r = 99;
    for (int d = 0; d < 64 && st == DT_OK; d++) {
        r = r * 1664525u + 1013904223u;
        uint32_t a = 1 + (r >> 8) % 7, b = (r >> 16) % V;
        for (int i = 0; i < 300; i++) tok[i] = (b + a * (uint32_t)i) % V;
        if ((st = dt_dataset_writer_add_doc(w, tok, NULL, 300)) != DT_OK)
            dt_dataset_writer_abort(w);
    }
    if (st == DT_OK) st = dt_dataset_writer_close(w);
    return CHECK(st == DT_OK, "writing %s: %s", DATA_DIR, dt_last_error()) ? 0 : -1;
}

/* optim: adamw, sgd, or lora (AdamW training LoRA adapters on a random frozen bf16 base) */
static int train(const char *device, const char *optim, run_out *r) {
    char yaml[1024], data[1200], dev[64], op[64], rn[128], hf[1200], cwd[1024];
    if (!CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd")) return -1;
    snprintf(hf, sizeof hf, "model.hf_path=%s/%s", cwd, MODEL_DIR);
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    snprintf(data, sizeof data, "data.train=%s", DATA_DIR);
    snprintf(dev, sizeof dev, "train.device=%s", device);
    int sgd = !strcmp(optim, "sgd"), lora = !strcmp(optim, "lora");
    snprintf(op, sizeof op, "optim.name=%s", lora ? "adamw" : optim);
    snprintf(rn, sizeof rn, "output.run_name=cuda-train-%s-%s", optim, device);
    char *over[] = {data,
                    hf,
                    "data.val=",
                    "data.batch=4",
                    "data.seq_len=32",
                    "data.workers=1",
                    "schedule.warmup_steps=2",
                    "schedule.total_steps=6",
                    "train.steps=6",
                    "train.log_every=1",
                    "train.eval_every=0",
                    sgd ? "train.grad_accum=2" : "train.grad_accum=1",
                    sgd ? "optim.momentum=0.9" : "optim.clip_norm=0.5",
                    sgd ? "optim.nesterov=true" : "optim.weight_decay=0.1",
                    sgd    ? "optim.lr=0.2"
                    : lora ? "optim.lr=5e-2" /* adapters from B = 0: a faster start */
                           : "optim.lr=1e-2",
                    "ckpt.every_steps=0",
                    "ckpt.resume=never",
                    "output.dir=runs-test",
                    "output.export=false",
                    lora ? "lora.enabled=true" : "lora.enabled=false",
                    "lora.rank=4",
                    "lora.targets=q_proj,v_proj,o_proj,down_proj",
                    lora ? "lora.dropout=0.1" : "lora.dropout=0",
                    dev,
                    op,
                    rn};
    dt_config *cfg = NULL;
    dt_trainer *t = NULL;
    dt_status s = dt_config_from_args(yaml, sizeof over / sizeof over[0], over, &cfg);
    if (!CHECK(s == DT_OK, "%s %s config: %s", optim, device, dt_last_error())) return -1;
    s = dt_trainer_open(cfg, NULL, &t);
    dt_config_free(cfg);
    if (!CHECK(s == DT_OK, "%s %s trainer: %s", optim, device, dt_last_error())) return -1;
    dt_trainer_set_log(t, NULL);
    for (int k = 0; k < STEPS && s == DT_OK; k++) {
        s = dt_trainer_step(t);
        r->loss[k] = dt_trainer_progress(t)->loss, r->norm[k] = dt_trainer_progress(t)->grad_norm;
        printf("%s %s step %d: loss %.7f\n", optim, device, k + 1, r->loss[k]);
        fflush(stdout); /* progress: the emulation (scripts/cuda-emu.sh) takes minutes */
    }
    CHECK(s == DT_OK, "%s %s step: %s", optim, device, dt_last_error());
    /* the steps are done: run only finishes (and brings the device's weights to the host) */
    if (s == DT_OK) CHECK_OK(dt_trainer_run(t));
    float *p = dt_graph_flat_param(dt_trainer_graph(t), &r->n);
    r->p = malloc(r->n * sizeof(float));
    memcpy(r->p, p, r->n * sizeof(float));
    /* the parameter table is the CPU run's too: kept for the per-parameter comparison */
    dt_trainer_close(t);
    return s == DT_OK ? 0 : -1;
}

static void compare(const char *optim, double lr) {
    run_out c = {0}, g = {0};
    if (train("cpu", optim, &c) != 0 || train("cuda", optim, &g) != 0) goto out;
    cuda_test_steps(optim, STEPS, g.loss, c.loss, g.norm, c.norm);
    if (!CHECK(c.n == g.n && c.n > 0, "%s: %zu vs %zu parameters", optim, c.n, g.n)) goto out;
    char w[64];
    snprintf(w, sizeof w, "%s: trained parameters", optim);
    cuda_test_close_most(w, g.p, c.p, c.n, 2 * lr * STEPS);
out:
    free(c.p), free(g.p);
}

int main(int argc, char **argv) {
    if (argc > 1) repo = argv[1];
    dt_stream *s;
    cuda_test_device("cuda_train_llama", &s);
    dt_stream_destroy(s);
    if (write_data() != 0) return dt_test_finish("cuda_train_llama");
    const char *only = getenv("CUDA_TRAIN_LLAMA_ONLY") ? getenv("CUDA_TRAIN_LLAMA_ONLY") : "";
    if (!only[0] || !strcmp(only, "adamw")) compare("adamw", 1e-2); /* the configured optim.lr */
    if (!only[0] || !strcmp(only, "sgd")) compare("sgd", 0.2);
    /* opt-in until it has passed in full (docs/gpu.md) */
    if (!strcmp(only, "lora")) compare("lora", 5e-2);
    return dt_test_finish("cuda_train_llama");
}
