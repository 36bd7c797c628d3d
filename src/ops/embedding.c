/* Embedding lookup: out[i, :] = table[ids[i], :].
 *
 * Shapes: ids [n] (any shape, flattened; i32 or i64), table [V, D] (f32, or bf16 when frozen),
 * out [n, D] f32, dtable [V, D].
 * Backward scatter-adds g rows into dtable. Repeated ids make rows collide, so threads split
 * the D columns instead of the ids: each thread owns a column range of every row and adds the
 * ids in order, which needs no atomics and gives the same bits on every run. */
#include <omp.h>
#include <string.h>
#include "dtrain/ops_linear.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

int dt_linear_dtype_error(const char *op, const char *what, int n, const char *const *names,
                          const dt_tensor *const *ts); /* linear.c */

#define COL_BLOCK 16 /* floats per cache line: threads never share one */

static inline int64_t id_at(const void *ids, int is64, int64_t i) {
    return is64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

static dt_status embedding_forward(const dt_op_ctx *c) {
    int64_t n = c->node->ip[0], V = c->node->ip[1], D = c->node->ip[2];
    int is64 = c->in[0].dtype == DT_I64, bf16 = c->in[1].dtype == DT_BF16;
    const void *ids = c->in[0].data;
    /* Check every id before touching memory: the first bad one is reported. */
    for (int64_t i = 0; i < n; i++) {
        int64_t id = id_at(ids, is64, i);
        if (id < 0 || id >= V)
            return dt_error_set(DT_ERR_RANGE,
                                "embedding: id %lld at position %lld is outside [0, V) for table "
                                "[V, D] = [%lld, %lld]",
                                (long long)id, (long long)i, (long long)V, (long long)D);
    }
    float *out = c->out.data;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t id = id_at(ids, is64, i);
        if (bf16)
            dt_bf16_to_f32_n(out + i * D, (const uint16_t *)c->in[1].data + id * D, (size_t)D);
        else
            memcpy(out + i * D, (const float *)c->in[1].data + id * D, (size_t)D * sizeof(float));
    }
    return DT_OK;
}

static dt_status embedding_backward(const dt_op_ctx *c) {
    int64_t n = c->node->ip[0], V = c->node->ip[1], D = c->node->ip[2];
    float *dt = c->gin[1].data;
    if (!dt) return DT_OK;
    if (c->in[1].dtype != DT_F32)
        return dt_error_set(DT_ERR_STATE,
                            "embedding: a bf16 table [%lld, %lld] cannot have a gradient",
                            (long long)V, (long long)D);
    int is64 = c->in[0].dtype == DT_I64;
    const void *ids = c->in[0].data;
    const float *g = c->gout.data;
    int64_t nblk = (D + COL_BLOCK - 1) / COL_BLOCK;
    int zero = c->gin_beta[1] == 0.0f;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t d0 = nblk * t / nt * COL_BLOCK, d1 = nblk * (t + 1) / nt * COL_BLOCK;
        if (d1 > D) d1 = D;
        if (d0 < d1) {
            int64_t w = d1 - d0;
            if (zero)
                for (int64_t v = 0; v < V; v++)
                    memset(dt + v * D + d0, 0, (size_t)w * sizeof(float));
            for (int64_t i = 0; i < n; i++) {
                float *dr = dt + id_at(ids, is64, i) * D + d0;
                const float *gr = g + i * D + d0;
                for (int64_t j = 0; j < w; j++) dr[j] += gr[j];
            }
        }
    }
    return DT_OK;
}

static const dt_op_def embedding_op = {
    .name = "embedding",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_ROWS_IN1,
    .forward = embedding_forward,
    .backward = embedding_backward,
    DT_CUDA_OP_ENTRIES(embedding),
    .cuda_check_at = dt_embedding_cuda_check_at,
    .cuda_check = dt_embedding_cuda_check,
};

int dt_embedding(dt_graph *g, int ids, int table) {
    int in[2] = {ids, table};
    if (dt_ids_bad(g, "embedding", 2, in)) return -1;
    const dt_tensor *ti = &dt_graph_node(g, ids)->t, *tt = &dt_graph_node(g, table)->t;
    const dt_tensor *ts[2] = {ti, tt};
    if ((ti->dtype != DT_I32 && ti->dtype != DT_I64) ||
        (tt->dtype != DT_F32 && tt->dtype != DT_BF16)) {
        const char *names[2] = {"ids", "table"};
        return dt_linear_dtype_error("embedding", "ids must be i32 or i64, table f32 or bf16", 2,
                                     names, ts);
    }
    if (tt->ndim != 2) return dt_shape_error("embedding", "table must be [V, D]", 2, ts);
    if (ti->ndim + 1 > DT_MAX_DIMS)
        return dt_shape_error("embedding", "ids have too many dims for the output", 2, ts);
    if (tt->shape[0] == 0 || tt->shape[1] == 0)
        return dt_shape_error("embedding", "empty table", 2, ts);
    int64_t shape[DT_MAX_DIMS], n = 1;
    for (int i = 0; i < ti->ndim; i++) n *= (shape[i] = ti->shape[i]);
    shape[ti->ndim] = tt->shape[1];
    int64_t ip[3] = {n, tt->shape[0], tt->shape[1]};
    return dt_node_add(g, &embedding_op, 2, in, DT_F32, ti->ndim + 1, shape, ip, 3, NULL, 0);
}
