/* Memory limits of this process: cgroup (v2 and v1) and /proc/meminfo (see core/meminfo.h). */
#include "core/meminfo.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

/* A limit at or above 2^62 bytes is "none": v1 writes 2^63 rounded down to a page. */
#define NO_LIMIT ((int64_t)1 << 62)

dt_status dt_mem_meminfo(const char *path, int64_t *available, int64_t *total) {
    *available = *total = -1;
    FILE *f = fopen(path, "r");
    if (!f) return dt_error_set(DT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long long kb;
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) *available = (int64_t)kb * 1024;
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) *total = (int64_t)kb * 1024;
    }
    fclose(f);
    return DT_OK;
}

/* One number from a file ("max" and a missing file give -1). */
static int64_t read_num(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char s[64] = "";
    long long v = -1;
    if (fgets(s, sizeof s, f) && sscanf(s, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* The value of `key` in a memory.stat file (-1 when absent). */
static int64_t read_stat(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    size_t k = strlen(key);
    int64_t v = -1;
    while (v < 0 && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ' ') v = strtoll(line + k + 1, NULL, 10);
    fclose(f);
    return v;
}

static int has_token(const char *list, const char *tok) {
    size_t n = strlen(tok);
    for (const char *p = list; (p = strstr(p, tok)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0' || p[n] == '\n')) return 1;
    return 0;
}

/* The mount point and mount root of the v2 hierarchy (v1 = 0) or of v1's memory controller. */
static int find_mount(const char *mountinfo, int v1, char *point, char *root, size_t n) {
    FILE *f = fopen(mountinfo, "r");
    if (!f) return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char r[1024], mp[1024], fstype[64], super[1024] = "";
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", r, mp) != 2 ||
            sscanf(dash + 3, "%63s %*s %1023s", fstype, super) < 1)
            continue;
        if (v1 ? !strcmp(fstype, "cgroup") && has_token(super, "memory")
               : !strcmp(fstype, "cgroup2")) {
            snprintf(point, n, "%s", mp);
            snprintf(root, n, "%s", r);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* This process's cgroup path in the v2 hierarchy (v1 = 0) or v1's memory hierarchy. */
static int find_cgroup(const char *proc_cgroup, int v1, char *path, size_t n) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *a = *b = '\0'; /* line: hierarchy id, a + 1: controllers, b + 1: path */
        b[strcspn(b + 1, "\n") + 1] = '\0';
        if (v1 ? has_token(a + 1, "memory") : !strcmp(line, "0") && a + 1 == b) {
            snprintf(path, n, "%s", b + 1);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* mount point + the cgroup path below the mount's root (a container sees its own root). */
static void join(char *dir, size_t n, const char *point, const char *root, const char *path) {
    size_t rl = strlen(root);
    if (strcmp(root, "/") && !strncmp(path, root, rl) && (path[rl] == '/' || !path[rl])) path += rl;
    snprintf(dir, n, "%s%s", point, strcmp(path, "/") ? path : "");
}

dt_status dt_mem_cgroup(const char *proc_cgroup, const char *mountinfo, int64_t *limit,
                        int64_t *free_bytes, char *file, size_t n) {
    *limit = *free_bytes = -1;
    if (n) file[0] = '\0';
    char point[1024], root[1024], path[1024], dir[2048], p[2100];
    if (find_mount(mountinfo, 1, point, root, sizeof point) &&
        find_cgroup(proc_cgroup, 1, path, sizeof path)) {
        join(dir, sizeof dir, point, root, path);
        snprintf(p, sizeof p, "%s/memory.stat", dir);
        /* v1 with use_hierarchy: the tightest limit of the cgroup and its parents */
        int64_t lim = read_stat(p, "hierarchical_memory_limit"),
                inactive = read_stat(p, "total_inactive_file");
        snprintf(p, sizeof p, "%s/memory.limit_in_bytes", dir);
        int64_t own = read_num(p);
        if (lim < 0 || (own >= 0 && own < lim)) lim = own;
        if (lim >= 0 && lim < NO_LIMIT) {
            snprintf(p, sizeof p, "%s/memory.usage_in_bytes", dir);
            int64_t used = read_num(p);
            used -= inactive > 0 && inactive < used ? inactive : 0;
            *limit = lim;
            *free_bytes = used >= 0 && used < lim ? lim - used : used >= lim ? 0 : lim;
            snprintf(file, n, "memory.limit_in_bytes of cgroup %s", path);
        }
        return DT_OK;
    }
    if (!find_mount(mountinfo, 0, point, root, sizeof point) ||
        !find_cgroup(proc_cgroup, 0, path, sizeof path))
        return DT_OK; /* no cgroup file system: no limit to find */
    join(dir, sizeof dir, point, root, path);
    /* v2: every ancestor's memory.max applies; the one with the least room left binds */
    size_t pl = strlen(point);
    for (;;) {
        snprintf(p, sizeof p, "%s/memory.max", dir);
        int64_t lim = read_num(p);
        if (lim >= 0 && lim < NO_LIMIT) {
            snprintf(p, sizeof p, "%s/memory.current", dir);
            int64_t used = read_num(p);
            snprintf(p, sizeof p, "%s/memory.stat", dir);
            int64_t inactive = read_stat(p, "inactive_file");
            used -= inactive > 0 && inactive < used ? inactive : 0;
            int64_t fr = used < 0 ? lim : used >= lim ? 0 : lim - used;
            if (*free_bytes < 0 || fr < *free_bytes) {
                *limit = lim, *free_bytes = fr;
                snprintf(file, n, "memory.max of cgroup %s", dir[pl] ? dir + pl : "/");
            }
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < pl) break;
        *slash = '\0';
    }
    return DT_OK;
}

int dt_mem_local_ranks_env(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                       "SLURM_NTASKS_PER_NODE"};
    for (int i = 0; i < 3; i++) {
        const char *s = getenv(vars[i]);
        long v = s ? strtol(s, NULL, 10) : 0; /* Slurm's "4(x2)": 4 on each of 2 nodes */
        if (v > 0 && v < 1 << 20) return (int)v;
    }
    return 1;
}

dt_status dt_mem_available(int local_ranks, dt_mem_avail *m) {
    memset(m, 0, sizeof *m);
    m->local_ranks = local_ranks > 0 ? local_ranks : dt_mem_local_ranks_env();
    dt_status st = dt_mem_meminfo("/proc/meminfo", &m->mem_available, &m->mem_total);
    if (st != DT_OK) dt_error_clear();
    dt_mem_cgroup("/proc/self/cgroup", "/proc/self/mountinfo", &m->cgroup_limit, &m->cgroup_free,
                  m->cgroup_file, sizeof m->cgroup_file);
    int64_t best = m->mem_available;
    if (m->cgroup_free >= 0 && (best < 0 || m->cgroup_free < best))
        best = m->cgroup_free, m->from_cgroup = 1;
    m->per_worker = best < 0 ? -1 : best / m->local_ranks;
    return DT_OK;
}

const char *dt_mem_source(const dt_mem_avail *m, char *buf, size_t n) {
    if (m->from_cgroup)
        snprintf(buf, n, "%s, limit %.2f GiB", m->cgroup_file, (double)m->cgroup_limit / (1 << 30));
    else
        snprintf(buf, n, "MemAvailable in /proc/meminfo");
    return buf;
}

int dt_mem_mul(int64_t *out, int n, const int64_t *f) {
    int64_t r = 1;
    for (int i = 0; i < n; i++) {
        if (f[i] < 0 || (f[i] && r > INT64_MAX / f[i])) return -1;
        r *= f[i];
    }
    *out = r;
    return 0;
}

int64_t dt_mem_machine_limit(void) {
    int64_t lim = INT64_MAX, cl, cf;
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        double b = ((double)si.totalram + (double)si.totalswap) * si.mem_unit;
        if (b < 9e18) lim = (int64_t)b;
    }
    char file[512];
    if (dt_mem_cgroup("/proc/self/cgroup", "/proc/self/mountinfo", &cl, &cf, file, sizeof file) ==
            DT_OK &&
        cl > 0 && cl < lim)
        lim = cl;
    return lim;
}
