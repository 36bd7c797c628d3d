/* Paths read from files cannot escape their directory (issue 12). A name in a manifest, an index
 * or a checkpoint's trainer_state.json is joined to the directory that file is in; a name with a
 * '/' (so "../x" and "/etc/passwd"), "." or ".." is refused with a message naming the file and
 * the key, and a dataset shard that is a symbolic link leading out of the dataset directory is
 * refused too. Deliberately accepted, and checked here so that it stays so:
 *   - a dataset directory that is itself a symbolic link, and a shard linked to a file inside;
 *   - a model folder's shard linked elsewhere (the Hugging Face hub cache is made of links
 *     snapshots/<rev>/<file> -> ../../blobs/<sha>); the index may only name files of the folder,
 *     the links in it are the folder owner's;
 *   - a checkpoint store whose root is a link. Below the root a POSIX store follows no link:
 *     a checkpoint file or folder that is one is refused on get/stat/put/delete and skipped by
 *     list; a put or delete at a key that is a link replaces/removes the link, not its target. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/file.h"
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
    CHECK_OK(dt_dataset_writer_open(ds, &spec, &w));
    uint32_t doc[4] = {1, 2, 3, 4};
    if (w) CHECK_OK(dt_dataset_writer_add_doc(w, doc, NULL, 4));
    if (w) CHECK_OK(dt_dataset_writer_close(w));
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

/* The index's format (src/nn/st_index.h): one JSON object, "metadata" an optional object,
 * "weight_map" an object of tensor name -> shard file name. Each case breaks one rule, naming
 * only the folder's real shard otherwise; both readers refuse it with a line naming the index,
 * the key and the rule. */
#define SHARD "model-00001-of-00001.safetensors"
static void index_rules(dt_graph *g, const char *dir, const char *idx) {
    static const struct {
        const char *what, *json, *key, *rule;
    } cases[] = {
        {"not JSON", "{\"weight_map\": {\"w\": \"" SHARD "\"}", "not valid JSON", "line 1"},
        {"text after the object", "{\"weight_map\": {\"w\": \"" SHARD "\"}}\n{}", "line 2",
         "text after the JSON value"},
        {"not an object", "[{\"weight_map\": {\"w\": \"" SHARD "\"}}]", "an array",
         "not a JSON object"},
        {"a top-level key twice",
         "{\"weight_map\": {\"w\": \"" SHARD "\"}, \"weight_map\": {\"w\": \"" SHARD "\"}}",
         "key \"weight_map\"", "given twice"},
        {"metadata not an object", "{\"metadata\": 16, \"weight_map\": {\"w\": \"" SHARD "\"}}",
         "\"metadata\" is a number", "not an object"},
        {"weight_map missing", "{\"metadata\": {\"total_size\": 16}}", "no \"weight_map\"",
         "tensor name -> shard file name"},
        {"weight_map not an object", "{\"weight_map\": [\"" SHARD "\"]}",
         "\"weight_map\" is an array", "not an object"},
        {"weight_map empty", "{\"weight_map\": {}}", "\"weight_map\" is empty",
         "names no shard file"},
        {"a tensor listed twice", "{\"weight_map\": {\"w\": \"" SHARD "\", \"w\": \"" SHARD "\"}}",
         "weight_map[\"w\"]", "given twice"},
        {"a value not a string", "{\"weight_map\": {\"w\": 1}}", "weight_map[\"w\"] is a number",
         "not a string naming a shard file"},
        {"a value null", "{\"weight_map\": {\"w\": null}}", "weight_map[\"w\"] is null",
         "not a string naming a shard file"},
        {"a shard that does not exist",
         "{\"weight_map\": {\"w\": \"" SHARD "\", \"v\": \"model-00002-of-00002.safetensors\"}}",
         "weight_map[\"v\"]", "shard \"model-00002-of-00002.safetensors\" does not exist"},
    };
    dt_llama_config lc = {0};
    float dst[4];
    char what[200];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        put_str(idx, cases[i].json);
        snprintf(what, sizeof what, "index.json: %s", cases[i].what);
        REFUSED(what, dt_model_load(g, dir, NULL), DT_ERR_FORMAT, idx, cases[i].key, cases[i].rule);
        snprintf(what, sizeof what, "generate's index reader: %s", cases[i].what);
        REFUSED(what, dt_llm_read_weights_(dir, &lc, dst), DT_ERR_FORMAT, idx, cases[i].key,
                cases[i].rule);
    }
    /* more distinct shards than the readers open: refused before any is looked for */
    size_t cap = 1100 * 48 + 64, n = 0;
    char *big = malloc(cap);
    if (CHECK(big != NULL, "out of memory")) {
        n += (size_t)snprintf(big + n, cap - n, "{\"weight_map\": {");
        for (int k = 0; k < 1025; k++)
            n += (size_t)snprintf(big + n, cap - n, "%s\"t%d\": \"s%d.safetensors\"", k ? ", " : "",
                                  k, k);
        snprintf(big + n, cap - n, "}}");
        put_str(idx, big);
        free(big);
        REFUSED("index.json naming 1025 shard files", dt_model_load(g, dir, NULL), DT_ERR_FORMAT,
                idx, "weight_map names 1025 shard files", "more than the 1024 allowed");
    }
    /* accepted: several tensors in one shard, metadata, a key the format lacks
     * (transformers ignores other keys too) */
    put_str(idx, "{\"metadata\": {\"total_size\": 16}, \"format\": \"pt\", \"weight_map\": "
                 "{\"w\": \"" SHARD "\", \"w.extra\": \"" SHARD "\"}}");
    accepted("index.json: metadata, an unknown key, two tensors in one shard",
             dt_model_load(g, dir, NULL));
    put_str(idx, "{\"weight_map\": {\"w\": \"" SHARD "\"}}");
}

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
    const char *bad[] = {"../w.safetensors",
                         "../../w.safetensors",
                         "/etc/passwd",
                         "..",
                         ".",
                         "sub/w.safetensors",
                         ""};
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
    index_rules(g, dir, idx);
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

