/* Row gathers of a sharded frozen table (lora.shard_base; docs/lora.md, "The base sharded
 * across workers"): an untied embedding [V, D] is read only by row lookups, so a pass needs
 * only the rows its ids name, not the whole table (for Llama-3.1-8B 1 GiB, against 8 KiB a
 * row). A unit qualifies when every reader is a lookup (dt_param_info.sparse_row) whose ids are
 * a graph input (dt_graph_entry_row_ids: set before the pass, so the communication thread may
 * read them when it runs the gather, prefetched or not) and a row is a whole number of floats.
 *
 * The gather, on the communication thread, in four moves; every rank makes the same
 * collectives with the same sizes, as the queue's one order needs:
 *   1. mask [ceil(V / 64)] u64 <- the rows this rank's ids name (all its lookups' inputs);
 *   2. mask <- OR over ranks: the union U of the rows, the same on every rank;
 *   3. pack [|U|, row] <- the union rows in increasing order, of which this rank fills the
 *      floats inside its own shard. Shards are contiguous float ranges in rank order and the
 *      rows are sorted, so each rank's floats of pack are one block and the blocks lie in rank
 *      order: one in-place all-gather of blocks (counts[r], the same on every rank) fills it;
 *   4. unpack: union row j back to its place u_j in the unit's slot; pack is freed.
 * The bytes move unchanged, so each looked-up row is the loaded one bit for bit; rows outside
 * U are not read by this pass. At most [|U|, row] floats of slot pages plus the pack are held,
 * where the whole gather holds [V, row] (plus the pages a row shares with its neighbours: rows
 * shorter than a page touch more than their bytes). More than half the rows in the union: the
 * whole table is gathered instead (decided on the OR'ed mask, so identically everywhere). */
#include <stdlib.h>
#include <string.h>
#include "dist/ddp_impl.h"

/* The distinct ids inputs of the lookups reading frozen parameter p over the whole schedule;
 * 0 when some reader is not such a lookup (or there are more than FZ_ROW_IDS inputs). */
static int lookup_ids(const dt_ddp *d, int p, fz_rows *rw) {
    int params[DT_GRAPH_ENTRY_PARAMS], ne = dt_graph_entry_count(d->g, NULL);
    rw->n_ids = 0;
    for (int k = 0; k < ne; k++) {
        int np = dt_graph_entry_frozen(d->g, k, params), reads = 0;
        for (int i = 0; i < np; i++) reads |= params[i] == p;
        if (!reads) continue;
        const dt_tensor *t = dt_graph_entry_row_ids(d->g, k);
        if (!t || (t->dtype != DT_I32 && t->dtype != DT_I64)) return 0;
        int seen = 0;
        for (int i = 0; i < rw->n_ids; i++) seen |= rw->ids[i]->data == t->data;
        if (seen) continue;
        if (rw->n_ids == FZ_ROW_IDS) return 0;
        rw->ids[rw->n_ids++] = t;
    }
    return rw->n_ids;
}

dt_status dt_zero_rows_init(dt_ddp *d) {
    d->fz_rw = calloc((size_t)(d->fz_n ? d->fz_n : 1), sizeof(fz_rows));
    if (!d->fz_rw) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    for (int p = 0; p < d->n_params; p++) {
        int u = d->fz_of[p];
        const dt_param_info *pi = dt_graph_param_info(d->g, p);
        if (u < 0 || !pi->sparse_row || pi->numel % pi->sparse_row) continue;
        size_t rows = pi->numel / pi->sparse_row;
        size_t bytes = dt_tensor_nbytes(dt_graph_value(d->g, pi->id));
        fz_rows *rw = &d->fz_rw[u];
        if (bytes % rows || (bytes / rows) % sizeof(float) || !lookup_ids(d, p, rw)) continue;
        rw->rows = rows, rw->row = bytes / rows / sizeof(float);
    }
    return DT_OK;
}

static void mark_ids(const fz_rows *rw, uint64_t *m) {
    for (int k = 0; k < rw->n_ids; k++) {
        const dt_tensor *t = rw->ids[k];
        size_t n = dt_tensor_numel(t);
        for (size_t i = 0; i < n; i++) {
            int64_t id = t->dtype == DT_I64 ? ((const int64_t *)t->data)[i]
                                            : (int64_t)((const int32_t *)t->data)[i];
            /* an id out of range is the lookup's error to report; it needs no row */
            if (id >= 0 && (size_t)id < rw->rows) m[id >> 6] |= (uint64_t)1 << (id & 63);
        }
    }
}

static inline int has(const uint64_t *m, size_t r) {
    return (int)((m[r >> 6] >> (r & 63)) & 1u);
}

dt_status dt_zero_rows_gather(dt_ddp *d, int u) {
    const fz_rows *rw = &d->fz_rw[u];
    size_t R = rw->rows, F = rw->row, W = (R + 63) / 64, shard = d->fz_shard[u];
    size_t lo = dt_zero_frozen_own_lo(d, u), hi = dt_zero_frozen_own_hi(d, u), nu = 0;
    int world = dt_comm_size(d->c);
    float *slot = d->fz_base + d->fz_lo[u];
    uint64_t *m = calloc(W, sizeof *m);
    size_t *counts = calloc((size_t)world, sizeof *counts);
    if (!m || !counts) {
        free(m), free(counts);
        return dt_error_set(DT_ERR_NOMEM, "ddp: out of memory for a row gather's mask");
    }
    mark_ids(rw, m);
    dt_status st = dt_comm_allreduce_or(d->c, m, W);
    for (size_t w = 0; st == DT_OK && w < W; w++) nu += (size_t)__builtin_popcountll(m[w]);
    if (st != DT_OK || nu > R / 2) {
        free(m), free(counts);
        return st != DT_OK ? st : dt_zero_frozen_gather_whole(d, u);
    }
    float *pack = malloc((nu ? nu : 1) * F * sizeof(float));
    if (!pack) {
        free(m), free(counts);
        return dt_error_set(DT_ERR_NOMEM, "ddp: out of memory for %zu gathered rows of %zu floats",
                            nu, F);
    }
    /* pack row j <- union row r: this rank's floats of it, and every rank's count */
    for (size_t r = 0, j = 0; r < R; r++) {
        if (!has(m, r)) continue;
        size_t a = r * F, b = a + F;
        for (size_t o = a; o < b;) {
            size_t owner = o / shard, e = (owner + 1) * shard < b ? (owner + 1) * shard : b;
            counts[owner] += e - o;
            o = e;
        }
        size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (y > x) memcpy(pack + j * F + (x - a), slot + x, (y - x) * sizeof(float));
        j++;
    }
    st = dt_comm_allgather_blocks(d->c, pack, counts);
    for (size_t r = 0, j = 0; st == DT_OK && r < R; r++)
        if (has(m, r)) memcpy(slot + r * F, pack + j++ * F, F * sizeof(float));
    d->fz_gathered += nu * F * sizeof(float);
    free(pack), free(m), free(counts);
    return st;
}

int dt_ddp_frozen_row_tables(const dt_ddp *d) {
    int n = 0;
    for (int u = 0; d && u < d->fz_n; u++) n += d->fz_rw[u].row > 0;
    return n;
}
