/* Restores read each checkpoint file once, in chunks (dt_store_get_stream), hashing it and
 * copying its tensors into place as the chunks arrive (src/train/ckpt.c). With chunks far smaller
 * than the safetensors header (DT_STORE_READ_CHUNK: 3 bytes splits even the header's 8-byte
 * length; 509 bytes: a header over several chunks, tensors split at odd places) a resume must
 * give exactly what the checkpoint holds:
 *   - a tiny Llama (1 layer, 16 wide) trains 4 steps and saves step 4;
 *   - resumed from it (ckpt.resume=DIR) with chunks of 3, 8, 509, 4096 bytes and the default:
 *     the step, every trainable parameter (model.safetensors, by name) and both AdamW moments
 *     (optim-00000-of-00001.safetensors) bit for bit, the moments not all zero;
 *   - damaged copies, 3-byte chunks: a flipped byte inside the header is reported as a checksum
 *     mismatch naming model.safetensors (the size and checksum are judged before the header,
 *     as when files were read whole); a header whose tensor was renamed, with trainer_state.json
 *     updated to its new checksum, fails naming the missing tensor.
 *   test_restore_stream DATA_DIR REPO */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Copies checkpoint directory src to dst (its three files). */
static int copy_ckpt(const char *src, const char *dst) {
    const char *files[] = {"model.safetensors", "optim-00000-of-00001.safetensors",
                           "trainer_state.json"};
    mkdir(dst, 0755);
    for (int i = 0; i < 3; i++) {
        char a[4200], b[4200];
        size_t n;
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", dst, files[i]);
        char *d = dt_test_read_file(a, &n);
        int ok = d && write_file(b, d, n);
        free(d);
        if (!ok) return 0;
    }
    return 1;
}

static const char *const *g_base;
static int g_nbase;

/* A trainer from the example config with the base overrides and `extra` ones (NULL-ended). */
static dt_status make_trainer(const char *repo, const char *const *extra, dt_trainer **t) {
    char *ov[64];
    int n = 0;
    for (int i = 0; i < g_nbase; i++) ov[n++] = (char *)g_base[i];
    for (; *extra; extra++) ov[n++] = (char *)*extra;
    char yaml[4200];
    snprintf(yaml, sizeof yaml, "%s/examples/llama-tiny-fortunes.yaml", repo);
    dt_config *cfg = NULL;
    *t = NULL;
    dt_status st = dt_config_from_args(yaml, n, ov, &cfg);
    if (st == DT_OK) st = dt_trainer_open(cfg, NULL, t);
    dt_config_free(cfg);
    return st;
}

/* Parameters == model.safetensors and the AdamW moments == the optimizer file, bit for bit. */
static void check_restored(dt_trainer *t, const char *ck, const char *what) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", ck);
    dt_st_file *f = NULL;
    CHECK_OK(dt_st_open(path, &f));
    if (!f) return;
    dt_graph *g = dt_trainer_graph(t);
    int np = dt_graph_param_count(g), trainable = 0, same = 0;
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (pi->flags & DT_PARAM_FROZEN) continue;
        trainable++;
        dt_tensor src;
        if (dt_st_get(f, pi->name, &src) != DT_OK) {
            CHECK(0, "%s: %s", what, dt_last_error());
            continue;
        }
        const dt_tensor *v = dt_graph_value(g, pi->id);
        same += (size_t)dt_tensor_numel(&src) == pi->numel &&
                !memcmp(v->data, src.data, pi->numel * sizeof(float));
    }
    CHECK(same == trainable && trainable > 0, "%s: %d of %d parameters restored bit for bit", what,
          same, trainable);
    dt_st_close(f);

    snprintf(path, sizeof path, "%s/optim-00000-of-00001.safetensors", ck);
    CHECK_OK(dt_st_open(path, &f));
    if (!f) return;
    dt_optim_state os;
    CHECK_OK(dt_optim_get_state(dt_trainer_optim(t), &os));
    CHECK(os.n_buffers == 2 && os.lo == 0 && os.hi == os.n_total, "%s: expected AdamW, one rank",
          what);
    for (int b = 0; b < os.n_buffers; b++) {
        dt_tensor src;
        if (dt_st_get(f, os.names[b], &src) != DT_OK) {
            CHECK(0, "%s: %s", what, dt_last_error());
            continue;
        }
        size_t n = os.hi - os.lo;
        int nonzero = 0;
        for (size_t i = 0; i < n && !nonzero; i++) nonzero = os.buffers[b][i] != 0;
        CHECK((size_t)dt_tensor_numel(&src) == n &&
                  !memcmp(os.buffers[b], src.data, n * sizeof(float)) && nonzero,
              "%s: %s differs from the checkpoint (or is all zero)", what, os.names[b]);
    }
    CHECK(os.step == 4, "%s: optimizer step %lld, expected 4", what, (long long)os.step);
    dt_st_close(f);
}

