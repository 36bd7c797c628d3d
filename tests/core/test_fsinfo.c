/* core/fsinfo: the file system named in disk-full messages. A mount table written here (the
 * format of /proc/self/mountinfo) checks the choice of the mount: the longest mount point that
 * holds the path, whole path components only, the path's own device first, escaped spaces, a
 * path that does not exist yet (its nearest parent); then the real table (/proc is procfs) and
 * the byte sizes. The real full disk is tests/security/enospc.sh. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "core/fsinfo.h"
#include "harness.h"

int main(void) {
    char b[64];
    CHECK(!strcmp(dt_fs_bytes(0, b, sizeof b), "0 B"), "0: %s", b);
    CHECK(!strcmp(dt_fs_bytes(512, b, sizeof b), "512 B"), "512: %s", b);
    CHECK(!strcmp(dt_fs_bytes(65536, b, sizeof b), "64 KiB"), "64 KiB: %s", b);
    CHECK(!strcmp(dt_fs_bytes(1536 * 1024, b, sizeof b), "1.5 MiB"), "1.5 MiB: %s", b);
    CHECK(!strcmp(dt_fs_bytes(200ull << 30, b, sizeof b), "200 GiB"), "200 GiB: %s", b);

    char t[] = "/tmp/dt_fsinfo_XXXXXX";
    CHECK(mkdtemp(t) != NULL, "mkdtemp");
    char real[4096];
    CHECK(realpath(t, real) != NULL, "realpath");
    char sp[4200], other[4300], mi[4200];
    snprintf(sp, sizeof sp, "%s/with space", real);
    snprintf(other, sizeof other, "%s/other", sp);
    CHECK(mkdir(sp, 0700) == 0 && mkdir(other, 0700) == 0, "mkdir");
    struct stat sb;
    CHECK(stat(sp, &sb) == 0, "stat");
    unsigned ma = major(sb.st_dev), mn = minor(sb.st_dev);
    snprintf(mi, sizeof mi, "%s/mountinfo", real);
    FILE *f = fopen(mi, "w");
    CHECK(f != NULL, "cannot write %s", mi);
    if (!f) return dt_test_finish("fsinfo");
    fprintf(f, "1 0 %u:%u / / rw,relatime shared:1 - rootfs /dev/root rw\n", ma, mn);
    fprintf(f, "2 1 %u:%u / %s/with\\040space rw - spacefs src rw\n", ma, mn, real);
    /* not a whole component of the path: never chosen */
    fprintf(f, "3 1 %u:%u / %s/with\\040spaceX rw - wrongfs src rw\n", ma, mn, real);
    /* longer, but another device than the path's: the path's own device wins */
    fprintf(f, "4 1 999:999 / %s/with\\040space/other rw - otherfs src rw\n", real);
    fclose(f);

    char d[8192], want[4400];
    snprintf(want, sizeof want, "spacefs at %s: ", sp);
    dt_fs_describe(other, mi, d, sizeof d);
    CHECK(!strncmp(d, want, strlen(want)), "device first: %s", d);
    CHECK(strstr(d, " of ") && strstr(d, " free"), "figures: %s", d);
    char missing[4400];
    snprintf(missing, sizeof missing, "%s/not/yet/made", sp);
    dt_fs_describe(missing, mi, d, sizeof d);
    CHECK(!strncmp(d, want, strlen(want)), "nearest parent: %s", d);
    snprintf(want, sizeof want, "rootfs at /: ");
    dt_fs_describe(real, mi, d, sizeof d);
    CHECK(!strncmp(d, want, strlen(want)), "root: %s", d);

    /* the real table */
    dt_fs_describe("/proc/self", NULL, d, sizeof d);
    CHECK(!strncmp(d, "proc at /proc", 13), "/proc: %s", d);

    char note[DT_FS_NOTE_LEN];
    CHECK(!strcmp(dt_fs_full_note(real, EIO, note, sizeof note), ""), "EIO: '%s'", note);
    dt_fs_full_note(real, ENOSPC, note, sizeof note);
    CHECK(!strncmp(note, " (", 2) && strstr(note, " at ") && note[strlen(note) - 1] == ')',
          "ENOSPC: '%s'", note);
    dt_fs_full_note(real, EDQUOT, note, sizeof note);
    CHECK(note[0] == ' ', "EDQUOT: '%s'", note);

    unlink(mi);
    rmdir(other), rmdir(sp), rmdir(t);
    return dt_test_finish("fsinfo");
}
