/* Rotary position embedding (RoPE), Hugging Face Llama convention.
 *
 * For each head vector x of length Dh = 2*h, split into halves x1 = x[0:h], x2 = x[h:2h]:
 *   y1 = x1 * cos - x2 * sin
 *   y2 = x2 * cos + x1 * sin            angle[i] = position * inv_freq[i], i < h
 * (transformers' apply_rotary_pos_emb with rotate_half). The map is a rotation, so backward is
 * the inverse rotation of the output gradient and needs neither x nor y:
 *   gx1 =  gy1 * cos + gy2 * sin
 *   gx2 = -gy1 * sin + gy2 * cos
 *
 * The frequency table is copied into the node's state by the builder. Without a positions
 * input, prepare precomputes cos/sin for positions 0..T-1 into the state; with one, the
 * kernels compute the [B or 1, T, h] cos/sin rows into ws (positions are data). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/ops_attn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"
#include "ops/rope_impl.h"

/* cos and sin of one position's angles, formed like transformers does it: an f32 product
 * position * inv_freq (its inv_freq @ position_ids matmul has inner size 1, so a single f32
 * multiply), then cos/sin of that f32 angle. c, s: [half] */
static void rope_row(float *c, float *s, const float *inv_freq, int half, float pos) {
    for (int i = 0; i < half; i++) {
        float a = pos * inv_freq[i];
        c[i] = cosf(a);
        s[i] = sinf(a);
    }
}

/* y = rope(x) (dir = +1) or the inverse rotation (dir = -1, used for gradients).
 * x, y: [B, H, T, 2*half]; cs: [Bc, T, 2, half] with Bc = 1 (shared by the batch) or B.
 * beta: y = beta * y + rot(x) (0 or 1); with beta 0, y may alias x. */
static void rope_apply(float *y, const float *x, const float *cs, int64_t B, int64_t H, int64_t T,
                       int half, int64_t Bc, float dir, float beta) {
    int64_t rows = B * H * T, D = 2 * half;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % T, b = r / (H * T);
        const float *c = cs + ((Bc == 1 ? 0 : b) * T + t) * 2 * half, *s = c + half;
        const float *x1 = x + r * D, *x2 = x1 + half;
        float *y1 = y + r * D, *y2 = y1 + half;
        if (beta == 0.0f) {
            for (int i = 0; i < half; i++) {
                float a = x1[i], bb = x2[i], sn = dir * s[i];
                y1[i] = a * c[i] - bb * sn;
                y2[i] = bb * c[i] + a * sn;
            }
        } else {
            for (int i = 0; i < half; i++) {
                float a = x1[i], bb = x2[i], sn = dir * s[i];
                y1[i] += a * c[i] - bb * sn;
                y2[i] += bb * c[i] + a * sn;
            }
        }
    }
}

/* The cos/sin table for this call: the precomputed one, or one built in ws from positions.
 * Sets *Bc to the number of distinct position rows (1 or B). */
static const float *rope_cs(const dt_op_ctx *c, int64_t *Bc) {
    const rope_state *st = c->node->state;
    const dt_tensor *x = &c->in[0];
    int64_t T = x->shape[2];
    if (!c->node->ip[IP_HAS_POS]) {
        *Bc = 1;
        return st->cos_sin;
    }
    const dt_tensor *p = &c->in[1];
    int64_t np = dt_tensor_numel(p);
    *Bc = np / T;
    float *cs = c->ws;
#pragma omp parallel for schedule(static) if (np * st->half > 4096)
    for (int64_t i = 0; i < np; i++) { /* i = b * T + t */
        int64_t pos =
            p->dtype == DT_I64 ? ((const int64_t *)p->data)[i] : ((const int32_t *)p->data)[i];
        float *cc = cs + i * 2 * st->half;
        rope_row(cc, cc + st->half, st->inv_freq, st->half, (float)pos);
    }
    return cs;
}

static dt_status rope_forward(const dt_op_ctx *c) {
    const dt_tensor *x = &c->in[0];
    const rope_state *st = c->node->state;
    int64_t Bc;
    const float *cs = rope_cs(c, &Bc);
    rope_apply(c->out.data, x->data, cs, x->shape[0], x->shape[1], x->shape[2], st->half, Bc, 1.0f,
               0.0f);
    return DT_OK;
}

