/* Scaled-dot-product attention with grouped-query heads, tiled like flash attention.
 *
 *   q: [B, Hq, T, D]   k, v: [B, Hkv, T, D]   out: [B, Hq, T, D]   aux lse: [B, Hq, T]
 *   out[b,h,i] = sum_j softmax_j(scale * q[b,h,i] . k[b,g,j]) v[b,g,j],  g = h / (Hq / Hkv),
 *   j <= i when causal.
 *
 * Forward walks a block of BQ query rows over blocks of BK keys and keeps a running row max m,
 * running sum l and unnormalised output (online softmax), so only a BQ x BK score tile exists
 * at a time; it saves lse = m + log(l) per row (the only thing backward needs besides q, k, v,
 * out). Backward recomputes each tile's probabilities P = exp(S - lse) and, with
 * Drow = rowsum(gout * out):
 *   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - Drow),  dQ += scale dS K,  dK += scale dS^T Q.
 * Race freedom: normally one task per (batch, kv head) owns dK, dV and the dQ of its query
 * heads. With fewer such tasks than threads, a split schedule runs one pass over key blocks
 * (dK, dV) and one over query blocks (dQ), recomputing the tiles once more. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "dtrain/ops_attn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

/* Tile kernels (attention_kern.c). */
void dt_attn_gemm(int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc);
void dt_attn_transpose(int rows, int cols, const float *src, int lds, float *dst, int ldd);
float dt_attn_exp_sum(float *p, const float *s, int n, float mx);
float dt_attn_max(const float *s, int n);

#define BQ 64 /* query rows per tile */
#define BK 64 /* keys per tile */

/* Node parameters: ip[0] causal, ip[1] threads the scratch was sized for; fp[0] scale. */
enum { IP_CAUSAL = 0, IP_THREADS = 1 };

typedef struct attn_dims {
    int64_t B, Hq, Hkv, T;
    int D, G; /* head dim; query heads per kv head */
    int causal;
    float scale;
} attn_dims;

static attn_dims dims_of(const dt_op_ctx *c) {
    attn_dims d;
    d.B = c->in[0].shape[0];
    d.Hq = c->in[0].shape[1];
    d.Hkv = c->in[1].shape[1];
    d.T = c->in[0].shape[2];
    d.D = (int)c->in[0].shape[3];
    d.G = (int)(d.Hq / d.Hkv);
    d.causal = (int)c->node->ip[IP_CAUSAL];
    d.scale = c->node->fp[0];
    return d;
}

static int min_i(int64_t a, int64_t b) {
    return (int)(a < b ? a : b);
}

/* Threads for this call: the current setting, but never more than the scratch was sized for. */
static int team_size(const dt_op_ctx *c) {
    return min_i(c->node->ip[IP_THREADS], omp_get_max_threads());
}

/* Number of keys of a tile starting at k0 that query row qi may see. */
static int visible(const attn_dims *d, int64_t qi, int64_t k0, int nk) {
    if (!d->causal) return nk;
    int64_t n = qi - k0 + 1;
    return n <= 0 ? 0 : (n < nk ? (int)n : nk);
}

/* Per-thread scratch in floats. Forward: Kt [D, BK], S [BQ, BK], m [BQ], l [BQ].
 * Backward: Kt, Vt [D, BK], S, dS [BQ, BK], tr [BK, BQ], dK, dV accumulators [BK, D]. */
static size_t fwd_scratch(int D) {
    return (size_t)D * BK + BQ * BK + 2 * BQ;
}
static size_t bwd_scratch(int D) {
    return (size_t)2 * D * BK + 3 * BQ * BK + 2 * BK * D;
}

/* ---------------------------------------------------------------- forward */

/* One block of nq query rows of one head against all its visible keys.
 * Q, O: [nq, D] rows of this head;  K, V: [T, D] of its kv head;  lse: [nq]. */
static void fwd_block(const attn_dims *d, int64_t q0, int nq, const float *Q, const float *K,
                      const float *V, float *O, float *lse, float *ws) {
    int D = d->D;
    float *Kt = ws, *S = Kt + (size_t)D * BK, *m = S + BQ * BK, *l = m + BQ;
    for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(O, 0, (size_t)nq * D * sizeof(float));
    int64_t kend = d->causal ? q0 + nq : d->T;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
        int nk = min_i(BK, kend - k0);
        dt_attn_transpose(nk, D, K + k0 * D, D, Kt, BK);
        dt_attn_gemm(nq, nk, D, d->scale, Q, D, Kt, BK, 0.0f, S, BK); /* S = scale Q K^T */
        for (int r = 0; r < nq; r++) {
            float *s = S + r * BK;
            int nv = visible(d, q0 + r, k0, nk);
            if (nv == 0) {
                memset(s, 0, (size_t)nk * sizeof(float));
                continue;
            }
            float mx = dt_attn_max(s, nv), mn = mx > m[r] ? mx : m[r];
            float corr = expf(m[r] - mn); /* 0 on the first visible tile (m = -inf) */
            float sum = dt_attn_exp_sum(s, s, nv, mn);
            for (int j = nv; j < nk; j++) s[j] = 0.0f;
            l[r] = l[r] * corr + sum;
            m[r] = mn;
            if (corr != 1.0f) {
                float *o = O + (size_t)r * D;
                for (int e = 0; e < D; e++) o[e] *= corr;
            }
        }
        dt_attn_gemm(nq, D, nk, 1.0f, S, BK, V + k0 * D, D, 1.0f, O, D); /* O += P V */
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r], *o = O + (size_t)r * D;
        for (int e = 0; e < D; e++) o[e] *= inv;
        lse[r] = m[r] + logf(l[r]);
    }
}

