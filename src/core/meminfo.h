/* The memory this process may use: the cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes,
 * as containers, systemd and Kubernetes set them) less what the cgroup already holds, and the
 * kernel's MemAvailable, so that dtrain can refuse a configuration before the OOM killer ends it
 * without a word (docs/security.md, "Memory admission and allocation limits").
 *
 * Only reads /proc and /sys; nothing is allocated beyond small stack buffers. */
#ifndef DTRAIN_CORE_MEMINFO_H
#define DTRAIN_CORE_MEMINFO_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

typedef struct dt_mem_avail {
    /* What one of `local_ranks` workers on this host may use: the smaller of cgroup_free and
     * mem_available, divided by local_ranks (-1 when neither could be read). */
    int64_t per_worker;
    int local_ranks;
    int64_t mem_available, mem_total; /* /proc/meminfo MemAvailable, MemTotal (-1: unknown) */
    int64_t cgroup_limit;             /* the tightest limit over this cgroup and its parents */
    int64_t cgroup_free;   /* that limit less its cgroup's working set (usage - inactive_file) */
    int from_cgroup;       /* 1 when cgroup_free, not mem_available, is the smaller */
    char cgroup_file[512]; /* the limit's file ("" when no cgroup limit applies) */
} dt_mem_avail;

/* MemAvailable and MemTotal of a /proc/meminfo-format file, in bytes (-1 when absent). */
dt_status dt_mem_meminfo(const char *path, int64_t *available, int64_t *total);

/* The memory cgroup limit of the process whose /proc/PID/cgroup and /proc/PID/mountinfo are
 * given: for v2 the smallest memory.max of its cgroup and every parent (each less that cgroup's
 * working set), for v1 hierarchical_memory_limit (memory.stat) or memory.limit_in_bytes. *limit
 * and *free get -1 when no limit is set ("max", or v1's page-rounded 2^63). file[n] gets the
 * limiting file. */
dt_status dt_mem_cgroup(const char *proc_cgroup, const char *mountinfo, int64_t *limit,
                        int64_t *free_bytes, char *file, size_t n);

/* This process's figures, for local_ranks workers on this host (< 1: from the launcher's
 * environment, see dt_mem_local_ranks_env). */
dt_status dt_mem_available(int local_ranks, dt_mem_avail *out);

/* Processes of this job on this host, from the launcher: Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE,
 * MPICH's MPI_LOCALNRANKS, Slurm's SLURM_NTASKS_PER_NODE ("4" or "4(x2)"); 1 when none is set. */
int dt_mem_local_ranks_env(void);

/* "memory.max of cgroup /a/b", "MemAvailable in /proc/meminfo", ... for messages. */
const char *dt_mem_source(const dt_mem_avail *m, char *buf, size_t n);

/* Overflow-checked product of n sizes (each >= 0) into *out; -1 on overflow of int64. */
int dt_mem_mul(int64_t *out, int n, const int64_t *f);

/* The most bytes one allocation may ask for: the cgroup limit or MemTotal (+ swap), whichever is
 * smaller; INT64_MAX when neither can be read. Sizes derived from a file are checked against it,
 * so a hostile header names its field instead of asking for terabytes. */
int64_t dt_mem_machine_limit(void);

#endif
