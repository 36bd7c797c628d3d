/* Llama inference with a KV cache, sampling, and Hugging Face folders written by dtrain.
 *
 * References (tests/ref/ref_generate.py): Hugging Face LlamaForCausalLM folders gen_gqa (GQA +
 * llama3 rope scaling), gen_tied (tied embeddings), gen_gqa_eos (eos set to a token the greedy
 * path produces) and transformers' greedy generate() tokens for a prompt whose top-1/top-2
 * logit gaps are all above 1e-4.
 *
 *   (a) KV-cache logits (token by token, whole-prefix prefill, mixed blocks across the 128-token
 *       chunk) equal the graph's full-sequence logits: max |diff| <= 1e-4 * max |logit| per row.
 *   (b) greedy tokens equal transformers' generate(do_sample=False) exactly; eos stops; a full
 *       cache stops.
 *   (c) sampling: a seed reproduces, another seed differs, tiny top_p / top_k 1 are greedy, and
 *       frequencies of 20000 draws on an 8-token vocabulary match softmax(logits / T) (plain,
 *       top-k, top-p) within 5 binomial standard deviations + 1e-3.
 *   (d) bad calls (prompt longer than the cache, tokens out of range, bad folders) are errors.
 *   (e) dt_llama_save_hf: sharded (>= 3 shards + index) and single-file folders reload
 *       bit-identically; replacing a folder keeps its other files; a failed save leaves
 *       nothing. tests/ref/check_llama_save.py then loads the folders with transformers. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "dtrain/generate.h"
#include "dtrain/models.h"
#include "harness.h"

#define KV_TOL 1e-4

static const char *ref_dir(void) {
    const char *d = getenv("DT_REF_DIR");
    return d ? d : "ref";
}

static void ref_path(char *p, size_t len, const char *name) {
    snprintf(p, len, "%s/%s", ref_dir(), name);
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Removes a folder of plain files (what dt_llama_save_hf writes). */
static void rm_folder(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[2048];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name), unlink(p);
    if (d) closedir(d);
    rmdir(dir);
}

/* Entries of dir whose names contain `part`. */
static int count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

typedef struct gmodel {
    dt_graph *g;
    int ids, logits;
} gmodel;

/* Forward-only graph ids [1, T] -> logits [1, T, V]. */
static gmodel graph_model(const dt_llama_config *c, int64_t T) {
    gmodel m = {.g = dt_graph_init()};
    m.ids = dt_graph_input(m.g, "ids", DT_I64, 2, (int64_t[]){1, T}, 0);
    m.logits = dt_llama_build(m.g, c, m.ids);
    int loss = dt_sum(m.g, m.logits);
    CHECK(loss >= 0, "build llama: %s", dt_last_error());
    dt_graph_keep(m.g, m.logits);
    dt_graph_opts o = {.no_backward = 1};
    CHECK_OK(dt_graph_compile(m.g, loss, &o));
    return m;
}

static double rel_err(const float *a, const float *b, int n) {
    double d = 0, s = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs(b[i]));
    return d / (s > 0 ? s : 1);
}

static uint32_t lcg(uint32_t *s) {
    return (*s = *s * 1664525u + 1013904223u) >> 8;
}

