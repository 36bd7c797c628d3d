/* Opening the files a user names; whole-file reads and writes, paths (src/core/file.h). */
#include "core/file.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
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

static dt_status too_long(const char *path, const char *size, size_t max, const char *what) {
    return dt_error_set(DT_ERR_FORMAT, "%s: %s bytes, more than the %zu-byte limit of %s", path,
                        size, max, what ? what : "this file");
}

static dt_status read_plain(const char *path, size_t max, const char *what, uint8_t **data,
                            size_t *len) {
    int fd;
    dt_status os = dt_file_open_regular(path, O_RDONLY, 0, &fd);
    if (os) return os;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return dt_error_set(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > max) {
        char sz[32];
        snprintf(sz, sizeof sz, "%lld", (long long)st.st_size);
        close(fd);
        return too_long(path, sz, max, what);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return dt_error_set(DT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return dt_error_set(DT_ERR_IO, "%s: read failed at byte %zu: %s", path, got,
                                r < 0 ? strerror(errno) : "unexpected end of file");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *data = buf, *len = n;
    return DT_OK;
}

/* gzread also passes plain files through, so this handles both. The buffer grows with what was
 * inflated, and reading stops one byte past max. */
static dt_status read_gz(const char *path, size_t max, const char *what, uint8_t **data,
                         size_t *len) {
    int fd;
    dt_status os = dt_file_open_regular(path, O_RDONLY, 0, &fd);
    if (os) return os;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return dt_error_set(DT_ERR_NOMEM, "%s: cannot start reading: out of memory", path);
    }
    gzbuffer(f, 1 << 20);
    size_t cap = max < (1u << 20) ? (max < 64 ? 64 : max + 1) : 1 << 20, n = 0;
    uint8_t *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            gzclose(f);
            return dt_error_set(DT_ERR_NOMEM, "%s: out of memory after %zu bytes", path, n);
        }
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2 + 1);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
            continue;
        }
        size_t room = cap - n;
        if (max < SIZE_MAX && room > max + 1 - n) room = max + 1 - n;
        unsigned want = (unsigned)(room > (1u << 30) ? (1u << 30) : room);
        int r = gzread(f, buf + n, want);
        if (r < 0) {
            int e;
            const char *msg = gzerror(f, &e);
            dt_status s = dt_error_set(DT_ERR_FORMAT, "%s: gzip stream corrupt after %zu bytes: %s",
                                       path, n, msg);
            free(buf);
            gzclose(f);
            return s;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max) {
            free(buf);
            gzclose(f);
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: inflates to more than %zu bytes, the limit of %s", path, max,
                                what ? what : "this file");
        }
    }
    /* A truncated gzip member reads as a short stream plus an error flag. */
    int e;
    const char *msg = gzerror(f, &e);
    if (e != Z_OK && e != Z_BUF_ERROR) {
        dt_status s = dt_error_set(DT_ERR_FORMAT, "%s: gzip stream corrupt after %zu bytes: %s",
                                   path, n, msg);
        free(buf);
        gzclose(f);
        return s;
    }
    if (e == Z_BUF_ERROR) {
        free(buf);
        gzclose(f);
        return dt_error_set(DT_ERR_FORMAT, "%s: gzip stream truncated after %zu bytes", path, n);
    }
    gzclose(f);
    buf[n] = 0;
    *data = buf, *len = n;
    return DT_OK;
}

dt_status dt_read_file(const char *path, int gz, uint8_t **data, size_t *len) {
    return dt_read_file_max(path, gz, SIZE_MAX - 1, NULL, data, len);
}

dt_status dt_read_file_max(const char *path, int gz, size_t max, const char *what, uint8_t **data,
                           size_t *len) {
    if (max >= SIZE_MAX) max = SIZE_MAX - 1; /* + 1 for the NUL */
    return gz ? read_gz(path, max, what, data, len) : read_plain(path, max, what, data, len);
}

int dt_plain_name(const char *name) {
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

int dt_path_inside(const char *dir, const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return -1;
    if (!S_ISLNK(st.st_mode)) return 1;
    char *rd = realpath(dir, NULL), *rp = realpath(path, NULL);
    int in = -1;
    if (rd && rp) {
        size_t n = strlen(rd);
        in = !strncmp(rp, rd, n) && (rp[n] == '/' || (n == 1 && rd[0] == '/'));
    }
    free(rd), free(rp);
    return in;
}

dt_status dt_write_file(const char *path, const void *data, size_t len) {
    return dt_file_write_synced(path, data, len);
}

char *dt_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

void dt_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char *c = dt_path_join(path, e->d_name);
                if (c) dt_remove_tree(c);
                free(c);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

int dt_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

char *dt_temp_dir_for(const char *final) {
    size_t n = strlen(final);
    while (n > 1 && final[n - 1] == '/') n--; /* "out/" -> "out.tmp-..." */
    char *t = malloc(n + 16);
    if (!t) {
        dt_error_set(DT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(t, final, n);
    memcpy(t + n, ".tmp-XXXXXX", 12);
    if (!mkdtemp(t)) {
        int e = errno;
        char note[DT_FS_NOTE_LEN];
        dt_error_set(DT_ERR_IO, "%.*s: cannot create a temporary directory beside it: %s%s", (int)n,
                     final, strerror(e), dt_fs_full_note(t, e, note, sizeof note));
        free(t);
        return NULL;
    }
    return t;
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
