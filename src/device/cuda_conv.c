/* Convolutions on CUDA through cuDNN 9's backend (graph) API, C (include/dtrain/device_cuda.h).
 * The legacy cudnnConvolution* calls are deprecated in cuDNN 9 (and warnings are errors here),
 * so each direction is a one-operation graph: tensors x [N, C, H, W], w [O, C/groups, KH, KW],
 * y [N, O, OH, OW] (packed NCHW, f32), a convolution descriptor (cross-correlation, as torch),
 * and an execution plan chosen once at setup from cuDNN's heuristic (see dt_cuda_conv_create
 * for what is accepted). Groups are implied by the shapes (C / w's second dimension). The
 * per-call variant pack is a host-side descriptor; nothing on the device is allocated per call.
 * The bias is dtrain's own kernel (src/device/cuda_cnn.cu).
 *
 * cuDNN is loaded with dlopen when the first handle is made, not linked, as cuBLASLt is
 * (cuda_gemm.c): the binary then needs no library outside Debian's packages and the CUDA driver
 * to start (a CPU-only run never loads it). The directory it was built against (DT_CUDNN_DIR)
 * is tried first, then the loader's search path (LD_LIBRARY_PATH: a cuDNN from a wheel). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include "dtrain/device_cuda.h"
#include "device/cuda_util.h"

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };
enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER, N_DIR };
enum { KEEP_MAX = 48 }; /* descriptors one convolution keeps alive (3 plans and their graphs) */

struct dt_cuda_dnn {
    dt_device dev;
    cudnnHandle_t h;
};

struct dt_cuda_conv {
    dt_cuda_dnn *dnn;
    dt_cuda_conv_shape sh;
    int64_t OH, OW;
    int flags;
    cudnnBackendDescriptor_t plan[N_DIR]; /* NULL: direction not planned */
    size_t ws[N_DIR];
    cudnnBackendDescriptor_t keep[KEEP_MAX]; /* everything the plans were built from */
    int nkeep;
};

static const char *DIR_NAME[N_DIR] = {"forward", "backward-data", "backward-filter"};

#define DN_FUNCS(X)                                                                                \
    X(cudnnCreate)                                                                                 \
    X(cudnnDestroy)                                                                                \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnSetStream)                                                                              \
    X(cudnnBackendCreateDescriptor)                                                                \
    X(cudnnBackendDestroyDescriptor)                                                               \
    X(cudnnBackendExecute)                                                                         \
    X(cudnnBackendFinalize)                                                                        \
    X(cudnnBackendGetAttribute)                                                                    \
    X(cudnnBackendSetAttribute)

static struct {
#define DN_FIELD(f) __typeof__(&f) f;
    DN_FUNCS(DN_FIELD)
#undef DN_FIELD
} dn;
static char dn_error[512];
static pthread_once_t dn_once = PTHREAD_ONCE_INIT;

#define DN_STR2(x) #x
#define DN_STR(x) DN_STR2(x)
#define DN_SONAME "libcudnn.so." DN_STR(CUDNN_MAJOR)

static void dn_load(void) {
#define DN_NAME(f) #f,
#define DN_SLOT(f) (void **)&dn.f,
    static const char *const names[] = {DN_FUNCS(DN_NAME)};
    void **const slots[] = {DN_FUNCS(DN_SLOT)};
#undef DN_NAME
#undef DN_SLOT
#ifdef DT_CUDNN_DIR
    const char *dir = DT_CUDNN_DIR;
#else
    const char *dir = NULL;
#endif
    dt_cuda_lib_load(dir, DN_SONAME, (int)(sizeof names / sizeof names[0]), names, slots, dn_error,
                     sizeof dn_error);
}

/* From here on every cuDNN call goes through the loaded library's entry points (dn_load ran:
 * only a handle made by dt_cuda_dnn_create, which checks the load, reaches them). */
