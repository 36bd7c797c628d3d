/* The CUDA optimizers, gradient norm and clipping against src/optim on the same inputs: a flat
 * buffer of 3 groups (one without weight decay, one with lr_scale 0.5, a gap in no group that
 * must stay untouched) and 5 steps of AdamW and of SGD (momentum, nesterov, and plain).
 * Tolerance: |gpu - cpu| <= 1e-6 + 1e-5 |cpu| per element after the 5 steps (same operations in
 * f32; the CPU build may contract multiply-adds into FMAs and the GPU does, so bits can differ
 * by rounding). Norm: relative 1e-12 (double sums in different orders). dt_optim_step_cuda (the
 * trainer's device step: segments and scalars from the dt_optim) on a second copy must give the
 * same bits as the kernels called with this file's segments. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "dtrain/optim.h"
#include "cuda_testutil.h"
#include "harness.h"

#define N 300001 /* not a multiple of a block */
#define STEPS 5

static const dt_optim_group groups[] = {
    {0, 100000, 1.0f, 1.0f}, {100000, 1234, 0.0f, 1.0f}, {101234, 150000, 1.0f, 0.5f},
    /* [251234, N) in no group */
};
#define NG 3

/* The segments and scalars dt_optim_step computes for step t (src/optim/optim.c). */
static int segs_for(const dt_optim_config *c, float lr, int64_t t, dt_cuda_optim_seg *sg) {
    double bc1 = 1.0 - pow(c->beta1, (double)t);
    for (int i = 0; i < NG; i++) {
        double lr_s = (double)lr * groups[i].lr_scale, wd = c->weight_decay * groups[i].wd_scale;
        sg[i] =
            (dt_cuda_optim_seg){groups[i].offset, groups[i].numel,          (float)lr_s,
                                (float)wd,        (float)(1.0 - lr_s * wd), (float)(lr_s / bc1)};
    }
    return NG;
}

static void run(dt_device d, dt_stream *s, const dt_optim_config *c, const char *what) {
    float *p0 = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *pc = malloc(N * sizeof(float)), *pg = malloc(N * sizeof(float));
    dt_randn(p0, N, 11, 1.0f);
    memcpy(pc, p0, N * sizeof(float));
    dt_optim *opt, *opt2;
    CHECK_OK(dt_optim_init(c, N, 0, N, groups, NG, &opt));
    CHECK_OK(dt_optim_init(c, N, 0, N, groups, NG, &opt2));
    float *dp = cuda_test_upload(d, p0, N * sizeof(float));
    float *dp2 = cuda_test_upload(d, p0, N * sizeof(float));
    float *db[2] = {cuda_test_alloc(d, N * sizeof(float)), cuda_test_alloc(d, N * sizeof(float))};
    CHECK_OK(dt_device_memset(d, db[0], 0, N * sizeof(float)));
    CHECK_OK(dt_device_memset(d, db[1], 0, N * sizeof(float)));
    float *dg = cuda_test_alloc(d, N * sizeof(float));
    float *dm = cuda_test_alloc(d, N * sizeof(float)), *dv = cuda_test_alloc(d, N * sizeof(float));
    CHECK_OK(dt_device_memset(d, dm, 0, N * sizeof(float)));
    CHECK_OK(dt_device_memset(d, dv, 0, N * sizeof(float)));
    const float lr = 0.01f;
    for (int64_t t = 1; t <= STEPS; t++) {
        dt_randn(g, N, 100 + (uint64_t)t, 0.1f);
        CHECK_OK(dt_device_copy(d, dg, g, N * sizeof(float), DT_COPY_H2D));
        CHECK_OK(dt_optim_step(opt, pc, g, lr));
        dt_cuda_optim_seg sg[NG];
        int ns = segs_for(c, lr, t, sg);
        if (c->kind == DT_OPTIM_ADAMW) {
            dt_cuda_adamw_scalars k = {
                (float)c->beta1, (float)(1.0 - c->beta1),
                (float)c->beta2, (float)(1.0 - c->beta2),
                (float)c->eps,   (float)sqrt(1.0 - pow(c->beta2, (double)t))};
            CHECK_OK(dt_cuda_adamw(s, dp, dg, dm, dv, sg, ns, &k));
        } else {
            CHECK_OK(dt_cuda_sgd(s, dp, dg, dm, sg, ns, (float)c->momentum, (float)c->dampening,
                                 c->nesterov, t == 1));
        }
        CHECK_OK(dt_optim_step_cuda(opt2, s, dp2, dg, db, lr));
    }
    float *pg2 = malloc(N * sizeof(float));
    cuda_test_download(d, s, pg2, dp2, N * sizeof(float));
    cuda_test_download(d, s, pg, dp, N * sizeof(float));
    CHECK(!memcmp(pg, pg2, N * sizeof(float)), "%s: dt_optim_step_cuda differs from the kernels",
          what);
    dt_optim_state os;
    CHECK_OK(dt_optim_get_state(opt2, &os));
    CHECK(os.step == STEPS, "%s: dt_optim_step_cuda counted %lld steps", what, (long long)os.step);
    free(pg2);
    dt_optim_free(opt2);
    dt_device_free(d, dp2), dt_device_free(d, db[0]), dt_device_free(d, db[1]);
    dt_check_close(what, pg, pc, N, 1e-6, 1e-5);
    int untouched = 1;
    for (size_t i = 251234; i < N; i++) untouched &= pg[i] == p0[i];
    CHECK(untouched, "%s: elements in no group untouched", what);
    double moved = 0;
    for (size_t i = 0; i < 1000; i++) moved += fabs(pg[i] - p0[i]);
    CHECK(moved > 1e-3, "%s: the parameters moved (%g)", what, moved);
    dt_optim_free(opt);
    dt_device_free(d, dp);
    dt_device_free(d, dg);
    dt_device_free(d, dm);
    dt_device_free(d, dv);
    free(p0), free(g), free(pc), free(pg);
}

