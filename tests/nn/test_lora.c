/* LoRA on Llama against transformers + PEFT (tests/ref/ref_lora.py).
 *
 * For each case dtrain builds the Llama of the base folder with the LoRA config of PEFT's
 * adapter folder, loads the base (dt_model_load_base: f32 file -> frozen bf16, exact because
 * the reference rounded the base to bf16) and PEFT's adapter (dt_lora_load), and compares:
 *  - logits, loss and the gradient of every adapter tensor with PEFT's float64 answer, to
 *    dt_check_vs_f64's tolerance: |dtrain - exact| <= 3 * (PEFT f32's max error) + 1e-5 *
 * max|exact|;
 *  - the trainable-parameter count (flat buffer, dt_lora_param_count) with PEFT's
 *    get_nb_trainable_parameters(), here and for three other rank/target combinations;
 *  - that an AdamW step moves every adapter and leaves the frozen base bit-identical.
 * Then it saves the stepped adapter (dt_lora_save) and its eval logits for
 * tests/ref/check_lora_save.py (PeftModel.from_pretrained must give the same logits), reloads
 * it into a fresh model (bit-identical adapters), and checks that dt_lora_load refuses bad
 * adapters (rank, alpha, targets, unknown module, not LORA, unsupported PEFT options, bad JSON,
 * missing / misshapen / extra tensors) with one-line errors naming the file and key, leaving
 * the model untouched. */
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

static void counts(dt_ref *ref, const char *name, const dt_llama_config *c) {
    const dt_tensor *t = dt_ref_raw(ref, "count.peft");
    if (!CHECK(t, "%s: count.peft", name)) return;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) {
        dt_llama_config k = *c;
        k.lora.rank = (int)ref_int(ref, "count.rank", i);
        k.lora.alpha = (float)ref_int(ref, "count.alpha", i);
        k.lora.targets = (unsigned)ref_int(ref, "count.targets", i);
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
        CHECK(formula == peft && built == peft,
              "%s: r=%d targets 0x%x: dt_lora_param_count %lld, graph %lld, PEFT %lld", name,
              k.lora.rank, k.lora.targets, (long long)formula, (long long)built, (long long)peft);
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

enum { T_KEEP, T_DROP, T_TRANSPOSE, T_EXTRA, T_NONE };

/* PEFT's adapter tensors with `key` dropped, transposed, or an extra tensor `key` added. */
static void write_tensors(const char *src, const char *dst, int how, const char *key) {
    dt_st_file *f;
    CHECK_OK(dt_st_open(src, &f));
    int n = dt_st_count(f), k = 0;
    dt_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    dt_tensor *t = calloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++) {
        const char *nm = dt_st_name(f, i);
        dt_st_get(f, nm, &t[k]);
        if (!strcmp(nm, key) && how == T_DROP) continue;
        if (!strcmp(nm, key) && how == T_TRANSPOSE) /* same bytes, [r, in] read as [in, r] */
            dt_tensor_init(&t[k], t[k].data, t[k].dtype, 2,
                           (int64_t[]){t[k].shape[1], t[k].shape[0]});
        e[k].name = nm, e[k].t = &t[k], k++;
    }
    if (how == T_EXTRA) {
        t[k] = t[0];
        e[k].name = key, e[k].t = &t[k], k++;
    }
    CHECK_OK(dt_st_save(dst, e, k, NULL, NULL, 0));
    free(e), free(t);
    dt_st_close(f);
}

