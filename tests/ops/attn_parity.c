/* PyTorch parity for the attention family (references: tests/ref/ref_attn.py).
 *
 * Attention: each case (GQA 4:2, MHA, MQA; causal and not; T = 130 or 77, i.e. several 64-row
 * tiles with a ragged last one; Dh 12..64) builds q, k, v inputs with gradients, loss =
 * sum(out * R), and compares out, dq, dk, dv with a float64 PyTorch reference. It runs three
 * times: with 1 thread, 2 threads and 3 threads; the backward picks its schedule from the
 * thread count (one task per (batch, kv head), or the split key-block / query-block passes when
 * there are too few such tasks), so both schedules are compared.
 *   tolerance: out atol 5e-6, rtol 1e-5; gradients atol 1e-5, rtol 1e-5 (f32 tiles with an
 *   online softmax against float64; observed worst errors: out 7e-7, gradients 2.4e-6).
 * Self-attention, attention(x, x, x), passes one gradient buffer for all three inputs
 * (gin_beta 0, then 1, 1): dx must equal dq + dk + dv of the same op on three equal inputs
 * (atol 1e-5, rtol 1e-5; the sums are the same up to order).
 *
 * Rope: compares against transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb (rotate_half)
 * evaluated in float32:
 *   - frequency tables (default theta 1e4 / 5e5, llama3 scaling factor 8, low 1, high 4,
 *     original 8192): rtol 3e-7 (within about 2 f32 ulp; torch's f32 pow is not correctly
 *     rounded, ours is computed in double and rounded once);
 *   - outputs and gradients with the reference's own table: atol 1e-6, rtol 1e-6 (f32 cos/sin
 *     of the same f32 angles, an FMA may differ in the last bit; observed 2.4e-7), also for
 *     positions up to 100000;
 *   - outputs using our own table (end to end through dt_rope_llama3_inv_freq) for positions
 *     below 300: atol 2e-5 (an ulp of a frequency times the position). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/runtime.h"
#include "harness.h"

#define TOL_OUT 5e-6, 1e-5
#define TOL_GRAD 1e-5, 1e-5
#define TOL_TABLE 0.0, 3e-7
#define TOL_ROPE 1e-6, 1e-6

static dt_ref *ref;

static const dt_tensor *get(const char *cs, const char *key) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, key);
    return dt_ref_get(ref, name);
}

static void attention_case(const char *cs, int threads) {
    const dt_tensor *Q = get(cs, "q"), *K = get(cs, "k"), *V = get(cs, "v"), *R = get(cs, "R");
    const dt_tensor *cfg = get(cs, "cfg");
    if (!Q || !K || !V || !R || !cfg) return;
    dt_threads_set(threads); /* prepare sizes its scratch and picks the schedule from this */
    float causal = ((const float *)cfg->data)[0], scale = ((const float *)cfg->data)[1];
    dt_graph *g = dt_graph_init();
    int q = dt_graph_input(g, "q", DT_F32, 4, Q->shape, 1);
    int k = dt_graph_input(g, "k", DT_F32, 4, K->shape, 1);
    int v = dt_graph_input(g, "v", DT_F32, 4, V->shape, 1);
    int o = dt_attention(g, q, k, v, causal != 0.0f, scale);
    CHECK_OK(dt_graph_keep(g, o));
    int r = -1, loss = dt_test_dotloss(g, o, &r);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_set(g, q, Q), dt_test_set(g, k, K), dt_test_set(g, v, V), dt_test_set(g, r, R);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    char what[128];
    snprintf(what, sizeof what, "%s out (%d threads)", cs, threads);
    dt_check_tensor(what, dt_graph_value(g, o), get(cs, "out"), TOL_OUT);
    const char *gk[3] = {"dq", "dk", "dv"};
    int ids[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s %s (%d threads)", cs, gk[i], threads);
        dt_check_tensor(what, dt_graph_grad(g, ids[i]), get(cs, gk[i]), TOL_GRAD);
    }
    dt_graph_free(g);
}

/* attention(x, x, x): the three input gradients share one buffer. dx = dq + dk + dv, which is
 * checked against the same op with separate (equal) inputs. */