/* (a) KV cache vs the graph's full-sequence logits at every position. */
static void kv_vs_graph(const char *name) {
    char path[1024];
    ref_path(path, sizeof path, name);
    dt_llama_config c;
    CHECK_OK(dt_llama_config_load(path, &c));
    const int T = 150, V = c.vocab_size;
    gmodel gm = graph_model(&c, T);
    CHECK_OK(dt_model_load(gm.g, path, NULL));
    int32_t ids[150];
    int64_t *gi = dt_graph_value(gm.g, gm.ids)->data;
    uint32_t seed = 12345;
    for (int t = 0; t < T; t++) gi[t] = ids[t] = (int32_t)(lcg(&seed) % (uint32_t)V);
    CHECK_OK(dt_graph_forward(gm.g, 0));
    const float *ref = dt_graph_value(gm.g, gm.logits)->data; /* [T, V] */
    dt_llm *m = NULL;
    CHECK_OK(dt_llm_from_graph(gm.g, &c, T, &m));
    if (!m) return;
    float *L = malloc((size_t)V * sizeof(float)), *L150 = malloc((size_t)V * sizeof(float));
    double worst_tok = 0, worst_pre = 0, worst_blk = 0;
    for (int t = 0; t < T; t++) { /* decode: one token at a time */
        CHECK_OK(dt_llm_logits(m, &ids[t], 1, L));
        worst_tok = fmax(worst_tok, rel_err(L, ref + (size_t)t * V, V));
    }
    CHECK(dt_llm_pos(m) == T, "%s: pos %d after %d tokens", name, dt_llm_pos(m), T);
    const int pre[] = {1, 2, 7, 37, 128, 129, 150};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) { /* prefill of a whole prefix */
        dt_llm_reset(m);
        CHECK_OK(dt_llm_logits(m, ids, pre[i], L));
        worst_pre = fmax(worst_pre, rel_err(L, ref + (size_t)(pre[i] - 1) * V, V));
    }
    memcpy(L150, L, (size_t)V * sizeof(float));
    const int blk[] = {5, 1, 17, 100, 3, 24}; /* 150 in mixed blocks, one crossing 128 */
    dt_llm_reset(m);
    for (size_t i = 0, at = 0; i < sizeof blk / sizeof blk[0]; at += blk[i++]) {
        CHECK_OK(dt_llm_logits(m, ids + at, blk[i], L));
        worst_blk = fmax(worst_blk, rel_err(L, ref + (at + blk[i] - 1) * V, V));
    }
    printf("  %s: KV cache vs graph, max |diff| / max |logit|: token-by-token %.2e, prefill %.2e, "
           "blocks %.2e\n",
           name, worst_tok, worst_pre, worst_blk);
    CHECK(worst_tok <= KV_TOL && worst_pre <= KV_TOL && worst_blk <= KV_TOL,
          "%s: KV-cache logits within %g of the graph's", name, KV_TOL);
    /* The same model read straight from the folder: identical numbers, memory = weights + cache */
    dt_llm *f = NULL;
    CHECK_OK(dt_llm_load(path, T, &f));
    if (f) {
        CHECK_OK(dt_llm_logits(f, ids, T, L));
        CHECK(memcmp(L, L150, (size_t)V * sizeof(float)) == 0, "%s: loaded == from graph", name);
        size_t w, kv, s;
        dt_llm_memory(f, &w, &kv, &s);
        size_t want_kv =
            (size_t)2 * c.num_hidden_layers * c.num_key_value_heads * T * c.head_dim * 4;
        CHECK(w == (size_t)dt_llama_param_count(&c) * 4 && kv == want_kv && s < w,
              "%s: memory weights %zu kv %zu scratch %zu", name, w, kv, s);
        dt_llm_free(f);
    }
    free(L), free(L150);
    dt_llm_free(m);
    dt_graph_free(gm.g);
}

static int same_tokens(const int32_t *a, int na, const dt_tensor *b) {
    if (na != dt_tensor_numel(b)) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != (int32_t)dt_tensor_get(b, i)) return 0;
    return 1;
}

static void print_tokens(const char *what, const int32_t *t, int n) {
    printf("    %s:", what);
    for (int i = 0; i < n; i++) printf(" %d", (int)t[i]);
    printf("\n");
}

