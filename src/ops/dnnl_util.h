/* oneDNN helpers for the CNN ops: one CPU engine and stream for the process, status checks
 * that name the op, and "staged arguments" that move a graph tensor (always plain, e.g. NCHW)
 * into the layout a primitive chose (e.g. nChw16c) inside the op's scratch, and back.
 *
 * Everything is created at prepare time; the execute-time functions only bind pointers
 * (dnnl_memory_set_data_handle) and run prebuilt primitives, so kernels allocate nothing.
 * Primitives use user-managed scratchpads, which the ops place in their ws. */
#ifndef DTRAIN_OPS_DNNL_UTIL_H
#define DTRAIN_OPS_DNNL_UTIL_H

#include <stddef.h>
#include <dnnl.h>
#include "dtrain/status.h"

/* The process's CPU engine and stream (created once, thread-safely); NULL + error on failure. */
dnnl_engine_t dt_dnnl_engine(void);
dnnl_stream_t dt_dnnl_stream(void);

/* DT_OK if s == dnnl_success, else DT_ERR_INTERNAL with "op: what failed (oneDNN status)". */
dt_status dt_dnnl_check(dnnl_status_t s, const char *op, const char *what);

/* Bytes of ws for a layout, rounded up to 64 so that consecutive ws regions stay aligned. */
size_t dt_dnnl_md_bytes(const dnnl_memory_desc_t *md);

/* A primitive argument whose graph tensor is plain (`user`) while the primitive may want
 * another layout (`prim`). If they differ, the data is staged in ws at `ws_off` through a
 * reorder. Outputs that may accumulate (gin_beta == 1) are always staged, and the "add"
 * reorder (a reorder with a sum post-op) computes user += staged. */
typedef struct dt_dnnl_arg {
    dnnl_memory_desc_t user, prim;
    int staged;    /* 1: prim differs from user; the primitive reads/writes ws + ws_off */
    int accum;     /* output that supports beta == 1 (ws region reserved even if !staged) */
    int bf16;      /* input rounded to bf16 (kept f32) in ws on the way in (bf16 mode) */
    size_t ws_off; /* offset of the staged copy in ws */
    dnnl_memory_t user_mem, prim_mem;
    dnnl_primitive_t to_prim;  /* input: user -> prim */
    dnnl_primitive_t to_user;  /* output: prim -> user (overwrite) */
    dnnl_primitive_t add_user; /* output: user += prim */
} dt_dnnl_arg;

enum { DT_DNNL_IN = 0, DT_DNNL_OUT = 1, DT_DNNL_OUT_ACCUM = 2 };

/* Sets up `a` (zero it first) for direction `dir`, reserving its ws region at *ws_cursor
 * (advanced). Returns DT_OK or an error naming `op`. */
dt_status dt_dnnl_arg_init(dt_dnnl_arg *a, const dnnl_memory_desc_t *user,
                           const dnnl_memory_desc_t *prim, int dir, size_t *ws_cursor,
                           const char *op);
/* bf16 mode (dt_graph_opts.bf16_gemm) for an input set up by dt_dnnl_arg_init: the primitive
 * reads a bf16-rounded f32 copy in ws (the staged copy, rounded in place; or, unstaged, a copy
 * in a ws region reserved here at *ws_cursor). The graph's tensor is never modified. */
void dt_dnnl_arg_round_bf16(dt_dnnl_arg *a, size_t *ws_cursor);
void dt_dnnl_arg_free(dt_dnnl_arg *a);
/* Input: binds `data` (plain), reorders into ws if staged; returns the memory the primitive
 * reads, or NULL with an error set. */
dnnl_memory_t dt_dnnl_arg_in(dt_dnnl_arg *a, const void *data, void *ws, const char *op);
/* Output, before the primitive runs: the memory it must write (ws if staged or beta != 0). */
dnnl_memory_t dt_dnnl_arg_out(dt_dnnl_arg *a, void *data, void *ws, float beta);
/* Output, after the primitive ran: data = staged (beta 0) or data += staged (beta 1). */
dt_status dt_dnnl_arg_done(dt_dnnl_arg *a, void *data, void *ws, float beta, const char *op);

/* A memory object over ws + off for a primitive's scratchpad (or other internal buffer). */
typedef struct dt_dnnl_buf {
    size_t off;
    dnnl_memory_t mem;
} dt_dnnl_buf;
/* Reserves the scratchpad of `pd` (possibly empty) at *ws_cursor. */
dt_status dt_dnnl_scratch_init(dt_dnnl_buf *b, const_dnnl_primitive_desc_t pd, size_t *ws_cursor,
                               const char *op);
dnnl_memory_t dt_dnnl_buf_bind(dt_dnnl_buf *b, void *ws);
void dt_dnnl_buf_free(dt_dnnl_buf *b);

/* A matmul primitive descriptor on the process's engine with a user-managed scratchpad; with
 * `accumulate` a sum post-op makes it dst += src wei (+ bias). bias may be NULL. */
dnnl_status_t dt_dnnl_matmul_pd(dnnl_primitive_desc_t *pd, const dnnl_memory_desc_t *src,
                                const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                const dnnl_memory_desc_t *dst, int accumulate);

/* Runs `p` on the shared stream and waits. */
dt_status dt_dnnl_exec(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, const char *op,
                       const char *what);

#endif
