/* File modes and secret files (src/core/fsmode.h). */
#include "core/fsmode.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *dt_fcreate(const char *path, const char *mode) {
    int app = mode[0] == 'a';
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (app ? O_APPEND : O_TRUNC), DT_FILE_MODE);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

mode_t dt_umask_get(void) {
    /* "Umask:\t0022" since Linux 4.7: no window in which another thread creates files with a
     * umask of 0 */
    FILE *f = fopen("/proc/self/status", "re");
    if (f) {
        char line[256];
        unsigned m;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "Umask: %o", &m) == 1) {
                fclose(f);
                return (mode_t)(m & 0777);
            }
        fclose(f);
    }
    mode_t m = umask(077);
    umask(m);
    return m;
}

int dt_chmod_umask(const char *path, mode_t mode) {
    return chmod(path, mode & ~dt_umask_get());
}

dt_status dt_secret_file_read(const char *path, const char *what, char *buf, size_t cap,
                              size_t *len) {
    if (len) *len = 0;
    if (cap) buf[0] = '\0';
    /* O_NONBLOCK: a FIFO is refused below rather than waited on */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return dt_error_set(e == ENOENT ? DT_ERR_NOTFOUND : DT_ERR_IO, "%s: %s: cannot open: %s",
                            what, path, strerror(e));
    }
    /* the checks are on the open file, so a file swapped in after them is never read */
    struct stat st;
    dt_status s = DT_OK;
    if (fstat(fd, &st) != 0)
        s = dt_error_set(DT_ERR_IO, "%s: %s: %s", what, path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = dt_error_set(DT_ERR_INVALID, "%s: %s is not a regular file", what, path);
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        s = dt_error_set(DT_ERR_IO, "%s: %s: %s", what, path, strerror(errno));
    else if (st.st_uid != geteuid() && st.st_uid != 0)
        s = dt_error_set(DT_ERR_INVALID,
                         "%s: %s is owned by uid %u, not by this user (uid %u): not used", what,
                         path, (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & 077)
        s = dt_error_set(DT_ERR_INVALID,
                         "%s: %s has mode %04o: group or others may read or write it, so it is "
                         "not used (chmod 600 %s)",
                         what, path, (unsigned)(st.st_mode & 07777), path);
    else if ((size_t)st.st_size >= cap)
        s = dt_error_set(DT_ERR_INVALID, "%s: %s: %lld bytes, more than the %zu expected", what,
                         path, (long long)st.st_size, cap - 1);
    size_t n = 0;
    while (s == DT_OK && n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            s = dt_error_set(DT_ERR_IO, "%s: %s: read failed: %s", what, path, strerror(errno));
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (s != DT_OK) {
        explicit_bzero(buf, cap);
        return s;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return DT_OK;
}
