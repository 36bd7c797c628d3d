/* PEFT adapter folders (adapter_config.json + adapter_model.safetensors) in and out.
 *
 * PEFT saves the adapter's state dict with the wrapper prefix and without the adapter name:
 *   base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight   [r, in]
 *   base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight   [out, r]
 * and a module to save (ModulesToSaveWrapper, whose trained copy lives at
 * "<module>.modules_to_save.default.weight" in the model) under the module's own name, the
 * wrapper's infix removed (ModulesToSaveWrapper.adapter_state_dict):
 *   base_model.model.model.embed_tokens.weight                       [V, D]
 *   base_model.model.model.layers.0.input_layernorm.weight           [D]
 * so a graph name maps to a file name by prefixing "base_model.model.". With tied embeddings and
 * ensure_weight_tying, PEFT writes the one trained matrix twice, as embed_tokens and lm_head, and
 * needs both to load it. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "core/file.h"
#include "core/fsinfo.h"
#include "core/fsmode.h"
#include "core/json.h"
#include "nn/lora_impl.h"

#define PEFT_PREFIX "base_model.model."

static const char *const target_names[7] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};

static int is_adapter(const char *name) {
    return strstr(name, ".lora_A.") || strstr(name, ".lora_B.");
}

/* PEFT options that change what the adapter computes and that dtrain does not implement: an
 * adapter using one is refused rather than applied with the wrong scaling or shapes
 * (use_rslora scales by alpha / sqrt(r); the patterns give modules their own r or alpha). */
static dt_status unsupported(const cJSON *o, const char *path) {
    char w[64];
    static const char *const flags[] = {"use_rslora", "use_dora", "lora_bias", "fan_in_fan_out",
                                        "use_qalora"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, flags[i]);
        if (cJSON_IsTrue(v))
            return dt_error_set(DT_ERR_FORMAT, "%s: key %s: true is not supported", path, flags[i]);
        if (v && !cJSON_IsBool(v) && !cJSON_IsNull(v))
            return dt_error_set(DT_ERR_FORMAT, "%s: key %s is %s; it must be a boolean", path,
                                flags[i], dt_json_what(v, w, sizeof w));
    }
    /* each selects modules or layers, or changes the model, beyond target_modules */
    static const char *const empty[] = {
        "rank_pattern",      "alpha_pattern",           "layers_to_transform",
        "layers_pattern",    "trainable_token_indices", "exclude_modules",
        "layer_replication", "target_parameters",       "alora_invocation_tokens"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, empty[i]);
        if (v && !cJSON_IsNull(v) && !((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child))
            return dt_error_set(DT_ERR_FORMAT, "%s: key %s: only null or empty is supported", path,
                                empty[i]);
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bias");
    if (b && !cJSON_IsNull(b) && !(cJSON_IsString(b) && !strcmp(b->valuestring, "none")))
        return dt_error_set(DT_ERR_FORMAT, "%s: key bias: only \"none\" is supported", path);
    return DT_OK;
}

/* ---- target_modules ------------------------------------------------------------------- */

/* target_modules as a string (PEFT's LoraConfig: Union[list[str], str]): "all-linear" (every
 * Linear but the output layer: the seven projections), or a regular expression that PEFT
 * full-matches (re.fullmatch) against every module name of the model, as named_modules() gives
 * them ("model.layers.0.self_attn.q_proj"; PCRE2 reads the same syntax for what such patterns
 * use). dtrain applies it when it selects the same projections in every layer and nothing else:
 * PEFT refuses a container module (model.layers.0.mlp) and would adapt an embedding or lm_head,
 * which dtrain does not. Matching is bounded (a match limit) against a hostile pattern. */