static void test_norm_clip(dt_device d, dt_stream *s) {
    const size_t sizes[] = {1, 1000, 3000017};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        float *g = malloc(n * sizeof(float)), *gc = malloc(n * sizeof(float));
        dt_randn(g, (int64_t)n, 7 + (uint64_t)k, 0.3f);
        memcpy(gc, g, n * sizeof(float));
        float *dg = cuda_test_upload(d, g, n * sizeof(float));
        double *work = cuda_test_alloc(d, DT_CUDA_SUMSQ_WORK * sizeof(double));
        CHECK_OK(dt_cuda_grad_sumsq(s, dg, n, work));
        double gpu = 0;
        cuda_test_download(d, s, &gpu, work, sizeof gpu);
        double cpu = dt_grad_sumsq(g, n);
        CHECK(fabs(gpu - cpu) <= 1e-12 * cpu, "sumsq n=%zu: gpu %.17g cpu %.17g", n, gpu, cpu);
        /* clip to half the norm: the CPU's dt_grad_clip_norm on the same gradients */
        float max_norm = (float)(0.5 * sqrt(cpu));
        dt_grad_clip_norm(gc, n, max_norm);
        CHECK_OK(dt_cuda_grad_clip(s, dg, n, work, max_norm));
        cuda_test_download(d, s, g, dg, n * sizeof(float));
        dt_check_close("clip", g, gc, (int64_t)n, 0.0, 1e-6);
        /* max_norm above the norm: nothing changes */
        memcpy(gc, g, n * sizeof(float));
        CHECK_OK(dt_cuda_grad_clip(s, dg, n, work, (float)(2.0 * sqrt(cpu))));
        cuda_test_download(d, s, g, dg, n * sizeof(float));
        CHECK(!memcmp(g, gc, n * sizeof(float)), "no clip below max_norm (n=%zu)", n);
        dt_device_free(d, dg);
        dt_device_free(d, work);
        free(g), free(gc);
    }
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_optim", &s);
    dt_optim_config a = dt_optim_config_default(DT_OPTIM_ADAMW);
    a.weight_decay = 0.1;
    run(d, s, &a, "adamw");
    dt_optim_config m = dt_optim_config_default(DT_OPTIM_SGD);
    m.momentum = 0.9;
    m.weight_decay = 5e-4;
    m.dampening = 0.1;
    run(d, s, &m, "sgd momentum+dampening");
    m.dampening = 0;
    m.nesterov = 1;
    run(d, s, &m, "sgd nesterov");
    dt_optim_config p = dt_optim_config_default(DT_OPTIM_SGD);
    p.weight_decay = 1e-4;
    run(d, s, &p, "sgd plain");
    test_norm_clip(d, s);
    /* a CPU stream is refused with one line */
    dt_stream *cs;
    dt_device cpu = {DT_DEVICE_CPU, 0};
    CHECK_OK(dt_stream_create(cpu, &cs));
    CHECK(dt_cuda_grad_sumsq(cs, NULL, 0, NULL) == DT_ERR_STATE &&
              strstr(dt_last_error(), "not a CUDA stream"),
          "%s", dt_last_error());
    dt_stream_destroy(cs);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_optim");
}
