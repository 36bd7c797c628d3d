/* The trainer's resume reads trainer_state.json's numbers into integers and does arithmetic on
 * them (src/train/ckpt.c): each hostile value is refused with a message naming the checkpoint
 * and the key, where before it was a cast of inf / 1e300 to int64 (undefined), a product that
 * overflowed, or sscanf of a NULL data cursor.
 *
 * A 1-layer, 16-wide Llama trains 2 steps on a small token dataset written here and saves step
 * 2; each case copies that checkpoint, edits one value of its trainer_state.json and resumes a
 * new trainer from the copy (ckpt.resume=DIR: dt_trainer_open resumes). The untouched copy
 * resumes at step 2, so every refusal is the edited value's. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/file.h"
#include "dtrain/dtrain.h"
#include "harness.h"

static char g_tmp[256], g_ck[700];

static void put_str(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    int ok = f && fputs(s, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    CHECK(ok, "cannot write %s", path);
}

static dt_status make_trainer(const char *resume, int steps, dt_trainer **t) {
    char yaml[400], r[800], st[64];
    snprintf(yaml, sizeof yaml, "%s/sec.yaml", g_tmp);
    snprintf(r, sizeof r, "ckpt.resume=%s", resume);
    snprintf(st, sizeof st, "train.steps=%d", steps);
    char *ov[] = {r, st};
    dt_config *cfg = NULL;
    *t = NULL;
    dt_status s = dt_config_from_args(yaml, 2, ov, &cfg);
    if (s == DT_OK) s = dt_trainer_open(cfg, NULL, t);
    dt_config_free(cfg);
    return s;
}

static void setup(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/model", g_tmp);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/model/config.json", g_tmp);
    put_str(p, "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 16, "
               "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
               "\"num_key_value_heads\": 1, \"max_position_embeddings\": 64, "
               "\"tie_word_embeddings\": true, \"bos_token_id\": 0, \"eos_token_id\": 0}");
    snprintf(p, sizeof p, "%s/ds", g_tmp);
    dt_dataset_spec spec = {.kind = DT_DATA_TOKENS, .vocab_size = 512, .name = "sec"};
    dt_dataset_writer *w = NULL;
    CHECK_OK(dt_dataset_writer_open(p, &spec, &w));
    uint32_t doc[40];
    for (int d = 0; w && d < 16; d++) {
        for (int i = 0; i < 40; i++) doc[i] = (uint32_t)((d * 131 + i * 17) % 512);
        CHECK_OK(dt_dataset_writer_add_doc(w, doc, NULL, 40));
    }
    if (w) CHECK_OK(dt_dataset_writer_close(w));
    char yaml[2400];
    snprintf(yaml, sizeof yaml,
             "model:\n  kind: llama\n  hf_path: %s/model\n  init: random\n"
             "data:\n  train: %s/ds\n  batch: 2\n  seq_len: 16\n  workers: 0\n"
             "optim:\n  name: adamw\n  lr: 1.0e-3\n"
             "schedule:\n  kind: constant\n"
             "train:\n  threads: 1\n  log_every: 100\n"
             "ckpt:\n  every_steps: 2\n  async: false\n"
             "output:\n  dir: %s/runs\n  experiment: sec\n  run_name: r\n  export: false\n",
             g_tmp, g_tmp, g_tmp);
    snprintf(p, sizeof p, "%s/sec.yaml", g_tmp);
    put_str(p, yaml);
    dt_trainer *t = NULL;
    CHECK_OK(make_trainer("never", 2, &t));
    if (t) CHECK_OK(dt_trainer_run(t));
    dt_trainer_close(t);
    snprintf(g_ck, sizeof g_ck, "%s/runs/sec/r/checkpoints/step-000000002", g_tmp);
}

/* A copy of the checkpoint whose trainer_state.json has `key` ("files.<name>.bytes" for a
 * listed file's size, "layout.<k>" for the optimizer layout's) set to the JSON text `value` (NULL:
 * removed). Returns the copy's path (static). */
static const char *tampered(const char *tag, const char *key, const char *value) {
    static char dst[700];
    snprintf(dst, sizeof dst, "%s/bad-%s", g_tmp, tag);
    mkdir(dst, 0755);
    const char *files[] = {"model.safetensors", "optim-00000-of-00001.safetensors",
                           "trainer_state.json"};
    for (int i = 0; i < 3; i++) {
        char a[800], b[800];
        snprintf(a, sizeof a, "%s/%s", g_ck, files[i]);
        snprintf(b, sizeof b, "%s/%s", dst, files[i]);
        size_t n;
        char *d = dt_test_read_file(a, &n);
        CHECK(d && dt_write_file(b, d, n) == DT_OK, "cannot copy %s", a);
        free(d);
    }
    char p[800];
    snprintf(p, sizeof p, "%s/trainer_state.json", dst);
    cJSON *o = dt_test_read_json(p);
    if (!CHECK(o != NULL, "cannot parse %s", p)) return dst;
    cJSON *parent = o;
    const char *k = key;
    if (!strncmp(key, "layout.", 7)) {
        parent = cJSON_GetObjectItemCaseSensitive(o, "layout");
        k = key + 7;
    } else if (!strncmp(key, "files.", 6)) { /* files.<name>.bytes */
        char name[128];
        snprintf(name, sizeof name, "%s", key + 6);
        char *dot = strrchr(name, '.');
        *dot = 0;
        parent =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "files"), name);
        k = key + 6 + strlen(name) + 1;
    }
    if (k && !value) cJSON_DeleteItemFromObjectCaseSensitive(parent, k);
    /* the value goes in as text (cJSON would print inf as null) */
    if (k && value)
        cJSON_ReplaceItemInObjectCaseSensitive(parent, k, cJSON_CreateString("@@VALUE@@"));
    char *js = cJSON_Print(o);
    cJSON_Delete(o);
    char *at = js ? strstr(js, "\"@@VALUE@@\"") : NULL;
    char out[65536];
    if (at)
        snprintf(out, sizeof out, "%.*s%s%s", (int)(at - js), js, value, at + 11);
    else
        snprintf(out, sizeof out, "%s", js ? js : "");
    put_str(p, out);
    free(js);
    return dst;
}

