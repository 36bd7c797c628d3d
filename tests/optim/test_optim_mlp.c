/* End-to-end PyTorch parity of a training loop: an MLP 8 -> 16 -> relu -> 4 with cross-entropy,
 * 20 steps, each on a batch of 8 taken as 2 micro-batches of 4 with gradient accumulation
 * (dt_graph_set_accumulate + loss scale 1/2), global-norm clipping (max_norm 0.8: about half the
 * steps clip), warmup 3 + cosine schedule to 0.1 * base lr at step 20, and
 *   SGD (momentum 0.9, nesterov, wd 1e-4, no decay on biases), base lr 0.2
 *   AdamW (wd 0.01, no decay on biases), base lr 0.05.
 * Labels come from a fixed random linear teacher, so the loss falls (1.49 -> 0.56 / 0.71).
 * Compared with tests/ref/ref_optim.py (torch on the full batch of 8): per-step loss, grad norm
 * and lr, and the final parameters.
 * Also: gradients of 2 accumulated micro-batches of 4 equal those of one batch of 8. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/optim.h"
#include "harness.h"

/* Final parameters: |ours - torch| <= 1e-7 + 1e-5 * |torch| (f32 rounding differences in the
 * GEMMs and reductions, amplified over 20 steps). */
#define FINAL_ATOL 1e-7
#define FINAL_RTOL 1e-5
/* Per-step loss and gradient norm (computed before the update of that step). */
#define STEP_ATOL 1e-6
#define STEP_RTOL 1e-5
/* Accumulated 2 x 4 vs one batch of 8: the same sums in a different order. */
#define ACCUM_ATOL 1e-6

enum { D_IN = 8, D_H = 16, D_OUT = 4, B = 8, MB = 4 };

static const char *PNAMES[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

typedef struct mlp {
    dt_graph *g;
    int x, y, p[4], loss;
    int batch;
} mlp;

static int mlp_build(mlp *m, int batch) {
    memset(m, 0, sizeof *m);
    m->batch = batch;
    dt_graph *g = m->g = dt_graph_init();
    m->x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){batch, D_IN}, 0);
    m->y = dt_graph_input(g, "y", DT_I64, 1, (int64_t[]){batch}, 0);
    m->p[0] = dt_graph_param(g, PNAMES[0], DT_F32, 2, (int64_t[]){D_H, D_IN}, 0);
    m->p[1] = dt_graph_param(g, PNAMES[1], DT_F32, 1, (int64_t[]){D_H}, DT_PARAM_NO_DECAY);
    m->p[2] = dt_graph_param(g, PNAMES[2], DT_F32, 2, (int64_t[]){D_OUT, D_H}, 0);
    m->p[3] = dt_graph_param(g, PNAMES[3], DT_F32, 1, (int64_t[]){D_OUT}, DT_PARAM_NO_DECAY);
    int h = dt_relu(g, dt_linear(g, m->x, m->p[0], m->p[1]));
    int logits = dt_linear(g, h, m->p[2], m->p[3]);
    m->loss = dt_cross_entropy(g, logits, m->y, 0.0f, DT_IGNORE_INDEX_DEFAULT);
    if (!CHECK(m->loss >= 0, "building the MLP: %s", dt_last_error())) return -1;
    dt_status s = dt_graph_compile(g, m->loss, NULL);
    if (!CHECK(s == DT_OK, "compile: %s", dt_last_error())) return -1;
    return 0;
}

/* Copies the initial weights from the reference into the graph's parameters. */
static void mlp_set_init(mlp *m, dt_ref *r) {
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "init.%s", PNAMES[i]);
        const dt_tensor *t = dt_ref_get(r, key);
        if (t) dt_test_set(m->g, m->p[i], t);
    }
}

/* Loads rows [row0, row0 + batch) of step s's batch into the inputs. X: [S, B, D_IN] f32,
 * Y: [S, B] i64. */
static void mlp_set_batch(mlp *m, const float *X, const int64_t *Y, int s, int row0) {
    memcpy(dt_graph_value(m->g, m->x)->data, X + ((size_t)s * B + row0) * D_IN,
           (size_t)m->batch * D_IN * sizeof(float));
    memcpy(dt_graph_value(m->g, m->y)->data, Y + (size_t)s * B + row0,
           (size_t)m->batch * sizeof(int64_t));
}

/* Forward + backward of step s's batch of 8 as micro-batches of m->batch, accumulating the
 * gradients. Returns the mean loss over the 8 rows. */
static float mlp_grad(mlp *m, const float *X, const int64_t *Y, int s) {
    int n_mb = B / m->batch;
    double loss = 0;
    dt_graph_set_loss_scale(m->g, 1.0f / (float)n_mb);
    for (int k = 0; k < n_mb; k++) {
        mlp_set_batch(m, X, Y, s, k * m->batch);
        dt_graph_set_accumulate(m->g, k > 0);
        CHECK_OK(dt_graph_forward(m->g, 1));
        CHECK_OK(dt_graph_backward(m->g));
        loss += *(const float *)dt_graph_value(m->g, m->loss)->data;
    }
    return (float)(loss / n_mb);
}

static int load_batches(dt_ref *r, const float **X, const int64_t **Y) {
    const dt_tensor *xt = dt_ref_get(r, "X");
    const dt_tensor *yt = dt_ref_raw(r, "Y");
    if (!xt || !CHECK(yt && yt->dtype == DT_I64, "reference Y (int64) missing")) return -1;
    *X = xt->data;
    *Y = yt->data;
    return 0;
}

