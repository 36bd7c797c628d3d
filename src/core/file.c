/* Opening the files a user names (src/core/file.h). */
#include "core/file.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dt_file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISREG(m)  ? "a regular file"
                         : "not a file";
}

dt_status dt_file_open_regular(const char *path, int flags, mode_t mode, int *fd) {
    return dt_file_openat_regular(AT_FDCWD, path, flags, mode, fd);
}

dt_status dt_file_openat_regular(int dirfd, const char *path, int flags, mode_t mode, int *fd) {
    *fd = -1;
    /* O_NONBLOCK: open(2) of a FIFO without a writer returns at once instead of waiting */
    int f = openat(dirfd, path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
    if (f < 0) {
        int e = errno;
        dt_status s = dt_error_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return s;
    }
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        dt_status s = dt_error_set(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
        errno = e;
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        dt_status s =
            dt_error_set(DT_ERR_INVALID, "%s is %s, not a regular file: name the file itself", path,
                         dt_file_kind(st.st_mode));
        errno = EINVAL;
        return s;
    }
    /* reads and writes of a regular file block as usual from here on */
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        dt_status s = dt_error_set(DT_ERR_IO, "%s: fcntl: %s", path, strerror(e));
        errno = e;
        return s;
    }
    *fd = f;
    return DT_OK;
}

dt_status dt_file_fopen_regular(const char *path, const char *mode, FILE **f) {
    *f = NULL;
    if (mode[0] != 'r' || strchr(mode, '+'))
        return dt_error_set(DT_ERR_INVALID, "%s: dt_file_fopen_regular opens for reading only",
                            path);
    int fd;
    dt_status s = dt_file_open_regular(path, O_RDONLY, 0, &fd);
    if (s) return s;
    *f = fdopen(fd, mode);
    if (!*f) {
        int e = errno;
        close(fd);
        s = dt_error_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        errno = e;
    }
    return s;
}
