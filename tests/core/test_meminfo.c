/* core/meminfo: /proc/meminfo against sysinfo(2) (two kernel interfaces for the same figure),
 * the cgroup reader on v2 and v1 trees laid out as the kernel lays them out (the real cgroup is
 * exercised end to end by tests/train/memory_admission.sh), the launcher's local rank count and
 * the overflow-checked product. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include "core/meminfo.h"
#include "harness.h"

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL, "cannot write %s", p);
    if (f) fputs(text, f), fclose(f);
}

int main(void) {
    int64_t av, tot;
    CHECK_OK(dt_mem_meminfo("/proc/meminfo", &av, &tot));
    struct sysinfo si;
    CHECK(sysinfo(&si) == 0, "sysinfo");
    int64_t st_total = (int64_t)si.totalram * si.mem_unit;
    CHECK(tot > 0 && llabs(tot - st_total) < 1024, "MemTotal %lld vs sysinfo %lld", (long long)tot,
          (long long)st_total);
    CHECK(av > 0 && av <= tot, "MemAvailable %lld of %lld", (long long)av, (long long)tot);
    CHECK(dt_mem_meminfo("/nonexistent/meminfo", &av, &tot) == DT_ERR_IO, "missing file");

    char t[] = "/tmp/dt_meminfo_XXXXXX";
    CHECK(mkdtemp(t) != NULL, "mkdtemp");
    char d[600], mi[600], cg[600];
    /* v2: /a (max 1000000, working set 400000 - 100000) above /a/b (max 500000, 450000 used) */
    snprintf(d, sizeof d, "%s/v2/a/b", t);
    char mk[700];
    snprintf(mk, sizeof mk, "mkdir -p %s", d);
    CHECK(system(mk) == 0, "mkdir");
    snprintf(mi, sizeof mi, "%s/mountinfo", t);
    snprintf(cg, sizeof cg, "%s/cgroup", t);
    char line[800];
    snprintf(line, sizeof line,
             "25 1 0:22 / /proc rw,nosuid - proc proc rw\n"
             "31 23 0:28 / %s/v2 rw,nosuid,nodev shared:9 - cgroup2 cgroup2 rw\n",
             t);
    put(t, "mountinfo", line);
    put(t, "cgroup", "0::/a/b\n");
    snprintf(d, sizeof d, "%s/v2/a", t);
    put(d, "memory.max", "1000000\n");
    put(d, "memory.current", "400000\n");
    put(d, "memory.stat", "anon 300000\ninactive_file 100000\n");
    snprintf(d, sizeof d, "%s/v2/a/b", t);
    put(d, "memory.max", "max\n");
    put(d, "memory.current", "350000\n");
    int64_t lim, fr;
    char file[512];
    CHECK_OK(dt_mem_cgroup(cg, mi, &lim, &fr, file, sizeof file));
    CHECK(lim == 1000000 && fr == 700000 && !strcmp(file, "memory.max of cgroup /a"),
          "v2 parent: %lld %lld '%s'", (long long)lim, (long long)fr, file);
    put(d, "memory.max", "500000\n");
    put(d, "memory.current", "450000\n");
    CHECK_OK(dt_mem_cgroup(cg, mi, &lim, &fr, file, sizeof file));
    CHECK(lim == 500000 && fr == 50000 && !strcmp(file, "memory.max of cgroup /a/b"),
          "v2 child: %lld %lld '%s'", (long long)lim, (long long)fr, file);
    /* a container's view: the mount's root is the cgroup namespace's */
    snprintf(line, sizeof line, "31 23 0:28 /a %s/v2/a rw - cgroup2 cgroup2 rw\n", t);
    put(t, "mountinfo", line);
    CHECK_OK(dt_mem_cgroup(cg, mi, &lim, &fr, file, sizeof file));
    CHECK(lim == 500000 && fr == 50000, "v2 namespaced: %lld %lld", (long long)lim, (long long)fr);
    /* v1 memory controller (beside others on one line), no limit, then a hierarchical one */
    snprintf(d, sizeof d, "%s/v1/job", t);
    snprintf(mk, sizeof mk, "mkdir -p %s", d);
    CHECK(system(mk) == 0, "mkdir");
    snprintf(line, sizeof line,
             "33 31 0:30 / %s/v1 rw,relatime - cgroup cgroup rw,memory\n"
             "34 31 0:31 / %s/cpu rw,relatime - cgroup cgroup rw,cpu\n",
             t, t);
    put(t, "mountinfo", line);
    put(t, "cgroup", "5:cpu:/\n4:memory:/job\n0::/\n");
    put(d, "memory.limit_in_bytes", "9223372036854771712\n");
    put(d, "memory.usage_in_bytes", "200000\n");
    put(d, "memory.stat", "cache 5\nhierarchical_memory_limit 9223372036854771712\n");
    CHECK_OK(dt_mem_cgroup(cg, mi, &lim, &fr, file, sizeof file));
    CHECK(lim == -1 && fr == -1 && !file[0], "v1 unlimited: %lld", (long long)lim);
    put(d, "memory.stat", "hierarchical_memory_limit 1048576\ntotal_inactive_file 48576\n");
    CHECK_OK(dt_mem_cgroup(cg, mi, &lim, &fr, file, sizeof file));
    CHECK(lim == 1048576 && fr == 1048576 - 200000 + 48576 &&
              !strcmp(file, "memory.limit_in_bytes of cgroup /job"),
          "v1: %lld %lld '%s'", (long long)lim, (long long)fr, file);
    snprintf(mk, sizeof mk, "rm -rf %s", t);
    CHECK(system(mk) == 0, "cleanup");

    /* launcher's local size */
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE"), unsetenv("MPI_LOCALNRANKS");
    setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
    CHECK(dt_mem_local_ranks_env() == 4, "slurm");
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
    CHECK(dt_mem_local_ranks_env() == 3, "open mpi first");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE"), unsetenv("SLURM_NTASKS_PER_NODE");
    CHECK(dt_mem_local_ranks_env() == 1, "none");
    dt_mem_avail m;
    CHECK_OK(dt_mem_available(2, &m));
    CHECK(m.local_ranks == 2 && m.per_worker > 0 && m.per_worker <= m.mem_available / 2 + 1,
          "available %lld of %lld", (long long)m.per_worker, (long long)m.mem_available);

    int64_t p;
    CHECK(dt_mem_mul(&p, 3, (int64_t[]){1 << 20, 1 << 20, 1 << 20}) == 0 && p == (int64_t)1 << 60,
          "2^60");
    CHECK(dt_mem_mul(&p, 4, (int64_t[]){1 << 20, 1 << 20, 1 << 20, 1 << 20}) == -1, "2^80");
    CHECK(dt_mem_mul(&p, 2, (int64_t[]){-1, 2}) == -1, "negative");
    CHECK(dt_mem_machine_limit() >= st_total || dt_mem_machine_limit() > 0, "machine limit");
    return dt_test_finish("meminfo");
}
