/* One thread setting for OpenMP (our kernels and oneDNN, both on libgomp) and OpenBLAS. */
#include <malloc.h>
#include <omp.h>
#include <stdlib.h>
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

/* oneDNN's sgemm (and other libraries') allocate packing buffers per call and free them; glibc
 * serves large blocks with mmap and returns them at free, so every step pays first-touch page
 * faults again (0.37 GB/s here). Keeping large blocks in the heap makes the second step reuse
 * the first one's pages. Process-wide, once; DT_NO_MALLOC_TUNE=1 leaves malloc alone. */
void dt_runtime_tune_malloc(void) {
    static int done;
    if (done || getenv("DT_NO_MALLOC_TUNE")) return;
    done = 1;
    mallopt(M_MMAP_MAX, 0);               /* large blocks from the heap, not fresh mmaps */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);   /* and the heap is not handed back at free */
}
