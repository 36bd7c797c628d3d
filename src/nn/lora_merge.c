/* Merging a PEFT LoRA adapter into its base Llama: for every targeted projection W [out, in]
 *   W' = W + s * B A,   A [r, in], B [out, r],   s = alpha / r
 * and every module to save replaced by the adapter's trained copy,
 * in f32, as PEFT's merge_and_unload does (PEFT options that change this -- rslora, DoRA,
 * per-module ranks -- are refused by dt_lora_config_load). The result is an ordinary Llama (no
 * adapters), which the KV-cache inference (dt_llm_from_graph) runs as is and dt_llama_save_hf
 * writes out.
 *
 * The base goes into a forward-only f32 graph (ids [1, 1] -> logits [1, 1, V]): its activations
 * are a few vectors, so memory is the f32 weights, as dt_llm_load's. */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dtrain/generate.h"
#include "dtrain/models.h"
#include "dtrain/ops.h"
#include "dtrain/safetensors.h"
#include "core/file.h"
#include "core/fsmode.h"
#include "nn/lora_impl.h"

#define PEFT_PREFIX "base_model.model."
#define PATH_MAX_LEN 4096

/* Module paths inside a decoder layer, in DT_LORA_* bit order. */
static const char *const modules[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                       "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                       "mlp.down_proj"};

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* t (any float dtype, [rows, cols]) as a malloc'd f32 copy in *out. */
static dt_status to_f32(const dt_tensor *t, const char *path, const char *key, float **out) {
    *out = NULL;
    if (t->dtype != DT_F32 && t->dtype != DT_BF16 && t->dtype != DT_F16)
        return dt_error_set(DT_ERR_DTYPE, "%s: tensor '%s' is %s, expected a float type", path, key,
                            dt_dtype_name(t->dtype));
    float *p = malloc((size_t)dt_tensor_numel(t) * sizeof(float));
    if (!p) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory for '%s'", path, key);
    dt_tensor d;
    dt_tensor_init(&d, p, DT_F32, t->ndim, t->shape);
    dt_status st = dt_tensor_copy(&d, t);
    if (st != DT_OK) {
        free(p);
        return st;
    }
    *out = p;
    return DT_OK;
}

/* One adapter pair into W [out, in] (f32, in the graph). */
static dt_status merge_one(const dt_st_file *f, const char *path, const char *module, dt_tensor *w,
                           int64_t r, float scale) {
    char ka[600], kb[600], s1[96], s2[96];
    snprintf(ka, sizeof ka, PEFT_PREFIX "%s.lora_A.weight", module);
    snprintf(kb, sizeof kb, PEFT_PREFIX "%s.lora_B.weight", module);
    const int64_t out = w->shape[0], in = w->shape[1];
    const int64_t want_a[2] = {r, in}, want_b[2] = {out, r};
    dt_tensor a, b;
    if (dt_st_get(f, ka, &a) != DT_OK)
        return dt_error_set(DT_ERR_FORMAT, "%s: missing tensor '%s'", path, ka);
    if (dt_st_get(f, kb, &b) != DT_OK)
        return dt_error_set(DT_ERR_FORMAT, "%s: missing tensor '%s'", path, kb);
    if (a.ndim != 2 || a.shape[0] != r || a.shape[1] != in)
        return dt_error_set(DT_ERR_SHAPE, "%s: tensor '%s' has shape %s, the base needs %s", path,
                            ka, dt_shape_str(s1, sizeof s1, a.ndim, a.shape),
                            dt_shape_str(s2, sizeof s2, 2, want_a));
    if (b.ndim != 2 || b.shape[0] != out || b.shape[1] != r)
        return dt_error_set(DT_ERR_SHAPE, "%s: tensor '%s' has shape %s, the base needs %s", path,
                            kb, dt_shape_str(s1, sizeof s1, b.ndim, b.shape),
                            dt_shape_str(s2, sizeof s2, 2, want_b));
    if (out > INT_MAX || in > INT_MAX)
        return dt_error_set(DT_ERR_SHAPE, "%s: '%s' too large for BLAS", path, module);
    float *af = NULL, *bf = NULL;
    dt_status st = to_f32(&a, path, ka, &af);
    if (st == DT_OK) st = to_f32(&b, path, kb, &bf);
    if (st != DT_OK) {
        free(af);
        return st;
    }
    /* W [out, in] += scale * B [out, r] @ A [r, in] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)out, (int)in, (int)r, scale, bf,
                (int)r, af, (int)in, 1.0f, w->data, (int)in);
    free(af), free(bf);
    return DT_OK;
}

/* Every targeted projection of every layer, then the modules to save (which replace the base's,
 * as merge_and_unload returns the trained copies); the file must hold exactly those tensors. */
static dt_status merge_into(dt_graph *g, const dt_llama_config *c, const dt_lora_config *l,
                            float scale, const char *dir) {
    char path[PATH_MAX_LEN + 32];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    dt_st_file *f;
    dt_status st = dt_st_open(path, &f);
    if (st != DT_OK) return st;
    int used = 0;
    for (int layer = 0; layer < c->num_hidden_layers && st == DT_OK; layer++)
        for (int i = 0; i < 7 && st == DT_OK; i++) {
            if (!(l->targets & (1u << i))) continue;
            char module[200], wname[220];
            snprintf(module, sizeof module, "model.layers.%d.%s", layer, modules[i]);
            snprintf(wname, sizeof wname, "%s.weight", module);
            int id = dt_graph_find(g, wname);
            dt_tensor *w = id >= 0 ? (dt_tensor *)dt_graph_value(g, id) : NULL;
            if (!w || !w->data || w->dtype != DT_F32 || w->ndim != 2 ||
                !dt_tensor_is_contiguous(w)) {
                st = dt_error_set(DT_ERR_STATE, "lora merge: no compiled f32 weight '%s'", wname);
                break;
            }
            st = merge_one(f, path, module, w, l->rank, scale);
            used += 2;
        }
    dt_llama_config sc = *c; /* the base with the adapter's LoRA: which modules it saves */
    sc.lora = *l;
    int n_saved = 0;
    if (st == DT_OK) st = dt_lora_saved_load(f, path, g, &sc, 1, &n_saved);
    used += n_saved;
    /* Adapters on other modules (or more layers) would be silently dropped: refuse. */
    for (int k = 0; k < dt_st_count(f) && st == DT_OK && used != dt_st_count(f); k++) {
        const char *nm = dt_st_name(f, k);
        int known = dt_lora_saved_key(g, &sc, nm);
        for (int layer = 0; layer < c->num_hidden_layers && !known; layer++)
            for (int i = 0; i < 7 && !known; i++) {
                char ka[600], kb[600];
                if (!(l->targets & (1u << i))) continue;
                snprintf(ka, sizeof ka, PEFT_PREFIX "model.layers.%d.%s.lora_A.weight", layer,
                         modules[i]);
                snprintf(kb, sizeof kb, PEFT_PREFIX "model.layers.%d.%s.lora_B.weight", layer,
                         modules[i]);
                known = !strcmp(nm, ka) || !strcmp(nm, kb);
            }
        if (!known)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: tensor '%s' is not an adapter of the base's targeted "
                              "projections (%d layers) or a module to save",
                              path, nm, c->num_hidden_layers);
    }
    dt_st_close(f);
    return st;
}

dt_status dt_lora_merge_graph(const char *base_dir, const char *adapter_dir, dt_graph **gout,
                              dt_llama_config *cout) {
    if (!base_dir || !adapter_dir || !gout || !cout)
        return dt_error_set(DT_ERR_INVALID, "lora merge: base, adapter and outputs are required");
    *gout = NULL;
    if (!is_dir(base_dir))
        return dt_error_set(DT_ERR_NOTFOUND, "base %s: no such folder", base_dir);
    if (!is_dir(adapter_dir))
        return dt_error_set(DT_ERR_NOTFOUND, "adapter %s: no such folder", adapter_dir);
    char p[PATH_MAX_LEN + 32];
    snprintf(p, sizeof p, "%s/config.json", base_dir);
    if (!is_file(p))
        return dt_error_set(DT_ERR_NOTFOUND, "%s: no such file (base: a Hugging Face folder)", p);
    snprintf(p, sizeof p, "%s/adapter_config.json", adapter_dir);
    if (!is_file(p))
        return dt_error_set(DT_ERR_NOTFOUND, "%s: no such file (adapter: a PEFT folder)", p);
    dt_llama_config c, ac;
    dt_status st = dt_llama_config_load(base_dir, &c);
    if (st != DT_OK) return st;
    ac = c;
    if ((st = dt_lora_config_load(adapter_dir, &ac)) != DT_OK) return st;
    const float scale = ac.lora.alpha / (float)ac.lora.rank;
    c.lora = (dt_lora_config){0}; /* a plain f32 Llama: the merged weights are ordinary ones */
    c.recompute = 0;
    /* the base's headers against config.json before the graph allocates from its sizes */
    if ((st = dt_llama_weights_check(base_dir, &c)) != DT_OK) return st;
    dt_graph *g = dt_graph_init();
    if (!g) return dt_error_set(DT_ERR_NOMEM, "lora merge: out of memory");
    int ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){1, 1}, 0);
    int logits = ids >= 0 ? dt_llama_build(g, &c, ids) : -1;
    int loss = logits >= 0 ? dt_sum(g, logits) : -1;
    dt_graph_opts o = {.no_backward = 1};
    static const char *const ignore[] = {"rotary_emb.inv_freq", NULL};
    if (loss < 0) /* the builder's message names the problem */
        st = DT_ERR_INVALID;
    else if ((st = dt_graph_compile(g, loss, &o)) != DT_OK) {
    } else if ((st = dt_model_load(g, base_dir, ignore)) != DT_OK) {
    } else {
        st = merge_into(g, &c, &ac.lora, scale, adapter_dir);
    }
    if (st != DT_OK) {
        dt_graph_free(g);
        return st;
    }
    *gout = g;
    *cout = c;
    return DT_OK;
}