/* ---- symbolic links inside a POSIX store ---------------------------------------------------- */

static dt_status chunk_ok(void *ud, size_t off, const void *p, size_t n) {
    (void)ud, (void)off, (void)p, (void)n;
    return DT_OK;
}

/* The file at path holds exactly `want` (a link was not written through, nor deleted). */
static void unchanged(const char *what, const char *path, const char *want) {
    char got[64] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f) fclose(f);
    int ok = CHECK(f && n == strlen(want) && !memcmp(got, want, n), "%s: %s now holds \"%s\"", what,
                   path, got);
    printf("%-4s %s: %s unchanged\n", ok ? "ok" : "FAIL", what, path);
}

static void store_link_cases(void) {
    char out[512], secret[600], odir[600], ofile[700], real[512], root[512], lnk[700];
    snprintf(out, sizeof out, "%s/outside", g_tmp);
    snprintf(secret, sizeof secret, "%s/secret", out);
    snprintf(odir, sizeof odir, "%s/dir", out);
    snprintf(ofile, sizeof ofile, "%s/x", odir);
    CHECK(mkdir(out, 0700) == 0 && mkdir(odir, 0700) == 0, "mkdir %s", odir);
    put_str(secret, "outside");
    put_str(ofile, "outside");
    snprintf(real, sizeof real, "%s/lstore", g_tmp);
    snprintf(root, sizeof root, "%s/lroot", g_tmp);
    CHECK(mkdir(real, 0700) == 0 && symlink("lstore", root) == 0, "cannot link %s", root);
    dt_store_opts so = dt_store_opts_default();
    so.fsync = 0;
    dt_store *s = NULL;
    /* the root itself may be a link (a mount reached through one) */
    accepted("store whose root is a symbolic link", dt_store_open(root, &so, &s));
    if (!s) return;
    accepted("put ck/step-1/model.bin", dt_store_put(s, "ck/step-1/model.bin", "model", 5));

    /* a checkpoint file that is a link to a file outside the store */
    snprintf(lnk, sizeof lnk, "%s/ck/step-1/evil.bin", real);
    CHECK(symlink(secret, lnk) == 0, "cannot link %s", lnk);
    void *data = NULL;
    size_t n = 0;
    char buf[64];
    REFUSED("get of a key that is a link out of the store",
            dt_store_get(s, "ck/step-1/evil.bin", &data, &n), DT_ERR_IO, "ck/step-1/evil.bin",
            "symbolic link");
    free(data), data = NULL;
    REFUSED("get_into of a key that is a link",
            dt_store_get_into(s, "ck/step-1/evil.bin", buf, sizeof buf, &n), DT_ERR_IO,
            "ck/step-1/evil.bin", "symbolic link");
    REFUSED("streamed get of a key that is a link",
            dt_store_get_stream(s, "ck/step-1/evil.bin", 1 << 20, chunk_ok, NULL, &n), DT_ERR_IO,
            "ck/step-1/evil.bin", "symbolic link");
    REFUSED("stat of a key that is a link", dt_store_stat(s, "ck/step-1/evil.bin", &n), DT_ERR_IO,
            "ck/step-1/evil.bin", "symbolic link");

    /* a folder inside the store that is a link to a folder outside */
    snprintf(lnk, sizeof lnk, "%s/ck/linked", real);
    CHECK(symlink(odir, lnk) == 0, "cannot link %s", lnk);
    REFUSED("get through a linked folder", dt_store_get(s, "ck/linked/x", &data, &n), DT_ERR_IO,
            "ck/linked/x", "symbolic link");
    free(data), data = NULL;
    REFUSED("put through a linked folder", dt_store_put(s, "ck/linked/x", "inside", 6), DT_ERR_IO,
            "ck/linked/x", "symbolic link");
    REFUSED("put of a new key through a linked folder", dt_store_put(s, "ck/linked/y", "inside", 6),
            DT_ERR_IO, "ck/linked/y", "symbolic link");
    REFUSED("delete through a linked folder", dt_store_delete(s, "ck/linked/x"), DT_ERR_IO,
            "ck/linked/x", "symbolic link");
    unchanged("put and delete through a linked folder", ofile, "outside");
    snprintf(lnk, sizeof lnk, "%s/y", odir);
    CHECK(access(lnk, F_OK) != 0, "put through a linked folder created %s", lnk);

    /* listing (and so retention and resume) sees neither the linked file nor the linked folder */
    char **keys = NULL;
    int nk = 0;
    CHECK_OK(dt_store_list(s, "ck/", &keys, &nk));
    int only_model = CHECK(nk == 1 && !strcmp(keys[0], "ck/step-1/model.bin"),
                           "list ck/: %d keys, first %s", nk, nk ? keys[0] : "-");
    printf("%-4s list skips links (%d key)\n", only_model ? "ok" : "FAIL", nk);
    dt_store_list_free(keys, nk);

    /* deleting a key that is a link removes the link, never its target */
    accepted("delete of a key that is a link", dt_store_delete(s, "ck/step-1/evil.bin"));
    unchanged("delete of a key that is a link", secret, "outside");
    snprintf(lnk, sizeof lnk, "%s/ck/step-1/evil.bin", real);
    struct stat sb;
    CHECK(lstat(lnk, &sb) != 0, "the link %s is still there", lnk);
    /* a put over a key that is a link replaces the link, never writes into its target */
    CHECK(symlink(secret, lnk) == 0, "cannot link %s", lnk);
    accepted("put over a key that is a link", dt_store_put(s, "ck/step-1/evil.bin", "inside", 6));
    unchanged("put over a key that is a link", secret, "outside");
    CHECK(lstat(lnk, &sb) == 0 && S_ISREG(sb.st_mode), "%s is not a plain file now", lnk);
    accepted("get of the key put over the link", dt_store_get(s, "ck/step-1/evil.bin", &data, &n));
    CHECK(data && n == 6 && !memcmp(data, "inside", 6), "got %zu bytes", n);
    free(data);
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
    store_link_cases();
    dt_remove_tree(g_tmp);
    return dt_test_finish(name);
}