static void train(dt_ref *r, const char *run, dt_optim_config c) {
    char key[96];
    snprintf(key, sizeof key, "%s.params", run);
    const dt_tensor *pt = dt_ref_get(r, key);
    const float *X;
    const int64_t *Y;
    if (!pt || load_batches(r, &X, &Y)) return;
    const float *q = pt->data; /* base lr, max_norm, warmup, steps */
    float base = q[0], max_norm = q[1];
    int warmup = (int)q[2], steps = (int)q[3];
    const dt_tensor *want_loss, *want_norm, *want_lr;
    snprintf(key, sizeof key, "%s.loss", run);
    want_loss = dt_ref_get(r, key);
    snprintf(key, sizeof key, "%s.norm", run);
    want_norm = dt_ref_get(r, key);
    snprintf(key, sizeof key, "%s.lr", run);
    want_lr = dt_ref_get(r, key);
    if (!want_loss || !want_norm || !want_lr) return;

    mlp m;
    if (mlp_build(&m, MB)) return;
    mlp_set_init(&m, r);
    size_t n;
    float *params = dt_graph_flat_param(m.g, &n);
    float *grads = dt_graph_flat_grad(m.g, NULL);
    dt_optim_group gr[4];
    int ng = 0;
    CHECK_OK(dt_optim_groups_from_graph(m.g, gr, 4, &ng));
    CHECK(ng == 4, "%s: expected 4 groups (w, b, w, b), got %d", run, ng);
    dt_optim *opt = NULL;
    CHECK_OK(dt_optim_init(&c, n, 0, n, gr, ng, &opt));
    dt_lr_schedule sched = {DT_LR_COSINE, base, warmup, steps, 0.1f * base, 0, 0};
    CHECK_OK(dt_lr_check(&sched));

    float loss[64], norm[64], lr[64];
    int clipped = 0;
    for (int s = 0; opt && s < steps && s < 64; s++) {
        loss[s] = mlp_grad(&m, X, Y, s);
        norm[s] = dt_grad_clip_norm(grads, n, max_norm);
        clipped += norm[s] > max_norm;
        lr[s] = dt_lr_at(&sched, s);
        CHECK_OK(dt_optim_step(opt, params, grads, lr[s]));
    }
    CHECK(clipped > 0 && clipped < steps, "%s: %d of %d steps clipped", run, clipped, steps);
    char what[96];
    snprintf(what, sizeof what, "%s per-step loss", run);
    dt_check_close(what, loss, want_loss->data, steps, STEP_ATOL, STEP_RTOL);
    snprintf(what, sizeof what, "%s per-step grad norm", run);
    dt_check_close(what, norm, want_norm->data, steps, STEP_ATOL, STEP_RTOL);
    snprintf(what, sizeof what, "%s per-step lr", run);
    dt_check_close(what, lr, want_lr->data, steps, 1e-9, 1e-6);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "%s.final.%s", run, PNAMES[i]);
        const dt_tensor *want = dt_ref_get(r, key);
        snprintf(what, sizeof what, "%s final %s", run, PNAMES[i]);
        if (want) dt_check_tensor(what, dt_graph_value(m.g, m.p[i]), want, FINAL_ATOL, FINAL_RTOL);
    }
    dt_optim_free(opt);
    dt_graph_free(m.g);
}

/* 2 micro-batches of 4 (accumulate, loss scale 1/2) vs one batch of 8, and both vs torch. */
static void test_accumulate(dt_ref *r) {
    const float *X;
    const int64_t *Y;
    if (load_batches(r, &X, &Y)) return;
    mlp m4, m8;
    if (mlp_build(&m4, MB) || mlp_build(&m8, B)) return;
    mlp_set_init(&m4, r);
    mlp_set_init(&m8, r);
    /* garbage in the gradient buffer: the first micro-batch must overwrite it */
    size_t n;
    float *g4 = dt_graph_flat_grad(m4.g, &n);
    for (size_t i = 0; i < n; i++) g4[i] = 1e3f;
    float l4 = mlp_grad(&m4, X, Y, 0), l8 = mlp_grad(&m8, X, Y, 0);
    const float *g8 = dt_graph_flat_grad(m8.g, NULL);
    dt_check_close("accumulated 2x4 grads vs batch 8", g4, g8, (int64_t)n, ACCUM_ATOL, 0);
    CHECK(fabsf(l4 - l8) <= 1e-6f, "loss 2x4 %.9g vs 8 %.9g", l4, l8);
    const dt_tensor *wl = dt_ref_get(r, "grad0.loss");
    if (wl) CHECK(fabsf(l8 - *(const float *)wl->data) <= 1e-6f, "loss vs torch");
    for (int i = 0; i < 4; i++) {
        char key[64], what[96];
        snprintf(key, sizeof key, "grad0.%s", PNAMES[i]);
        const dt_tensor *want = dt_ref_get(r, key);
        snprintf(what, sizeof what, "accumulated grad %s vs torch", PNAMES[i]);
        if (want) dt_check_tensor(what, dt_graph_grad(m4.g, m4.p[i]), want, 1e-7, 1e-5);
    }
    dt_graph_free(m4.g);
    dt_graph_free(m8.g);
}

int main(void) {
    dt_ref *r = dt_ref_load("optim_mlp.safetensors");
    if (r) {
        test_accumulate(r);
        dt_optim_config c = dt_optim_config_default(DT_OPTIM_SGD);
        c.momentum = 0.9;
        c.nesterov = 1;
        c.weight_decay = 1e-4;
        train(r, "sgd", c);
        c = dt_optim_config_default(DT_OPTIM_ADAMW);
        c.weight_decay = 0.01;
        train(r, "adamw", c);
        dt_ref_free(r);
    }
    return dt_test_finish("test_optim_mlp");
}