/* (b) greedy generation vs transformers, eos and the cache limit; (c) seeded sampling. */
static void greedy_case(const char *name) {
    char path[1024], file[256];
    snprintf(file, sizeof file, "%s_ref.safetensors", name);
    dt_ref *ref = dt_ref_load(file);
    if (!ref) return;
    ref_path(path, sizeof path, name);
    const dt_tensor *pt = dt_ref_get(ref, "prompt"), *want = dt_ref_get(ref, "tokens");
    int np = (int)dt_tensor_numel(pt), nw = (int)dt_tensor_numel(want);
    int32_t prompt[64], out[128], out2[128];
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)dt_tensor_get(pt, i);
    dt_llm *m = NULL;
    CHECK_OK(dt_llm_load(path, 64, &m));
    if (!m) return;
    int n = 0;
    dt_sample_opts greedy = {.temperature = 0.0f, .ignore_eos = 1};
    CHECK_OK(dt_llm_generate(m, prompt, np, nw, &greedy, out, &n));
    if (!CHECK(same_tokens(out, n, want), "%s: greedy tokens equal transformers' generate", name))
        print_tokens("dtrain", out, n);
    printf("  %s: %d greedy tokens, min top-2 gap in the reference %.2e\n", name, n,
           dt_tensor_get(dt_ref_get(ref, "min_gap"), 0));
    /* o = NULL is greedy with eos on; the reference path has no eos of this config. */
    CHECK_OK(dt_llm_generate(m, prompt, np, nw, NULL, out2, &n));
    CHECK(same_tokens(out2, n, want), "%s: NULL options = greedy", name);
    /* A cache of np + 5 positions allows 6 new tokens (the last one is never fed back). */
    dt_llm *s = NULL;
    CHECK_OK(dt_llm_load(path, np + 5, &s));
    if (s) {
        CHECK_OK(dt_llm_generate(s, prompt, np, nw, &greedy, out2, &n));
        CHECK(n == 6 && memcmp(out2, out, 6 * sizeof(int32_t)) == 0,
              "%s: full cache stops after "
              "6 tokens (got %d)",
              name, n);
        dt_llm_free(s);
    }
    /* (c) sampling on the same model */
    dt_sample_opts o = {.temperature = 1.0f, .top_p = 0.95f, .seed = 7};
    int n1 = 0, n2 = 0, n3 = 0;
    CHECK_OK(dt_llm_generate(m, prompt, np, 30, &o, out, &n1));
    CHECK_OK(dt_llm_generate(m, prompt, np, 30, &o, out2, &n2));
    CHECK(n1 == n2 && memcmp(out, out2, (size_t)n1 * sizeof(int32_t)) == 0,
          "%s: the same seed reproduces the sample", name);
    o.seed = 8;
    CHECK_OK(dt_llm_generate(m, prompt, np, 30, &o, out2, &n3));
    CHECK(n1 != n3 || memcmp(out, out2, (size_t)n1 * sizeof(int32_t)) != 0,
          "%s: another seed gives another sample", name);
    dt_sample_opts tiny_p = {.temperature = 1.0f, .top_p = 1e-6f, .seed = 3, .ignore_eos = 1};
    CHECK_OK(dt_llm_generate(m, prompt, np, nw, &tiny_p, out, &n));
    CHECK(same_tokens(out, n, want), "%s: top_p 1e-6 samples the greedy tokens", name);
    dt_sample_opts k1 = {.temperature = 2.0f, .top_k = 1, .seed = 4, .ignore_eos = 1};
    CHECK_OK(dt_llm_generate(m, prompt, np, nw, &k1, out, &n));
    CHECK(same_tokens(out, n, want), "%s: top_k 1 samples the greedy tokens", name);
    dt_llm_free(m);
    dt_ref_free(ref);
}

/* (b) stopping at eos: gen_gqa_eos has gen_gqa's weights, eos = a token of the greedy path. */
static void eos_case(void) {
    char path[1024];
    dt_ref *ref = dt_ref_load("gen_gqa_ref.safetensors");
    if (!ref) return;
    ref_path(path, sizeof path, "gen_gqa_eos");
    const dt_tensor *pt = dt_ref_get(ref, "prompt"), *want = dt_ref_get(ref, "tokens_eos"),
                    *full = dt_ref_get(ref, "tokens");
    int np = (int)dt_tensor_numel(pt), n = 0;
    int32_t prompt[64], out[128];
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)dt_tensor_get(pt, i);
    dt_llm *m = NULL;
    CHECK_OK(dt_llm_load(path, 64, &m));
    if (!m) return;
    CHECK_OK(dt_llm_generate(m, prompt, np, 40, NULL, out, &n));
    CHECK(same_tokens(out, n, want), "gen_gqa_eos: stops at eos like transformers (%d tokens)", n);
    dt_sample_opts o = {.ignore_eos = 1};
    CHECK_OK(dt_llm_generate(m, prompt, np, 40, &o, out, &n));
    CHECK(same_tokens(out, n, full), "gen_gqa_eos: ignore_eos runs on (%d tokens)", n);
    dt_llm_free(m);
    dt_ref_free(ref);
}

