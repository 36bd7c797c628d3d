/* Shape ops that materialise a contiguous copy: transpose, permute, concat, narrow (and split,
 * built from narrows), forward and backward, f32.
 *
 * Every kernel is a strided copy dst = src (forward) or gin = beta * gin + gout-piece
 * (backward). Permutation copies drop size-1 dims and merge dims that stay adjacent, and when
 * the innermost destination dim is strided in the source (a real transpose) they copy in
 * 32 x 32 tiles so that both sides stay in cache.
 *
 * narrow's backward writes only its slice of gin. Several narrows of one input (split) share
 * that input's gradient buffer: the first to run gets gin_beta 0 and must leave a complete
 * gradient, so it writes zeros outside its slice; the later ones get gin_beta 1 and add to
 * their slice only. That writes each gradient element once, where DT_OPF_ACCUM_ONLY would
 * have the executor zero the whole buffer first and then every narrow read-modify-write its
 * slice. */
#include <stdio.h>
#include <string.h>
#include "dtrain/ops_nn.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

#define SHAPE_PAR_MIN 32768 /* elements below which a parallel region costs more than it saves */
#define SHAPE_TILE 32

/* ---------------------------------------------------------------- permutation copy */

/* Drops size-1 dims and merges dim j into j+1 when the source is contiguous across them.
 * shape/sstr [nd] in place; returns the new nd (>= 1). */
static int perm_simplify(int nd, int64_t *shape, int64_t *sstr) {
    int k = 0;
    for (int j = 0; j < nd; j++) {
        if (shape[j] == 1) continue;
        if (k > 0 && sstr[k - 1] == sstr[j] * shape[j]) {
            shape[k - 1] *= shape[j];
            sstr[k - 1] = sstr[j];
        } else {
            shape[k] = shape[j];
            sstr[k] = sstr[j];
            k++;
        }
    }
    if (k == 0) shape[0] = 1, sstr[0] = 1, k = 1;
    return k;
}

/* Source offset of destination element with multi-index given by `lin` decomposed over dims
 * dims[0..nd-1] of shape (last fastest), plus the destination offset through dstr. */
static void perm_offsets(int64_t lin, int nd, const int *dims, const int64_t *shape,
                         const int64_t *sstr, const int64_t *dstr, int64_t *so, int64_t *dof) {
    int64_t s = 0, d = 0;
    for (int k = nd - 1; k >= 0; k--) {
        const int j = dims[k];
        const int64_t i = lin % shape[j];
        lin /= shape[j];
        s += i * sstr[j];
        d += i * dstr[j];
    }
    *so = s;
    *dof = d;
}

/* dst (contiguous, shape dshape [nd]) = src permuted: dst element (i_0..i_nd-1) comes from
 * src[sum_j i_j * sstr[j]]. beta 1 adds into dst; beta 0 never reads dst. */
