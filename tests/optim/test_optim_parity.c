/* PyTorch parity of the optimizers on a flat buffer and of the LR schedules.
 *
 * optim_flat.safetensors (tests/ref/ref_optim.py): four tensors a [37,29], b [29], c [29,13],
 * d [200,180] seen as one flat buffer; 6 steps with given gradients and lrs; torch param groups
 * with no decay on b and half the lr on c. Checked: SGD (momentum 0.9, dampening 0.1), SGD
 * (nesterov), plain SGD, AdamW (betas 0.9/0.95, eps 1e-6, wd 0.1): final parameters and
 * optimizer state, for the whole buffer and for three slices cut inside parameters.
 * optim_sched.safetensors: torch schedulers' lr for steps 0..29 vs dt_lr_at. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/optim.h"
#include "harness.h"

/* Tolerances: |ours - torch| <= ATOL + RTOL * |torch|. The only differences are f32 rounding
 * (FMA contraction, operation order) over 6 steps. */
#define PARAM_ATOL 1e-6
#define PARAM_RTOL 1e-6
/* Schedules: torch computes lrs in double (recursively for chained schedulers), we in double
 * in closed form, both rounded to f32 here. */
#define SCHED_ATOL 1e-9
#define SCHED_RTOL 1e-6

enum { NT = 4 };

static void make_groups(const dt_tensor *sizes, dt_optim_group gr[NT]) {
    const float wd[NT] = {1, 0, 1, 1}, lr[NT] = {1, 1, 0.5f, 1};
    size_t off = 0;
    for (int i = 0; i < NT; i++) {
        size_t n = (size_t)((const float *)sizes->data)[i];
        gr[i] = (dt_optim_group){off, n, wd[i], lr[i]};
        off += n;
    }
}

/* Runs the 6 steps over slices [cuts[k], cuts[k+1]) and checks params and state. */
static void run(dt_ref *r, const char *name, dt_optim_config c, const char *const *state_names,
                const size_t *cuts, int n_slices) {
    const dt_tensor *p0 = dt_ref_get(r, "P0"), *G = dt_ref_get(r, "G"), *LR = dt_ref_get(r, "LR");
    const dt_tensor *sizes = dt_ref_get(r, "sizes");
    char key[128];
    snprintf(key, sizeof key, "%s_final", name);
    const dt_tensor *want = dt_ref_get(r, key);
    if (!p0 || !G || !LR || !sizes || !want) return;
    size_t n = (size_t)p0->shape[0];
    int steps = (int)G->shape[0];
    dt_optim_group gr[NT];
    make_groups(sizes, gr);
    float *p = malloc(n * sizeof(float));
    memcpy(p, p0->data, n * sizeof(float));
    dt_optim *o[8] = {0};
    for (int k = 0; k < n_slices; k++)
        CHECK_OK(dt_optim_init(&c, n, cuts[k], cuts[k + 1], gr, NT, &o[k]));
    for (int s = 0; s < steps; s++) {
        const float *g = (const float *)G->data + (size_t)s * n;
        float lr = ((const float *)LR->data)[s];
        for (int k = 0; k < n_slices; k++)
            if (o[k]) CHECK_OK(dt_optim_step(o[k], p + cuts[k], g + cuts[k], lr));
    }
    char what[160];
    snprintf(what, sizeof what, "%s params (%d slice%s)", name, n_slices, n_slices > 1 ? "s" : "");
    dt_check_close(what, p, want->data, (int64_t)n, PARAM_ATOL, PARAM_RTOL);
    for (int b = 0; state_names[b]; b++) {
        snprintf(key, sizeof key, "%s_%s", name, state_names[b]);
        const dt_tensor *ws = dt_ref_get(r, key);
        for (int k = 0; ws && k < n_slices; k++) {
            dt_optim_state st;
            if (!o[k] || dt_optim_get_state(o[k], &st) != DT_OK) continue;
            CHECK(st.step == steps && st.n_buffers > b && strcmp(st.names[b], state_names[b]) == 0,
                  "%s: state of slice %d: step %ld, %d buffers", name, k, (long)st.step,
                  st.n_buffers);
            if (st.n_buffers <= b) continue;
            snprintf(what, sizeof what, "%s %s [%zu, %zu)", name, state_names[b], cuts[k],
                     cuts[k + 1]);
            dt_check_close(what, st.buffers[b], (const float *)ws->data + cuts[k],
                           (int64_t)(cuts[k + 1] - cuts[k]), PARAM_ATOL, PARAM_RTOL);
        }
    }
    for (int k = 0; k < n_slices; k++) dt_optim_free(o[k]);
    free(p);
}

static void test_flat(void) {
    dt_ref *r = dt_ref_load("optim_flat.safetensors");
    if (!r) return;
    const dt_tensor *p0 = dt_ref_get(r, "P0");
    if (!p0) return;
    size_t n = (size_t)p0->shape[0];
    const size_t whole[2] = {0, n};
    /* 1073 = |a|: the cuts fall inside a, inside c and inside d */
    const size_t cuts[4] = {0, 500, 1200, n};
    const char *sgd_state[] = {"momentum_buffer", NULL},
               *adam_state[] = {"exp_avg", "exp_avg_sq", NULL};
    const char *none[] = {NULL};

    dt_optim_config c = dt_optim_config_default(DT_OPTIM_SGD);
    c.momentum = 0.9;
    c.dampening = 0.1;
    c.weight_decay = 0.01;
    run(r, "sgd", c, sgd_state, whole, 1);
    run(r, "sgd", c, sgd_state, cuts, 3);

    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.momentum = 0.9;
    c.nesterov = 1;
    c.weight_decay = 0.01;
    run(r, "nesterov", c, sgd_state, whole, 1);
    run(r, "nesterov", c, sgd_state, cuts, 3);

    c = dt_optim_config_default(DT_OPTIM_SGD);
    c.weight_decay = 0.01;
    run(r, "plain", c, none, whole, 1);

    c = dt_optim_config_default(DT_OPTIM_ADAMW);
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-6;
    c.weight_decay = 0.1;
    run(r, "adamw", c, adam_state, whole, 1);
    run(r, "adamw", c, adam_state, cuts, 3);
    dt_ref_free(r);
}

static void test_sched(void) {
    dt_ref *r = dt_ref_load("optim_sched.safetensors");
    if (!r) return;
    static const char *names[] = {"constant_w5", "linear_w5", "linear_w0", "cosine_w5",
                                  "cosine_w0",   "step_w0",   "step_w3"};
    const dt_tensor *base = dt_ref_get(r, "base_lr");
    for (size_t i = 0; base && i < sizeof names / sizeof *names; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s.params", names[i]);
        const dt_tensor *pt = dt_ref_get(r, key), *want = dt_ref_get(r, names[i]);
        if (!pt || !want) continue;
        const float *q = pt->data;
        /* params: kind, warmup, total, min_lr, step_size, gamma */
        dt_lr_schedule s = {(dt_lr_kind)q[0],
                            ((const float *)base->data)[0],
                            (int64_t)q[1],
                            (int64_t)q[2],
                            q[3],
                            (int64_t)q[4],
                            q[5]};
        CHECK_OK(dt_lr_check(&s));
        int64_t n = want->shape[0];
        float got[64];
        for (int64_t k = 0; k < n && k < 64; k++) got[k] = dt_lr_at(&s, k);
        dt_check_close(names[i], got, want->data, n, SCHED_ATOL, SCHED_RTOL);
    }
    dt_ref_free(r);
}

int main(void) {
    test_flat();
    test_sched();
    return dt_test_finish("test_optim_parity");
}
