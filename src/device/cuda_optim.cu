// Fused multi-tensor optimizers, the global gradient norm and clipping on the flat f32 buffers
// (include/dtrain/device_cuda.h). The update rules are src/optim/optim.c's, operation for
// operation (torch.optim.SGD / AdamW); segments come in batches of up to 64 per launch, one
// grid row (blockIdx.y) per segment.
#include <math.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_common.cuh"

#define SEG_BATCH 64
#define OPT_THREADS 256

struct seg_batch {
    dt_cuda_optim_seg s[SEG_BATCH];
    int base; // index of s[0] among all segments (the _dev kernels' row of the scalar block)
};

// The per-step scalars of segment row y: from the launch (dhead == NULL) or the device block.
__device__ static inline void step_scalars(const seg_batch &b, const dt_cuda_optim_dev_seg *dseg,
                                           dt_cuda_optim_seg *sg) {
    if (!dseg) return;
    const dt_cuda_optim_dev_seg d = dseg[b.base + (int)blockIdx.y];
    sg->lr = d.lr, sg->decay = d.decay, sg->step_size = d.step_size;
}

// p, g, m, v: [n] of the slice; each segment's elements are grid-strided over blockIdx.x.
// dhead/dseg: the device scalar block of the capturable variant, or NULL (launch arguments).
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, seg_batch b,
                             dt_cuda_adamw_scalars k, const dt_cuda_optim_dev_head *dhead,
                             const dt_cuda_optim_dev_seg *dseg) {
    dt_cuda_optim_seg sg = b.s[blockIdx.y];
    step_scalars(b, dseg, &sg);
    if (dhead) k.bc2_sqrt = dhead->bc2_sqrt;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < sg.len;
         j += (size_t)gridDim.x * blockDim.x) {
        const size_t i = sg.start + j;
        const float gi = g[i];
        const float mi = m[i] * k.b1 + k.one_m_b1 * gi;
        const float vi = v[i] * k.b2 + k.one_m_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
        p[i] = p[i] * sg.decay - sg.step_size * (mi / denom);
    }
}

// torch.optim.SGD: d = g + wd p; buf = first ? d : momentum buf + (1 - dampening) d;
// d = nesterov ? d + momentum buf : buf; p -= lr d. buf NULL when momentum == 0.
__global__ void sgd_kernel(float *p, const float *g, float *buf, seg_batch b, float momentum,
                           float dampening, int nesterov, int first,
                           const dt_cuda_optim_dev_head *dhead, const dt_cuda_optim_dev_seg *dseg) {
    dt_cuda_optim_seg sg = b.s[blockIdx.y];
    step_scalars(b, dseg, &sg);
    if (dhead) first = dhead->first;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < sg.len;
         j += (size_t)gridDim.x * blockDim.x) {
        const size_t i = sg.start + j;
        const float d = g[i] + sg.wd * p[i];
        if (!buf) {
            p[i] -= sg.lr * d;
        } else if (first) {
            buf[i] = d;
            p[i] -= sg.lr * (d + (nesterov ? momentum : 0.0f) * d);
        } else {
            const float bb = buf[i] * momentum + (1.0f - dampening) * d;
            buf[i] = bb;
            p[i] -= sg.lr * (nesterov ? d + momentum * bb : bb);
        }
    }
}

// Launches `launch(batch, grid)` for each batch of up to 64 segments.
template <typename F>
static dt_status for_batches(const dt_cuda_optim_seg *segs, int n_seg, const char *op, F launch) {
    if (n_seg < 0 || (n_seg > 0 && !segs))
        return dt_error_set(DT_ERR_INVALID, "%s: %d segments given as %p", op, n_seg,
                            (const void *)segs);
    for (int a = 0; a < n_seg; a += SEG_BATCH) {
        seg_batch b;
        b.base = a;
        const int nb = n_seg - a < SEG_BATCH ? n_seg - a : SEG_BATCH;
        size_t longest = 0;
        for (int i = 0; i < nb; i++) {
            b.s[i] = segs[a + i];
            if (b.s[i].len > longest) longest = b.s[i].len;
        }
        if (longest == 0) continue;
        size_t bx = (longest + OPT_THREADS * 4 - 1) / (OPT_THREADS * 4);
        if (bx > 4096) bx = 4096;
        launch(b, dim3((unsigned)bx, (unsigned)nb));
    }
    return DT_OK;
}

static dt_status adamw_launch(dt_stream *s, float *p, const float *g, float *m, float *v,
                              const dt_cuda_optim_seg *segs, int n_seg,
                              const dt_cuda_adamw_scalars *k, const dt_cuda_optim_dev_head *dhead,
                              const dt_cuda_optim_dev_seg *dseg, const char *op) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st != DT_OK) return st;
    if (!k) return dt_error_set(DT_ERR_INVALID, "%s: NULL scalars", op);
    if (n_seg > 0 && (!p || !g || !m || !v))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL params, grads or moments", op);
    const dt_cuda_adamw_scalars kk = *k;
    st = for_batches(segs, n_seg, op, [&](const seg_batch &b, dim3 grid) {
        adamw_kernel<<<grid, OPT_THREADS, 0, cs>>>(p, g, m, v, b, kk, dhead, dseg);
    });
    return st == DT_OK ? dt_cuda_launched(s, op) : st;
}

