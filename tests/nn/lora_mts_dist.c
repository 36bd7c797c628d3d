/* LoRA's modules_to_save under the trainer and MPI (mpirun -np N): the tiny Llama of
 * examples/llama-tiny-fortunes.yaml (tied embeddings) with adapters on q/v and
 * lora.modules_to_save [embed_tokens, norm], 12 steps of SGD with momentum:
 *   1. the flat buffer holds exactly the adapters and the modules to save
 *      (dt_lora_param_count: r*(in+out) per adapter + the tied V x D matrix once + 9 norms), and
 *      training moves every one of them (the embedding too, although the base is bf16) while
 *      the frozen base stays bit-identical;
 *   2. ZeRO-2 (gradients and optimizer state sharded) gives plain data parallelism's parameters
 *      to bf16 resolution (the frozen base's GEMM rounds its inputs to bf16), on every rank;
 *   3. a ZeRO-2 run resumed from its step-6 checkpoint (parameters + sharded optimizer state)
 *      ends bit-identical to the uninterrupted run;
 *   4. the exported adapter holds the trained tied matrix under PEFT's two names
 *      (base_model.model.model.embed_tokens.weight and base_model.model.lm_head.weight) and every
 *      norm, equal to the trained parameters, and lists them in modules_to_save.
 * argv: DATA_DIR REPO_DIR; run in a scratch folder (writes runs-lora-mts/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "harness.h"

static dt_comm *world_comm; /* created first, so that MPI outlives every trainer */
static const char *data_dir, *repo_dir;

typedef struct run {
    float *init, *final; /* flat trainable parameters before and after training */
    void *frozen0, *frozen1;
    size_t n, nf;
    int64_t expect_n; /* dt_lora_param_count of the trainer's config */
    int n_saved;      /* trainable tensors that are not adapters */
    int saved_moved;  /* of them: changed by training */
} run;

static void *copy_of(const void *p, size_t n) {
    void *q = malloc(n ? n : 1);
    if (q && n) memcpy(q, p, n);
    return q;
}

/* The exported adapter against the trained graph (rank 0). */
static void check_export(dt_trainer *t) {
    char path[2048];
    snprintf(path, sizeof path, "%s/adapter/adapter_model.safetensors", dt_trainer_run_dir(t));
    dt_st_file *f;
    if (!CHECK(dt_st_open(path, &f) == DT_OK, "open %s: %s", path, dt_last_error())) return;
    dt_graph *g = dt_trainer_graph(t);
    int checked = 0;
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (pi->flags & DT_PARAM_FROZEN || strstr(pi->name, ".lora_")) continue;
        const dt_tensor *v = dt_graph_value(g, pi->id);
        for (int k = 0; k < 2; k++) { /* the tied matrix also as lm_head */
            char key[600];
            if (k && strcmp(pi->name, "model.embed_tokens.weight")) break;
            snprintf(key, sizeof key, "base_model.model.%s", k ? "lm_head.weight" : pi->name);
            dt_tensor s;
            if (CHECK(dt_st_get(f, key, &s) == DT_OK, "export: %s has '%s'", path, key))
                CHECK(s.dtype == DT_F32 && dt_tensor_same_shape(&s, v) &&
                          !memcmp(s.data, v->data, dt_tensor_nbytes(v)),
                      "export: '%s' is the trained parameter", key);
            checked++;
        }
    }
    CHECK(checked == 11, "export: %d module tensors (embed_tokens + lm_head + 9 norms)", checked);
    dt_st_close(f);
    /* adapter_config.json: the modules to save as PEFT names them, read back by dtrain */
    char dir[2048], base[2048];
    snprintf(dir, sizeof dir, "%s/adapter", dt_trainer_run_dir(t));
    snprintf(base, sizeof base, "%s/examples/llama-tiny", repo_dir);
    dt_llama_config c;
    CHECK_OK(dt_llama_config_load(base, &c));
    if (CHECK(dt_lora_config_load(dir, &c) == DT_OK, "export config: %s", dt_last_error()))
        CHECK(c.lora.modules_to_save == (DT_LORA_SAVE_EMBED | DT_LORA_SAVE_INPUT_NORM |
                                         DT_LORA_SAVE_POST_NORM | DT_LORA_SAVE_FINAL_NORM),
              "export config: modules_to_save read back as 0x%x", c.lora.modules_to_save);
}

