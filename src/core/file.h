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

#include <stddef.h>
#include <stdint.h>
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

/* ---- whole files, paths and directories ---- */

/* Reads a whole file (malloc'd, NUL-terminated for convenience). Transparently inflates gzip
 * when `gz` is set. Errors name the file. */
dt_status dt_read_file(const char *path, int gz, uint8_t **data, size_t *len);
/* Upper bounds of whole-file reads of metadata: far above any real file, low enough that a
 * hostile or damaged one is refused before anything is allocated for it. The JSON parser
 * (cJSON) takes up to ~40 bytes of memory per byte of input ("[0,0,0,...": a 64-byte node per
 * 2 bytes), so the limit also bounds that. Manifests (a 64 MiB one lists ~400000 shards),
 * trainer_state.json, model.safetensors.index.json (a 405B model's: 100 KB): */
#define DT_MAX_META_BYTES ((size_t)64 << 20)
/* tokenizer.json and tiktoken rank files (Llama 3's tokenizer.json is 9 MB, Gemma 3's 33 MB): */
#define DT_MAX_TOKENIZER_BYTES ((size_t)128 << 20)
/* dt_read_file that refuses more than `max` bytes: a plain file larger than that before anything
 * is allocated (its size is known), a gzip stream as soon as it inflates past it (so a small
 * "gzip bomb" cannot make it allocate more than max + a chunk). `what` completes the message
 * "<path>: N bytes, more than the M-byte limit of <what>". */
dt_status dt_read_file_max(const char *path, int gz, size_t max, const char *what, uint8_t **data,
                           size_t *len);
/* 1 if `name` is one plain file name: not empty, no '/', not "." or "..", so that joined to a
 * directory it names an entry of that directory (names read from manifests and indexes). */
int dt_plain_name(const char *name);
/* Whether `path`, an entry of directory `dir`, stays inside it: 1 if it is not a symbolic link
 * or its target (all links resolved) lies inside dir (resolved too: a dir that is itself a link
 * is fine); 0 if the link leads outside; -1 if it cannot be resolved (errno set). */
int dt_path_inside(const char *dir, const char *path);
/* Writes `len` bytes to `path` (created or truncated) and fsyncs it, in a temporary folder that
 * the caller renames into place (a file that must be replaced whole where it is:
 * dt_file_write_atomic). A full disk is named with its file system (core/fsinfo.h). */
dt_status dt_write_file(const char *path, const void *data, size_t len);
/* Joins dir and name into a malloc'd path. */
char *dt_path_join(const char *dir, const char *name);
/* Removes a directory tree (best effort; used to clean up after failed writes). */
void dt_remove_tree(const char *path);
/* 1 if the path exists (any type). */
int dt_path_exists(const char *path);
/* Creates a fresh temporary directory next to `final` ("<final>.tmp-XXXXXX"); the parent of
 * `final` must exist. Returns the malloc'd path or NULL (error set). */
char *dt_temp_dir_for(const char *final);

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
