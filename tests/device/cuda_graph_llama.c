/* The tiny Llama graph (src/nn/llama.c + cross-entropy) compiled twice, for the CPU and for the
 * CUDA device (dt_graph_opts.device), with the same parameters and batch: the loss and every
 * parameter's flat gradient must agree. Three graphs: untied embeddings; tied embeddings with
 * every layer recomputed (the embedding table's gradient is then added to by the lm_head GEMM,
 * and RECOMP entries run); the tied one again in accumulate mode (a second backward adds onto
 * the first). The untied table's gradient must also be exactly +0.0 outside the rows the batch
 * names (the row-sparse gradient, dt_param_info.sparse_row) on the device too. Then an id and
 * a target out of range: the device graph's read-back of its kernels' checks must report them
 * with the CPU op's message.
 *
 * Tolerances: loss |cuda - cpu| <= 1e-5 (1 + |cpu|); each gradient element
 * |cuda - cpu| <= 1e-4 max|cpu over its parameter| + 1e-3 |cpu|: the GEMMs (cuBLASLt vs
 * oneDNN), the attention (an online softmax over key tiles) and the reductions sum in other
 * orders, so f32 rounding differs by a few ulps per op and accumulates over the layers.
 * Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "cuda_testutil.h"
#include "harness.h"

enum { B = 2, T = 16, V = 96 };

/* Loss and gradients (tolerances above); the untied table's unused rows exactly +0.0. */
static void compare(const char *what, cuda_lm *cpu, cuda_lm *cu, int sparse_check) {
    float *gg = cuda_lm_compare(what, cpu, cu, 1e-5, 1e-4, 1e-3);
    for (int k = 0; sparse_check && k < dt_graph_param_count(cpu->g); k++) {
        const dt_param_info *pi = dt_graph_param_info(cpu->g, k);
        if ((pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) || !pi->sparse_row) continue;
        const float *b = gg + pi->offset;
        const int32_t *ids = dt_graph_value(cpu->g, cpu->ids)->data;
        size_t nonzero = 0;
        for (size_t r = 0; r < pi->numel / pi->sparse_row; r++) {
            int used = 0;
            for (int i = 0; i < B * T; i++) used |= (size_t)ids[i] == r;
            for (size_t j = 0; !used && j < pi->sparse_row; j++) {
                float z = b[r * pi->sparse_row + j];
                nonzero += z != 0.0f || signbit(z);
            }
        }
        CHECK(nonzero == 0, "%s: %s: %zu elements of unused rows are not +0.0 on CUDA", what,
              pi->name, nonzero);
    }
    free(gg);
}

/* One bad value at position `at` of input `in` (ids or targets; host copy `h`, restored after):
 * the CPU graph's forward refuses it, the device graph's forward runs and its read-back of the
 * kernels' checks (dt_graph_device_read_checks) must give the same error, word for word. */
static void bad_input(const char *what, cuda_lm *cpu, cuda_lm *cu, int in_cu, int32_t *h, int at,
                      int32_t bad) {
    const int32_t keep = h[at];
    char want[512] = "";
    h[at] = bad;
    dt_status st = dt_graph_forward(cpu->g, 1);
    snprintf(want, sizeof want, "%s", dt_last_error());
    CHECK(st == DT_ERR_RANGE, "%s: the CPU forward took %d at %d (status %d)", what, bad, at,
          (int)st);
    CHECK_OK(
        dt_graph_upload(cu->g, dt_graph_value(cu->g, in_cu)->data, h, sizeof(int32_t) * B * T));
    CHECK_OK(dt_graph_forward(cu->g, 1));
    st = dt_graph_device_read_checks(cu->g);
    CHECK(st == DT_ERR_RANGE && !strcmp(dt_last_error(), want),
          "%s: device read-back: status %d '%s', want the CPU's '%s'", what, (int)st,
          st == DT_OK ? "" : dt_last_error(), want);
    h[at] = keep;
    CHECK_OK(
        dt_graph_upload(cu->g, dt_graph_value(cu->g, in_cu)->data, h, sizeof(int32_t) * B * T));
    CHECK_OK(dt_graph_forward(cu->g, 1));
    CHECK(dt_graph_device_read_checks(cu->g) == DT_OK, "%s: still refused once restored: %s", what,
          dt_last_error());
}

static void run(const char *what, dt_device d, int tied, int recompute) {
    dt_llama_config lc = cuda_lm_tiny(V, tied, recompute);
    cuda_lm cpu, cu;
    if (cuda_lm_pair(what, &cpu, &cu, &lc, B, T, d) != 0) return;
    /* std 0.06 weights (3x the init's): activations and gradients well away from zero */
    CHECK_OK(dt_llama_init(cpu.g, 7));
    size_t np = 0;
    float *p = dt_graph_flat_param(cpu.g, &np);
    for (size_t i = 0; i < np; i++) p[i] *= 3.0f;
    CHECK_OK(dt_graph_upload(cu.g, dt_graph_flat_param(cu.g, NULL), p, np * sizeof(float)));
    int32_t *ids = dt_graph_value(cpu.g, cpu.ids)->data, *tg = dt_graph_value(cpu.g, cpu.tg)->data;
    uint32_t r = 12345;
    for (int i = 0; i < B * T; i++) { /* ids from the lower half of the vocabulary only */
        r = r * 1664525u + 1013904223u;
        ids[i] = (int32_t)((r >> 8) % (V / 2));
        r = r * 1664525u + 1013904223u;
        tg[i] = i % 7 == 3 ? -100 : (int32_t)((r >> 8) % V); /* some rows ignored */
    }
    CHECK_OK(
        dt_graph_upload(cu.g, dt_graph_value(cu.g, cu.ids)->data, ids, sizeof(int32_t) * B * T));
    CHECK_OK(dt_graph_upload(cu.g, dt_graph_value(cu.g, cu.tg)->data, tg, sizeof(int32_t) * B * T));
    if (CHECK(cuda_lm_step(&cpu, 0) == 0 && cuda_lm_step(&cu, 0) == 0, "%s: step: %s", what,
              dt_last_error()))
        compare(what, &cpu, &cu, !tied);
    CHECK(dt_graph_device_read_checks(cu.g) == DT_OK, "%s: a good batch's read-back: %s", what,
          dt_last_error());
    if (!tied) { /* an id past the table, a target past the classes (not the ignore index) */
        bad_input("bad id", &cpu, &cu, cu.ids, ids, 5, V + 3);
        bad_input("bad target", &cpu, &cu, cu.tg, tg, 9, V);
    }
    if (tied && CHECK(cuda_lm_step(&cpu, 1) == 0 && cuda_lm_step(&cu, 1) == 0,
                      "%s: accumulate step: %s", what, dt_last_error())) {
        char w[96];
        snprintf(w, sizeof w, "%s, accumulated", what);
        compare(w, &cpu, &cu, 0);
    }
    dt_graph_free(cpu.g);
    dt_graph_free(cu.g);
}

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_graph_llama", &s);
    run("untied", d, 0, 0);
    run("tied, recompute", d, 1, 1);
    dt_stream_destroy(s);
    return dt_test_finish("cuda_graph_llama");
}
