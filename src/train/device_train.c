/* train.device=cuda: the step on a CUDA device. The trainer keeps its host graph t->g (weights
 * are initialised, loaded, resumed, evaluated, checkpointed and exported there, as on the CPU)
 * and compiles the same graph for the device, t->dg: each step copies the batch fed into g to
 * the device, runs forward and backward there, clips and applies the fused CUDA optimizer on
 * the device's flat buffers and downloads the loss and the gradient norm (two scalars). The
 * device's weights and optimizer moments come back to the host only when something on the host
 * reads them (dt_train_device_pull); so do the batchnorm running statistics, which live in the
 * graphs' state buffers (DT_PARAM_STATE) and travel with the weights. With several ranks (one per
 * GPU) the flat gradient buffer [n] is all-reduced after the last micro-batch's backward, before
 * clipping and the optimizer (dt_gpu_comm: NCCL or staged through host memory; no overlap with
 * backward). What the engine covers: the Llama and ResNet models whose ops all have CUDA
 * kernels, f32 (a LoRA base: frozen bf16 matrices, uploaded once), AdamW or SGD, plain data
 * parallelism with equal batch shares; the rest is refused here in one line.
 *
 * A job whose ranks train on different device kinds (a CUDA rank beside a CPU rank), or any job
 * with dist.gpu_comm=host, is "staged": every rank exchanges gradients the GPU ranks' way, one
 * all-reduce of the whole flat gradient after backward through pinned host memory, since one
 * collective must match on all ranks; its CPU ranks then run without a dt_ddp (no buckets, no
 * overlap, no ZeRO) and what the GPU ranks do not cover is refused on every rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/device_cuda.h"
#include "dtrain/dtrain.h"
#include "train/device_stage.h"
#include "dtrain/gpu_comm.h"
#include "train/train_impl.h"

static const char *dev_name(const dt_trainer *t, char *buf, size_t n) {
    return dt_device_name(t->device, buf, n);
}

dt_status dt_train_device_agree(dt_trainer *t) {
    t->staged = t->mixed = 0;
    if (t->world < 2) return DT_OK;
    uint64_t m = (t->device.kind == DT_DEVICE_CUDA ? 1u : 2u) |
                 (t->v.dist.gpu_comm == DT_CFG_GPU_COMM_HOST ? 4u : 0u);
    dt_status st = dt_comm_allreduce_or(t->comm, &m, 1);
    if (st != DT_OK) return st;
    t->mixed = (m & 3) == 3;
    t->staged = (m & 1) || (m & 4);
    return DT_OK;
}

/* The multi-rank features the staged exchange does not have, refused on every rank of a staged
 * job alike (a GPU rank, or a CPU rank of a job with GPU ranks or dist.gpu_comm=host). */
static dt_status check_staged(const dt_trainer *t, const char *nm) {
    const dt_config_values *v = &t->v;
    char who[160];
    if (t->device.kind == DT_DEVICE_CUDA)
        snprintf(who, sizeof who, "with train.device=%s on %d ranks", nm, t->world);
    else if (t->mixed)
        snprintf(who, sizeof who, "on a CPU rank of a job with GPU ranks (%d ranks)", t->world);
    else
        snprintf(who, sizeof who, "with dist.gpu_comm=host on %d ranks", t->world);
    if (v->dist.zero_stage >= 1)
        return dt_error_set(DT_ERR_INVALID,
                            "dist.zero_stage: %lld %s: ZeRO on GPU ranks is not implemented yet "
                            "(use dist.zero_stage=0, docs/gpu.md)",
                            (long long)v->dist.zero_stage, who);
    if (dt_config_shares_auto(v->dist.batch_shares))
        return dt_error_set(DT_ERR_INVALID,
                            "dist.batch_shares: auto %s is not implemented yet (equal shares only "
                            "on GPU ranks, docs/gpu.md)",
                            who);
    if (v->dist.sync_batchnorm)
        return dt_error_set(
            DT_ERR_INVALID,
            "dist.sync_batchnorm: SyncBatchNorm %s is not implemented (docs/gpu.md)", who);
    if (v->lora.enabled && v->lora.shard_base == DT_CFG_SHARD_TRUE)
        return dt_error_set(DT_ERR_INVALID,
                            "lora.shard_base: true %s: a sharded base on GPU ranks is not "
                            "implemented yet (each GPU holds the whole base, docs/gpu.md)",
                            who);
    /* the GPU ranks train in f32: a CPU rank in bf16 would not compute the same model */
    if (t->mixed && v->train.precision == DT_CFG_PREC_BF16)
        return dt_error_set(DT_ERR_INVALID,
                            "train.precision: bf16 %s: GPU ranks train in f32 only, so a job of "
                            "both kinds trains in f32 (docs/gpu.md)",
                            who);
    return DT_OK;
}

