/* All graph op builders. One header per op family. */
#ifndef DTRAIN_OPS_H
#define DTRAIN_OPS_H

#include "dtrain/ops_basic.h"
#include "dtrain/ops_linear.h"
#include "dtrain/ops_cnn.h"
#include "dtrain/ops_nn.h"
#include "dtrain/ops_attn.h"

#endif
