/* Helpers shared by the benchmark programs: a monotonic clock and a comparator for medians. */
#ifndef DTRAIN_BENCH_UTIL_H
#define DTRAIN_BENCH_UTIL_H

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

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
