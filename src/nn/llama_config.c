/* Hugging Face Llama config.json -> dt_llama_config, and the parameter count. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dtrain/models.h"
#include "core/file.h"
#include "core/json.h"

/* config.json is read whole, sized by the file; a real one is about 1 KB. */
#define MAX_CONFIG_BYTES ((size_t)16 << 20)

/* Upper bounds of the sizes, far above any model in use (Llama 3.1 405B: vocabulary 128256,
 * hidden 16384, intermediate 53248, 126 layers, 128 heads of 128) and low enough that the
 * parameter counts computed from them (dt_llama_param_count, dt_lora_param_count with r up to
 * 65536) fit in int64_t: a hostile config.json is refused, not overflowed. */
#define MAX_VOCAB (1 << 24)
#define MAX_HIDDEN (1 << 20)
#define MAX_FFN (1 << 22)
#define MAX_LAYERS (1 << 16)
#define MAX_HEADS (1 << 16)
#define MAX_POSITIONS (1 << 30)
#define MAX_ID 1000000000
#define MAX_PARAMS ((int64_t)1 << 50)

/* Integer key in [0, max]: required (def < 0 means required) or default. */
static dt_status get_int(const char *p, cJSON *o, const char *key, int def, int max, int *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return dt_error_set(DT_ERR_FORMAT, "%s: missing key '%s'", p, key);
        *out = def;
        return DT_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > max) {
        char w[64];
        return dt_error_set(DT_ERR_FORMAT, "%s: key '%s' is %s; it must be an integer in [0, %d]",
                            p, key, dt_json_what(v, w, sizeof w), max);
    }
    *out = (int)v->valuedouble;
    return DT_OK;
}

static dt_status get_float(const char *p, cJSON *o, const char *key, float def, float *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return DT_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) {
        char w[64];
        return dt_error_set(DT_ERR_FORMAT, "%s: key '%s' is %s; it must be a positive number", p,
                            key, dt_json_what(v, w, sizeof w));
    }
    *out = (float)v->valuedouble;
    return DT_OK;
}

