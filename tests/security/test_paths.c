/* Paths read from files cannot escape their directory (issue 12). A name in a manifest, an index
 * or a checkpoint's trainer_state.json is joined to the directory that file is in; a name with a
 * '/' (so "../x" and "/etc/passwd"), "." or ".." is refused with a message naming the file and
 * the key, and a dataset shard that is a symbolic link leading out of the dataset directory is
 * refused too. Deliberately accepted, and checked here so that it stays so:
 *   - a dataset directory that is itself a symbolic link, and a shard linked to a file inside;
 *   - a model folder's shard linked elsewhere (the Hugging Face hub cache is made of links
 *     snapshots/<rev>/<file> -> ../../blobs/<sha>); the index may only name files of the folder,
 *     the links in it are the folder owner's. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/util.h"
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "dtrain/ops_basic.h"
#include "dtrain/storage.h"
#include "harness.h"

/* the folder reader of `dtrain generate` (src/nn/llama_infer_load.c; internal, as the fuzzer) */
dt_status dt_llm_read_weights_(const char *dir, const dt_llama_config *c, float *dst);

static char g_tmp[256];

static void put_str(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    int ok = f && fputs(s, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    CHECK(ok, "cannot write %s", path);
}

/* The call failed with `want` and the message holds every needle. */
static void refused_(const char *what, dt_status got, dt_status want, const char *const *needles) {
    const char *m = dt_last_error();
    int ok = CHECK(got == want, "%s: status %d, expected %d: %s", what, (int)got, (int)want, m);
    for (int i = 0; needles[i]; i++)
        ok &= CHECK(strstr(m, needles[i]) != NULL, "%s: the message lacks \"%s\": %s", what,
                    needles[i], m);
    printf("%-4s %s\n     -> %s\n", ok ? "ok" : "FAIL", what, m);
}
#define REFUSED(what, call, want, ...)                                                             \
    refused_(what, (call), want, (const char *const[]){__VA_ARGS__, NULL})

static void accepted(const char *what, dt_status got) {
    int ok = CHECK(got == DT_OK, "%s: status %d: %s", what, (int)got, dt_last_error());
    printf("%-4s %s (accepted)\n", ok ? "ok" : "FAIL", what);
}

/* ---- dataset manifest ------------------------------------------------------------------------ */

static dt_status open_ds(const char *dir) {
    dt_dataset *d = NULL;
    dt_status st = dt_dataset_open(dir, DT_DATA_VERIFY, &d);
    dt_dataset_close(d);
    return st;
}

/* Sets shards[0].file of dir's manifest to `name`. */
static void set_shard_name(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    cJSON *o = dt_test_read_json(p);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "shards"), 0);
    if (CHECK(s != NULL, "%s: no shards[0]", p)) {
        cJSON_ReplaceItemInObjectCaseSensitive(s, "file", cJSON_CreateString(name));
        dt_test_write_json(p, o);
    }
    cJSON_Delete(o);
}

/* shards[0].file of dir's manifest (static buffer). */
static const char *shard_name(const char *dir) {
    static char name[256];
    char p[600];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    cJSON *o = dt_test_read_json(p);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "shards"), 0);
    const char *f = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "file"));
    snprintf(name, sizeof name, "%s", f ? f : "");
    cJSON_Delete(o);
    return name;
}

static void manifest_cases(void) {
    char ds[512], man[600], shard[800], outside[600], moved[800];
    snprintf(ds, sizeof ds, "%s/ds", g_tmp);
    dt_dataset_spec spec = {.kind = DT_DATA_TOKENS, .vocab_size = 100, .name = "t"};
    dt_dataset_writer *w = NULL;
    CHECK_OK(dt_dataset_writer_create(ds, &spec, &w));
    uint32_t doc[4] = {1, 2, 3, 4};
    if (w) CHECK_OK(dt_dataset_writer_add_doc(w, doc, NULL, 4));
    if (w) CHECK_OK(dt_dataset_writer_finish(w));
    accepted("dataset as written", open_ds(ds));
    snprintf(man, sizeof man, "%s/manifest.json", ds);
    char name[256];
    snprintf(name, sizeof name, "%s", shard_name(ds));
    CHECK(name[0] != 0, "%s: no shard name", man);
    snprintf(shard, sizeof shard, "%s/%s", ds, name);
    /* the real shard lives outside: a copy next to the dataset directory */
    snprintf(outside, sizeof outside, "%s/%s", g_tmp, name);
    size_t n;
    char *bytes = dt_test_read_file(shard, &n);
    CHECK(bytes && dt_write_file(outside, bytes, n) == DT_OK, "cannot copy %s", shard);
    free(bytes);

    const char *bad[] = {"../x.shard", "/etc/passwd", "..", ".", "", "sub/../x.shard"};
    char rel[300];
    snprintf(rel, sizeof rel, "../%s", name); /* the outside copy, by a relative name */
    for (size_t i = 0; i < sizeof bad / sizeof *bad + 1; i++) {
        const char *nm = i < sizeof bad / sizeof *bad ? bad[i] : rel;
        char what[400];
        snprintf(what, sizeof what, "manifest shards[0].file \"%s\"", nm);
        set_shard_name(ds, nm);
        REFUSED(what, open_ds(ds), DT_ERR_FORMAT, man, "shards[0].file", "not a plain file name");
    }
    set_shard_name(ds, name);
    accepted("manifest restored", open_ds(ds));

    /* the shard a symbolic link to the copy outside the directory */
    CHECK(unlink(shard) == 0 && symlink(outside, shard) == 0, "cannot link %s", shard);
    REFUSED("shard that is a symbolic link out of the dataset directory (absolute)", open_ds(ds),
            DT_ERR_FORMAT, man, "shards[0].file", name, "leading out of the dataset directory");
    unlink(shard);
    snprintf(moved, sizeof moved, "../%s", name);
    CHECK(symlink(moved, shard) == 0, "cannot link %s", shard);
    REFUSED("shard that is a symbolic link out of the dataset directory (relative)", open_ds(ds),
            DT_ERR_FORMAT, man, "shards[0].file", "leading out of the dataset directory");
    /* a link inside the directory is fine */
    unlink(shard);
    snprintf(moved, sizeof moved, "%s/real.bin", ds);
    CHECK(rename(outside, moved) == 0 && symlink("real.bin", shard) == 0, "cannot link %s", shard);
    accepted("shard that is a symbolic link to a file inside the dataset directory", open_ds(ds));
    /* so is a dataset directory that is itself a link */
    char link[600];
    snprintf(link, sizeof link, "%s/ds-link", g_tmp);
    CHECK(symlink("ds", link) == 0, "cannot link %s", link);
    accepted("dataset directory that is a symbolic link", open_ds(link));
}

