/* Dropout (training mode only), forward and backward, f32.
 *
 * The keep/drop mask is never stored: element i is kept iff u_i >= p, where u_i is word i % 4
 * of dt_philox4x32(key, {(uint32)step, (uint32)(step >> 32), node id, i / 4}) mapped to [0, 1).
 * So the mask is a pure function of (run key, step, node id, i): backward regenerates it,
 * a recomputed forward (activation checkpointing) draws the same one, and a resumed run
 * continues the same sequence. Kept values are scaled by 1 / (1 - p) so the expectation is
 * unchanged; p == 1 drops everything (output 0, as PyTorch). In eval mode (run->training == 0)
 * the op is the identity, in forward and backward. */
#include <math.h>
#include <string.h>
#include "dtrain/ops_nn.h"
#include "dtrain/rng.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

#define DROP_PAR_MIN 16384 /* elements below which a parallel region costs more than it saves */

/* Philox4x32-10 with the key split into (k0, k1): the same function as dt_philox4x32
 * (src/core/rng.c), written out so that it inlines into a simd loop (8 streams per AVX2
 * vector instead of one call per 4 elements: 3-4x faster). tests/ops/nn_dropout.c checks
 * that the masks equal those of dt_philox4x32. */
static inline void drop_philox(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t c2,
                               uint32_t c3, uint32_t *r0, uint32_t *r1, uint32_t *r2,
                               uint32_t *r3) {
#pragma GCC unroll 10
    for (int i = 0; i < 10; i++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    *r0 = c0, *r1 = c1, *r2 = c2, *r3 = c3;
}

/* 0 or scale for a random word: kept iff (word >> 8) >= th. */
#define DROP_F(w) (((w) >> 8) >= th ? scale : 0.0f)

/* y [n] = x [n] * mask * scale, or (acc: backward accumulating) y += x * mask * scale.
 * Element i is kept iff dt_rng_u01(word) >= p, i.e. (word >> 8) >= th with
 * th = ceil(p 2^24): u01 takes the values k 2^-24, and p 2^24 is exact in f32. Multiplying by
 * a 0/scale factor (not selecting) keeps the loop branch-free; like PyTorch's x * mask, a
 * dropped inf or NaN gives NaN. acc 0 never reads y. */
static void dropout_apply_f32(float *y, int acc, const float *x, int64_t n, float p, uint64_t key,
                              uint64_t step, uint32_t node) {
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    const uint32_t th = (uint32_t)ceilf(p * 16777216.0f);
    const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    const uint32_t s0 = (uint32_t)step, s1 = (uint32_t)(step >> 32);
    const int64_t nb = n / 4;
    /* Four explicit statements (not a k loop over an array): GCC vectorises only this form. */
    if (!acc) {
#pragma omp parallel for simd if (n > DROP_PAR_MIN) schedule(static)
        for (int64_t j = 0; j < nb; j++) {
            uint32_t r0, r1, r2, r3;
            drop_philox(k0, k1, s0, s1, node, (uint32_t)j, &r0, &r1, &r2, &r3);
            y[4 * j + 0] = x[4 * j + 0] * DROP_F(r0);
            y[4 * j + 1] = x[4 * j + 1] * DROP_F(r1);
            y[4 * j + 2] = x[4 * j + 2] * DROP_F(r2);
            y[4 * j + 3] = x[4 * j + 3] * DROP_F(r3);
        }
    } else {
#pragma omp parallel for simd if (n > DROP_PAR_MIN) schedule(static)
        for (int64_t j = 0; j < nb; j++) {
            uint32_t r0, r1, r2, r3;
            drop_philox(k0, k1, s0, s1, node, (uint32_t)j, &r0, &r1, &r2, &r3);
            y[4 * j + 0] += x[4 * j + 0] * DROP_F(r0);
            y[4 * j + 1] += x[4 * j + 1] * DROP_F(r1);
            y[4 * j + 2] += x[4 * j + 2] * DROP_F(r2);
            y[4 * j + 3] += x[4 * j + 3] * DROP_F(r3);
        }
    }
    if (n % 4) { /* the last partial block, with the library's Philox */
        uint32_t r[4];
        dt_philox4x32(key, (const uint32_t[4]){s0, s1, node, (uint32_t)nb}, r);
        for (int64_t i = 4 * nb; i < n; i++) {
            const float v = x[i] * DROP_F(r[i - 4 * nb]);
            y[i] = acc ? y[i] + v : v;
        }
    }
}

/* y [n] = x, or y += x (beta 1). */
static void dropout_identity_f32(float *y, float beta, const float *x, int64_t n) {
    if (beta == 0.0f) {
        memcpy(y, x, (size_t)n * sizeof(float));
        return;
    }
#pragma omp parallel for simd if (n > DROP_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* fp[0] = p. */
static dt_status dropout_forward(const dt_op_ctx *c) {
    const int64_t n = dt_tensor_numel(&c->out);
    const float p = c->node->fp[0];
    if (!c->run->training || p == 0.0f)
        dropout_identity_f32(c->out.data, 0.0f, c->in[0].data, n);
    else
        dropout_apply_f32(c->out.data, 0, c->in[0].data, n, p, c->run->key, c->run->step,
                          (uint32_t)c->node->id);
    return DT_OK;
}

/* d x = mask * scale * d y: the same mask as forward, regenerated. */
static dt_status dropout_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const int64_t n = dt_tensor_numel(&c->out);
    const float p = c->node->fp[0];
    if (!c->run->training || p == 0.0f)
        dropout_identity_f32(c->gin[0].data, c->gin_beta[0], c->gout.data, n);
    else
        dropout_apply_f32(c->gin[0].data, c->gin_beta[0] != 0.0f, c->gout.data, n, p, c->run->key,
                          c->run->step, (uint32_t)c->node->id);
    return DT_OK;
}

static const dt_op_def dropout_def = {
    .name = "dropout",
    .flags = 0, /* backward reads neither x nor y: the mask is regenerated */
    .forward = dropout_forward,
    .backward = dropout_backward,
    DT_CUDA_OP_ENTRIES(dropout),
};

int dt_dropout(dt_graph *g, int x, float p) {
    if (dt_ids_bad(g, "dropout", 1, &x)) return -1;
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    if (dt_x_f32_check("dropout", xt)) return -1;
    if (!(p >= 0.0f && p <= 1.0f)) {
        dt_error_set(DT_ERR_INVALID, "dropout: p must be in [0, 1], got %g", p);
        return -1;
    }
    return dt_node_add(g, &dropout_def, 1, &x, DT_F32, xt->ndim, xt->shape, NULL, 0,
                       (const float[]){p}, 1);
}
