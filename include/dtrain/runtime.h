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
/* The library version string, e.g. "0.1.0". */
const char *dt_version(void);

#ifdef __cplusplus
}
#endif
#endif