static void permute_copy_f32(float *dst, float beta, const float *src, int nd0,
                             const int64_t *dshape, const int64_t *sstr0) {
    int64_t shape[DT_MAX_DIMS], sstr[DT_MAX_DIMS], dstr[DT_MAX_DIMS];
    int64_t n = 1;
    for (int j = 0; j < nd0; j++) shape[j] = dshape[j], sstr[j] = sstr0[j], n *= dshape[j];
    if (n == 0) return;
    const int nd = perm_simplify(nd0, shape, sstr);
    dstr[nd - 1] = 1;
    for (int j = nd - 2; j >= 0; j--) dstr[j] = dstr[j + 1] * shape[j + 1];
    const int64_t L = shape[nd - 1], sL = sstr[nd - 1];
    const int acc = beta != 0.0f;

    int q = -1; /* destination dim that is contiguous in the source, for tiling */
    for (int j = 0; j < nd - 1 && sL != 1; j++)
        if (sstr[j] == 1) q = j;

    if (q < 0 || L < SHAPE_TILE / 2) {
        /* Row path: each destination row of L elements is one strided run of the source. */
        int dims[DT_MAX_DIMS];
        for (int j = 0; j < nd - 1; j++) dims[j] = j;
        const int64_t rows = n / L;
#pragma omp parallel for if (n > SHAPE_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t so, dof;
            perm_offsets(r, nd - 1, dims, shape, sstr, dstr, &so, &dof);
            float *d = dst + dof;
            const float *s = src + so;
            if (sL == 1 && !acc) {
                memcpy(d, s, (size_t)L * sizeof(float));
            } else if (sL == 1) {
#pragma omp simd
                for (int64_t l = 0; l < L; l++) d[l] += s[l];
            } else if (!acc) {
                for (int64_t l = 0; l < L; l++) d[l] = s[l * sL];
            } else {
                for (int64_t l = 0; l < L; l++) d[l] += s[l * sL];
            }
        }
        return;
    }

    /* Tiled path: for each index of the other dims, a 2-D transpose between dim q (unit
     * stride in src) and the last dim (unit stride in dst), in SHAPE_TILE-square tiles. */
    int dims[DT_MAX_DIMS], no = 0;
    for (int j = 0; j < nd - 1; j++)
        if (j != q) dims[no++] = j;
    const int64_t Q = shape[q], dQ = dstr[q];
    const int64_t ntq = (Q + SHAPE_TILE - 1) / SHAPE_TILE, nother = n / (Q * L);
#pragma omp parallel for if (n > SHAPE_PAR_MIN) schedule(static)
    for (int64_t it = 0; it < nother * ntq; it++) {
        int64_t so, dof;
        perm_offsets(it / ntq, no, dims, shape, sstr, dstr, &so, &dof);
        const int64_t a0 = (it % ntq) * SHAPE_TILE, a1 = a0 + SHAPE_TILE < Q ? a0 + SHAPE_TILE : Q;
        for (int64_t l0 = 0; l0 < L; l0 += SHAPE_TILE) {
            const int64_t l1 = l0 + SHAPE_TILE < L ? l0 + SHAPE_TILE : L;
            for (int64_t a = a0; a < a1; a++) {
                float *d = dst + dof + a * dQ;
                const float *s = src + so + a;
                if (!acc)
                    for (int64_t l = l0; l < l1; l++) d[l] = s[l * sL];
                else
                    for (int64_t l = l0; l < l1; l++) d[l] += s[l * sL];
            }
        }
    }
}

/* Contiguous strides of t's shape into str. */
static void contig_strides(const dt_tensor *t, int64_t *str) {
    int64_t s = 1;
    for (int j = t->ndim - 1; j >= 0; j--) str[j] = s, s *= t->shape[j];
}

/* Node params (transpose and permute): ip[0..nd-1] = perm, out.shape[i] = x.shape[perm[i]]. */
static dt_status permute_forward(const dt_op_ctx *c) {
    const int nd = c->out.ndim;
    int64_t xstr[DT_MAX_DIMS], sstr[DT_MAX_DIMS];
    contig_strides(&c->in[0], xstr);
    for (int i = 0; i < nd; i++) sstr[i] = xstr[c->node->ip[i]];
    permute_copy_f32(c->out.data, 0.0f, c->in[0].data, nd, c->out.shape, sstr);
    return DT_OK;
}

/* gin (x's shape) = gout permuted back: x dim perm[i] reads gout dim i. */
static dt_status permute_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const int nd = c->out.ndim;
    int64_t ostr[DT_MAX_DIMS], sstr[DT_MAX_DIMS];
    contig_strides(&c->out, ostr);
    for (int i = 0; i < nd; i++) sstr[c->node->ip[i]] = ostr[i];
    permute_copy_f32(c->gin[0].data, c->gin_beta[0], c->gout.data, nd, c->in[0].shape, sstr);
    return DT_OK;
}

static const dt_op_def transpose_def = {
    .name = "transpose",
    .flags = 0,
    .forward = permute_forward,
    .backward = permute_backward,
    DT_CUDA_OP_ENTRIES(permute),
};
static const dt_op_def permute_def = {
    .name = "permute",
    .flags = 0,
    .forward = permute_forward,
    .backward = permute_backward,
    DT_CUDA_OP_ENTRIES(permute),
};

