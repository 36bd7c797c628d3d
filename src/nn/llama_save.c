/* A Llama written as a Hugging Face folder (config.json + safetensors, sharded when large) that
 * transformers' LlamaForCausalLM.from_pretrained loads, and the Hugging Face tensor names.
 *
 * Atomicity: everything is written into "<dir>.tmp-XXXXXX" beside dir (same file system), then
 * renamed into place. An existing dir is swapped out the same way and its files that are not
 * model files (tokenizer, generation config, ...) are moved into the new folder; its stale
 * weights are deleted. A failure before the rename leaves dir as it was. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/generate.h"
#include "dtrain/safetensors.h"
#include "core/fsmode.h"
#include "core/file.h"

#define PATH_LEN 4096

/* ---------------------------------------------------------------- tensor names */

enum { PER_LAYER = 9 };

int dt_llama_tensor_count(const dt_llama_config *c) {
    return 1 + c->num_hidden_layers * PER_LAYER + 1 + (c->tie_word_embeddings ? 0 : 1);
}

int dt_llama_tensor_name(const dt_llama_config *c, int i, char *name, size_t len, int64_t *shape) {
    int64_t D = c->hidden_size, V = c->vocab_size, F = c->intermediate_size;
    int64_t q = (int64_t)c->num_attention_heads * c->head_dim;
    int64_t kv = (int64_t)c->num_key_value_heads * c->head_dim;
    int n = dt_llama_tensor_count(c);
    if (i < 0 || i >= n) return 0;
    if (i == 0) {
        snprintf(name, len, "model.embed_tokens.weight");
        shape[0] = V, shape[1] = D;
        return 2;
    }
    int nl = c->num_hidden_layers * PER_LAYER;
    if (i == 1 + nl) {
        snprintf(name, len, "model.norm.weight");
        shape[0] = D;
        return 1;
    }
    if (i == 2 + nl) {
        snprintf(name, len, "lm_head.weight");
        shape[0] = V, shape[1] = D;
        return 2;
    }
    /* Per layer, in the module order of transformers' state dict. */
    static const char *const sub[PER_LAYER] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
        "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
    const int64_t rows[PER_LAYER] = {q, kv, kv, D, F, F, D, D, D};
    const int64_t cols[PER_LAYER] = {D, D, D, q, D, D, F, 0, 0};
    int l = (i - 1) / PER_LAYER, s = (i - 1) % PER_LAYER;
    snprintf(name, len, "model.layers.%d.%s", l, sub[s]);
    shape[0] = rows[s], shape[1] = cols[s];
    return cols[s] ? 2 : 1;
}

/* ---------------------------------------------------------------- config.json */

/* A float as the shortest decimal that reads back to the same f32 (1e-05, not
 * 9.99999974737875e-06), always with a '.' or exponent so Python reads a float. */
static cJSON *json_float(float f) {
    char b[48];
    for (int p = 6; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double)f);
        if (strtof(b, NULL) == f) break;
    }
    if (!strpbrk(b, ".eEn")) strcat(b, ".0");
    return cJSON_CreateRaw(b);
}

static cJSON *rope_object(const dt_llama_config *c, int with_theta) {
    cJSON *r = cJSON_CreateObject();
    if (with_theta) cJSON_AddItemToObject(r, "rope_theta", json_float(c->rope_theta));
    if (c->rope_type != 1) {
        cJSON_AddStringToObject(r, "rope_type", "default");
        return r;
    }
    cJSON_AddStringToObject(r, "rope_type", "llama3");
    cJSON_AddItemToObject(r, "factor", json_float(c->rope_factor));
    cJSON_AddItemToObject(r, "low_freq_factor", json_float(c->rope_low_freq_factor));
    cJSON_AddItemToObject(r, "high_freq_factor", json_float(c->rope_high_freq_factor));
    cJSON_AddNumberToObject(r, "original_max_position_embeddings",
                            c->rope_original_max_position_embeddings);
    return r;
}

/* The keys transformers 4.x and 5.x need: rope as the legacy rope_theta + rope_scaling (which
 * 5.x converts, and prefers over rope_parameters) and as 5.x's rope_parameters. */
static char *config_json(const dt_llama_config *c, const char *dtype) {
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(o, "model_type", "llama");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->num_key_value_heads);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddItemToObject(o, "rms_norm_eps", json_float(c->rms_norm_eps));
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddFalseToObject(o, "attention_bias");
    cJSON_AddFalseToObject(o, "mlp_bias");
    cJSON_AddItemToObject(o, "attention_dropout", cJSON_CreateRaw("0.0"));
    cJSON_AddItemToObject(o, "initializer_range", cJSON_CreateRaw("0.02"));
    cJSON_AddNumberToObject(o, "pretraining_tp", 1);
    cJSON_AddItemToObject(o, "rope_theta", json_float(c->rope_theta));
    if (c->rope_type == 1)
        cJSON_AddItemToObject(o, "rope_scaling", rope_object(c, 0));
    else
        cJSON_AddNullToObject(o, "rope_scaling");
    cJSON_AddItemToObject(o, "rope_parameters", rope_object(c, 1));
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddNumberToObject(o, "bos_token_id", c->bos_token_id);
    if (c->n_eos == 1) {
        cJSON_AddNumberToObject(o, "eos_token_id", c->eos_token_ids[0]);
    } else if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(o, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++)
            cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos_token_ids[i]));
    } else {
        cJSON_AddNullToObject(o, "eos_token_id");
    }
    cJSON_AddTrueToObject(o, "use_cache");
    cJSON_AddStringToObject(o, "torch_dtype", dtype); /* transformers 4.x */
    cJSON_AddStringToObject(o, "dtype", dtype);       /* transformers 5.x */
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/* ---------------------------------------------------------------- files */

