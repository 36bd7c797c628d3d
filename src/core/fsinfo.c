/* Which file system a path is on (src/core/fsinfo.h). */
#include "core/fsinfo.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

const char *dt_fs_bytes(unsigned long long b, char *buf, size_t n) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 6) v /= 1024, u++;
    if (u == 0 || v >= 100 || v == (double)(unsigned long long)v)
        snprintf(buf, n, "%.0f %s", v, unit[u]);
    else
        snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

/* The real location of path or, when it does not exist, of its nearest existing parent, into
 * out[PATH_MAX]; 0, or -1 when nothing resolves. */
static int real_or_parent(const char *path, char *out) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path && *path ? path : ".");
    for (;;) {
        if (realpath(p, out)) return 0;
        if (errno != ENOENT && errno != ENOTDIR) return -1;
        size_t k = strlen(p);
        while (k > 1 && p[k - 1] == '/') p[--k] = '\0'; /* "a/b/" -> "a/b" */
        char *slash = strrchr(p, '/');
        if (!slash) {
            if (!strcmp(p, ".")) return -1;
            snprintf(p, sizeof p, "."); /* "a" -> "." */
        } else if (slash == p) {
            if (!p[1]) return -1;
            p[1] = '\0'; /* "/a" -> "/" */
        } else {
            *slash = '\0';
        }
    }
}

/* mountinfo writes ' ', '\t', '\n' and '\\' in paths as \040, \011, \012, \134: decoded in
 * place. */
static void unescape(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* 1 if mount point mp holds real path p (mp is p, a parent folder of it, or "/"). */
static int holds(const char *mp, const char *p) {
    size_t n = strlen(mp);
    return !strcmp(mp, "/") || (!strncmp(mp, p, n) && (p[n] == '/' || p[n] == '\0'));
}

/* The mount point and type of the mount holding real path p on device dev: the longest mount
 * point that holds p, among the entries of that device when there are any. 1 if found. */
static int find_mount(const char *mountinfo, const char *p, dev_t dev, int have_dev, char *point,
                      size_t pn, char *type, size_t tn) {
    FILE *f = fopen(mountinfo ? mountinfo : "/proc/self/mountinfo", "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    size_t best_len = 0;
    int best_dev = -1;
    while (getline(&line, &cap, f) > 0) {
        unsigned maj, min;
        int at = 0;
        /* "36 35 98:0 /root /mount/point options... - fstype source superopts" */
        if (sscanf(line, "%*s %*s %u:%u %*s %n", &maj, &min, &at) != 2 || !at) continue;
        char *mp = line + at, *end = strchr(mp, ' ');
        const char *dash = strstr(line, " - ");
        if (!end || !dash) continue;
        *end = '\0';
        unescape(mp);
        if (!holds(mp, p)) continue;
        int same = have_dev && makedev(maj, min) == dev;
        size_t len = strlen(mp);
        if (same < best_dev || (same == best_dev && len < best_len)) continue;
        best_dev = same, best_len = len;
        snprintf(point, pn, "%s", mp);
        char t[64] = "";
        if (sscanf(dash + 3, "%63s", t) == 1) unescape(t);
        snprintf(type, tn, "%s", t);
    }
    free(line);
    fclose(f);
    return best_dev >= 0;
}

const char *dt_fs_describe(const char *path, const char *mountinfo, char *buf, size_t n) {
    char real[PATH_MAX], point[PATH_MAX] = "", type[64] = "";
    if (real_or_parent(path, real) != 0) {
        snprintf(buf, n, "file system of %s", path ? path : "?");
        return buf;
    }
    struct stat sb;
    int have_dev = stat(real, &sb) == 0;
    if (!find_mount(mountinfo, real, have_dev ? sb.st_dev : 0, have_dev, point, sizeof point, type,
                    sizeof type))
        snprintf(point, sizeof point, "%s", real);
    struct statvfs vf;
    char fr[32], tot[32];
    if (statvfs(real, &vf) == 0 && vf.f_frsize)
        snprintf(buf, n, "%s at %s: %s of %s free", type[0] ? type : "file system", point,
                 dt_fs_bytes((unsigned long long)vf.f_bavail * vf.f_frsize, fr, sizeof fr),
                 dt_fs_bytes((unsigned long long)vf.f_blocks * vf.f_frsize, tot, sizeof tot));
    else
        snprintf(buf, n, "%s at %s", type[0] ? type : "file system", point);
    return buf;
}

const char *dt_fs_full_note(const char *path, int err, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    if ((err != ENOSPC && err != EDQUOT) || n < 4) return buf;
    char d[PATH_MAX + 128];
    dt_fs_describe(path, NULL, d, sizeof d);
    snprintf(buf, n, " (%s)", d);
    return buf;
}