/* Resumes from checkpoint directory ck with DT_STORE_READ_CHUNK=chunk (NULL: the default).
 * Returns the trainer's status; on success checks what it restored. */
static dt_status resume(const char *repo, const char *ck, const char *chunk, const char *what) {
    if (chunk)
        setenv("DT_STORE_READ_CHUNK", chunk, 1);
    else
        unsetenv("DT_STORE_READ_CHUNK");
    char r[4300];
    snprintf(r, sizeof r, "ckpt.resume=%s", ck);
    const char *extra[] = {r, "ckpt.every_steps=0", "train.steps=4", NULL};
    dt_trainer *t;
    dt_status st = make_trainer(repo, extra, &t);
    unsetenv("DT_STORE_READ_CHUNK");
    if (st != DT_OK) return st;
    CHECK(dt_trainer_progress(t)->step == 4, "%s: resumed at step %lld, expected 4", what,
          (long long)dt_trainer_progress(t)->step);
    check_restored(t, ck, what);
    dt_trainer_close(t);
    return DT_OK;
}

/* The header's size (its 8-byte length included) of a safetensors file in memory. */
static size_t header_size(const char *d, size_t n) {
    uint64_t h = 0;
    if (n >= 8) memcpy(&h, d, 8);
    return n >= 8 && h <= n - 8 ? 8 + (size_t)h : 0;
}

