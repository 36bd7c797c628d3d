/* The GPU memory plan of `dtrain plan --device NAME | --gpu-gib N` (docs/gpu.md): what one
 * worker's GPU holds for a training step, against a card. A model, not a measurement: the CUDA
 * engine does not train yet, so no figure here has been read off a GPU.
 *
 * Per worker (one GPU per process), in bytes:
 *   - trainable parameters, gradients and optimizer state: f32, sharded by ZeRO exactly as the
 *     CPU plan does (plan.c), the frozen base and batchnorm statistics as there too;
 *   - under bf16, a bf16 copy of the trainable weights that the GEMMs read (2 bytes a weight,
 *     sharded like the parameters under ZeRO-3), refreshed after each optimizer step;
 *   - activations: the arena of the real training graph (plan_measure.c) compiled with one
 *     thread (the CPU's per-thread scratch has no GPU counterpart) and without the CPU's bf16
 *     rounding copies (cuBLASLt reads bf16 operands directly); under bf16 the arena counts at
 *     DT_PLAN_GPU_BF16_ACT_FACTOR, except one copy of the logits [B, T, V], which stays f32
 *     (the fused cross-entropy reads f32 logits: include/dtrain/device_cuda.h);
 *   - the cuBLASLt workspace of the GEMM handle (DT_CUDA_GEMM_WORKSPACE_DEFAULT), the cuDNN
 *     convolution workspace cap (ResNet only), the CUDA context, and the allocator's headroom. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "config/config_impl.h"
#include "config/plan_impl.h"
#include "dtrain/device.h"
#include "dtrain/device_cuda.h"

#define MIB ((int64_t)1 << 20)
#define GIB (1024.0 * 1024.0 * 1024.0)

/* The CUDA context with the kernels of the CUDA runtime, cuBLASLt and cuDNN loaded lazily
 * (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2): about 500 MiB is what a process that
 * has run a cuBLAS GEMM typically shows in nvidia-smi on an H100. Not measured by dtrain yet. */
#define PLAN_GPU_CONTEXT_BYTES (500 * MIB)
/* The workspace the engine lets cuDNN's convolution engines use (dt_cuda_conv_create's
 * default cap); an engine that wants more is not chosen. */
#define PLAN_GPU_CUDNN_BYTES ((int64_t)DT_CUDA_CONV_WORKSPACE_CAP)

/* Memory as the driver reports it on the SXM / standard board of each (nvidia-smi's "Total",
 * MiB): a few hundred MiB under the marketed size where ECC or the driver reserves it. */
static const struct {
    const char *name;
    int64_t mib;
    int cc_major, cc_minor;
} cards[] = {
    {"h200", 143771, 9, 0},   {"h100", 81559, 9, 0}, {"a100-80", 81920, 8, 0},
    {"a100-40", 40960, 8, 0}, {"l40s", 46068, 8, 9}, {"v100-32", 32768, 7, 0},
};

const char *dt_gpu_card_names(void) {
    return "h200|h100|a100-80|a100-40|l40s|v100-32|cuda";
}

/* The visible GPU of spec ("cuda" or "cuda:N"). */
static dt_status visible_card(const char *spec, dt_gpu_card *out) {
    dt_device d;
    int n = 0;
    dt_status st = dt_device_parse(spec, &d, NULL);
    if (st != DT_OK) return st;
    if ((st = dt_device_count(DT_DEVICE_CUDA, &n)) != DT_OK) return st;
    if (n == 0)
        return dt_error_set(DT_ERR_INVALID,
                            "plan: %s: no CUDA device visible to plan for: name the card "
                            "(--device %s) or its memory (--gpu-gib N)",
                            spec, dt_gpu_card_names());
    if ((st = dt_device_resolve(spec, "plan", dt_device_local_rank(), &d)) != DT_OK) return st;
    dt_device_info in;
    if ((st = dt_device_query(d, &in)) != DT_OK) return st;
    snprintf(out->name, sizeof out->name, "%s", in.name);
    out->total_bytes = (int64_t)in.total_bytes;
    out->cc_major = in.cc_major, out->cc_minor = in.cc_minor;
    return DT_OK;
}