dt_status dt_train_device_check(dt_trainer *t) {
    char nm[DT_DEVICE_NAME_MAX];
    dev_name(t, nm, sizeof nm);
    if (t->staged) {
        dt_status st = check_staged(t, nm);
        if (st != DT_OK) return st;
    }
    if (t->device.kind != DT_DEVICE_CUDA) return DT_OK;
    const dt_config_values *v = &t->v;
    if (t->model == DT_MODEL_CUSTOM)
        return dt_error_set(DT_ERR_INVALID,
                            "train.device: %s: only Llama and ResNet models train on a CUDA "
                            "device yet (docs/gpu.md)",
                            nm);
    if (v->dist.sync_batchnorm)
        return dt_error_set(DT_ERR_INVALID,
                            "dist.sync_batchnorm: synchronised batchnorm on a CUDA device (%s) is "
                            "not implemented yet (docs/gpu.md)",
                            nm);
    /* LoRA runs (its frozen bf16 base uploaded whole to every GPU); a base sharded across the
     * GPU ranks does not (check_staged) */
    if (v->train.precision == DT_CFG_PREC_BF16)
        return dt_error_set(DT_ERR_INVALID,
                            "train.precision: bf16 on a CUDA device (%s) is not implemented yet "
                            "(f32 only, docs/gpu.md)",
                            nm);
    return DT_OK;
}

/* Host -> device, the sizes of the host graph's buffers. */
static dt_status upload(dt_trainer *t, void *dst, const void *src, size_t bytes) {
    return bytes ? dt_graph_upload(t->dg, dst, src, bytes) : DT_OK;
}

dt_status dt_train_device_open(dt_trainer *t) {
    if (t->device.kind != DT_DEVICE_CUDA) return DT_OK;
    if (t->uneven) { /* known once the batch is split, after dt_train_device_check */
        char nm[DT_DEVICE_NAME_MAX];
        return dt_error_set(DT_ERR_INVALID,
                            "dist.batch_shares: uneven shares with train.device=%s are not "
                            "implemented yet (equal shares only on GPU ranks, docs/gpu.md)",
                            dev_name(t, nm, sizeof nm));
    }
    /* before the weights exist: a graph the device cannot run is refused before any work */
    return dt_train_build_graph_on(t, t->device, &t->dg);
}

/* The frozen parameters (a LoRA base: bf16 matrices, f32 norms), once: they never change. One
 * copy per parameter from where the host graph's value lies -- its slot of the host's frozen
 * buffer, or the shared mapping that lora.share_base pointed it to (dt_graph_param_external),
 * whose slot holds no bytes. The device graph keeps its own copy in its frozen buffer. */
static dt_status upload_frozen(dt_trainer *t) {
    dt_status st = DT_OK;
    for (int i = 0; st == DT_OK && i < dt_graph_param_count(t->g); i++) {
        const dt_param_info *pi = dt_graph_param_info(t->g, i);
        if (!(pi->flags & DT_PARAM_FROZEN)) continue;
        const dt_tensor *h = dt_graph_value(t->g, pi->id);
        st = upload(t, dt_graph_value(t->dg, pi->id)->data, h->data, dt_tensor_nbytes(h));
    }
    return st;
}

dt_status dt_train_device_upload(dt_trainer *t) {
    if (!t->dg) return DT_OK;
    dt_status st;
    size_t ns = 0;
    const float *hs = dt_graph_flat_state(t->g, &ns);
    if ((st = upload(t, dt_graph_flat_param(t->dg, NULL), t->p, t->n * sizeof(float))) != DT_OK ||
        (st = upload(t, dt_graph_flat_state(t->dg, NULL), hs, ns * sizeof(float))) != DT_OK ||
        (st = upload_frozen(t)) != DT_OK)
        return st;
    /* the optimizer's moments: zero, or what a resume put into the host buffers */
    dt_optim_state os;
    if ((st = dt_optim_get_state(t->opt, &os)) != DT_OK) return st;
    size_t n = os.hi - os.lo;
    for (int b = 0; b < os.n_buffers; b++) {
        if ((st = dt_device_alloc(t->device, n * sizeof(float), (void **)&t->dbuf[b])) != DT_OK ||
            (st = upload(t, t->dbuf[b], os.buffers[b], n * sizeof(float))) != DT_OK)
            return st;
    }
    return dt_device_alloc(t->device, DT_CUDA_SUMSQ_WORK * sizeof(double), (void **)&t->dwork);
}

/* Through pinned slots on the copy stream (device_stage.c): the host does not wait for the copy,
 * the graph's stream does. */