/* ---------------------------------------------------------------- slab copies (concat, narrow)
 * A tensor split at dim k is viewed as [outer, width] rows, width = size(k) * inner with inner
 * the product of the dims after k; a slice along k is the column range [off, off + w). */

/* dst[o, doff + j] (=, or += when beta 1) src[o, soff + j] for o < outer, j < w; row lengths
 * dw, sw. */
static void slab_copy_f32(float *dst, int64_t dw, int64_t doff, float beta, const float *src,
                          int64_t sw, int64_t soff, int64_t outer, int64_t w) {
    if (w == 0) return;
    const int acc = beta != 0.0f;
#pragma omp parallel for if (outer * w > SHAPE_PAR_MIN) schedule(static)
    for (int64_t o = 0; o < outer; o++) {
        float *d = dst + o * dw + doff;
        const float *s = src + o * sw + soff;
        if (!acc) {
            memcpy(d, s, (size_t)w * sizeof(float));
        } else {
#pragma omp simd
            for (int64_t j = 0; j < w; j++) d[j] += s[j];
        }
    }
}

/* dst[o, j] = 0 for j outside [keep0, keep1), rows of width dw. */
static void slab_zero_outside_f32(float *dst, int64_t dw, int64_t keep0, int64_t keep1,
                                  int64_t outer) {
#pragma omp parallel for if (outer * dw > SHAPE_PAR_MIN) schedule(static)
    for (int64_t o = 0; o < outer; o++) {
        memset(dst + o * dw, 0, (size_t)keep0 * sizeof(float));
        memset(dst + o * dw + keep1, 0, (size_t)(dw - keep1) * sizeof(float));
    }
}

/* outer = product of dims before k, inner = product after k. */
static void split_dims(const dt_tensor *t, int k, int64_t *outer, int64_t *inner) {
    int64_t o = 1, in = 1;
    for (int j = 0; j < k; j++) o *= t->shape[j];
    for (int j = k + 1; j < t->ndim; j++) in *= t->shape[j];
    *outer = o;
    *inner = in;
}

/* Node params: ip[0] = dim. Inputs are laid side by side along dim in order. */
static dt_status concat_forward(const dt_op_ctx *c) {
    const int k = (int)c->node->ip[0];
    int64_t outer, inner, off = 0;
    split_dims(&c->out, k, &outer, &inner);
    const int64_t ow = c->out.shape[k] * inner;
    for (int i = 0; i < c->node->n_in; i++) {
        const int64_t w = c->in[i].shape[k] * inner;
        slab_copy_f32(c->out.data, ow, off, 0.0f, c->in[i].data, w, 0, outer, w);
        off += w;
    }
    return DT_OK;
}

static dt_status concat_backward(const dt_op_ctx *c) {
    const int k = (int)c->node->ip[0];
    int64_t outer, inner, off = 0;
    split_dims(&c->out, k, &outer, &inner);
    const int64_t ow = c->out.shape[k] * inner;
    for (int i = 0; i < c->node->n_in; i++) {
        const int64_t w = c->in[i].shape[k] * inner;
        if (c->gin[i].data)
            slab_copy_f32(c->gin[i].data, w, 0, c->gin_beta[i], c->gout.data, ow, off, outer, w);
        off += w;
    }
    return DT_OK;
}

static const dt_op_def concat_def = {
    .name = "concat",
    .flags = 0,
    .forward = concat_forward,
    .backward = concat_backward,
};

/* Node params: ip[0] = dim, ip[1] = start, ip[2] = len. */
static dt_status narrow_forward(const dt_op_ctx *c) {
    const int k = (int)c->node->ip[0];
    int64_t outer, inner;
    split_dims(&c->in[0], k, &outer, &inner);
    const int64_t w = c->node->ip[2] * inner;
    slab_copy_f32(c->out.data, w, 0, 0.0f, c->in[0].data, c->in[0].shape[k] * inner,
                  c->node->ip[1] * inner, outer, w);
    return DT_OK;
}