dt_status dt_gpu_card_get(const char *spec, double gib, dt_gpu_card *out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "plan: NULL card");
    memset(out, 0, sizeof *out);
    if (gib != 0 && !(isfinite(gib) && gib > 0 && gib <= 1e6))
        return dt_error_set(DT_ERR_INVALID,
                            "plan: GPU memory %g GiB (--gpu-gib): expected a size > 0 and <= 1e6",
                            gib);
    int cuda = !spec || !strcmp(spec, "cuda") || !strncmp(spec, "cuda:", 5);
    if (cuda && gib > 0) { /* a card of that size, whatever is visible */
        snprintf(out->name, sizeof out->name, "cuda");
    } else if (cuda) {
        dt_status st = visible_card(spec ? spec : "cuda", out);
        if (st != DT_OK) return st;
    } else {
        size_t i = 0;
        while (i < sizeof cards / sizeof cards[0] && strcmp(cards[i].name, spec)) i++;
        if (i == sizeof cards / sizeof cards[0])
            return dt_error_set(DT_ERR_INVALID, "plan: unknown GPU '%s' (expected %s or cuda:N)",
                                spec, dt_gpu_card_names());
        snprintf(out->name, sizeof out->name, "%s", cards[i].name);
        out->total_bytes = cards[i].mib * MIB;
        out->cc_major = cards[i].cc_major, out->cc_minor = cards[i].cc_minor;
    }
    if (gib > 0) out->total_bytes = (int64_t)(gib * GIB);
    return DT_OK;
}

/* The device figures of p (a plan of the graph compiled for the device) for c on card. */
static void device_figures(const dt_config_values *v, const dt_plan *p, const dt_gpu_card *card,
                           dt_plan_gpu *g) {
    memset(g, 0, sizeof *g);
    g->card = *card;
    g->bf16 = v->train.precision == DT_CFG_PREC_BF16;
    g->param_bytes = p->param_bytes;
    g->grad_bytes = p->grad_bytes;
    g->optim_bytes = p->optim_bytes;
    g->frozen_bytes = p->frozen_bytes;
    g->state_bytes = p->state_bytes;
    /* the bf16 copy has the parameters' shard: 2 of their 4 bytes */
    g->weight_bf16_bytes = g->bf16 ? p->param_bytes / 2 : 0;
    g->activation_f32_bytes = p->activation_bytes;
    if (g->bf16) {
        int64_t keep =
            p->logits_bytes < p->activation_bytes ? p->logits_bytes : p->activation_bytes;
        g->activation_bytes = keep + (int64_t)ceil((double)(p->activation_bytes - keep) *
                                                   DT_PLAN_GPU_BF16_ACT_FACTOR);
    } else {
        g->activation_bytes = p->activation_bytes;
    }
    g->cublaslt_bytes = (int64_t)DT_CUDA_GEMM_WORKSPACE_DEFAULT;
    g->cudnn_bytes = v->model.kind == DT_CFG_MODEL_LLAMA ? 0 : PLAN_GPU_CUDNN_BYTES;
    g->context_bytes = PLAN_GPU_CONTEXT_BYTES;
    int64_t alloc = g->param_bytes + g->grad_bytes + g->optim_bytes + g->frozen_bytes +
                    g->state_bytes + g->weight_bf16_bytes + g->activation_bytes +
                    g->cublaslt_bytes + g->cudnn_bytes;
    /* dtrain allocates its buffers once (the arena, the flat buffers, the workspaces), so there
     * is no caching allocator's growth to allow for: the headroom covers cudaMalloc's 2 MiB
     * rounding of each buffer and the driver's fragmentation between them */
    g->headroom_bytes = (int64_t)ceil((double)alloc * DT_PLAN_GPU_HEADROOM);
    g->total_bytes = alloc + g->context_bytes + g->headroom_bytes;
    g->fits = g->total_bytes <= card->total_bytes;
}

dt_status dt_plan_gpu_compute(const dt_config *c, int world, const dt_gpu_card *card, dt_plan *p,
                              dt_plan_gpu *g) {
    if (!c || !card || !p || !g) return dt_error_set(DT_ERR_INVALID, "plan: NULL GPU plan input");
    if (card->total_bytes <= 0)
        return dt_error_set(DT_ERR_INVALID, "plan: GPU '%s' has no memory size", card->name);
    dt_status st = plan_compute_as(c, world, 1, 0, 1, p);
    if (st != DT_OK) return st;
    device_figures(dt_config_get_values(c), p, card, g);
    return DT_OK;
}

/* What a search varies: the config w (its batch or ZeRO stage), the plan p0 (resharded), the
 * card, the worker count. */
typedef struct search {
    dt_config *w;
    const dt_plan *p0;
    const dt_gpu_card *card;
    int world;
} search;

/* The last x in [lo, hi) for which pred holds, given that it holds at lo and not at hi (pred
 * monotone in between): a bisection. */