static dt_status targets_from_regex(const char *path, const char *re, int n_layers,
                                    unsigned *bits) {
    if (!strcmp(re, "all-linear")) {
        *bits = 0x7f;
        return DT_OK;
    }
    int err;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, 0, &err, &eo, NULL);
    if (!code) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: key target_modules: \"%.80s\" is not a regular expression "
                            "(offset %zu: %s)",
                            path, re, (size_t)eo, (const char *)msg);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    dt_status st = md && mc ? DT_OK : dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    if (mc) pcre2_set_match_limit(mc, 100000);
    static const char *const global[] = {
        "",       "model", "model.embed_tokens", "model.layers", "model.norm", "model.rotary_emb",
        "lm_head"};
    static const char *const local[] = {"",
                                        ".self_attn",
                                        ".self_attn.q_proj",
                                        ".self_attn.k_proj",
                                        ".self_attn.v_proj",
                                        ".self_attn.o_proj",
                                        ".mlp",
                                        ".mlp.gate_proj",
                                        ".mlp.up_proj",
                                        ".mlp.down_proj",
                                        ".mlp.act_fn",
                                        ".input_layernorm",
                                        ".post_attention_layernorm"};
    /* the target bit of local[k] (target_names order), 0 for modules that are not projections */
    static const unsigned bit[] = {0, 0, 1, 2, 4, 8, 0, 16, 32, 64, 0, 0, 0};
    char name[96];
    unsigned first = 0;
    int layers = n_layers > 0 ? n_layers : 1;
    for (int l = -1; l < layers && !st; l++) {
        unsigned here = 0;
        int n = l < 0 ? 7 : 13;
        for (int k = 0; k < n && !st; k++) {
            if (l < 0)
                snprintf(name, sizeof name, "%s", global[k]);
            else
                snprintf(name, sizeof name, "model.layers.%d%s", l, local[k]);
            int r = pcre2_match(code, (PCRE2_SPTR)name, strlen(name), 0,
                                PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, mc);
            if (r < 0 && r != PCRE2_ERROR_NOMATCH)
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: key target_modules: \"%.80s\" could not be matched "
                                  "against \"%s\" (PCRE2 error %d: too complex?)",
                                  path, re, name, r);
            else if (r >= 0 && (l < 0 || !bit[k]))
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: key target_modules: \"%.80s\" matches the module \"%s\", "
                                  "which is not a projection dtrain adapts (q_proj, k_proj, "
                                  "v_proj, o_proj, gate_proj, up_proj, down_proj)",
                                  path, re, name);
            else if (r >= 0)
                here |= bit[k];
        }
        if (l == 0) first = here;
        if (!st && l > 0 && here != first)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: key target_modules: \"%.80s\" selects other projections in "
                              "layer %d than in layer 0 (dtrain adapts the same ones in every "
                              "layer)",
                              path, re, l);
    }
    if (!st && !first)
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: key target_modules: \"%.80s\" matches no module of the model "
                          "(PEFT full-matches names such as model.layers.0.self_attn.q_proj)",
                          path, re);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    *bits = first;
    return st;
}

/* target_modules: a non-empty list of projection names, or a string (above). */
static dt_status parse_targets(const cJSON *o, const char *path, int n_layers, unsigned *bits) {
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "target_modules"), *it;
    char w[64];
    *bits = 0;
    if (cJSON_IsString(tm)) return targets_from_regex(path, tm->valuestring, n_layers, bits);
    if (!cJSON_IsArray(tm) || !cJSON_GetArraySize(tm))
        return dt_error_set(
            DT_ERR_FORMAT,
            "%s: key target_modules is %s; it must be a non-empty list of "
            "names or a string (a regular expression or \"all-linear\")",
            path, tm && cJSON_IsArray(tm) ? "an empty list" : dt_json_what(tm, w, sizeof w));
    cJSON_ArrayForEach(it, tm) {
        unsigned b = cJSON_IsString(it) ? dt_lora_target_bit(it->valuestring) : 0;
        if (!b)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: key target_modules: %s%.80s%s is not a Llama projection "
                                "(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                                path, cJSON_IsString(it) ? "'" : "",
                                cJSON_IsString(it) ? it->valuestring
                                                   : dt_json_what(it, w, sizeof w),
                                cJSON_IsString(it) ? "'" : "");
        *bits |= b;
    }
    return DT_OK;
}

/* ---- modules_to_save ------------------------------------------------------------------ */