/* Trains the configuration (world ranks); `extra`: more overrides (NULL-terminated). */
static run train(const char *run_name, const char *const *extra, int export_check) {
    run r = {0};
    char yaml[1024], tr[1200], rn[200];
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo_dir);
    snprintf(tr, sizeof tr, "data.train=%s/fortunes/train", data_dir);
    snprintf(rn, sizeof rn, "output.run_name=%s", run_name);
    const char *over[48] = {
        tr, rn, "data.val=", "data.seq_len=64", "data.batch=2", "dist.bucket_mb=0.25",
        "model.init=random", "lora.enabled=true", "lora.rank=4", "lora.targets=q_proj,v_proj",
        "lora.modules_to_save=[embed_tokens, norm]",
        /* SGD: AdamW divides tiny early gradients by their own size, which makes the bf16
         * rounding differences of another reduction order visible (test_train_dist.c) */
        "optim.name=sgd", "optim.momentum=0.9", "optim.lr=0.05", "optim.weight_decay=0",
        "optim.clip_norm=1", "train.steps=12", "schedule.warmup_steps=0", "train.threads=1",
        "output.dir=runs-lora-mts", "output.experiment=mts", "ckpt.async=false", "ckpt.keep_last=0",
        "ckpt.resume=never"};
    int k = 0;
    while (over[k]) k++;
    for (int i = 0; extra && extra[i]; i++) over[k++] = extra[i];
    dt_config *cfg;
    if (!CHECK(dt_config_from_args(yaml, k, (char **)over, &cfg) == DT_OK, "config: %s",
               dt_last_error()))
        return r;
    dt_trainer *t;
    dt_status st = dt_trainer_open(cfg, NULL, &t);
    dt_config_free(cfg);
    if (!CHECK(st == DT_OK, "trainer %s: %s", run_name, dt_last_error())) return r;
    dt_trainer_set_log(t, NULL);
    dt_graph *g = dt_trainer_graph(t);
    float *p = dt_graph_flat_param(g, &r.n);
    void *fz = dt_graph_flat_frozen(g, &r.nf);
    r.init = copy_of(p, r.n * 4), r.frozen0 = copy_of(fz, r.nf);
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) && !strstr(pi->name, ".lora_"))
            r.n_saved++;
    }
    dt_llama_config c;
    char base[1100];
    snprintf(base, sizeof base, "%s/examples/llama-tiny", repo_dir);
    if (dt_llama_config_load(base, &c) == DT_OK) {
        c.lora = (dt_lora_config){.rank = 4,
                                  .alpha = 16,
                                  .targets = DT_LORA_Q | DT_LORA_V,
                                  .modules_to_save = dt_lora_module_bits("embed_tokens") |
                                                     dt_lora_module_bits("norm")};
        r.expect_n = dt_lora_param_count(&c);
    }
    CHECK_OK(dt_trainer_run(t));
    r.final = copy_of(dt_graph_flat_param(g, NULL), r.n * 4);
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) && !strstr(pi->name, ".lora_"))
            r.saved_moved += memcmp(r.init + pi->offset, r.final + pi->offset, pi->numel * 4) != 0;
    }
    r.frozen1 = copy_of(dt_graph_flat_frozen(g, NULL), r.nf);
    if (export_check && dt_comm_rank(world_comm) == 0) check_export(t);
    dt_trainer_close(t);
    return r;
}

static void drop(run *r) {
    free(r->init), free(r->final), free(r->frozen0), free(r->frozen1);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    data_dir = argv[1], repo_dir = argv[2];
    if (dt_comm_open("mpi", NULL, NULL, &world_comm) != DT_OK) {
        CHECK(0, "comm: %s", dt_last_error());
        return dt_test_finish("lora_mts_dist");
    }
    int rank = dt_comm_rank(world_comm);

    /* 1. what trains */
    run z0 = train("zero0", NULL, 0);
    if (!z0.final) return dt_test_finish("lora_mts_dist");
    CHECK((int64_t)z0.n == z0.expect_n, "flat buffer %zu = dt_lora_param_count %lld", z0.n,
          (long long)z0.expect_n);
    CHECK(z0.n_saved == 10, "%d modules to save (tied embedding + 9 norms)", z0.n_saved);
    CHECK(z0.nf > 0 && !memcmp(z0.frozen0, z0.frozen1, z0.nf),
          "the frozen base (%zu bytes) is bit-identical after training", z0.nf);
    CHECK(z0.saved_moved == z0.n_saved, "training moved %d of the %d modules to save",
          z0.saved_moved, z0.n_saved);
    size_t moved = 0;
    for (size_t i = 0; i < z0.n; i++) moved += z0.init[i] != z0.final[i];
    CHECK(moved > z0.n / 2, "training moved %zu of %zu trainable values", moved, z0.n);
    dt_check_same_on_all_ranks(world_comm, "zero 0", z0.final, z0.n);

    /* 2. ZeRO-2 */
    static const char *const zero2[] = {"dist.zero_stage=2", "ckpt.every_steps=6", NULL};
    run z2 = train("zero2", zero2, 1);
    dt_check_same_on_all_ranks(world_comm, "zero 2", z2.final, z2.n);
    if (z2.final && CHECK(z2.n == z0.n, "zero 2: same parameter count")) {
        dt_check_close("modules_to_save + adapters: ZeRO-2 vs plain data parallelism", z2.final,
                       z0.final, (int64_t)z0.n, 1e-4, 1.0 / 128);
        if (rank == 0)
            printf("  %zu trainable (%d modules to save): ZeRO-2 vs DDP max |diff| %.3g\n", z0.n,
                   z0.n_saved, max_diff(z0.final, z2.final, z0.n));
    }

    /* 3. resume the ZeRO-2 run from its step-6 checkpoint */
    static const char *const resume[] = {
        "dist.zero_stage=2", "ckpt.resume=runs-lora-mts/mts/zero2/checkpoints/step-000000006",
        NULL};
    run rz = train("resumed", resume, 0);
    if (z2.final && rz.final && CHECK(rz.n == z2.n, "resumed: same parameter count"))
        CHECK(!memcmp(rz.final, z2.final, rz.n * 4),
              "resumed from step 6 == uninterrupted, bit for bit (max |diff| %.3g)",
              max_diff(rz.final, z2.final, rz.n));
    drop(&z0), drop(&z2), drop(&rz);
    int rc = dt_test_finish("lora_mts_dist");
    dt_comm_close(world_comm);
    return rc;
}