/* Expected distribution of dt_sample_token: softmax(logits / T), top-k, top-p (from scratch). */
static void expected_probs(double *p, const float *logits, int V, const dt_sample_opts *o) {
    int order[64];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++) /* selection sort, descending */
        for (int j = i + 1; j < V; j++)
            if (logits[order[j]] > logits[order[i]]) {
                int t = order[i];
                order[i] = order[j], order[j] = t;
            }
    double mx = logits[order[0]] / o->temperature, s = 0;
    int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    for (int i = 0; i < V; i++) p[i] = 0;
    for (int r = 0; r < keep; r++) s += p[order[r]] = exp(logits[order[r]] / o->temperature - mx);
    for (int r = 0; r < keep; r++) p[order[r]] /= s;
    if (o->top_p > 0 && o->top_p < 1) {
        double cum = 0;
        int r = 0;
        while (r < keep && cum < o->top_p) cum += p[order[r++]];
        for (int q = r; q < keep; q++) p[order[q]] = 0;
        for (int q = 0; q < r; q++) p[order[q]] /= cum;
    }
}

/* (c) frequencies of the sampler on a tiny vocabulary. */
static void sample_frequencies(void) {
    dt_llama_config c = {.vocab_size = 8,
                         .hidden_size = 32,
                         .intermediate_size = 64,
                         .num_hidden_layers = 1,
                         .num_attention_heads = 4,
                         .num_key_value_heads = 2,
                         .head_dim = 8,
                         .max_position_embeddings = 64,
                         .rms_norm_eps = 1e-5f,
                         .rope_theta = 10000.0f,
                         .bos_token_id = 1};
    gmodel gm = graph_model(&c, 4);
    CHECK_OK(dt_llama_init(gm.g, 3));
    /* A larger lm_head so the 8 logits spread over a few units (not near-uniform). */
    const dt_tensor *head = dt_graph_value(gm.g, dt_graph_find(gm.g, "lm_head.weight"));
    for (int64_t i = 0; i < dt_tensor_numel(head); i++) ((float *)head->data)[i] *= 8.0f;
    dt_llm *m = NULL;
    CHECK_OK(dt_llm_from_graph(gm.g, &c, 16, &m));
    if (!m) return;
    float L[8];
    CHECK_OK(dt_llm_logits(m, (int32_t[]){1, 5, 2}, 3, L));
    printf("  tiny vocabulary logits:");
    for (int i = 0; i < 8; i++) printf(" %.3f", L[i]);
    printf("\n");
    const dt_sample_opts cases[] = {
        {.temperature = 0.7f, .seed = 11},
        {.temperature = 1.5f, .seed = 12},
        {.temperature = 1.0f, .top_k = 3, .seed = 13},
        {.temperature = 1.2f, .top_p = 0.6f, .seed = 14},
        {.temperature = 0.9f, .top_k = 5, .top_p = 0.8f, .seed = 15},
    };
    const int N = 20000;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double p[8], f[8] = {0}, worst = 0;
        expected_probs(p, L, 8, &cases[k]);
        int fails = 0;
        for (int i = 0; i < N; i++) {
            int32_t t = -1;
            fails += dt_llm_sample(m, L, &cases[k], (uint64_t)i, &t) != DT_OK || t < 0 || t >= 8;
            if (t >= 0 && t < 8) f[t] += 1.0 / N;
        }
        CHECK(fails == 0, "sampling case %zu: %d failed draws", k, fails);
        int ok = 1, support = 0;
        for (int v = 0; v < 8; v++) {
            double tol = 5 * sqrt(p[v] * (1 - p[v]) / N) + 1e-3;
            ok &= p[v] == 0 ? f[v] == 0 : fabs(f[v] - p[v]) <= tol;
            worst = fmax(worst, fabs(f[v] - p[v]));
            support += p[v] > 0;
        }
        CHECK(ok && support >= 2,
              "sampling case %zu (T %.1f, top_k %d, top_p %.1f): "
              "frequencies match (max |f - p| %.4f, %d tokens possible)",
              k, (double)cases[k].temperature, cases[k].top_k, (double)cases[k].top_p, worst,
              support);
        printf("  sampling case %zu: %d tokens possible, max |freq - p| %.4f\n", k, support, worst);
    }
    /* The kernel on its own: greedy ties go to the lowest id, NaN is an error, V = 1 works. */
    char work[256];
    int32_t t = -1;
    CHECK_OK(dt_sample_token((float[]){1, 3, 3, 0}, 4, NULL, 0, work, &t));
    CHECK(t == 1, "greedy tie -> lowest id (got %d)", t);
    dt_sample_opts o = {.temperature = 1.0f, .top_p = 0.5f};
    CHECK_OK(dt_sample_token((float[]){2.0f}, 1, &o, 0, work, &t));
    CHECK(t == 0, "one-token vocabulary");
    CHECK(dt_sample_token((float[]){1, NAN}, 2, &o, 0, work, &t) != DT_OK &&
              strstr(dt_last_error(), "NaN"),
          "NaN logits: %s", dt_last_error());
    dt_sample_opts bad = {.temperature = 1.0f, .top_k = -2};
    CHECK(dt_sample_token((float[]){1, 2}, 2, &bad, 0, work, &t) == DT_ERR_INVALID, "top_k < 0");
    dt_llm_free(m);
    dt_graph_free(gm.g);
}

