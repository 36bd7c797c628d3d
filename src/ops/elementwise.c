/* Element-wise add/sub/mul with NumPy broadcasting, scale, sum/mean to a scalar, reshape.
 *
 * Broadcasting: operands are aligned at the right; an operand dim of 1 (or a missing leading
 * dim) has stride 0 in the iteration. out has the broadcast shape [d0, ..., dL-1]; loops run over
 * the leading dims as "rows" and the last dim as a contiguous-or-stride-0 inner loop. */
#include <string.h>
#include "dtrain/ops_basic.h"
#include "graph/op.h"
#include "ops/ops_cuda.h"

enum { EW_ADD = 0, EW_SUB = 1, EW_MUL = 2 };

/* Strides (elements) of x when iterated over out's shape; 0 on broadcast dims. */
static void bcast_strides(const dt_tensor *x, const dt_tensor *out, int64_t *s) {
    int off = out->ndim - x->ndim;
    int64_t st = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        int xd = d - off;
        /* Stride 0 only where x is really broadcast (its dim 1, out's larger): a dim of 1 in
         * both keeps a real stride, so a non-broadcast x is recognised by the kernels. */
        if (xd < 0 || (x->shape[xd] == 1 && out->shape[d] != 1)) {
            s[d] = 0;
        } else {
            s[d] = st;
        }
        if (xd >= 0) st *= x->shape[xd];
    }
}

/* Offset of row r (all dims but the last) for strides s. */
static int64_t row_offset(const dt_tensor *out, const int64_t *s, int64_t r) {
    int64_t off = 0;
    for (int d = out->ndim - 2; d >= 0; d--) {
        off += (r % out->shape[d]) * s[d];
        r /= out->shape[d];
    }
    return off;
}

static void dims(const dt_tensor *out, int64_t *rows, int64_t *inner) {
    *inner = out->ndim ? out->shape[out->ndim - 1] : 1;
    *rows = *inner ? dt_tensor_numel(out) / *inner : 0;
}

/* Iteration of operands a, b over out's shape: their strides sa, sb [DT_MAX_DIMS] (zeroed by
 * the caller), out's rows and inner length, and a's and b's strides along the inner dim. */
static void bcast_pair(const dt_tensor *a, const dt_tensor *b, const dt_tensor *out, int64_t *sa,
                       int64_t *sb, int64_t *rows, int64_t *inner, int64_t *ia, int64_t *ib) {
    bcast_strides(a, out, sa);
    bcast_strides(b, out, sb);
    dims(out, rows, inner);
    *ia = out->ndim ? sa[out->ndim - 1] : 1;
    *ib = out->ndim ? sb[out->ndim - 1] : 1;
}

static dt_status ew_forward(const dt_op_ctx *c) {
    const dt_tensor *a = &c->in[0], *b = &c->in[1], *o = &c->out;
    int kind = (int)c->node->ip[0];
    const float *A = a->data, *B = b->data;
    float *O = o->data;
    int64_t sa[DT_MAX_DIMS] = {0}, sb[DT_MAX_DIMS] = {0}, rows, inner, ia, ib;
    bcast_pair(a, b, o, sa, sb, &rows, &inner, &ia, &ib);
    int64_t n = rows * inner;
    if (dt_tensor_numel(a) == n && dt_tensor_numel(b) == n) {
        /* Nothing broadcast (a residual add): one flat loop. The rows of NCHW activations are
         * as short as 4 elements at ResNet's last stage, where a row offset per row costs more
         * than the add itself. */
        if (kind == EW_ADD) {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) O[k] = A[k] + B[k];
        } else if (kind == EW_SUB) {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) O[k] = A[k] - B[k];
        } else {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) O[k] = A[k] * B[k];
        }
        return DT_OK;
    }
#pragma omp parallel for schedule(static) if (rows * inner > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *pa = A + row_offset(o, sa, r), *pb = B + row_offset(o, sb, r);
        float *po = O + r * inner;
        if (kind == EW_ADD)
            for (int64_t k = 0; k < inner; k++) po[k] = pa[k * ia] + pb[k * ib];
        else if (kind == EW_SUB)
            for (int64_t k = 0; k < inner; k++) po[k] = pa[k * ia] - pb[k * ib];
        else
            for (int64_t k = 0; k < inner; k++) po[k] = pa[k * ia] * pb[k * ib];
    }
    return DT_OK;
}