#define SAVE_NORMS (DT_LORA_SAVE_INPUT_NORM | DT_LORA_SAVE_POST_NORM | DT_LORA_SAVE_FINAL_NORM)
#define UNSUPPORTED (1u << 31)

unsigned dt_lora_param_module(const char *name) {
    if (!strcmp(name, "model.embed_tokens.weight")) return DT_LORA_SAVE_EMBED;
    if (!strcmp(name, "lm_head.weight")) return DT_LORA_SAVE_LM_HEAD;
    if (!strcmp(name, "model.norm.weight")) return DT_LORA_SAVE_FINAL_NORM;
    int layer, n = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &n) == 1 && n > 0) {
        if (!strcmp(name + n, "input_layernorm.weight")) return DT_LORA_SAVE_INPUT_NORM;
        if (!strcmp(name + n, "post_attention_layernorm.weight")) return DT_LORA_SAVE_POST_NORM;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The modules of PEFT's wrapped LlamaForCausalLM (named_modules() of the PeftModel), as paths
 * after "base_model.model.", with the DT_LORA_SAVE_* bit of those dtrain can train whole. */
static const struct {
    const char *path;
    unsigned kind;
} top_modules[] = {
    {"", UNSUPPORTED}, /* the wrappers themselves: base_model, base_model.model */
    {"model", UNSUPPORTED},
    {"model.layers", UNSUPPORTED},
    {"model.rotary_emb", UNSUPPORTED},
    {"model.embed_tokens", DT_LORA_SAVE_EMBED},
    {"model.norm", DT_LORA_SAVE_FINAL_NORM},
    {"lm_head", DT_LORA_SAVE_LM_HEAD},
};
/* Inside model.layers.L ("" is the layer itself); a projection also has PEFT's LoRA children. */
static const struct {
    const char *path;
    unsigned kind;
} layer_modules[] = {
    {"", UNSUPPORTED},
    {".self_attn", UNSUPPORTED},
    {".mlp", UNSUPPORTED},
    {".mlp.act_fn", UNSUPPORTED},
    {".input_layernorm", DT_LORA_SAVE_INPUT_NORM},
    {".post_attention_layernorm", DT_LORA_SAVE_POST_NORM},
};
static const char *const projections[7] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
static const char *const lora_children[] = {"",
                                            ".base_layer",
                                            ".lora_dropout",
                                            ".lora_dropout.default",
                                            ".lora_A",
                                            ".lora_A.default",
                                            ".lora_B",
                                            ".lora_B.default",
                                            ".lora_embedding_A",
                                            ".lora_embedding_B",
                                            ".lora_magnitude_vector"};

/* What one modules_to_save name selects, matched as PEFT's _set_trainable matches it (a module
 * is selected when its full name ends with the name): the DT_LORA_SAVE_* bits, 0 when it
 * selects nothing (PEFT ignores it too), or an error when it selects a module dtrain cannot
 * train whole or a norm of some layers only. */
static dt_status module_name_bits(const char *path, const char *name, int n_layers,
                                  unsigned *bits) {
    char full[400], shown[400];
    unsigned kinds = 0;
    const char *unsupported = NULL;
    int layers_hit[2] = {0, 0}; /* input / post norms matched in this many layers */
    *bits = 0;
    for (size_t i = 0; i < sizeof top_modules / sizeof top_modules[0]; i++) {
        snprintf(full, sizeof full, "base_model.model%s%s", top_modules[i].path[0] ? "." : "",
                 top_modules[i].path);
        int hit =
            ends_with(full, name) || (!top_modules[i].path[0] && ends_with("base_model", name));
        if (!hit) continue;
        if (top_modules[i].kind == UNSUPPORTED && !unsupported)
            unsupported = top_modules[i].path[0] ? top_modules[i].path : "the whole model";
        kinds |= top_modules[i].kind;
    }
    for (int l = 0; l < (n_layers > 0 ? n_layers : 1); l++) {
        for (size_t i = 0; i < sizeof layer_modules / sizeof layer_modules[0]; i++) {
            snprintf(full, sizeof full, "base_model.model.model.layers.%d%s", l,
                     layer_modules[i].path);
            if (!ends_with(full, name)) continue;
            unsigned k = layer_modules[i].kind;
            if (k == UNSUPPORTED && !unsupported) {
                snprintf(shown, sizeof shown, "%s", full + strlen("base_model.model."));
                unsupported = shown;
            }
            if (k == DT_LORA_SAVE_INPUT_NORM) layers_hit[0]++;
            if (k == DT_LORA_SAVE_POST_NORM) layers_hit[1]++;
            kinds |= k;
        }
        for (int p = 0; p < 7 && !unsupported; p++)
            for (size_t ch = 0; ch < sizeof lora_children / sizeof *lora_children; ch++) {
                snprintf(full, sizeof full, "base_model.model.model.layers.%d.%s%s", l,
                         projections[p], lora_children[ch]);
                if (!ends_with(full, name)) continue;
                snprintf(shown, sizeof shown, "%s", full + strlen("base_model.model."));
                unsupported = shown;
                break;
            }
    }
    if (unsupported)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: key modules_to_save: '%s' selects %s, which dtrain cannot train "
                            "as a whole module (embed_tokens, input_layernorm, "
                            "post_attention_layernorm, norm, lm_head)",
                            path, name, unsupported);
    for (int j = 0; j < 2; j++)
        if (layers_hit[j] && layers_hit[j] < n_layers)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: key modules_to_save: '%s' selects the %s of %d of %d layers "
                                "(dtrain trains that norm in every layer or in none)",
                                path, name, j ? "post_attention_layernorm" : "input_layernorm",
                                layers_hit[j], n_layers);
    *bits = kinds & ~UNSUPPORTED;
    return DT_OK;
}

