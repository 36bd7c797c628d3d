/* A build without CUDA (-DDT_CUDA=OFF): no NCCL; dist.gpu_comm=auto takes the host way and the
 * entry points refuse with one line. */
#include <stdio.h>
#include "dtrain/gpu_comm.h"

static const char off_msg[] = "this dtrain was built without CUDA (-DDT_CUDA=OFF)";

int dt_nccl_load(char *why, size_t n) {
    if (why && n) snprintf(why, n, "%s", off_msg);
    return 0;
}
dt_status dt_nccl_unique_id(void *id) {
    return dt_error_set(DT_ERR_STATE, "nccl unique id: %s", off_msg);
}
dt_status dt_nccl_open(const void *id, int ranks, int rank, dt_device d, dt_nccl **out) {
    *out = NULL;
    return dt_error_set(DT_ERR_STATE, "nccl init: %s", off_msg);
}
dt_status dt_nccl_allreduce(dt_nccl *x, float *buf, size_t count, int avg, dt_stream *s) {
    return dt_error_set(DT_ERR_STATE, "nccl all-reduce: %s", off_msg);
}
void dt_nccl_close(dt_nccl *x) {}
