/* Opening the files a user names: models, datasets, configs, tokenizers, checkpoints, adapters
 * (docs/security.md, "Careless and hostile input: classes searched").
 *
 * A path from the command line, a config or a manifest may name a FIFO, a directory, a device
 * or a socket. Opening a FIFO for reading blocks until a writer comes (for ever, if none does),
 * a device may never end, a directory fails only later and with a puzzling message. These open
 * with O_NONBLOCK (so that open(2) of a FIFO returns at once), check what was opened with
 * fstat -- the open file itself, so nothing can be swapped in between a check and the open --
 * and refuse anything but a regular file before a byte is read; O_NONBLOCK is then cleared. */
#ifndef DTRAIN_CORE_FILE_H
#define DTRAIN_CORE_FILE_H

#include <stdio.h>
#include <sys/types.h>
#include "dtrain/status.h"

/* open(path, flags | O_CLOEXEC | O_NOCTTY [, mode]) of a regular file into *fd. Errors leave
 * *fd = -1, errno set and a one-line message naming the file: "PATH: cannot open: <strerror>"
 * (DT_ERR_IO) or "PATH is a FIFO, not a regular file: name the file itself" (DT_ERR_INVALID;
 * errno EINVAL). `mode` applies when flags hold O_CREAT. */
dt_status dt_file_open_regular(const char *path, int flags, mode_t mode, int *fd);
/* The same relative to the directory dirfd (openat(2)); messages name `path`. */
dt_status dt_file_openat_regular(int dirfd, const char *path, int flags, mode_t mode, int *fd);
/* The same for stdio: fopen(path, "r"/"rb") into *f (reading only). */
dt_status dt_file_fopen_regular(const char *path, const char *mode, FILE **f);
/* "a FIFO", "a directory", "a socket", ... for an st_mode that is not a regular file. */
const char *dt_file_kind(mode_t st_mode);

/* Writing files that must never be seen half-written (docs/security.md, "Disk full").
 *
 * dt_file_write_synced: `path` (created 0640 less the umask, or truncated) gets len bytes, then
 * fsync(2) and close -- a full disk (ENOSPC) or quota (EDQUOT) can show up at write, at fsync
 * (delayed allocation, NFS) or at close: all are checked. For a file in a temporary folder that
 * is renamed into place later. Errors: "PATH: write failed at byte N: No space left on device
 * (tmpfs at /mnt/x: 0 B of 64 KiB free)" (DT_ERR_IO; the note from core/fsinfo.h only for a
 * full disk). */
dt_status dt_file_write_synced(const char *path, const void *data, size_t len);
/* path gets exactly `data` or stays as it was: written whole to "<path>.tmp.<pid>" beside it
 * (dt_file_write_synced), then renamed over path. On any error the temporary file is removed
 * and the message names it and why. */
dt_status dt_file_write_atomic(const char *path, const void *data, size_t len);

#endif
