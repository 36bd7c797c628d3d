/* `dtrain runs sync`'s replay of a spool file (include/dtrain/mlflow.h): every line is an op
 * (mlflow_impl.h) sent again in order, to the server the line names. The file is locked while
 * it is replayed (the client appends under the same lock), and removed once every line went
 * through; a failure leaves it whole, as replaying a line twice changes nothing on the server. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/file.h"
#include "track/mlflow_impl.h"

/* mkdir -p of the spool's folder */
static void make_parent(const char *path) {
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) return;
    *slash = 0;
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(d, 0777);
            *p = '/';
        }
    mkdir(d, 0777);
}

dt_status mlf_spool_append(const char *spool, const cJSON *op) {
    make_parent(spool);
    char *line = cJSON_PrintUnformatted(op);
    int fd = -1;
    /* under the lock `dtrain runs sync` holds while it replays and removes the file: a file
     * removed while this waited for the lock is opened again */
    for (int i = 0; line && i < 10; i++) {
        if ((fd = open(spool, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) < 0) break;
        struct stat a, b;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 && stat(spool, &b) == 0 &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            break;
        close(fd), fd = -1;
    }
    size_t n = line ? strlen(line) : 0;
    if (line) line[n++] = '\n'; /* cJSON's buffer has room: it ended with the NUL */
    int ok = fd >= 0 && write(fd, line, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0) ok = 0;
    free(line);
    return ok ? DT_OK
              : dt_error_set(DT_ERR_IO, "mlflow spool %s: cannot append: %s", spool, strerror(e));
}

/* A spool line is one request of at most 1000 metrics: far below this. */
#define MAX_SPOOL_BYTES ((size_t)1 << 30)

static dt_status replay(const char *path, char *text, const char *uri, int *sent) {
    mlf_http h = {0};
    char run_id[MLF_RUN_ID_MAX] = "", at[1024] = "";
    dt_status st = DT_OK;
    int line = 0;
    for (char *p = text, *nl; st == DT_OK && *p; p = nl + 1) {
        line++;
        nl = strchr(p, '\n');
        if (!nl) break; /* a line cut short by a crash while it was written: never sent */
        *nl = 0;
        if (!p[0]) continue;
        cJSON *op = cJSON_Parse(p);
        const char *u = uri ? uri : cJSON_GetStringValue(cJSON_GetObjectItem(op, "uri"));
        if (!op || !u) {
            cJSON_Delete(op);
            st = dt_error_set(DT_ERR_FORMAT, "%s line %d: %s", path, line,
                              op ? "no server uri (give one)" : "not a JSON object");
            break;
        }
        if (strcmp(u, at)) {
            mlf_http_free(&h);
            snprintf(at, sizeof at, "%s", u);
            st = mlf_http_init(&h, u, 30);
        }
        if (st == DT_OK) st = mlf_exec(&h, op, run_id);
        cJSON_Delete(op);
        if (st != DT_OK) {
            char msg[1200];
            snprintf(msg, sizeof msg, "%s", dt_last_error());
            st = dt_error_set(st, "%s line %d: %s", path, line, msg);
        } else {
            (*sent)++;
        }
    }
    mlf_http_free(&h);
    return st;
}

dt_status dt_mlflow_sync(const char *spool_path, const char *uri, int *sent) {
    *sent = 0;
    int fd = open(spool_path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return dt_error_set(errno == ENOENT ? DT_ERR_NOTFOUND : DT_ERR_IO, "%s: %s", spool_path,
                            strerror(errno));
    if (flock(fd, LOCK_EX) != 0) {
        int e = errno;
        close(fd);
        return dt_error_set(DT_ERR_IO, "%s: cannot lock: %s", spool_path, strerror(e));
    }
    uint8_t *text = NULL;
    size_t len = 0;
    dt_status st = dt_read_file_max(spool_path, 0, MAX_SPOOL_BYTES, "an MLflow spool", &text, &len);
    if (st == DT_OK) st = replay(spool_path, (char *)text, uri, sent);
    free(text);
    if (st == DT_OK && unlink(spool_path) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: replayed, but cannot remove it: %s", spool_path,
                          strerror(errno));
    close(fd);
    return st;
}
