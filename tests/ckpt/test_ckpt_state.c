/* trainer_state.json's encoder and decoder (src/ckpt/state.c): a state with every field
 * survives encode -> decode unchanged; a file without optional keys decodes with them absent;
 * and each rule of the format is refused with a message naming the file, the key and the rule
 * (one case per rule: a wrong type, an integer out of range or fractional, a duplicate key, a
 * foreign format, a file name leading out of the directory, a size beyond 2^53, a malformed
 * checksum, a malformed layout entry). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/checkpoint.h"
#include "harness.h"

static const char *W = "ck/step-000000002/trainer_state.json";

static void round_trip(void) {
    dt_ckpt_state s;
    dt_ckpt_state_init(&s);
    s.format = strdup(DT_CKPT_FORMAT);
    s.step = 2, s.epoch = 1, s.samples_seen = 64;
    s.data_cursor = strdup("epoch=1 batch=3 seed=7 rank=0 world=2");
    s.rng_seed = 7, s.rng_counter = 4;
    s.sched_step = 2, s.sched_total = 10, s.sched_start = 1, s.sched_lr = 0.00123;
    s.optimizer_step = 2, s.world_size = 2, s.zero_stage = 1;
    s.batch_parts = malloc(2 * sizeof *s.batch_parts);
    s.batch_parts[0] = 6, s.batch_parts[1] = 2, s.n_batch_parts = 2;
    s.layout_n = 30, s.layout_shards = 2, s.layout_shard = 15;
    s.params = calloc(2, sizeof *s.params);
    s.params[0] = (dt_ckpt_param_entry){strdup("a.weight"), 0, 20};
    s.params[1] = (dt_ckpt_param_entry){strdup("a.bias"), 20, 10};
    s.n_params = 2;
    CHECK_OK(dt_ckpt_state_set_metric(&s, "loss", 2.5));
    CHECK_OK(dt_ckpt_state_set_metric(&s, "eval_loss", NAN));
    s.config = strdup("model:\n  kind: llama\n");
    s.code_version = strdup("abc123"), s.dtrain_version = strdup("0.1.0");
    s.files = calloc(1, sizeof *s.files);
    s.files[0] = (dt_ckpt_file_entry){strdup(DT_CKPT_MODEL), 123456789, 0x98ce6ee96fe0d57full};
    s.n_files = 1;
    char *js = NULL;
    CHECK_OK(dt_ckpt_state_encode(&s, &js));
    dt_ckpt_state d;
    CHECK_OK(dt_ckpt_state_decode(js, W, &d));
    CHECK(d.format && !strcmp(d.format, DT_CKPT_FORMAT), "format %s", d.format);
    CHECK(d.step == 2 && d.epoch == 1 && d.samples_seen == 64, "step %lld epoch %lld seen %lld",
          (long long)d.step, (long long)d.epoch, (long long)d.samples_seen);
    CHECK(d.data_cursor && !strcmp(d.data_cursor, s.data_cursor), "cursor %s", d.data_cursor);
    CHECK(d.rng_seed == 7 && d.rng_counter == 4, "rng %lld %lld", (long long)d.rng_seed,
          (long long)d.rng_counter);
    CHECK(d.sched_step == 2 && d.sched_total == 10 && d.sched_start == 1 && d.sched_lr == 0.00123,
          "schedule %lld %lld %g", (long long)d.sched_step, (long long)d.sched_total, d.sched_lr);
    CHECK(d.optimizer_step == 2 && d.world_size == 2 && d.zero_stage == 1,
          "opt %lld world %d zero %d", (long long)d.optimizer_step, d.world_size, d.zero_stage);
    CHECK(d.n_batch_parts == 2 && d.batch_parts[0] == 6 && d.batch_parts[1] == 2, "batch_parts");
    CHECK(d.layout_n == 30 && d.layout_shards == 2 && d.layout_shard == 15 && d.n_params == 2,
          "layout %lld %d %lld, %d params", (long long)d.layout_n, d.layout_shards,
          (long long)d.layout_shard, d.n_params);
    if (d.n_params == 2)
        CHECK(!strcmp(d.params[1].name, "a.bias") && d.params[1].offset == 20 &&
                  d.params[1].numel == 10,
              "param 1: %s %lld %lld", d.params[1].name, (long long)d.params[1].offset,
              (long long)d.params[1].numel);
    CHECK(dt_ckpt_state_metric(&d, "loss") == 2.5 && isnan(dt_ckpt_state_metric(&d, "eval_loss")) &&
              isnan(dt_ckpt_state_metric(&d, "nope")) && d.n_metrics == 2,
          "metrics: %d", d.n_metrics);
    CHECK(d.config && !strcmp(d.config, s.config), "config");
    CHECK(d.code_version && !strcmp(d.code_version, "abc123"), "code_version");
    const dt_ckpt_file_entry *f = dt_ckpt_state_file(&d, DT_CKPT_MODEL);
    CHECK(f && f->bytes == 123456789 && f->xxh3 == 0x98ce6ee96fe0d57full, "files");
    CHECK(!dt_ckpt_state_file(&d, "optim-00000-of-00001.safetensors"), "an unlisted file found");
    /* encode(decode(x)) == x: nothing is lost or reordered */
    char *js2 = NULL;
    CHECK_OK(dt_ckpt_state_encode(&d, &js2));
    CHECK(js && js2 && !strcmp(js, js2), "re-encoded differs:\n%s\n---\n%s", js, js2);
    free(js), free(js2);
    dt_ckpt_state_free(&d);
    dt_ckpt_state_free(&s);
    char name[64];
    dt_ckpt_optim_name(name, 3, 16);
    CHECK(!strcmp(name, "optim-00003-of-00016.safetensors"), "optim name %s", name);
}

