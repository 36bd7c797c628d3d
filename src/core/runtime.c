/* One thread setting for OpenMP (our kernels and oneDNN, both on libgomp) and OpenBLAS. */
#include <omp.h>
#include <unistd.h>
#include "dtrain/runtime.h"

void openblas_set_num_threads(int n); /* from OpenBLAS (cblas.h declares it too) */

static int threads_now = 0;

int dt_threads_set(int n) {
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    threads_now = n;
    return n;
}

int dt_threads_get(void) { return threads_now > 0 ? threads_now : omp_get_max_threads(); }

const char *dt_version(void) { return DT_VERSION; }
