/* LoRA on Llama against transformers + PEFT (tests/ref/ref_lora.py).
 *
 * For each case dtrain builds the Llama of the base folder with the LoRA config of PEFT's
 * adapter folder, loads the base (dt_model_load_base: f32 file -> frozen bf16, exact because
 * the reference rounded the base to bf16) and PEFT's adapter (dt_lora_load), and compares:
 *  - logits, loss and the gradient of every trainable tensor (adapters, and the modules to save
 *    of the lora_mts cases: embeddings, norms, lm_head) with PEFT's float64 answer, to
 *    dt_check_vs_f64's tolerance: |dtrain - exact| <= 3 * (PEFT f32's max error) + 1e-5 *
 * max|exact|;
 *  - the trainable-parameter count (flat buffer, dt_lora_param_count) with PEFT's
 *    get_nb_trainable_parameters(), here and for three other rank/target combinations;
 *  - that exactly the adapters and the modules to save are trainable f32 (an embedding too:
 *    f32 although the base is bf16), the rest frozen;
 *  - that an AdamW step moves every trainable tensor and leaves the frozen base bit-identical.
 * Then it saves the stepped adapter (dt_lora_save) and its eval logits for
 * tests/ref/check_lora_save.py (PeftModel.from_pretrained must give the same logits), reloads
 * it into a fresh model (bit-identical adapters), and checks that dt_lora_load refuses bad
 * adapters (rank, alpha, targets, unknown module, not LORA, unsupported PEFT options, bad JSON,
 * missing / misshapen / extra tensors) with one-line errors naming the file and key, leaving
 * the model untouched; for modules_to_save: another modules_to_save, names selecting modules
 * dtrain cannot train whole or some layers' norms, a tied pair without ensure_weight_tying,
 * a missing or misshapen module, a tied lm_head copy that is missing or differs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "harness.h"

typedef dt_test_lm model; /* the Llama training graph of tests/harness.c */
#define build dt_test_llama_lm

/* HF's labels=ids: position t predicts ids[t+1]; the last position of each row is ignored. */
static void set_batch(model *m, const dt_tensor *ids) {
    int64_t B = ids->shape[0], T = ids->shape[1];
    dt_test_set(m->g, m->ids, ids);
    int64_t *tg = dt_graph_value(m->g, m->targets)->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            tg[b * T + t] = t + 1 < T ? (int64_t)dt_tensor_get(ids, b * T + t + 1) : -100;
}

static int is_adapter(const char *name) {
    return strstr(name, ".lora_A.") || strstr(name, ".lora_B.");
}

/* Whether graph parameter `name` is a module to save under DT_LORA_SAVE_* `bits` (written out
 * here rather than taken from the library, so that a wrong mapping there shows). */
static int is_saved(const char *name, unsigned bits, int tied) {
    if (tied && (bits & (DT_LORA_SAVE_EMBED | DT_LORA_SAVE_LM_HEAD)))
        bits |= DT_LORA_SAVE_EMBED | DT_LORA_SAVE_LM_HEAD;
    if (!strcmp(name, "model.embed_tokens.weight")) return (bits & DT_LORA_SAVE_EMBED) != 0;
    if (!strcmp(name, "lm_head.weight")) return (bits & DT_LORA_SAVE_LM_HEAD) != 0;
    if (!strcmp(name, "model.norm.weight")) return (bits & DT_LORA_SAVE_FINAL_NORM) != 0;
    if (strstr(name, ".input_layernorm.weight")) return (bits & DT_LORA_SAVE_INPUT_NORM) != 0;
    if (strstr(name, ".post_attention_layernorm.weight"))
        return (bits & DT_LORA_SAVE_POST_NORM) != 0;
    return 0;
}

static int64_t ref_int(dt_ref *ref, const char *key, int64_t i) {
    const dt_tensor *t = dt_ref_raw(ref, key);
    return CHECK(t && i < dt_tensor_numel(t), "reference %s[%lld]", key, (long long)i)
               ? (int64_t)dt_tensor_get(t, i)
               : -1;
}

static double max_diff(const dt_tensor *a, const dt_tensor *b) {
    double m = 0;
    for (int64_t i = 0; b && i < dt_tensor_numel(a); i++)
        m = fmax(m, fabs(dt_tensor_get(a, i) - dt_tensor_get(b, i)));
    return m;
}