static dt_graph *loaded_graph(const char *path, dt_llama_config *c);

/* (d) bad calls. */
static void errors(void) {
    char path[1024];
    ref_path(path, sizeof path, "gen_gqa");
    dt_llm *m = NULL;
    CHECK_OK(dt_llm_load(path, 8, &m));
    if (!m) return;
    int32_t p[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, out[4];
    int n = -1;
    dt_status st = dt_llm_generate(m, p, 9, 4, NULL, out, &n);
    CHECK(st == DT_ERR_RANGE && n == 0 && strstr(dt_last_error(), "9 tokens") &&
              strstr(dt_last_error(), "8 positions") && strstr(dt_last_error(), "max_seq"),
          "prompt longer than the cache: %s", dt_last_error());
    CHECK(dt_llm_generate(m, p, 0, 4, NULL, out, &n) == DT_ERR_INVALID, "empty prompt");
    dt_llm_reset(m);
    CHECK_OK(dt_llm_logits(m, p, 5, NULL));
    st = dt_llm_logits(m, p, 4, NULL);
    CHECK(st == DT_ERR_RANGE && dt_llm_pos(m) == 5 && strstr(dt_last_error(), "max_seq"),
          "appending past the cache: %s", dt_last_error());
    st = dt_llm_logits(m, (int32_t[]){3, 320}, 2, NULL);
    CHECK(st == DT_ERR_RANGE && strstr(dt_last_error(), "320") && dt_llm_pos(m) == 5,
          "token out of range: %s", dt_last_error());
    CHECK(dt_llm_logits(m, (int32_t[]){-1}, 1, NULL) == DT_ERR_RANGE, "negative token");
    dt_llm_free(m);
    CHECK(dt_llm_load("/nonexistent/folder", 8, &m) == DT_ERR_IO && m == NULL, "missing folder: %s",
          dt_last_error());
    /* A graph of another shape: the error names the tensor. */
    dt_llama_config c;
    CHECK_OK(dt_llama_config_load(path, &c));
    dt_llama_config c2 = c;
    c2.intermediate_size = 64;
    gmodel gm = graph_model(&c2, 2);
    CHECK(dt_llm_from_graph(gm.g, &c, 8, &m) != DT_OK && strstr(dt_last_error(), "mlp.gate_proj"),
          "graph/config mismatch: %s", dt_last_error());
    dt_graph_free(gm.g);
    /* Folders with a missing tensor, an extra tensor, a wrong shape. */
    char dir[] = "/tmp/dt_genbad_XXXXXX", f[256], cfg[256], cmd[2048];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(f, sizeof f, "%s/model.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s'", path, cfg);
    CHECK(system(cmd) == 0, "copy config");
    float buf[320 * 64] = {0};
    dt_tensor emb, bad;
    dt_tensor_init(&emb, buf, DT_F32, 2, (int64_t[]){320, 64});
    dt_tensor_init(&bad, buf, DT_F32, 2, (int64_t[]){64, 64});
    dt_st_entry e1[] = {{"model.embed_tokens.weight", &emb}};
    CHECK_OK(dt_st_save(f, e1, 1, NULL, NULL, 0));
    CHECK(dt_llm_load(dir, 8, &m) == DT_ERR_FORMAT &&
              strstr(dt_last_error(), "missing tensor 'model.layers.0.self_attn.q_proj.weight'"),
          "missing tensor: %s", dt_last_error());
    dt_st_entry e2[] = {{"model.embed_tokens.weight", &bad}};
    CHECK_OK(dt_st_save(f, e2, 1, NULL, NULL, 0));
    CHECK(dt_llm_load(dir, 8, &m) == DT_ERR_SHAPE && strstr(dt_last_error(), "embed_tokens"),
          "shape mismatch: %s", dt_last_error());
    /* Every tensor of the model plus one it does not have. */
    dt_llama_config cg;
    dt_graph *g = loaded_graph(path, &cg);
    int np = dt_graph_param_count(g);
    dt_st_entry *all = calloc((size_t)np + 1, sizeof *all);
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        all[i].name = pi->name, all[i].t = dt_graph_value(g, pi->id);
    }
    all[np].name = "model.layers.0.self_attn.q_proj.bias", all[np].t = &emb;
    CHECK_OK(dt_st_save(f, all, np + 1, NULL, NULL, 0));
    CHECK(dt_llm_load(dir, 8, &m) == DT_ERR_FORMAT && strstr(dt_last_error(), "q_proj.bias") &&
              strstr(dt_last_error(), "not a parameter"),
          "extra tensor: %s", dt_last_error());
    CHECK_OK(dt_st_save(f, all, np, NULL, NULL, 0));
    CHECK_OK(dt_llm_load(dir, 8, &m));
    dt_llm_free(m);
    free(all);
    dt_graph_free(g);
    unlink(f), unlink(cfg), rmdir(dir);
}