static int64_t last_true(const search *s, int64_t lo, int64_t hi,
                         int (*pred)(const search *s, int64_t x)) {
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pred(s, mid))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* 1 when s->p0 resharded for s->w on `world` workers does not fit s->card. */
static int too_few(const search *s, int64_t world) {
    dt_plan p = *s->p0;
    dt_plan_gpu g;
    if (dt_plan_reshard(s->w, (int)world, &p) != DT_OK) {
        dt_error_clear();
        return 1;
    }
    device_figures(dt_config_get_values(s->w), &p, s->card, &g);
    return !g.fits;
}

dt_status dt_plan_gpu_min_workers(const dt_config *c, const dt_plan *p, const dt_gpu_card *card,
                                  int max, int *out) {
    if (!c || !p || !card || !out || max < 1)
        return dt_error_set(DT_ERR_INVALID, "plan: GPU worker search: bad arguments");
    *out = 0;
    dt_config *w = malloc(sizeof *w);
    if (!w) return dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
    *w = *c;
    w->v.dist.zero_stage = 3;
    /* the total does not grow with the worker count (shards are ceil(n / workers), the rest
     * does not depend on it), so "too few" holds up to the fewest that fit (0: too few) */
    search s = {w, p, card, 0};
    if (!too_few(&s, max)) *out = (int)last_true(&s, 0, max, too_few) + 1;
    free(w);
    return DT_OK;
}

/* 1 when data.batch = b of s->w fits s->card; a plan that cannot be made at that batch (beyond
 * what a plan counts) does not fit. */
static int fits_at(const search *s, int64_t b) {
    dt_plan p;
    dt_plan_gpu g;
    s->w->v.data.batch = b;
    int ok = dt_plan_gpu_compute(s->w, s->world, s->card, &p, &g) == DT_OK && g.fits;
    dt_error_clear();
    return ok;
}

dt_status dt_plan_gpu_max_batch(const dt_config *c, int world, const dt_gpu_card *card, int64_t max,
                                int64_t *out) {
    if (!c || !card || !out || max < 1)
        return dt_error_set(DT_ERR_INVALID, "plan: GPU batch search: bad arguments");
    *out = 0;
    dt_config *w = malloc(sizeof *w);
    if (!w) return dt_error_set(DT_ERR_NOMEM, "plan: out of memory");
    *w = *c;
    w->v.data.batch = 1;
    dt_plan p;
    dt_plan_gpu g;
    dt_status st = dt_plan_gpu_compute(w, world, card, &p, &g);
    if (st != DT_OK || !g.fits) { /* an error of the config itself, or not even one fits */
        free(w);
        return st;
    }
    /* a ResNet plan reads the image side from the dataset: once is enough */
    if (p.kind != DT_CFG_MODEL_LLAMA) w->v.data.image_size = p.seq_len;
    search s = {w, NULL, card, world};
    int64_t lo = 1; /* fits; doubled until the next does not, then bisected */
    while (lo < max) {
        int64_t next = lo > max / 2 ? max : 2 * lo;
        if (!fits_at(&s, next)) {
            lo = last_true(&s, lo, next, fits_at);
            break;
        }
        lo = next;
    }
    free(w);
    *out = lo;
    return DT_OK;
}

static double gib(int64_t b) {
    return (double)b / GIB;
}

static void print_json(FILE *f, const dt_plan *p, const dt_plan_gpu *g, int64_t max_batch,
                       int min_workers) {
    plan_print_json_body(f, p);
    char mb[32] = "null", cc[32] = "null";
    if (g->card.cc_major) snprintf(cc, sizeof cc, "\"%d.%d\"", g->card.cc_major, g->card.cc_minor);
    if (max_batch >= 0) snprintf(mb, sizeof mb, "%lld", (long long)max_batch);
    char mw[16] = "null";
    if (min_workers > 0) snprintf(mw, sizeof mw, "%d", min_workers);
    fprintf(f,
            ", \"device\": {\"card\": \"%s\", \"card_bytes\": %lld, \"compute_capability\": %s, "
            "\"precision\": \"%s\", "
            "\"bf16_activation_factor\": %g, \"param_bytes\": %lld, \"weight_bf16_bytes\": %lld, "
            "\"grad_bytes\": %lld, \"optim_bytes\": %lld, \"frozen_bytes\": %lld, "
            "\"state_bytes\": %lld, \"activation_f32_bytes\": %lld, \"activation_bytes\": %lld, "
            "\"cublaslt_workspace_bytes\": %lld, \"cudnn_workspace_bytes\": %lld, "
            "\"context_bytes\": %lld, \"headroom_bytes\": %lld, \"total_bytes\": %lld, "
            "\"fits\": %s, \"max_batch\": %s, \"min_workers_zero3\": %s}}\n",
            g->card.name, (long long)g->card.total_bytes, cc, g->bf16 ? "bf16" : "fp32",
            g->bf16 ? DT_PLAN_GPU_BF16_ACT_FACTOR : 1.0, (long long)g->param_bytes,
            (long long)g->weight_bf16_bytes, (long long)g->grad_bytes, (long long)g->optim_bytes,
            (long long)g->frozen_bytes, (long long)g->state_bytes,
            (long long)g->activation_f32_bytes, (long long)g->activation_bytes,
            (long long)g->cublaslt_bytes, (long long)g->cudnn_bytes, (long long)g->context_bytes,
            (long long)g->headroom_bytes, (long long)g->total_bytes, g->fits ? "true" : "false", mb,
            mw);
}

