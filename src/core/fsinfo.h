/* Which file system a path is on, for messages about a full disk (docs/security.md, "Disk
 * full"): "tmpfs at /mnt/x: 0 B of 64 KiB free".
 *
 * The mount is the /proc/self/mountinfo entry of the path's device (st_dev) whose mount point is
 * the longest prefix of the path's real location; the figures are statvfs's f_bavail (what an
 * unprivileged writer may still use) and f_blocks, times f_frsize. A path that does not exist
 * yet (an import's output folder) is described by its nearest existing parent. */
#ifndef DTRAIN_CORE_FSINFO_H
#define DTRAIN_CORE_FSINFO_H

#include <stddef.h>

/* "FSTYPE at MOUNTPOINT: FREE of TOTAL free" into buf[n] (n >= 1; cut to fit) from the mount
 * table file `mountinfo` (the format of /proc/self/mountinfo; NULL: that file). Parts that
 * cannot be found are left out ("file system at /x: ..." without a type, no figures without
 * statvfs). Returns buf. */
const char *dt_fs_describe(const char *path, const char *mountinfo, char *buf, size_t n);

/* A buffer that holds any note of dt_fs_full_note (a mount point of up to PATH_MAX). */
#define DT_FS_NOTE_LEN 4400
/* For messages: " (tmpfs at /mnt/x: 0 B of 64 KiB free)" when err is ENOSPC or EDQUOT (a full
 * file system or quota), "" otherwise, into buf[n]. Returns buf. */
const char *dt_fs_full_note(const char *path, int err, char *buf, size_t n);

/* Bytes as "512 B", "64 KiB", "1.5 MiB", "12 GiB" into buf[n]. Returns buf. */
const char *dt_fs_bytes(unsigned long long bytes, char *buf, size_t n);

#endif
