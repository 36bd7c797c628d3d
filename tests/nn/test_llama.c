/* Llama parity with Hugging Face transformers (tests/ref/ref_llama.py): dtrain loads the
 * save_pretrained folder; logits, loss and every parameter gradient match the float64 answer as
 * closely as PyTorch's own float32 run does (3x its error, plus 1e-5 of the tensor's scale).
 * Also checks the config reader (rope_parameters of transformers 5, tied embeddings), the
 * parameter count formula, and recompute giving identical gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "harness.h"

static int cmp(dt_ref *ref, const char *name, const char *key, const dt_tensor *a) {
    return dt_check_vs_f64(ref, name, key, a);
}

typedef dt_test_lm model; /* the Llama training graph of tests/harness.c */
#define build dt_test_llama_lm

/* HF's labels=ids: position t predicts ids[t+1]; the last position of each row is ignored. */
static void set_batch(model *m, const dt_tensor *ids, int64_t B, int64_t T) {
    dt_test_set(m->g, m->ids, ids);
    int64_t *tg = dt_graph_value(m->g, m->targets)->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            tg[b * T + t] = t + 1 < T ? (int64_t)dt_tensor_get(ids, b * T + t + 1) : -100;
}

static void run_case(const char *name, int tied, int rope_llama3) {
    char path[512], file[256];
    snprintf(file, sizeof file, "%s_ref.safetensors", name);
    dt_ref *ref = dt_ref_load(file);
    if (!ref) return;
    snprintf(path, sizeof path, "%s/%s", getenv("DT_REF_DIR"), name);
    dt_llama_config c;
    CHECK_OK(dt_llama_config_load(path, &c));
    CHECK(c.tie_word_embeddings == tied && c.rope_type == rope_llama3, "%s config: tied %d rope %d",
          name, c.tie_word_embeddings, c.rope_type);
    const dt_tensor *ids = dt_ref_get(ref, "ids");
    int64_t B = ids->shape[0], T = ids->shape[1];
    model m = build(&c, B, T);
    CHECK_OK(dt_model_load(m.g, path, NULL));
    size_t n;
    dt_graph_flat_param(m.g, &n);
    CHECK((int64_t)n == dt_llama_param_count(&c), "%s: %zu params, formula %lld", name, n,
          (long long)dt_llama_param_count(&c));
    set_batch(&m, ids, B, T);
    CHECK_OK(dt_graph_forward(m.g, 1));
    CHECK_OK(dt_graph_backward(m.g));
    cmp(ref, name, "logits", dt_graph_value(m.g, m.logits));
    cmp(ref, name, "loss", dt_graph_value(m.g, m.loss));
    int bad = 0, cnt = 0;
    for (int i = 0; i < dt_graph_param_count(m.g); i++) {
        const dt_param_info *pi = dt_graph_param_info(m.g, i);
        char key[200];
        snprintf(key, sizeof key, "grad.%s", pi->name);
        cnt++;
        if (!cmp(ref, name, key, dt_graph_grad(m.g, pi->id))) bad++;
    }
    printf("  %s: %d gradients compared, %d off\n", name, cnt, bad);
    /* Recompute every decoder layer: bit-identical gradients, smaller arena. */
    dt_llama_config cr = c;
    cr.recompute = 1;
    model r = build(&cr, B, T);
    CHECK_OK(dt_model_load(r.g, path, NULL));
    set_batch(&r, ids, B, T);
    CHECK_OK(dt_graph_forward(r.g, 1));
    CHECK_OK(dt_graph_backward(r.g));
    CHECK(memcmp(dt_graph_flat_grad(r.g, NULL), dt_graph_flat_grad(m.g, NULL), n * 4) == 0,
          "%s: recompute gives bit-identical gradients", name);
    dt_graph_mem ma, mb;
    dt_graph_memory(m.g, &ma), dt_graph_memory(r.g, &mb);
    CHECK(mb.arena_bytes < ma.arena_bytes, "%s: recompute arena %zu < %zu", name, mb.arena_bytes,
          ma.arena_bytes);
    dt_graph_free(m.g), dt_graph_free(r.g);
    dt_ref_free(ref);
}

static void config_errors(void) {
    char dir[] = "/tmp/dt_llcfg_XXXXXX", p[256];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(p, sizeof p, "%s/config.json", dir);
    struct {
        const char *json, *expect;
    } cases[] = {
        {"{\"model_type\": \"gpt2\"}", "model_type"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64}", "vocab_size"},
        {"{\"vocab_size\": 10, \"hidden_size\": 64, \"intermediate_size\": 8, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
         "num_key_value_heads"},
        {"{\"vocab_size\": -5}", "vocab_size"},
        {"[1, 2]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(p, "w");
        fputs(cases[i].json, f);
        fclose(f);
        dt_llama_config c;
        dt_status s = dt_llama_config_load(dir, &c);
        CHECK(s != DT_OK && strstr(dt_last_error(), cases[i].expect) && strstr(dt_last_error(), p),
              "config case %zu: %s", i, dt_last_error());
    }
    remove(p), remove(dir);
    dt_llama_config c;
    CHECK(dt_llama_config_load("/nonexistent", &c) == DT_ERR_IO, "missing config");
}

int main(void) {
    dt_threads_set(2);
    run_case("llama_gqa", 0, 1);
    run_case("llama_tied", 1, 0);
    config_errors();
    return dt_test_finish("test_llama");
}
