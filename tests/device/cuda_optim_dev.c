/* The capturable optimizer step (dt_optim_step_cuda_dev: the kernels read their per-step
 * scalars from a device block) against the eager one (dt_optim_step_cuda: the scalars as launch
 * arguments) on the same inputs: AdamW with weight decay and a no-decay group, SGD with nesterov
 * momentum, plain SGD; STEPS steps with a changing learning rate. Both do the same f32
 * operations on the same values, so the parameters and moments must be the same bits. Then
 * the block copy and the step are recorded once as a CUDA graph (dt_stream_capture_begin/end)
 * and replayed for every step: again the eager bits. On the CPU emulation of a CUDA device
 * (scripts/cuda-emu.sh) there is no stream capture, so the replay part says so and is left out.
 * Exit 77 without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "dtrain/optim.h"
#include "cuda_testutil.h"
#include "harness.h"

#define N 20011
#define STEPS 4

static const dt_optim_group groups[] = {
    {0, 9000, 1.0f, 1.0f}, {9000, 3000, 0.0f, 1.0f}, {12000, 8011, 1.0f, 0.5f}};

typedef struct copy {
    dt_optim *opt;
    float *p, *b[2]; /* device: parameters, moments */
} copy;

static void copy_init(copy *c, dt_device d, const dt_optim_config *cfg, const float *p0) {
    CHECK_OK(dt_optim_init(cfg, N, 0, N, groups, 3, &c->opt));
    c->p = cuda_test_upload(d, p0, N * sizeof(float));
    for (int k = 0; k < 2; k++) {
        c->b[k] = cuda_test_alloc(d, N * sizeof(float));
        CHECK_OK(dt_device_memset(d, c->b[k], 0, N * sizeof(float)));
    }
}

static float lr_at(int64_t t) {
    return 0.01f * (float)t / (float)STEPS; /* a warmup: the block must follow it */
}

/* replay: record the block copy and the step once, then launch the graph each step. */
static void run(dt_device d, dt_stream *s, const dt_optim_config *cfg, const char *what,
                int replay) {
    float *p0 = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    dt_randn(p0, N, 7, 1.0f);
    copy e = {0}, v = {0};
    copy_init(&e, d, cfg, p0);
    copy_init(&v, d, cfg, p0);
    float *dg = cuda_test_alloc(d, N * sizeof(float));
    size_t bytes = dt_optim_cuda_block_bytes(v.opt);
    void *hblk = NULL, *dblk = NULL;
    CHECK_OK(dt_host_alloc_pinned(d, bytes, &hblk));
    CHECK_OK(dt_device_alloc(d, bytes, &dblk));
    dt_stream_graph *graph = NULL;
    for (int64_t t = 1; t <= STEPS && hblk && dblk; t++) {
        dt_randn(g, N, 50 + (uint64_t)t, 0.1f);
        CHECK_OK(dt_device_copy(d, dg, g, N * sizeof(float), DT_COPY_H2D));
        CHECK_OK(dt_optim_step_cuda(e.opt, s, e.p, dg, e.b, lr_at(t)));
        CHECK_OK(dt_stream_sync(s)); /* hblk is rewritten below: the last copy has run */
        CHECK_OK(dt_optim_cuda_block_fill(v.opt, lr_at(t), hblk, bytes));
        if (replay && !graph) {
            CHECK_OK(dt_stream_capture_begin(s));
            CHECK_OK(dt_device_copy_async(d, dblk, hblk, bytes, DT_COPY_H2D, s));
            CHECK_OK(dt_optim_step_cuda_dev(v.opt, s, v.p, dg, v.b, dblk));
            CHECK_OK(dt_stream_capture_end(s, &graph));
            if (!graph) break;
        }
        if (graph) {
            CHECK_OK(dt_stream_graph_launch(graph, s));
        } else {
            CHECK_OK(dt_device_copy_async(d, dblk, hblk, bytes, DT_COPY_H2D, s));
            CHECK_OK(dt_optim_step_cuda_dev(v.opt, s, v.p, dg, v.b, dblk));
        }
        CHECK_OK(dt_optim_step_done(v.opt));
    }
    CHECK_OK(dt_stream_sync(s));
    float *want = malloc(N * sizeof(float));
    cuda_test_download(d, s, want, e.p, N * sizeof(float));
    cuda_test_same(d, s, what, "parameters", v.p, want, N * sizeof(float));
    dt_optim_state os;
    CHECK_OK(dt_optim_get_state(v.opt, &os));
    CHECK(os.step == STEPS, "%s: %lld steps counted", what, (long long)os.step);
    for (int k = 0; k < os.n_buffers; k++) {
        cuda_test_download(d, s, want, e.b[k], N * sizeof(float));
        cuda_test_same(d, s, what, k ? "second moments" : "moments", v.b[k], want,
                       N * sizeof(float));
    }
    dt_stream_graph_destroy(graph);
    dt_host_free_pinned(d, hblk);
    dt_device_free(d, dblk);
    copy *cs[2] = {&e, &v};
    for (int i = 0; i < 2; i++) {
        dt_device_free(d, cs[i]->p);
        dt_device_free(d, cs[i]->b[0]);
        dt_device_free(d, cs[i]->b[1]);
        dt_optim_free(cs[i]->opt);
    }
    dt_device_free(d, dg);
    free(p0), free(g), free(want);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_optim_dev", &s);
    /* the emulated device is the CPU backend: it has no stream capture */
    int can_capture = dt_stream_capture_begin(s) == DT_OK;
    dt_stream_graph *none = NULL;
    if (can_capture) CHECK_OK(dt_stream_capture_end(s, &none)); /* an empty graph */
    dt_stream_graph_destroy(none);
    if (!can_capture)
        printf("cuda_optim_dev: no stream capture here (%s): replays left out\n", dt_last_error());
    dt_optim_config aw = dt_optim_config_default(DT_OPTIM_ADAMW);
    aw.weight_decay = 0.1;
    dt_optim_config nm = dt_optim_config_default(DT_OPTIM_SGD);
    nm.momentum = 0.9, nm.nesterov = 1, nm.weight_decay = 1e-3;
    dt_optim_config plain = dt_optim_config_default(DT_OPTIM_SGD);
    const dt_optim_config *cfgs[] = {&aw, &nm, &plain};
    const char *names[] = {"adamw", "sgd nesterov", "sgd"};
    for (int i = 0; i < 3; i++) {
        run(d, s, cfgs[i], names[i], 0);
        if (can_capture) run(d, s, cfgs[i], names[i], 1);
    }
    dt_stream_destroy(s);
    return dt_test_finish("cuda_optim_dev");
}