static void absent_keys(void) {
    dt_ckpt_state d;
    CHECK_OK(dt_ckpt_state_decode("{\"step\": 5, \"unknown_future_key\": [1]}", W, &d));
    CHECK(d.step == 5 && d.epoch == -1 && d.world_size == -1 && d.layout_shards == -1 &&
              !d.data_cursor && !d.n_files && isnan(d.sched_lr),
          "absent keys are not absent");
    dt_ckpt_state_free(&d);
}

static void refused_(const char *json, const char *const *needles) {
    dt_ckpt_state d;
    dt_status st = dt_ckpt_state_decode(json, W, &d);
    const char *m = dt_last_error();
    int ok = CHECK(st == DT_ERR_FORMAT, "%s: status %d, expected DT_ERR_FORMAT", json, (int)st);
    ok &= CHECK(strstr(m, W) != NULL, "%s: the message does not name the file: %s", json, m);
    for (int i = 0; needles[i]; i++)
        ok &= CHECK(strstr(m, needles[i]) != NULL, "%s: the message lacks \"%s\": %s", json,
                    needles[i], m);
    CHECK(d.n_files == 0 && !d.format && d.step == -1, "%s: a refused state is not left empty",
          json);
    printf("%-4s %s\n     -> %s\n", ok ? "ok" : "FAIL", json, m);
}
#define REFUSED(json, ...) refused_(json, (const char *const[]){__VA_ARGS__, NULL})

