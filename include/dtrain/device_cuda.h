/* CUDA kernels over device pointers (docs/gpu.md), the first of the CUDA training engine.
 *
 * Every function takes the stream it runs on (a stream of a CUDA device, dt_stream_create) and
 * only issues work: results are there after dt_stream_sync or an event. Pointers are device
 * memory of the stream's device. Nothing here allocates; where a kernel needs scratch the
 * caller passes it (sizes from the *_work functions). The arithmetic follows the CPU kernels
 * (src/optim, src/ops) operation by operation; tests/device compares them on the same inputs.
 *
 * In a build without CUDA (-DDT_CUDA=OFF), or with a CPU stream, every call returns
 * DT_ERR_STATE with a one-line message; the CPU's kernels run through the graph (src/ops). */
#ifndef DTRAIN_DEVICE_CUDA_H
#define DTRAIN_DEVICE_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizers on a flat f32 buffer (multi-tensor: one launch per 64 segments) --------- */

/* A run [start, start + len) of the slice sharing one set of scalars, as dt_optim_step
 * computes them in double and casts to f32 (src/optim/optim.c):
 *   SGD:   lr = lr * lr_scale, wd = weight_decay * wd_scale
 *   AdamW: decay = 1 - lr_s * wd, step_size = lr_s / (1 - beta1^t) */
typedef struct dt_cuda_optim_seg {
    size_t start, len;
    float lr, wd;           /* SGD */
    float decay, step_size; /* AdamW */
} dt_cuda_optim_seg;

typedef struct dt_cuda_adamw_scalars {
    float b1, one_m_b1, b2, one_m_b2, eps;
    float bc2_sqrt; /* sqrt(1 - beta2^t) */
} dt_cuda_adamw_scalars;

/* p, g, m, v: the slice's [n] buffers; segments in host memory (copied into the launch). */
dt_status dt_cuda_adamw(dt_stream *s, float *p, const float *g, float *m, float *v,
                        const dt_cuda_optim_seg *segs, int n_seg, const dt_cuda_adamw_scalars *k);
/* torch.optim.SGD; buf may be NULL when momentum == 0; first = 1 at the first step. */
dt_status dt_cuda_sgd(dt_stream *s, float *p, const float *g, float *buf,
                      const dt_cuda_optim_seg *segs, int n_seg, float momentum, float dampening,
                      int nesterov, int first);

/* Capturable variants (the step as a CUDA graph, docs/gpu.md): the per-step scalars are read
 * from device memory when the kernel runs, not passed as launch arguments, so a replayed graph
 * applies the values the host wrote into the block before the replay. segs gives start, len and
 * (SGD) wd, which do not change between steps; its lr, decay and step_size are ignored. The
 * device block: a dt_cuda_optim_dev_head followed by n_seg dt_cuda_optim_dev_seg (the same
 * order as segs), 16-byte aligned (dt_optim_cuda_block_bytes / _fill compute it). */
typedef struct dt_cuda_optim_dev_head {
    float bc2_sqrt; /* AdamW: sqrt(1 - beta2^t) */
    int32_t first;  /* SGD: 1 at the first step (the momentum buffer is set, not blended) */
    int32_t pad[2];
} dt_cuda_optim_dev_head;
typedef struct dt_cuda_optim_dev_seg {
    float lr, decay, step_size; /* the fields of dt_cuda_optim_seg that change per step */
} dt_cuda_optim_dev_seg;

dt_status dt_cuda_adamw_dev(dt_stream *s, float *p, const float *g, float *m, float *v,
                            const dt_cuda_optim_seg *segs, int n_seg,
                            const dt_cuda_adamw_scalars *k, const dt_cuda_optim_dev_head *dhead,
                            const dt_cuda_optim_dev_seg *dseg);
dt_status dt_cuda_sgd_dev(dt_stream *s, float *p, const float *g, float *buf,
                          const dt_cuda_optim_seg *segs, int n_seg, float momentum, float dampening,
                          int nesterov, const dt_cuda_optim_dev_head *dhead,
                          const dt_cuda_optim_dev_seg *dseg);

/* ---- global gradient norm and clipping ----------------------------------------------------- */

/* Doubles of scratch dt_cuda_grad_sumsq needs. */
#define DT_CUDA_SUMSQ_WORK 1025
/* work[0] = sum of g[i]^2 in double, deterministic (fixed blocks, fixed order of the partials).
 * work: DT_CUDA_SUMSQ_WORK doubles. */