#define cudnnCreate dn.cudnnCreate
#define cudnnDestroy dn.cudnnDestroy
#define cudnnGetErrorString dn.cudnnGetErrorString
#define cudnnSetStream dn.cudnnSetStream
#define cudnnBackendCreateDescriptor dn.cudnnBackendCreateDescriptor
#define cudnnBackendDestroyDescriptor dn.cudnnBackendDestroyDescriptor
#define cudnnBackendExecute dn.cudnnBackendExecute
#define cudnnBackendFinalize dn.cudnnBackendFinalize
#define cudnnBackendGetAttribute dn.cudnnBackendGetAttribute
#define cudnnBackendSetAttribute dn.cudnnBackendSetAttribute

static dt_status dnn_check(cudnnStatus_t e, const char *what) {
    if (e == CUDNN_STATUS_SUCCESS) return DT_OK;
    return dt_error_set(DT_ERR_INTERNAL, "cuda conv: %s: cuDNN status %d (%s)", what, (int)e,
                        cudnnGetErrorString(e));
}

dt_status dt_cuda_dnn_create(dt_device d, dt_cuda_dnn **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "cuda dnn create: NULL output");
    *out = NULL;
    if (d.kind != DT_DEVICE_CUDA)
        return dt_error_set(DT_ERR_STATE, "cuda dnn create: not a CUDA device");
    pthread_once(&dn_once, dn_load);
    if (dn_error[0]) return dt_error_set(DT_ERR_STATE, "cuda conv: %s", dn_error);
    dt_status st = dt_device_use(d);
    if (st != DT_OK) return st;
    dt_cuda_dnn *h = calloc(1, sizeof *h);
    if (!h) return dt_error_set(DT_ERR_NOMEM, "cuda dnn create: no memory");
    h->dev = d;
    st = dnn_check(cudnnCreate(&h->h), "cudnnCreate");
    if (st != DT_OK) {
        free(h);
        return st;
    }
    *out = h;
    return DT_OK;
}

void dt_cuda_dnn_destroy(dt_cuda_dnn *h) {
    if (!h) return;
    if (h->h) cudnnDestroy(h->h);
    free(h);
}

/* A new descriptor of type t, remembered in c for destroy. */
static dt_status desc_new(dt_cuda_conv *c, cudnnBackendDescriptorType_t t,
                          cudnnBackendDescriptor_t *d) {
    *d = NULL;
    if (c->nkeep == KEEP_MAX)
        return dt_error_set(DT_ERR_INTERNAL, "cuda conv: more than %d cuDNN descriptors", KEEP_MAX);
    dt_status st = dnn_check(cudnnBackendCreateDescriptor(t, d), "create descriptor");
    if (st == DT_OK) c->keep[c->nkeep++] = *d;
    return st;
}

static dt_status set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                          cudnnBackendAttributeType_t t, int64_t n, const void *v,
                          const char *what) {
    return dnn_check(cudnnBackendSetAttribute(d, a, t, n, v), what);
}

/* Sets the handle of an operation graph (graph 1) or an execution plan (graph 0). Both
 * attributes are deprecated in cuDNN 9.x's later releases (a device-properties descriptor
 * replaces them) but are what every cuDNN 9 release takes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static cudnnStatus_t set_handle(cudnnBackendDescriptor_t d, cudnnHandle_t h, int graph) {
    return cudnnBackendSetAttribute(
        d, graph ? CUDNN_ATTR_OPERATIONGRAPH_HANDLE : CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
        CUDNN_TYPE_HANDLE, 1, &h);
}
#pragma GCC diagnostic pop

/* A packed NCHW f32 tensor, 16-byte aligned. */
static dt_status make_tensor(dt_cuda_conv *c, int64_t uid, const int64_t dims[4],
                             cudnnBackendDescriptor_t *out) {
    const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const int64_t align = 16;
    dt_status st = desc_new(c, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out);
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "tensor");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor");
    if (st == DT_OK)
        st =
            set_attr(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor");
    if (st == DT_OK) st = dnn_check(cudnnBackendFinalize(*out), "tensor finalize");
    return st;
}

