/* NCCL for the device ranks' gradient all-reduce (include/dtrain/gpu_comm.h), loaded with
 * dlopen when a run first asks for it: dtrain neither links NCCL nor needs it to build or run
 * (dist.gpu_comm=auto takes the host way where it does not load). The few types and entry points
 * used are declared here as NCCL's ABI defines them (nccl.h of NCCL 2.x: ncclUniqueId is 128
 * bytes passed by value, ncclFloat32 = 7, ncclSum = 0, ncclAvg = 4 (since 2.10), results are
 * ints with ncclSuccess = 0), so no NCCL header is needed either. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/gpu_comm.h"
#include "device/cuda_util.h"

#define NCCL_SONAME "libnccl.so.2"
enum { NCCL_SUCCESS = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0, NCCL_AVG = 4 };
typedef struct nccl_id {
    char internal[DT_NCCL_ID_BYTES];
} nccl_id;

static struct {
    int (*get_id)(nccl_id *id);
    int (*init_rank)(void **comm, int nranks, nccl_id id, int rank);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm,
                      void *stream);
    int (*destroy)(void *comm);
    const char *(*error_string)(int result);
} nc;
static char nc_error[512];
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;

static void nc_load(void) {
    const char *lib = getenv("DT_NCCL_LIB");
    if (!lib || !lib[0]) lib = NCCL_SONAME;
    static const char *const names[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce",
                                        "ncclCommDestroy", "ncclGetErrorString"};
    void **const slots[] = {(void **)&nc.get_id, (void **)&nc.init_rank, (void **)&nc.all_reduce,
                            (void **)&nc.destroy, (void **)&nc.error_string};
    dt_cuda_lib_load(NULL, lib, 5, names, slots, nc_error, sizeof nc_error);
}

int dt_nccl_load(char *why, size_t n) {
    pthread_once(&nc_once, nc_load);
    if (why && n) snprintf(why, n, "%s", nc_error);
    return nc_error[0] == 0;
}

static dt_status nc_fail(const char *op, int r) {
    return dt_error_set(DT_ERR_INTERNAL, "nccl %s: error %d: %s", op, r, nc.error_string(r));
}

static dt_status nc_ready(const char *op) {
    if (dt_nccl_load(NULL, 0)) return DT_OK;
    return dt_error_set(DT_ERR_STATE, "nccl %s: %s", op, nc_error);
}

struct dt_nccl {
    void *comm;
    dt_device d;
};

dt_status dt_nccl_unique_id(void *id) {
    dt_status st = nc_ready("unique id");
    if (st != DT_OK) return st;
    nccl_id x;
    int r = nc.get_id(&x);
    if (r != NCCL_SUCCESS) return nc_fail("ncclGetUniqueId", r);
    memcpy(id, x.internal, sizeof x.internal);
    return DT_OK;
}

dt_status dt_nccl_open(const void *id, int ranks, int rank, dt_device d, dt_nccl **out) {
    *out = NULL;
    if (d.kind != DT_DEVICE_CUDA)
        return dt_error_set(DT_ERR_INVALID, "nccl init: rank %d: not a CUDA device", rank);
    dt_status st = nc_ready("init");
    if (st == DT_OK) st = dt_device_use(d); /* NCCL binds the communicator to the current GPU */
    if (st != DT_OK) return st;
    dt_nccl *x = calloc(1, sizeof *x);
    if (!x) return dt_error_set(DT_ERR_NOMEM, "nccl init: out of memory");
    nccl_id u;
    memcpy(u.internal, id, sizeof u.internal);
    int r = nc.init_rank(&x->comm, ranks, u, rank);
    if (r != NCCL_SUCCESS) {
        free(x);
        return nc_fail("ncclCommInitRank", r);
    }
    x->d = d;
    *out = x;
    return DT_OK;
}

dt_status dt_nccl_allreduce(dt_nccl *x, float *buf, size_t count, int avg, dt_stream *s) {
    if (!x || !s) return dt_error_set(DT_ERR_INVALID, "nccl all-reduce: NULL argument");
    dt_status st = dt_device_use(x->d);
    if (st != DT_OK) return st;
    int r = nc.all_reduce(buf, buf, count, NCCL_FLOAT32, avg ? NCCL_AVG : NCCL_SUM, x->comm,
                          dt_stream_handle(s));
    return r == NCCL_SUCCESS ? DT_OK : nc_fail("ncclAllReduce", r);
}

void dt_nccl_close(dt_nccl *x) {
    if (!x) return;
    if (x->comm) nc.destroy(x->comm);
    free(x);
}
