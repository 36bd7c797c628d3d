/* Bad model files are refused with one clear message naming the file and the tensor, never a
 * crash, and the model's parameters are left as they were (each case below is one kind of
 * damage a downloaded or half-written checkpoint can have). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "harness.h"

static char dir[64];

/* Writes a safetensors file with the given header JSON and `data_len` bytes of data. */
static void write_st(const char *path, const char *json, size_t data_len, uint64_t fake_hlen) {
    FILE *f = fopen(path, "wb");
    uint64_t h = fake_hlen ? fake_hlen : strlen(json);
    fwrite(&h, 8, 1, f);
    fwrite(json, 1, strlen(json), f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0x7f), f);
    fclose(f);
}

/* A model with w [2, 3] f32 and b [3] f32. */
static dt_graph *model(int *w, int *b) {
    dt_graph *g = dt_graph_init();
    *w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){2, 3}, 0);
    *b = dt_graph_param(g, "b", DT_F32, 1, (int64_t[]){3}, 0);
    int loss = dt_sum(g, dt_add(g, *w, *b));
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    return g;
}

static void expect(const char *what, const char *json, size_t data_len, uint64_t fake_hlen,
                   const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, what);
    write_st(path, json, data_len, fake_hlen);
    int w, b;
    dt_graph *g = model(&w, &b);
    float *p = dt_graph_flat_param(g, NULL);
    for (int i = 0; i < 9; i++) p[i] = 42.0f;
    dt_status s = dt_model_load(g, path, NULL);
    CHECK(s != DT_OK, "%s: refused", what);
    CHECK(strstr(dt_last_error(), path) != NULL, "%s: message names the file: %s", what,
          dt_last_error());
    CHECK(strstr(dt_last_error(), needle) != NULL, "%s: message says '%s': %s", what, needle,
          dt_last_error());
    printf("  %-12s -> %s\n", what, dt_last_error());
    int kept = 1;
    for (int i = 0; i < 9; i++) kept &= p[i] == 42.0f;
    CHECK(kept, "%s: parameters untouched by the refused load", what);
    dt_graph_free(g);
    remove(path);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dt_badst_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *good_w = "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}";
    const char *good_b = "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]}";
    char j[1024];

    snprintf(j, sizeof j, "{%s,%s}", good_w, good_b);
    expect("truncated", j, 30, 0, "past the end");
    expect("absurd", j, 36, 1ull << 62, "header size");
    snprintf(j, sizeof j, "{%s,\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,9000]}}",
             good_w);
    expect("offsets", j, 36, 0, "'b'");
    snprintf(j, sizeof j, "{%s,\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
             good_w);
    expect("overlap", j, 36, 0, "overlap");
    snprintf(j, sizeof j, "{%s,\"b\":{\"dtype\":\"Q7\",\"shape\":[3],\"data_offsets\":[24,36]}}",
             good_w);
    expect("dtype", j, 36, 0, "unsupported dtype 'Q7'");
    snprintf(j, sizeof j, "{%s,\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[24,36]}}",
             good_w);
    expect("int-weights", j, 36, 0, "'b' is i32");
    snprintf(j, sizeof j, "{%s}", good_w);
    expect("missing", j, 24, 0, "missing tensor 'b'");
    snprintf(j, sizeof j, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},%s}",
             good_b);
    expect("shape", j, 36, 0, "[3, 2]");
    snprintf(j, sizeof j, "{%s,\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,36]}}",
             good_w);
    expect("size", j, 36, 0, "12 bytes of data for 4");
    snprintf(j, sizeof j,
             "{%s,%s,\"extra\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[36,40]}}",
             good_w, good_b);
    expect("extra", j, 40, 0, "'extra' is not a parameter");
    snprintf(j, sizeof j, "{%s,%s", good_w, good_b); /* unterminated JSON */
    expect("json", j, 36, 0, "not a JSON object");
    /* And the good file loads. */
    char path[256];
    snprintf(path, sizeof path, "%s/good.safetensors", dir);
    snprintf(j, sizeof j, "{%s,%s}", good_w, good_b);
    write_st(path, j, 36, 0);
    int w, b;
    dt_graph *g = model(&w, &b);
    CHECK_OK(dt_model_load(g, path, NULL));
    remove(path);
    dt_graph_free(g);
    remove(dir);
    return dt_test_finish("test_model_files");
}