static dt_status narrow_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const int k = (int)c->node->ip[0];
    int64_t outer, inner;
    split_dims(&c->in[0], k, &outer, &inner);
    const int64_t w = c->node->ip[2] * inner, off = c->node->ip[1] * inner;
    const int64_t xw = c->in[0].shape[k] * inner;
    /* First writer of this gradient (beta 0): it must be complete, so zero outside the slice. */
    if (c->gin_beta[0] == 0.0f) slab_zero_outside_f32(c->gin[0].data, xw, off, off + w, outer);
    slab_copy_f32(c->gin[0].data, xw, off, c->gin_beta[0], c->gout.data, w, 0, outer, w);
    return DT_OK;
}

static const dt_op_def narrow_def = {
    .name = "narrow",
    .flags = 0,
    .forward = narrow_forward,
    .backward = narrow_backward,
};

/* ---------------------------------------------------------------- builders */

/* Checks one input: f32 with at least one dim. */
static int shape_check_x(dt_graph *g, const char *op, int x) {
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    if (dt_x_f32_check(op, t)) return -1;
    if (t->ndim < 1) return dt_shape_error(op, "x must have at least one dim", 1, &t);
    return 0;
}

/* dim in [-nd, nd) -> [0, nd); -1 with an error naming the op and shape otherwise. */
static int norm_dim(const char *op, const dt_tensor *t, int dim) {
    if (dim < -t->ndim || dim >= t->ndim) {
        char what[48];
        snprintf(what, sizeof what, "dim %d out of range", dim);
        dt_shape_error(op, what, 1, &t);
        return -1;
    }
    return dim < 0 ? dim + t->ndim : dim;
}

static int permute_add(dt_graph *g, const dt_op_def *def, int x, const int *perm) {
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    int64_t shape[DT_MAX_DIMS], ip[DT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) ip[i] = perm[i], shape[i] = t->shape[perm[i]];
    return dt_node_add(g, def, 1, &x, DT_F32, t->ndim, shape, ip, t->ndim, NULL, 0);
}

