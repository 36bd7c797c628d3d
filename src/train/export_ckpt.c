/* Exporting the model of a checkpoint folder without training (`dtrain models export`):
 * the checkpoint's own config (trainer_state.json "config") rebuilds the Llama forward-only,
 * its model.safetensors fills it, and the trainer's export writers produce the folder: a
 * Hugging Face folder (dt_llama_save_hf, with the dataset's tokenizer), a PEFT adapter
 * (dt_lora_save) or a merged model (dt_lora_merge of that adapter into its base). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/file.h"
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "dtrain/generate.h"
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "train/train_impl.h"

static const char *const ignore[] = {"num_batches_tracked", "rotary_emb.inv_freq", NULL};

/* A path of the checkpoint's config as it is, when it exists from here (absolute, or relative to
 * the working directory), else the hint (where the run found it); "" when neither exists. */
static void existing(const char *p, const char *hint, char *out, size_t n) {
    struct stat sb;
    const char *use = p && p[0] && stat(p, &sb) == 0            ? p
                      : hint && hint[0] && stat(hint, &sb) == 0 ? hint
                                                                : "";
    snprintf(out, n, "%s", use);
}

/* The trainable parameters of a LoRA graph (adapters, modules to save) from the checkpoint's
 * model file: they are all it holds (docs/checkpoints.md), f32 under the graph's names. */
static dt_status load_trainable(dt_graph *g, const char *file) {
    dt_st_file *f;
    dt_status st = dt_st_open(file, &f);
    if (st != DT_OK) return st;
    float *flat = dt_graph_flat_param(g, NULL);
    for (int i = 0; i < dt_graph_param_count(g) && st == DT_OK; i++) {
        const dt_param_info *p = dt_graph_param_info(g, i);
        if (p->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        dt_tensor t;
        if ((st = dt_st_get(f, p->name, &t)) != DT_OK) break;
        int64_t n = 1;
        for (int d = 0; d < t.ndim; d++) n *= t.shape[d];
        if (t.dtype != DT_F32 || n != (int64_t)p->numel)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: tensor %s: %s of %lld elements, expected f32 of %zu", file,
                              p->name, dt_dtype_name(t.dtype), (long long)n, p->numel);
        else
            memcpy(flat + p->offset, t.data, p->numel * sizeof(float));
    }
    dt_st_close(f);
    return st;
}

/* The forward-only graph of the checkpoint's model, its weights loaded. */
static dt_status build(const char *ckpt_dir, const char *hf, dt_llama_config *lc, dt_graph **out) {
    *out = NULL;
    dt_graph *g = dt_graph_init();
    if (!g) return dt_error_set(DT_ERR_NOMEM, "export: out of memory");
    int ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){1, 1}, 0);
    int logits = ids >= 0 ? dt_llama_build(g, lc, ids) : -1;
    int loss = logits >= 0 ? dt_sum(g, logits) : -1;
    dt_graph_opts o = {.no_backward = 1};
    char model[PATH_MAX];
    snprintf(model, sizeof model, "%s/%s", ckpt_dir, DT_CKPT_MODEL);
    dt_status st = loss < 0 ? DT_ERR_INVALID : dt_graph_compile(g, loss, &o);
    if (st == DT_OK && lc->lora.rank > 0) {
        /* the frozen base from its files, as the trainer loads it; then the trained part */
        st = dt_model_load_base(g, hf, ignore);
        if (st == DT_OK) st = load_trainable(g, model);
    } else if (st == DT_OK) {
        st = dt_model_load(g, model, ignore);
    }
    if (st != DT_OK) {
        dt_graph_free(g);
        return st;
    }
    *out = g;
    return DT_OK;
}

/* The checkpoint's config, loaded through a file in `tmp` (the loader reads files). */
static dt_status load_config(const char *yaml, const char *tmp, dt_config **cfg) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/config.yaml", tmp);
    dt_status st = dt_write_file(p, yaml, strlen(yaml));
    return st == DT_OK ? dt_config_load(p, cfg) : st;
}

