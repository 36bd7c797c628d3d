/* Reading a Hugging Face Llama folder's weights straight into dt_llm's f32 buffer (no graph, so
 * no gradient buffers: memory is the weights). Sources: model.safetensors, or the shards that
 * model.safetensors.index.json names; f32, bf16 and f16 tensors convert to f32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/generate.h"
#include "nn/st_index.h"

/* Tensors a checkpoint may carry that the model computes itself. */
static int ignorable(const char *name) {
    const char *suf = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suf);
    return n >= k && !strcmp(name + n - k, suf);
}

/* The config.json field behind dimension d of tensor i (dt_llama_tensor_name order), and its
 * value, for a message that says which number in config.json is wrong. */
static const char *config_field(const dt_llama_config *c, int i, int d, char *buf, size_t n) {
    int nl = c->num_hidden_layers * 9;
    if (i == 0 || i == 2 + nl) /* embed_tokens, lm_head [V, D] */
        snprintf(buf, n, d ? "hidden_size %d" : "vocab_size %d",
                 d ? c->hidden_size : c->vocab_size);
    else if (i == 1 + nl)
        snprintf(buf, n, "hidden_size %d", c->hidden_size);
    else {
        /* q k v o gate up down ln1 ln2: 'q' heads x head_dim, 'k' kv heads x head_dim, 'D', 'F' */
        static const char rows[] = "qkkDFFDDD", cols[] = "DDDqDDF";
        int s = (i - 1) % 9;
        char k = d ? cols[s] : rows[s];
        if (k == 'q')
            snprintf(buf, n, "num_attention_heads %d x head_dim %d", c->num_attention_heads,
                     c->head_dim);
        else if (k == 'k')
            snprintf(buf, n, "num_key_value_heads %d x head_dim %d", c->num_key_value_heads,
                     c->head_dim);
        else if (k == 'F')
            snprintf(buf, n, "intermediate_size %d", c->intermediate_size);
        else
            snprintf(buf, n, "hidden_size %d", c->hidden_size);
    }
    return buf;
}

/* Reads every tensor of the config (dt_llama_tensor_name order, packed) into dst; with dst NULL
 * only checks names, shapes and dtypes against the headers (dt_llama_weights_check). */
dt_status dt_llm_read_weights_(const char *dir, const dt_llama_config *c, float *dst);
dt_status dt_llm_read_weights_(const char *dir, const dt_llama_config *c, float *dst) {
    dt_st_sources s;
    dt_status st = dt_st_sources_open(dir, &s);
    int nt = dt_llama_tensor_count(c);
    char(*names)[128] = calloc((size_t)nt, sizeof *names);
    if (st == DT_OK && !names) st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", dir);
    for (int i = 0; i < nt && st == DT_OK; i++) {
        int64_t shape[2];
        int nd = dt_llama_tensor_name(c, i, names[i], sizeof names[i], shape);
        dt_tensor want, src;
        dt_tensor_init(&want, dst, DT_F32, nd, shape);
        int f = dt_st_sources_find(&s, names[i], &src);
        if (f < 0 && i > 0 && i <= c->num_hidden_layers * 9) {
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: missing tensor '%s': config.json's num_hidden_layers %d does "
                              "not match these weights",
                              s.n ? s.paths[0] : dir, names[i], c->num_hidden_layers);
        } else if (f < 0) {
            st = dt_error_set(DT_ERR_FORMAT, "%s: missing tensor '%s'", s.n ? s.paths[0] : dir,
                              names[i]);
        } else if (!dt_tensor_same_shape(&src, &want)) {
            char a[96], b[96], fl[96];
            int d = src.ndim == nd && src.shape[0] == shape[0] ? 1 : 0;
            st = dt_error_set(DT_ERR_SHAPE,
                              "config.json: %s gives tensor '%s' the shape %s, but %s holds it as "
                              "%s: config.json does not describe these weights",
                              config_field(c, i, d, fl, sizeof fl), names[i],
                              dt_shape_str(b, sizeof b, nd, shape), s.paths[f],
                              dt_shape_str(a, sizeof a, src.ndim, src.shape));
        } else if (src.dtype != DT_F32 && src.dtype != DT_BF16 && src.dtype != DT_F16) {
            st = dt_error_set(DT_ERR_DTYPE, "%s: tensor '%s' is %s, expected a float type",
                              s.paths[f], names[i], dt_dtype_name(src.dtype));
        } else if (dst) {
            st = dt_tensor_copy(&want, &src);
        }
        if (dst) dst += dt_tensor_numel(&want);
    }
    /* A tensor the model lacks means a different architecture: refuse rather than half-load. */
    for (int f = 0; f < s.n && st == DT_OK; f++)
        for (int k = 0; k < dt_st_count(s.files[f]) && st == DT_OK; k++) {
            const char *nm = dt_st_name(s.files[f], k);
            int known = ignorable(nm);
            for (int i = 0; i < nt && !known; i++) known = !strcmp(nm, names[i]);
            if (!known)
                st = dt_error_set(DT_ERR_FORMAT, "%s: tensor '%s' is not a parameter of the model",
                                  s.paths[f], nm);
        }
    free(names);
    dt_st_sources_close(&s);
    return st;
}

dt_status dt_llama_weights_check(const char *path, const dt_llama_config *c) {
    if (!path || !c) return dt_error_set(DT_ERR_INVALID, "weights check: path and config needed");
    return dt_llm_read_weights_(path, c, NULL);
}
