/* Device graphs without a device: what compiling for CUDA decides before anything is allocated
 * (dt_graph_opts.device), so it runs on every machine, GPU or not, CUDA build or not.
 *   - an op without a CUDA kernel (gelu) is refused in one line naming it;
 *   - bf16_gemm and attention(x, x, x) are refused (no CUDA kernels for them yet);
 *   - the tiny Llama graph + cross-entropy passes the kernel check and plans (measure_only);
 *   - a small ResNet (conv2d, batchnorm with its fused epilogues, max-pool, global average
 *     pool, linear with a bias) + cross-entropy, recomputed or not, and avgpool2d and relu
 *     alone plan too; without a GPU a real ResNet compile for CUDA fails in one line;
 *   - on a CPU graph, dt_graph_upload/download are copies and the device is the CPU. */
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "device/cuda_testutil.h"
#include "harness.h"

static const dt_device CUDA0 = {DT_DEVICE_CUDA, 0};

static void test_refused(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, 8, 8}, 1);
    int loss = dt_sum(g, dt_gelu(g, x, 0));
    dt_graph_opts o = {.device = CUDA0};
    dt_status st = dt_graph_compile(g, loss, &o);
    CHECK(st != DT_OK && strstr(dt_last_error(), "graph: gelu has no CUDA kernel yet"),
          "gelu on CUDA: status %d, '%s'", (int)st, dt_last_error());
    dt_graph_free(g);

    g = dt_graph_init();
    x = dt_graph_input(g, "x", DT_F32, 2, (int64_t[]){4, 8}, 0);
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){3, 8}, 0);
    loss = dt_sum(g, dt_linear(g, x, w, -1));
    dt_graph_opts ob = {.device = CUDA0, .bf16_gemm = 1};
    st = dt_graph_compile(g, loss, &ob);
    CHECK(st != DT_OK && strstr(dt_last_error(), "bf16_gemm has no CUDA kernels yet"),
          "bf16_gemm on CUDA: status %d, '%s'", (int)st, dt_last_error());
    dt_graph_free(g);

    g = dt_graph_init();
    x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){1, 2, 8, 16}, 1);
    loss = dt_sum(g, dt_attention(g, x, x, x, 1, 0.0f));
    st = dt_graph_compile(g, loss, &o);
    CHECK(st != DT_OK && strstr(dt_last_error(), "attention with one node as two of q, k, v"),
          "attention(x, x, x) on CUDA: status %d, '%s'", (int)st, dt_last_error());
    dt_graph_free(g);
}

/* A measure_only compile of lc's Llama + cross-entropy for CUDA: passes the kernel check and
 * plans, allocating nothing. */
static void llama_measure(const char *what, const dt_llama_config *lc) {
    dt_graph *g = dt_graph_init();
    int ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){2, 16}, 0);
    int tg = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){32}, 0);
    int lg = dt_reshape(g, dt_llama_build(g, lc, ids), 2, (int64_t[]){32, 96});
    int loss = dt_cross_entropy(g, lg, tg, 0.0f, -100);
    dt_graph_opts o = {.device = CUDA0, .measure_only = 1};
    CHECK(loss >= 0 && dt_graph_compile(g, loss, &o) == DT_OK, "%s measure on CUDA: %s", what,
          dt_last_error());
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    CHECK(m.arena_bytes > 0 && m.param_bytes > 0, "%s on CUDA plans %zu arena bytes", what,
          m.arena_bytes);
    CHECK(!lc->lora.rank || m.frozen_bytes > 0, "%s on CUDA: no frozen base", what);
    CHECK(dt_graph_forward(g, 1) != DT_OK, "a measured CUDA graph ran (%s)", what);
    dt_graph_free(g);
}

/* The Llama op set (and cross-entropy) has CUDA kernels, and so has its LoRA form (the frozen
 * bf16 linears, the adapters' scale/add, dropout). */