static dt_status make_conv_desc(dt_cuda_conv *c, cudnnBackendDescriptor_t *out) {
    const dt_cuda_conv_shape *s = &c->sh;
    const int64_t dims = 2, dil[2] = {s->dil_h, s->dil_w}, str[2] = {s->stride_h, s->stride_w};
    const int64_t pad[2] = {s->pad_h, s->pad_w};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    dt_status st = desc_new(c, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, out);
    if (st == DT_OK)
        st =
            set_attr(*out, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "conv");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode,
                      "conv");
    if (st == DT_OK)
        st =
            set_attr(*out, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "conv");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "conv");
    if (st == DT_OK)
        st =
            set_attr(*out, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, "conv");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "conv");
    if (st == DT_OK)
        st = set_attr(*out, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "conv");
    if (st == DT_OK) st = dnn_check(cudnnBackendFinalize(*out), "conv finalize");
    return st;
}

/* The one-operation graph of direction dir (beta 1 when that direction accumulates). */
static dt_status make_graph(dt_cuda_conv *c, int dir, cudnnBackendDescriptor_t x,
                            cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y,
                            cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t *graph) {
    static const cudnnBackendDescriptorType_t type[N_DIR] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* attribute names per direction: x-side, w-side, y-side, conv, alpha, beta */
    static const cudnnBackendAttributeName_t at[N_DIR][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    const float alpha = 1.0f;
    const float beta = (dir == DIR_BWD_DATA && (c->flags & DT_CUDA_CONV_ACC_DX)) ||
                               (dir == DIR_BWD_FILTER && (c->flags & DT_CUDA_CONV_ACC_DW))
                           ? 1.0f
                           : 0.0f;
    cudnnBackendDescriptor_t op;
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    dt_status st = desc_new(c, type[dir], &op);
    if (st == DT_OK) st = set_attr(op, at[dir][0], D, 1, &x, "operation x");
    if (st == DT_OK) st = set_attr(op, at[dir][1], D, 1, &w, "operation w");
    if (st == DT_OK) st = set_attr(op, at[dir][2], D, 1, &y, "operation y");
    if (st == DT_OK) st = set_attr(op, at[dir][3], D, 1, &conv, "operation conv");
    if (st == DT_OK) st = set_attr(op, at[dir][4], CUDNN_TYPE_FLOAT, 1, &alpha, "alpha");
    if (st == DT_OK) st = set_attr(op, at[dir][5], CUDNN_TYPE_FLOAT, 1, &beta, "beta");
    if (st == DT_OK) st = dnn_check(cudnnBackendFinalize(op), "operation finalize");
    if (st == DT_OK) st = desc_new(c, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph);
    if (st == DT_OK) st = set_attr(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, D, 1, &op, "graph ops");
    if (st == DT_OK) st = dnn_check(set_handle(*graph, c->dnn->h, 1), "graph handle");
    if (st == DT_OK) st = dnn_check(cudnnBackendFinalize(*graph), "graph finalize");
    return st;
}

/* Does engine config cfg meet the plan's rules (deterministic; no FFT; full f32 unless TF32)? */
static int cfg_acceptable(cudnnBackendDescriptor_t cfg, int flags) {
    cudnnBackendDescriptor_t eng = NULL;
    int ok = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
        return 0;
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &eng) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                 notes) == CUDNN_STATUS_SUCCESS) {
        ok = 1;
        for (int64_t i = 0; i < n; i++) {
            cudnnBackendNumericalNote_t k = notes[i];
            if (k == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC || k == CUDNN_NUMERICAL_NOTE_FFT) ok = 0;
            if (!(flags & DT_CUDA_CONV_TF32) &&
                (k == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
                 k == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
                 k == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
                ok = 0;
        }
    }
    cudnnBackendDestroyDescriptor(eng);
    return ok;
}

/* Tries heuristic mode `mode`'s configs in order; *plan stays NULL when none fits. */
static dt_status pick_from(dt_cuda_conv *c, cudnnBackendDescriptor_t graph,
                           cudnnBackendHeurMode_t mode, size_t cap, cudnnBackendDescriptor_t *plan,
                           size_t *ws) {
    cudnnBackendDescriptor_t heur;
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    dt_status st = desc_new(c, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (st == DT_OK)
        st = set_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, D, 1, &graph, "heur");
    if (st == DT_OK)
        st =
            set_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
    if (st == DT_OK) st = dnn_check(cudnnBackendFinalize(heur), "heuristic finalize");
    int64_t n = 0;
    if (st == DT_OK)
        st =
            dnn_check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, D, 0, &n, NULL),
                      "heuristic count");
    if (st != DT_OK || n <= 0) return st;
    cudnnBackendDescriptor_t *cfg = calloc((size_t)n, sizeof *cfg);
    if (!cfg) return dt_error_set(DT_ERR_NOMEM, "cuda conv: no memory");
    int64_t made = 0;
    for (; made < n; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]) !=
            CUDNN_STATUS_SUCCESS)
            break;
    int64_t got = 0;
    if (made == n)
        st = dnn_check(
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, D, n, &got, cfg),
            "heuristic results");
    else
        st = dt_error_set(DT_ERR_NOMEM, "cuda conv: cannot create %lld engine configs",
                          (long long)n);
    int chosen = -1;
    for (int64_t i = 0; st == DT_OK && i < got && chosen < 0; i++) {
        if (!cfg_acceptable(cfg[i], c->flags)) continue;
        cudnnBackendDescriptor_t p = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) !=
            CUDNN_STATUS_SUCCESS)
            continue;
        int64_t wsz = -1, nw = 0;
        int ok = set_handle(p, c->dnn->h, 0) == CUDNN_STATUS_SUCCESS;
        ok = ok && cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, D, 1,
                                            &cfg[i]) == CUDNN_STATUS_SUCCESS;
        ok = ok && cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS;
        ok = ok && cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &nw, &wsz) == CUDNN_STATUS_SUCCESS;
        if (ok && wsz >= 0 && (uint64_t)wsz <= cap && c->nkeep + 2 <= KEEP_MAX) {
            chosen = (int)i;
            *plan = p;
            *ws = (size_t)wsz;
            c->keep[c->nkeep++] = p;
            c->keep[c->nkeep++] = cfg[i];
        } else {
            cudnnBackendDestroyDescriptor(p);
        }
    }
    for (int64_t i = 0; i < made; i++)
        if (i != chosen) cudnnBackendDestroyDescriptor(cfg[i]);
    free(cfg);
    return st;
}