static dt_status sgd_launch(dt_stream *s, float *p, const float *g, float *buf,
                            const dt_cuda_optim_seg *segs, int n_seg, float momentum,
                            float dampening, int nesterov, int first,
                            const dt_cuda_optim_dev_head *dhead, const dt_cuda_optim_dev_seg *dseg,
                            const char *op) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, op, &cs);
    if (st != DT_OK) return st;
    if (n_seg > 0 && (!p || !g || (momentum != 0.0f && !buf)))
        return dt_error_set(DT_ERR_INVALID,
                            "%s: NULL params or grads, or momentum %g without a buffer", op,
                            momentum);
    float *bf = momentum != 0.0f ? buf : NULL;
    st = for_batches(segs, n_seg, op, [&](const seg_batch &b, dim3 grid) {
        sgd_kernel<<<grid, OPT_THREADS, 0, cs>>>(p, g, bf, b, momentum, dampening, nesterov, first,
                                                 dhead, dseg);
    });
    return st == DT_OK ? dt_cuda_launched(s, op) : st;
}

extern "C" dt_status dt_cuda_adamw(dt_stream *s, float *p, const float *g, float *m, float *v,
                                   const dt_cuda_optim_seg *segs, int n_seg,
                                   const dt_cuda_adamw_scalars *k) {
    return adamw_launch(s, p, g, m, v, segs, n_seg, k, NULL, NULL, "cuda adamw");
}

extern "C" dt_status dt_cuda_sgd(dt_stream *s, float *p, const float *g, float *buf,
                                 const dt_cuda_optim_seg *segs, int n_seg, float momentum,
                                 float dampening, int nesterov, int first) {
    return sgd_launch(s, p, g, buf, segs, n_seg, momentum, dampening, nesterov, first, NULL, NULL,
                      "cuda sgd");
}

extern "C" dt_status dt_cuda_adamw_dev(dt_stream *s, float *p, const float *g, float *m, float *v,
                                       const dt_cuda_optim_seg *segs, int n_seg,
                                       const dt_cuda_adamw_scalars *k,
                                       const dt_cuda_optim_dev_head *dhead,
                                       const dt_cuda_optim_dev_seg *dseg) {
    if (n_seg > 0 && (!dhead || !dseg))
        return dt_error_set(DT_ERR_INVALID, "cuda adamw (device scalars): NULL scalar block");
    return adamw_launch(s, p, g, m, v, segs, n_seg, k, dhead, dseg, "cuda adamw (device scalars)");
}

extern "C" dt_status dt_cuda_sgd_dev(dt_stream *s, float *p, const float *g, float *buf,
                                     const dt_cuda_optim_seg *segs, int n_seg, float momentum,
                                     float dampening, int nesterov,
                                     const dt_cuda_optim_dev_head *dhead,
                                     const dt_cuda_optim_dev_seg *dseg) {
    if (n_seg > 0 && (!dhead || !dseg))
        return dt_error_set(DT_ERR_INVALID, "cuda sgd (device scalars): NULL scalar block");
    return sgd_launch(s, p, g, buf, segs, n_seg, momentum, dampening, nesterov, 0, dhead, dseg,
                      "cuda sgd (device scalars)");
}

#define SUMSQ_BLOCKS (DT_CUDA_SUMSQ_WORK - 1)

// part[blockIdx.x] = this block's share of sum g^2 (double); the grid is fixed at SUMSQ_BLOCKS.
__global__ void sumsq_partial(const float *g, size_t n, double *part) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += (double)g[i] * (double)g[i];
    acc = dt_block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

// out[0] = sum of part[0 .. SUMSQ_BLOCKS), one block of 1024 threads.
__global__ void sumsq_final(const double *part, double *out) {
    __shared__ double sh[32];
    double acc = threadIdx.x < SUMSQ_BLOCKS ? part[threadIdx.x] : 0.0;
    acc = dt_block_sum(acc, sh);
    if (threadIdx.x == 0) out[0] = acc;
}

extern "C" dt_status dt_cuda_grad_sumsq(dt_stream *s, const float *g, size_t n, double *work) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda grad sumsq", &cs);
    if (st != DT_OK) return st;
    if (!work || (n > 0 && !g))
        return dt_error_set(DT_ERR_INVALID, "cuda grad sumsq: NULL %s", !work ? "work" : "grads");
    sumsq_partial<<<SUMSQ_BLOCKS, 256, 0, cs>>>(g, n, work + 1);
    sumsq_final<<<1, 1024, 0, cs>>>(work + 1, work);
    return dt_cuda_launched(s, "cuda grad sumsq");
}

// g *= coef, coef as dt_grad_clip_coef: min(1, max_norm / (norm + 1e-6)), 1 if not finite.
__global__ void clip_kernel(float *g, size_t n, const double *sumsq, float max_norm) {
    const double norm = sqrt(*sumsq);
    if (!(max_norm > 0) || !isfinite(norm)) return;
    const double coef = (double)max_norm / (norm + 1e-6);
    if (!(coef < 1.0)) return;
    const float c = (float)coef;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] *= c;
}

extern "C" dt_status dt_cuda_grad_clip(dt_stream *s, float *g, size_t n, const double *sumsq,
                                       float max_norm) {
    cudaStream_t cs;
    dt_status st = dt_cuda_stream_of(s, "cuda grad clip", &cs);
    if (st != DT_OK) return st;
    if (!sumsq || (n > 0 && !g))
        return dt_error_set(DT_ERR_INVALID, "cuda grad clip: NULL %s", !sumsq ? "sumsq" : "grads");
    if (n == 0) return DT_OK;
    size_t blocks = (n + 1023) / 1024;
    if (blocks > 4096) blocks = 4096;
    clip_kernel<<<(unsigned)blocks, 256, 0, cs>>>(g, n, sumsq, max_norm);
    return dt_cuda_launched(s, "cuda grad clip");
}