dt_status dt_train_device_feed(dt_trainer *t) {
    if (!t->dg) return DT_OK;
    const dt_tensor *x = dt_graph_value(t->g, t->x), *y = dt_graph_value(t->g, t->y);
    size_t b[2] = {dt_tensor_nbytes(x), dt_tensor_nbytes(y)};
    dt_status st = t->stage ? DT_OK : dt_stage_open(t->device, b[0] + b[1], 2, &t->stage);
    unsigned char *h = NULL;
    if (st == DT_OK) st = dt_stage_next(t->stage, (void **)&h);
    if (st != DT_OK) return st;
    memcpy(h, x->data, b[0]);
    memcpy(h + b[0], y->data, b[1]);
    void *dst[2] = {dt_graph_value(t->dg, t->x)->data, dt_graph_value(t->dg, t->y)->data};
    return dt_stage_push(t->stage, 2, dst, b, dt_graph_stream(t->dg));
}

/* After each micro-batch: the loss, then the kernels' input checks (an id or a target out of
 * range stops the run here, before the update, as on the CPU). */
dt_status dt_train_device_loss(dt_trainer *t, float *loss) {
    dt_status st =
        dt_graph_download(t->dg, loss, dt_graph_value(t->dg, t->loss)->data, sizeof *loss);
    return st == DT_OK ? dt_graph_device_read_checks(t->dg) : st;
}

dt_status dt_train_device_dist(dt_trainer *t) {
    if (!t->staged) return DT_OK;
    /* rank 0's weights and state buffers to every rank, as dt_ddp_broadcast_params does on the
     * CPU; the device gets them in dt_train_device_upload */
    /* (before the optimizer exists: t->p and t->n are not set yet, the graph's are) */
    size_t n = 0, ns = 0;
    float *p = dt_graph_flat_param(t->g, &n), *hs = dt_graph_flat_state(t->g, &ns);
    dt_status st = n ? dt_comm_broadcast(t->comm, p, n * sizeof(float), 0) : DT_OK;
    if (st == DT_OK && ns) st = dt_comm_broadcast(t->comm, hs, ns * sizeof(float), 0);
    /* a CPU rank: the exchange's copies and events on a stream of the CPU device (they are
     * done when issued) */
    if (st == DT_OK && !t->dg) st = dt_stream_create(t->device, &t->hstream);
    if (st == DT_OK)
        st = dt_gpu_comm_open(t->comm, t->device, (dt_gpu_comm_kind)t->v.dist.gpu_comm, n, &t->gc);
    return st;
}

dt_status dt_train_device_host_allreduce(dt_trainer *t) {
    dt_status st = dt_gpu_comm_allreduce(t->gc, t->gr, t->n, 0, t->hstream);
    return st == DT_OK ? dt_stream_sync(t->hstream) : st;
}

dt_status dt_train_device_update(dt_trainer *t, float lr, double *norm) {
    dt_stream *s = dt_graph_stream(t->dg);
    float *p = dt_graph_flat_param(t->dg, NULL), *g = dt_graph_flat_grad(t->dg, NULL);
    float clip = (float)t->v.optim.clip_norm;
    double sumsq = NAN;
    dt_status st = DT_OK;
    /* several ranks: the loss was scaled by 1/world (dt_trainer_step), so the sum over ranks
     * is the mean -- the CPU ranks' DDP does the same (average = 0, Horovod's prescale) */
    if (t->gc) st = dt_gpu_comm_allreduce(t->gc, g, t->n, 0, s);
    if (st == DT_OK) st = dt_cuda_grad_sumsq(s, g, t->n, t->dwork);
    if (st == DT_OK && clip > 0) st = dt_cuda_grad_clip(s, g, t->n, t->dwork, clip);
    if (st == DT_OK) st = dt_optim_step_cuda(t->opt, s, p, g, t->dbuf, lr);
    /* the norm for the log: after the step's kernels, one sync per step */
    if (st == DT_OK) st = dt_graph_download(t->dg, &sumsq, t->dwork, sizeof sumsq);
    t->host_stale = 1;
    t->cap_eager += st == DT_OK; /* the capture waits for one eager step (device_capture.c) */
    *norm = sqrt(sumsq);
    return st;
}

dt_status dt_train_device_memory(dt_trainer *t, char *buf, size_t n) {
    if (n) buf[0] = 0;
    int gpu = t->dg && t->device.kind == DT_DEVICE_CUDA;
    /* a CPU rank of a job with GPU ranks takes part in the gather (with 0 bytes) */
    if (!gpu && !t->mixed) return DT_OK;
    dt_device_info di = {0};
    dt_status st = gpu ? dt_device_query(t->device, &di) : DT_OK;
    if (st != DT_OK) return st;
    double used = (double)(di.total_bytes -
                           (di.free_bytes < di.total_bytes ? di.free_bytes : di.total_bytes));
    if (used > t->gpu_peak) t->gpu_peak = used;
    if (!t->gpu_mem && !(t->gpu_mem = calloc(2 * (size_t)t->world, sizeof(double))))
        return dt_error_set(DT_ERR_NOMEM, "gpu memory figures: out of memory");
    memset(t->gpu_mem, 0, 2 * (size_t)t->world * sizeof(double));
    t->gpu_mem[2 * t->rank] = used, t->gpu_mem[2 * t->rank + 1] = t->gpu_peak;
    /* every rank's into every rank's array: a sum over slots only their owner filled */
    if (t->world > 1 &&
        (st = dt_comm_allreduce_f64(t->comm, t->gpu_mem, 2 * (size_t)t->world)) != DT_OK)
        return st;
    /* rank 0's figure: a GPU rank's */
    if (gpu)
        snprintf(buf, n, "  gpu-mem %.1f GiB (peak %.1f)", used / 1073741824.0,
                 t->gpu_peak / 1073741824.0);
    return DT_OK;
}

