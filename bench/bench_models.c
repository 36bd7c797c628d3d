/* Training-step throughput of whole models, printed like the peers in bench/peers so the two sides
 * can be put side by side (bench/bench_models.sh): bench_models resnet  DEPTH STEM(cifar|stock) HW
 * BATCH [steps] [warmup]   SGD m=0.9 wd=5e-4 bench_models llama   DIM LAYERS HEADS KV FFN VOCAB SEQ
 * BATCH [steps] [warmup]   AdamW One step = forward + backward + optimizer, as the peer measures
 * it. Threads: DT_THREADS (default 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "bench_util.h"

static int die(const char *what) {
    fprintf(stderr, "bench_models: %s: %s\n", what, dt_last_error());
    return 1;
}

typedef struct run {
    dt_graph *g;
    int loss;
    dt_optim *opt;
    float *p, *gr;
    size_t n;
} run;

static int setup_optim(run *r, dt_optim_kind kind) {
    dt_optim_group groups[1024];
    int ng;
    dt_optim_config c = dt_optim_config_default(kind);
    if (kind == DT_OPTIM_SGD)
        c.momentum = 0.9, c.weight_decay = 5e-4;
    else
        c.weight_decay = 0.1;
    r->p = dt_graph_flat_param(r->g, &r->n);
    r->gr = dt_graph_flat_grad(r->g, NULL);
    if (dt_optim_groups_from_graph(r->g, groups, 1024, &ng) != DT_OK) return -1;
    /* the peers decay every parameter: one group */
    return dt_optim_init(&c, r->n, 0, r->n, NULL, 0, &r->opt) == DT_OK ? 0 : -1;
}

