/* Opening the files a user names (src/core/file.h). */
#include "core/file.h"
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsinfo.h"
#include "core/fsmode.h"

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

/* len bytes to fd, then fsync; errors name path (the note of a full disk included) */
static dt_status write_all(int fd, const char *path, const void *data, size_t len) {
    const unsigned char *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t r = write(fd, p + done, len - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : ENOSPC; /* write(2) of 0 bytes: nothing more fits */
            char note[DT_FS_NOTE_LEN];
            return dt_error_set(DT_ERR_IO, "%s: write failed at byte %zu: %s%s", path, done,
                                strerror(e), dt_fs_full_note(path, e, note, sizeof note));
        }
        done += (size_t)r;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        char note[DT_FS_NOTE_LEN];
        return dt_error_set(DT_ERR_IO, "%s: write failed (fsync): %s%s", path, strerror(e),
                            dt_fs_full_note(path, e, note, sizeof note));
    }
    return DT_OK;
}

dt_status dt_file_write_synced(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, DT_FILE_MODE);
    if (fd < 0) {
        int e = errno;
        char note[DT_FS_NOTE_LEN];
        return dt_error_set(DT_ERR_IO, "%s: cannot create: %s%s", path, strerror(e),
                            dt_fs_full_note(path, e, note, sizeof note));
    }
    dt_status st = write_all(fd, path, data, len);
    if (close(fd) != 0 && st == DT_OK) {
        int e = errno;
        char note[DT_FS_NOTE_LEN];
        st = dt_error_set(DT_ERR_IO, "%s: close failed: %s%s", path, strerror(e),
                          dt_fs_full_note(path, e, note, sizeof note));
    }
    return st;
}

dt_status dt_file_write_atomic(const char *path, const void *data, size_t len) {
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
        return dt_error_set(DT_ERR_INVALID, "%s: path too long", path);
    dt_status st = dt_file_write_synced(tmp, data, len);
    if (st == DT_OK && rename(tmp, path) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp,
                          strerror(errno));
    if (st != DT_OK) unlink(tmp);
    return st;
}
