/* Fuzz target: a checkpoint's trainer_state.json (src/ckpt/checkpoint.c: the "files" table
 * with each file's size and xxh3, the metrics retention ranks by; src/data/loader.c: the data
 * cursor it records).
 *
 * Input: the file's bytes. A POSIX store in a temporary directory holds, under root "ck",
 * step-000000001/ with the input as its trainer_state.json beside a model.safetensors whose size
 * and xxh3 the seeds list, an older good checkpoint step-000000000 and an unfinished
 * step-000000002 (no trainer_state.json); they are written again before every input. Entry
 * points: dt_ckpt_check at both levels, dt_ckpt_list with a metric, dt_ckpt_find_before (the
 * resume's choice), dt_ckpt_retain (keep the best by "loss"), and dt_data_cursor_parse on the
 * state's "data_cursor" string, as the trainer's resume reads it; and the decoder every reader
 * goes through (src/ckpt/state.c, dt_ckpt_state_decode), re-encoded when it accepts the input. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/checkpoint.h"
#include "dtrain/data.h"
#include "dtrain/storage.h"
#include "fuzz_util.h"

static const char model[] = "dtrain fuzz model bytes"; /* xxh3 98ce6ee96fe0d57f */
static const char good_state[] =
    "{\"step\": 0, \"epoch\": 0, \"metrics\": {\"loss\": 2.5}, \"files\": "
    "{\"model.safetensors\": {\"bytes\": 23, \"xxh3\": \"98ce6ee96fe0d57f\"}}}";
static dt_store *g_store;

static void put(const char *key, const void *p, size_t n) {
    if (dt_store_put(g_store, key, p, n) != DT_OK) {
        fprintf(stderr, "fuzz_trainer_state: %s\n", dt_last_error());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_store) {
        char root[4096];
        fz_path(root, sizeof root, "store");
        dt_store_opts o = dt_store_opts_default();
        o.fsync = 0;
        if (dt_store_open(root, &o, &g_store) != DT_OK) abort();
    }
    put("ck/step-000000000/model.safetensors", model, sizeof model - 1);
    put("ck/step-000000000/trainer_state.json", good_state, sizeof good_state - 1);
    put("ck/step-000000001/model.safetensors", model, sizeof model - 1);
    put("ck/step-000000001/trainer_state.json", data, size);
    put("ck/step-000000002/model.safetensors", model, sizeof model - 1);

    int64_t bytes = 0;
    dt_ckpt_check(g_store, "ck/step-000000001", DT_CKPT_SIZES, &bytes);
    dt_ckpt_check(g_store, "ck/step-000000001", DT_CKPT_CHECKSUMS, &bytes);
    dt_ckpt_info *v = NULL, found;
    int n = 0;
    if (dt_ckpt_list(g_store, "ck", "loss", &v, &n) == DT_OK) free(v);
    dt_ckpt_find_before(g_store, "ck", INT64_MAX, DT_CKPT_SIZES, NULL, &found);

    char *txt = NULL;
    if (dt_ckpt_read_state(g_store, "ck/step-000000001", &txt) == DT_OK) {
        cJSON *o = cJSON_Parse(txt);
        const char *cur = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "data_cursor"));
        dt_data_cursor c;
        if (cur) dt_data_cursor_parse(cur, &c);
        cJSON_Delete(o);
        free(txt);
    }
    dt_ckpt_retain(g_store, "ck", 2, 1, 1, "loss", "min", NULL, NULL);

    char *txt2 = malloc(size + 1);
    if (txt2) {
        memcpy(txt2, data, size), txt2[size] = 0;
        dt_ckpt_state cs;
        char *js = NULL;
        if (dt_ckpt_state_decode(txt2, "fuzz/trainer_state.json", &cs) == DT_OK &&
            dt_ckpt_state_encode(&cs, &js) == DT_OK)
            free(js);
        dt_ckpt_state_free(&cs);
        free(txt2);
    }
    return 0;
}