static double rel_l2(const dt_tensor *a, const dt_tensor *b) {
    double d = 0, n = 0;
    for (int64_t i = 0; i < dt_tensor_numel(b); i++) {
        double x = dt_tensor_get(a, i), y = dt_tensor_get(b, i);
        d += (x - y) * (x - y), n += y * y;
    }
    return sqrt(d / n);
}

/* bf16 keeps 8 significant bits: relative rounding error up to 2^-9 per rounding */
#define BF16_REL (4.0 / 256)

/* dtrain's `a` against the references for `key` (ref_lora.py):
 *  - the float64 answer of dtrain's own arithmetic (bf16 inputs to the frozen matmuls),
 *    elementwise as dt_check_vs_f64 and in relative L2 within 3x of PyTorch's f32 run's;
 *  - plain PEFT (float64) within bf16 resolution, relative L2 <= BF16_REL. */
/* largest error / tolerance seen in a case: elementwise and relative L2 against the exact
 * answer, relative L2 against plain PEFT */
static double worst_elem, worst_exact, worst_pure;

static int compare(dt_ref *ref, const char *name, const char *key, const dt_tensor *a) {
    char k[220];
    int ok = dt_check_vs_f64(ref, name, key, a);
    snprintf(k, sizeof k, "relerr.%s", key);
    const dt_tensor *exact = dt_ref_get(ref, key), *re = dt_ref_get(ref, k);
    snprintf(k, sizeof k, "pure.%s", key);
    const dt_tensor *pure = dt_ref_get(ref, k);
    if (!exact || !re || !pure || dt_tensor_numel(a) != dt_tensor_numel(exact)) return 0;
    snprintf(k, sizeof k, "err.%s", key);
    double emax = 0, etol = 3 * dt_tensor_get(dt_ref_get(ref, k), 0) + 1e-5 * dt_max_abs(exact);
    for (int64_t i = 0; i < dt_tensor_numel(a); i++)
        emax = fmax(emax, fabs(dt_tensor_get(a, i) - dt_tensor_get(exact, i)));
    worst_elem = fmax(worst_elem, emax / etol);
    double e = rel_l2(a, exact), tol = 3 * dt_tensor_get(re, 0) + 1e-6, p = rel_l2(a, pure);
    worst_exact = fmax(worst_exact, e / tol), worst_pure = fmax(worst_pure, p / BF16_REL);
    ok &= CHECK(e <= tol, "%s %s: relative L2 error %.3e vs exact, tolerance %.3e", name, key, e,
                tol);
    ok &= CHECK(p <= BF16_REL, "%s %s: relative L2 distance %.3e from plain PEFT > %.3e", name, key,
                p, BF16_REL);
    return ok;
}

/* Snapshot of everything dt_lora_load could change (trainable buffer: the adapters) and of the
 * frozen base. */
typedef struct snap {
    float *p;
    void *frozen;
    size_t n, fb;
} snap;

static snap take(dt_graph *g) {
    snap s;
    float *p = dt_graph_flat_param(g, &s.n);
    void *f = dt_graph_flat_frozen(g, &s.fb);
    s.p = malloc(s.n * 4), s.frozen = malloc(s.fb);
    memcpy(s.p, p, s.n * 4), memcpy(s.frozen, f, s.fb);
    return s;
}

static int same_params(dt_graph *g, const snap *s) {
    return !memcmp(dt_graph_flat_param(g, NULL), s->p, s->n * 4);
}

static int same_frozen(dt_graph *g, const snap *s) {
    return !memcmp(dt_graph_flat_frozen(g, NULL), s->frozen, s->fb);
}

static void drop(snap *s) {
    free(s->p), free(s->frozen);
}

/* ---- dt_lora_param_count against PEFT, for the case's and three other configs ---------- */

/* `dtrain plan` of the same LoRA (lora.* keys; modules_to_save as names) on the base folder:
 * its trainable count must be PEFT's too, and the modules to save leave the frozen base. */
