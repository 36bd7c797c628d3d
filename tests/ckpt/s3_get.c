/* A small store client for the checkpoint tests (until a `dtrain ckpt` command exists): what
 * the shell scripts cannot do themselves on an S3 store.
 *
 *   s3_get mkbucket BUCKET          create the bucket at $AWS_ENDPOINT_URL (retried for 20 s:
 *                                   the gateway may need a moment to load its identities)
 *   s3_get get URL KEY FILE         dt_store_get of KEY, written to FILE
 *   s3_get put URL KEY FILE         dt_store_put of FILE's bytes as KEY (uploads a dataset)
 *   s3_get dsverify URL             dt_dataset_verify of the dataset at URL (every block)
 *   s3_get stat URL KEY             exit 0 if KEY exists (prints its size), 1 if not
 *   s3_get list URL PREFIX          dt_store_list: one key a line
 *   s3_get verify URL DIR           dt_ckpt_verify of checkpoint DIR ("verified DIR: N bytes")
 *   s3_get check URL ROOT           every step-* directory under ROOT: a committed one
 *                                   (trainer_state.json present) must verify; prints one line a
 *                                   directory; exit 1 if a committed one does not verify
 *   s3_get latest URL ROOT          dt_ckpt_find_latest: prints the newest good checkpoint's key
 *
 * URL is any store URL (s3://BUCKET/PREFIX reads AWS_* from the environment). Exit status 0 on
 * success, 1 on a failed check or storage error (the message on stderr), 2 on bad usage. */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "dtrain/checkpoint.h"
#include "dtrain/data.h"
#include "dtrain/storage.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t sink(char *p, size_t sz, size_t n, void *ud) {
    FILE *f = ud;
    return fwrite(p, sz, n, f);
}

/* PUT /BUCKET (CreateBucket), signed like every other request (SigV4 by libcurl). */
static int mkbucket(const char *bucket) {
    const char *ep = getenv("AWS_ENDPOINT_URL"), *ak = getenv("AWS_ACCESS_KEY_ID"),
               *sk = getenv("AWS_SECRET_ACCESS_KEY"), *rg = getenv("AWS_REGION");
    if (!ep || !ak || !sk) {
        fprintf(stderr, "s3_get mkbucket: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY must be set\n");
        return 2;
    }
    char url[2048], sig[128];
    snprintf(url, sizeof url, "%s/%s", ep, bucket);
    snprintf(sig, sizeof sig, "aws:amz:%s:s3", rg && *rg ? rg : "us-east-1");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    long code = 0;
    double t0 = now_s();
    while (now_s() - t0 < 20) {
        char *body = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&body, &len);
        CURL *h = curl_easy_init();
        /* the SHA-256 of the empty payload */
        struct curl_slist *hdr = curl_slist_append(
            NULL, "x-amz-content-sha256: "
                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig);
        curl_easy_setopt(h, CURLOPT_USERNAME, ak);
        curl_easy_setopt(h, CURLOPT_PASSWORD, sk);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, mem);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
        code = 0;
        if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        fclose(mem);
        int exists = body && (strstr(body, "BucketAlreadyOwnedByYou") ||
                              strstr(body, "BucketAlreadyExists"));
        free(body);
        curl_slist_free_all(hdr);
        curl_easy_cleanup(h);
        if (code == 200 || exists) return 0;
        usleep(100000);
    }
    fprintf(stderr, "s3_get mkbucket: cannot create bucket '%s' at %s: HTTP %ld\n", bucket, ep,
            code);
    return 1;
}

static int fail(const char *what) {
    fprintf(stderr, "s3_get %s: %s\n", what, dt_last_error());
    return 1;
}

static int cmd_get(dt_store *s, const char *key, const char *path) {
    void *data;
    size_t n;
    if (dt_store_get(s, key, &data, &n) != DT_OK) return fail("get");
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    free(data);
    if (!ok) {
        fprintf(stderr, "s3_get get: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int cmd_check(dt_store *s, const char *root) {
    dt_ckpt_info *v;
    int n, bad = 0;
    if (dt_ckpt_list(s, root, NULL, &v, &n) != DT_OK) return fail("check");
    for (int i = 0; i < n; i++) {
        if (!v[i].committed) {
            printf("uncommitted %s\n", v[i].dir);
            continue;
        }
        int64_t b;
        if (dt_ckpt_verify(s, v[i].dir, &b) == DT_OK) {
            printf("verified %s: %" PRId64 " bytes\n", v[i].dir, b);
        } else {
            printf("BAD %s: %s\n", v[i].dir, dt_last_error());
            bad = 1;
        }
    }
    free(v);
    return bad;
}

static int cmd_put(dt_store *s, const char *key, const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "s3_get: cannot open %s\n", file);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    int ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    int rc = !ok ? (fprintf(stderr, "s3_get: cannot read %s\n", file), 1)
             : dt_store_put(s, key, buf, (size_t)n) != DT_OK ? fail("put")
                                                             : 0;
    free(buf);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "mkbucket")) return mkbucket(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "dsverify")) {
        if (dt_dataset_verify(argv[2]) != DT_OK) return fail("dsverify");
        printf("verified dataset %s\n", argv[2]);
        return 0;
    }
    const char *cmd = argc > 1 ? argv[1] : "";
    int want = !strcmp(cmd, "get") || !strcmp(cmd, "put") ? 5 : 4;
    if (argc != want ||
        (strcmp(cmd, "get") && strcmp(cmd, "put") && strcmp(cmd, "stat") && strcmp(cmd, "list") &&
         strcmp(cmd, "verify") && strcmp(cmd, "check") && strcmp(cmd, "latest"))) {
        fprintf(stderr, "usage: s3_get mkbucket BUCKET | dsverify URL | get URL KEY FILE | put URL "
                        "KEY FILE | stat URL KEY | "
                        "list URL PREFIX | verify URL DIR | check URL ROOT | latest URL ROOT\n");
        return 2;
    }
    dt_store *s;
    if (dt_store_open(argv[2], NULL, &s) != DT_OK) return fail("open");
    int rc = 0;
    if (!strcmp(cmd, "get")) {
        rc = cmd_get(s, argv[3], argv[4]);
    } else if (!strcmp(cmd, "put")) {
        rc = cmd_put(s, argv[3], argv[4]);
    } else if (!strcmp(cmd, "stat")) {
        size_t n;
        dt_status st = dt_store_stat(s, argv[3], &n);
        if (st == DT_OK)
            printf("%zu\n", n);
        else
            rc = st == DT_ERR_NOTFOUND ? 1 : fail("stat");
    } else if (!strcmp(cmd, "list")) {
        char **keys;
        int n;
        if (dt_store_list(s, argv[3], &keys, &n) != DT_OK) {
            rc = fail("list");
        } else {
            for (int i = 0; i < n; i++) printf("%s\n", keys[i]);
            dt_store_list_free(keys, n);
        }
    } else if (!strcmp(cmd, "verify")) {
        int64_t b;
        if (dt_ckpt_verify(s, argv[3], &b) != DT_OK)
            rc = fail("verify");
        else
            printf("verified %s: %" PRId64 " bytes\n", argv[3], b);
    } else if (!strcmp(cmd, "check")) {
        rc = cmd_check(s, argv[3]);
    } else {
        dt_ckpt_info info;
        if (dt_ckpt_find_latest(s, argv[3], stderr, &info) != DT_OK)
            rc = fail("latest");
        else
            printf("%s\n", info.dir);
    }
    dt_store_close(s);
    return rc;
}