int dt_transpose(dt_graph *g, int x, int d0, int d1) {
    if (dt_ids_bad(g, "transpose", 1, &x) || shape_check_x(g, "transpose", x)) return -1;
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    const int a = norm_dim("transpose", t, d0), b = a < 0 ? -1 : norm_dim("transpose", t, d1);
    if (a < 0 || b < 0) return -1;
    int perm[DT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return permute_add(g, &transpose_def, x, perm);
}

int dt_permute(dt_graph *g, int x, const int *perm) {
    if (dt_ids_bad(g, "permute", 1, &x) || shape_check_x(g, "permute", x)) return -1;
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    if (!perm) {
        dt_error_set(DT_ERR_INVALID, "permute: perm is NULL");
        return -1;
    }
    int seen[DT_MAX_DIMS] = {0}, p[DT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        p[i] = perm[i] < 0 ? perm[i] + t->ndim : perm[i];
        if (p[i] < 0 || p[i] >= t->ndim || seen[p[i]]++) {
            char what[96];
            int len = snprintf(what, sizeof what, "perm (");
            for (int j = 0; j < t->ndim && len < (int)sizeof what; j++)
                len += snprintf(what + len, sizeof what - (size_t)len, j ? ", %d" : "%d", perm[j]);
            if (len < (int)sizeof what)
                snprintf(what + len, sizeof what - (size_t)len, ") is not a permutation");
            return dt_shape_error("permute", what, 1, &t);
        }
    }
    return permute_add(g, &permute_def, x, p);
}

/* Concat of n <= DT_MAX_IN already-checked inputs along dim k. */
static int concat_node(dt_graph *g, int n, const int *xs, int k) {
    const dt_tensor *t0 = &dt_graph_node(g, xs[0])->t;
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    for (int i = 1; i < n; i++) shape[k] += dt_graph_node(g, xs[i])->t.shape[k];
    const int64_t ip[1] = {k};
    return dt_node_add(g, &concat_def, n, xs, DT_F32, t0->ndim, shape, ip, 1, NULL, 0);
}

int dt_concat(dt_graph *g, int n, const int *xs, int dim) {
    if (n < 1 || !xs) {
        dt_error_set(DT_ERR_INVALID, "concat: needs at least one input, got %d", n);
        return -1;
    }
    if (dt_ids_bad(g, "concat", n, xs)) return -1;
    for (int i = 0; i < n; i++)
        if (shape_check_x(g, "concat", xs[i])) return -1;
    const dt_tensor *t0 = &dt_graph_node(g, xs[0])->t;
    const int k = norm_dim("concat", t0, dim);
    if (k < 0) return -1;
    for (int i = 1; i < n; i++) {
        const dt_tensor *ti = &dt_graph_node(g, xs[i])->t;
        int ok = ti->ndim == t0->ndim;
        for (int j = 0; ok && j < t0->ndim; j++) ok = j == k || ti->shape[j] == t0->shape[j];
        if (!ok) {
            char what[96];
            snprintf(what, sizeof what,
                     "input %d does not match input 0 outside dim %d (inputs 0 and %d)", i, k, i);
            return dt_shape_error("concat", what, 2, (const dt_tensor *[]){t0, ti});
        }
    }
    /* A node takes at most DT_MAX_IN inputs: longer lists become a chain of concats. */
    int id = concat_node(g, n < DT_MAX_IN ? n : DT_MAX_IN, xs, k);
    for (int i = DT_MAX_IN; i < n && id >= 0; i += DT_MAX_IN - 1) {
        int part[DT_MAX_IN] = {id}, m = 1;
        for (int j = i; j < n && m < DT_MAX_IN; j++) part[m++] = xs[j];
        id = concat_node(g, m, part, k);
    }
    return id;
}

static int narrow_node(dt_graph *g, int x, int k, int64_t start, int64_t len) {
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[k] = len;
    const int64_t ip[3] = {k, start, len};
    return dt_node_add(g, &narrow_def, 1, &x, DT_F32, t->ndim, shape, ip, 3, NULL, 0);
}

int dt_narrow(dt_graph *g, int x, int dim, int64_t start, int64_t len) {
    if (dt_ids_bad(g, "narrow", 1, &x) || shape_check_x(g, "narrow", x)) return -1;
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    const int k = norm_dim("narrow", t, dim);
    if (k < 0) return -1;
    if (start < 0 || len < 0 || start + len > t->shape[k]) {
        char what[96];
        snprintf(what, sizeof what, "range [%lld, %lld) outside dim %d of size %lld",
                 (long long)start, (long long)(start + len), k, (long long)t->shape[k]);
        return dt_shape_error("narrow", what, 1, &t);
    }
    return narrow_node(g, x, k, start, len);
}

int dt_split(dt_graph *g, int x, int dim, int n, const int64_t *sizes, int *out_ids) {
    if (n < 1 || !sizes || !out_ids) {
        dt_error_set(DT_ERR_INVALID, "split: needs n >= 1 sizes and out_ids, got n = %d", n);
        return -1;
    }
    if (dt_ids_bad(g, "split", 1, &x) || shape_check_x(g, "split", x)) return -1;
    const dt_tensor *t = &dt_graph_node(g, x)->t;
    const int k = norm_dim("split", t, dim);
    if (k < 0) return -1;
    int64_t total = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) bad |= sizes[i] < 0, total += sizes[i];
    if (bad || total != t->shape[k]) {
        char what[96];
        snprintf(what, sizeof what,
                 "%d sizes (sum %lld, each >= 0) do not split dim %d of size %lld", n,
                 (long long)total, k, (long long)t->shape[k]);
        return dt_shape_error("split", what, 1, &t);
    }
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        out_ids[i] = narrow_node(g, x, k, start, sizes[i]);
        if (out_ids[i] < 0) return -1;
        start += sizes[i];
    }
    return 0;
}