dt_status dt_cuda_grad_sumsq(dt_stream *s, const float *g, size_t n, double *work);
/* g *= min(1, max_norm / (sqrt(*sumsq) + 1e-6)) when that is < 1 (dt_grad_clip_coef's rule: no
 * change when max_norm <= 0 or the norm is not finite); *sumsq is read on the device (no sync). */
dt_status dt_cuda_grad_clip(dt_stream *s, float *g, size_t n, const double *sumsq, float max_norm);

/* ---- RMSNorm (x, y, dx [rows, D]; w, dw [D] or NULL; rstd [rows]) -------------------------- */

dt_status dt_cuda_rmsnorm_fwd(dt_stream *s, float *y, float *rstd, const float *x, const float *w,
                              int64_t rows, int64_t D, float eps);
/* Bytes of scratch for dt_cuda_rmsnorm_bwd (the per-block partial sums of dw). */
size_t dt_cuda_rmsnorm_bwd_work(int64_t rows, int64_t D);
/* Writes dx (if not NULL) and dw (if not NULL and w given); overwrites, no accumulation. */
dt_status dt_cuda_rmsnorm_bwd(dt_stream *s, float *dx, float *dw, const float *gy, const float *x,
                              const float *w, const float *rstd, int64_t rows, int64_t D,
                              void *work);

/* ---- SwiGLU: y = silu(a) * b, all [n] ----------------------------------------------------- */

dt_status dt_cuda_swiglu_fwd(dt_stream *s, float *y, const float *a, const float *b, int64_t n);
dt_status dt_cuda_swiglu_bwd(dt_stream *s, float *da, float *db, const float *gy, const float *a,
                             const float *b, int64_t n);

/* ---- fused cross-entropy (logits [N, C] f32, targets [N] i32) ----------------------------- */

/* Bytes of scratch for dt_cuda_ce_fwd. */
size_t dt_cuda_ce_work(int64_t N);
/* loss[0] = mean over rows whose target != ignore of (lse - (1-ls) x[t] - ls/C sum x), as
 * dt_cross_entropy; lse [N] is kept for the backward; stats[0] = the number of counted rows,
 * stats[1] = the first row whose target is outside [0, C) and not ignore, or -1 (then the loss
 * is NaN: the caller reads stats when it syncs, and refuses). */
dt_status dt_cuda_ce_fwd(dt_stream *s, float *loss, float *lse, int64_t *stats, const float *logits,
                         const int32_t *targets, int64_t N, int64_t C, int64_t ignore,
                         float label_smoothing, void *work);
/* dx [N, C] = d loss / d logits * gloss[0], from the logits and lse alone (no softmax is
 * stored); dx may be the logits buffer itself (in place). Ignored rows get 0. */
dt_status dt_cuda_ce_bwd(dt_stream *s, float *dx, const float *logits, const int32_t *targets,
                         const float *lse, const int64_t *stats, const float *gloss, int64_t N,
                         int64_t C, int64_t ignore, float label_smoothing);

/* ---- RoPE (src/ops/rope.c: rotate_half, x, y [B, H, T, Dh], Dh = 2 half) ----------------- */

/* y = rope(x): y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin for the halves x1, x2 of each head
 * vector, angle = pos * inv_freq[i] in f32 (inv_freq [half], device memory: the default or the
 * Llama-3.1 scaled table of dt_rope_*_inv_freq). positions: NULL (pos = t), or device
 * [Bc, T] with Bc = 1 (shared by the batch) or B, i64 when pos_i64 else i32. y may be x. */
dt_status dt_cuda_rope_fwd(dt_stream *s, float *y, const float *x, const float *inv_freq,
                           const void *positions, int pos_i64, int64_t Bc, int64_t B, int64_t H,
                           int64_t T, int half);
/* gx = the inverse rotation of gy (the map is a rotation: neither x nor y is needed);
 * accumulate: gx += instead of gx = (then gx must not be gy). */
dt_status dt_cuda_rope_bwd(dt_stream *s, float *gx, const float *gy, const float *inv_freq,
                           const void *positions, int pos_i64, int64_t Bc, int64_t B, int64_t H,
                           int64_t T, int half, int accumulate);

/* ---- embedding (src/ops/embedding.c: ids [n] i32 or i64, table [V, D], out, g [n, D]) ---- */

