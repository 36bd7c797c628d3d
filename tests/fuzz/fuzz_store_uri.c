/* Fuzz target: storage URLs and object keys (src/store/storage.c: the scheme dispatch and the key
 * checks that keep keys inside the store's root; src/store/storage_s3.c: s3://BUCKET/PREFIX and
 * the AWS_* environment it reads when opening; src/config/config.c: dt_cfg_uri_problem, the
 * config's check of ckpt.dir-style URIs). Nothing here touches the network: opening an s3://
 * store only parses and checks; no request is made.
 *
 * Input: the URL, then optionally FZ_SEP and a key, FZ_SEP and an AWS_REGION, FZ_SEP and an
 * AWS_ENDPOINT_URL. A path or file:// URL is made relative to a temporary directory (opening a
 * POSIX store creates its root), and one that contains ".." is not opened: the harness must not
 * create directories outside its sandbox. On an opened POSIX store the key goes through the
 * read-only calls (dt_store_stat, dt_store_get, dt_store_list as a prefix), and the harness
 * asserts the keys contract: a key that is not refused as invalid has no "." / ".." component
 * and does not start with '/', so it cannot name anything outside the root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config_impl.h"
#include "dtrain/storage.h"
#include "fuzz_util.h"

/* A key the store accepted must stay inside the root. */
static void check_contract(const char *key, int prefix) {
    size_t n = strlen(key);
    if (!n) return;
    int bad = key[0] == '/';
    for (const char *c = key; *c && !bad;) {
        const char *e = strchr(c, '/');
        size_t l = e ? (size_t)(e - c) : strlen(c);
        if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.')) bad = 1;
        if (l == 0 && (e || !prefix)) bad = 1;
        if (!e) break;
        c = e + 1;
    }
    if (bad) {
        fprintf(stderr, "fuzz_store_uri: the store accepted key '%s'\n", key);
        abort();
    }
}

static void set_env(const char *name, const uint8_t *p, size_t n, int have) {
    if (!have) {
        unsetenv(name);
        return;
    }
    char *v = fz_strndup(p, n);
    setenv(name, v, 1);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char root[4096];
    if (!root[0]) {
        fz_path(root, sizeof root, "stores");
        setenv("AWS_ACCESS_KEY_ID", "fuzz-access-key", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "fuzz-secret-key", 1);
    }
    const uint8_t *part[4];
    size_t len[4];
    int n = fz_split(data, size, part, len, 4);
    char *url = fz_strndup(part[0], len[0]);
    char *key = fz_strndup(n > 1 ? part[1] : (const uint8_t *)"", n > 1 ? len[1] : 0);
    set_env("AWS_REGION", part[n > 2 ? 2 : 0], n > 2 ? len[2] : 0, n > 2);
    set_env("AWS_ENDPOINT_URL", part[n > 3 ? 3 : 0], n > 3 ? len[3] : 0, n > 3);
    (void)dt_cfg_uri_problem(url);

    size_t ul = strlen(url);
    char *open_url = malloc(ul + strlen(root) + 16);
    if (!open_url) abort();
    int posix = 0;
    if (!strncmp(url, "s3://", 5) || (strstr(url, "://") && strncmp(url, "file://", 7))) {
        strcpy(open_url, url); /* s3: parsed only; another scheme: refused */
    } else if (!strncmp(url, "file://", 7)) {
        sprintf(open_url, "file://%s/%s", root, url + 7), posix = 1;
    } else {
        sprintf(open_url, "%s/%s", root, url), posix = 1;
    }
    dt_store *s = NULL;
    if (!(posix && strstr(open_url, "..")) && dt_store_open(open_url, NULL, &s) == DT_OK) {
        if (!strcmp(dt_store_kind(s), "posix")) {
            size_t sz = 0;
            void *buf = NULL;
            if (dt_store_stat(s, key, &sz) != DT_ERR_INVALID) check_contract(key, 0);
            if (dt_store_get(s, key, &buf, &sz) == DT_OK) free(buf);
            char **keys = NULL;
            int nk = 0;
            if (dt_store_list(s, key, &keys, &nk) == DT_OK) {
                check_contract(key, 1);
                dt_store_list_free(keys, nk);
            }
        }
        dt_store_close(s);
    }
    if (posix) fz_rm(root);
    free(open_url);
    free(key);
    free(url);
    return 0;
}
