/* Element-wise arithmetic with broadcasting, reductions to a scalar, and reshape. */
#ifndef DTRAIN_OPS_BASIC_H
#define DTRAIN_OPS_BASIC_H

#include "dtrain/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* a (op) b with NumPy broadcasting (shapes aligned at the right; a dim of 1 stretches). */
int dt_add(dt_graph *g, int a, int b);
int dt_sub(dt_graph *g, int a, int b);
int dt_mul(dt_graph *g, int a, int b);
/* a * s (s a constant). */
int dt_scale(dt_graph *g, int a, float s);
/* Sum / mean of all elements: a scalar (ndim 0). */
int dt_sum(dt_graph *g, int a);
int dt_mean(dt_graph *g, int a);
/* Same elements, new shape (one dim may be -1). Shares memory with a: no copy. */
int dt_reshape(dt_graph *g, int a, int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
