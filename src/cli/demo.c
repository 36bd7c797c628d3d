/* `dtrain demo`: until the trainer exists, a small real training run in one process: an MLP
 * classifies generated Gaussian blobs (16-D, 4 classes) with AdamW, warmup + cosine schedule,
 * gradient clipping; it prints the loss falling and the held-out accuracy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli/cli.h"
#include "dtrain/dtrain.h"

enum { D = 16, H = 64, C = 4, B = 64, STEPS = 300, NTEST = 512 };

/* Blob k is centred at a fixed random point; samples are centre + N(0, 1.2^2). */
static void make_batch(float *x, int64_t *y, int n, uint64_t seed, const float *centres) {
    dt_rng_normal(x, (int64_t)n * D, seed, 1, 0, 0.0f, 1.2f);
    float u[4096];
    dt_rng_uniform(u, n, seed, 2, 0, 0.0f, (float)C);
    for (int i = 0; i < n; i++) {
        y[i] = (int64_t)u[i] % C;
        for (int d = 0; d < D; d++) x[i * D + d] += centres[y[i] * D + d];
    }
}

static int build(dt_graph *g, int n, int *logits) {
    int x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){n, D}, 0);
    int y = dt_graph_input(g, "y", DT_I64, 1, (int64_t[]){n}, 0);
    int w1 = dt_graph_param(g, "fc1.weight", DT_F32, 2, (int64_t[]){H, D}, 0);
    int b1 = dt_graph_param(g, "fc1.bias", DT_F32, 1, (int64_t[]){H}, DT_PARAM_NO_DECAY);
    int w2 = dt_graph_param(g, "fc2.weight", DT_F32, 2, (int64_t[]){C, H}, 0);
    int b2 = dt_graph_param(g, "fc2.bias", DT_F32, 1, (int64_t[]){C}, DT_PARAM_NO_DECAY);
    int h = dt_relu(g, dt_linear(g, x, w1, b1));
    *logits = dt_linear(g, h, w2, b2);
    return dt_cross_entropy(g, *logits, y, 0.0f, -100);
}

static int fail(const char *what) {
    fprintf(stderr, "dtrain demo: %s: %s\n", what, dt_last_error());
    return 1;
}

int dt_cli_demo(int argc, char **argv) {
    (void)argc, (void)argv;
    dt_threads_set(0);
    printf("dtrain demo: a small MLP (16-64-4) on generated Gaussian blobs in one process, no\n"
           "data needed. `make demo` runs the real one: ResNet-18 on Fashion-MNIST over 2 MPI\n"
           "ranks with checkpoints and a resume (scripts/demo.sh).\n");
    float centres[C * D];
    dt_rng_normal(centres, C * D, 99, 0, 0, 0.0f, 1.0f);
    dt_graph *g = dt_graph_init(), *ge = dt_graph_init();
    int logits, elogits;
    int loss = build(g, B, &logits), eloss = build(ge, NTEST, &elogits);
    if (loss < 0 || eloss < 0) return fail("build");
    dt_graph_keep(ge, elogits);
    if (dt_graph_compile(g, loss, NULL) != DT_OK) return fail("compile");
    dt_graph_opts eo = {.no_backward = 1};
    if (dt_graph_compile(ge, eloss, &eo) != DT_OK) return fail("compile eval");
    size_t n;
    float *p = dt_graph_flat_param(g, &n), *gr = dt_graph_flat_grad(g, NULL);
    dt_rng_normal(p, (int64_t)n, 7, 0, 0, 0.0f, 0.2f); /* small random init, biases included */
    dt_optim_group groups[8];
    int ng;
    dt_optim_config oc = dt_optim_config_default(DT_OPTIM_ADAMW);
    dt_optim *opt;
    if (dt_optim_groups_from_graph(g, groups, 8, &ng) != DT_OK ||
        dt_optim_init(&oc, n, 0, n, groups, ng, &opt) != DT_OK)
        return fail("optimizer");
    dt_lr_schedule sched = {.kind = DT_LR_COSINE,
                            .base_lr = 0.01f,
                            .warmup_steps = 20,
                            .total_steps = STEPS,
                            .min_lr = 0.0005f};
    float *x = (float *)dt_graph_value(g, dt_graph_find(g, "x"))->data;
    int64_t *y = (int64_t *)dt_graph_value(g, dt_graph_find(g, "y"))->data;
    for (int step = 0; step < STEPS; step++) {
        make_batch(x, y, B, 1000 + (uint64_t)step, centres);
        if (dt_graph_forward(g, 1) != DT_OK || dt_graph_backward(g) != DT_OK) return fail("step");
        float norm = dt_grad_clip_norm(gr, n, 1.0f);
        float lr = dt_lr_at(&sched, step);
        if (dt_optim_step(opt, p, gr, lr) != DT_OK) return fail("optimizer step");
        if (step % 50 == 0 || step == STEPS - 1)
            printf("step %4d  loss %.4f  grad-norm %.3f  lr %.5f\n", step,
                   *(float *)dt_graph_value(g, loss)->data, norm, lr);
    }
    /* Held-out accuracy with the trained weights (eval graph, same parameter layout). */
    float *pe = dt_graph_flat_param(ge, NULL);
    for (size_t i = 0; i < n; i++) pe[i] = p[i];
    float *xe = (float *)dt_graph_value(ge, dt_graph_find(ge, "x"))->data;
    int64_t *ye = (int64_t *)dt_graph_value(ge, dt_graph_find(ge, "y"))->data;
    make_batch(xe, ye, NTEST, 424242, centres);
    if (dt_graph_forward(ge, 0) != DT_OK) return fail("eval");
    const float *lg = dt_graph_value(ge, elogits)->data;
    int correct = 0;
    for (int i = 0; i < NTEST; i++) {
        int best = 0;
        for (int c = 1; c < C; c++)
            if (lg[i * C + c] > lg[i * C + best]) best = c;
        correct += best == ye[i];
    }
    double acc = (double)correct / NTEST;
    printf("held-out loss %.4f, accuracy %.1f%% (chance 25%%)\n",
           *(float *)dt_graph_value(ge, eloss)->data, 100 * acc);
    dt_optim_free(opt);
    dt_graph_free(g), dt_graph_free(ge);
    return acc > 0.5 ? 0 : 1;
}