int main(void) {
    round_trip();
    absent_keys();
    REFUSED("[1, 2]", "top level", "not an object");
    REFUSED("{\"step\": ", "not valid JSON");
    REFUSED("{\"step\": 1, \"step\": 2}", "\"step\" twice");
    REFUSED("{\"format\": \"dtrain-checkpoint-9\"}", "format", "dtrain-checkpoint-9",
            DT_CKPT_FORMAT);
    REFUSED("{\"format\": 1}", "format", "not a string");
    REFUSED("{\"step\": -1}", "step -1", "not an integer in [0, 9e15)");
    REFUSED("{\"step\": 2.5}", "step 2.5", "not an integer");
    REFUSED("{\"step\": \"2\"}", "step", "not an integer");
    REFUSED("{\"epoch\": 1e300}", "epoch", "not an integer");
    REFUSED("{\"optimizer_step\": 1e999}", "optimizer_step inf", "not an integer");
    REFUSED("{\"world_size\": 0}", "world_size 0", "[1, 1e7)");
    REFUSED("{\"world_size\": 2.5}", "world_size 2.5", "not an integer");
    REFUSED("{\"zero_stage\": 4}", "zero_stage 4", "[0, 3]");
    REFUSED("{\"data_cursor\": 5}", "data_cursor", "not a string");
    REFUSED("{\"rng\": 5}", "rng", "not an object");
    REFUSED("{\"rng\": {\"counter\": -3}}", "rng.counter -3", "not an integer");
    REFUSED("{\"schedule\": {\"lr\": \"fast\"}}", "schedule.lr", "not a number");
    REFUSED("{\"schedule\": {\"total_steps\": 1.5}}", "schedule.total_steps 1.5");
    REFUSED("{\"layout\": {\"n\": 10, \"shards\": 0}}", "layout.shards 0", "[1, 1e6)");
    REFUSED("{\"layout\": {\"n\": 10, \"shard\": 0}}", "layout.shard 0", "[1, 9e15)");
    REFUSED("{\"layout\": {\"n\": 10, \"params\": {}}}", "layout.params", "not an array");
    REFUSED("{\"layout\": {\"n\": 10, \"params\": [[\"a\", 0]]}}", "layout.params[0]",
            "[name, offset, elements]");
    REFUSED("{\"layout\": {\"n\": 10, \"params\": [[\"a\", -1, 5]]}}", "layout.params[0]",
            "not an integer");
    REFUSED("{\"layout\": {\"n\": 1, \"n\": 2}}", "layout", "\"n\" twice");
    REFUSED("{\"metrics\": {\"loss\": \"low\"}}", "metrics.loss", "not a number");
    REFUSED("{\"batch_parts\": [6, 0]}", "batch_parts 0", "not an integer in [1, 9e15)");
    REFUSED("{\"batch_parts\": []}", "batch_parts", "one batch size per rank");
    REFUSED("{\"metrics\": []}", "metrics", "not an object");
    REFUSED("{\"files\": {\"../x\": {\"bytes\": 1, \"xxh3\": \"0000000000000000\"}}}",
            "files[\"../x\"]", "plain file name");
    REFUSED("{\"files\": {\"..\": {\"bytes\": 1, \"xxh3\": \"0000000000000000\"}}}",
            "files[\"..\"]", "plain file name");
    REFUSED("{\"files\": {\"m\": {\"bytes\": 1}}}", "files[\"m\"]", "needs \"bytes\" and \"xxh3\"");
    REFUSED(
        "{\"files\": {\"m\": {\"bytes\": 1152921504606846976, \"xxh3\": \"0000000000000000\"}}}",
        "files[\"m\"].bytes 1152921504606846976", "is not a size");
    REFUSED("{\"files\": {\"m\": {\"bytes\": -1, \"xxh3\": \"0000000000000000\"}}}",
            "files[\"m\"].bytes -1", "is not a size");
    REFUSED("{\"files\": {\"m\": {\"bytes\": 1, \"xxh3\": \"00000000000000XY\"}}}",
            "files[\"m\"].xxh3", "16 lowercase hex digits");
    REFUSED("{\"files\": {\"m\": {\"bytes\": 1, \"xxh3\": \"0\"}}}", "files[\"m\"].xxh3");
    REFUSED("{\"files\": {\"m\": {\"bytes\": 1, \"xxh3\": \"0000000000000000\"}, \"m\": {}}}",
            "files", "\"m\" twice");
    return dt_test_finish("test_ckpt_state");
}
