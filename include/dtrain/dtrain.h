/* dtrain: the whole public C API. */
#ifndef DTRAIN_H
#define DTRAIN_H

#include "dtrain/status.h"
#include "dtrain/tensor.h"
#include "dtrain/rng.h"
#include "dtrain/runtime.h"
#include "dtrain/graph.h"
#include "dtrain/ops.h"
#include "dtrain/optim.h"
#include "dtrain/safetensors.h"
#include "dtrain/models.h"
#include "dtrain/generate.h"
#include "dtrain/data.h"
#include "dtrain/tokenizer.h"
#include "dtrain/config.h"
#include "dtrain/trainer.h"
#include "dtrain/dist.h"
#include "dtrain/gpu_comm.h"

#endif