/* out = a/b; out holds OUT_LEN. */
#define OUT_LEN (2 * PATH_LEN) /* a folder of PATH_LEN plus a file name always fits */
static void join(char *out, const char *a, const char *b) {
    snprintf(out, OUT_LEN, "%s/%s", a, b);
}

/* text and a newline into path (in the temporary folder), fsynced; a full disk is named with
 * its file system (dt_write_file) */
static dt_status write_text(const char *path, const char *text) {
    size_t n = strlen(text);
    char *b = malloc(n + 1);
    if (!b) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    memcpy(b, text, n);
    b[n] = '\n';
    dt_status st = dt_write_file(path, b, n + 1);
    free(b);
    return st;
}

/* Weights of an older model in a folder being replaced. */
static int is_model_file(const char *n) {
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors") ||
           !strcmp(n, "model.safetensors.index.json") ||
           !fnmatch("model-*-of-*.safetensors", n, 0) || !fnmatch("pytorch_model*.bin", n, 0) ||
           !strcmp(n, "pytorch_model.bin.index.json");
}

/* Removes the regular files of a folder we created, then the folder (best effort). */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[OUT_LEN];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        join(p, dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* dir exists: swap the new folder in, then carry the old folder's other files over. */
static dt_status replace_dir(const char *dir, const char *tmp) {
    char old[PATH_LEN], a[OUT_LEN], b[OUT_LEN];
    snprintf(old, sizeof old, "%s.old-XXXXXX", dir);
    if (!mkdtemp(old))
        return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", old, strerror(errno));
    if (rename(dir, old) != 0) { /* an empty directory target is replaced */
        dt_status st = dt_error_set(DT_ERR_IO, "save %s: cannot move the old folder aside: %s", dir,
                                    strerror(errno));
        rmdir(old);
        return st;
    }
    if (rename(tmp, dir) != 0) {
        dt_status st = dt_error_set(DT_ERR_IO, "save %s: cannot rename %s into place: %s", dir, tmp,
                                    strerror(errno));
        rename(old, dir);
        return st;
    }
    DIR *d = opendir(old);
    struct dirent *e;
    struct stat sb;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        join(a, old, e->d_name);
        join(b, dir, e->d_name);
        if (is_model_file(e->d_name) || stat(b, &sb) == 0)
            unlink(a);
        else
            rename(a, b); /* tokenizer files and the like stay with the model */
    }
    if (d) closedir(d);
    rmdir(old);
    return DT_OK;
}

/* ---------------------------------------------------------------- save */

typedef struct entry {
    char name[128];
    dt_tensor t;
    size_t bytes;
    int shard;
} entry;

/* Finds every tensor of the config in the graph, checked by shape and dtype. */
static dt_status collect(dt_graph *g, const dt_llama_config *c, const char *dir, entry *e, int n) {
    for (int i = 0; i < n; i++) {
        int64_t shape[2];
        int nd = dt_llama_tensor_name(c, i, e[i].name, sizeof e[i].name, shape);
        int id = dt_graph_find(g, e[i].name);
        const dt_tensor *v = id >= 0 ? dt_graph_value(g, id) : NULL;
        if (!v || !v->data)
            return dt_error_set(DT_ERR_STATE, "save %s: the graph has no compiled tensor '%s'", dir,
                                e[i].name);
        dt_tensor want;
        dt_tensor_init(&want, NULL, v->dtype, nd, shape);
        if (!dt_tensor_same_shape(&want, v) || (v->dtype != DT_F32 && v->dtype != DT_BF16)) {
            char s1[96], s2[96];
            return dt_error_set(DT_ERR_SHAPE, "save %s: tensor '%s' is %s %s, the config needs %s",
                                dir, e[i].name, dt_dtype_name(v->dtype),
                                dt_shape_str(s1, sizeof s1, v->ndim, v->shape),
                                dt_shape_str(s2, sizeof s2, nd, shape));
        }
        e[i].t = *v;
        e[i].bytes = dt_tensor_nbytes(v);
    }
    return DT_OK;
}

/* Greedy shards in tensor order; a tensor larger than the limit gets a shard of its own. */
static int assign_shards(entry *e, int n, size_t max_bytes) {
    int shard = 0;
    size_t cur = 0;
    for (int i = 0; i < n; i++) {
        if (max_bytes && cur > 0 && cur + e[i].bytes > max_bytes) shard++, cur = 0;
        e[i].shard = shard;
        cur += e[i].bytes;
    }
    return shard + 1;
}

