/* The frozen parameters (a LoRA base) sharded across ranks, FSDP-style (dt_ddp_opts.shard_frozen,
 * lora.shard_base; docs/lora.md, "The base sharded across workers").
 *
 * A unit is one frozen parameter: its bytes in the graph's frozen buffer (a 64-byte aligned slot)
 * seen as len = ceil(nbytes / 4) floats, so that the f32 collectives move bf16 bytes unchanged --
 * the gathered weight is the loaded one bit for bit. Rank r keeps [r*shard, (r+1)*shard) of them
 * (shard = dt_comm_shard_size(len, world), clamped to len) in place in the slot; the rest of the
 * slot's whole pages are given back (madvise), so between uses a rank holds 1/world of the base
 * plus the edge pages a slot shares with its neighbours (and the slots smaller than a page: the
 * norms). Before the schedule first reads a unit in a pass the communication thread all-gathers
 * it in place (dt_comm_allgather_range), after its last reader in the pass it is released again
 * (zero.c's hooks, as for ZeRO-3's buckets): in forward, then again in backward, where the
 * recomputed segments and the input-gradient GEMMs read it. The buffer a unit is gathered into is
 * its own slot: the pages the kernel hands back are the reused memory, and no tensor pointer of
 * the compiled graph ever changes. At most the unit in use and the next one (prefetched) are
 * whole at a time, plus a unit whose readers span others (a tied embedding: from the lookup to
 * the LM head). An untied embedding is gathered by the rows the ranks look up instead
 * (zero_frozen_rows.c). A frozen parameter that points outside its slot (mapped from the model
 * file) has its own shard copied in and is pointed back at the slot: a worker then touches only its
 * 1/N of the file. */
#include <stdlib.h>
#include <string.h>
#include "dist/ddp_impl.h"

size_t dt_zero_frozen_own_lo(const dt_ddp *d, int u) {
    size_t a = (size_t)dt_comm_rank(d->c) * d->fz_shard[u];
    return a < d->fz_len[u] ? a : d->fz_len[u];
}

size_t dt_zero_frozen_own_hi(const dt_ddp *d, int u) {
    size_t b = (size_t)(dt_comm_rank(d->c) + 1) * d->fz_shard[u];
    return b < d->fz_len[u] ? b : d->fz_len[u];
}

void dt_zero_frozen_release(dt_ddp *d, int u) {
    float *buf = d->fz_base + d->fz_lo[u];
    dt_zero_release(d, buf, 0, dt_zero_frozen_own_lo(d, u));
    dt_zero_release(d, buf, dt_zero_frozen_own_hi(d, u), d->fz_len[u]);
    d->fz_state[u] = UNIT_RELEASED;
}

dt_status dt_zero_frozen_gather_whole(dt_ddp *d, int u) {
    d->fz_gathered += d->fz_len[u] * sizeof(float);
    return dt_comm_allgather_range(d->c, d->fz_base + d->fz_lo[u], 0, d->fz_len[u], d->fz_shard[u]);
}

dt_status dt_zero_frozen_gather(dt_ddp *d, int u) {
    return d->fz_rw[u].row ? dt_zero_rows_gather(d, u) : dt_zero_frozen_gather_whole(d, u);
}