/* modules_to_save (null, absent or a list of names) -> DT_LORA_SAVE_* bits, with PEFT's rule for
 * tied embeddings checked (see models.h). */
static dt_status parse_modules(const cJSON *o, const char *path, const dt_llama_config *c,
                               unsigned *bits) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "modules_to_save"), *it;
    *bits = 0;
    if (!m || cJSON_IsNull(m)) return DT_OK;
    if (!cJSON_IsArray(m))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: key modules_to_save: expected null or a list of names", path);
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsString(it))
            return dt_error_set(DT_ERR_FORMAT, "%s: key modules_to_save: expected names (strings)",
                                path);
        unsigned b;
        dt_status st = module_name_bits(path, it->valuestring, c->num_hidden_layers, &b);
        if (st != DT_OK) return st;
        *bits |= b;
    }
    const unsigned emb = DT_LORA_SAVE_EMBED | DT_LORA_SAVE_LM_HEAD;
    if (c->tie_word_embeddings && (*bits & emb) &&
        !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ensure_weight_tying")))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: key ensure_weight_tying: the base ties lm_head to embed_tokens "
                            "and modules_to_save trains them; without ensure_weight_tying=true "
                            "PEFT unties them, dtrain keeps them tied",
                            path);
    return DT_OK;
}

/* Canonical PEFT names for DT_LORA_SAVE_* bits, each selecting exactly its modules: "norm" for
 * all three norms (PEFT's suffix match), "model.norm" for the final one alone. */
static void module_names(unsigned bits, const char **out, int *n) {
    *n = 0;
    if (bits & DT_LORA_SAVE_EMBED) out[(*n)++] = "embed_tokens";
    if ((bits & SAVE_NORMS) == SAVE_NORMS) {
        out[(*n)++] = "norm";
    } else {
        if (bits & DT_LORA_SAVE_INPUT_NORM) out[(*n)++] = "input_layernorm";
        if (bits & DT_LORA_SAVE_POST_NORM) out[(*n)++] = "post_attention_layernorm";
        if (bits & DT_LORA_SAVE_FINAL_NORM) out[(*n)++] = "model.norm";
    }
    if (bits & DT_LORA_SAVE_LM_HEAD) out[(*n)++] = "lm_head";
}

/* File key of the tied lm_head copy PEFT writes beside embed_tokens. */
#define TIED_HEAD_KEY PEFT_PREFIX "lm_head.weight"