/* gx += sign * gout (* other) reduced over x's broadcast dims. */
static void ew_grad(const dt_op_ctx *c, int which) {
    const dt_tensor *o = &c->out, *x = &c->in[which], *y = &c->in[1 - which];
    const dt_tensor *gx = &c->gin[which];
    int kind = (int)c->node->ip[0];
    float sign = (kind == EW_SUB && which == 1) ? -1.0f : 1.0f;
    const float *G = c->gout.data, *Y = y->data;
    float *GX = gx->data;
    int64_t sx[DT_MAX_DIMS] = {0}, sy[DT_MAX_DIMS] = {0}, rows, inner, ix, iy;
    bcast_pair(x, y, o, sx, sy, &rows, &inner, &ix, &iy);
    int same = dt_tensor_numel(x) == dt_tensor_numel(o);
    if (!same && c->gin_beta[which] == 0.0f) memset(GX, 0, dt_tensor_nbytes(x));
    float beta = same ? c->gin_beta[which] : 1.0f;
    int64_t n = rows * inner;
    if (same && (kind != EW_MUL || dt_tensor_numel(y) == n)) {
        /* nothing broadcast: one flat loop (see ew_forward) */
        if (kind == EW_MUL && beta == 0.0f) {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) GX[k] = G[k] * Y[k];
        } else if (kind == EW_MUL) {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) GX[k] += G[k] * Y[k];
        } else if (beta == 0.0f) {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) GX[k] = sign * G[k];
        } else {
#pragma omp parallel for schedule(static) if (n > 32768)
            for (int64_t k = 0; k < n; k++) GX[k] += sign * G[k];
        }
        return;
    }
    /* Rows write disjoint parts of gx only when x is not broadcast: parallelise just then. */
#pragma omp parallel for schedule(static) if (same && rows * inner > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *pg = G + r * inner, *py = Y + row_offset(o, sy, r);
        float *px = GX + row_offset(o, sx, r);
        if (kind == EW_MUL) {
            if (beta == 0.0f && ix == 1)
                for (int64_t k = 0; k < inner; k++) px[k] = pg[k] * py[k * iy];
            else
                for (int64_t k = 0; k < inner; k++) px[k * ix] += pg[k] * py[k * iy];
        } else {
            if (beta == 0.0f && ix == 1)
                for (int64_t k = 0; k < inner; k++) px[k] = sign * pg[k];
            else
                for (int64_t k = 0; k < inner; k++) px[k * ix] += sign * pg[k];
        }
    }
}

static dt_status ew_backward(const dt_op_ctx *c) {
    if (c->gin[0].data) ew_grad(c, 0);
    if (c->gin[1].data) ew_grad(c, 1);
    return DT_OK;
}

static const dt_op_def add_def = {
    .name = "add", .forward = ew_forward, .backward = ew_backward, DT_CUDA_OP_ENTRIES(ew)};
static const dt_op_def sub_def = {
    .name = "sub", .forward = ew_forward, .backward = ew_backward, DT_CUDA_OP_ENTRIES(ew)};
static const dt_op_def mul_def = {.name = "mul",
                                  .flags = DT_OPF_BWD_IN(0) | DT_OPF_BWD_IN(1),
                                  .forward = ew_forward,
                                  .backward = ew_backward,
                                  DT_CUDA_OP_ENTRIES(ew)};

static int binary(dt_graph *g, const dt_op_def *def, int kind, int a, int b) {
    if (dt_ids_bad(g, def->name, 2, (int[]){a, b})) return -1;
    const dt_tensor *ta = &dt_graph_node(g, a)->t, *tb = &dt_graph_node(g, b)->t;
    const dt_tensor *ts[2] = {ta, tb};
    if (ta->dtype != DT_F32 || tb->dtype != DT_F32)
        return dt_shape_error(def->name, "operands must be f32", 2, ts);
    int nd = ta->ndim > tb->ndim ? ta->ndim : tb->ndim;
    int64_t shape[DT_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - ta->ndim), db = d - (nd - tb->ndim);
        int64_t x = da >= 0 ? ta->shape[da] : 1, y = db >= 0 ? tb->shape[db] : 1;
        if (x != y && x != 1 && y != 1)
            return dt_shape_error(def->name, "shapes do not broadcast", 2, ts);
        shape[d] = x == 1 ? y : x;
    }
    int64_t ip = kind;
    return dt_node_add(g, def, 2, (int[]){a, b}, DT_F32, nd, shape, &ip, 1, NULL, 0);
}

int dt_add(dt_graph *g, int a, int b) {
    return binary(g, &add_def, EW_ADD, a, b);
}
int dt_sub(dt_graph *g, int a, int b) {
    return binary(g, &sub_def, EW_SUB, a, b);
}
int dt_mul(dt_graph *g, int a, int b) {
    return binary(g, &mul_def, EW_MUL, a, b);
}