static dt_status shape_check(const dt_cuda_conv_shape *s, int64_t *OH, int64_t *OW) {
    int ok = s->N >= 1 && s->C >= 1 && s->H >= 1 && s->W >= 1 && s->O >= 1 && s->KH >= 1 &&
             s->KW >= 1 && s->stride_h >= 1 && s->stride_w >= 1 && s->pad_h >= 0 && s->pad_w >= 0 &&
             s->dil_h >= 1 && s->dil_w >= 1 && s->groups >= 1 && s->C % s->groups == 0 &&
             s->O % s->groups == 0;
    *OH = ok ? (s->H + 2 * s->pad_h - s->dil_h * (s->KH - 1) - 1) / s->stride_h + 1 : 0;
    *OW = ok ? (s->W + 2 * s->pad_w - s->dil_w * (s->KW - 1) - 1) / s->stride_w + 1 : 0;
    if (ok && *OH >= 1 && *OW >= 1 && s->H + 2 * s->pad_h >= s->dil_h * (s->KH - 1) + 1 &&
        s->W + 2 * s->pad_w >= s->dil_w * (s->KW - 1) + 1)
        return DT_OK;
    return dt_error_set(DT_ERR_SHAPE,
                        "cuda conv: x [%lld, %lld, %lld, %lld], w [%lld, C/%d, %lld, %lld], stride "
                        "%dx%d, padding %dx%d, dilation %dx%d: not a valid conv2d",
                        (long long)s->N, (long long)s->C, (long long)s->H, (long long)s->W,
                        (long long)s->O, s->groups, (long long)s->KH, (long long)s->KW, s->stride_h,
                        s->stride_w, s->pad_h, s->pad_w, s->dil_h, s->dil_w);
}