int dt_lora_saved_key(dt_graph *g, const dt_llama_config *c, const char *key) {
    size_t lp = strlen(PEFT_PREFIX);
    if (strncmp(key, PEFT_PREFIX, lp)) return 0;
    unsigned m = dt_lora_param_module(key + lp);
    if (!(dt_lora_saved(c) & m)) return 0;
    if (m == DT_LORA_SAVE_LM_HEAD && c->tie_word_embeddings) return 1;
    return dt_graph_find(g, key + lp) >= 0;
}

dt_status dt_lora_saved_load(const dt_st_file *f, const char *path, dt_graph *g,
                             const dt_llama_config *c, int copy, int *n_keys) {
    unsigned saved = dt_lora_saved(c);
    *n_keys = 0;
    if (!saved) return DT_OK;
    dt_status st = DT_OK;
    for (int i = 0; i < dt_graph_param_count(g) && st == DT_OK; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(saved & dt_lora_param_module(pi->name))) continue;
        char key[600];
        snprintf(key, sizeof key, PEFT_PREFIX "%s", pi->name);
        dt_tensor src, head;
        const dt_tensor *dst = dt_graph_value(g, pi->id);
        if (!dst || !dst->data) {
            st = dt_error_set(DT_ERR_STATE, "lora load %s: graph is not compiled", path);
        } else if (dt_st_get(f, key, &src) != DT_OK) {
            st =
                dt_error_set(DT_ERR_FORMAT, "%s: missing tensor '%s' (modules_to_save)", path, key);
        } else if (!dt_tensor_same_shape(&src, dst)) {
            char a[96], b[96];
            st = dt_error_set(DT_ERR_SHAPE, "%s: tensor '%s' has shape %s, the model needs %s",
                              path, key, dt_shape_str(a, sizeof a, src.ndim, src.shape),
                              dt_shape_str(b, sizeof b, dst->ndim, dst->shape));
        } else if (src.dtype != DT_F32 && src.dtype != DT_BF16 && src.dtype != DT_F16) {
            st = dt_error_set(DT_ERR_DTYPE, "%s: tensor '%s' is %s, expected a float type", path,
                              key, dt_dtype_name(src.dtype));
        } else {
            ++*n_keys;
            /* tied: PEFT writes the matrix as lm_head too and loads both names into it */
            if (c->tie_word_embeddings && !strcmp(pi->name, "model.embed_tokens.weight")) {
                if (dt_st_get(f, TIED_HEAD_KEY, &head) != DT_OK)
                    st = dt_error_set(DT_ERR_FORMAT,
                                      "%s: missing tensor '%s' (the tied copy of '%s')", path,
                                      TIED_HEAD_KEY, key);
                else if (head.dtype != src.dtype || !dt_tensor_same_shape(&head, &src) ||
                         memcmp(head.data, src.data, dt_tensor_nbytes(&src)))
                    st = dt_error_set(DT_ERR_FORMAT,
                                      "%s: tensors '%s' and '%s' differ, but the base ties them",
                                      path, TIED_HEAD_KEY, key);
                else
                    ++*n_keys;
            }
            if (st == DT_OK && copy) {
                dt_tensor d = *dst;
                st = dt_tensor_copy(&d, &src);
            }
        }
    }
    return st;
}

/* ---- adapter_config.json --------------------------------------------------------------- */

/* adapter_config.json as PEFT's LoraConfig writes it: one JSON object, no key twice; peft_type
 * "LORA"; r an integer in [1, 65536]; lora_alpha a number in (0, 1e30]; lora_dropout null or a
 * number in [0, 1); target_modules (parse_targets); the options dtrain does not implement
 * refused (unsupported); modules_to_save (parse_modules). Keys dtrain does not know are
 * ignored, as PEFT ignores (with a warning) keys a newer version wrote. */