/* out[i] = table[ids[i]] (f32 table, or bf16 bits widened exactly when table_bf16);
 * bad[0] = the first position whose id is outside [0, V), or -1 (its row of out is 0; the
 * caller reads bad when it syncs and refuses, as the CPU op does). */
dt_status dt_cuda_embedding_fwd(dt_stream *s, float *out, int64_t *bad, const void *ids,
                                int ids_i64, const void *table, int table_bf16, int64_t n,
                                int64_t V, int64_t D);
/* Bytes of scratch for dt_cuda_embedding_bwd (the sort keys). */
size_t dt_cuda_embedding_bwd_work(int64_t n);
/* dtable [V, D] f32 = (accumulate ? dtable : 0) + the rows of g added at their ids: rows no id
 * names stay exactly as they were (+0.0 without accumulate: the row-sparse gradient of
 * dt_param_info.sparse_row). Each row adds its positions in increasing order, the CPU's
 * order, so the bits equal the CPU's and every run's; ids outside [0, V) are skipped. */
dt_status dt_cuda_embedding_bwd(dt_stream *s, float *dtable, const float *g, const void *ids,
                                int ids_i64, int64_t n, int64_t V, int64_t D, int accumulate,
                                void *work);

/* ---- dropout (src/ops/dropout.c, training mode), y, x [n] --------------------------------- */

/* y = x * mask / (1 - p), or y += that (accumulate). Element i is kept iff
 * (word i % 4 of Philox4x32-10(key, {step lo, step hi, node, i / 4}) >> 8) >= ceil(p 2^24):
 * the counter-based mask of the CPU op bit for bit, with key = the graph's run key
 * (dt_graph_set_rng) and node = the dropout node's id. The same call is the backward
 * (x = dy, y = dx): the mask is regenerated, never stored. p == 0: y = x (or y += x); p == 1:
 * everything dropped. y may be x when not accumulating. step_dev (device memory, or NULL): the
 * kernel reads the step there instead of taking step (dt_graph_rng_on_device: a recorded
 * launch then draws the mask of the step stored before each replay). */
dt_status dt_cuda_dropout(dt_stream *s, float *y, const float *x, int64_t n, float p, uint64_t key,
                          uint64_t step, const uint64_t *step_dev, uint32_t node, int accumulate);

/* ---- attention (src/ops/attention.c): q, out [B, Hq, T, D], k, v [B, Hkv, T, D] ------------ */

/* out = softmax(scale q k^T [+ causal mask]) v per head, head h using kv head h / (Hq / Hkv)
 * (grouped-query); flash-style: key tiles through shared memory with an online softmax, no
 * T x T matrix. lse [B, Hq, T] = the rows' log-sum-exp, kept for the backward. scale <= 0:
 * 1 / sqrt(D), as dt_attention. q, k, v are f32, or bf16 (uint16_t bits) when in_bf16 (read
 * as their exact f32 values; all arithmetic f32); out, lse and the gradients are f32.
 * Needs Hq % Hkv == 0, 1 <= D <= 128, B * Hq <= 65535. */
dt_status dt_cuda_attention_fwd(dt_stream *s, float *out, float *lse, const void *q, const void *k,
                                const void *v, int in_bf16, int64_t B, int64_t Hq, int64_t Hkv,
                                int64_t T, int D, int causal, float scale);
/* Bytes of scratch for dt_cuda_attention_bwd (rowsum(gout * out) per query row). */
size_t dt_cuda_attention_bwd_work(int64_t B, int64_t Hq, int64_t T);
/* Bits of dt_cuda_attention_bwd's accumulate: add into that gradient instead of overwriting it
 * (the CPU op's gin_beta per input). */
#define DT_CUDA_ACC_DQ 1
#define DT_CUDA_ACC_DK 2
#define DT_CUDA_ACC_DV 4
/* dq, dk, dv (each may be NULL; distinct buffers) from gout, the inputs, out and lse of the
 * forward; each overwritten, or added to when its DT_CUDA_ACC_* bit is set in accumulate.
 * Every element has one writer and a fixed summation order (no atomics): the same bits on
 * every run. */
dt_status dt_cuda_attention_bwd(dt_stream *s, float *dq, float *dk, float *dv, const float *gout,
                                const void *q, const void *k, const void *v, int in_bf16,
                                const float *out, const float *lse, int64_t B, int64_t Hq,
                                int64_t Hkv, int64_t T, int D, int causal, float scale,
                                int accumulate, void *work);

