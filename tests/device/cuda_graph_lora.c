/* A tiny LoRA Llama graph (src/nn/llama.c with lora: a frozen bf16 base, f32 adapters) compiled
 * for the CPU and for the CUDA device with the same parameters, base bytes and batch: the loss
 * and every trainable parameter's gradient (adapters, modules_to_save copies) must agree. Both
 * sides run the base's linears as bf16 x bf16 GEMMs with f32 accumulation (linear_bf16: oneDNN
 * or its exact f32 emulation on the CPU, cuBLASLt on the device), the operand rounded to bf16
 * (round-to-nearest-even) first. Two graphs: untied embeddings, every projection adapted,
 * lm_head and the final norm trained as whole copies; tied embeddings (the bf16 table is the
 * lm_head's weight too) with q/v adapters, dropout 0.1 on the adapter input (the counter-based
 * mask must be the same on both) and every layer recomputed, then a second backward in
 * accumulate mode.
 *
 * Tolerances: loss |cuda - cpu| <= 1e-4 (1 + |cpu|); a gradient element
 * |cuda - cpu| <= 2e-3 max|cpu over its parameter| + 1e-2 |cpu|. Looser than the f32 graph's
 * (cuda_graph_llama): an activation that differs by an f32 ulp between the two sides (other
 * summation orders) can round to the neighbouring bf16 value, a 2^-8 relative step in one
 * operand of one GEMM, which then travels through the layers. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { B = 2, T = 16, V = 96 };

/* A step of both graphs with the same dropout counters (run key 99, step n). */
static int step2(cuda_lm *cpu, cuda_lm *cu, int accumulate, uint64_t n) {
    dt_graph_set_rng(cpu->g, 99, n, 0);
    dt_graph_set_rng(cu->g, 99, n, 0);
    return cuda_lm_step(cpu, accumulate) == 0 && cuda_lm_step(cu, accumulate) == 0 ? 0 : -1;
}

static void compare(const char *what, cuda_lm *cpu, cuda_lm *cu) {
    free(cuda_lm_compare(what, cpu, cu, 1e-4, 2e-3, 1e-2));
    int adapters = 0;
    for (int k = 0; k < dt_graph_param_count(cpu->g); k++)
        adapters += strstr(dt_graph_param_info(cpu->g, k)->name, ".lora_") != NULL;
    CHECK(adapters > 0, "%s: no adapter among the parameters", what);
}

/* Deterministic values in [-a, a) (an LCG): the adapters' B starts at zero (PEFT's init), which
 * would make every A gradient zero. */
static void fill(float *p, size_t n, float a, uint32_t *r) {
    for (size_t i = 0; i < n; i++) {
        *r = *r * 1664525u + 1013904223u;
        p[i] = a * (2.0f * (float)(*r >> 8) / 16777216.0f - 1.0f);
    }
}

static void run(const char *what, dt_device d, int tied, const dt_lora_config *lora) {
    dt_llama_config lc = cuda_lm_tiny(V, tied, tied);
    lc.lora = *lora;
    cuda_lm cpu, cu;
    if (cuda_lm_pair(what, &cpu, &cu, &lc, B, T, d) != 0) return;
    /* the base (bf16 matrices, f32 norms) and the adapters at random; B nonzero */
    CHECK_OK(dt_llama_init(cpu.g, 7));
    CHECK_OK(dt_lora_init(cpu.g, 8));
    uint32_t r = 4242;
    int bf16_weights = 0;
    for (int k = 0; k < dt_graph_param_count(cpu.g); k++) {
        const dt_param_info *pi = dt_graph_param_info(cpu.g, k);
        const dt_tensor *v = dt_graph_value(cpu.g, pi->id);
        bf16_weights += (pi->flags & DT_PARAM_FROZEN) && v->dtype == DT_BF16;
        if (strstr(pi->name, ".lora_B.")) fill(v->data, pi->numel, 0.05f, &r);
    }
    CHECK(bf16_weights > 0, "%s: no frozen bf16 weight in the graph", what);
    size_t np = 0, nf = 0, nf_cu = 0;
    float *p = dt_graph_flat_param(cpu.g, &np);
    void *fz = dt_graph_flat_frozen(cpu.g, &nf);
    void *fz_cu = dt_graph_flat_frozen(cu.g, &nf_cu);
    CHECK(nf == nf_cu && nf > 0, "%s: frozen buffers of %zu and %zu bytes", what, nf, nf_cu);
    CHECK_OK(dt_graph_upload(cu.g, dt_graph_flat_param(cu.g, NULL), p, np * sizeof(float)));
    CHECK_OK(dt_graph_upload(cu.g, fz_cu, fz, nf));
    int32_t *ids = dt_graph_value(cpu.g, cpu.ids)->data, *tg = dt_graph_value(cpu.g, cpu.tg)->data;
    for (int i = 0; i < B * T; i++) {
        r = r * 1664525u + 1013904223u;
        ids[i] = (int32_t)((r >> 8) % V);
        r = r * 1664525u + 1013904223u;
        tg[i] = i % 7 == 3 ? -100 : (int32_t)((r >> 8) % V);
    }
    CHECK_OK(
        dt_graph_upload(cu.g, dt_graph_value(cu.g, cu.ids)->data, ids, sizeof(int32_t) * B * T));
    CHECK_OK(dt_graph_upload(cu.g, dt_graph_value(cu.g, cu.tg)->data, tg, sizeof(int32_t) * B * T));
    if (CHECK(step2(&cpu, &cu, 0, 0) == 0, "%s: step: %s", what, dt_last_error()))
        compare(what, &cpu, &cu);
    if (tied &&
        CHECK(step2(&cpu, &cu, 1, 1) == 0, "%s: accumulate step: %s", what, dt_last_error())) {
        char w[96];
        snprintf(w, sizeof w, "%s, accumulated", what);
        compare(w, &cpu, &cu);
    }
    dt_graph_free(cpu.g);
    dt_graph_free(cu.g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_graph_lora", &s);
    const unsigned all =
        DT_LORA_Q | DT_LORA_K | DT_LORA_V | DT_LORA_O | DT_LORA_GATE | DT_LORA_UP | DT_LORA_DOWN;
    run("untied, all targets, lm_head + norm saved", d, 0,
        &(dt_lora_config){.rank = 4,
                          .alpha = 8.0f,
                          .targets = all,
                          .modules_to_save = DT_LORA_SAVE_LM_HEAD | DT_LORA_SAVE_FINAL_NORM});
    run("tied, q/v, dropout 0.1, recompute", d, 1,
        &(dt_lora_config){
            .rank = 4, .alpha = 16.0f, .dropout = 0.1f, .targets = DT_LORA_Q | DT_LORA_V});
    dt_stream_destroy(s);
    return dt_test_finish("cuda_graph_lora");
}
