/* The MLflow client (include/dtrain/mlflow.h) without a server (the real server's tests are
 * tests/track/mlflow_server.py):
 *   - addresses: http/https are MLflow uris, others are not; malformed ones are refused by
 *     dt_mlflow_open with a line naming them
 *   - a server where nothing listens: close returns soon, names the spool, and the spool holds
 *     the begin first, then every metric exactly once (values as logged, bit for bit, NaN and
 *     infinities in protobuf's JSON spelling), in log-batch ops of at most 1000, params in ops
 *     of at most 100, and the end with its status last; every line names the server
 *   - dt_mlflow_status's mapping of dtrain statuses
 *   - sync: a missing spool (NOTFOUND), a line that is not JSON (named by number; the file is
 *     kept), a spool whose only line was cut short by a crash (nothing to send: removed) */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "dtrain/mlflow.h"
#include "harness.h"

static int dead_port(void) { /* bound, then closed: connections are refused */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &n);
    close(s);
    return ntohs(a.sin_port);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_uris(void) {
    CHECK(dt_mlflow_is_uri("http://h:5000") && dt_mlflow_is_uri("https://h/p"), "http(s)");
    CHECK(!dt_mlflow_is_uri("runs/dtrain.db") && !dt_mlflow_is_uri("file:///x") &&
              !dt_mlflow_is_uri("off") && !dt_mlflow_is_uri(""),
          "paths are not MLflow uris");
    const char *bad[] = {"http://", "https:///x", "http://a b:5000", "ftp://h"};
    for (int i = 0; i < 4; i++) {
        dt_mlflow *m = (dt_mlflow *)1;
        CHECK(dt_mlflow_open(bad[i], NULL, &m) == DT_ERR_INVALID && !m, "%s refused", bad[i]);
        CHECK(strstr(dt_last_error(), bad[i]) != NULL, "the error names %s: %s", bad[i],
              dt_last_error());
    }
    CHECK(!strcmp(dt_mlflow_status("done"), "FINISHED") &&
              !strcmp(dt_mlflow_status("failed"), "FAILED") &&
              !strcmp(dt_mlflow_status("preempted"), "KILLED") &&
              !strcmp(dt_mlflow_status("stopped"), "KILLED"),
          "status mapping");
}

enum { N_METRICS = 2500, N_PARAMS = 150 };

static double value_of(int i) { /* values 15 digits do not give back exactly, and non-finite */
    return i == 7 ? NAN : i == 8 ? INFINITY : i == 9 ? -INFINITY : 1.0 / 3.0 + i * 1e-7;
}

