/* oneDNN helpers for the CNN ops (see dnnl_util.h). */
#include "ops/bf16.h"
#include "ops/dnnl_util.h"

#include <pthread.h>
#include <string.h>
#include <dnnl_debug.h>

static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static dnnl_status_t g_init_status = dnnl_success;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* One engine and one in-order stream for the whole process: oneDNN's CPU engine is cheap to
 * share, and the graph executor runs one op at a time. They live until the process exits. */
static void dnnl_init_once(void) {
    g_init_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    if (g_init_status == dnnl_success)
        g_init_status = dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags);
}

dnnl_engine_t dt_dnnl_engine(void) {
    pthread_once(&g_once, dnnl_init_once);
    if (g_init_status != dnnl_success) {
        dt_dnnl_check(g_init_status, "oneDNN", "creating the CPU engine/stream");
        return NULL;
    }
    return g_engine;
}

dnnl_stream_t dt_dnnl_stream(void) {
    return dt_dnnl_engine() ? g_stream : NULL;
}

dt_status dt_dnnl_check(dnnl_status_t s, const char *op, const char *what) {
    if (s == dnnl_success) return DT_OK;
    return dt_error_set(DT_ERR_INTERNAL, "%s: oneDNN %s failed (%s)", op, what, dnnl_status2str(s));
}

size_t dt_dnnl_md_bytes(const dnnl_memory_desc_t *md) {
    size_t n = dnnl_memory_desc_get_size(md);
    return (n + 63) & ~(size_t)63;
}

static dt_status make_reorder(dnnl_primitive_t *p, const dnnl_memory_desc_t *src,
                              const dnnl_memory_desc_t *dst, int accumulate, const char *op) {
    dnnl_engine_t eng = dt_dnnl_engine();
    if (!eng) return DT_ERR_INTERNAL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dt_status st = DT_OK;
    if (accumulate) {
        /* dst = 1 * dst + reorder(src): the sum post-op turns the reorder into an add. */
        st = dt_dnnl_check(dnnl_primitive_attr_create(&attr), op, "attr create");
        if (!st) st = dt_dnnl_check(dnnl_post_ops_create(&po), op, "post-ops create");
        if (!st) st = dt_dnnl_check(dnnl_post_ops_append_sum(po, 1.0f), op, "post-op sum");
        if (!st) st = dt_dnnl_check(dnnl_primitive_attr_set_post_ops(attr, po), op, "set post-ops");
    }
    if (!st)
        st = dt_dnnl_check(dnnl_reorder_primitive_desc_create(&pd, src, eng, dst, eng, attr), op,
                           "reorder descriptor");
    if (!st) st = dt_dnnl_check(dnnl_primitive_create(p, pd), op, "reorder primitive");
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

dt_status dt_dnnl_arg_init(dt_dnnl_arg *a, const dnnl_memory_desc_t *user,
                           const dnnl_memory_desc_t *prim, int dir, size_t *ws_cursor,
                           const char *op) {
    dnnl_engine_t eng = dt_dnnl_engine();
    if (!eng) return DT_ERR_INTERNAL;
    a->user = *user;
    a->prim = *prim;
    a->staged = !dnnl_memory_desc_equal(user, prim);
    a->accum = dir == DT_DNNL_OUT_ACCUM;
    dt_status st = dt_dnnl_check(dnnl_memory_create(&a->user_mem, user, eng, DNNL_MEMORY_NONE), op,
                                 "memory create");
    if (!st)
        st = dt_dnnl_check(dnnl_memory_create(&a->prim_mem, prim, eng, DNNL_MEMORY_NONE), op,
                           "memory create");
    if (st) return st;
    if (a->staged || a->accum) {
        a->ws_off = *ws_cursor;
        *ws_cursor += dt_dnnl_md_bytes(prim);
    }
    if (dir == DT_DNNL_IN) {
        if (a->staged) st = make_reorder(&a->to_prim, user, prim, 0, op);
    } else {
        if (a->staged) st = make_reorder(&a->to_user, prim, user, 0, op);
        if (!st && a->accum) st = make_reorder(&a->add_user, prim, user, 1, op);
    }
    return st;
}

void dt_dnnl_arg_round_bf16(dt_dnnl_arg *a, size_t *ws_cursor) {
    a->bf16 = 1;
    if (!a->staged) {
        a->ws_off = *ws_cursor;
        *ws_cursor += dt_dnnl_md_bytes(&a->prim);
    }
}

void dt_dnnl_arg_free(dt_dnnl_arg *a) {
    if (a->to_prim) dnnl_primitive_destroy(a->to_prim);
    if (a->to_user) dnnl_primitive_destroy(a->to_user);
    if (a->add_user) dnnl_primitive_destroy(a->add_user);
    if (a->user_mem) dnnl_memory_destroy(a->user_mem);
    if (a->prim_mem) dnnl_memory_destroy(a->prim_mem);
    memset(a, 0, sizeof *a);
}

static dt_status reorder_run(dnnl_primitive_t r, dnnl_memory_t src, dnnl_memory_t dst,
                             const char *op) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    return dt_dnnl_exec(r, 2, args, op, "reorder");
}

