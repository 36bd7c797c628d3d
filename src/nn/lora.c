/* PEFT adapter folders (adapter_config.json + adapter_model.safetensors) in and out.
 *
 * PEFT saves the adapter's state dict with the wrapper prefix and without the adapter name:
 *   base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight   [r, in]
 *   base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight   [out, r]
 * so a graph name maps to a file name by prefixing "base_model.model.". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "data/util.h"

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
    static const char *const flags[] = {"use_rslora", "use_dora", "lora_bias", "fan_in_fan_out"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, flags[i])))
            return dt_error_set(DT_ERR_FORMAT, "%s: key %s: true is not supported", path, flags[i]);
    static const char *const empty[] = {"rank_pattern", "alpha_pattern", "modules_to_save",
                                        "layers_to_transform", "trainable_token_indices"};
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

dt_status dt_lora_config_load(const char *dir, dt_llama_config *c) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    uint8_t *raw = NULL;
    size_t len = 0;
    dt_status rs = dt_read_file(path, 0, &raw, &len); /* NUL-terminated; names the file */
    if (rs != DT_OK) return rs;
    char *txt = (char *)raw;
    cJSON *o = cJSON_Parse(txt);
    free(txt);
    dt_status st = DT_OK;
    cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "peft_type");
    cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    cJSON *al = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    cJSON *dr = cJSON_GetObjectItemCaseSensitive(o, "lora_dropout");
    cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "target_modules");
    if (!o)
        st = dt_error_set(DT_ERR_FORMAT, "%s: not valid JSON", path);
    else if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA"))
        st = dt_error_set(DT_ERR_FORMAT, "%s: key peft_type: expected \"LORA\"", path);
    else if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > 65536 ||
             r->valuedouble != (int)r->valuedouble)
        st = dt_error_set(DT_ERR_FORMAT, "%s: key r: expected an integer rank >= 1", path);
    else if (!cJSON_IsNumber(al) || !(al->valuedouble > 0))
        st = dt_error_set(DT_ERR_FORMAT, "%s: key lora_alpha: expected a number > 0", path);
    else if (!cJSON_IsArray(tm) || !cJSON_GetArraySize(tm))
        st = dt_error_set(DT_ERR_FORMAT, "%s: key target_modules: expected a list of names", path);
    if (st == DT_OK) st = unsupported(o, path);
    unsigned targets = 0;
    cJSON *it;
    if (st == DT_OK) cJSON_ArrayForEach(it, tm) {
            unsigned b = cJSON_IsString(it) ? dt_lora_target_bit(it->valuestring) : 0;
            if (!b) {
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: key target_modules: '%s' is not a Llama projection (q_proj, "
                                  "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                                  path, cJSON_IsString(it) ? it->valuestring : "?");
                break;
            }
            targets |= b;
        }
    if (st == DT_OK) {
        c->lora.rank = (int)r->valuedouble;
        c->lora.alpha = (float)al->valuedouble;
        c->lora.dropout = cJSON_IsNumber(dr) ? (float)dr->valuedouble : 0.0f;
        c->lora.targets = targets;
    }
    cJSON_Delete(o);
    return st;
}

dt_status dt_lora_save(dt_graph *g, const dt_llama_config *c, const char *dir,
                       const char *base_model) {
    if (c->lora.rank <= 0) return dt_error_set(DT_ERR_INVALID, "lora save: the model has no LoRA");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    int np = dt_graph_param_count(g), n = 0;
    dt_st_entry *e = calloc((size_t)np + 1, sizeof *e);
    char **names = calloc((size_t)np + 1, sizeof *names);
    dt_status st = e && names ? DT_OK : dt_error_set(DT_ERR_NOMEM, "lora save: out of memory");
    for (int i = 0; i < np && st == DT_OK; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!is_adapter(pi->name)) continue;
        const dt_tensor *v = dt_graph_value(g, pi->id);
        if (!v || !v->data) {
            st = dt_error_set(DT_ERR_STATE, "lora save %s: graph is not compiled", dir);
            break;
        }
        size_t len = strlen(PEFT_PREFIX) + strlen(pi->name) + 1;
        if (!(names[n] = malloc(len))) {
            st = dt_error_set(DT_ERR_NOMEM, "lora save: out of memory");
            break;
        }
        snprintf(names[n], len, PEFT_PREFIX "%s", pi->name);
        e[n].name = names[n];
        e[n].t = v;
        n++;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (st == DT_OK) st = dt_st_save(path, e, n, mk, mv, 1);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names), free(e);
    if (st != DT_OK) return st;
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
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddNullToObject(o, "layers_to_transform");
    cJSON_AddObjectToObject(o, "rank_pattern");
    cJSON_AddObjectToObject(o, "alpha_pattern");
    if (base_model)
        cJSON_AddStringToObject(o, "base_model_name_or_path", base_model);
    else
        cJSON_AddNullToObject(o, "base_model_name_or_path");
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int bad = !f || fputs(txt, f) < 0 || fputc('\n', f) < 0;
    if (f && fclose(f) != 0) bad = 1;
    free(txt);
    return bad ? dt_error_set(DT_ERR_IO, "%s: cannot write", path) : DT_OK;
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
        /* Tensors the model has no adapter for (other layers, modules_to_save, DoRA vectors). */
        for (int k = 0; pass == 0 && k < dt_st_count(f) && st == DT_OK; k++) {
            const char *nm = dt_st_name(f, k);
            size_t lp = strlen(PEFT_PREFIX);
            if (strncmp(nm, PEFT_PREFIX, lp) || !is_adapter(nm) || dt_graph_find(g, nm + lp) < 0)
                st = dt_error_set(DT_ERR_FORMAT, "%s: tensor '%s' is not an adapter of the model",
                                  path, nm);
        }
    }
    dt_st_close(f);
    return st;
}
