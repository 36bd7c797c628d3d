/* The step as a CUDA graph (src/train/device_capture.c), the parts that do not need a GPU: the
 * decision (eager, record, replay) and its reasons, the optimizer's per-step scalar block
 * (dt_optim_cuda_block_fill) against the formulas of src/optim, the CPU device refusing stream
 * capture in one line, the capture buffers and the batch staging ring (device_stage.c) on the CPU
 * device. */
#include <math.h>
#include <string.h>
#include "dtrain/config.h"
#include "dtrain/device.h"
#include "dtrain/device_cuda.h"
#include "dtrain/optim.h"
#include "harness.h"
#include "train/device_capture.h"
#include "train/device_stage.h"

static const dt_device CPU = {DT_DEVICE_CPU, 0};
static const dt_device GPU = {DT_DEVICE_CUDA, 0};

static void test_decide(void) {
    char why[128];
    dt_capture_facts f = {.cuda_graph = DT_CFG_CUDA_GRAPH_AUTO, .device = GPU, .grad_accum = 1};
    CHECK(dt_capture_decide(&f, why, sizeof why) == DT_CAPTURE_EAGER && !why[0],
          "the first step is eager, with no reason to print: '%s'", why);
    f.eager_steps = 1;
    CHECK(dt_capture_decide(&f, why, sizeof why) == DT_CAPTURE_RECORD, "then recorded");
    f.recorded = 1, f.eager_steps = 1;
    CHECK(dt_capture_decide(&f, why, sizeof why) == DT_CAPTURE_REPLAY, "then replayed");
    struct {
        dt_capture_facts f;
        const char *why;
    } eager[] = {
        {{.cuda_graph = DT_CFG_CUDA_GRAPH_OFF, .device = GPU, .eager_steps = 3, .grad_accum = 1},
         "train.cuda_graph=off"},
        {{.device = CPU, .eager_steps = 3, .grad_accum = 1}, "not a CUDA device"},
        {{.device = GPU, .eager_steps = 3, .grad_accum = 1, .failed = 1}, "recording failed"},
        {{.device = GPU, .eager_steps = 3, .grad_accum = 2}, "gradient accumulation"},
        {{.device = GPU, .eager_steps = 3, .grad_accum = 1, .allreduce = 1}, "several ranks"},
        /* a graph recorded before the failure is not replayed after it */
        {{.device = GPU, .eager_steps = 3, .grad_accum = 1, .recorded = 1, .failed = 1},
         "recording failed"},
    };
    for (size_t i = 0; i < sizeof eager / sizeof eager[0]; i++) {
        dt_capture_mode m = dt_capture_decide(&eager[i].f, why, sizeof why);
        CHECK(m == DT_CAPTURE_EAGER && strstr(why, eager[i].why), "case %zu: mode %d, '%s'", i,
              (int)m, why);
    }
}

/* Two groups, as a Llama's decayed and no-decay parameters. */
static dt_optim *make_optim(dt_optim_kind kind) {
    dt_optim_config c = dt_optim_config_default(kind);
    c.weight_decay = 0.1;
    c.momentum = 0.9;
    dt_optim_group gr[2] = {{.offset = 0, .numel = 40, .wd_scale = 1, .lr_scale = 1},
                            {.offset = 40, .numel = 24, .wd_scale = 0, .lr_scale = 0.5f}};
    dt_optim *o = NULL;
    CHECK_OK(dt_optim_init(&c, 64, 0, 64, gr, 2, &o));
    return o;
}

static void test_block(void) {
    dt_optim *o = make_optim(DT_OPTIM_ADAMW);
    if (!o) return;
    dt_optim_config c = dt_optim_config_default(DT_OPTIM_ADAMW);
    size_t bytes = dt_optim_cuda_block_bytes(o);
    CHECK(bytes % 16 == 0 &&
              bytes >= sizeof(dt_cuda_optim_dev_head) + 2 * sizeof(dt_cuda_optim_dev_seg),
          "block of %zu bytes holds the head and 2 segments", bytes);
    unsigned char blk[256];
    CHECK(bytes <= sizeof blk, "block fits the test's buffer");
    float lr = 3e-3f;
    for (int64_t t = 1; t <= 3; t++) {
        memset(blk, 0xab, sizeof blk);
        CHECK_OK(dt_optim_cuda_block_fill(o, lr, blk, bytes));
        const dt_cuda_optim_dev_head *h = (const void *)blk;
        const dt_cuda_optim_dev_seg *s = (const void *)(h + 1);
        float bc2 = (float)sqrt(1.0 - pow(c.beta2, (double)t));
        double bc1 = 1.0 - pow(c.beta1, (double)t);
        CHECK(h->bc2_sqrt == bc2, "t=%lld: bc2_sqrt %.9g, want %.9g", (long long)t, h->bc2_sqrt,
              bc2);
        CHECK(h->first == (t == 1), "t=%lld: first %d", (long long)t, h->first);
        double lr0 = lr, lr1 = (double)lr * 0.5;
        CHECK(s[0].lr == (float)lr0 && s[1].lr == (float)lr1, "t=%lld: lr %g %g", (long long)t,
              s[0].lr, s[1].lr);
        CHECK(s[0].decay == (float)(1.0 - lr0 * 0.1) && s[1].decay == 1.0f,
              "t=%lld: decay %.9g %.9g (the no-decay group keeps its weights)", (long long)t,
              s[0].decay, s[1].decay);
        CHECK(s[0].step_size == (float)(lr0 / bc1) && s[1].step_size == (float)(lr1 / bc1),
              "t=%lld: step size %.9g %.9g", (long long)t, s[0].step_size, s[1].step_size);
        CHECK_OK(dt_optim_step_done(o));
    }
    dt_optim_state os;
    CHECK_OK(dt_optim_get_state(o, &os));
    CHECK(os.step == 3, "three steps counted: %lld", (long long)os.step);
    CHECK(dt_optim_cuda_block_fill(o, lr, blk, bytes - 16) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "needed"),
          "a short block is refused: %s", dt_last_error());
    CHECK(dt_optim_cuda_block_fill(o, NAN, blk, bytes) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "learning rate"),
          "a NaN learning rate is refused: %s", dt_last_error());
    dt_optim_free(o);
    /* SGD's first step: set, then blended */
    o = make_optim(DT_OPTIM_SGD);
    if (!o) return;
    CHECK_OK(dt_optim_cuda_block_fill(o, lr, blk, bytes));
    CHECK(((const dt_cuda_optim_dev_head *)(const void *)blk)->first == 1, "sgd: first step");
    CHECK_OK(dt_optim_step_done(o));
    CHECK_OK(dt_optim_cuda_block_fill(o, lr, blk, bytes));
    CHECK(((const dt_cuda_optim_dev_head *)(const void *)blk)->first == 0, "sgd: second step");
    dt_optim_free(o);
}