dnnl_memory_t dt_dnnl_arg_in(dt_dnnl_arg *a, const void *data, void *ws, const char *op) {
    dnnl_memory_set_data_handle(a->user_mem, (void *)data);
    if (!a->staged && !a->bf16) return a->user_mem;
    float *dst = (float *)((char *)ws + a->ws_off);
    dnnl_memory_set_data_handle(a->prim_mem, dst);
    if (a->staged && reorder_run(a->to_prim, a->user_mem, a->prim_mem, op)) return NULL;
    /* rounding is elementwise, so any layout (padding zeros included) rounds the same */
    if (a->bf16)
        dt_bf16_round_f32(dst, a->staged ? dst : data,
                          (int64_t)(dnnl_memory_desc_get_size(&a->prim) / sizeof(float)));
    return a->prim_mem;
}

dnnl_memory_t dt_dnnl_arg_out(dt_dnnl_arg *a, void *data, void *ws, float beta) {
    if (!a->staged && beta == 0.0f) {
        dnnl_memory_set_data_handle(a->user_mem, data);
        return a->user_mem;
    }
    dnnl_memory_set_data_handle(a->prim_mem, (char *)ws + a->ws_off);
    return a->prim_mem;
}

dt_status dt_dnnl_arg_done(dt_dnnl_arg *a, void *data, void *ws, float beta, const char *op) {
    if (!a->staged && beta == 0.0f) return DT_OK; /* written in place */
    if (beta != 0.0f && !a->accum)
        return dt_error_set(DT_ERR_INTERNAL, "%s: output cannot accumulate", op);
    dnnl_memory_set_data_handle(a->user_mem, data);
    return reorder_run(beta != 0.0f ? a->add_user : a->to_user, a->prim_mem, a->user_mem, op);
}

dt_status dt_dnnl_scratch_init(dt_dnnl_buf *b, const_dnnl_primitive_desc_t pd, size_t *ws_cursor,
                               const char *op) {
    dnnl_engine_t eng = dt_dnnl_engine();
    if (!eng) return DT_ERR_INTERNAL;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (!md) return dt_error_set(DT_ERR_INTERNAL, "%s: oneDNN scratchpad query failed", op);
    b->off = *ws_cursor;
    *ws_cursor += dt_dnnl_md_bytes(md);
    return dt_dnnl_check(dnnl_memory_create(&b->mem, md, eng, DNNL_MEMORY_NONE), op,
                         "scratchpad memory");
}

dnnl_memory_t dt_dnnl_buf_bind(dt_dnnl_buf *b, void *ws) {
    dnnl_memory_set_data_handle(b->mem, (char *)ws + b->off);
    return b->mem;
}

void dt_dnnl_buf_free(dt_dnnl_buf *b) {
    if (b->mem) dnnl_memory_destroy(b->mem);
    b->mem = NULL;
}

dt_status dt_dnnl_exec(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, const char *op,
                       const char *what) {
    dnnl_stream_t s = dt_dnnl_stream();
    if (!s) return DT_ERR_INTERNAL;
    dt_status st = dt_dnnl_check(dnnl_primitive_execute(p, s, nargs, args), op, what);
    if (!st) st = dt_dnnl_check(dnnl_stream_wait(s), op, "stream wait");
    return st;
}

dnnl_status_t dt_dnnl_matmul_pd(dnnl_primitive_desc_t *pd, const dnnl_memory_desc_t *src,
                                const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                const dnnl_memory_desc_t *dst, int accumulate) {
    dnnl_engine_t eng = dt_dnnl_engine();
    if (!eng) return dnnl_runtime_error;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_matmul_desc_init(&md, src, wei, bias, dst);
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && accumulate) {
        /* dst = matmul + 1 * dst: gradient accumulation without a temporary */
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (st == dnnl_success) st = dnnl_primitive_desc_create(pd, &md, attr, eng, NULL);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}