static dt_status attn_forward(const dt_op_ctx *c) {
    attn_dims d = dims_of(c);
    const float *q = c->in[0].data, *k = c->in[1].data, *v = c->in[2].data;
    float *out = c->out.data, *lse = c->aux, *ws = c->ws;
    int64_t nqb = (d.T + BQ - 1) / BQ, ntask = d.B * d.Hq * nqb;
    size_t per = fwd_scratch(d.D);
    int nt = team_size(c);
#pragma omp parallel num_threads(nt)
    {
        float *mine = ws + per * (size_t)omp_get_thread_num();
        /* Causal blocks near the end of the sequence cost most: hand those out first. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            int64_t bh = t / nqb, iq = nqb - 1 - t % nqb;
            int64_t b = bh / d.Hq, h = bh % d.Hq, g = h / d.G;
            int64_t q0 = iq * BQ;
            int nq = min_i(BQ, d.T - q0);
            const float *K = k + (b * d.Hkv + g) * d.T * d.D, *V = v + (b * d.Hkv + g) * d.T * d.D;
            fwd_block(&d, q0, nq, q + (bh * d.T + q0) * d.D, K, V, out + (bh * d.T + q0) * d.D,
                      lse + bh * d.T + q0, mine);
        }
    }
    return DT_OK;
}

/* ---------------------------------------------------------------- backward */

typedef struct bwd_ctx {
    attn_dims d;
    const float *q, *k, *v, *gout, *lse, *drow;
    float *dq, *dk, *dv; /* NULL when not wanted; zeroed or holding earlier sums: tiles add */
} bwd_ctx;

/* The gradient contributions of one tile: query rows q0..q0+nq of query head bh (flat b*Hq+h)
 * against keys k0..k0+nk of its kv head. Kt, Vt hold the key block transposed ([D, BK]).
 * Adds into dKa, dVa ([nk, D], or NULL) and dQ ([nq, D] rows of the head, or NULL). */
static void bwd_tile(const bwd_ctx *x, int64_t bh, int64_t q0, int nq, int64_t k0, int nk,
                     const float *Kt, const float *Vt, float *dKa, float *dVa, float *dQ,
                     float *ws) {
    const attn_dims *d = &x->d;
    int D = d->D;
    float *S = ws, *dS = S + BQ * BK, *tr = dS + BQ * BK;
    const float *Q = x->q + (bh * d->T + q0) * D, *dO = x->gout + (bh * d->T + q0) * D;
    const float *lse = x->lse + bh * d->T + q0, *drow = x->drow + bh * d->T + q0;
    const float *K = x->k + ((bh / d->Hq * d->Hkv + bh % d->Hq / d->G) * d->T + k0) * D;
    dt_attn_gemm(nq, nk, D, d->scale, Q, D, Kt, BK, 0.0f, S, BK); /* S = scale Q K^T */
    for (int r = 0; r < nq; r++) {                                /* P = exp(S - lse) */
        float *s = S + r * BK;
        int nv = visible(d, q0 + r, k0, nk);
        if (nv > 0) dt_attn_exp_sum(s, s, nv, lse[r]);
        for (int j = nv; j < nk; j++) s[j] = 0.0f;
    }
    if (dVa) { /* dV += P^T dO */
        dt_attn_transpose(nq, nk, S, BK, tr, BQ);
        dt_attn_gemm(nk, D, nq, 1.0f, tr, BQ, dO, D, 1.0f, dVa, D);
    }
    if (!dKa && !dQ) return;
    dt_attn_gemm(nq, nk, D, 1.0f, dO, D, Vt, BK, 0.0f, dS, BK); /* dP = dO V^T */
    for (int r = 0; r < nq; r++) {                              /* dS = scale P (dP - Drow) */
        float *p = S + r * BK, *ds = dS + r * BK, dr = drow[r];
        for (int j = 0; j < nk; j++) ds[j] = d->scale * p[j] * (ds[j] - dr);
    }
    if (dKa) { /* dK += dS^T Q */
        dt_attn_transpose(nq, nk, dS, BK, tr, BQ);
        dt_attn_gemm(nk, D, nq, 1.0f, tr, BQ, Q, D, 1.0f, dKa, D);
    }
    if (dQ) dt_attn_gemm(nq, D, nk, 1.0f, dS, BK, K, D, 1.0f, dQ, D); /* dQ += dS K */
}

static void add_to(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* dK, dV (and dQ when dq_too) for key block jk of kv head (b, g), over all query heads of the
 * group and all query blocks that see it. */
static void bwd_key_block(const bwd_ctx *x, int64_t b, int64_t g, int64_t jk, int dq_too,
                          float *ws) {
    const attn_dims *d = &x->d;
    int D = d->D;
    float *Kt = ws, *Vt = Kt + D * BK, *dKa = Vt + D * BK, *dVa = dKa + BK * D;
    float *tile_ws = dVa + BK * D;
    int64_t k0 = jk * BK, kv = (b * d->Hkv + g) * d->T * D;
    int nk = min_i(BK, d->T - k0);
    dt_attn_transpose(nk, D, x->k + kv + k0 * D, D, Kt, BK);
    dt_attn_transpose(nk, D, x->v + kv + k0 * D, D, Vt, BK);
    memset(dKa, 0, (size_t)2 * BK * D * sizeof(float));
    int64_t iq0 = d->causal ? k0 / BQ : 0, nqb = (d->T + BQ - 1) / BQ;
    for (int64_t h = g * d->G; h < (g + 1) * d->G; h++) {
        int64_t bh = b * d->Hq + h;
        for (int64_t iq = iq0; iq < nqb; iq++) {
            int64_t q0 = iq * BQ;
            int nq = min_i(BQ, d->T - q0);
            float *dQ = dq_too && x->dq ? x->dq + (bh * d->T + q0) * D : NULL;
            bwd_tile(x, bh, q0, nq, k0, nk, Kt, Vt, x->dk ? dKa : NULL, x->dv ? dVa : NULL, dQ,
                     tile_ws);
        }
    }
    if (x->dk) add_to(x->dk + kv + k0 * D, dKa, (size_t)nk * D);
    if (x->dv) add_to(x->dv + kv + k0 * D, dVa, (size_t)nk * D);
}

/* dQ for query block iq of query head bh (split schedule). */
static void bwd_query_block(const bwd_ctx *x, int64_t bh, int64_t iq, float *ws) {
    const attn_dims *d = &x->d;
    int D = d->D;
    float *Kt = ws, *Vt = Kt + D * BK, *tile_ws = Vt + D * BK + 2 * BK * D;
    int64_t q0 = iq * BQ, kv = (bh / d->Hq * d->Hkv + bh % d->Hq / d->G) * d->T * D;
    int nq = min_i(BQ, d->T - q0);
    float *dQ = x->dq + (bh * d->T + q0) * D;
    int64_t kend = d->causal ? q0 + nq : d->T;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
        int nk = min_i(BK, kend - k0);
        dt_attn_transpose(nk, D, x->k + kv + k0 * D, D, Kt, BK);
        dt_attn_transpose(nk, D, x->v + kv + k0 * D, D, Vt, BK);
        bwd_tile(x, bh, q0, nq, k0, nk, Kt, Vt, NULL, NULL, dQ, tile_ws);
    }
}

static dt_status attn_backward(const dt_op_ctx *c) {
    bwd_ctx x = {.d = dims_of(c)};
    const attn_dims *d = &x.d;
    x.q = c->in[0].data, x.k = c->in[1].data, x.v = c->in[2].data;
    x.gout = c->gout.data, x.lse = c->aux;
    x.dq = c->gin[0].data, x.dk = c->gin[1].data, x.dv = c->gin[2].data;
    if (!x.dq && !x.dk && !x.dv) return DT_OK;
    int64_t rows = d->B * d->Hq * d->T, nkb = (d->T + BK - 1) / BK, nqb = (d->T + BQ - 1) / BQ;
    int nt = team_size(c);
    float *drow = c->ws, *scratch = drow + rows;
    size_t per = bwd_scratch(d->D);
    x.drow = drow;
    const float *o = c->out.data;
    /* Fused: one task per (b, kv head) when there are enough of them to share out evenly. */
    int64_t nkv = d->B * d->Hkv;
    int fused = nkv % nt == 0 || nkv >= 4 * (int64_t)nt;
#pragma omp parallel num_threads(nt)
    {
        float *mine = scratch + per * (size_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) { /* Drow = rowsum(gout * out) */
            const float *a = x.gout + r * d->D, *b = o + r * d->D;
            float s = 0.0f;
            for (int e = 0; e < d->D; e++) s += a[e] * b[e];
            drow[r] = s;
        }
        /* Gradients to overwrite are zeroed first and every tile then adds: the same buffer
         * may be passed for several inputs (attention(x, x, x)), with beta 0 for the first. */
        for (int i = 0; i < 3; i++) {
            if (!c->gin[i].data || c->gin_beta[i] != 0.0f) continue;
            int64_t n = dt_tensor_numel(&c->gin[i]), chunk = 1 << 16;
#pragma omp for schedule(static)
            for (int64_t s = 0; s < n; s += chunk)
                memset((float *)c->gin[i].data + s, 0,
                       (size_t)(n - s < chunk ? n - s : chunk) * sizeof(float));
        }
        if (fused) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < nkv; t++) {
                int64_t b = t / d->Hkv, g = t % d->Hkv;
                for (int64_t jk = 0; jk < nkb; jk++) bwd_key_block(&x, b, g, jk, 1, mine);
            }
        } else {
            if (x.dk || x.dv) {
#pragma omp for schedule(dynamic, 1)
                for (int64_t t = 0; t < nkv * nkb; t++) /* early key blocks cost most (causal) */
                    bwd_key_block(&x, t / nkb / d->Hkv, t / nkb % d->Hkv, t % nkb, 0, mine);
            }
            if (x.dq) {
#pragma omp for schedule(dynamic, 1)
                for (int64_t t = 0; t < d->B * d->Hq * nqb; t++)
                    bwd_query_block(&x, t / nqb, nqb - 1 - t % nqb, mine);
            }
        }
    }
    return DT_OK;
}