/* ---- scale: out = s * a ---- */
static dt_status scale_forward(const dt_op_ctx *c) {
    const float *A = c->in[0].data;
    float *O = c->out.data, s = c->node->fp[0];
    int64_t n = dt_tensor_numel(&c->out);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) O[i] = s * A[i];
    return DT_OK;
}
static dt_status scale_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    const float *G = c->gout.data;
    float *GA = c->gin[0].data, s = c->node->fp[0], beta = c->gin_beta[0];
    int64_t n = dt_tensor_numel(&c->out);
    /* beta 0 must not read GA: it may hold anything (the planner reuses memory), and
     * 0 * NaN is NaN. */
    if (beta == 0.0f) {
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) GA[i] = s * G[i];
    } else {
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) GA[i] = beta * GA[i] + s * G[i];
    }
    return DT_OK;
}
static const dt_op_def scale_def = {.name = "scale",
                                    .forward = scale_forward,
                                    .backward = scale_backward,
                                    DT_CUDA_OP_ENTRIES(scale)};

int dt_scale(dt_graph *g, int a, float s) {
    if (dt_ids_bad(g, "scale", 1, &a)) return -1;
    const dt_tensor *t = &dt_graph_node(g, a)->t;
    if (t->dtype != DT_F32) return dt_shape_error("scale", "operand must be f32", 1, &t);
    return dt_node_add(g, &scale_def, 1, &a, DT_F32, t->ndim, t->shape, NULL, 0, &s, 1);
}

/* ---- sum / mean of all elements: out [] = k * sum(a), k = 1 or 1/n ----
 * Fixed chunks of SUM_CHUNK floats are summed in f32 (vectorised, in parallel), then the chunk
 * sums in double in chunk order: the result does not depend on the thread count, and the loss
 * of a large batch keeps double accuracy where it matters. ws holds the chunk sums. */
#define SUM_CHUNK 2048

static int64_t sum_chunks(int64_t n) {
    return (n + SUM_CHUNK - 1) / SUM_CHUNK;
}

static dt_status sum_prepare(dt_graph *g, dt_node *n) {
    (void)g;
    n->ws_fwd =
        (size_t)sum_chunks(dt_tensor_numel(&dt_graph_node(g, n->in[0])->t)) * sizeof(double);
    return DT_OK;
}

static dt_status sum_forward(const dt_op_ctx *c) {
    const float *A = c->in[0].data;
    int64_t n = dt_tensor_numel(&c->in[0]), nc = sum_chunks(n);
    double *part = c->ws, acc = 0;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t k = 0; k < nc; k++) {
        int64_t lo = k * SUM_CHUNK, hi = lo + SUM_CHUNK < n ? lo + SUM_CHUNK : n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++) s += A[i];
        part[k] = s;
    }
    for (int64_t k = 0; k < nc; k++) acc += part[k];
    ((float *)c->out.data)[0] = (float)(acc * c->node->fp[0]);
    return DT_OK;
}

static dt_status sum_backward(const dt_op_ctx *c) {
    if (!c->gin[0].data) return DT_OK;
    float g = ((const float *)c->gout.data)[0] * c->node->fp[0], beta = c->gin_beta[0];
    float *GA = c->gin[0].data;
    int64_t n = dt_tensor_numel(&c->in[0]);
    if (beta == 0.0f) { /* never read GA then (see scale_backward) */
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) GA[i] = g;
    } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) GA[i] = beta * GA[i] + g;
    }
    return DT_OK;
}
static const dt_op_def sum_def = {
    .name = "sum", .prepare = sum_prepare, .forward = sum_forward, .backward = sum_backward};

static int reduce(dt_graph *g, int a, const char *name, int mean) {
    if (dt_ids_bad(g, name, 1, &a)) return -1;
    const dt_tensor *t = &dt_graph_node(g, a)->t;
    if (t->dtype != DT_F32) return dt_shape_error(name, "operand must be f32", 1, &t);
    int64_t n = dt_tensor_numel(t);
    float k = mean ? (n ? 1.0f / (float)n : 0.0f) : 1.0f;
    return dt_node_add(g, &sum_def, 1, &a, DT_F32, 0, NULL, NULL, 0, &k, 1);
}
int dt_sum(dt_graph *g, int a) {
    return reduce(g, a, "sum", 0);
}
int dt_mean(dt_graph *g, int a) {
    return reduce(g, a, "mean", 1);
}

/* ---- reshape: an alias of a's memory; no kernels ---- */
static const dt_op_def reshape_def = {.name = "reshape", .flags = DT_OPF_ALIAS};

int dt_reshape(dt_graph *g, int a, int ndim, const int64_t *shape) {
    if (dt_ids_bad(g, "reshape", 1, &a)) return -1;
    dt_tensor t = dt_graph_node(g, a)->t, r;
    if (dt_tensor_reshape(&r, &t, ndim, shape) != DT_OK) return -1;
    return dt_node_add(g, &reshape_def, 1, &a, t.dtype, r.ndim, r.shape, NULL, 0, NULL, 0);
}