static dt_status rope_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const dt_tensor *x = &c->in[0];
    const rope_state *st = c->node->state;
    int64_t Bc;
    const float *cs = rope_cs(c, &Bc);
    rope_apply(c->gin[0].data, c->gout.data, cs, x->shape[0], x->shape[1], x->shape[2], st->half,
               Bc, -1.0f, c->gin_beta[0]);
    return DT_OK;
}

static dt_status rope_prepare(dt_graph *g, dt_node *n) {
    rope_state *st = n->state;
    const dt_tensor *x = &dt_graph_node(g, n->in[0])->t;
    int64_t T = x->shape[2];
    free(st->cos_sin);
    st->cos_sin = NULL;
    n->ws_fwd = n->ws_bwd = 0;
    if (n->ip[IP_HAS_POS]) {
        /* cos/sin rows for each distinct positions row */
        int64_t np = dt_tensor_numel(&dt_graph_node(g, n->in[1])->t);
        n->ws_fwd = n->ws_bwd = (size_t)np * 2 * (size_t)st->half * sizeof(float);
        return DT_OK;
    }
    if (dt_graph_measuring(g)) return DT_OK; /* the table is op state, not planned memory */
    st->cos_sin = malloc((size_t)T * 2 * (size_t)st->half * sizeof(float));
    if (!st->cos_sin)
        return dt_error_set(DT_ERR_NOMEM, "rope: no memory for the cos/sin table (T=%ld, Dh=%d)",
                            (long)T, 2 * st->half);
#pragma omp parallel for schedule(static) if (T * st->half > 4096)
    for (int64_t t = 0; t < T; t++) {
        float *cc = st->cos_sin + t * 2 * st->half;
        rope_row(cc, cc + st->half, st->inv_freq, st->half, (float)t);
    }
    return DT_OK;
}

static void rope_destroy(dt_node *n) {
    rope_state *st = n->state;
    if (!st) return;
    free(st->inv_freq);
    free(st->cos_sin);
    free(st);
    n->state = NULL;
}

static const dt_op_def rope_def = {
    .name = "rope",
    .flags = DT_OPF_BWD_IN(1), /* positions (if any); x itself is not needed */
    .prepare = rope_prepare,
    .forward = rope_forward,
    .backward = rope_backward,
    .destroy = rope_destroy,
    DT_CUDA_OP_ENTRIES(rope),
};

dt_status dt_rope_default_inv_freq(float *inv_freq, int head_dim, float theta) {
    if (!inv_freq || head_dim <= 0 || head_dim % 2 || !(theta > 0.0f))
        return dt_error_set(DT_ERR_INVALID,
                            "rope: bad frequency parameters (head_dim %d must be even and > 0, "
                            "theta %g must be > 0)",
                            head_dim, (double)theta);
    /* transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all f32. The exponent
     * is an f32 quotient; pow is evaluated in double and rounded once (torch's f32 pow is
     * within an ulp of that). */
    for (int i = 0; i < head_dim / 2; i++) {
        float e = (float)(2 * i) / (float)head_dim;
        float p = (float)pow((double)theta, (double)e);
        inv_freq[i] = 1.0f / p;
    }
    return DT_OK;
}