/* (e) saving as a Hugging Face folder. */
static dt_graph *loaded_graph(const char *path, dt_llama_config *c) {
    CHECK_OK(dt_llama_config_load(path, c));
    gmodel gm = graph_model(c, 4);
    CHECK_OK(dt_model_load(gm.g, path, NULL));
    return gm.g;
}

static int same_params(dt_graph *a, dt_graph *b) {
    size_t na, nb;
    float *pa = dt_graph_flat_param(a, &na), *pb = dt_graph_flat_param(b, &nb);
    return na == nb && memcmp(pa, pb, na * sizeof(float)) == 0;
}

static void save_case(const char *name, const char *saved, size_t max_shard, int want_shards) {
    char src[1024], dst[1024], p[1200];
    ref_path(src, sizeof src, name);
    ref_path(dst, sizeof dst, saved);
    rm_folder(dst);
    dt_llama_config c, c2;
    dt_graph *g = loaded_graph(src, &c);
    CHECK_OK(dt_llama_save_hf(g, &c, dst, max_shard));
    int shards = count_entries(dst, "-of-");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dst);
    int has_index = exists(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    int has_single = exists(p);
    printf("  %s -> %s: %d shards, index %d, single file %d\n", name, saved, shards, has_index,
           has_single);
    if (want_shards > 1)
        CHECK(shards >= want_shards && has_index && !has_single, "%s: %d shards + index", saved,
              shards);
    else
        CHECK(shards == 0 && !has_index && has_single, "%s: one model.safetensors", saved);
    CHECK(count_entries(ref_dir(), ".tmp-") == 0 && count_entries(ref_dir(), ".old-") == 0,
          "%s: no temporary folders left", saved);
    dt_graph *g2 = loaded_graph(dst, &c2);
    CHECK(same_params(g, g2), "%s: reloaded parameters are bit-identical", saved);
    CHECK(memcmp(&c, &c2, sizeof c) == 0, "%s: config.json reads back the same config", saved);
    /* The inference path reads the sharded folder too. */
    dt_llm *a = NULL, *b = NULL;
    CHECK_OK(dt_llm_load(src, 16, &a));
    CHECK_OK(dt_llm_load(dst, 16, &b));
    if (a && b) {
        float *la = malloc((size_t)c.vocab_size * 4), *lb = malloc((size_t)c.vocab_size * 4);
        int32_t ids[5] = {1, 7, 19, 4, 11};
        CHECK_OK(dt_llm_logits(a, ids, 5, la));
        CHECK_OK(dt_llm_logits(b, ids, 5, lb));
        CHECK(memcmp(la, lb, (size_t)c.vocab_size * 4) == 0, "%s: dt_llm_load logits identical",
              saved);
        free(la), free(lb);
    }
    dt_llm_free(a), dt_llm_free(b);
    dt_graph_free(g), dt_graph_free(g2);
}