/* ---- GEMM through cuBLASLt --------------------------------------------------------------- */

typedef enum dt_gemm_mode {
    DT_GEMM_F32 = 0,  /* f32 inputs, f32 arithmetic */
    DT_GEMM_TF32 = 1, /* f32 inputs, TF32 tensor cores (only when asked for) */
    DT_GEMM_BF16 = 2, /* bf16 inputs (uint16_t bits), f32 accumulation and output */
} dt_gemm_mode;

typedef struct dt_cuda_gemm dt_cuda_gemm;
/* The workspace a GEMM handle takes when asked for 0: 32 MiB, what cuBLAS recommends for
 * Hopper (and what `dtrain plan --device` counts). */
#define DT_CUDA_GEMM_WORKSPACE_DEFAULT ((size_t)32 << 20)
/* A cuBLASLt handle and a workspace of workspace_bytes on device d
 * (DT_CUDA_GEMM_WORKSPACE_DEFAULT if 0). */
dt_status dt_cuda_gemm_create(dt_device d, size_t workspace_bytes, dt_cuda_gemm **out);
void dt_cuda_gemm_destroy(dt_cuda_gemm *h);
/* Row-major C [M, N] = alpha * op(A) op(B) + beta * C with op(A) [M, K], op(B) [K, N];
 * A is [M, K] (or [K, M] when trans_a), B is [K, N] (or [N, K] when trans_b); lda, ldb, ldc are
 * row strides in elements. C is f32. */
dt_status dt_cuda_gemm_run(dt_cuda_gemm *h, dt_stream *s, dt_gemm_mode mode, int trans_a,
                           int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                           int64_t lda, const void *B, int64_t ldb, float beta, float *C,
                           int64_t ldc);

/* ---- convolution through cuDNN 9 (src/ops/conv.c: NCHW f32, torch conv2d) ----------------- */

/* A cuDNN handle on one device (one per device and thread that issues convolutions). In a
 * build whose CUDA toolkit has no cuDNN, create refuses with one line. */
typedef struct dt_cuda_dnn dt_cuda_dnn;
dt_status dt_cuda_dnn_create(dt_device d, dt_cuda_dnn **out);
void dt_cuda_dnn_destroy(dt_cuda_dnn *h);

/* x [N, C, H, W], w [O, C/groups, KH, KW], y [N, O, OH, OW] with
 * OH = (H + 2 pad_h - dil_h (KH - 1) - 1) / stride_h + 1 (W alike), as dt_conv2d. */
typedef struct dt_cuda_conv_shape {
    int64_t N, C, H, W, O, KH, KW;
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
} dt_cuda_conv_shape;

/* Plan flags. */
#define DT_CUDA_CONV_TF32 1     /* allow TF32 tensor-core engines (only when asked for) */
#define DT_CUDA_CONV_ACC_DX 2   /* backward-data adds into dx (the CPU's gin_beta 1) */
#define DT_CUDA_CONV_ACC_DW 4   /* backward-filter adds into dw and db */
#define DT_CUDA_CONV_FWD_ONLY 8 /* plan the forward only (inference) */
/* The workspace cap the planner assumes for cuDNN (src/config/plan_gpu.c): 256 MiB. */
#define DT_CUDA_CONV_WORKSPACE_CAP ((size_t)256 << 20)

/* The engines of one convolution shape, chosen once at setup: for each direction the first
 * engine of cuDNN's heuristic (mode A, then the fallback list) that is deterministic (no
 * NONDETERMINISTIC note: reruns give the same bits), not reduced-precision (no TF32/down-
 * conversion unless DT_CUDA_CONV_TF32, no FFT), finalizes, and needs at most ws_cap bytes of
 * workspace (0: DT_CUDA_CONV_WORKSPACE_CAP). Device pointers passed to the runs must be
 * 16-byte aligned (what the plans were made for). */
typedef struct dt_cuda_conv dt_cuda_conv;
dt_status dt_cuda_conv_create(dt_cuda_dnn *h, const dt_cuda_conv_shape *shape, int flags,
                              size_t ws_cap, dt_cuda_conv **out);
void dt_cuda_conv_destroy(dt_cuda_conv *c);
/* Bytes of workspace the runs need (the largest of the three directions); the caller
 * allocates it once. */