int main(int argc, char **argv) {
    const char *name = "test_restore_stream";
    if (argc < 3) {
        fprintf(stderr, "usage: test_restore_stream DATA_DIR REPO\n");
        return 2;
    }
    const char *data = argv[1], *repo = argv[2];
    char tmp[] = "/tmp/dt-restore-XXXXXX";
    if (!CHECK(mkdtemp(tmp) != NULL, "mkdtemp")) return dt_test_finish(name);
    /* a Llama small enough for 3-byte chunks: 1 layer, 16 wide (the tokenizer's 512 tokens) */
    char mdir[256], path[1024];
    snprintf(mdir, sizeof mdir, "%s/model", tmp);
    mkdir(mdir, 0755);
    snprintf(path, sizeof path, "%s/config.json", mdir);
    const char *cfg = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                      "\"vocab_size\": 512, \"hidden_size\": 16, \"intermediate_size\": 32, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                      "\"num_key_value_heads\": 1, \"max_position_embeddings\": 64, "
                      "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
                      "\"tie_word_embeddings\": true, \"hidden_act\": \"silu\", "
                      "\"bos_token_id\": 0, \"eos_token_id\": 0, \"torch_dtype\": \"float32\"}";
    CHECK(write_file(path, cfg, strlen(cfg)), "cannot write %s", path);
    char hf[512], train[4300], out[512];
    snprintf(hf, sizeof hf, "model.hf_path=%s", mdir);
    snprintf(train, sizeof train, "data.train=%s/fortunes/train", data);
    snprintf(out, sizeof out, "output.dir=%s/runs", tmp);
    const char *base[] = {hf,
                          train,
                          "data.val=",
                          "data.seq_len=16",
                          "data.batch=2",
                          "train.threads=1",
                          "train.log_every=100",
                          "schedule.warmup_steps=1",
                          "schedule.total_steps=20",
                          out,
                          "output.export=false",
                          "output.run_name=r"};
    g_base = base, g_nbase = (int)(sizeof base / sizeof *base);

    /* step 4 saved */
    dt_trainer *t;
    const char *first[] = {"train.steps=4", "ckpt.every_steps=4", "ckpt.resume=never", NULL};
    CHECK_OK(make_trainer(repo, first, &t));
    if (!t) return dt_test_finish(name);
    CHECK_OK(dt_trainer_run(t));
    dt_trainer_close(t);
    char ck[512];
    snprintf(ck, sizeof ck, "%s/runs/llama-tiny-fortunes/r/checkpoints/step-000000004", tmp);
    snprintf(path, sizeof path, "%s/model.safetensors", ck);
    size_t n = 0;
    char *model = dt_test_read_file(path, &n);
    if (!CHECK(model != NULL, "no checkpoint at step 4 (%s)", path)) return dt_test_finish(name);
    size_t hn = header_size(model, n);
    CHECK(hn > 2 * 509, "model.safetensors' header (%zu bytes) spans several 509-byte chunks", hn);
    printf("model.safetensors: %zu bytes, header %zu\n", n, hn);

    /* resumed with every chunk size: exactly the checkpoint */
    const char *chunks[] = {"3", "8", "509", "4096", NULL};
    for (int i = 0; i < 5; i++) {
        char what[64];
        snprintf(what, sizeof what, "chunk %s", chunks[i] ? chunks[i] : "default");
        dt_status st = resume(repo, ck, chunks[i], what);
        CHECK(st == DT_OK, "%s: resume failed: %s", what, dt_last_error());
    }

    /* a flipped byte inside the header: a checksum mismatch, naming the file */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad-header", tmp);
    CHECK(copy_ckpt(ck, bad), "cannot copy %s", ck);
    char *m = malloc(n);
    memcpy(m, model, n);
    m[8 + (hn - 8) / 2] ^= 1;
    snprintf(path, sizeof path, "%s/model.safetensors", bad);
    CHECK(write_file(path, m, n), "cannot write %s", path);
    dt_status st = resume(repo, bad, "3", "flipped header byte");
    CHECK(st != DT_OK && strstr(dt_last_error(), "model.safetensors") &&
              strstr(dt_last_error(), "checksum"),
          "flipped header byte: status %d: %s", (int)st, dt_last_error());

    /* a renamed tensor, the checkpoint's checksum updated: the header does not fit the model */
    snprintf(bad, sizeof bad, "%s/renamed", tmp);
    CHECK(copy_ckpt(ck, bad), "cannot copy %s", ck);
    memcpy(m, model, n);
    char *q = memmem(m, hn, "q_proj", 6);
    if (CHECK(q != NULL, "no q_proj in the header")) *q = 'x';
    snprintf(path, sizeof path, "%s/model.safetensors", bad);
    CHECK(write_file(path, m, n), "cannot write %s", path);
    snprintf(path, sizeof path, "%s/trainer_state.json", bad);
    size_t sn;
    char *txt = dt_test_read_file(path, &sn);
    cJSON *state = txt ? cJSON_Parse(txt) : NULL;
    cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(state, "files"),
                                                "model.safetensors");
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)XXH3_64bits(m, n));
    if (CHECK(e != NULL, "trainer_state.json lists no model.safetensors")) {
        cJSON_ReplaceItemInObjectCaseSensitive(e, "xxh3", cJSON_CreateString(hex));
        char *js = cJSON_Print(state);
        CHECK(write_file(path, js, strlen(js)), "cannot write %s", path);
        free(js);
    }
    cJSON_Delete(state);
    free(txt);
    st = resume(repo, bad, "3", "renamed tensor");
    CHECK(st != DT_OK && strstr(dt_last_error(), "no tensor") && strstr(dt_last_error(), "q_proj"),
          "renamed tensor: status %d: %s", (int)st, dt_last_error());
    free(m), free(model);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return dt_test_finish(name);
}