static void plan_count(const char *name, const char *base, const dt_lora_config *l, int64_t peft,
                       int64_t base_params, int64_t saved) {
    static const char *const tn[7] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                      "gate_proj", "up_proj", "down_proj"};
    char hf[600], rank[40], targets[200] = "lora.targets=", mods[200] = "lora.modules_to_save=";
    snprintf(hf, sizeof hf, "model.hf_path=%s", base);
    snprintf(rank, sizeof rank, "lora.rank=%d", l->rank);
    for (int i = 0, n = 0; i < 7; i++)
        if (l->targets >> i & 1) strcat(strcat(targets, n++ ? "," : ""), tn[i]);
    unsigned m = l->modules_to_save;
    const unsigned norms =
        DT_LORA_SAVE_INPUT_NORM | DT_LORA_SAVE_POST_NORM | DT_LORA_SAVE_FINAL_NORM;
    const char *mn[5] = {0};
    int k = 0;
    if (m & DT_LORA_SAVE_EMBED) mn[k++] = "embed_tokens";
    if ((m & norms) == norms) {
        mn[k++] = "norm";
    } else {
        if (m & DT_LORA_SAVE_INPUT_NORM) mn[k++] = "input_layernorm";
        if (m & DT_LORA_SAVE_POST_NORM) mn[k++] = "post_attention_layernorm";
        if (m & DT_LORA_SAVE_FINAL_NORM) mn[k++] = "model.norm";
    }
    if (m & DT_LORA_SAVE_LM_HEAD) mn[k++] = "lm_head";
    for (int i = 0; i < k; i++) strcat(strcat(mods, i ? "," : ""), mn[i]);
    char *over[] = {"model.kind=llama", hf, "lora.enabled=true", rank, targets, mods};
    dt_config *cfg;
    if (!CHECK(dt_config_from_args(NULL, 6, over, &cfg) == DT_OK, "%s: plan config: %s", name,
               dt_last_error()))
        return;
    dt_plan p;
    if (CHECK(dt_plan_compute(cfg, 1, &p) == DT_OK, "%s: plan: %s", name, dt_last_error()))
        CHECK(p.params_trainable == peft && p.params_frozen == base_params - saved &&
                  p.params_total == base_params + peft - saved,
              "%s: dtrain plan (%s %s): trainable %lld (PEFT %lld), frozen %lld, total %lld "
              "(base %lld, modules to save %lld)",
              name, targets, mods, (long long)p.params_trainable, (long long)peft,
              (long long)p.params_frozen, (long long)p.params_total, (long long)base_params,
              (long long)saved);
    dt_config_free(cfg);
}

static void counts(dt_ref *ref, const char *name, const dt_llama_config *c, const char *base) {
    const dt_tensor *t = dt_ref_raw(ref, "count.peft");
    if (!CHECK(t, "%s: count.peft", name)) return;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) {
        dt_llama_config k = *c;
        k.lora.rank = (int)ref_int(ref, "count.rank", i);
        k.lora.alpha = (float)ref_int(ref, "count.alpha", i);
        k.lora.targets = (unsigned)ref_int(ref, "count.targets", i);
        k.lora.modules_to_save = (unsigned)ref_int(ref, "count.modules", i);
        int64_t peft = ref_int(ref, "count.peft", i), formula = dt_lora_param_count(&k);
        /* what a graph built with it actually trains */
        dt_graph *g = dt_graph_init();
        int ids = dt_graph_input(g, "ids", DT_I64, 2, (int64_t[]){1, 4}, 0);
        CHECK(dt_llama_build(g, &k, ids) >= 0, "%s: build r=%d: %s", name, k.lora.rank,
              dt_last_error());
        int64_t built = 0;
        for (int j = 0; j < dt_graph_param_count(g); j++) {
            const dt_param_info *pi = dt_graph_param_info(g, j);
            if (!(pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE))) built += (int64_t)pi->numel;
        }
        dt_graph_free(g);
        plan_count(name, base, &k.lora, peft, dt_llama_param_count(&k),
                   dt_lora_saved_param_count(&k));
        CHECK(formula == peft && built == peft,
              "%s: r=%d targets 0x%x modules_to_save 0x%x: dt_lora_param_count %lld, graph %lld, "
              "PEFT %lld",
              name, k.lora.rank, k.lora.targets, k.lora.modules_to_save, (long long)formula,
              (long long)built, (long long)peft);
        if (k.lora.modules_to_save)
            printf("    count with modules_to_save 0x%x: %lld (PEFT %lld)\n",
                   k.lora.modules_to_save, (long long)formula, (long long)peft);
    }
}

