/* dt_optim_step_cuda: the step of dt_optim_step on device buffers, through the fused CUDA
 * kernels (include/dtrain/device_cuda.h). The segments and their scalars are computed here on
 * the host exactly as optim.c computes them (double, cast to f32 where torch casts), so the
 * kernels do the same f32 arithmetic per element as the CPU step. */
#include <math.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "optim/optim_impl.h"

/* Segments per kernel call (a stack array: the step allocates nothing). */
#define SEG_CHUNK 64

/* The scalars of step t = opt->step + 1 (what optim.c computes for it). */
static double bias_corr(double beta, int64_t t) {
    return 1.0 - pow(beta, (double)t);
}

static dt_cuda_adamw_scalars adamw_scalars(const dt_optim_config *c, int64_t t) {
    return (dt_cuda_adamw_scalars){.b1 = (float)c->beta1,
                                   .one_m_b1 = (float)(1.0 - c->beta1),
                                   .b2 = (float)c->beta2,
                                   .one_m_b2 = (float)(1.0 - c->beta2),
                                   .eps = (float)c->eps,
                                   .bc2_sqrt = (float)sqrt(bias_corr(c->beta2, t))};
}

static dt_cuda_optim_seg seg_scalars(const optim_seg *o, float lr, double bc1) {
    double lr_s = (double)lr * o->lr_scale;
    return (dt_cuda_optim_seg){.start = o->start,
                               .len = o->len,
                               .lr = (float)lr_s,
                               .wd = (float)o->wd,
                               .decay = (float)(1.0 - lr_s * o->wd),
                               .step_size = (float)(lr_s / bc1)};
}

static dt_status check_args(const dt_optim *opt, const float *params, const float *grads,
                            float *const *bufs, const char *op) {
    if (!opt) return dt_error_set(DT_ERR_INVALID, "%s: NULL optimizer", op);
    size_t n = opt->hi - opt->lo;
    if (n > 0 && (!params || !grads))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL params or grads", op);
    for (int b = 0; b < opt->n_buf && n > 0; b++)
        if (!bufs || !bufs[b])
            return dt_error_set(DT_ERR_INVALID, "%s: device buffer %d is NULL", op, b);
    return DT_OK;
}

static dt_status check_lr(float lr, const char *op) {
    return lr >= 0 && isfinite(lr)
               ? DT_OK
               : dt_error_set(DT_ERR_INVALID, "%s: learning rate %g must be >= 0", op, lr);
}

/* Issues the kernels of one step: scalars from the launch (dblock NULL) or the device block.
 * The segments' constant fields are what seg_scalars gives for any lr. */
static dt_status issue(dt_optim *opt, dt_stream *s, float *params, const float *grads,
                       float *const *bufs, float lr, const void *dblock) {
    const dt_optim_config *c = &opt->cfg;
    int64_t t = opt->step + 1;
    double bc1 = bias_corr(c->beta1, t);
    dt_cuda_adamw_scalars k = adamw_scalars(c, t);
    const dt_cuda_optim_dev_head *dh = dblock;
    const dt_cuda_optim_dev_seg *ds = dblock ? (const void *)(dh + 1) : NULL;
    dt_cuda_optim_seg sg[SEG_CHUNK];
    dt_status st = DT_OK;
    for (int s0 = 0; s0 < opt->n_seg && st == DT_OK; s0 += SEG_CHUNK) {
        int m = opt->n_seg - s0 < SEG_CHUNK ? opt->n_seg - s0 : SEG_CHUNK;
        for (int i = 0; i < m; i++) sg[i] = seg_scalars(&opt->seg[s0 + i], lr, bc1);
        if (c->kind == DT_OPTIM_ADAMW)
            st = dblock
                     ? dt_cuda_adamw_dev(s, params, grads, bufs[0], bufs[1], sg, m, &k, dh, ds + s0)
                     : dt_cuda_adamw(s, params, grads, bufs[0], bufs[1], sg, m, &k);
        else if (dblock)
            st = dt_cuda_sgd_dev(s, params, grads, opt->n_buf ? bufs[0] : NULL, sg, m,
                                 (float)c->momentum, (float)c->dampening, c->nesterov, dh, ds + s0);
        else
            st = dt_cuda_sgd(s, params, grads, opt->n_buf ? bufs[0] : NULL, sg, m,
                             (float)c->momentum, (float)c->dampening, c->nesterov, t == 1);
    }
    return st;
}

dt_status dt_optim_step_cuda(dt_optim *opt, dt_stream *s, float *params, const float *grads,
                             float *const *bufs, float lr) {
    dt_status st = check_args(opt, params, grads, bufs, "optim step (cuda)");
    if (st == DT_OK) st = check_lr(lr, "optim step (cuda)");
    if (st == DT_OK) st = issue(opt, s, params, grads, bufs, lr, NULL);
    if (st == DT_OK) opt->step++; /* committed once the kernels were issued */
    return st;
}

size_t dt_optim_cuda_block_bytes(const dt_optim *opt) {
    size_t b = sizeof(dt_cuda_optim_dev_head) +
               (size_t)(opt ? opt->n_seg : 0) * sizeof(dt_cuda_optim_dev_seg);
    return (b + 15) & ~(size_t)15;
}

dt_status dt_optim_cuda_block_fill(const dt_optim *opt, float lr, void *block, size_t bytes) {
    const char *op = "optim scalar block";
    if (!opt || !block) return dt_error_set(DT_ERR_INVALID, "%s: NULL optimizer or block", op);
    if (bytes < dt_optim_cuda_block_bytes(opt))
        return dt_error_set(DT_ERR_INVALID, "%s: %zu bytes given, %zu needed (%d segments)", op,
                            bytes, dt_optim_cuda_block_bytes(opt), opt->n_seg);
    dt_status st = check_lr(lr, op);
    if (st != DT_OK) return st;
    const dt_optim_config *c = &opt->cfg;
    int64_t t = opt->step + 1;
    double bc1 = bias_corr(c->beta1, t);
    memset(block, 0, bytes);
    dt_cuda_optim_dev_head *h = block;
    h->bc2_sqrt = adamw_scalars(c, t).bc2_sqrt;
    h->first = t == 1;
    dt_cuda_optim_dev_seg *d = (void *)(h + 1);
    for (int i = 0; i < opt->n_seg; i++) {
        dt_cuda_optim_seg sg = seg_scalars(&opt->seg[i], lr, bc1);
        d[i] = (dt_cuda_optim_dev_seg){.lr = sg.lr, .decay = sg.decay, .step_size = sg.step_size};
    }
    return DT_OK;
}

dt_status dt_optim_step_cuda_dev(dt_optim *opt, dt_stream *s, float *params, const float *grads,
                                 float *const *bufs, const void *dblock) {
    dt_status st = check_args(opt, params, grads, bufs, "optim step (cuda, device scalars)");
    if (st == DT_OK && !dblock)
        st = dt_error_set(DT_ERR_INVALID, "optim step (cuda, device scalars): NULL scalar block");
    /* lr 0 for the launch's fields: the kernels read lr, decay and step_size from the block */
    return st == DT_OK ? issue(opt, s, params, grads, bufs, 0.0f, dblock) : st;
}

dt_status dt_optim_step_done(dt_optim *opt) {
    if (!opt) return dt_error_set(DT_ERR_INVALID, "optim step done: NULL optimizer");
    opt->step++;
    return DT_OK;
}