dt_status dt_train_device_ranks(dt_trainer *t) {
    if (t->dev_of) return DT_OK;
    double *d = calloc((size_t)t->world, sizeof *d);
    if (!d) return dt_error_set(DT_ERR_NOMEM, "device of each rank: out of memory");
    /* every rank's slot is its own: a sum over slots the others left 0 (hence the index + 1) */
    d[t->rank] = t->device.kind == DT_DEVICE_CUDA ? t->device.index + 1 : 0;
    dt_status st = t->world > 1 ? dt_comm_allreduce_f64(t->comm, d, (size_t)t->world) : DT_OK;
    if (st != DT_OK) {
        free(d);
        return st;
    }
    for (int r = 0; r < t->world; r++) d[r] -= 1;
    t->dev_of = d;
    return DT_OK;
}

void dt_train_device_track(dt_trainer *t, void (*metric)(dt_trainer *, const char *, double)) {
    char key[64];
    for (int r = 0; t->dev_of && r < t->world; r++) {
        snprintf(key, sizeof key, "device.%d", r);
        metric(t, key, t->dev_of[r]);
    }
    if (!t->gpu_mem) return;
    for (int r = 0; r < t->world; r++) {
        if (t->dev_of && t->dev_of[r] < 0) continue; /* a CPU rank of a job with GPU ranks */
        snprintf(key, sizeof key, "gpu_mem.%d", r);
        metric(t, key, t->gpu_mem[2 * r]);
        snprintf(key, sizeof key, "gpu_mem_peak.%d", r);
        metric(t, key, t->gpu_mem[2 * r + 1]);
    }
}

int dt_train_device_ckpt_may_save(const dt_trainer *t, int last, int stop) {
    const dt_config_values *v = &t->v;
    if (!t->dg) return 0;
    /* every_minutes: the saver's clock decides inside the save call, so every step may save */
    return last || stop || v->ckpt.every_minutes > 0 ||
           (v->ckpt.every_steps > 0 && t->prog.step % v->ckpt.every_steps == 0);
}

dt_status dt_train_device_pull(dt_trainer *t) {
    if (!t->dg || !t->host_stale) return DT_OK;
    size_t ns = 0;
    float *hs = dt_graph_flat_state(t->g, &ns);
    dt_status st =
        dt_graph_download(t->dg, t->p, dt_graph_flat_param(t->dg, NULL), t->n * sizeof(float));
    if (st == DT_OK && ns)
        st = dt_graph_download(t->dg, hs, dt_graph_flat_state(t->dg, NULL), ns * sizeof(float));
    dt_optim_state os;
    if (st == DT_OK) st = dt_optim_get_state(t->opt, &os);
    for (int b = 0; st == DT_OK && b < os.n_buffers; b++)
        st = dt_graph_download(t->dg, os.buffers[b], t->dbuf[b], (os.hi - os.lo) * sizeof(float));
    if (st == DT_OK) t->host_stale = 0;
    return st;
}

void dt_train_device_close(dt_trainer *t) {
    /* no kernel still using the buffers; a graph whose compile failed has no stream (and the
     * compile's error must stay the one reported) */
    if (t->dg && dt_graph_stream(t->dg)) dt_stream_sync(dt_graph_stream(t->dg));
    dt_train_capture_close(t);
    dt_stage_close(t->stage);
    t->stage = NULL;
    for (int b = 0; b < DT_OPTIM_MAX_BUFFERS; b++)
        if (t->dbuf[b]) dt_device_free(t->device, t->dbuf[b]);
    if (t->dwork) dt_device_free(t->device, t->dwork);
    dt_gpu_comm_close(t->gc);
    if (t->hstream) dt_stream_destroy(t->hstream);
    t->hstream = NULL;
    free(t->gpu_mem);
    t->gpu_mem = NULL;
    free(t->dev_of);
    t->dev_of = NULL;
    dt_graph_free(t->dg);
    t->dg = NULL, t->dwork = NULL, t->gc = NULL;
    memset(t->dbuf, 0, sizeof t->dbuf);
}