void dt_plan_gpu_print(FILE *f, const dt_plan *p, const dt_plan_gpu *g, int64_t max_batch,
                       int min_workers, int json) {
    if (json) {
        print_json(f, p, g, max_batch, min_workers);
        return;
    }
    char lbl[320];
    snprintf(lbl, sizeof lbl, "GPU memory per worker (%s, %.2f GiB)", g->card.name,
             gib(g->card.total_bytes));
    /* the training state's rows are the plan's own (g copies them) */
    plan_print_head(f, p, lbl, 50);
    plan_print_rows(f, p, 50, g->bf16 ? g->weight_bf16_bytes : -1);
    if (g->bf16)
        snprintf(lbl, sizeof lbl, "  activations (arena; bf16: x%.2f, logits f32)",
                 DT_PLAN_GPU_BF16_ACT_FACTOR);
    else
        snprintf(lbl, sizeof lbl, "  activations (planned arena, f32)");
    fprintf(f, "%-50s %10.2f\n", lbl, gib(g->activation_bytes));
    fprintf(f, "%-50s %10.2f\n", "  cuBLASLt workspace", gib(g->cublaslt_bytes));
    if (g->cudnn_bytes)
        fprintf(f, "%-50s %10.2f\n", "  cuDNN convolution workspace (cap)", gib(g->cudnn_bytes));
    fprintf(f, "%-50s %10.2f\n", "  CUDA context and kernels (estimate)", gib(g->context_bytes));
    snprintf(lbl, sizeof lbl, "  allocator headroom (%.0f%% of the buffers)",
             100 * DT_PLAN_GPU_HEADROOM);
    fprintf(f, "%-50s %10.2f\n", lbl, gib(g->headroom_bytes));
    fprintf(f, "%-50s %10.2f\n", "  total", gib(g->total_bytes));
    fprintf(f, "\n%s: %.2f of %.2f GiB on %s (a model: nothing here is measured on a GPU)\n",
            g->fits ? "fits" : "does not fit", gib(g->total_bytes), gib(g->card.total_bytes),
            g->card.name);
    if (max_batch > 0)
        fprintf(f, "largest data.batch that fits: %lld%s\n", (long long)max_batch,
                max_batch == p->batch ? " (this one)" : "");
    else if (max_batch == 0)
        fprintf(f, "not even data.batch=1 fits: use ZeRO over more workers, LoRA, recompute or "
                   "a larger card\n");
    if (!g->fits && min_workers > 0)
        fprintf(f, "with dist.zero_stage=3 data.batch=%lld fits on %d GPUs of %.2f GiB (-n %d)\n",
                (long long)p->batch, min_workers, gib(g->card.total_bytes), min_workers);
    else if (!g->fits && min_workers == 0)
        fprintf(f,
                "with dist.zero_stage=3 data.batch=%lld fits on no worker count up to %d: what "
                "ZeRO does not shard (activations, a whole frozen base) is too large alone\n",
                (long long)p->batch, DT_PLAN_GPU_MAX_WORKERS);
    /* what the memory figure cannot say: the card cannot run the configuration at all */
    int cc = g->card.cc_major * 10 + g->card.cc_minor;
    if (cc && cc < 80 && g->bf16)
        fprintf(f,
                "note: %s (compute capability %d.%d) has no bf16 arithmetic: train.precision: "
                "bf16 cannot run on it\n",
                g->card.name, g->card.cc_major, g->card.cc_minor);
    if (cc && cc < 90)
        fprintf(f,
                "note: dtrain's CUDA code is built for compute capability 9.0 and newer by "
                "default: for %s build with -DCMAKE_CUDA_ARCHITECTURES=%d\n",
                g->card.name, cc);
    fprintf(f, "host memory (the loader, pinned batch buffers, checkpoint snapshots) is not in "
               "these figures\n");
}