dt_status dt_trainer_export_checkpoint(const char *ckpt_dir, dt_export_opts *o, const char *out_dir,
                                       char *note, size_t note_n) {
    if (note && note_n) note[0] = '\0';
    if (!ckpt_dir || !out_dir || !out_dir[0])
        return dt_error_set(DT_ERR_INVALID, "export: a checkpoint and an output folder are needed");
    char sp[PATH_MAX];
    snprintf(sp, sizeof sp, "%s/%s", ckpt_dir, DT_CKPT_STATE);
    uint8_t *text = NULL;
    size_t len = 0;
    dt_status st = dt_read_file_max(sp, 0, DT_MAX_META_BYTES, DT_CKPT_STATE, &text, &len);
    dt_ckpt_state cs;
    dt_ckpt_state_init(&cs);
    if (st == DT_OK) st = dt_ckpt_state_decode((const char *)text, sp, &cs);
    free(text);
    if (st == DT_OK && (!cs.config || !cs.config[0]))
        st = dt_error_set(DT_ERR_FORMAT, "%s: no \"config\": cannot tell the model", sp);
    char *tmp = st == DT_OK ? dt_temp_dir_for(out_dir) : NULL;
    if (st == DT_OK && !tmp) st = DT_ERR_IO;
    dt_config *cfg = NULL;
    if (st == DT_OK) st = load_config(cs.config, tmp, &cfg);
    const dt_config_values *v = cfg ? dt_config_get_values(cfg) : NULL;
    if (st == DT_OK && v->model.kind != DT_CFG_MODEL_LLAMA)
        st = dt_error_set(DT_ERR_INVALID,
                          "%s: not a Llama checkpoint: its %s is already the model's state dict "
                          "(torchvision names)",
                          ckpt_dir, DT_CKPT_MODEL);
    char hf[PATH_MAX] = "", data[PATH_MAX] = "";
    if (st == DT_OK) {
        if (o && o->base && o->base[0])
            existing(o->base, NULL, hf, sizeof hf);
        else
            existing(v->model.hf_path, o ? o->base_hint : NULL, hf, sizeof hf);
        /* a dataset in an object store is found by its URL from anywhere (its tokenizer is
         * fetched from beside the manifest, checked against its xxh3) */
        if (!strncmp(v->data.train, "s3://", 5))
            snprintf(data, sizeof data, "%s", v->data.train);
        else
            existing(v->data.train, o ? o->data_hint : NULL, data, sizeof data);
        if (!hf[0])
            st = dt_error_set(DT_ERR_NOTFOUND,
                              "%s: model.hf_path '%s' of the checkpoint's config is not found "
                              "from here: give the model's folder (--base DIR)",
                              ckpt_dir, o && o->base && o->base[0] ? o->base : v->model.hf_path);
    }
    dt_llama_config lc;
    memset(&lc, 0, sizeof lc);
    if (st == DT_OK) st = dt_llama_config_load(hf, &lc);
    if (st == DT_OK && v->lora.enabled) st = dt_train_lora_config(v, &lc.lora);
    const char *fmt = o && o->format && o->format[0] ? o->format : lc.lora.rank ? "peft" : "hf";
    if (st == DT_OK && lc.lora.rank > 0 && strcmp(fmt, "peft") && strcmp(fmt, "merged"))
        st = dt_error_set(DT_ERR_INVALID,
                          "%s: a LoRA checkpoint exports as peft (the adapter) or merged (the "
                          "base with the adapter folded in), not %s",
                          ckpt_dir, fmt);
    if (st == DT_OK && !lc.lora.rank && strcmp(fmt, "hf"))
        st = dt_error_set(DT_ERR_INVALID,
                          "%s: --format %s needs a LoRA checkpoint; this one is a whole model "
                          "(--format hf)",
                          ckpt_dir, fmt);
    if (o) snprintf(o->written, sizeof o->written, "%s", fmt);
    dt_graph *g = NULL;
    if (st == DT_OK) st = build(ckpt_dir, hf, &lc, &g);
    if (st == DT_OK && !strcmp(fmt, "hf")) {
        st = dt_llama_save_hf(g, &lc, out_dir, (size_t)4 << 30);
    } else if (st == DT_OK && !strcmp(fmt, "peft")) {
        st = dt_lora_save(g, &lc, out_dir, hf);
    } else if (st == DT_OK) { /* merged: the adapter first, then the merge writes the folder */
        char ad[PATH_MAX];
        snprintf(ad, sizeof ad, "%s/adapter", tmp);
        st = dt_lora_save(g, &lc, ad, hf);
        if (st == DT_OK) st = dt_lora_merge(hf, ad, out_dir);
    }
    /* the tokenizer the data was made with, as dt_trainer_export adds it */
    if (st == DT_OK && strcmp(fmt, "peft")) {
        int copied = 0;
        if (data[0]) st = dt_dataset_tokenizer_export(data, out_dir, &copied);
        if (st == DT_OK && !copied && note)
            snprintf(note, note_n, "no tokenizer added (data.train %s %s)", v->data.train,
                     data[0] ? "has none to give" : "is not found from here");
    }
    dt_graph_free(g);
    dt_config_free(cfg);
    dt_ckpt_state_free(&cs);
    if (tmp) dt_remove_tree(tmp);
    free(tmp);
    return st;
}
