/* Fuzz target: HTTP requests to the monitoring endpoint (src/serve/: the request handler's
 * token check, Host check, method check and routing; /metrics; the JSON API's run references,
 * ?key= and ?since= parameters; src/track/ queries behind them).
 *
 * The handler is static and reached through libmicrohttpd, so the real server runs in this
 * process (dt_serve_open on 127.0.0.1, port chosen by the system) over a small experiment store
 * made once (two runs with metrics, params, tags and an artifact; a sweep whose trial is one). Each
 * input is sent as the raw bytes of one connection, which is then half-closed; the reply is read
 * until the server closes (at most 2 s). Byte 0 bit 0 picks the server that requires a token
 * ("fuzz-token") over the open one; the request is the rest. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "dtrain/serve.h"
#include "dtrain/track.h"
#include "fuzz_util.h"

static dt_serve *g_srv[2];

static void must(dt_status st) {
    if (st != DT_OK) {
        fprintf(stderr, "fuzz_http: %s\n", dt_last_error());
        abort();
    }
}

static void setup(void) {
    char db[4096];
    fz_path(db, sizeof db, "runs/dtrain.db");
    dt_track *s;
    must(dt_track_open(db, &s));
    int64_t r1, r2;
    must(dt_track_run_begin(s, "exp", "run-a", 2, "h:2", "optim:\n  lr: 0.003\n  name: adamw\n",
                            NULL, 0, &r1));
    must(dt_track_run_begin(s, "exp2", "run-b", 1, "h:1", NULL, NULL, 0, &r2));
    for (int i = 0; i < 20; i++) {
        must(dt_track_metric(s, r1, "loss", i, 1000.0 + i, 2.0 / (1 + i)));
        must(dt_track_metric(s, r1, "lr", i, 1000.0 + i, 0.003));
    }
    must(dt_track_tag(s, r1, "note", "fuzz <b>\"tag\"</b>"));
    must(dt_track_artifact(s, r1, "checkpoint", "runs/ck/step-000000010", 10, "{\"loss\": 0.2}"));
    must(dt_track_run_end(s, r1, "done", "finished"));
    /* a sweep (the tags src/sweep/run.c writes) whose one trial is run-a */
    int64_t sw;
    must(dt_track_run_begin(s, "exp", "sw", 0, "localhost:1", "", NULL, 0, &sw));
    char parent[32];
    snprintf(parent, sizeof parent, "%lld", (long long)sw);
    const char *const sweep_tags[][2] = {{"sweep.kind", "sweep"},
                                         {"sweep_id", "sw"},
                                         {"sweep.trials", "1"},
                                         {"sweep.metric", "loss"},
                                         {"sweep.mode", "min"},
                                         {"sweep.max_steps", "19"},
                                         {"sweep.param.optim.lr", "log_uniform"}};
    for (size_t i = 0; i < sizeof sweep_tags / sizeof *sweep_tags; i++)
        must(dt_track_tag(s, sw, sweep_tags[i][0], sweep_tags[i][1]));
    const char *const trial_tags[][2] = {{"sweep_id", "sw"},
                                         {"sweep.parent", parent},
                                         {"sweep.trial", "0"},
                                         {"sweep.status", "done"},
                                         {"sweep.step", "19"}};
    for (size_t i = 0; i < sizeof trial_tags / sizeof *trial_tags; i++)
        must(dt_track_tag(s, r1, trial_tags[i][0], trial_tags[i][1]));
    must(dt_track_close(s));
    for (int i = 0; i < 2; i++) {
        dt_serve_opts o = {.addr = "127.0.0.1", .port = 0, .db = db};
        if (i) o.token = "fuzz-token";
        must(dt_serve_open(&o, &g_srv[i]));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_srv[0]) setup();
    if (size < 1) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)dt_serve_port(g_srv[data[0] & 1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = -1;
    /* libFuzzer's timer signal can interrupt connect(), and thousands of connections a second
     * can run out of local ports for a moment: retry on a new socket */
    for (int tries = 0; fd < 0; tries++) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) abort();
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) break;
        if (tries == 1000 || (errno != EINTR && errno != EADDRNOTAVAIL && errno != EAGAIN)) {
            perror("fuzz_http: connect");
            abort();
        }
        close(fd), fd = -1;
        usleep(1000);
    }
    const uint8_t *p = data + 1;
    size_t left = size - 1;
    while (left) {
        ssize_t k = send(fd, p, left, MSG_NOSIGNAL);
        if (k <= 0) break; /* the server may close early on a malformed request */
        p += k, left -= (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    char buf[65536];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
    close(fd);
    return 0;
}