static void test_cpu_refuses(void) {
    dt_stream *s = NULL;
    CHECK_OK(dt_stream_create(CPU, &s));
    if (!s) return;
    dt_status st = dt_stream_capture_begin(s);
    CHECK(st == DT_ERR_STATE && strstr(dt_last_error(), "device cpu: stream capture"),
          "capture begin on the CPU: %d %s", (int)st, dt_last_error());
    dt_stream_graph *g = (dt_stream_graph *)s; /* must be overwritten with NULL */
    st = dt_stream_capture_end(s, &g);
    CHECK(st == DT_ERR_STATE && g == NULL, "capture end on the CPU: %d, graph %p", (int)st,
          (void *)g);
    CHECK(dt_stream_graph_launch(NULL, s) == DT_ERR_INVALID, "launch of no graph refused");

    /* the capture buffers on the CPU device: copies work, recording is refused */
    dt_capture *c = NULL;
    CHECK_OK(dt_capture_open(CPU, 48, 100, &c));
    if (c) {
        unsigned char *h = dt_capture_block_host(c);
        for (int i = 0; i < 48; i++) h[i] = (unsigned char)(i * 7 + 1);
        CHECK_OK(dt_capture_push_block(c, s));
        CHECK_OK(dt_stream_sync(s));
        CHECK(memcmp(dt_capture_block_dev(c), h, 48) == 0, "the block reached the device");
        CHECK(dt_capture_block_bytes(c) == 48 && dt_capture_batch_host(c) &&
                  dt_capture_loss_host(c) && dt_capture_sumsq_host(c),
              "buffers allocated");
        CHECK(dt_capture_record_begin(c, s) == DT_ERR_STATE &&
                  strstr(dt_last_error(), "stream capture"),
              "recording on the CPU refused: %s", dt_last_error());
        CHECK(!dt_capture_recorded(c), "nothing recorded");
        CHECK(dt_capture_launch(c, s) == DT_ERR_STATE &&
                  strstr(dt_last_error(), "before a recording"),
              "launch before a recording refused: %s", dt_last_error());
        dt_capture_close(c);
    }
    dt_stream_destroy(s);
}

/* Two slots, used in turn; every push lands in its destinations; misuse refused. */
static void test_stage(void) {
    dt_stage *sg = NULL;
    CHECK(dt_stage_open(CPU, 64, 0, &sg) == DT_ERR_INVALID && !sg, "0 slots refused");
    dt_stream *s = NULL;
    CHECK_OK(dt_stream_create(CPU, &s));
    CHECK_OK(dt_stage_open(CPU, 64, 2, &sg));
    if (!sg || !s) return;
    void *h = NULL;
    size_t b[2] = {24, 40};
    unsigned char a[24], c[40];
    void *dst[2] = {a, c};
    CHECK(dt_stage_push(sg, 2, dst, b, s) == DT_ERR_STATE, "push before a slot refused");
    void *seen[3] = {0};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(dt_stage_next(sg, &h));
        if (!h) break;
        seen[k] = h;
        for (int i = 0; i < 64; i++) ((unsigned char *)h)[i] = (unsigned char)(k * 64 + i);
        memset(a, 0, sizeof a), memset(c, 0, sizeof c);
        CHECK_OK(dt_stage_push(sg, 2, dst, b, s));
        CHECK_OK(dt_stream_sync(s));
        int ok = 1;
        for (int i = 0; i < 24; i++) ok &= a[i] == (unsigned char)(k * 64 + i);
        for (int i = 0; i < 40; i++) ok &= c[i] == (unsigned char)(k * 64 + 24 + i);
        CHECK(ok, "batch %d: both pieces landed", k);
    }
    CHECK(seen[0] && seen[1] && seen[0] != seen[1] && seen[2] == seen[0],
          "slots used in turn: %p %p %p", seen[0], seen[1], seen[2]);
    size_t big[2] = {24, 41};
    CHECK(dt_stage_push(sg, 2, dst, big, s) == DT_ERR_INVALID && strstr(dt_last_error(), "65"),
          "more than a slot refused: %s", dt_last_error());
    dt_stage_close(sg);
    dt_stream_destroy(s);
}

int main(void) {
    test_decide();
    test_block();
    test_cpu_refuses();
    test_stage();
    return dt_test_finish("device_capture");
}