static void test_llama_plans(void) {
    dt_llama_config lc = cuda_lm_tiny(96, 1, 1); /* tied, recomputed */
    llama_measure("llama", &lc);
    lc.lora = (dt_lora_config){.rank = 4,
                               .alpha = 8.0f,
                               .dropout = 0.1f,
                               .targets = DT_LORA_Q | DT_LORA_V | DT_LORA_O | DT_LORA_DOWN,
                               .modules_to_save = DT_LORA_SAVE_FINAL_NORM};
    llama_measure("lora llama", &lc);
    dt_graph *g;
    int ids, tg, lg, loss;

    /* Without a GPU (or without CUDA in this build) a real compile for CUDA fails cleanly. */
    int n = 0;
    CHECK_OK(dt_device_count(DT_DEVICE_CUDA, &n));
    if (n > 0) return;
    g = dt_graph_init();
    ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){2, 16}, 0);
    tg = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){32}, 0);
    lg = dt_reshape(g, dt_llama_build(g, &lc, ids), 2, (int64_t[]){32, 96});
    loss = dt_cross_entropy(g, lg, tg, 0.0f, -100);
    dt_graph_opts real = {.device = CUDA0};
    dt_status st = dt_graph_compile(g, loss, &real);
    CHECK(st != DT_OK && dt_last_error()[0], "compile for cuda:0 without a GPU: status %d",
          (int)st);
    printf("without a GPU: %s\n", dt_last_error());
    dt_graph_free(g);
}

/* The ResNet op set: a measure_only compile for CUDA plans (nothing touches a device, so this
 * runs without a GPU and in builds without CUDA or cuDNN). */
static int resnet_graph(dt_graph *g, int recompute) {
    dt_resnet_config rc = {.depth = 18,
                           .in_channels = 3,
                           .num_classes = 10,
                           .small_stem = 0,
                           .width = 8,
                           .recompute = recompute};
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 3, 32, 32}, 0);
    int y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){2}, 0);
    return dt_cross_entropy(g, dt_resnet_build(g, &rc, x), y, 0.0f, -100);
}

static void test_resnet_plans(void) {
    for (int rec = 0; rec < 2; rec++) {
        dt_graph *g = dt_graph_init();
        int loss = resnet_graph(g, rec);
        dt_graph_opts o = {.device = CUDA0, .measure_only = 1};
        CHECK(loss >= 0 && dt_graph_compile(g, loss, &o) == DT_OK,
              "resnet (recompute %d) measure on CUDA: %s", rec, dt_last_error());
        dt_graph_mem m;
        dt_graph_memory(g, &m);
        CHECK(m.arena_bytes > 0 && m.param_bytes > 0 && m.state_bytes > 0,
              "resnet on CUDA plans %zu arena, %zu param, %zu state bytes", m.arena_bytes,
              m.param_bytes, m.state_bytes);
        dt_graph_free(g);
    }

    /* avgpool2d and relu alone (the ResNet builder fuses its ReLUs into batchnorm). */
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){2, 4, 8, 8}, 1);
    int loss = dt_sum(g, dt_relu(g, dt_avgpool2d(g, x, 2, 2, 2, 2, 0, 0)));
    dt_graph_opts o = {.device = CUDA0, .measure_only = 1};
    dt_status st = dt_graph_compile(g, loss, &o);
    CHECK(st != DT_OK && strstr(dt_last_error(), "graph: sum has no CUDA kernel yet"),
          "avgpool + relu on CUDA: the first refused op is the sum: status %d, '%s'", (int)st,
          dt_last_error());
    dt_graph_free(g);

    /* Without a GPU a real compile fails cleanly at the first convolution's plan. */
    int n = 0;
    CHECK_OK(dt_device_count(DT_DEVICE_CUDA, &n));
    if (n > 0) return;
    g = dt_graph_init();
    loss = resnet_graph(g, 0);
    dt_graph_opts real = {.device = CUDA0};
    st = dt_graph_compile(g, loss, &real);
    CHECK(st != DT_OK && dt_last_error()[0] && !strchr(dt_last_error(), '\n'),
          "resnet compile for cuda:0 without a GPU: status %d", (int)st);
    printf("resnet without a GPU: %s\n", dt_last_error());
    dt_graph_free(g);
}

static void test_cpu_copies(void) {
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 1, (int64_t[]){4}, 0);
    int loss = dt_sum(g, dt_scale(g, x, 2.0f));
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    CHECK(dt_graph_device(g).kind == DT_DEVICE_CPU && dt_graph_stream(g) == NULL,
          "CPU graph: device kind %d", (int)dt_graph_device(g).kind);
    const float in[4] = {1, 2, 3, 4.5f};
    float out = 0;
    CHECK_OK(dt_graph_upload(g, dt_graph_value(g, x)->data, in, sizeof in));
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_download(g, &out, dt_graph_value(g, loss)->data, sizeof out));
    CHECK(out == 21.0f, "CPU graph: 2 * sum(1, 2, 3, 4.5) gave %g", out);
    dt_graph_free(g);
}

int main(void) {
    test_refused();
    test_llama_plans();
    test_resnet_plans();
    test_cpu_copies();
    return dt_test_finish("test_graph_device");
}