static void shard_name(char *b, size_t len, int s, int ns) {
    if (ns == 1)
        snprintf(b, len, "model.safetensors");
    else
        snprintf(b, len, "model-%05d-of-%05d.safetensors", s + 1, ns);
}

static dt_status write_folder(const char *tmp, const dt_llama_config *c, entry *e, int n, int ns) {
    char p[OUT_LEN], f[64];
    int all_bf16 = 1;
    for (int i = 0; i < n; i++) all_bf16 &= e[i].t.dtype == DT_BF16;
    char *cfg = config_json(c, all_bf16 ? "bfloat16" : "float32");
    if (!cfg) return dt_error_set(DT_ERR_NOMEM, "save %s: out of memory", tmp);
    join(p, tmp, "config.json");
    dt_status st = write_text(p, cfg);
    cJSON_free(cfg);
    dt_st_entry *se = calloc((size_t)n, sizeof *se);
    if (!se) return dt_error_set(DT_ERR_NOMEM, "save %s: out of memory", tmp);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    for (int s = 0; s < ns && st == DT_OK; s++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (e[i].shard == s) se[k].name = e[i].name, se[k++].t = &e[i].t;
        shard_name(f, sizeof f, s, ns);
        join(p, tmp, f);
        st = dt_st_save(p, se, k, mk, mv, 1);
    }
    free(se);
    if (st != DT_OK || ns == 1) return st;
    /* {"metadata": {"total_size": bytes}, "weight_map": {name: file}} */
    cJSON *o = cJSON_CreateObject();
    size_t total = 0;
    for (int i = 0; i < n; i++) total += e[i].bytes;
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "metadata"), "total_size", (double)total);
    cJSON *wm = cJSON_AddObjectToObject(o, "weight_map");
    for (int i = 0; i < n; i++) {
        shard_name(f, sizeof f, e[i].shard, ns);
        cJSON_AddStringToObject(wm, e[i].name, f);
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    if (!txt) return dt_error_set(DT_ERR_NOMEM, "save %s: out of memory", tmp);
    join(p, tmp, "model.safetensors.index.json");
    st = write_text(p, txt);
    cJSON_free(txt);
    return st;
}

/* The message of a failed write (a full disk: core/fsinfo.h names the file system) says what
 * became of dir: the temporary folder is gone, dir was not touched. */
static dt_status left_as_it_was(dt_status st, const char *dir, int exists) {
    char m[1024];
    snprintf(m, sizeof m, "%s", dt_last_error());
    return dt_error_set(st, "save %s: %s; nothing was exported (%s)", dir, m,
                        exists ? "the folder is left as it was" : "no folder was made");
}

dt_status dt_llama_save_hf(dt_graph *g, const dt_llama_config *c, const char *dir_in,
                           size_t max_shard_bytes) {
    if (!g || !c || !dir_in || !*dir_in)
        return dt_error_set(DT_ERR_INVALID, "llama save: graph, config and folder are required");
    if (strlen(dir_in) > PATH_LEN - 64)
        return dt_error_set(DT_ERR_INVALID, "llama save: folder name too long");
    /* "out/" -> "out": the temporary folder must be a sibling, not a child */
    char dir[PATH_LEN];
    snprintf(dir, sizeof dir, "%s", dir_in);
    for (size_t k = strlen(dir); k > 1 && dir[k - 1] == '/'; k--) dir[k - 1] = '\0';
    struct stat sb;
    int exists = stat(dir, &sb) == 0;
    if (exists && !S_ISDIR(sb.st_mode))
        return dt_error_set(DT_ERR_IO, "save %s: exists and is not a folder", dir);
    int n = dt_llama_tensor_count(c);
    entry *e = calloc((size_t)n, sizeof *e);
    if (!e) return dt_error_set(DT_ERR_NOMEM, "save %s: out of memory", dir);
    dt_status st = collect(g, c, dir, e, n);
    char tmp[PATH_LEN + 16];
    if (st == DT_OK) {
        snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", dir);
        mode_t mask = umask(0);
        umask(mask);
        if (!mkdtemp(tmp))
            st =
                dt_error_set(DT_ERR_IO, "save %s: cannot create %s: %s", dir, tmp, strerror(errno));
        else if (chmod(tmp, DT_DIR_MODE & ~mask) != 0) /* mkdtemp makes it 0700 */
            st = dt_error_set(DT_ERR_IO, "save %s: chmod %s: %s", dir, tmp, strerror(errno)),
            remove_tree(tmp);
        else if ((st = write_folder(tmp, c, e, n, assign_shards(e, n, max_shard_bytes))) != DT_OK)
            remove_tree(tmp), st = left_as_it_was(st, dir, exists);
        else if (!exists && rename(tmp, dir) != 0) {
            st = dt_error_set(DT_ERR_IO, "save %s: cannot rename %s into place: %s", dir, tmp,
                              strerror(errno));
            remove_tree(tmp);
        } else if (exists && (st = replace_dir(dir, tmp)) != DT_OK) {
            remove_tree(tmp);
        }
    }
    free(e);
    return st;
}
