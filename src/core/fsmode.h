/* Who may read what dtrain writes, and how it reads secrets (docs/security.md, "Secrets and
 * files").
 *
 * Every folder dtrain creates (run directories, checkpoints, the experiment store's folder,
 * datasets, exports) is made with DT_DIR_MODE and every file with DT_FILE_MODE: the owner reads
 * and writes, the group may read (project groups sharing runs on NFS are common), others get
 * nothing. The umask still applies on top (a umask of 077 makes them private to the owner). */
#ifndef DTRAIN_CORE_FSMODE_H
#define DTRAIN_CORE_FSMODE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include "dtrain/status.h"

#define DT_DIR_MODE 0750
#define DT_FILE_MODE 0640

/* fopen(path, mode) for writing ("w", "wb", "a", "ab") that creates a new file DT_FILE_MODE
 * (less the umask) rather than fopen's 0666. NULL with errno set on failure. */
FILE *dt_fcreate(const char *path, const char *mode);

/* The process's umask, read without changing it (Linux: /proc/self/status; elsewhere the
 * umask(0)/umask(old) pair, which is not thread-safe). */
mode_t dt_umask_get(void);
/* chmod(path, mode & ~umask): for a file or folder made by code that does not take a mode
 * (mkdtemp's 0700, fopen's 0666). 0, or -1 with errno. */
int dt_chmod_umask(const char *path, mode_t mode);

/* Reads a secret (a bearer token, S3 credentials) from `path` into buf[cap] (NUL-terminated,
 * *len bytes without the NUL; len may be NULL). Refused, like ssh does with its keys, unless the
 * file (after symlinks) is a regular file owned by this user (or root) that neither its group
 * nor others may read or write: the one-line message names `what`, the file, its mode and the
 * fix ("chmod 600 FILE"). A missing file is DT_ERR_NOTFOUND. The secret is never copied into a
 * message. */
dt_status dt_secret_file_read(const char *path, const char *what, char *buf, size_t cap,
                              size_t *len);

#endif
