/* rope's node state, shared by rope.c (CPU kernels) and rope_cuda.c (CUDA glue). */
#ifndef DT_OPS_ROPE_IMPL_H
#define DT_OPS_ROPE_IMPL_H

typedef struct rope_state {
    int half;        /* Dh / 2 */
    float *inv_freq; /* [half] */
    float *cos_sin;  /* [T, 2, half] for positions 0..T-1 (no positions input), else NULL */
    const float *cuda_inv_freq; /* [half] on a CUDA graph's device (owned by the graph) */
} rope_state;

/* Node parameters. */
enum { IP_HAS_POS = 0 };

#endif