static int step(run *r, float lr) {
    if (dt_graph_forward(r->g, 1) != DT_OK || dt_graph_backward(r->g) != DT_OK) return -1;
    return dt_optim_step(r->opt, r->p, r->gr, lr) == DT_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    int threads = getenv("DT_THREADS") ? atoi(getenv("DT_THREADS")) : 2;
    dt_threads_set(threads);
    run r = {0};
    int steps = 6, warmup = 2;
    double per_step_items = 0;
    const char *unit = "img_per_s";
    char desc[256];
    r.g = dt_graph_init();
    if (argc >= 6 && !strcmp(argv[1], "resnet")) {
        int depth = atoi(argv[2]), small = !strcmp(argv[3], "cifar"), hw = atoi(argv[4]),
            batch = atoi(argv[5]);
        if (argc > 6) steps = atoi(argv[6]);
        if (argc > 7) warmup = atoi(argv[7]);
        int x = dt_graph_input(r.g, "x", DT_F32, 4, (int64_t[]){batch, 3, hw, hw}, 0);
        int y = dt_graph_input(r.g, "y", DT_I64, 1, (int64_t[]){batch}, 0);
        dt_resnet_config c = {
            .depth = depth, .in_channels = 3, .num_classes = 10, .small_stem = small, .width = 64};
        r.loss = dt_cross_entropy(r.g, dt_resnet_build(r.g, &c, x), y, 0.0f, -100);
        if (r.loss < 0 || dt_graph_compile(r.g, r.loss, NULL) != DT_OK) return die("build");
        dt_resnet_init(r.g, 0);
        const dt_tensor *xv = dt_graph_value(r.g, x);
        dt_rng_normal(xv->data, dt_tensor_numel(xv), 1, 0, 0, 0.0f, 1.0f);
        int64_t *yv = dt_graph_value(r.g, y)->data;
        for (int i = 0; i < batch; i++) yv[i] = i % 10;
        if (setup_optim(&r, DT_OPTIM_SGD)) return die("optim");
        per_step_items = batch;
        snprintf(desc, sizeof desc, "model=resnet%d stem=%s in=3x%dx%d batch=%d", depth, argv[3],
                 hw, hw, batch);
    } else if (argc >= 10 && !strcmp(argv[1], "llama")) {
        dt_llama_config c = {.hidden_size = atoi(argv[2]),
                             .num_hidden_layers = atoi(argv[3]),
                             .num_attention_heads = atoi(argv[4]),
                             .num_key_value_heads = atoi(argv[5]),
                             .intermediate_size = atoi(argv[6]),
                             .vocab_size = atoi(argv[7]),
                             .rms_norm_eps = 1e-5f,
                             .rope_theta = 10000.0f};
        c.head_dim = c.hidden_size / c.num_attention_heads;
        /* DT_BENCH_LORA=r: LoRA finetuning (r, alpha 16, q_proj and v_proj, frozen bf16 base) */
        const char *lr = getenv("DT_BENCH_LORA");
        if (lr && atoi(lr) > 0)
            c.lora = (dt_lora_config){
                .rank = atoi(lr), .alpha = 16.0f, .targets = DT_LORA_Q | DT_LORA_V};
        int T = atoi(argv[8]), B = atoi(argv[9]);
        if (argc > 10) steps = atoi(argv[10]);
        if (argc > 11) warmup = atoi(argv[11]);
        c.max_position_embeddings = T;
        int ids = dt_graph_input(r.g, "ids", DT_I64, 2, (int64_t[]){B, T}, 0);
        int tg = dt_graph_input(r.g, "targets", DT_I64, 1, (int64_t[]){(int64_t)B * T}, 0);
        int logits = dt_llama_build(r.g, &c, ids);
        int flat = dt_reshape(r.g, logits, 2, (int64_t[]){(int64_t)B * T, c.vocab_size});
        r.loss = dt_cross_entropy(r.g, flat, tg, 0.0f, -100);
        if (r.loss < 0 || dt_graph_compile(r.g, r.loss, NULL) != DT_OK) return die("build");
        dt_llama_init(r.g, 0);
        int64_t *iv = dt_graph_value(r.g, ids)->data, *tv = dt_graph_value(r.g, tg)->data;
        for (int64_t i = 0; i < (int64_t)B * T; i++)
            iv[i] = (i * 7919) % c.vocab_size, tv[i] = (i * 104729) % c.vocab_size;
        if (setup_optim(&r, DT_OPTIM_ADAMW)) return die("optim");
        per_step_items = (double)B * T;
        unit = "tok_per_s";
        snprintf(desc, sizeof desc,
                 "llama dim=%d L=%d H=%d KV=%d ffn=%d V=%d seq=%d batch=%d lora_r=%d",
                 c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                 c.intermediate_size, c.vocab_size, T, B, c.lora.rank);
    } else {
        fprintf(stderr, "usage: bench_models resnet DEPTH cifar|stock HW BATCH [steps] [warmup]\n"
                        "       bench_models llama DIM LAYERS HEADS KV FFN VOCAB SEQ BATCH [steps] "
                        "[warmup]\n");
        return 2;
    }
    double t0 = bench_now();
    for (int i = 0; i < warmup; i++)
        if (step(&r, 1e-3f)) return die("step");
    double tw = bench_now() - t0;
    double *ts = calloc((size_t)steps, sizeof *ts);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    for (int i = 0; i < steps; i++) {
        double t = bench_now();
        if (step(&r, 1e-3f)) return die("step");
        ts[i] = bench_now() - t;
    }
    getrusage(RUSAGE_SELF, &r1);
    qsort(ts, (size_t)steps, sizeof *ts, bench_cmp_double);
    double med = ts[steps / 2];
    dt_graph_mem m;
    dt_graph_memory(r.g, &m);
    printf("dtrain %s threads=%d steps=%d warmup_s=%.2f median_step_s=%.4f min_step_s=%.4f "
           "%s=%.1f params=%.2fM arena_MiB=%.0f\n",
           desc, threads, steps, tw, med, ts[0], unit, per_step_items / med, (double)r.n / 1e6,
           (double)m.arena_bytes / 1048576.0);
    printf("   per-step: minflt=%ld\n", (r1.ru_minflt - r0.ru_minflt) / steps);
    free(ts);
    dt_optim_free(r.opt);
    dt_graph_free(r.g);
    return 0;
}