static void refused_(const char *what, const char *dir, const char *const *needles) {
    dt_trainer *t = NULL;
    dt_status st = make_trainer(dir, 4, &t);
    const char *m = dt_last_error();
    int ok = CHECK(st == DT_ERR_FORMAT && !t, "%s: status %d, expected %d: %s", what, (int)st,
                   (int)DT_ERR_FORMAT, m);
    for (int i = 0; needles[i]; i++)
        ok &= CHECK(strstr(m, needles[i]) != NULL, "%s: the message lacks \"%s\": %s", what,
                    needles[i], m);
    printf("%-4s %s\n     -> %s\n", ok ? "ok" : "FAIL", what, m);
    dt_trainer_close(t);
}
#define REFUSED(what, dir, ...) refused_(what, dir, (const char *const[]){__VA_ARGS__, NULL})

int main(void) {
    const char *name = "test_resume_bounds";
    const char *tp = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dt-resume-XXXXXX", tp && *tp ? tp : "/tmp");
    if (!CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp %s", g_tmp)) return dt_test_finish(name);
    setup();
    struct stat sb;
    char p[800];
    snprintf(p, sizeof p, "%s/trainer_state.json", g_ck);
    if (!CHECK(stat(p, &sb) == 0, "no checkpoint at step 2 (%s)", p)) return dt_test_finish(name);

    /* the copy itself resumes */
    dt_trainer *t = NULL;
    CHECK_OK(make_trainer(tampered("none", "step", "2"), 4, &t));
    CHECK(t && dt_trainer_progress(t)->step == 2, "untouched copy: resumed at step %lld",
          t ? (long long)dt_trainer_progress(t)->step : -1LL);
    dt_trainer_close(t);

    REFUSED("optimizer_step 1e999 (inf)", tampered("opt-inf", "optimizer_step", "1e999"),
            "bad-opt-inf", "trainer_state.json", "optimizer_step");
    REFUSED("optimizer_step 1e300", tampered("opt-big", "optimizer_step", "1e300"), "bad-opt-big",
            "optimizer_step");
    REFUSED("optimizer_step -5", tampered("opt-neg", "optimizer_step", "-5"), "bad-opt-neg",
            "optimizer_step");
    REFUSED("world_size 1e300", tampered("world-big", "world_size", "1e300"), "bad-world-big",
            "trainer_state.json", "world_size");
    REFUSED("world_size 2.5", tampered("world-frac", "world_size", "2.5"), "bad-world-frac",
            "world_size");
    /* saved by 3 ranks, resumed by 1: batch x 3 overflows int64 */
    const char *d = tampered("cursor", "world_size", "3");
    {
        /* both edits on one copy: world_size 3 and a batch of 2^62 */
        char txtp[800];
        snprintf(txtp, sizeof txtp, "%s/trainer_state.json", d);
        cJSON *o = dt_test_read_json(txtp);
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "data_cursor"));
        const char *b = c ? strstr(c, " batch=") : NULL;
        const char *e = b ? strchr(b + 7, ' ') : NULL;
        if (CHECK(e != NULL, "no batch in the data cursor of %s", txtp)) {
            char cur[512];
            snprintf(cur, sizeof cur, "%.*s batch=4611686018427387904%s", (int)(b - c), c, e);
            cJSON_ReplaceItemInObjectCaseSensitive(o, "data_cursor", cJSON_CreateString(cur));
            dt_test_write_json(txtp, o);
        }
        cJSON_Delete(o);
    }
    REFUSED("data_cursor batch 2^62 saved by 3 ranks (batch x world overflows)", d, "bad-cursor",
            "data_cursor batch 4611686018427387904 x world_size 3 overflows");
    REFUSED("no data_cursor", tampered("no-cursor", "data_cursor", NULL), "bad-no-cursor",
            "no data_cursor");
    /* one optimizer shard of 16 elements for 10544 parameters: the rest would have kept its
     * old values, silently */
    REFUSED("optimizer layout: 1 shard of 16 elements", tampered("layout", "layout.shard", "16"),
            "bad-layout", "layout of 1 shards of 16 elements does not fit 10544 parameters");
    REFUSED("model.safetensors listed with 2^60 bytes",
            tampered("bytes-2p60", "files.model.safetensors.bytes", "1152921504606846976"),
            "bad-bytes-2p60", "model.safetensors", "not a size");
    REFUSED("model.safetensors listed with 2^40 bytes",
            tampered("bytes-2p40", "files.model.safetensors.bytes", "1099511627776"),
            "bad-bytes-2p40", "model.safetensors", "expected 1099511627776");
    dt_remove_tree(g_tmp);
    return dt_test_finish(name);
}
