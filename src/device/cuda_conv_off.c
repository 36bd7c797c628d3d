/* A build without cuDNN (-DDT_CUDA=OFF, or a CUDA toolkit where no cuDNN 9 was found): the
 * convolution entry points of include/dtrain/device_cuda.h refuse with one line. */
#include "dtrain/device_cuda.h"

static dt_status off(const char *op) {
#ifdef DT_HAVE_CUDA
    return dt_error_set(DT_ERR_STATE, "%s: this dtrain was built without cuDNN (DT_CUDNN_ROOT)",
                        op);
#else
    return dt_error_set(DT_ERR_STATE, "%s: this dtrain was built without CUDA (-DDT_CUDA=OFF)", op);
#endif
}

dt_status dt_cuda_dnn_create(dt_device d, dt_cuda_dnn **out) {
    if (out) *out = NULL;
    return off("cuda dnn create");
}
void dt_cuda_dnn_destroy(dt_cuda_dnn *h) {}
dt_status dt_cuda_conv_create(dt_cuda_dnn *h, const dt_cuda_conv_shape *shape, int flags,
                              size_t ws_cap, dt_cuda_conv **out) {
    if (out) *out = NULL;
    return off("cuda conv create");
}
void dt_cuda_conv_destroy(dt_cuda_conv *c) {}
size_t dt_cuda_conv_work(const dt_cuda_conv *c) {
    return 0;
}
void dt_cuda_conv_out_hw(const dt_cuda_conv *c, int64_t out_hw[2]) {
    out_hw[0] = out_hw[1] = 0;
}
dt_status dt_cuda_conv_fwd(dt_cuda_conv *c, dt_stream *s, float *y, const float *x, const float *w,
                           const float *bias, void *work) {
    return off("cuda conv forward");
}
dt_status dt_cuda_conv_bwd_data(dt_cuda_conv *c, dt_stream *s, float *dx, const float *gy,
                                const float *w, void *work) {
    return off("cuda conv backward-data");
}
dt_status dt_cuda_conv_bwd_filter(dt_cuda_conv *c, dt_stream *s, float *dw, float *db,
                                  const float *gy, const float *x, void *work) {
    return off("cuda conv backward-filter");
}
