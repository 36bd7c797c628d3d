/* The optimizer's state, shared by the CPU step (optim.c) and the CUDA step (optim_cuda.c). */
#ifndef DT_OPTIM_IMPL_H
#define DT_OPTIM_IMPL_H

#include "dtrain/optim.h"

typedef struct optim_seg {
    size_t start, len; /* local indices into the slice */
    double wd;         /* effective weight decay */
    float lr_scale;
} optim_seg;

struct dt_optim {
    dt_optim_config cfg;
    size_t n_total, lo, hi;
    int64_t step;
    int n_seg;
    optim_seg *seg;
    int n_buf;
    float *buf[DT_OPTIM_MAX_BUFFERS]; /* hi - lo floats each */
};

#endif