/* ---- dt_lora_load's refusals ---------------------------------------------------------------- */

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    b[n] = 0;
    fclose(f);
    return b;
}

static void write_text(const char *path, const char *txt) {
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(txt, f) >= 0 && fclose(f) == 0, "write %s", path);
}

/* PEFT's adapter_config.json with one key replaced by `json` (NULL: removed). */
static char *config_with(const char *orig, const char *key, const char *json) {
    cJSON *o = cJSON_Parse(orig);
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    if (json) cJSON_AddItemToObject(o, key, cJSON_Parse(json));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

enum { T_KEEP, T_DROP, T_TRANSPOSE, T_EXTRA, T_NONE, T_CHANGE };

/* PEFT's adapter tensors with `key` dropped, transposed (a 1-d one read as [n/2, 2]), changed
 * (first element + 1), or an extra tensor `key` added. */
static void write_tensors(const char *src, const char *dst, int how, const char *key) {
    dt_st_file *f;
    CHECK_OK(dt_st_open(src, &f));
    int n = dt_st_count(f), k = 0;
    dt_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    dt_tensor *t = calloc((size_t)n + 1, sizeof *t);
    void *changed = NULL;
    for (int i = 0; i < n; i++) {
        const char *nm = dt_st_name(f, i);
        dt_st_get(f, nm, &t[k]);
        if (!strcmp(nm, key) && how == T_DROP) continue;
        if (!strcmp(nm, key) && how == T_TRANSPOSE) /* same bytes, [r, in] read as [in, r] */
            dt_tensor_init(&t[k], t[k].data, t[k].dtype, 2,
                           t[k].ndim == 2 ? (int64_t[]){t[k].shape[1], t[k].shape[0]}
                                          : (int64_t[]){t[k].shape[0] / 2, 2});
        if (!strcmp(nm, key) && how == T_CHANGE && t[k].dtype == DT_F32) {
            changed = malloc(dt_tensor_nbytes(&t[k]));
            memcpy(changed, t[k].data, dt_tensor_nbytes(&t[k]));
            ((float *)changed)[0] += 1.0f;
            t[k].data = changed;
        }
        e[k].name = nm, e[k].t = &t[k], k++;
    }
    if (how == T_EXTRA) {
        t[k] = t[0];
        e[k].name = key, e[k].t = &t[k], k++;
    }
    CHECK_OK(dt_st_save(dst, e, k, NULL, NULL, 0));
    free(e), free(t), free(changed);
    dt_st_close(f);
}

typedef struct refusal {
    const char *key, *json; /* config change (key NULL: PEFT's file; "-": raw text json) */
    int how;                /* tensor change */
    const char *tkey;
    int in_st; /* the error names adapter_model.safetensors (else adapter_config.json) */
    const char *want1, *want2;
} refusal;

static void refuse_all(model *m, const dt_llama_config *c, const char *adapter, int verbose,
                       const refusal *cases, size_t n_cases);

/* For the modules_to_save cases: lora_mts (untied; embed_tokens, every norm, lm_head) and
 * lora_mts_tied (the tied matrix, input_layernorm, model.norm). */
static void refusals_mts(model *m, const dt_llama_config *c, const char *adapter) {
    const int tied = c->tie_word_embeddings;
    const char *emb = "base_model.model.model.embed_tokens.weight";
    const char *head = "base_model.model.lm_head.weight";
    const char *fin = "base_model.model.model.norm.weight";
    const char *ln = "base_model.model.model.layers.1.input_layernorm.weight";
    const char *ln9 = "base_model.model.model.layers.9.input_layernorm.weight";
    refusal common[] = {
        {"modules_to_save", "null", T_KEEP, "", 0, "key modules_to_save", "adapter [ ]"},
        {"modules_to_save", "[\"embed_tokens\", \"mlp\"]", T_KEEP, "", 0, "'mlp'",
         "model.layers.0.mlp"},
        {"modules_to_save", "[\"q_proj\"]", T_KEEP, "", 0, "'q_proj'",
         "model.layers.0.self_attn.q_proj"},
        {"modules_to_save", "[\"lora_A\"]", T_KEEP, "", 0, "'lora_A'", "q_proj.lora_A"},
        {"modules_to_save", "[\"layers.0.input_layernorm\"]", T_KEEP, "", 0, "key modules_to_save",
         "1 of 2 layers"},
        {"modules_to_save", "\"norm\"", T_KEEP, "", 0, "key modules_to_save", "list"},
        {NULL, NULL, T_DROP, fin, 1, "missing tensor", fin},
        {NULL, NULL, T_DROP, ln, 1, "missing tensor", ln},
        {NULL, NULL, T_TRANSPOSE, ln, 1, ln, "shape"},
        {NULL, NULL, T_TRANSPOSE, emb, 1, emb, "shape"},
        {NULL, NULL, T_EXTRA, ln9, 1, ln9, "not an adapter or a module to save"},
    };
    /* one batch: the model must still change when the unchanged copy loads at the end */
    refusal all[sizeof common / sizeof *common + 8];
    size_t n = sizeof common / sizeof *common;
    memcpy(all, common, sizeof common);
    if (tied) {
        refusal t[] = {
            {"ensure_weight_tying", NULL, T_KEEP, "", 0, "key ensure_weight_tying", "tied"},
            {"ensure_weight_tying", "false", T_KEEP, "", 0, "key ensure_weight_tying", "PEFT"},
            {NULL, NULL, T_DROP, head, 1, "missing tensor", head},
            {NULL, NULL, T_CHANGE, head, 1, head, "differ"},
            /* the model's modules to save cover all norms: PEFT's "norm" */
            {"modules_to_save", "[\"embed_tokens\", \"norm\"]", T_KEEP, "", 0,
             "key modules_to_save", "[ embed_tokens norm lm_head ]"},
        };
        memcpy(all + n, t, sizeof t), n += sizeof t / sizeof *t;
    } else {
        refusal u[] = {
            {NULL, NULL, T_DROP, head, 1, "missing tensor", head},
            {"modules_to_save", "[\"embed_tokens\", \"norm\"]", T_KEEP, "", 0,
             "key modules_to_save", "lm_head"},
        };
        memcpy(all + n, u, sizeof u), n += sizeof u / sizeof *u;
    }
    refuse_all(m, c, adapter, 1, all, n);
}

static void refusals(model *m, const dt_llama_config *c, const char *adapter, int verbose) {
    const char *q = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    const char *d = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight";
    const char *x = "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight";
    char r_other[16], alpha_other[32];
    snprintf(r_other, sizeof r_other, "%d", c->lora.rank + 1);
    snprintf(alpha_other, sizeof alpha_other, "%g", 2 * c->lora.alpha);
    refusal cases[] = {
        {"r", r_other, T_KEEP, "", 0, "key r", r_other},
        {"lora_alpha", alpha_other, T_KEEP, "", 0, "key lora_alpha", alpha_other},
        {"target_modules",
         "[\"q_proj\", \"k_proj\", \"v_proj\", \"gate_proj\", \"up_proj\", "
         "\"down_proj\"]",
         T_KEEP, "", 0, "key target_modules", "k_proj"},
        {"target_modules", "[\"q_proj\", \"v_proj\", \"gate_proj\", \"up_proj\", \"c_attn\"]",
         T_KEEP, "", 0, "target_modules", "'c_attn'"},
        /* a string is a regex PEFT full-matches against module names: ".*" also takes
         * embed_tokens, the layers' containers and the model itself */
        {"target_modules", "\".*\"", T_KEEP, "", 0, "key target_modules", "not a projection"},
        {"peft_type", "\"PREFIX_TUNING\"", T_KEEP, "", 0, "peft_type", "LORA"},
        {"peft_type", NULL, T_KEEP, "", 0, "peft_type", "LORA"},
        {"r", "0", T_KEEP, "", 0, "key r", "rank"},
        {"use_rslora", "true", T_KEEP, "", 0, "key use_rslora", "not supported"},
        {"alpha_pattern", "{\"q_proj\": 16}", T_KEEP, "", 0, "key alpha_pattern", "empty"},
        {"bias", "\"lora_only\"", T_KEEP, "", 0, "key bias", "none"},
        /* the model trains no modules to save: an adapter that has some is another model's */
        {"modules_to_save", "[\"norm\"]", T_KEEP, "", 0, "key modules_to_save", "adapter [ norm ]"},
        {"-", "{\"peft_type\": \"LORA\", \"r\": 4,", T_KEEP, "", 0, "malformed JSON", ""},
        {NULL, NULL, T_DROP, d, 1, "missing tensor", d},
        {NULL, NULL, T_TRANSPOSE, q, 1, q, "shape"},
        {NULL, NULL, T_EXTRA, x, 1, x, "not an adapter"},
        {NULL, NULL, T_NONE, "", 1, "", ""},
        {"-", NULL, T_KEEP, "", 0, "", ""}, /* no adapter_config.json */
    };
    refuse_all(m, c, adapter, verbose, cases, sizeof cases / sizeof *cases);
}

/* Each case on a copy of PEFT's folder: dt_lora_load fails with one line naming the file and
 * the case's words, and leaves the model untouched; then the unchanged copy loads. */
static void refuse_all(model *m, const dt_llama_config *c, const char *adapter, int verbose,
                       const refusal *cases, size_t n_cases) {
    char dir[] = "/tmp/dt_lora_XXXXXX", cfg[256], st[256], src_cfg[600], src_st[600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
    snprintf(st, sizeof st, "%s/adapter_model.safetensors", dir);
    snprintf(src_cfg, sizeof src_cfg, "%s/adapter_config.json", adapter);
    snprintf(src_st, sizeof src_st, "%s/adapter_model.safetensors", adapter);
    char *orig = read_all(src_cfg);
    if (!CHECK(orig, "read %s", src_cfg)) return;
    for (size_t i = 0; i < n_cases; i++) {
        const char *file = cases[i].in_st ? st : cfg;
        remove(cfg), remove(st);
        if (cases[i].key && !strcmp(cases[i].key, "-")) {
            if (cases[i].json) write_text(cfg, cases[i].json);
        } else if (cases[i].key) {
            char *s = config_with(orig, cases[i].key, cases[i].json);
            write_text(cfg, s);
            free(s);
        } else {
            write_text(cfg, orig);
        }
        if (cases[i].how != T_NONE) write_tensors(src_st, st, cases[i].how, cases[i].tkey);
        snap s = take(m->g);
        dt_status rc = dt_lora_load(m->g, c, dir);
        const char *e = dt_last_error();
        CHECK(rc != DT_OK && strstr(e, file) && strstr(e, cases[i].want1) &&
                  strstr(e, cases[i].want2) && !strchr(e, '\n'),
              "refusal %zu (%s %s): status %d: %s", i, cases[i].key ? cases[i].key : "tensors",
              cases[i].json ? cases[i].json : cases[i].tkey, (int)rc, e);
        if (verbose) printf("    refused: %s\n", e);
        CHECK(same_params(m->g, &s) && same_frozen(m->g, &s), "refusal %zu: the model is untouched",
              i);
        drop(&s);
    }
    /* the folder as PEFT wrote it loads into the same model (the refusals were the changes) */
    write_text(cfg, orig);
    write_tensors(src_st, st, T_KEEP, "");
    snap s = take(m->g);
    CHECK_OK(dt_lora_load(m->g, c, dir));
    CHECK(!same_params(m->g, &s) && same_frozen(m->g, &s), "unchanged copy loads");
    drop(&s);
    free(orig);
    remove(cfg), remove(st), rmdir(dir);
}

/* ---- one case ---------------------------------------------------------------------------- */

static void run_case(const char *name, int rank, float alpha, unsigned targets, unsigned modules) {
    char file[256], base[512], adapter[512], mine[512], out[512];
    const char *rd = getenv("DT_REF_DIR");
    snprintf(file, sizeof file, "%s_ref.safetensors", name);
    dt_ref *ref = dt_ref_load(file);
    if (!ref) return;
    snprintf(base, sizeof base, "%s/%s", rd, name);
    snprintf(adapter, sizeof adapter, "%s/%s_adapter", rd, name);
    snprintf(mine, sizeof mine, "%s/%s_dtrain_adapter", rd, name);
    snprintf(out, sizeof out, "%s/%s_dtrain_out.safetensors", rd, name);

    dt_llama_config c;
    CHECK_OK(dt_llama_config_load(base, &c));
    CHECK_OK(dt_lora_config_load(adapter, &c));
    CHECK(c.lora.rank == rank && c.lora.alpha == alpha && c.lora.targets == targets &&
              c.lora.dropout == 0.0f && c.lora.modules_to_save == modules,
          "%s: adapter_config.json read as r=%d alpha=%g targets 0x%x dropout %g "
          "modules_to_save 0x%x",
          name, c.lora.rank, c.lora.alpha, c.lora.targets, c.lora.dropout, c.lora.modules_to_save);
    const dt_tensor *ids = dt_ref_get(ref, "ids");
    model m = build(&c, ids->shape[0], ids->shape[1]);

    /* What is trainable: exactly the adapters and the modules to save (f32), as many tensors
     * as PEFT's; the rest of the base is frozen, matrices bf16 and norms f32. */
    size_t n;
    dt_graph_flat_param(m.g, &n);
    int n_adapters = 0, n_saved = 0, bad_kind = 0;
    for (int i = 0; i < dt_graph_param_count(m.g); i++) {
        const dt_param_info *pi = dt_graph_param_info(m.g, i);
        const dt_tensor *v = dt_graph_value(m.g, pi->id);
        int frozen = (pi->flags & DT_PARAM_FROZEN) != 0;
        if (is_adapter(pi->name))
            n_adapters++, bad_kind += frozen || v->dtype != DT_F32;
        else if (is_saved(pi->name, modules, c.tie_word_embeddings))
            n_saved++, bad_kind += frozen || v->dtype != DT_F32;
        else
            bad_kind += !frozen || v->dtype != (v->ndim == 2 ? DT_BF16 : DT_F32);
    }
    CHECK(!bad_kind,
          "%s: %d parameters not frozen-bf16 base / trainable-f32 adapter or module to save", name,
          bad_kind);
    CHECK(!modules == !n_saved, "%s: %d modules to save in the graph", name, n_saved);
    CHECK(n_adapters + n_saved == ref_int(ref, "n_adapters", 0),
          "%s: %d adapter tensors + %d modules to save, PEFT %lld trainable tensors", name,
          n_adapters, n_saved, (long long)ref_int(ref, "n_adapters", 0));
    n_adapters += n_saved; /* from here: every trainable tensor */
    int64_t peft = ref_int(ref, "peft_trainable", 0);
    CHECK((int64_t)n == peft && dt_lora_param_count(&c) == peft,
          "%s: trainable %zu, dt_lora_param_count %lld, PEFT %lld", name, n,
          (long long)dt_lora_param_count(&c), (long long)peft);
    counts(ref, name, &c, base);

    /* Parity with PEFT: forward and backward on PEFT's adapter. */
    worst_elem = worst_exact = worst_pure = 0;
    CHECK_OK(dt_model_load_base(m.g, base, NULL));
    CHECK_OK(dt_lora_load(m.g, &c, adapter));
    set_batch(&m, ids);
    CHECK_OK(dt_graph_forward(m.g, 1));
    CHECK_OK(dt_graph_backward(m.g));
    compare(ref, name, "logits", dt_graph_value(m.g, m.logits));
    compare(ref, name, "loss", dt_graph_value(m.g, m.loss));
    int bad = 0, cnt = 0;
    for (int i = 0; i < dt_graph_param_count(m.g); i++) {
        const dt_param_info *pi = dt_graph_param_info(m.g, i);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        char key[200];
        snprintf(key, sizeof key, "grad.%s", pi->name);
        cnt++;
        const dt_tensor *gr = dt_graph_grad(m.g, pi->id);
        CHECK(dt_max_abs(gr) > 0, "%s %s: a non-zero gradient", name, key);
        if (!compare(ref, name, key, gr)) bad++;
    }
    CHECK(cnt == n_adapters, "%s: %d gradients compared, %d trainable tensors", name, cnt,
          n_adapters);
    printf("  %s: loss %.6f, %d gradients compared (%d of modules to save), %d off; worst "
           "error / tolerance: "
           "%.2f elementwise and %.2f relative L2 (exact), %.2f (plain PEFT)\n",
           name, dt_tensor_get(dt_graph_value(m.g, m.loss), 0), cnt, n_saved, bad, worst_elem,
           worst_exact, worst_pure);

    /* An AdamW step: every trainable tensor moves, the frozen base stays bit-identical. */
    snap before = take(m.g);
    int cap = dt_graph_param_count(m.g), ng;
    dt_optim_group *groups = calloc((size_t)cap, sizeof *groups);
    CHECK_OK(dt_optim_groups_from_graph(m.g, groups, cap, &ng));
    dt_optim_config oc = dt_optim_config_default(DT_OPTIM_ADAMW);
    dt_optim *opt;
    CHECK_OK(dt_optim_init(&oc, n, 0, n, groups, ng, &opt));
    CHECK_OK(
        dt_optim_step(opt, dt_graph_flat_param(m.g, NULL), dt_graph_flat_grad(m.g, NULL), 5e-2f));
    dt_optim_free(opt), free(groups);
    int moved = 0;
    for (int i = 0; i < dt_graph_param_count(m.g); i++) {
        const dt_param_info *pi = dt_graph_param_info(m.g, i);
        if (!(pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)))
            moved += memcmp(dt_graph_flat_param(m.g, NULL) + pi->offset, before.p + pi->offset,
                            pi->numel * 4) != 0;
    }
    CHECK(moved == n_adapters, "%s: %d of %d trainable tensors changed by the step", name, moved,
          n_adapters);
    CHECK(same_frozen(m.g, &before), "%s: base weights bit-unchanged after the step (%zu bytes)",
          name, before.fb);
    drop(&before);

    /* Interop: dtrain's adapter and its eval logits, for check_lora_save.py. */
    CHECK_OK(dt_graph_forward(m.g, 0));
    const dt_tensor *lg = dt_graph_value(m.g, m.logits);
    double moved_by = max_diff(lg, dt_ref_get(ref, "logits"));
    CHECK(moved_by > 1e-3, "%s: the stepped adapter changes the logits (max %.2e)", name, moved_by);
    CHECK_OK(dt_lora_save(m.g, &c, mine, base));
    const dt_tensor *raw_ids = dt_ref_raw(ref, "ids");
    dt_st_entry e[2] = {{"ids", raw_ids}, {"logits", lg}};
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    CHECK_OK(dt_st_save(out, e, 2, mk, mv, 1));

    /* dtrain reads its own adapter back: same config, bit-identical adapters. */
    dt_llama_config c2;
    CHECK_OK(dt_llama_config_load(base, &c2));
    CHECK_OK(dt_lora_config_load(mine, &c2));
    CHECK(!memcmp(&c2.lora, &c.lora, sizeof c.lora), "%s: saved adapter_config.json round trip",
          name);
    model r = build(&c2, ids->shape[0], ids->shape[1]);
    CHECK_OK(dt_model_load_base(r.g, base, NULL));
    CHECK_OK(dt_lora_load(r.g, &c2, mine));
    CHECK(!memcmp(dt_graph_flat_param(r.g, NULL), dt_graph_flat_param(m.g, NULL), n * 4),
          "%s: saved adapter reloads bit-identical", name);
    dt_graph_free(r.g);

    if (modules)
        refusals_mts(&m, &c, adapter);
    else
        refusals(&m, &c, adapter, rank == 4);
    dt_graph_free(m.g);
    dt_ref_free(ref);
}

int main(void) {
    dt_threads_set(2);
    run_case("lora_gqa", 4, 8.0f, DT_LORA_Q | DT_LORA_V | DT_LORA_GATE | DT_LORA_UP | DT_LORA_DOWN,
             0);
    run_case("lora_tied", 8, 4.0f, 0x7f, 0);
    /* modules_to_save: ["embed_tokens", "norm", "lm_head"], untied ("norm": all three norms) */
    run_case("lora_mts", 4, 8.0f, DT_LORA_Q | DT_LORA_V | DT_LORA_UP,
             DT_LORA_SAVE_EMBED | DT_LORA_SAVE_INPUT_NORM | DT_LORA_SAVE_POST_NORM |
                 DT_LORA_SAVE_FINAL_NORM | DT_LORA_SAVE_LM_HEAD);
    /* tied, ensure_weight_tying: PEFT wrote ["input_layernorm", "model.norm",
     * "model.embed_tokens"] for ["lm_head", "input_layernorm", "model.norm"] */
    run_case("lora_mts_tied", 4, 4.0f, DT_LORA_Q | DT_LORA_K | DT_LORA_V | DT_LORA_O,
             DT_LORA_SAVE_EMBED | DT_LORA_SAVE_INPUT_NORM | DT_LORA_SAVE_FINAL_NORM);
    return dt_test_finish("test_lora");
}