dt_status dt_rope_llama3_inv_freq(float *inv_freq, int head_dim, float theta, float factor,
                                  float low_freq_factor, float high_freq_factor,
                                  int original_max_pos) {
    if (!(factor > 0.0f) || !(low_freq_factor > 0.0f) || !(high_freq_factor > low_freq_factor) ||
        original_max_pos <= 0)
        return dt_error_set(DT_ERR_INVALID,
                            "rope: bad llama3 scaling (factor %g, low_freq_factor %g, "
                            "high_freq_factor %g, original_max_position_embeddings %d)",
                            (double)factor, (double)low_freq_factor, (double)high_freq_factor,
                            original_max_pos);
    dt_status s = dt_rope_default_inv_freq(inv_freq, head_dim, theta);
    if (s != DT_OK) return s;
    /* transformers' _compute_llama3_parameters, op by op in f32 as torch evaluates it:
     *   low_freq_wavelen = old_context_len / low_freq_factor     (Python floats)
     *   wavelen = 2 * math.pi / inv_freq                          (reciprocal(inv) * 2pi)
     *   inv_llama = where(wavelen > low_freq_wavelen, inv / factor, inv)
     *   smooth = (old_context_len / wavelen - low) / (high - low)
     *   smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
     *   medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)
     *   inv_llama = where(medium, smoothed, inv_llama) */
    double old = (double)original_max_pos;
    float low_wl = (float)(old / (double)low_freq_factor);
    float high_wl = (float)(old / (double)high_freq_factor);
    float two_pi = (float)(2.0 * M_PI), oldf = (float)old;
    float den = (float)((double)high_freq_factor - (double)low_freq_factor);
    for (int i = 0; i < head_dim / 2; i++) {
        float inv = inv_freq[i];
        float wl = (1.0f / inv) * two_pi;
        float il = wl > low_wl ? inv / factor : inv;
        float sm = ((1.0f / wl) * oldf - low_freq_factor) / den;
        float smoothed = (1.0f - sm) * il / factor + sm * il;
        int medium = !(wl < high_wl) && !(wl > low_wl);
        inv_freq[i] = medium ? smoothed : il;
    }
    return DT_OK;
}

int dt_rope(dt_graph *g, int x, int positions, float theta, const float *inv_freq) {
    if (dt_ids_bad(g, "rope", 1, (int[]){x})) return -1;
    if (positions != -1 && dt_ids_bad(g, "rope", 1, (int[]){positions})) return -1;
    const dt_tensor *xt = &dt_graph_node(g, x)->t;
    char sh[64];
    if (xt->dtype != DT_F32) {
        dt_shape_str(sh, sizeof sh, xt->ndim, xt->shape);
        dt_error_set(DT_ERR_DTYPE, "rope: x %s must be f32, not %s", sh, dt_dtype_name(xt->dtype));
        return -1;
    }
    if (xt->ndim != 4 || xt->shape[3] <= 0 || xt->shape[3] % 2)
        return dt_shape_error("rope", "x must be [B, H, T, Dh] with Dh even", 1,
                              (const dt_tensor *[]){xt});
    int64_t B = xt->shape[0], T = xt->shape[2];
    int half = (int)(xt->shape[3] / 2);
    if (positions != -1) {
        const dt_tensor *pt = &dt_graph_node(g, positions)->t;
        if (pt->dtype != DT_I32 && pt->dtype != DT_I64) {
            dt_shape_str(sh, sizeof sh, pt->ndim, pt->shape);
            dt_error_set(DT_ERR_DTYPE, "rope: positions %s must be i32 or i64, not %s", sh,
                         dt_dtype_name(pt->dtype));
            return -1;
        }
        int ok = (pt->ndim == 1 && pt->shape[0] == T) ||
                 (pt->ndim == 2 && (pt->shape[0] == 1 || pt->shape[0] == B) && pt->shape[1] == T);
        if (!ok)
            return dt_shape_error("rope",
                                  "positions must be [T], [1, T] or [B, T] for x [B, H, T, Dh]", 2,
                                  (const dt_tensor *[]){xt, pt});
    }
    rope_state *st = calloc(1, sizeof *st);
    float *tab = st ? malloc((size_t)half * sizeof(float)) : NULL;
    if (!tab) {
        free(st);
        dt_error_set(DT_ERR_NOMEM, "rope: no memory for the frequency table");
        return -1;
    }
    if (inv_freq) {
        memcpy(tab, inv_freq, (size_t)half * sizeof(float));
    } else if (dt_rope_default_inv_freq(tab, 2 * half, theta) != DT_OK) {
        free(tab);
        free(st);
        return -1;
    }
    st->half = half;
    st->inv_freq = tab;
    int in[2] = {x, positions};
    int64_t ip[1] = {positions != -1};
    float fp[1] = {theta};
    int id =
        dt_node_add(g, &rope_def, positions != -1 ? 2 : 1, in, DT_F32, 4, xt->shape, ip, 1, fp, 1);
    if (id < 0) {
        free(tab);
        free(st);
        return -1;
    }
    dt_graph_node(g, id)->state = st;
    return id;
}