static void test_spool(const char *dir) {
    char uri[64], spool[4200];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d", dead_port());
    snprintf(spool, sizeof spool, "%s/exp/run/mlflow-spool.jsonl", dir); /* folders made */
    dt_mlflow *m;
    CHECK_OK(dt_mlflow_open(uri, spool, &m));
    dt_track_kv params[N_PARAMS];
    char keys[N_PARAMS][16];
    for (int i = 0; i < N_PARAMS; i++) {
        snprintf(keys[i], sizeof keys[i], "p%d", i);
        params[i] = (dt_track_kv){keys[i], "v"};
    }
    dt_track_kv tags[] = {{"dtrain.code_version", "abc"}};
    CHECK_OK(dt_mlflow_run_begin(m, "exp", "run", params, N_PARAMS, tags, 1));
    for (int i = 0; i < N_METRICS; i++)
        CHECK_OK(dt_mlflow_metric(m, i % 2 ? "loss" : "lr", i / 2, 1.7e9 + i, value_of(i)));
    CHECK_OK(dt_mlflow_run_end(m, "FINISHED"));
    double t0 = now();
    CHECK(dt_mlflow_close(m) == DT_ERR_IO, "close reports the spool");
    CHECK(now() - t0 < 15, "close returned after %.1f s", now() - t0);
    CHECK(strstr(dt_last_error(), spool) && strstr(dt_last_error(), "runs sync"),
          "the close message names the spool and the replay: %s", dt_last_error());
    FILE *f = fopen(spool, "r");
    CHECK(f != NULL, "spool written at %s", spool);
    if (!f) return;
    static char line[1 << 20];
    int n_lines = 0, n_params = 0, begin_first = 0, end_last = 0, over = 0, uris = 1;
    static int seen[N_METRICS];
    memset(seen, 0, sizeof seen);
    while (fgets(line, sizeof line, f)) {
        cJSON *op = cJSON_Parse(line);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(op, "op"));
        if (!kind) {
            CHECK(0, "spool line %d is an op", n_lines + 1);
            break;
        }
        uris &= !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(op, "uri")) ?: "", uri);
        if (!n_lines) begin_first = !strcmp(kind, "begin");
        end_last = !strcmp(kind, "end");
        cJSON *ms = cJSON_GetObjectItem(op, "metrics"), *ps = cJSON_GetObjectItem(op, "params");
        over |= cJSON_GetArraySize(ms) > 1000 || cJSON_GetArraySize(ps) > 100;
        n_params += cJSON_GetArraySize(ps);
        for (cJSON *x = ms ? ms->child : NULL; x; x = x->next) {
            const char *key = cJSON_GetStringValue(cJSON_GetObjectItem(x, "key"));
            int step = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(x, "step"));
            int i = 2 * step + (key && !strcmp(key, "loss"));
            if (i < 0 || i >= N_METRICS) continue;
            seen[i]++;
            cJSON *v = cJSON_GetObjectItem(x, "value");
            double want = value_of(i);
            int same = isfinite(want)
                           ? cJSON_IsNumber(v) && v->valuedouble == want
                           : cJSON_IsString(v) && !strcmp(v->valuestring, isnan(want) ? "NaN"
                                                                          : want > 0  ? "Infinity"
                                                                                     : "-Infinity");
            CHECK(same, "metric %d's value", i);
            CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(x, "timestamp")) == (1.7e9 + i) * 1000.0,
                  "metric %d's timestamp in ms", i);
        }
        cJSON_Delete(op);
        n_lines++;
    }
    fclose(f);
    int once = 1;
    for (int i = 0; i < N_METRICS; i++) once &= seen[i] == 1;
    CHECK(begin_first && end_last, "begin first, end last");
    CHECK(once, "every metric exactly once");
    CHECK(!over, "batches within MLflow's limits");
    CHECK(n_params == N_PARAMS, "%d params spooled", n_params);
    CHECK(uris, "every line names the server");
    CHECK(n_lines >= 1 + 2 + 1 + 3 + 1, "%d lines", n_lines);
}

static void test_sync_errors(const char *dir) {
    char p[4200];
    int sent = -1;
    snprintf(p, sizeof p, "%s/none.jsonl", dir);
    CHECK(dt_mlflow_sync(p, NULL, &sent) == DT_ERR_NOTFOUND && sent == 0, "a missing spool");
    snprintf(p, sizeof p, "%s/bad.jsonl", dir);
    write_text(p, "\n{not json\n");
    CHECK(dt_mlflow_sync(p, NULL, &sent) == DT_ERR_FORMAT, "a line that is not JSON");
    CHECK(strstr(dt_last_error(), "line 2") && strstr(dt_last_error(), p), "named: %s",
          dt_last_error());
    CHECK(access(p, F_OK) == 0, "the file is kept");
    snprintf(p, sizeof p, "%s/cut.jsonl", dir);
    write_text(p, "{\"op\": \"begin\", \"experiment\": \"e\", \"run_n");
    CHECK(dt_mlflow_sync(p, NULL, &sent) == DT_OK && sent == 0, "a line cut short is not sent");
    CHECK(access(p, F_OK) != 0, "and the spool is removed");
}

/* The lines of a spool file as JSON objects (at most n). */
static int spool_ops(const char *path, cJSON **ops, int n) {
    FILE *f = fopen(path, "r");
    char line[8192];
    int k = 0;
    while (f && k < n && fgets(line, sizeof line, f)) ops[k++] = cJSON_Parse(line);
    if (f) fclose(f);
    return k;
}