/* ---- model.safetensors.index.json ---------------------------------------------------------- */

static void index_cases(void) {
    dt_graph *g = dt_graph_init();
    int w = dt_graph_param(g, "w", DT_F32, 2, (int64_t[]){2, 2}, 0);
    dt_graph_opts go = {.no_backward = 1};
    CHECK_OK(dt_graph_compile(g, dt_sum(g, w), &go));
    char dir[512], idx[600], p[800], blobs[600];
    snprintf(dir, sizeof dir, "%s/model", g_tmp);
    snprintf(blobs, sizeof blobs, "%s/blobs", g_tmp);
    mkdir(dir, 0755), mkdir(blobs, 0755);
    snprintf(p, sizeof p, "%s/w.safetensors", g_tmp); /* outside the folder */
    CHECK_OK(dt_model_save(g, p, -1));
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    const char *bad[] = {"../w.safetensors", "../../w.safetensors", "/etc/passwd", "..", "."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char json[300], what[300];
        snprintf(json, sizeof json, "{\"weight_map\": {\"w\": \"%s\"}}", bad[i]);
        put_str(idx, json);
        snprintf(what, sizeof what, "index.json weight_map \"w\": \"%s\"", bad[i]);
        REFUSED(what, dt_model_load(g, dir, NULL), DT_ERR_FORMAT, idx, "weight_map[\"w\"]",
                "not a plain file name");
        /* `dtrain generate`'s reader of the same folder (src/nn/llama_infer_load.c) */
        dt_llama_config lc = {0};
        float dst[4];
        snprintf(what, sizeof what, "generate's index reader, weight_map \"w\": \"%s\"", bad[i]);
        REFUSED(what, dt_llm_read_weights_(dir, &lc, dst), DT_ERR_FORMAT, idx, "weight_map[\"w\"]",
                "not a plain file name");
    }
    /* the hub cache's layout: a plain name in the index, the file a link to ../blobs/<sha> */
    char blob[700], link[700];
    snprintf(blob, sizeof blob, "%s/0123abcd", blobs);
    CHECK(rename(p, blob) == 0, "cannot move %s", p);
    snprintf(link, sizeof link, "%s/model-00001-of-00001.safetensors", dir);
    CHECK(symlink("../blobs/0123abcd", link) == 0, "cannot link %s", link);
    put_str(idx, "{\"weight_map\": {\"w\": \"model-00001-of-00001.safetensors\"}}");
    accepted("index.json naming a shard that is a link into ../blobs (Hugging Face cache)",
             dt_model_load(g, dir, NULL));
    dt_graph_free(g);
}

/* ---- trainer_state.json -------------------------------------------------------------------- */

static void ckpt_cases(void) {
    char root[512];
    snprintf(root, sizeof root, "%s/store", g_tmp);
    dt_store_opts so = dt_store_opts_default();
    so.fsync = 0;
    dt_store *s = NULL;
    CHECK_OK(dt_store_open(root, &so, &s));
    if (!s) return;
    static const char secret[] = "outside the checkpoint";
    CHECK_OK(dt_store_put(s, "x", secret, sizeof secret - 1));
    CHECK_OK(dt_store_put(s, "ck/x", secret, sizeof secret - 1));
    const char *bad[] = {"../../x", "../x", "..", ".", "/x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char state[300], what[300];
        /* the listed size and checksum are the file's: only the name is wrong */
        snprintf(state, sizeof state, "{\"files\": {\"%s\": {\"bytes\": %zu, \"xxh3\": \"%s\"}}}",
                 bad[i], sizeof secret - 1, "0000000000000000");
        CHECK_OK(dt_store_put(s, "ck/step-1/trainer_state.json", state, strlen(state)));
        snprintf(what, sizeof what, "trainer_state.json files \"%s\"", bad[i]);
        char key[300];
        snprintf(key, sizeof key, "files[\"%s\"]", bad[i]);
        REFUSED(what, dt_ckpt_check(s, "ck/step-1", DT_CKPT_SIZES, NULL), DT_ERR_FORMAT,
                "ck/step-1/trainer_state.json", key, "not a plain file name");
    }
    dt_store_close(s);
}

int main(void) {
    const char *name = "test_paths";
    const char *t = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dt-paths-XXXXXX", t && *t ? t : "/tmp");
    if (!CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp %s", g_tmp)) return dt_test_finish(name);
    manifest_cases();
    index_cases();
    ckpt_cases();
    dt_remove_tree(g_tmp);
    return dt_test_finish(name);
}
