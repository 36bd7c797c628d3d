/* /metrics' per-worker gauges: a run's batch_part.R and compute_rate.R metrics (logged by the
 * trainer under dist.batch_shares) become dtrain_batch_part{...,rank="R"} and
 * dtrain_compute_rate{...,rank="R"} with the newest values, and gpu_mem.R / gpu_mem_peak.R
 * (train.device=cuda) dtrain_gpu_memory_bytes / _peak_bytes, and device.R (-1 the CPU, else the
 * CUDA index) dtrain_worker_device_info with a device label; keys that only look alike do not. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "dtrain/serve.h"
#include "dtrain/track.h"
#include "harness.h"

/* GET path from 127.0.0.1:port into a malloc'd NUL-terminated string (NULL on failure). */
static char *http_get(int port, const char *path) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && (got = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)got;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    close(fd);
    if (buf) buf[len] = '\0';
    return buf;
}

int main(void) {
    char dir[] = "/tmp/dt_prom_ranks_XXXXXX", db[256];
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp")) return dt_test_finish("test_prom_ranks");
    snprintf(db, sizeof db, "%s/dtrain.db", dir);
    dt_track *s = NULL;
    int64_t run = 0;
    CHECK_OK(dt_track_open(db, &s));
    CHECK_OK(dt_track_run_begin(s, "exp", "auto-run", 2, "h:2", "", NULL, 0, &run));
    double w = dt_track_wall();
    CHECK_OK(dt_track_metric(s, run, "loss", 5, w, 2.5));
    CHECK_OK(dt_track_metric(s, run, "batch_part.0", 5, w, 4));
    CHECK_OK(dt_track_metric(s, run, "batch_part.1", 5, w, 4));
    CHECK_OK(dt_track_metric(s, run, "loss", 10, w + 1, 2.0));
    CHECK_OK(dt_track_metric(s, run, "batch_part.0", 10, w + 1, 6));
    CHECK_OK(dt_track_metric(s, run, "batch_part.1", 10, w + 1, 2));
    CHECK_OK(dt_track_metric(s, run, "compute_rate.0", 10, w + 1, 94.5));
    CHECK_OK(dt_track_metric(s, run, "compute_rate.1", 10, w + 1, 28.25));
    CHECK_OK(dt_track_metric(s, run, "batch_part.x", 10, w + 1, 99));
    CHECK_OK(dt_track_metric(s, run, "gpu_mem.0", 10, w + 1, 3.25e9));
    CHECK_OK(dt_track_metric(s, run, "gpu_mem.1", 10, w + 1, 2.5e9));
    CHECK_OK(dt_track_metric(s, run, "gpu_mem_peak.0", 10, w + 1, 4e9));
    CHECK_OK(dt_track_metric(s, run, "gpu_mem_peak.1", 10, w + 1, 3e9));
    CHECK_OK(dt_track_metric(s, run, "device.0", 5, w, -1));
    CHECK_OK(dt_track_metric(s, run, "device.0", 10, w + 1, 1));
    CHECK_OK(dt_track_metric(s, run, "device.1", 10, w + 1, -1));
    CHECK_OK(dt_track_close(s));
    dt_serve *sv = NULL;
    dt_serve_opts o = {.db = db, .port = 0};
    CHECK_OK(dt_serve_open(&o, &sv));
    char *text = sv ? http_get(dt_serve_port(sv), "/metrics") : NULL;
    int all = 1;
    if (CHECK(text != NULL, "GET /metrics answered")) {
        static const char *const want[] = {
            "# TYPE dtrain_batch_part gauge",
            "dtrain_batch_part{experiment=\"exp\",run=\"auto-run\",rank=\"0\"} 6\n",
            "dtrain_batch_part{experiment=\"exp\",run=\"auto-run\",rank=\"1\"} 2\n",
            "# TYPE dtrain_compute_rate gauge",
            "dtrain_compute_rate{experiment=\"exp\",run=\"auto-run\",rank=\"0\"} 94.5\n",
            "dtrain_compute_rate{experiment=\"exp\",run=\"auto-run\",rank=\"1\"} 28.25\n",
            "# TYPE dtrain_gpu_memory_bytes gauge",
            "dtrain_gpu_memory_bytes{experiment=\"exp\",run=\"auto-run\",rank=\"0\"} 3250000000\n",
            "dtrain_gpu_memory_bytes{experiment=\"exp\",run=\"auto-run\",rank=\"1\"} 2500000000\n",
            "dtrain_gpu_memory_peak_bytes{experiment=\"exp\",run=\"auto-run\",rank=\"0\"} "
            "4000000000\n",
            "dtrain_gpu_memory_peak_bytes{experiment=\"exp\",run=\"auto-run\",rank=\"1\"} "
            "3000000000\n",
            "# TYPE dtrain_worker_device_info gauge",
            "dtrain_worker_device_info{experiment=\"exp\",run=\"auto-run\",rank=\"0\","
            "device=\"cuda:1\"} 1\n",
            "dtrain_worker_device_info{experiment=\"exp\",run=\"auto-run\",rank=\"1\","
            "device=\"cpu\"} 1\n"};
        for (size_t i = 0; i < sizeof want / sizeof *want; i++)
            all &= CHECK(strstr(text, want[i]) != NULL, "/metrics has %s", want[i]);
        all &= CHECK(!strstr(text, " 99\n"), "batch_part.x is no rank's part");
        all &= CHECK(!strstr(text, "rank=\"2\""), "no rank 2");
        all &= CHECK(!strstr(text, "rank=\"0\",device=\"cpu\""), "rank 0's newest device");
        if (!all) fputs(text, stdout);
    }
    free(text);
    dt_serve_close(sv);
    unlink(db);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return dt_test_finish("test_prom_ranks");
}