static void attention_self(int threads) {
    dt_threads_set(threads);
    int64_t s[4] = {2, 3, 70, 16};
    float *sum = NULL;
    for (int pass = 0; pass < 2; pass++) {
        dt_graph *g = dt_graph_init();
        int x = dt_graph_input(g, "x", DT_F32, 4, s, 1), y = -1, z = -1;
        if (pass == 1) y = dt_graph_input(g, "y", DT_F32, 4, s, 1);
        if (pass == 1) z = dt_graph_input(g, "z", DT_F32, 4, s, 1);
        int o = pass == 0 ? dt_attention(g, x, x, x, 1, 0) : dt_attention(g, x, y, z, 1, 0);
        int r = -1, loss = dt_test_dotloss(g, o, &r);
        CHECK_OK(dt_graph_compile(g, loss, NULL));
        dt_test_randn(g, x, 5, 1.0f), dt_test_randn(g, r, 6, 1.0f);
        if (pass == 1)
            dt_test_set(g, y, dt_graph_value(g, x)), dt_test_set(g, z, dt_graph_value(g, x));
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        int64_t n = dt_tensor_numel(dt_graph_grad(g, x));
        if (pass == 0) {
            sum = malloc((size_t)n * sizeof(float));
            memcpy(sum, dt_graph_grad(g, x)->data, (size_t)n * sizeof(float));
        } else {
            const float *a = dt_graph_grad(g, x)->data, *b = dt_graph_grad(g, y)->data,
                        *c = dt_graph_grad(g, z)->data;
            float *e = malloc((size_t)n * sizeof(float));
            for (int64_t i = 0; i < n; i++) e[i] = a[i] + b[i] + c[i];
            char what[96];
            snprintf(what, sizeof what, "attention(x, x, x) dx (%d threads)", threads);
            dt_check_close(what, sum, e, n, 1e-5, 1e-5);
            free(e);
        }
        dt_graph_free(g);
    }
    free(sum);
}

static void table_case(const char *key, const float *ours, int n) {
    const dt_tensor *t = dt_ref_get(ref, key);
    if (!t) return;
    CHECK(dt_tensor_numel(t) == n, "%s: %ld entries, want %d", key, (long)dt_tensor_numel(t), n);
    dt_check_close(key, ours, t->data, n, TOL_TABLE);
}

/* own_table: pass dt_rope_llama3_inv_freq's table instead of the reference's. */
static void rope_case(const char *cs, int own_table, double atol, double rtol) {
    const dt_tensor *X = get(cs, "x"), *R = get(cs, "R"), *F = get(cs, "inv_freq");
    char pname[64];
    snprintf(pname, sizeof pname, "%s.pos", cs);
    const dt_tensor *P = dt_ref_raw(ref, pname); /* absent: positions 0..T-1 */
    if (!X || !R || !F) return;
    float ours[64];
    const float *tab = F->data;
    if (own_table) {
        CHECK_OK(
            dt_rope_llama3_inv_freq(ours, (int)X->shape[3], 500000.0f, 8.0f, 1.0f, 4.0f, 8192));
        tab = ours;
    }
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, X->shape, 1), p = -1;
    if (P) p = dt_graph_input(g, "pos", P->dtype, P->ndim, P->shape, 0);
    int y = dt_rope(g, x, p, 10000.0f, tab);
    CHECK_OK(dt_graph_keep(g, y));
    int r = -1, loss = dt_test_dotloss(g, y, &r);
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_test_set(g, x, X), dt_test_set(g, r, R);
    if (P) dt_test_set(g, p, P);
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    char what[128];
    snprintf(what, sizeof what, "%s out%s", cs, own_table ? " (own table)" : "");
    dt_check_tensor(what, dt_graph_value(g, y), get(cs, "out"), atol, rtol);
    snprintf(what, sizeof what, "%s dx%s", cs, own_table ? " (own table)" : "");
    dt_check_tensor(what, dt_graph_grad(g, x), get(cs, "dx"), atol, rtol);
    dt_graph_free(g);
}

int main(void) {
    ref = dt_ref_load("attn.safetensors");
    if (!ref) return dt_test_finish("attn_parity");
    const char *cases[] = {"gqa_causal", "gqa_full", "mha_causal", "mha_full", "mqa_causal"};
    int threads[] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 5; i++) attention_case(cases[i], threads[t]);
        attention_self(threads[t]);
    }
    dt_threads_set(0);

    float tab[64];
    CHECK_OK(dt_rope_default_inv_freq(tab, 64, 10000.0f));
    table_case("table.default_1e4_64", tab, 32);
    CHECK_OK(dt_rope_default_inv_freq(tab, 128, 500000.0f));
    table_case("table.default_5e5_128", tab, 64);
    CHECK_OK(dt_rope_llama3_inv_freq(tab, 128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192));
    table_case("table.llama3_5e5_128", tab, 64);
    CHECK_OK(dt_rope_llama3_inv_freq(tab, 32, 500000.0f, 8.0f, 1.0f, 4.0f, 8192));
    table_case("table.llama3_5e5_32", tab, 16);

    rope_case("rope_default", 0, TOL_ROPE);
    rope_case("rope_llama3", 0, TOL_ROPE);
    rope_case("rope_long", 0, TOL_ROPE);
    rope_case("rope_llama3", 1, 2e-5, 1e-5);
    dt_ref_free(ref);
    return dt_test_finish("attn_parity");
}