void dt_cuda_conv_destroy(dt_cuda_conv *c) {
    if (!c) return;
    for (int i = c->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(c->keep[i]);
    free(c);
}

dt_status dt_cuda_conv_create(dt_cuda_dnn *h, const dt_cuda_conv_shape *shape, int flags,
                              size_t ws_cap, dt_cuda_conv **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "cuda conv create: NULL output");
    *out = NULL;
    if (!h || !shape) return dt_error_set(DT_ERR_INVALID, "cuda conv create: NULL handle or shape");
    int64_t OH, OW;
    dt_status st = shape_check(shape, &OH, &OW);
    if (st == DT_OK) st = dt_device_use(h->dev);
    if (st != DT_OK) return st;
    dt_cuda_conv *c = calloc(1, sizeof *c);
    if (!c) return dt_error_set(DT_ERR_NOMEM, "cuda conv create: no memory");
    c->dnn = h, c->sh = *shape, c->OH = OH, c->OW = OW, c->flags = flags;
    const size_t cap = ws_cap ? ws_cap : DT_CUDA_CONV_WORKSPACE_CAP;
    const int64_t xd[4] = {shape->N, shape->C, shape->H, shape->W};
    const int64_t wd[4] = {shape->O, shape->C / shape->groups, shape->KH, shape->KW};
    const int64_t yd[4] = {shape->N, shape->O, OH, OW};
    cudnnBackendDescriptor_t x, w, y, conv;
    st = make_tensor(c, UID_X, xd, &x);
    if (st == DT_OK) st = make_tensor(c, UID_W, wd, &w);
    if (st == DT_OK) st = make_tensor(c, UID_Y, yd, &y);
    if (st == DT_OK) st = make_conv_desc(c, &conv);
    const int ndir = flags & DT_CUDA_CONV_FWD_ONLY ? 1 : N_DIR;
    for (int dir = 0; st == DT_OK && dir < ndir; dir++) {
        cudnnBackendDescriptor_t graph;
        st = make_graph(c, dir, x, w, y, conv, &graph);
        /* mode A may refuse a graph that the fallback list still covers */
        if (st == DT_OK &&
            pick_from(c, graph, CUDNN_HEUR_MODE_A, cap, &c->plan[dir], &c->ws[dir]) != DT_OK)
            c->plan[dir] = NULL;
        if (st == DT_OK && !c->plan[dir])
            st = pick_from(c, graph, CUDNN_HEUR_MODE_FALLBACK, cap, &c->plan[dir], &c->ws[dir]);
        if (st == DT_OK && !c->plan[dir])
            st = dt_error_set(
                DT_ERR_INTERNAL,
                "cuda conv: no deterministic cuDNN %s engine%s within a %zu-byte "
                "workspace for x [%lld, %lld, %lld, %lld], w [%lld, %lld, %lld, %lld]",
                DIR_NAME[dir], flags & DT_CUDA_CONV_TF32 ? "" : " without TF32", cap,
                (long long)xd[0], (long long)xd[1], (long long)xd[2], (long long)xd[3],
                (long long)wd[0], (long long)wd[1], (long long)wd[2], (long long)wd[3]);
    }
    if (st != DT_OK) {
        dt_cuda_conv_destroy(c);
        return st;
    }
    *out = c;
    return DT_OK;
}

