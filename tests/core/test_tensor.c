/* Tensor views, copies, bf16 rounding, Philox, safetensors round trip and bad files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static void test_views(void) {
    float d[24];
    for (int i = 0; i < 24; i++) d[i] = (float)i;
    dt_tensor t, v, w;
    CHECK_OK(dt_tensor_init(&t, d, DT_F32, 3, (int64_t[]){2, 3, 4}));
    CHECK(dt_tensor_numel(&t) == 24 && dt_tensor_is_contiguous(&t), "numel/contiguous");
    CHECK_OK(dt_tensor_transpose(&v, &t, 1, 2)); /* [2, 4, 3] */
    CHECK(!dt_tensor_is_contiguous(&v) && v.data == d, "transpose is a view");
    CHECK(dt_tensor_get(&v, 1) == 4.0 && dt_tensor_get(&v, 3) == 1.0, "transposed order");
    CHECK(dt_tensor_reshape(&w, &v, 1, (int64_t[]){24}) == DT_ERR_SHAPE, "reshape of a view fails");
    CHECK(strstr(dt_last_error(), "not contiguous") != NULL, "message: %s", dt_last_error());
    CHECK_OK(dt_tensor_reshape(&w, &t, 2, (int64_t[]){-1, 6}));
    CHECK(w.shape[0] == 4 && w.data == d, "reshape infers -1, no copy");
    CHECK(dt_tensor_reshape(&w, &t, 2, (int64_t[]){5, 5}) == DT_ERR_SHAPE, "bad reshape");
    CHECK(strstr(dt_last_error(), "[2, 3, 4]") && strstr(dt_last_error(), "[5, 5]"), "msg %s",
          dt_last_error());
    CHECK_OK(dt_tensor_narrow(&v, &t, 2, 1, 2)); /* [2, 3, 2] from column 1 */
    CHECK(dt_tensor_get(&v, 0) == 1.0 && dt_tensor_get(&v, 2) == 5.0, "narrow values");
    CHECK(dt_tensor_narrow(&v, &t, 2, 3, 2) == DT_ERR_RANGE, "narrow out of range");
    CHECK_OK(dt_tensor_slice(&v, &t, 1, 0, 3, 2)); /* rows 0 and 2 */
    CHECK(v.shape[1] == 2 && dt_tensor_get(&v, 4) == 8.0, "slice with step");
    float c[12];
    dt_tensor ct;
    CHECK_OK(dt_tensor_init(&ct, c, DT_F32, 3, (int64_t[]){2, 2, 3}));
    CHECK_OK(dt_tensor_slice(&v, &t, 1, 0, 3, 2));
    dt_tensor v2;
    CHECK_OK(dt_tensor_narrow(&v2, &v, 2, 0, 3));
    CHECK_OK(dt_tensor_copy(&ct, &v2));
    CHECK(c[3] == 8.0f && c[6] == 12.0f, "strided copy %g %g", c[3], c[6]);
    CHECK(dt_tensor_init(&t, d, (dt_dtype)9, 1, (int64_t[]){3}) == DT_ERR_DTYPE, "unknown dtype");
}

static void test_bf16(void) {
    CHECK(dt_bf16_from_f32(1.0f) == 0x3f80, "bf16(1)");
    /* 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0). */
    CHECK(dt_bf16_from_f32(1.00390625f) == 0x3f80, "round half to even");
    CHECK(dt_bf16_from_f32(1.01171875f) == 0x3f82, "round half to even, odd case");
    CHECK(isnan(dt_bf16_to_f32(dt_bf16_from_f32(NAN))), "NaN stays NaN");
    CHECK(dt_bf16_to_f32(dt_bf16_from_f32(-3.5f)) == -3.5f, "exact values survive");
}