size_t dt_cuda_conv_work(const dt_cuda_conv *c);
/* out_hw = {OH, OW} of the plan's shape. */
void dt_cuda_conv_out_hw(const dt_cuda_conv *c, int64_t out_hw[2]);
/* y = conv(x, w) + bias (bias [O] or NULL). */
dt_status dt_cuda_conv_fwd(dt_cuda_conv *c, dt_stream *s, float *y, const float *x, const float *w,
                           const float *bias, void *work);
/* dx (+)= d loss / dx from gy [N, O, OH, OW] and w. */
dt_status dt_cuda_conv_bwd_data(dt_cuda_conv *c, dt_stream *s, float *dx, const float *gy,
                                const float *w, void *work);
/* dw (+)= d loss / dw from gy and x (dw may be NULL), db [O] (+)= sum of gy over N, OH, OW
 * (db may be NULL; a fixed-order reduction, no atomics). */
dt_status dt_cuda_conv_bwd_filter(dt_cuda_conv *c, dt_stream *s, float *dw, float *db,
                                  const float *gy, const float *x, void *work);

/* ---- per-channel bias of NCHW values (the convolution's bias) ------------------------------ */

/* y [N, C, P] += b[c]. */
dt_status dt_cuda_bias_add(dt_stream *s, float *y, const float *b, int64_t N, int64_t C, int64_t P);
/* db [C] = (accumulate ? db : 0) + sum of gy [N, C, P] over N and P (double partials, fixed
 * order: the same bits on every run). */
dt_status dt_cuda_bias_grad(dt_stream *s, float *db, const float *gy, int64_t N, int64_t C,
                            int64_t P, int accumulate);

/* ---- batchnorm2d (src/ops/batchnorm.c), x, y, res [N, C, P], P = H * W; [C] vectors --------- */

#define DT_CUDA_BN_EVAL 0      /* normalise with the running statistics */
#define DT_CUDA_BN_TRAIN 1     /* batch statistics, running statistics updated */
#define DT_CUDA_BN_RECOMPUTE 2 /* batch statistics, running statistics left alone */
/* Bytes of scratch for dt_cuda_bn_fwd and dt_cuda_bn_bwd (per-channel partial sums). */
size_t dt_cuda_bn_work(int64_t N, int64_t C, int64_t P);
/* y = relu?(x * alpha + beta + res?), alpha = rstd w, beta = b - mean alpha, as the CPU op.
 * Training: mean = float(sum x / M), var = sum (x - mean)^2 / M (two passes, double partials
 * in a fixed order, M = N P >= 2), rstd = 1 / sqrtf(var + eps), and under DT_CUDA_BN_TRAIN
 * rm = (1 - momentum) rm + momentum mean, rv = (1 - momentum) rv + momentum var M / (M - 1).
 * Eval: mean = rm, rstd = 1 / sqrtf(rv + eps). mean and rstd [C] are kept for the backward.
 * res may be NULL (no residual); relu 0 or 1. */
dt_status dt_cuda_bn_fwd(dt_stream *s, float *y, float *mean, float *rstd, float *rm, float *rv,
                         const float *x, const float *w, const float *b, const float *res, int relu,
                         int64_t N, int64_t C, int64_t P, float momentum, float eps, int mode,
                         void *work);
/* Accumulate bits of dt_cuda_bn_bwd (the CPU op's gin_beta per input). */
#define DT_CUDA_BN_ACC_GX 1
#define DT_CUDA_BN_ACC_GW 2
#define DT_CUDA_BN_ACC_GB 4
#define DT_CUDA_BN_ACC_GRES 8
/* With relu, gy is first masked in place by out > 0 (out: the forward's y), as the CPU op.
 * gb = sum gy, gw = sum gy (x - mean) rstd; training (the forward's mode was not eval):
 * gx = k gy + u (x - mean) + v with k = w rstd, u = -k rstd^2 sum gy (x - mean) / M,
 * v = -k sum gy / M; eval: gx = k gy. gres = gy (the residual's gradient). gx, gw, gb, gres
 * may each be NULL; gx and gres may be one buffer (the residual is x: gx is written first). */
dt_status dt_cuda_bn_bwd(dt_stream *s, float *gx, float *gw, float *gb, float *gres, float *gy,
                         const float *x, const float *out, const float *mean, const float *rstd,
                         const float *w, int training, int relu, int64_t N, int64_t C, int64_t P,
                         int accumulate, void *work);