static void refusals(model *m, const dt_llama_config *c, const char *adapter, int verbose) {
    char dir[] = "/tmp/dt_lora_XXXXXX", cfg[256], st[256], src_cfg[600], src_st[600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
    snprintf(st, sizeof st, "%s/adapter_model.safetensors", dir);
    snprintf(src_cfg, sizeof src_cfg, "%s/adapter_config.json", adapter);
    snprintf(src_st, sizeof src_st, "%s/adapter_model.safetensors", adapter);
    char *orig = read_all(src_cfg);
    if (!CHECK(orig, "read %s", src_cfg)) return;
    const char *q = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    const char *d = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight";
    const char *x = "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight";
    char r_other[16], alpha_other[32];
    snprintf(r_other, sizeof r_other, "%d", c->lora.rank + 1);
    snprintf(alpha_other, sizeof alpha_other, "%g", 2 * c->lora.alpha);
    struct {
        const char *key, *json; /* config change (key NULL: PEFT's file; "-": raw text json) */
        int how;                /* tensor change */
        const char *tkey;
        const char *file, *want1, *want2;
    } cases[] = {
        {"r", r_other, T_KEEP, "", cfg, "key r", r_other},
        {"lora_alpha", alpha_other, T_KEEP, "", cfg, "key lora_alpha", alpha_other},
        {"target_modules",
         "[\"q_proj\", \"k_proj\", \"v_proj\", \"gate_proj\", \"up_proj\", "
         "\"down_proj\"]",
         T_KEEP, "", cfg, "key target_modules", "k_proj"},
        {"target_modules", "[\"q_proj\", \"v_proj\", \"gate_proj\", \"up_proj\", \"c_attn\"]",
         T_KEEP, "", cfg, "target_modules", "'c_attn'"},
        {"target_modules", "\"all-linear\"", T_KEEP, "", cfg, "key target_modules", "list"},
        {"peft_type", "\"PREFIX_TUNING\"", T_KEEP, "", cfg, "peft_type", "LORA"},
        {"peft_type", NULL, T_KEEP, "", cfg, "peft_type", "LORA"},
        {"r", "0", T_KEEP, "", cfg, "key r", "rank"},
        {"use_rslora", "true", T_KEEP, "", cfg, "key use_rslora", "not supported"},
        {"alpha_pattern", "{\"q_proj\": 16}", T_KEEP, "", cfg, "key alpha_pattern", "empty"},
        {"bias", "\"lora_only\"", T_KEEP, "", cfg, "key bias", "none"},
        {"-", "{\"peft_type\": \"LORA\", \"r\": 4,", T_KEEP, "", cfg, "not valid JSON", ""},
        {NULL, NULL, T_DROP, d, st, "missing tensor", d},
        {NULL, NULL, T_TRANSPOSE, q, st, q, "shape"},
        {NULL, NULL, T_EXTRA, x, st, x, "not an adapter"},
        {NULL, NULL, T_NONE, "", st, "", ""},
        {"-", NULL, T_KEEP, "", cfg, "", ""}, /* no adapter_config.json */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
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
        CHECK(rc != DT_OK && strstr(e, cases[i].file) && strstr(e, cases[i].want1) &&
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

static void run_case(const char *name, int rank, float alpha, unsigned targets) {
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
              c.lora.dropout == 0.0f,
          "%s: adapter_config.json read as r=%d alpha=%g targets 0x%x dropout %g", name,
          c.lora.rank, c.lora.alpha, c.lora.targets, c.lora.dropout);
    const dt_tensor *ids = dt_ref_get(ref, "ids");
    model m = build(&c, ids->shape[0], ids->shape[1]);

    /* What is trainable: exactly the adapters (f32), as many as PEFT's; the base is frozen,
     * matrices bf16 and norms f32. */
    size_t n;
    dt_graph_flat_param(m.g, &n);
    int n_adapters = 0, bad_kind = 0;
    for (int i = 0; i < dt_graph_param_count(m.g); i++) {
        const dt_param_info *pi = dt_graph_param_info(m.g, i);
        const dt_tensor *v = dt_graph_value(m.g, pi->id);
        int frozen = (pi->flags & DT_PARAM_FROZEN) != 0;
        if (is_adapter(pi->name))
            n_adapters++, bad_kind += frozen || v->dtype != DT_F32;
        else
            bad_kind += !frozen || v->dtype != (v->ndim == 2 ? DT_BF16 : DT_F32);
    }
    CHECK(!bad_kind, "%s: %d parameters not frozen-bf16 base / trainable-f32 adapter", name,
          bad_kind);
    CHECK(n_adapters == ref_int(ref, "n_adapters", 0), "%s: %d adapter tensors, PEFT %lld", name,
          n_adapters, (long long)ref_int(ref, "n_adapters", 0));
    int64_t peft = ref_int(ref, "peft_trainable", 0);
    CHECK((int64_t)n == peft && dt_lora_param_count(&c) == peft,
          "%s: trainable %zu, dt_lora_param_count %lld, PEFT %lld", name, n,
          (long long)dt_lora_param_count(&c), (long long)peft);
    counts(ref, name, &c);

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
        if (!is_adapter(pi->name)) continue;
        char key[200];
        snprintf(key, sizeof key, "grad.%s", pi->name);
        cnt++;
        const dt_tensor *gr = dt_graph_grad(m.g, pi->id);
        CHECK(dt_max_abs(gr) > 0, "%s %s: a non-zero gradient", name, key);
        if (!compare(ref, name, key, gr)) bad++;
    }
    printf("  %s: loss %.6f, %d adapter gradients compared, %d off; worst error / tolerance: "
           "%.2f elementwise and %.2f relative L2 (exact), %.2f (plain PEFT)\n",
           name, dt_tensor_get(dt_graph_value(m.g, m.loss), 0), cnt, bad, worst_elem, worst_exact,
           worst_pure);

    /* An AdamW step on the adapters: every adapter moves, the frozen base stays bit-identical. */
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
        if (is_adapter(pi->name))
            moved += memcmp(dt_graph_flat_param(m.g, NULL) + pi->offset, before.p + pi->offset,
                            pi->numel * 4) != 0;
    }
    CHECK(moved == n_adapters, "%s: %d of %d adapters changed by the step", name, moved,
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

    refusals(&m, &c, adapter, rank == 4);
    dt_graph_free(m.g);
    dt_ref_free(ref);
}

int main(void) {
    dt_threads_set(2);
    run_case("lora_gqa", 4, 8.0f, DT_LORA_Q | DT_LORA_V | DT_LORA_GATE | DT_LORA_UP | DT_LORA_DOWN);
    run_case("lora_tied", 8, 4.0f, 0x7f);
    return dt_test_finish("test_lora");
}
