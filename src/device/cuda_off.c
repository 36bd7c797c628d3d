/* A build without CUDA (-DDT_CUDA=OFF or no toolkit found): no CUDA backend, and every CUDA
 * kernel entry point refuses with one line, so callers and tests link either way. */
#include "device/device_impl.h"
#include "dtrain/device_cuda.h"

const dt_device_backend *dt_device_cuda_backend(void) {
    return NULL;
}

static dt_status off(const char *op) {
    return dt_error_set(DT_ERR_STATE, "%s: this dtrain was built without CUDA (-DDT_CUDA=OFF)", op);
}

dt_status dt_cuda_adamw(dt_stream *s, float *p, const float *g, float *m, float *v,
                        const dt_cuda_optim_seg *segs, int n_seg, const dt_cuda_adamw_scalars *k) {
    return off("cuda adamw");
}
dt_status dt_cuda_sgd(dt_stream *s, float *p, const float *g, float *buf,
                      const dt_cuda_optim_seg *segs, int n_seg, float momentum, float dampening,
                      int nesterov, int first) {
    return off("cuda sgd");
}
dt_status dt_cuda_adamw_dev(dt_stream *s, float *p, const float *g, float *m, float *v,
                            const dt_cuda_optim_seg *segs, int n_seg,
                            const dt_cuda_adamw_scalars *k, const dt_cuda_optim_dev_head *dhead,
                            const dt_cuda_optim_dev_seg *dseg) {
    return off("cuda adamw (device scalars)");
}
dt_status dt_cuda_sgd_dev(dt_stream *s, float *p, const float *g, float *buf,
                          const dt_cuda_optim_seg *segs, int n_seg, float momentum, float dampening,
                          int nesterov, const dt_cuda_optim_dev_head *dhead,
                          const dt_cuda_optim_dev_seg *dseg) {
    return off("cuda sgd (device scalars)");
}
dt_status dt_cuda_grad_sumsq(dt_stream *s, const float *g, size_t n, double *work) {
    return off("cuda grad sumsq");
}
dt_status dt_cuda_grad_clip(dt_stream *s, float *g, size_t n, const double *sumsq, float max_norm) {
    return off("cuda grad clip");
}
dt_status dt_cuda_rmsnorm_fwd(dt_stream *s, float *y, float *rstd, const float *x, const float *w,
                              int64_t rows, int64_t D, float eps) {
    return off("cuda rmsnorm fwd");
}
size_t dt_cuda_rmsnorm_bwd_work(int64_t rows, int64_t D) {
    return 0;
}
dt_status dt_cuda_rmsnorm_bwd(dt_stream *s, float *dx, float *dw, const float *gy, const float *x,
                              const float *w, const float *rstd, int64_t rows, int64_t D,
                              void *work) {
    return off("cuda rmsnorm bwd");
}
dt_status dt_cuda_swiglu_fwd(dt_stream *s, float *y, const float *a, const float *b, int64_t n) {
    return off("cuda swiglu fwd");
}
dt_status dt_cuda_swiglu_bwd(dt_stream *s, float *da, float *db, const float *gy, const float *a,
                             const float *b, int64_t n) {
    return off("cuda swiglu bwd");
}
size_t dt_cuda_ce_work(int64_t N) {
    return 0;
}
dt_status dt_cuda_ce_fwd(dt_stream *s, float *loss, float *lse, int64_t *stats, const float *logits,
                         const int32_t *targets, int64_t N, int64_t C, int64_t ignore,
                         float label_smoothing, void *work) {
    return off("cuda cross_entropy fwd");
}
dt_status dt_cuda_ce_bwd(dt_stream *s, float *dx, const float *logits, const int32_t *targets,
                         const float *lse, const int64_t *stats, const float *gloss, int64_t N,
                         int64_t C, int64_t ignore, float label_smoothing) {
    return off("cuda cross_entropy bwd");
}
dt_status dt_cuda_rope_fwd(dt_stream *s, float *y, const float *x, const float *inv_freq,
                           const void *positions, int pos_i64, int64_t Bc, int64_t B, int64_t H,
                           int64_t T, int half) {
    return off("cuda rope fwd");
}
dt_status dt_cuda_rope_bwd(dt_stream *s, float *gx, const float *gy, const float *inv_freq,
                           const void *positions, int pos_i64, int64_t Bc, int64_t B, int64_t H,
                           int64_t T, int half, int accumulate) {
    return off("cuda rope bwd");
}
dt_status dt_cuda_embedding_fwd(dt_stream *s, float *out, int64_t *bad, const void *ids,
                                int ids_i64, const void *table, int table_bf16, int64_t n,
                                int64_t V, int64_t D) {
    return off("cuda embedding fwd");
}
size_t dt_cuda_embedding_bwd_work(int64_t n) {
    return 0;
}
dt_status dt_cuda_embedding_bwd(dt_stream *s, float *dtable, const float *g, const void *ids,
                                int ids_i64, int64_t n, int64_t V, int64_t D, int accumulate,
                                void *work) {
    return off("cuda embedding bwd");
}
dt_status dt_cuda_dropout(dt_stream *s, float *y, const float *x, int64_t n, float p, uint64_t key,
                          uint64_t step, const uint64_t *step_dev, uint32_t node, int accumulate) {
    return off("cuda dropout");
}
dt_status dt_cuda_attention_fwd(dt_stream *s, float *out, float *lse, const void *q, const void *k,
                                const void *v, int in_bf16, int64_t B, int64_t Hq, int64_t Hkv,
                                int64_t T, int D, int causal, float scale) {
    return off("cuda attention fwd");
}
size_t dt_cuda_attention_bwd_work(int64_t B, int64_t Hq, int64_t T) {
    return 0;
}
dt_status dt_cuda_attention_bwd(dt_stream *s, float *dq, float *dk, float *dv, const float *gout,
                                const void *q, const void *k, const void *v, int in_bf16,
                                const float *out, const float *lse, int64_t B, int64_t Hq,
                                int64_t Hkv, int64_t T, int D, int causal, float scale,
                                int accumulate, void *work) {
    return off("cuda attention bwd");
}
dt_status dt_cuda_gemm_create(dt_device d, size_t workspace_bytes, dt_cuda_gemm **out) {
    if (out) *out = NULL;
    return off("cuda gemm create");
}
void dt_cuda_gemm_destroy(dt_cuda_gemm *h) {}
dt_status dt_cuda_gemm_run(dt_cuda_gemm *h, dt_stream *s, dt_gemm_mode mode, int trans_a,
                           int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                           int64_t lda, const void *B, int64_t ldb, float beta, float *C,
                           int64_t ldc) {
    return off("cuda gemm");
}
dt_status dt_cuda_bias_add(dt_stream *s, float *y, const float *b, int64_t N, int64_t C,
                           int64_t P) {
    return off("cuda bias add");
}
dt_status dt_cuda_bias_grad(dt_stream *s, float *db, const float *gy, int64_t N, int64_t C,
                            int64_t P, int accumulate) {
    return off("cuda bias grad");
}
size_t dt_cuda_bn_work(int64_t N, int64_t C, int64_t P) {
    return 0;
}
dt_status dt_cuda_bn_fwd(dt_stream *s, float *y, float *mean, float *rstd, float *rm, float *rv,
                         const float *x, const float *w, const float *b, const float *res, int relu,
                         int64_t N, int64_t C, int64_t P, float momentum, float eps, int mode,
                         void *work) {
    return off("cuda batchnorm fwd");
}
dt_status dt_cuda_bn_bwd(dt_stream *s, float *gx, float *gw, float *gb, float *gres, float *gy,
                         const float *x, const float *out, const float *mean, const float *rstd,
                         const float *w, int training, int relu, int64_t N, int64_t C, int64_t P,
                         int accumulate, void *work) {
    return off("cuda batchnorm bwd");
}
dt_status dt_cuda_maxpool_fwd(dt_stream *s, float *y, int32_t *arg, const float *x,
                              const dt_cuda_pool2d *p) {
    return off("cuda maxpool fwd");
}
dt_status dt_cuda_maxpool_bwd(dt_stream *s, float *gx, const float *gy, const int32_t *arg,
                              const dt_cuda_pool2d *p, int accumulate) {
    return off("cuda maxpool bwd");
}
dt_status dt_cuda_avgpool_fwd(dt_stream *s, float *y, const float *x, const dt_cuda_pool2d *p) {
    return off("cuda avgpool fwd");
}
dt_status dt_cuda_avgpool_bwd(dt_stream *s, float *gx, const float *gy, const dt_cuda_pool2d *p,
                              int accumulate) {
    return off("cuda avgpool bwd");
}
dt_status dt_cuda_gap_fwd(dt_stream *s, float *y, const float *x, int64_t planes, int64_t P) {
    return off("cuda global avgpool fwd");
}
dt_status dt_cuda_gap_bwd(dt_stream *s, float *gx, const float *gy, int64_t planes, int64_t P,
                          int accumulate) {
    return off("cuda global avgpool bwd");
}
dt_status dt_cuda_memset(dt_stream *s, void *p, int value, size_t bytes) {
    return off("cuda memset");
}
dt_status dt_cuda_axpby(dt_stream *s, float *y, const float *x, int64_t n, float alpha,
                        float beta) {
    return off("cuda axpby");
}
dt_status dt_cuda_to_bf16(dt_stream *s, uint16_t *y, const float *x, int64_t n) {
    return off("cuda f32 to bf16");
}
dt_status dt_cuda_ew(dt_stream *s, float *y, const float *a, const float *b, int64_t n, int op,
                     float beta) {
    return off("cuda elementwise");
}
dt_status dt_cuda_silu_fwd(dt_stream *s, float *y, const float *x, int64_t n) {
    return off("cuda silu");
}
dt_status dt_cuda_silu_bwd(dt_stream *s, float *gx, const float *gy, const float *x, int64_t n,
                           float beta) {
    return off("cuda silu backward");
}
dt_status dt_cuda_relu_fwd(dt_stream *s, float *y, const float *x, int64_t n) {
    return off("cuda relu");
}
dt_status dt_cuda_relu_bwd(dt_stream *s, float *gx, const float *gy, const float *y, int64_t n,
                           float beta) {
    return off("cuda relu backward");
}
dt_status dt_cuda_strided_copy(dt_stream *s, float *dst, const float *src, int nd,
                               const int64_t *shape, const int64_t *src_strides, float beta) {
    return off("cuda strided copy");
}