dt_status dt_lora_config_load(const char *dir, dt_llama_config *c) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    uint8_t *raw = NULL;
    size_t len = 0;
    /* names the file; a real adapter_config.json is about 1 KB */
    dt_status st = dt_read_file_max(path, 0, (size_t)16 << 20, "an adapter config", &raw, &len);
    if (st != DT_OK) return st;
    cJSON *o = dt_json_parse_strict(path, (const char *)raw, len, &st);
    free(raw);
    cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "peft_type");
    cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    cJSON *al = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    cJSON *dr = cJSON_GetObjectItemCaseSensitive(o, "lora_dropout");
    char w[64];
    if (st) {
        /* malformed, bytes after the value, or a key twice: said by dt_json_parse_strict */
    } else if (!cJSON_IsObject(o))
        st = dt_error_set(DT_ERR_FORMAT, "%s: the file is %s; it must be a JSON object", path,
                          dt_json_what(o, w, sizeof w));
    else if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA"))
        st = dt_error_set(DT_ERR_FORMAT, "%s: key peft_type is %s; expected \"LORA\"", path,
                          dt_json_what(pt, w, sizeof w));
    else if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > 65536 ||
             r->valuedouble != (int)r->valuedouble)
        st = dt_error_set(DT_ERR_FORMAT,
                          "%s: key r is %s; expected an integer rank >= 1 (at most 65536)", path,
                          dt_json_what(r, w, sizeof w));
    else if (!cJSON_IsNumber(al) || !(al->valuedouble > 0 && al->valuedouble <= 1e30))
        st = dt_error_set(DT_ERR_FORMAT, "%s: key lora_alpha is %s; expected a number > 0", path,
                          dt_json_what(al, w, sizeof w));
    else if (dr && !cJSON_IsNull(dr) &&
             !(cJSON_IsNumber(dr) && dr->valuedouble >= 0 && dr->valuedouble < 1))
        st = dt_error_set(DT_ERR_FORMAT, "%s: key lora_dropout is %s; expected a number in [0, 1)",
                          path, dt_json_what(dr, w, sizeof w));
    if (st == DT_OK) st = unsupported(o, path);
    unsigned targets = 0;
    if (st == DT_OK) st = parse_targets(o, path, c->num_hidden_layers, &targets);
    unsigned modules = 0;
    if (st == DT_OK) st = parse_modules(o, path, c, &modules);
    if (st == DT_OK) {
        c->lora.modules_to_save = modules;
        c->lora.rank = (int)r->valuedouble;
        c->lora.alpha = (float)al->valuedouble;
        c->lora.dropout = cJSON_IsNumber(dr) ? (float)dr->valuedouble : 0.0f;
        c->lora.targets = targets;
    }
    cJSON_Delete(o);
    return st;
}

/* adapter_config.json as PEFT writes it, with a final newline (malloc'd; NULL: out of memory) */
static char *adapter_config(const dt_llama_config *c, unsigned saved, const char *base_model) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(o, "r", c->lora.rank);
    cJSON_AddNumberToObject(o, "lora_alpha", c->lora.alpha);
    cJSON_AddNumberToObject(o, "lora_dropout", c->lora.dropout);
    cJSON *tm = cJSON_AddArrayToObject(o, "target_modules");
    for (int i = 0; i < 7; i++)
        if (c->lora.targets & (1u << i))
            cJSON_AddItemToArray(tm, cJSON_CreateString(target_names[i]));
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "fan_in_fan_out", 0);
    cJSON_AddBoolToObject(o, "inference_mode", 1);
    cJSON_AddBoolToObject(o, "init_lora_weights", 1);
    cJSON_AddBoolToObject(o, "use_rslora", 0);
    cJSON_AddBoolToObject(o, "use_dora", 0);
    const char *mods[8];
    int nm = 0;
    module_names(c->lora.modules_to_save, mods, &nm);
    if (nm) {
        cJSON *ms = cJSON_AddArrayToObject(o, "modules_to_save");
        for (int i = 0; i < nm; i++) cJSON_AddItemToArray(ms, cJSON_CreateString(mods[i]));
    } else {
        cJSON_AddNullToObject(o, "modules_to_save");
    }
    /* PEFT keeps a tied pair tied only with this option (dtrain always does) */
    if (saved & DT_LORA_SAVE_EMBED && c->tie_word_embeddings)
        cJSON_AddBoolToObject(o, "ensure_weight_tying", 1);
    cJSON_AddNullToObject(o, "layers_to_transform");
    cJSON_AddObjectToObject(o, "rank_pattern");
    cJSON_AddObjectToObject(o, "alpha_pattern");
    if (base_model)
        cJSON_AddStringToObject(o, "base_model_name_or_path", base_model);
    else
        cJSON_AddNullToObject(o, "base_model_name_or_path");
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    size_t len = txt ? strlen(txt) : 0;
    char *out = txt ? malloc(len + 2) : NULL;
    if (out) memcpy(out, txt, len), memcpy(out + len, "\n", 2);
    free(txt);
    return out;
}

