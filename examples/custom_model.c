/* A custom model trained by dtrain's trainer through the C API: a two-layer MLP on an image
 * dataset (e.g. Fashion-MNIST), no CLI involved.
 *
 *   custom_model DATA_DIR [steps]      DATA_DIR holds train/ and test/ (dtrain data import)
 *
 * The model is ~20 lines: declare parameters, chain ops, return the logits. The trainer supplies
 * data loading, the loss, the optimizer, evaluation, logging and the exported weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "dtrain/dtrain.h"

typedef struct mlp {
    int hidden;
} mlp;

/* x [B, C, H, W] -> flatten -> Linear(C*H*W, hidden) -> ReLU -> Linear(hidden, 10). */
static int mlp_build(dt_graph *g, int x, void *ud) {
    const mlp *m = ud;
    const dt_tensor *s = dt_graph_shape(g, x);
    int64_t B = s->shape[0], in = s->shape[1] * s->shape[2] * s->shape[3];
    int h = dt_reshape(g, x, 2, (int64_t[]){B, in});
    int w1 = dt_graph_param(g, "fc1.weight", DT_F32, 2, (int64_t[]){m->hidden, in}, 0);
    int b1 = dt_graph_param(g, "fc1.bias", DT_F32, 1, (int64_t[]){m->hidden}, DT_PARAM_NO_DECAY);
    int w2 = dt_graph_param(g, "fc2.weight", DT_F32, 2, (int64_t[]){10, m->hidden}, 0);
    int b2 = dt_graph_param(g, "fc2.bias", DT_F32, 1, (int64_t[]){10}, DT_PARAM_NO_DECAY);
    h = dt_relu(g, dt_linear(g, h, w1, b1));
    return dt_linear(g, h, w2, b2);
}

/* PyTorch's nn.Linear initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
static dt_status mlp_init(dt_graph *g, uint64_t seed, void *ud) {
    (void)ud;
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        const dt_tensor *t = dt_graph_value(g, pi->id);
        int64_t fan_in =
            dt_graph_shape(g, dt_graph_find(g, i < 2 ? "fc1.weight" : "fc2.weight"))->shape[1];
        float b = 1.0f / sqrtf((float)fan_in);
        dt_rng_uniform(t->data, (int64_t)pi->numel, seed, (uint32_t)i, 0, -b, b);
    }
    return DT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: custom_model DATA_DIR [steps]\n");
        return 2;
    }
    char train[4096], val[4096], steps[64];
    snprintf(train, sizeof train, "data.train=%s/train", argv[1]);
    snprintf(val, sizeof val, "data.val=%s/test", argv[1]);
    snprintf(steps, sizeof steps, "train.steps=%s", argc > 2 ? argv[2] : "500");
    char *over[] = {train,
                    val,
                    steps,
                    "data.batch=128",
                    "optim.name=adamw",
                    "optim.lr=0.002",
                    "train.log_every=100",
                    "output.dir=runs",
                    "output.experiment=custom-mlp",
                    "output.run_name=example"};
    dt_config *cfg;
    if (dt_config_from_args(NULL, sizeof over / sizeof over[0], over, &cfg) != DT_OK) {
        fprintf(stderr, "custom_model: %s\n", dt_last_error());
        return 2;
    }
    mlp m = {.hidden = 256};
    dt_model_def def = {.name = "mlp", .build = mlp_build, .init = mlp_init, .ud = &m};
    dt_trainer *t;
    if (dt_trainer_open(cfg, &def, &t) != DT_OK) {
        fprintf(stderr, "custom_model: %s\n", dt_last_error());
        dt_config_free(cfg);
        return 2;
    }
    dt_status st = dt_trainer_run(t);
    if (st != DT_OK) fprintf(stderr, "custom_model: %s\n", dt_last_error());
    const dt_eval_result *r = dt_trainer_last_eval(t);
    if (r) printf("custom mlp: test accuracy %.2f%%\n", 100 * r->accuracy);
    int ok = st == DT_OK && r && r->accuracy > 0.80;
    dt_trainer_close(t);
    dt_config_free(cfg);
    return ok ? 0 : 1;
}