/* ---------------------------------------------------------------- graph glue */

static dt_status attn_prepare(dt_graph *g, dt_node *n) {
    const dt_tensor *q = &dt_graph_node(g, n->in[0])->t;
    size_t rows = (size_t)(q->shape[0] * q->shape[1] * q->shape[2]);
    int D = (int)q->shape[3];
    int nt = omp_get_max_threads();
    n->ip[IP_THREADS] = nt;
    n->aux_bytes = rows * sizeof(float); /* lse */
    n->ws_fwd = (size_t)nt * fwd_scratch(D) * sizeof(float);
    n->ws_bwd = (rows + (size_t)nt * bwd_scratch(D)) * sizeof(float);
    return DT_OK;
}

static const dt_op_def attention_def = {
    .name = "attention",
    .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1) | DT_OPF_BWD_IN(2) | DT_OPF_BWD_OUT,
    .prepare = attn_prepare,
    .forward = attn_forward,
    .backward = attn_backward,
    DT_CUDA_OP_ENTRIES(attention),
};

int dt_attention(dt_graph *g, int q, int k, int v, int causal, float scale) {
    if (dt_ids_bad(g, "attention", 3, (int[]){q, k, v})) return -1;
    const dt_tensor *qt = &dt_graph_node(g, q)->t, *kt = &dt_graph_node(g, k)->t,
                    *vt = &dt_graph_node(g, v)->t;
    const dt_tensor *all[3] = {qt, kt, vt};
    for (int i = 0; i < 3; i++)
        if (all[i]->dtype != DT_F32) {
            char sh[64];
            dt_shape_str(sh, sizeof sh, all[i]->ndim, all[i]->shape);
            dt_error_set(DT_ERR_DTYPE, "attention: %c %s must be f32, not %s", "qkv"[i], sh,
                         dt_dtype_name(all[i]->dtype));
            return -1;
        }
    if (qt->ndim != 4 || kt->ndim != 4 || vt->ndim != 4)
        return dt_shape_error("attention", "q, k, v must be [B, H, T, Dh]", 3, all);
    if (!dt_tensor_same_shape(kt, vt))
        return dt_shape_error("attention", "k and v must have the same shape", 3, all);
    if (qt->shape[0] != kt->shape[0] || qt->shape[2] != kt->shape[2] ||
        qt->shape[3] != kt->shape[3])
        return dt_shape_error("attention",
                              "q [B, Hq, T, Dh] and k, v [B, Hkv, T, Dh] must agree "
                              "in B, T and Dh",
                              3, all);
    if (kt->shape[1] <= 0 || qt->shape[1] % kt->shape[1] != 0)
        return dt_shape_error("attention", "query heads Hq must be a multiple of kv heads Hkv", 3,
                              all);
    if (qt->shape[2] <= 0 || qt->shape[3] <= 0)
        return dt_shape_error("attention", "T and Dh must be positive", 3, all);
    if (!(scale > 0.0f)) scale = 1.0f / sqrtf((float)qt->shape[3]);
    int64_t ip[2] = {causal ? 1 : 0, 1};
    float fp[1] = {scale};
    return dt_node_add(g, &attention_def, 3, (int[]){q, k, v}, DT_F32, 4, qt->shape, ip, 2, fp, 1);
}