/* Copies src to dst through a temporary file (best effort for optional files). */
static dt_status copy_file(const char *src, const char *dst) {
    char tmp[2 * PATH_MAX_LEN + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *in;
    dt_status os = dt_file_fopen_regular(src, "rb", &in);
    if (os) return os;
    FILE *out = dt_fcreate(tmp, "wb");
    if (!out) {
        fclose(in);
        return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buf, 1, sizeof buf, in)) > 0) bad = fwrite(buf, 1, n, out) != n;
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(out) != 0;
    if (bad || rename(tmp, dst) != 0) {
        dt_status st = dt_error_set(DT_ERR_IO, "%s: cannot write: %s", dst, strerror(errno));
        remove(tmp);
        return st;
    }
    return DT_OK;
}

/* The same folder (after symlinks), so that the merge cannot overwrite its own input. */
static int same_dir(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

dt_status dt_lora_merge(const char *base_dir, const char *adapter_dir, const char *out_dir) {
    if (!out_dir || !*out_dir)
        return dt_error_set(DT_ERR_INVALID, "lora merge: an output folder is required");
    if (base_dir && same_dir(out_dir, base_dir))
        return dt_error_set(DT_ERR_INVALID, "output %s is the base folder", out_dir);
    if (adapter_dir && same_dir(out_dir, adapter_dir))
        return dt_error_set(DT_ERR_INVALID, "output %s is the adapter folder", out_dir);
    dt_graph *g;
    dt_llama_config c;
    dt_status st = dt_lora_merge_graph(base_dir, adapter_dir, &g, &c);
    if (st != DT_OK) return st;
    st = dt_llama_save_hf(g, &c, out_dir, (size_t)4 << 30);
    dt_graph_free(g);
    /* the base's tokenizer and generation settings belong to the merged model too */
    static const char *const extra[] = {"tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "generation_config.json",
                                        "tokenizer.model"};
    for (size_t i = 0; i < sizeof extra / sizeof *extra && st == DT_OK; i++) {
        char src[PATH_MAX_LEN + 64], dst[PATH_MAX_LEN + 64];
        struct stat sb;
        snprintf(src, sizeof src, "%s/%s", base_dir, extra[i]);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, extra[i]);
        if (stat(src, &sb) == 0 && S_ISREG(sb.st_mode)) st = copy_file(src, dst);
    }
    return st;
}