dt_status dt_zero_frozen_init(dt_ddp *d) {
    size_t nbytes = 0;
    char *fz = dt_graph_flat_frozen(d->g, &nbytes);
    int np = d->n_params, n = 0, world = dt_comm_size(d->c);
    d->fz_of = malloc((size_t)(np ? np : 1) * sizeof(int));
    if (!d->fz_of) return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    for (int p = 0; p < np; p++) {
        const dt_param_info *pi = dt_graph_param_info(d->g, p);
        d->fz_of[p] = -1;
        if (!(pi->flags & DT_PARAM_FROZEN)) continue;
        if (pi->offset % sizeof(float))
            return dt_error_set(DT_ERR_STATE,
                                "ddp init: frozen parameter '%s' at byte %zu of the frozen buffer "
                                "is not 4-byte aligned",
                                pi->name, pi->offset);
        d->fz_of[p] = n++;
    }
    if (n == 0) return DT_OK; /* nothing frozen: nothing to shard */
    d->fz_base = (float *)fz;
    d->fz_lo = malloc((size_t)n * sizeof(size_t));
    d->fz_len = malloc((size_t)n * sizeof(size_t));
    d->fz_shard = malloc((size_t)n * sizeof(size_t));
    d->fz_state = calloc((size_t)n, sizeof(int));
    if (!d->fz_lo || !d->fz_len || !d->fz_shard || !d->fz_state)
        return dt_error_set(DT_ERR_NOMEM, "ddp init: out of memory");
    for (int p = 0; p < np; p++) {
        int u = d->fz_of[p];
        if (u < 0) continue;
        const dt_param_info *pi = dt_graph_param_info(d->g, p);
        size_t bytes = dt_tensor_nbytes(dt_graph_value(d->g, pi->id));
        d->fz_lo[u] = pi->offset / sizeof(float);
        d->fz_len[u] = (bytes + sizeof(float) - 1) / sizeof(float);
        if (d->fz_len[u] > (size_t)0x7fffffff)
            return dt_error_set(DT_ERR_INVALID,
                                "ddp init: frozen parameter '%s' (%zu bytes) is too large for "
                                "one all-gather",
                                pi->name, bytes);
        d->fz_shard[u] = dt_comm_shard_size(d->fz_len[u], world);
        /* A parameter pointing elsewhere (a read-only mapping of the model file, or the host's
         * converted segment: lora.share_base) gets its own shard copied into its slot, whose
         * other pages stay untouched, and points at the slot from now on: each worker reads
         * only its 1/N of the file's pages. */
        const char *data = dt_graph_value(d->g, pi->id)->data, *slot = fz + pi->offset;
        if (data != slot) {
            size_t a = dt_zero_frozen_own_lo(d, u) * sizeof(float),
                   b = dt_zero_frozen_own_hi(d, u) * sizeof(float);
            if (b > bytes) b = bytes;
            if (b > a) memcpy((char *)slot + a, data + a, b - a);
            dt_status st = dt_graph_param_external(d->g, pi->id, slot);
            if (st != DT_OK) return st;
        }
    }
    d->fz_n = n;
    int nf = 0, ne = dt_graph_entry_count(d->g, &nf);
    dt_status st = dt_zero_rows_init(d);
    if (st == DT_OK) st = dt_zero_build_pass(d, &d->fz_pass[0], 0, nf, n, 1);
    if (st == DT_OK) st = dt_zero_build_pass(d, &d->fz_pass[1], nf, ne, n, 1);
    if (st != DT_OK) return st;
    for (int u = 0; u < n; u++) dt_zero_frozen_release(d, u);
    return DT_OK;
}

void dt_zero_frozen_free(dt_ddp *d) {
    free(d->fz_of), free(d->fz_lo), free(d->fz_len), free(d->fz_shard), free(d->fz_state);
    free(d->fz_rw);
    d->fz_rw = NULL;
    d->fz_of = d->fz_state = NULL;
    d->fz_lo = d->fz_len = d->fz_shard = NULL;
    for (int p = 0; p < 2; p++) dt_zero_free_pass(&d->fz_pass[p]);
    d->fz_n = 0;
}

/* Every unit whole (evaluation: the ranks' batch counts may differ, so per-unit gathers inside
 * a forward could not be matched). The comm thread is idle between steps. */
dt_status dt_zero_frozen_whole(dt_ddp *d) {
    if (!d->fz_n || d->fz_full) return DT_OK;
    for (int u = 0; u < d->fz_n; u++) {
        dt_status st = dt_zero_frozen_gather_whole(d, u);
        if (st != DT_OK) return st;
        d->fz_state[u] = UNIT_GATHERED;
    }
    d->fz_full = 1;
    return DT_OK;
}

void dt_zero_frozen_release_all(dt_ddp *d) {
    for (int u = 0; u < d->fz_n; u++) dt_zero_frozen_release(d, u);
    d->fz_full = 0;
}

void dt_ddp_frozen_bytes(const dt_ddp *d, size_t *kept, size_t *whole) {
    *kept = *whole = 0;
    for (int u = 0; d && u < d->fz_n; u++) {
        *kept += (dt_zero_frozen_own_hi(d, u) - dt_zero_frozen_own_lo(d, u)) * sizeof(float);
        *whole += d->fz_len[u] * sizeof(float);
    }
}
