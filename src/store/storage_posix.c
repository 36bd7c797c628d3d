/* POSIX storage: a directory tree on local disk or a mounted distributed file system (NFS,
 * HopsFS/HDFS fuse mounts). A put writes "<key>.tmp-<pid>-<n>" in the key's directory, fsyncs
 * it, renames it over the key (atomic within a directory) and fsyncs the directory so the
 * rename itself survives a crash. Folders are made DT_DIR_MODE (0750) and files DT_FILE_MODE
 * (0640), less the umask: checkpoints are readable by the owner's group, never by others. Keys
 * are resolved from the root's descriptor one folder at a time, following no symbolic link
 * (open_parent).
 *
 * Large puts (checkpoint files) bypass the page cache: a buffered write() costs about one CPU
 * second per GB in the kernel (copying into page-cache folios), taken from the training threads
 * that share the cores with the checkpoint writer, and the pages are then written back anyway by
 * the fsync. With O_DIRECT the device reads the caller's buffer itself (~0.02 CPU-s/GB) at the
 * same bandwidth. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "store/storage_impl.h"
#include "core/fsinfo.h"
#include "core/file.h"
#include "core/fsmode.h"

typedef struct posix_store {
    char root[4096];
    /* dt_store_get_stream's chunk buffers, kept for the store's life: a restore's second file
     * (and the next restore) pays no allocation and no page faults. One stream at a time uses
     * them (try-lock); a concurrent one allocates its own. */
    pthread_mutex_t rd_mu;
    char *rd_buf;
    size_t rd_cap;
} posix_store;

static const char *root(dt_store *s) {
    return ((posix_store *)s->impl)->root;
}

static dt_status mkdirs(const char *path, const char *url) {
    char p[4400];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST)
            return dt_error_set(DT_ERR_IO, "storage: %s: cannot create directory %s: %s", url, p,
                                strerror(errno));
        *c = '/';
    }
    if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST)
        return dt_error_set(DT_ERR_IO, "storage: %s: cannot create directory %s: %s", url, p,
                            strerror(errno));
    return DT_OK;
}

/* Symbolic links below the root are never followed: a key is resolved one component at a time
 * from the root's descriptor with O_NOFOLLOW (fd-relative, so nothing can be swapped between a
 * check and a use), and a link anywhere on the way fails with ELOOP. Someone who can write into
 * a checkpoint folder can then not make a restore read, a save write or retention delete a file
 * elsewhere. The root itself may be a link (a mount point reached through one is common). */

/* name in the folder fd is a symbolic link (openat with O_DIRECTORY | O_NOFOLLOW says ENOTDIR). */
static int is_link(int fd, const char *name) {
    struct stat sb;
    return fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode);
}

/* Opens the folder that holds key (read-only: enough for openat, fsync and unlinkat), making
 * missing folders when create; *base is key's last component. Returns a descriptor, or -1 with
 * errno: ELOOP for a link on the way, EINVAL for an empty, "." or ".." component. */
