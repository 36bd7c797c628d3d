/* Helpers shared by the benchmark programs: a monotonic clock and a comparator for medians. */
#ifndef DTRAIN_BENCH_UTIL_H
#define DTRAIN_BENCH_UTIL_H

#include <stdio.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds of CPU time used by the calling thread (CLOCK_THREAD_CPUTIME_ID). */
static inline double bench_thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* This process's anonymous memory (RSS) and the part of it in transparent huge pages, MiB, from
 * /proc/self/smaps_rollup (-1 where it cannot be read): a process whose activations got fewer
 * huge pages takes more TLB misses, one candidate for the per-process speed draw. */
static inline void bench_anon_mib(double *anon, double *huge) {
    *anon = *huge = -1;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return;
    char line[256];
    double kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Anonymous: %lf kB", &kb) == 1) *anon = kb / 1024.0;
        if (sscanf(line, "AnonHugePages: %lf kB", &kb) == 1) *huge = kb / 1024.0;
    }
    fclose(f);
}

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