static void test_rng(void) {
    uint32_t a[4], b[4], c[4];
    dt_philox4x32(42, (uint32_t[]){1, 2, 3, 4}, a);
    dt_philox4x32(42, (uint32_t[]){1, 2, 3, 4}, b);
    dt_philox4x32(43, (uint32_t[]){1, 2, 3, 4}, c);
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(a, c, sizeof a) != 0, "philox is a function");
    /* Known-answer test from the Random123 distribution (philox4x32_10, kat_vectors). */
    dt_philox4x32(0, (uint32_t[]){0, 0, 0, 0}, a);
    CHECK(a[0] == 0x6627e8d5u && a[1] == 0xe169c58du && a[2] == 0xbc57ac4cu &&
              a[3] == 0x9b00dbd8u,
          "philox KAT zero: %08x %08x %08x %08x", a[0], a[1], a[2], a[3]);
    float x[10000];
    dt_rng_normal(x, 10000, 7, 1, 2, 0.0f, 1.0f);
    double m = 0, v = 0;
    for (int i = 0; i < 10000; i++) m += x[i], v += x[i] * x[i];
    m /= 10000, v = v / 10000 - m * m;
    CHECK(fabs(m) < 0.05 && fabs(v - 1) < 0.05, "normal moments %g %g", m, v);
}

static void test_safetensors(void) {
    char dir[] = "/tmp/dt_st_XXXXXX", path[256], bad[256];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t ids[3] = {7, -1, 1LL << 40};
    dt_tensor tw, ti, tv;
    dt_tensor_init(&tw, w, DT_F32, 2, (int64_t[]){2, 3});
    dt_tensor_init(&ti, ids, DT_I64, 1, (int64_t[]){3});
    dt_tensor_transpose(&tv, &tw, 0, 1);
    dt_st_entry e[3] = {{"w", &tw}, {"ids", &ti}, {"w.T", &tv}};
    const char *k[1] = {"format"}, *v[1] = {"pt"};
    CHECK_OK(dt_st_save(path, e, 3, k, v, 1));
    dt_st_file *f;
    CHECK_OK(dt_st_open(path, &f));
    if (f) {
        dt_tensor r;
        CHECK(dt_st_count(f) == 3, "count");
        CHECK_OK(dt_st_get(f, "w", &r));
        CHECK(r.shape[0] == 2 && memcmp(r.data, w, sizeof w) == 0, "w round trip");
        CHECK_OK(dt_st_get(f, "ids", &r));
        CHECK(memcmp(r.data, ids, sizeof ids) == 0, "ids round trip");
        CHECK_OK(dt_st_get(f, "w.T", &r));
        CHECK(r.shape[0] == 3 && ((float *)r.data)[1] == 4.0f, "strided tensor written contiguous");
        CHECK(dt_st_get(f, "nope", &r) == DT_ERR_INVALID && strstr(dt_last_error(), "nope"),
              "missing tensor named");
        dt_st_close(f);
    }
    /* Bad files: each gives a message naming the file, never a crash. */
    FILE *src = fopen(path, "rb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, src);
    fclose(src);
    struct { const char *what; size_t len; int patch; } cases[] = {
        {"truncated", n - 4, 0}, {"tiny", 5, 0}, {"huge header", n, 1}, {"garbage json", n, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char b2[4096];
        memcpy(b2, buf, n);
        if (cases[c].patch == 1) { uint64_t h = 1ull << 40; memcpy(b2, &h, 8); }
        if (cases[c].patch == 2) b2[8] = 'x';
        FILE *o = fopen(bad, "wb");
        fwrite(b2, 1, cases[c].len, o);
        fclose(o);
        dt_st_file *bf = NULL;
        dt_status s = dt_st_open(bad, &bf);
        CHECK(s == DT_ERR_FORMAT && bf == NULL && strstr(dt_last_error(), bad), "%s: %d %s",
              cases[c].what, (int)s, dt_last_error());
    }
    CHECK(dt_st_open("/nonexistent/x.safetensors", &f) == DT_ERR_IO, "missing file");
    remove(path), remove(bad), remove(dir);
}

int main(void) {
    test_views();
    test_bf16();
    test_rng();
    test_safetensors();
    return dt_test_finish("test_tensor");
}