static dt_status parse(const char *p, cJSON *o, dt_llama_config *c) {
    dt_status st;
    /* a key twice: cJSON would read the first, Python's json (transformers) the last */
    const char *dup;
    int r = dt_json_duplicate_key(o, &dup);
    if (r < 0) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", p);
    if (r)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: key '%s' appears twice; keep one (readers differ on which "
                            "counts)",
                            p, dup);
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "llama") != 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: model_type '%s' is not supported (expected 'llama')", p,
                            mt->valuestring);
    cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu") != 0)
        return dt_error_set(DT_ERR_FORMAT, "%s: hidden_act '%s' is not supported (expected 'silu')",
                            p, act->valuestring);
    const char *nobias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, nobias[i])))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: key '%s' is true: projections with biases are not supported "
                                "(dtrain's Llama has none)",
                                p, nobias[i]);
    if ((st = get_int(p, o, "vocab_size", -1, MAX_VOCAB, &c->vocab_size)) ||
        (st = get_int(p, o, "hidden_size", -1, MAX_HIDDEN, &c->hidden_size)) ||
        (st = get_int(p, o, "intermediate_size", -1, MAX_FFN, &c->intermediate_size)) ||
        (st = get_int(p, o, "num_hidden_layers", -1, MAX_LAYERS, &c->num_hidden_layers)) ||
        (st = get_int(p, o, "num_attention_heads", -1, MAX_HEADS, &c->num_attention_heads)))
        return st;
    if ((st = get_int(p, o, "num_key_value_heads", c->num_attention_heads, MAX_HEADS,
                      &c->num_key_value_heads)))
        return st;
    /* every size at least 1, each named (0 passes get_int's range) */
    const struct {
        const char *key;
        int v;
    } pos[] = {{"vocab_size", c->vocab_size},
               {"hidden_size", c->hidden_size},
               {"intermediate_size", c->intermediate_size},
               {"num_hidden_layers", c->num_hidden_layers},
               {"num_attention_heads", c->num_attention_heads},
               {"num_key_value_heads", c->num_key_value_heads}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return dt_error_set(DT_ERR_FORMAT, "%s: key '%s' is %d; it must be at least 1", p,
                                pos[i].key, pos[i].v);
    /* without head_dim, transformers takes hidden_size / num_attention_heads, which must divide */
    cJSON *hd = cJSON_GetObjectItemCaseSensitive(o, "head_dim");
    if ((!hd || cJSON_IsNull(hd)) && c->hidden_size % c->num_attention_heads)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: hidden_size %d is not a multiple of num_attention_heads %d (with "
                            "no head_dim key, each head has hidden_size / num_attention_heads "
                            "dimensions): change one of them or set head_dim",
                            p, c->hidden_size, c->num_attention_heads);
    int heads = c->num_attention_heads;
    if ((st = get_int(p, o, "head_dim", c->hidden_size / heads, MAX_HEADS, &c->head_dim)) ||
        (st = get_int(p, o, "max_position_embeddings", 2048, MAX_POSITIONS,
                      &c->max_position_embeddings)) ||
        (st = get_int(p, o, "bos_token_id", 1, MAX_ID, &c->bos_token_id)) ||
        (st = get_float(p, o, "rms_norm_eps", 1e-6f, &c->rms_norm_eps)))
        return st;
    c->tie_word_embeddings =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "tie_word_embeddings"));
    cJSON *eos = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id"), *e;
    cJSON *eos_list = cJSON_IsArray(eos) ? eos : NULL;
    c->n_eos = 0;
    cJSON_ArrayForEach(e, eos_list) {
        if (!cJSON_IsNumber(e) || c->n_eos == 4) continue;
        if (!(e->valuedouble >= 0 && e->valuedouble <= MAX_ID)) /* (int) of it would be UB */
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: key 'eos_token_id' holds %g, not a token id in [0, %d]", p,
                                e->valuedouble, MAX_ID);
        c->eos_token_ids[c->n_eos++] = (int)e->valuedouble;
    }
    if (cJSON_IsNumber(eos)) {
        if (!(eos->valuedouble >= 0 && eos->valuedouble <= MAX_ID))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: key 'eos_token_id' is %g, not a token id in [0, %d]", p,
                                eos->valuedouble, MAX_ID);
        c->eos_token_ids[c->n_eos++] = (int)eos->valuedouble;
    }
    /* transformers < 5 writes rope_theta + rope_scaling; 5.x rope_parameters holding both. */
    cJSON *rp = cJSON_GetObjectItemCaseSensitive(o, "rope_parameters");
    cJSON *rs = cJSON_IsObject(rp) ? rp : cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    if ((st = get_float(p, o, "rope_theta", 10000.0f, &c->rope_theta))) return st;
    if (cJSON_IsObject(rp) && (st = get_float(p, rp, "rope_theta", c->rope_theta, &c->rope_theta)))
        return st;
    c->rope_type = 0;
    if (cJSON_IsObject(rs)) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
        const char *ty = cJSON_IsString(t) ? t->valuestring : "default";
        if (!strcmp(ty, "llama3")) {
            c->rope_type = 1;
            if ((st = get_float(p, rs, "factor", 8.0f, &c->rope_factor)) ||
                (st = get_float(p, rs, "low_freq_factor", 1.0f, &c->rope_low_freq_factor)) ||
                (st = get_float(p, rs, "high_freq_factor", 4.0f, &c->rope_high_freq_factor)) ||
                (st = get_int(p, rs, "original_max_position_embeddings", 8192, MAX_POSITIONS,
                              &c->rope_original_max_position_embeddings)))
                return st;
        } else if (strcmp(ty, "default") != 0) {
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: rope_scaling's rope_type '%s' is not supported (default or "
                                "llama3)",
                                p, ty);
        }
    }
    if (c->head_dim <= 0 || c->head_dim % 2)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: head_dim is %d; it must be even and at least 2 (rotary "
                            "embeddings turn pairs of dimensions)",
                            p, c->head_dim);
    if ((int64_t)c->num_attention_heads * c->head_dim > MAX_FFN)
        return dt_error_set(DT_ERR_FORMAT, "%s: num_attention_heads x head_dim is %lld, over %d", p,
                            (long long)c->num_attention_heads * c->head_dim, MAX_FFN);
    if (c->num_attention_heads % c->num_key_value_heads)
        return dt_error_set(
            DT_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
            p, c->num_attention_heads, c->num_key_value_heads);
    /* Each size alone is bounded above; together they could still describe 2^61 parameters,
     * whose bytes (x 4 for the weights, x 16 with gradients and AdamW) overflow the int64 sizes
     * of the memory plan and the allocations. 2^50 is 2500 times Llama 3.1 405B. */
    int64_t np = dt_llama_param_count(c);
    if (np > MAX_PARAMS)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: the sizes give %lld parameters, more than the %lld (2^50) "
                            "accepted",
                            p, (long long)np, (long long)MAX_PARAMS);
    return DT_OK;
}

dt_status dt_llama_config_load(const char *path, dt_llama_config *c) {
    char p[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(p, sizeof p, "%s/config.json", path);
    else
        snprintf(p, sizeof p, "%s", path);
    size_t len = 0;
    uint8_t *txt = NULL;
    dt_status rs = dt_read_file_max(p, 0, MAX_CONFIG_BYTES, "a model config", &txt, &len);
    if (rs != DT_OK) return rs;
    cJSON *o = cJSON_ParseWithLength((const char *)txt, len);
    free(txt);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return dt_error_set(DT_ERR_FORMAT, "%s: not a JSON object", p);
    }
    memset(c, 0, sizeof *c);
    dt_status st = parse(p, o, c);
    cJSON_Delete(o);
    return st;
}

int64_t dt_llama_param_count(const dt_llama_config *c) {
    int64_t D = c->hidden_size, V = c->vocab_size, F = c->intermediate_size;
    int64_t q = (int64_t)c->num_attention_heads * c->head_dim;
    int64_t kv = (int64_t)c->num_key_value_heads * c->head_dim;
    int64_t layer = 2 * D + D * q + 2 * D * kv + q * D + 3 * D * F;
    return V * D + c->num_hidden_layers * layer + D + (c->tie_word_embeddings ? 0 : V * D);
}