static int open_parent(dt_store *s, const char *key, int create, const char **base) {
    int fd = open(root(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *c = key;
    for (const char *slash; fd >= 0 && (slash = strchr(c, '/')); c = slash + 1) {
        char name[256];
        size_t l = (size_t)(slash - c);
        int nfd = -1, e = EINVAL;
        if (l > 0 && l < sizeof name) {
            memcpy(name, c, l), name[l] = 0;
            if (strcmp(name, ".") && strcmp(name, "..")) {
                if (create && mkdirat(fd, name, DT_DIR_MODE) != 0 && errno != EEXIST)
                    e = errno;
                else if ((nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
                         0)
                    e = errno == ENOTDIR && is_link(fd, name) ? ELOOP : errno;
            }
        }
        close(fd);
        fd = nfd, errno = nfd < 0 ? e : errno;
    }
    if (fd >= 0 && (!*c || !strcmp(c, ".") || !strcmp(c, ".."))) close(fd), fd = -1, errno = EINVAL;
    *base = c;
    return fd;
}

/* The message for a failed open_parent or an open below it. */
static const char *why(int e) {
    return e == ELOOP    ? "a symbolic link below the store's root (links are not followed)"
           : e == EINVAL ? "not a valid key (empty, \".\" or \"..\" component)"
                         : strerror(e);
}

/* Puts of at least DIRECT_MIN bytes from a DIRECT_ALIGN-aligned buffer, with fsync on, write
 * their whole blocks with O_DIRECT (checkpoint snapshots are allocated aligned for this). With
 * fsync off the caller did not ask to wait for the disk, and buffered writes return sooner;
 * small puts are not worth a second open. 4096 covers the logical block size of nearly every
 * device; where it does not (or the file system refuses O_DIRECT: tmpfs before Linux 6.6, some
 * FUSE mounts), the put falls back to buffered writes.
 *
 * Gets stay buffered: O_DIRECT reads measured half the bandwidth of buffered ones (no
 * read-ahead), and reading into transparent huge pages (MADV_HUGEPAGE) was faster on a warm
 * system but 3-7x slower on the first large read of a process (the trainer's resume). */
enum { DIRECT_MIN = 8 << 20, DIRECT_ALIGN = 4096, DIRECT_CHUNK = 64 << 20 };

/* Writes p [n] at offset off; 0 or an errno. */
static int write_at(int fd, const char *p, size_t n, off_t off) {
    while (n) {
        ssize_t w = pwrite(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n, off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : ENOSPC;
        p += w, n -= (size_t)w, off += w;
    }
    return 0;
}

/* The O_DIRECT part of a put: bulk bytes (a multiple of DIRECT_ALIGN) from the start of p into
 * the file tmp (already created). Returns how many bytes it wrote, stopping at the first
 * refusal or error (the caller writes the rest through the page cache: a real I/O error shows
 * there again, and is reported; a refusal costs nothing but the fallback). */
static size_t write_direct(int dfd, const char *tmp, const char *p, size_t bulk) {
    int fd = openat(dfd, tmp, O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0; /* EINVAL: no O_DIRECT on this file system */
    size_t done = 0;
    while (done < bulk) {
        size_t n = bulk - done < DIRECT_CHUNK ? bulk - done : DIRECT_CHUNK;
        ssize_t w = pwrite(fd, p + done, n, (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
        if ((size_t)w % DIRECT_ALIGN) break; /* a short write: offsets are unaligned from here */
    }
    close(fd); /* nothing cached to flush; the fsync of the file covers these blocks */
    return done;
}

/* How often a put makes its folder again when a concurrent delete removed it (below). */
enum { PUT_FOLDER_TRIES = 8 };

static dt_status posix_put(dt_store *s, const char *key, const void *data, size_t n) {
    static atomic_long counter;
    const char *base;
    char tmp[512];
    int dfd = -1, fd = -1;
    /* A delete removes the folders it leaves empty (posix_del), so another process's delete
     * (another rank's probe, retention) can remove the folder this put has just made or opened
     * and not yet written into: the create then fails with ENOENT, and the folder is made
     * again. Once the temporary file is in it, the folder is not empty and stays. */
    for (int k = 0; k < PUT_FOLDER_TRIES; k++) {
        if ((dfd = open_parent(s, key, 1, &base)) < 0) {
            if (errno == ENOENT && k + 1 < PUT_FOLDER_TRIES) continue;
            return dt_error_set(DT_ERR_IO, "storage put: %s: %s: %s", s->url, key, why(errno));
        }
        snprintf(tmp, sizeof tmp, "%.255s.tmp-%ld-%ld", base, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, DT_FILE_MODE);
        if (fd >= 0) break;
        int e = errno;
        close(dfd);
        if (e == ENOENT && k + 1 < PUT_FOLDER_TRIES) continue;
        return dt_error_set(DT_ERR_IO, "storage put: %s: cannot create %s in the folder of %s: %s",
                            s->url, tmp, key, why(e));
    }
    const char *p = data;
    size_t done = 0;
    if (s->opts.fsync && n >= DIRECT_MIN && (uintptr_t)p % DIRECT_ALIGN == 0)
        done = write_direct(dfd, tmp, p, n / DIRECT_ALIGN * DIRECT_ALIGN);
    /* the rest (the unaligned tail, or everything) through the page cache */
    int e = write_at(fd, p + done, n - done, (off_t)done);
    const char *what = "writing";
    if (!e) {
        what = "flushing";
        e = s->opts.fsync && fsync(fd) != 0 ? errno : 0;
    }
    if (close(fd) != 0 && !e) e = errno;
    /* rename replaces a link at the key itself, never the file it points to */
    if (!e && renameat(dfd, tmp, dfd, base) != 0) e = errno, what = "renaming into";
    if (e) {
        unlinkat(dfd, tmp, 0);
        close(dfd);
        char note[DT_FS_NOTE_LEN]; /* a full disk or quota: which file system, how full */
        return dt_error_set(DT_ERR_IO, "storage put: %s: %s %s: %s%s", s->url, what, key,
                            strerror(e), dt_fs_full_note(root(s), e, note, sizeof note));
    }
    /* the folder synced too, so the rename itself survives a crash */
    e = s->opts.fsync && fsync(dfd) != 0 ? errno : 0;
    close(dfd);
    if (e)
        return dt_error_set(DT_ERR_IO, "storage put: %s: syncing the directory of %s: %s", s->url,
                            key, strerror(e));
    return DT_OK;
}

/* Opens key for reading: fd and size; errors as posix_get's. */
static dt_status open_read(dt_store *s, const char *key, int *fd_out, size_t *size) {
    const char *base;
    int dfd = open_parent(s, key, 0, &base), fd = -1;
    if (dfd >= 0) {
        /* O_NONBLOCK: a FIFO put in a checkpoint is refused below instead of waited on */
        fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        int e = errno;
        close(dfd);
        errno = e;
    }
    if (fd < 0)
        return dt_error_set(errno == ENOENT ? DT_ERR_NOTFOUND : DT_ERR_IO,
                            "storage get: %s: %s: %s", s->url, key, why(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int dir = fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode);
        close(fd);
        return dt_error_set(dir ? DT_ERR_NOTFOUND : DT_ERR_IO,
                            "storage get: %s/%s is %s, not a regular file", s->url, key,
                            dt_file_kind(sb.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return dt_error_set(DT_ERR_IO, "storage get: %s: %s: %s", s->url, key, strerror(e));
    }
    *fd_out = fd, *size = (size_t)sb.st_size;
    return DT_OK;
}

/* Reads exactly size bytes of fd into buf; closes fd. */
static dt_status read_all(dt_store *s, const char *key, int fd, char *buf, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t r =
            read(fd, buf + got, size - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            return dt_error_set(DT_ERR_IO, "storage get: %s: %s: %s", s->url, key,
                                e ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    return DT_OK;
}

/* Into the caller's (reused, already resident) buffer: a restore then pays no page faults. */
static dt_status posix_get_into(dt_store *s, const char *key, void *buf, size_t cap, size_t *n) {
    int fd;
    size_t size;
    dt_status st = open_read(s, key, &fd, &size);
    if (st != DT_OK) return st;
    if (size > cap) {
        close(fd);
        return dt_error_set(DT_ERR_RANGE, "storage get: %s: %s: %zu bytes, more than expected",
                            s->url, key, size);
    }
    if ((st = read_all(s, key, fd, buf, size)) != DT_OK) return st;
    *n = size;
    return DT_OK;
}

static dt_status posix_get_range(dt_store *s, const char *key, uint64_t off, size_t len, void *buf,
                                 size_t *got) {
    int fd;
    size_t size;
    dt_status st = open_read(s, key, &fd, &size);
    if (st != DT_OK) return st;
    size_t want = off >= size ? 0 : (size - off < len ? size - (size_t)off : len);
    *got = 0;
    while (*got < want) {
        ssize_t r = pread(fd, (char *)buf + *got, want - *got, (off_t)(off + *got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = dt_error_set(DT_ERR_IO, "storage get: %s: %s: read at byte %" PRIu64 ": %s",
                              s->url, key, off + *got, r < 0 ? strerror(errno) : "file shrank");
            break;
        }
        *got += (size_t)r;
    }
    close(fd);
    return st;
}

static dt_status posix_get(dt_store *s, const char *key, void **data, size_t *n) {
    int fd;
    size_t size;
    dt_status st = open_read(s, key, &fd, &size);
    if (st != DT_OK) return st;
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return dt_error_set(DT_ERR_NOMEM, "storage get: %s: %s: out of memory for %zu bytes",
                            s->url, key, size);
    }
    if ((st = read_all(s, key, fd, buf, size)) != DT_OK) {
        free(buf);
        return st;
    }
    *data = buf, *n = size;
    return DT_OK;
}

/* ---- streaming reads ----------------------------------------------------------------------
 * A restore reads each file once and hashes and scatters it as the bytes arrive. A reader thread
 * read()s the file into STREAM_NBUF rotating chunk buffers -- the page-cache copy, most of a
 * buffered read's CPU time, on the second core -- while the caller's thread consumes the chunk
 * before (hash + copy into place, from cache: a chunk of a few MiB stays in L2/L3). Kernel
 * read-ahead keeps the disk busy ahead of both (POSIX_FADV_SEQUENTIAL widens its window). */
enum { STREAM_NBUF = 3 };

typedef struct stream {
    int fd;
    size_t size, chunk, nchunks;
    char *buf; /* STREAM_NBUF * chunk bytes */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t filled, consumed; /* chunks: [consumed, filled) are ready for the consumer */
    int err;                 /* the reader's errno, or -1: the file ended early */
    int stop;                /* the consumer gave up */
} stream;

/* Reads exactly n bytes at fd's position into p: 0, an errno, or -1 at an early end of file. */
static int read_full(int fd, char *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

static size_t chunk_len(const stream *r, size_t k) {
    size_t off = k * r->chunk;
    return r->size - off < r->chunk ? r->size - off : r->chunk;
}

static char *chunk_buf(const stream *r, size_t k) {
    return r->buf + (k % STREAM_NBUF) * r->chunk;
}

static void *stream_reader(void *arg) {
    stream *r = arg;
    for (size_t k = 0; k < r->nchunks; k++) {
        pthread_mutex_lock(&r->mu);
        while (r->filled - r->consumed == STREAM_NBUF && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop) break;
        int e = read_full(r->fd, chunk_buf(r, k), chunk_len(r, k));
        pthread_mutex_lock(&r->mu);
        if (e)
            r->err = e;
        else
            r->filled++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (e) break;
    }
    return NULL;
}

static dt_status stream_err(dt_store *s, const char *key, int e) {
    return dt_error_set(DT_ERR_IO, "storage get: %s: %s: %s", s->url, key,
                        e > 0 ? strerror(e) : "file shrank while reading");
}

/* Consumes r's chunks on this thread while stream_reader fills them on another. */
static dt_status stream_threaded(dt_store *s, const char *key, stream *r, dt_store_chunk_fn fn,
                                 void *ud, pthread_t th) {
    dt_status st = DT_OK;
    for (size_t k = 0; k < r->nchunks && st == DT_OK; k++) {
        pthread_mutex_lock(&r->mu);
        while (r->filled == k && !r->err) pthread_cond_wait(&r->cv, &r->mu);
        int e = r->filled > k ? 0 : r->err;
        pthread_mutex_unlock(&r->mu);
        if (e) {
            st = stream_err(s, key, e);
            break;
        }
        st = fn(ud, k * r->chunk, chunk_buf(r, k), chunk_len(r, k));
        pthread_mutex_lock(&r->mu);
        r->consumed++;
        if (st != DT_OK) r->stop = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&r->mu);
    r->stop = 1; /* an error above: the reader must not wait for a consumer that left */
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(th, NULL);
    return st;
}

static dt_status posix_get_stream(dt_store *s, const char *key, size_t max_bytes, size_t chunk,
                                  dt_store_chunk_fn fn, void *ud, size_t *total) {
    posix_store *p = s->impl;
    stream r = {.chunk = chunk};
    dt_status st = open_read(s, key, &r.fd, &r.size);
    if (st != DT_OK) return st;
    if (r.size > max_bytes) {
        close(r.fd);
        return dt_error_set(DT_ERR_RANGE, "storage get: %s: %s: %zu bytes, more than expected",
                            s->url, key, r.size);
    }
    r.nchunks = (r.size + chunk - 1) / chunk;
    int threaded = r.nchunks > 1;
    size_t need = threaded ? STREAM_NBUF * chunk : r.size;
    /* the store's buffers if no other stream holds them, else this call's own */
    int shared = need && pthread_mutex_trylock(&p->rd_mu) == 0;
    char *own = NULL;
    if (shared && p->rd_cap < need) {
        free(p->rd_buf);
        p->rd_buf = malloc(need);
        p->rd_cap = p->rd_buf ? need : 0;
    }
    r.buf = shared ? p->rd_buf : need ? (own = malloc(need)) : NULL;
    if (need && !r.buf) {
        if (shared) pthread_mutex_unlock(&p->rd_mu);
        close(r.fd);
        return dt_error_set(DT_ERR_NOMEM, "storage get: %s: %s: out of memory for %zu bytes",
                            s->url, key, need);
    }
    pthread_t th;
    if (threaded) {
        posix_fadvise(r.fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* advice: failure changes nothing */
        pthread_mutex_init(&r.mu, NULL);
        pthread_cond_init(&r.cv, NULL);
        if (pthread_create(&th, NULL, stream_reader, &r) == 0) {
            st = stream_threaded(s, key, &r, fn, ud, th);
        } else { /* no thread: one chunk at a time on this one */
            for (size_t k = 0; k < r.nchunks && st == DT_OK; k++) {
                int e = read_full(r.fd, r.buf, chunk_len(&r, k));
                st = e ? stream_err(s, key, e) : fn(ud, k * chunk, r.buf, chunk_len(&r, k));
            }
        }
        pthread_mutex_destroy(&r.mu);
        pthread_cond_destroy(&r.cv);
    } else if (r.size) {
        int e = read_full(r.fd, r.buf, r.size);
        st = e ? stream_err(s, key, e) : fn(ud, 0, r.buf, r.size);
    }
    close(r.fd);
    if (shared) pthread_mutex_unlock(&p->rd_mu);
    free(own);
    if (st == DT_OK) *total = r.size;
    return st;
}

static dt_status posix_stat(dt_store *s, const char *key, size_t *n) {
    const char *base;
    struct stat sb;
    int dfd = open_parent(s, key, 0, &base), r = -1;
    if (dfd >= 0) {
        r = fstatat(dfd, base, &sb, AT_SYMLINK_NOFOLLOW);
        int e = r != 0 ? errno : S_ISLNK(sb.st_mode) ? ELOOP : 0;
        close(dfd);
        errno = e, r = e ? -1 : 0;
    }
    if (r != 0)
        return dt_error_set(errno == ENOENT ? DT_ERR_NOTFOUND : DT_ERR_IO,
                            "storage stat: %s: %s: %s", s->url, key, why(errno));
    if (S_ISDIR(sb.st_mode))
        return dt_error_set(DT_ERR_NOTFOUND, "storage stat: %s: %s: not a file", s->url, key);
    if (!S_ISREG(sb.st_mode)) /* a FIFO, device or socket: not "missing", and never read */
        return dt_error_set(DT_ERR_IO, "storage stat: %s/%s is %s, not a regular file", s->url, key,
                            dt_file_kind(sb.st_mode));
    *n = (size_t)sb.st_size;
    return DT_OK;
}

/* Recursive walk of the folder dfd (root/rel; the walk owns dfd); keys are rel paths. Skips
 * temporaries of in-flight puts, and links: only real folders and files below the root count. */
static dt_status walk(dt_store *s, int dfd, const char *rel, const char *prefix, char ***keys,
                      int *n, int *cap) {
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return dt_error_set(DT_ERR_IO, "storage list: %s: %s: %s", s->url, *rel ? rel : "/",
                            strerror(e));
    }
    dt_status st = DT_OK;
    struct dirent *e;
    while (st == DT_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        /* Temporaries of puts in flight are not objects yet. One whose writer is dead (on this
         * host: a killed save) is an orphan: listed, so that retention removes it. */
        const char *tm = strstr(e->d_name, ".tmp-");
        if (tm) {
            long pid = atol(tm + 5);
            if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        }
        char k[4400];
        snprintf(k, sizeof k, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        size_t pl = strlen(prefix), kl = strlen(k);
        /* descend only where the prefix can still match */
        if (strncmp(k, prefix, kl < pl ? kl : pl) != 0) continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue; /* removed */
        if (S_ISDIR(sb.st_mode)) {
            int cfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd >= 0) st = walk(s, cfd, k, prefix, keys, n, cap);
        } else if (S_ISREG(sb.st_mode) && kl >= pl) {
            st = dt_store_list_add(keys, n, cap, k);
        }
    }
    closedir(d);
    return st;
}

static dt_status posix_list(dt_store *s, const char *prefix, char ***keys, int *n, int *cap) {
    int fd = open(root(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return DT_OK;
        return dt_error_set(DT_ERR_IO, "storage list: %s: %s", s->url, strerror(errno));
    }
    return walk(s, fd, "", prefix, keys, n, cap);
}

static dt_status posix_del(dt_store *s, const char *key) {
    const char *base;
    int dfd = open_parent(s, key, 0, &base);
    if (dfd < 0) {
        if (errno == ENOENT) return DT_OK; /* its folder is gone: so is the key */
        return dt_error_set(DT_ERR_IO, "storage delete: %s: %s: %s", s->url, key, why(errno));
    }
    /* a link at the key is removed itself; the file it points to is not touched */
    int r = unlinkat(dfd, base, 0), e = errno;
    close(dfd);
    if (r != 0 && e != ENOENT)
        return dt_error_set(DT_ERR_IO, "storage delete: %s: %s: %s", s->url, key, strerror(e));
    /* remove folders left empty, up to the root: "a/b/c" -> rmdir a/b, then a */
    char dir[4400];
    snprintf(dir, sizeof dir, "%s", key);
    for (char *slash; (slash = strrchr(dir, '/'));) {
        *slash = 0;
        if ((dfd = open_parent(s, dir, 0, &base)) < 0) break;
        r = unlinkat(dfd, base, AT_REMOVEDIR);
        close(dfd);
        if (r != 0) break; /* not empty (or gone): stop */
    }
    return DT_OK;
}

static void posix_close(dt_store *s) {
    posix_store *p = s->impl;
    pthread_mutex_destroy(&p->rd_mu);
    free(p->rd_buf);
    free(p);
}

static const dt_store_ops posix_ops = {
    "posix",   posix_put,   posix_get,      posix_stat,       posix_list,
    posix_del, posix_close, posix_get_into, posix_get_stream, posix_get_range};

dt_status dt_store_posix_open(dt_store *s, const char *path) {
    if (!*path) return dt_error_set(DT_ERR_INVALID, "storage open: %s: empty path", s->url);
    posix_store *p = calloc(1, sizeof *p);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "storage open: out of memory");
    snprintf(p->root, sizeof p->root, "%s", path);
    size_t l = strlen(p->root);
    while (l > 1 && p->root[l - 1] == '/') p->root[--l] = 0;
    dt_status st = mkdirs(p->root, s->url);
    if (st != DT_OK) {
        free(p);
        return st;
    }
    pthread_mutex_init(&p->rd_mu, NULL);
    s->ops = &posix_ops, s->impl = p;
    return DT_OK;
}
