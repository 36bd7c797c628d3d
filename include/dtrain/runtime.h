/* Process-wide runtime settings. */
#ifndef DTRAIN_RUNTIME_H
#define DTRAIN_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* One setting for every thread pool: OpenMP kernels (ours and oneDNN's) and OpenBLAS.
 * n <= 0 means the number of online cores. Returns the number now in use. */
int dt_threads_set(int n);
int dt_threads_get(void);
/* Keeps freed large blocks in the heap (mallopt), so libraries that allocate per call do not
 * fault fresh pages in every step. dt_graph_compile calls it; DT_NO_MALLOC_TUNE=1 disables. */
void dt_runtime_tune_malloc(void);
/* The library version string, e.g. "0.1.0". */
const char *dt_version(void);

#ifdef __cplusplus
}
#endif
#endif