dt_status dt_lora_save(dt_graph *g, const dt_llama_config *c, const char *dir,
                       const char *base_model) {
    if (c->lora.rank <= 0) return dt_error_set(DT_ERR_INVALID, "lora save: the model has no LoRA");
    int created = mkdir(dir, DT_DIR_MODE) == 0;
    if (!created && errno != EEXIST) {
        int err = errno;
        char note[DT_FS_NOTE_LEN];
        return dt_error_set(DT_ERR_IO, "%s: cannot create: %s%s", dir, strerror(err),
                            dt_fs_full_note(dir, err, note, sizeof note));
    }
    int np = dt_graph_param_count(g), n = 0;
    unsigned saved = dt_lora_saved(c);
    /* +1: the tied lm_head copy of a saved embedding */
    dt_st_entry *e = calloc((size_t)np + 2, sizeof *e);
    char **names = calloc((size_t)np + 2, sizeof *names);
    dt_status st = e && names ? DT_OK : dt_error_set(DT_ERR_NOMEM, "lora save: out of memory");
    for (int i = 0; i < np && st == DT_OK; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        unsigned module = dt_lora_param_module(pi->name);
        if (!is_adapter(pi->name) && !(saved & module)) continue;
        const dt_tensor *v = dt_graph_value(g, pi->id);
        if (!v || !v->data) {
            st = dt_error_set(DT_ERR_STATE, "lora save %s: graph is not compiled", dir);
            break;
        }
        int copies = module == DT_LORA_SAVE_EMBED && c->tie_word_embeddings ? 2 : 1;
        for (int k = 0; k < copies && st == DT_OK; k++) {
            const char *nm = k ? "lm_head.weight" : pi->name;
            size_t len = strlen(PEFT_PREFIX) + strlen(nm) + 1;
            if (!(names[n] = malloc(len))) {
                st = dt_error_set(DT_ERR_NOMEM, "lora save: out of memory");
                break;
            }
            snprintf(names[n], len, PEFT_PREFIX "%s", nm);
            e[n].name = names[n];
            e[n].t = v;
            n++;
        }
    }
    char *txt = st == DT_OK ? adapter_config(c, saved, base_model) : NULL;
    if (st == DT_OK && !txt) st = dt_error_set(DT_ERR_NOMEM, "lora save: out of memory");
    /* A full disk leaves the folder as it was: the config goes to a temporary file first, then
     * the weights (written whole and renamed by dt_st_save), then the config is renamed. */
    char path[4200], cfg[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", cfg, (int)getpid());
    if (st == DT_OK) st = dt_write_file(tmp, txt, strlen(txt));
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (st == DT_OK) st = dt_st_save(path, e, n, mk, mv, 1);
    if (st == DT_OK && rename(tmp, cfg) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: cannot rename %s into place: %s", cfg, tmp,
                          strerror(errno));
    if (st != DT_OK) unlink(tmp);
    if (st != DT_OK && created) rmdir(dir); /* only if empty: nothing named like an adapter */
    for (int i = 0; i < n; i++) free(names[i]);
    free(names), free(e), free(txt);
    return st;
}

dt_status dt_lora_load(dt_graph *g, const dt_llama_config *c, const char *dir) {
    dt_llama_config fc = *c;
    dt_status st = dt_lora_config_load(dir, &fc);
    if (st != DT_OK) return st;
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (fc.lora.rank != c->lora.rank)
        return dt_error_set(DT_ERR_INVALID, "%s: key r: adapter rank %d, the model's LoRA has %d",
                            path, fc.lora.rank, c->lora.rank);
    if (fabsf(fc.lora.alpha - c->lora.alpha) > 1e-6f * c->lora.alpha)
        return dt_error_set(DT_ERR_INVALID,
                            "%s: key lora_alpha: adapter %g, the model's LoRA has %g", path,
                            fc.lora.alpha, c->lora.alpha);
    if (dt_lora_saved(&fc) != dt_lora_saved(c)) {
        const char *a[8], *m[8];
        int na, nm;
        char as[200] = "", ms[200] = "";
        module_names(dt_lora_saved(&fc), a, &na);
        module_names(dt_lora_saved(c), m, &nm);
        for (int i = 0; i < na; i++) strcat(strcat(as, " "), a[i]);
        for (int i = 0; i < nm; i++) strcat(strcat(ms, " "), m[i]);
        return dt_error_set(DT_ERR_INVALID,
                            "%s: key modules_to_save: adapter [%s ], the model's [%s ]", path, as,
                            ms);
    }
    if (fc.lora.targets != c->lora.targets) {
        char a[100] = "", m[100] = "";
        for (int i = 0; i < 7; i++) {
            if (fc.lora.targets & (1u << i)) strcat(strcat(a, " "), target_names[i]);
            if (c->lora.targets & (1u << i)) strcat(strcat(m, " "), target_names[i]);
        }
        return dt_error_set(DT_ERR_INVALID,
                            "%s: key target_modules: adapter [%s ], the model's LoRA [%s ]", path,
                            a, m);
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    dt_st_file *f;
    if ((st = dt_st_open(path, &f)) != DT_OK) return st;
    /* Pass 0 checks everything, pass 1 copies: a refused adapter leaves the model untouched. */
    int np = dt_graph_param_count(g);
    for (int pass = 0; pass < 2 && st == DT_OK; pass++) {
        for (int i = 0; i < np && st == DT_OK; i++) {
            const dt_param_info *pi = dt_graph_param_info(g, i);
            if (!is_adapter(pi->name)) continue;
            char key[600];
            snprintf(key, sizeof key, PEFT_PREFIX "%s", pi->name);
            dt_tensor src;
            const dt_tensor *dst = dt_graph_value(g, pi->id);
            if (!dst || !dst->data) {
                st = dt_error_set(DT_ERR_STATE, "lora load %s: graph is not compiled", path);
            } else if (dt_st_get(f, key, &src) != DT_OK) {
                st = dt_error_set(DT_ERR_FORMAT, "%s: missing tensor '%s'", path, key);
            } else if (!dt_tensor_same_shape(&src, dst)) {
                char a[96], b[96];
                st = dt_error_set(DT_ERR_SHAPE, "%s: tensor '%s' has shape %s, the model needs %s",
                                  path, key, dt_shape_str(a, sizeof a, src.ndim, src.shape),
                                  dt_shape_str(b, sizeof b, dst->ndim, dst->shape));
            } else if (pass == 1) {
                dt_tensor d = *dst;
                st = dt_tensor_copy(&d, &src);
            }
        }
        int n_saved = 0;
        if (st == DT_OK) st = dt_lora_saved_load(f, path, g, c, pass == 1, &n_saved);
        /* Tensors the model has no adapter or module to save for (other layers, other modules,
         * DoRA vectors). */
        for (int k = 0; pass == 0 && k < dt_st_count(f) && st == DT_OK; k++) {
            const char *nm = dt_st_name(f, k);
            size_t lp = strlen(PEFT_PREFIX);
            int adapter =
                !strncmp(nm, PEFT_PREFIX, lp) && is_adapter(nm) && dt_graph_find(g, nm + lp) >= 0;
            if (!adapter && !dt_lora_saved_key(g, c, nm))
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: tensor '%s' is not an adapter or a module to save of the "
                                  "model",
                                  path, nm);
        }
    }
    dt_st_close(f);
    return st;
}