static const char *str(const cJSON *o, const char *key) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
    return v ? v : "";
}

/* Uploads and registry requests to a dead server: pending lines with all a replay needs. */
static void test_pending(const char *dir) {
    char uri[64], spool[4200], file[4200];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d", dead_port());
    snprintf(spool, sizeof spool, "%s/pending/mlflow-spool.jsonl", dir);
    snprintf(file, sizeof file, "%s/weights.bin", dir);
    write_text(file, "0123456789");
    dt_mlflow *m;
    CHECK_OK(dt_mlflow_open(uri, spool, &m));
    CHECK_OK(dt_mlflow_run_begin(m, "e", "r", NULL, 0, NULL, 0));
    CHECK_OK(dt_mlflow_artifact(m, file, "model/weights.bin", "0123456789abcdef"));
    CHECK(dt_mlflow_close(m) == DT_ERR_IO, "close reports the spooled upload");
    cJSON *ops[8] = {0};
    int n = spool_ops(spool, ops, 8);
    CHECK(n == 2 && !strcmp(str(ops[0], "op"), "begin") && !strcmp(str(ops[1], "op"), "upload"),
          "begin then the upload spooled (%d lines)", n);
    CHECK(n == 2 && !strcmp(str(ops[1], "file"), file) &&
              !strcmp(str(ops[1], "path"), "model/weights.bin") &&
              !strcmp(str(ops[1], "xxh3"), "0123456789abcdef") && !strcmp(str(ops[1], "uri"), uri),
          "the upload line names file, path, hash and server");
    for (int i = 0; i < n; i++) cJSON_Delete(ops[i]);
    remove(spool);
    const char *files[] = {"weights.bin"}, *sums[] = {NULL};
    dt_mlflow_version v = {.model = "m",
                           .version = 3,
                           .experiment = "e",
                           .run_name = "r",
                           .folder = dir,
                           .files = files,
                           .xxh3 = sums,
                           .n_files = 1,
                           .artifact_dir = "checkpoints/step-3"};
    CHECK(dt_mlflow_register(uri, spool, &v) == DT_ERR_IO, "register: the server is down");
    CHECK(strstr(dt_last_error(), spool) && strstr(dt_last_error(), "runs sync"),
          "the error names the spool and runs sync: %s", dt_last_error());
    CHECK(dt_mlflow_alias(uri, spool, "m", 3, "champion") == DT_ERR_IO, "alias: down");
    n = spool_ops(spool, ops, 8);
    CHECK(n == 3, "upload, model_version, alias spooled (%d lines)", n);
    if (n == 3) {
        CHECK(!strcmp(str(ops[0], "op"), "upload") &&
                  !strcmp(str(ops[0], "path"), "checkpoints/step-3/weights.bin") &&
                  !strcmp(str(ops[0], "run_name"), "r"),
              "the checkpoint's file under checkpoints/step-3, its run named");
        CHECK(!strcmp(str(ops[1], "op"), "model_version") && !strcmp(str(ops[1], "name"), "m") &&
                  cJSON_GetNumberValue(cJSON_GetObjectItem(ops[1], "dtrain_version")) == 3 &&
                  !strcmp(str(ops[1], "path"), "checkpoints/step-3"),
              "the model version");
        CHECK(!strcmp(str(ops[2], "op"), "alias") && !strcmp(str(ops[2], "alias"), "champion"),
              "the alias");
    }
    for (int i = 0; i < n; i++) cJSON_Delete(ops[i]);
    CHECK(dt_mlflow_register("ftp://x", spool, &v) == DT_ERR_INVALID, "a bad uri is refused");
}

int main(void) {
    char dir[] = "/tmp/dt-test-mlflow-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_uris();
    test_spool(dir);
    test_sync_errors(dir);
    test_pending(dir);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return dt_test_finish("test_mlflow");
}
