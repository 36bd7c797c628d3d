/* The single-process communicator: world size 1. Reductions over one rank are the identity;
 * reduce-scatter and all-gather are copies between the caller's buffers. */
#include <string.h>
#include "dist/comm_impl.h"

static dt_status single_broadcast(dt_comm *c, void *buf, size_t bytes, int root) {
    return DT_OK;
}

static dt_status single_allreduce_f32(dt_comm *c, float *buf, size_t n) {
    return DT_OK;
}

static dt_status single_allreduce_f64(dt_comm *c, double *buf, size_t n) {
    return DT_OK;
}

static dt_status single_allreduce_or(dt_comm *c, uint64_t *buf, size_t n) {
    return DT_OK;
}

/* send [1 * shard] -> recv [shard] */
static dt_status single_reduce_scatter(dt_comm *c, const float *send, float *recv, size_t shard) {
    memcpy(recv, send, shard * sizeof(float));
    return DT_OK;
}

/* send [shard] -> recv [1 * shard] */
static dt_status single_allgather(dt_comm *c, const float *send, float *recv, size_t shard) {
    if (send != recv) memcpy(recv, send, shard * sizeof(float));
    return DT_OK;
}

static dt_status single_reduce_scatterv(dt_comm *c, const float *send, float *recv,
                                        const int *counts) {
    if (send != recv) memcpy(recv, send, (size_t)counts[0] * sizeof(float));
    return DT_OK;
}

static dt_status single_allgatherv(dt_comm *c, float *buf, const int *counts, const int *displs) {
    return DT_OK; /* the only block is already in place */
}

static dt_status single_barrier(dt_comm *c) {
    return DT_OK;
}

static void single_destroy(dt_comm *c, int finalize) {}

static const dt_comm_ops single_ops = {
    .name = "single",
    .broadcast = single_broadcast,
    .allreduce_f32 = single_allreduce_f32,
    .allreduce_f64 = single_allreduce_f64,
    .allreduce_or = single_allreduce_or,
    .reduce_scatter = single_reduce_scatter,
    .allgather = single_allgather,
    .reduce_scatterv = single_reduce_scatterv,
    .allgatherv = single_allgatherv,
    .barrier = single_barrier,
    .destroy = single_destroy,
};

dt_status dt_comm_single_open(dt_comm *c) {
    c->ops = &single_ops;
    c->rank = c->local_rank = 0;
    c->size = c->local_size = 1;
    c->thread_level = "-";
    return DT_OK;
}