/* ---- pooling (src/ops/pool.c: NCHW, ceil_mode off, dilation 1) ------------------------------ */

/* x [planes, H, W] -> y [planes, OH, OW], planes = N * C, OH = (H + 2 ph - kh) / sh + 1. */
typedef struct dt_cuda_pool2d {
    int64_t planes, H, W, OH, OW;
    int kh, kw, sh, sw, ph, pw;
} dt_cuda_pool2d;
/* y = window max (padding as -inf), arg [planes, OH, OW] = h * W + w of the first max in window
 * order (a NaN wins, a later NaN over an earlier one), as the CPU op. */
dt_status dt_cuda_maxpool_fwd(dt_stream *s, float *y, int32_t *arg, const float *x,
                              const dt_cuda_pool2d *p);
/* gx (+)= gy gathered at arg: each input element adds the outputs that chose it in output
 * order, the CPU's scatter order (no atomics). */
dt_status dt_cuda_maxpool_bwd(dt_stream *s, float *gx, const float *gy, const int32_t *arg,
                              const dt_cuda_pool2d *p, int accumulate);
/* count_include_pad: each window divides by its extent clipped to the padded input. */
dt_status dt_cuda_avgpool_fwd(dt_stream *s, float *y, const float *x, const dt_cuda_pool2d *p);
dt_status dt_cuda_avgpool_bwd(dt_stream *s, float *gx, const float *gy, const dt_cuda_pool2d *p,
                              int accumulate);
/* Global average pooling: y [planes] = mean of x [planes, P]; gx (+)= gy / P. */
dt_status dt_cuda_gap_fwd(dt_stream *s, float *y, const float *x, int64_t planes, int64_t P);
dt_status dt_cuda_gap_bwd(dt_stream *s, float *gx, const float *gy, int64_t planes, int64_t P,
                          int accumulate);

/* ---- graph helpers (src/device/cuda_graph.cu): what the graph executor and the ops' CUDA
 * glue need besides the kernels above. beta is 0 (overwrite, the output is never read) or 1
 * (add into it), as the graph's gin_beta. --------------------------------------------------- */

/* Sets bytes of device memory to value, in order on s (cudaMemsetAsync). */
dt_status dt_cuda_memset(dt_stream *s, void *p, int value, size_t bytes);
/* y [n] = alpha x + beta y. */
dt_status dt_cuda_axpby(dt_stream *s, float *y, const float *x, int64_t n, float alpha, float beta);
/* y [n] = bf16(x) as uint16_t bits, round-to-nearest-even (dt_bf16_from_f32 bit for bit: the
 * operand rounding of the frozen bf16-weight linear). */
dt_status dt_cuda_to_bf16(dt_stream *s, uint16_t *y, const float *x, int64_t n);
/* y [n] = op(a, b) + beta y, op 0: a + b, 1: a - b, 2: a * b (no broadcasting). */
dt_status dt_cuda_ew(dt_stream *s, float *y, const float *a, const float *b, int64_t n, int op,
                     float beta);
/* y = x sigmoid(x); gx = gy silu'(x) + beta gx, all [n]. */
dt_status dt_cuda_silu_fwd(dt_stream *s, float *y, const float *x, int64_t n);
dt_status dt_cuda_silu_bwd(dt_stream *s, float *gx, const float *gy, const float *x, int64_t n,
                           float beta);
/* y = x < 0 ? 0 : x (a NaN passes through); gx = gy (y > 0) + beta gx, all [n] (the backward
 * reads the forward's output, as src/ops/activation.c). */
dt_status dt_cuda_relu_fwd(dt_stream *s, float *y, const float *x, int64_t n);
dt_status dt_cuda_relu_bwd(dt_stream *s, float *gx, const float *gy, const float *y, int64_t n,
                           float beta);
#define DT_CUDA_PERMUTE_DIMS 8
/* dst, contiguous over shape [nd] (nd <= DT_CUDA_PERMUTE_DIMS), = src read with
 * src_strides[j] elements per step of dim j (+ beta dst): transpose and permute. */
dt_status dt_cuda_strided_copy(dt_stream *s, float *dst, const float *src, int nd,
                               const int64_t *shape, const int64_t *src_strides, float beta);

#ifdef __cplusplus
}
#endif
#endif
