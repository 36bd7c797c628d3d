/* Row-sparse gradients in data parallelism: an embedding table's gradient is +0.0 except in the
 * rows the batch looked up (dt_param_info.sparse_row), so all-reducing the whole table moves
 * mostly zeros. For the Llama of the scaling benchmark (vocabulary 32000 x 512, 62.5 MiB, a
 * quarter of all gradients) a batch of 8 x 256 tokens touches at most 2048 rows per rank.
 *
 * A sparse table gets a bucket of its own (make_buckets), which is reduced in four moves, all in
 * place:
 *   1. mask [ceil(R / 64)] u64 <- the rows whose gradient has any nonzero bit (scan R x D);
 *   2. mask <- OR over ranks (one small all-reduce): the union U of touched rows, the same on
 *      every rank, so every rank takes the same path with the same sizes;
 *   3. pack: union row u_j moves to row j (u_j >= j, so rows are read before they are
 *      overwritten), then the packed [|U|, D] block is all-reduced like a dense bucket;
 *   4. unpack in reverse (row j back to u_j, the last first), and rows below |U| outside the
 *      union, which held packed rows, are zeroed.
 * Rows outside U are +0.0 on every rank, which is what the dense sum (and mean) would give, and
 * every union row gets the same per-element sum as in the dense all-reduce: for 2 ranks (a + b
 * is commutative) the result is bit-identical to the dense one; for more ranks MPI may group
 * the sums differently for a different message length, as for any other bucket size. More
 * than half the rows touched: the dense all-reduce is cheaper and is used (the decision is
 * made on the OR'ed mask, so identically on every rank). */
#include <stdlib.h>
#include <string.h>
#include "dist/ddp_impl.h"

#define MIN_ROWS 64 /* smaller tables are not worth the extra collective */

int dt_ddp_sparse_alone(const dt_ddp *d, const dt_param_info *p) {
    return d->sparse && d->stage < 2 && dt_comm_size(d->c) > 1 && p->sparse_row &&
           p->numel % p->sparse_row == 0 && p->numel / p->sparse_row >= MIN_ROWS;
}

dt_status dt_ddp_sparse_init(dt_ddp *d) {
    for (int i = 0; i < d->n_params; i++) {
        int k = d->bucket_of[i];
        const dt_param_info *p = dt_graph_param_info(d->g, i);
        if (k < 0 || d->b[k].n_params != 1 || !dt_ddp_sparse_alone(d, p)) continue;
        ddp_bucket *b = &d->b[k];
        /* The bucket is exactly the table (make_buckets put it alone). */
        if (b->lo != p->offset || b->hi - b->lo != p->numel) continue;
        size_t rows = p->numel / p->sparse_row;
        b->mask = calloc((rows + 63) / 64, sizeof(uint64_t));
        if (!b->mask) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
        b->row = p->sparse_row, b->rows = rows;
    }
    return DT_OK;
}

void dt_ddp_sparse_free(dt_ddp *d) {
    for (int k = 0; d->b && k < d->nb; k++) free(d->b[k].mask), d->b[k].mask = NULL;
}

/* 1 when any bit of r [n] is set (-0.0 counts: the dense sum could carry it). */
static int row_touched(const float *r, size_t n) {
    for (size_t i = 0; i < n; i += 64) {
        size_t e = i + 64 < n ? i + 64 : n;
        uint32_t acc = 0;
        for (size_t j = i; j < e; j++) {
            uint32_t u;
            memcpy(&u, r + j, sizeof u);
            acc |= u;
        }
        if (acc) return 1;
    }
    return 0;
}

static inline int has(const uint64_t *m, size_t r) {
    return (int)((m[r >> 6] >> (r & 63)) & 1u);
}

dt_status dt_ddp_sparse_reduce(dt_ddp *d, int k) {
    ddp_bucket *b = &d->b[k];
    float *g = d->grad + b->lo;
    size_t D = b->row, R = b->rows, W = (R + 63) / 64, rb = D * sizeof(float);
    uint64_t *m = b->mask;
    unsigned flags = d->average ? DT_COMM_AVG : 0;
    memset(m, 0, W * sizeof *m);
    for (size_t r = 0; r < R; r++)
        if (row_touched(g + r * D, D)) m[r >> 6] |= (uint64_t)1 << (r & 63);
    dt_status st = dt_comm_allreduce_or(d->c, m, W);
    if (st != DT_OK) return st;
    size_t nu = 0;
    for (size_t w = 0; w < W; w++) nu += (size_t)__builtin_popcountll(m[w]);
    if (nu > R / 2) {
        d->sent += R * D;
        return dt_comm_allreduce(d->c, g, R * D, flags);
    }
    for (size_t r = 0, j = 0; r < R; r++) /* pack: row u_j -> row j */
        if (has(m, r)) {
            if (r != j) memcpy(g + j * D, g + r * D, rb);
            j++;
        }
    if ((st = dt_comm_allreduce(d->c, g, nu * D, flags)) != DT_OK) return st;
    for (size_t r = R, j = nu; r-- > 0;) /* unpack, the last union row first */
        if (has(m, r) && --j != r) memcpy(g + r * D, g + j * D, rb);
    for (size_t r = 0; r < nu; r++)
        if (!has(m, r)) memset(g + r * D, 0, rb);
    d->sent += nu * D;
    return DT_OK;
}