size_t dt_cuda_conv_work(const dt_cuda_conv *c) {
    size_t m = 0;
    for (int d = 0; c && d < N_DIR; d++)
        if (c->ws[d] > m) m = c->ws[d];
    return m;
}

void dt_cuda_conv_out_hw(const dt_cuda_conv *c, int64_t out_hw[2]) {
    out_hw[0] = c ? c->OH : 0;
    out_hw[1] = c ? c->OW : 0;
}

/* Runs direction dir's plan with x, w, y bound (each 16-byte aligned). */
static dt_status conv_exec(dt_cuda_conv *c, dt_stream *s, int dir, const void *x, const void *w,
                           const void *y, void *work) {
    char op[48];
    snprintf(op, sizeof op, "cuda conv %s", DIR_NAME[dir]);
    if (!c || !s) return dt_error_set(DT_ERR_INVALID, "%s: NULL plan or stream", op);
    dt_device d = dt_stream_device(s);
    if (d.kind != DT_DEVICE_CUDA || d.index != c->dnn->dev.index)
        return dt_error_set(DT_ERR_INVALID, "%s: the stream is not on the plan's CUDA device", op);
    if (!c->plan[dir]) return dt_error_set(DT_ERR_STATE, "%s: the plan was made forward-only", op);
    if (!x || !w || !y || (c->ws[dir] && !work))
        return dt_error_set(DT_ERR_INVALID, "%s: NULL x, w, y or workspace", op);
    if (((uintptr_t)x | (uintptr_t)w | (uintptr_t)y) % 16)
        return dt_error_set(DT_ERR_INVALID, "%s: x, w and y must be 16-byte aligned", op);
    dt_status st = dt_device_use(d);
    if (st == DT_OK)
        st = dnn_check(cudnnSetStream(c->dnn->h, (cudaStream_t)dt_stream_handle(s)), "set stream");
    if (st != DT_OK) return st;
    cudnnBackendDescriptor_t vp = NULL;
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)x, (void *)w, (void *)y};
    st = dnn_check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp),
                   "variant pack");
    if (st == DT_OK)
        st = set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "uids");
    if (st == DT_OK)
        st = set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs,
                      "pointers");
    if (st == DT_OK)
        st = set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &work,
                      "workspace");
    if (st == DT_OK) st = dnn_check(cudnnBackendFinalize(vp), "variant pack finalize");
    if (st == DT_OK) st = dnn_check(cudnnBackendExecute(c->dnn->h, c->plan[dir], vp), op);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return st;
}

dt_status dt_cuda_conv_fwd(dt_cuda_conv *c, dt_stream *s, float *y, const float *x, const float *w,
                           const float *bias, void *work) {
    dt_status st = conv_exec(c, s, DIR_FWD, x, w, y, work);
    if (st == DT_OK && bias) st = dt_cuda_bias_add(s, y, bias, c->sh.N, c->sh.O, c->OH * c->OW);
    return st;
}

dt_status dt_cuda_conv_bwd_data(dt_cuda_conv *c, dt_stream *s, float *dx, const float *gy,
                                const float *w, void *work) {
    return conv_exec(c, s, DIR_BWD_DATA, dx, w, gy, work);
}

dt_status dt_cuda_conv_bwd_filter(dt_cuda_conv *c, dt_stream *s, float *dw, float *db,
                                  const float *gy, const float *x, void *work) {
    dt_status st = dw ? conv_exec(c, s, DIR_BWD_FILTER, x, dw, gy, work) : DT_OK;
    if (st == DT_OK && db)
        st = dt_cuda_bias_grad(s, db, gy, c->sh.N, c->sh.O, c->OH * c->OW,
                               (c->flags & DT_CUDA_CONV_ACC_DW) != 0);
    return st;
}