/* Saving over an existing folder keeps its other files and drops stale shards; a failed save
 * leaves nothing behind. */
static void save_replace_and_fail(void) {
    char src[1024], dst[1024], p[1200];
    ref_path(src, sizeof src, "gen_gqa");
    ref_path(dst, sizeof dst, "gen_gqa_resave");
    rm_folder(dst);
    dt_llama_config c;
    dt_graph *g = loaded_graph(src, &c);
    CHECK_OK(dt_llama_save_hf(g, &c, dst, 100000));
    snprintf(p, sizeof p, "%s/tokenizer.json", dst);
    FILE *f = fopen(p, "w");
    if (f) fputs("{}\n", f), fclose(f);
    char slash[1100];
    snprintf(slash, sizeof slash, "%s/", dst); /* a trailing slash names the same folder */
    CHECK_OK(dt_llama_save_hf(g, &c, slash, 0));
    CHECK(exists(p), "re-save keeps tokenizer.json");
    CHECK(count_entries(dst, "-of-") == 0 && count_entries(dst, "index") == 0,
          "re-save drops the old shards and index");
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    CHECK(exists(p), "re-save writes model.safetensors");
    CHECK(count_entries(ref_dir(), ".tmp-") == 0 && count_entries(ref_dir(), ".old-") == 0,
          "re-save leaves no temporary folders");
    dt_llama_config c2;
    dt_graph *g2 = loaded_graph(dst, &c2);
    CHECK(same_params(g, g2), "re-saved parameters are bit-identical");
    dt_graph_free(g2);
    rm_folder(dst);
    /* A config that does not match the graph: error naming a tensor, no folder. */
    dt_llama_config bad = c;
    bad.num_key_value_heads = 4;
    ref_path(dst, sizeof dst, "gen_bad_save");
    rm_folder(dst);
    dt_status st = dt_llama_save_hf(g, &bad, dst, 0);
    CHECK(st != DT_OK && strstr(dt_last_error(), "k_proj") && !exists(dst) &&
              count_entries(ref_dir(), ".tmp-") == 0,
          "mismatched save fails cleanly: %s", dt_last_error());
    CHECK(dt_llama_save_hf(g, &c, "", 0) == DT_ERR_INVALID, "empty folder name");
    dt_graph_free(g);
}

int main(void) {
    dt_threads_set(2);
    kv_vs_graph("gen_gqa");
    kv_vs_graph("gen_tied");
    greedy_case("gen_gqa");
    greedy_case("gen_tied");
    eos_case();
    sample_frequencies();
    errors();
    save_case("gen_gqa", "gen_gqa_saved", 150000, 3);
    save_case("gen_tied", "gen_tied_saved", 0, 1);
    save_replace_and_fail();
    return dt_test_finish("test_generate");
}
