/* dtrain plan CONFIG [-n N] [--json] [--compare [--budget-gib G]] [--device D] [--gpu-gib N]
 *              [section.key=value ...]
 *
 * Prints the memory one worker needs for a training step of the configured model, without
 * loading weights: parameters, gradients, optimizer state, frozen weights and activations,
 * after ZeRO sharding over N workers (src/config/plan.c does the arithmetic).
 *
 * --compare plans the config 16 ways (full finetuning or LoRA, recompute off or on, ZeRO stage
 * 0..3) by overriding those keys on fresh copies of the config, and names the first that fits a
 * per-worker budget in a preference order of training cost (see usage()).
 *
 * --device / --gpu-gib (or train.device: cuda in the config) plan the GPU memory of a worker
 * instead (src/config/plan_gpu.c): a model of the device buffers against a card, with the
 * largest data.batch that fits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli_plan.h"
#include "core/meminfo.h"
#include "dtrain/config.h"
#include "dtrain/device.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtrain plan CONFIG [-n N] [--json] [--compare [--budget-gib G]] "
            "[--device D] [--gpu-gib N] [section.key=value ...]\n"
            "  -n N            workers (data-parallel ranks; default 1)\n"
            "  --json          one JSON object with every figure in bytes (with --compare: a\n"
            "                  JSON array, one object per configuration)\n"
            "  --compare       one row per configuration: {full finetuning, LoRA} x {recompute\n"
            "                  off, on} x {ZeRO 0, 1, 2, 3} at N workers, and the first that fits\n"
            "                  the budget in this order of preference:\n"
            "                    1. full finetuning before LoRA (it trains every weight; LoRA\n"
            "                       trades quality for memory),\n"
            "                    2. recompute off before on (recompute runs each layer's\n"
            "                       forward twice, about a third more compute per step),\n"
            "                    3. lower ZeRO stage first (each stage adds communication:\n"
            "                       stage 3 gathers the parameters in every step).\n"
            "                  LoRA uses the config's lora.* settings, or r=16 on\n"
            "                  q_proj,k_proj,v_proj,o_proj when lora.enabled is false; LoRA\n"
            "                  under ZeRO 3 also shards the frozen base (lora.shard_base=auto,\n"
            "                  the default; true: every LoRA row, false: none). When\n"
            "                  nothing fits, names the worker count (up to %d) at which the\n"
            "                  first configuration in that order would fit.\n"
            "  --budget-gib G  memory per worker for --compare, GiB (default 24)\n"
            "  --device D      plan GPU memory per worker (one GPU each) on card D, one of\n"
            "                  %s (cuda: the visible GPU), cuda:N,\n"
            "                  or cpu (the host plan, also when the config has train.device:\n"
            "                  cuda, which otherwise plans the visible GPU); says whether it\n"
            "                  fits and the largest data.batch that does (a model: docs/gpu.md)\n"
            "  --gpu-gib N     the card's memory in GiB (alone: a card of that size)\n"
            "Prints per-worker memory (GiB) of a training step; no weights are loaded.\n",
            DT_PLAN_COMPARE_MAX_WORKERS, dt_gpu_card_names());
}

static int parse_world(const char *s, int *out) {
    char *end;
    long n = strtol(s, &end, 10);
    if (end == s || *end || n < 1 || n > 1000000) return -1;
    *out = (int)n;
    return 0;
}

static int parse_budget(const char *s, double *out) {
    char *end;
    double g = strtod(s, &end);
    if (end == s || *end || !isfinite(g) || g <= 0 || g > 1e9) return -1;
    *out = g;
    return 0;
}

/* ---- --compare --------------------------------------------------------------------------- */

#define GIB (1024.0 * 1024.0 * 1024.0)
#define COMPARE_LORA_DEFAULT_RANK "16"
#define COMPARE_LORA_DEFAULT_TARGETS "q_proj,k_proj,v_proj,o_proj"

static int fits(const dt_plan *p, double budget_gib) {
    return (double)p->total_bytes <= budget_gib * GIB;
}

/* The user's overrides, then the compared keys (so that these win). */
static dt_status variant_config(const char *path, int n_over, char *const *over, int lora,
                                int lora_in_config, int recompute, int zero, dt_config **out) {
    char *args[6];
    char **all = calloc((size_t)n_over + 7, sizeof *all);
    if (!all) return dt_error_set(DT_ERR_NOMEM, "plan --compare: out of memory");
    char zs[32];
    snprintf(zs, sizeof zs, "dist.zero_stage=%d", zero);
    int k = 0;
    args[k++] = lora ? "lora.enabled=true" : "lora.enabled=false";
    args[k++] = recompute ? "model.recompute=true" : "model.recompute=false";
    args[k++] = zs;
    if (lora && !lora_in_config) {
        args[k++] = "lora.rank=" COMPARE_LORA_DEFAULT_RANK;
        args[k++] = "lora.targets=" COMPARE_LORA_DEFAULT_TARGETS;
    }
    /* LoRA rows keep the config's lora.shard_base, so each row is what the trainer would do:
     * auto (the default) shards the frozen base under ZeRO-3 only (FSDP-style) and keeps it
     * whole per worker below (shared within a host as the config says). Full finetuning has
     * no frozen base: auto, whatever the config says (true would be refused without LoRA). */
    if (!lora) args[k++] = "lora.shard_base=auto";
    for (int i = 0; i < n_over; i++) all[i] = over[i];
    for (int i = 0; i < k; i++) all[n_over + i] = args[i];
    dt_status st = dt_config_from_args(path, n_over + k, all, out);
    free(all);
    return st;
}

/* Fewest workers in 1..MAX at which c, planned as p0, fits; 0 when none. The total does not
 * grow with the worker count (ZeRO shards are ceil(n / workers), the rest does not depend on
 * it), so a bisection finds the smallest; the graph is the same at every count (reshard). */
static dt_status min_workers(const dt_config *c, const dt_plan *p0, double budget_gib, int *out) {
    dt_plan p = *p0;
    dt_status st;
    *out = 0;
    if ((st = dt_plan_reshard(c, DT_PLAN_COMPARE_MAX_WORKERS, &p))) return st;
    if (!fits(&p, budget_gib)) return DT_OK;
    int lo = 0, hi = DT_PLAN_COMPARE_MAX_WORKERS; /* lo does not fit (0: none), hi fits */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if ((st = dt_plan_reshard(c, mid, &p))) return st;
        if (fits(&p, budget_gib))
            hi = mid;
        else
            lo = mid;
    }
    *out = hi;
    return DT_OK;
}

dt_status dt_plan_compare(const char *path, int n_over, char *const *over, int world,
                          double budget_gib, dt_plan_variant *rows, int *n_rows, int *chosen) {
    if (!rows || !n_rows || !chosen)
        return dt_error_set(DT_ERR_INVALID, "plan --compare: NULL output");
    if (world < 1)
        return dt_error_set(DT_ERR_INVALID, "plan --compare: %d workers (expected >= 1)", world);
    if (!(budget_gib > 0) || !isfinite(budget_gib))
        return dt_error_set(DT_ERR_INVALID, "plan --compare: budget %g GiB (expected > 0)",
                            budget_gib);
    *n_rows = 0;
    *chosen = -1;
    dt_config *base;
    dt_status st = dt_config_from_args(path, n_over, over, &base);
    if (st) return st;
    const dt_config_values *v = dt_config_get_values(base);
    int llama = v->model.kind == DT_CFG_MODEL_LLAMA, lora_in_config = v->lora.enabled;
    dt_config_free(base);
    int n = 0;
    for (int lora = 0; lora <= llama; lora++)
        for (int rc = 0; rc <= 1; rc++)
            for (int z = 0; z <= 3; z++) {
                dt_plan_variant *r = &rows[n];
                memset(r, 0, sizeof *r);
                r->lora = lora, r->recompute = rc, r->zero_stage = z;
                dt_config *c;
                if ((st = variant_config(path, n_over, over, lora, lora_in_config, rc, z, &c)))
                    return st;
                /* the ZeRO stages of one (lora, recompute) pair share a graph: measure it once */
                if (z == 0) {
                    st = dt_plan_compute(c, world, &r->plan);
                } else {
                    r->plan = rows[n - 1].plan;
                    st = dt_plan_reshard(c, world, &r->plan);
                }
                if (!st) st = min_workers(c, &r->plan, budget_gib, &r->min_workers);
                dt_config_free(c);
                if (st) return st;
                r->fits = fits(&r->plan, budget_gib);
                if (r->fits && *chosen < 0) *chosen = n;
                n++;
            }
    *n_rows = n;
    return DT_OK;
}

static const char *variant_name(const dt_plan_variant *r, char *buf, size_t n) {
    snprintf(buf, n, "%s, recompute %s, ZeRO %d", r->lora ? "LoRA" : "full finetuning",
             r->recompute ? "on" : "off", r->zero_stage);
    return buf;
}

static void compare_json(FILE *f, const dt_plan_variant *rows, int n, int chosen,
                         double budget_gib) {
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++) {
        const dt_plan_variant *r = &rows[i];
        const dt_plan *p = &r->plan;
        char mw[16] = "null";
        if (r->min_workers) snprintf(mw, sizeof mw, "%d", r->min_workers);
        fprintf(f,
                "  {\"finetune\": \"%s\", \"recompute\": %s, \"zero_stage\": %d, \"world\": %d, "
                "\"params_trainable\": %lld, \"params_frozen\": %lld, \"param_bytes\": %lld, "
                "\"grad_bytes\": %lld, \"optim_bytes\": %lld, \"frozen_bytes\": %lld, "
                "\"state_bytes\": %lld, \"activation_bytes\": %lld, \"total_bytes\": %lld, "
                "\"budget_bytes\": %lld, \"fits\": %s, \"min_workers\": %s, \"chosen\": %s}%s\n",
                r->lora ? "lora" : "full", r->recompute ? "true" : "false", r->zero_stage, p->world,
                (long long)p->params_trainable, (long long)p->params_frozen,
                (long long)p->param_bytes, (long long)p->grad_bytes, (long long)p->optim_bytes,
                (long long)p->frozen_bytes, (long long)p->state_bytes,
                (long long)p->activation_bytes, (long long)p->total_bytes,
                (long long)floor(budget_gib * GIB), r->fits ? "true" : "false", mw,
                i == chosen ? "true" : "false", i + 1 < n ? "," : "");
    }
    fprintf(f, "]\n");
}

static void compare_text(FILE *f, const dt_config_values *v, const dt_plan_variant *rows, int n,
                         int chosen, int world, double budget_gib) {
    const dt_plan *p0 = &rows[0].plan;
    char a[40], name[80];
    fprintf(f, "model:  %s\n", p0->model_desc);
    if (p0->kind == DT_CFG_MODEL_LLAMA)
        fprintf(f, "run:    batch %lld x %lld tokens", (long long)p0->batch,
                (long long)p0->seq_len);
    else
        fprintf(f, "run:    batch %lld x %lldx%lld images", (long long)p0->batch,
                (long long)p0->seq_len, (long long)p0->seq_len);
    fprintf(f, ", %s, %s, %d worker%s\n", v->train.precision == DT_CFG_PREC_BF16 ? "bf16" : "fp32",
            v->optim.name == DT_CFG_OPTIM_ADAMW ? "AdamW" : "SGD", world, world > 1 ? "s" : "");
    if (p0->kind != DT_CFG_MODEL_LLAMA) {
        fprintf(f, "LoRA:   left out (LoRA needs model.kind llama)\n");
    } else if (v->lora.enabled) {
        fprintf(f, "LoRA:   r=%lld on ", (long long)v->lora.rank);
        for (int i = 0; i < v->lora.targets.n; i++)
            fprintf(f, "%s%s", i ? "," : "", v->lora.targets.item[i]);
        fprintf(f, " (the config's lora.*)\n");
    } else {
        fprintf(f, "LoRA:   r=" COMPARE_LORA_DEFAULT_RANK " on " COMPARE_LORA_DEFAULT_TARGETS
                   " (lora.enabled is false in the config)\n");
    }
    fprintf(f, "budget: %.2f GiB per worker\n\n", budget_gib);
    fprintf(f, "%-8s %-9s %4s %15s %8s %8s %8s %8s %8s %8s\n", "", "", "", "trainable", "params",
            "grads", "optim", "frozen", "activ.", "total");
    fprintf(f, "%-8s %-9s %4s %15s %8s %8s %8s %8s %8s %8s  %s\n", "finetune", "recompute", "ZeRO",
            "params", "GiB", "GiB", "GiB", "GiB", "GiB", "GiB", "fits");
    int64_t state = 0;
    for (int i = 0; i < n; i++) {
        const dt_plan_variant *r = &rows[i];
        const dt_plan *p = &r->plan;
        state = p->state_bytes > state ? p->state_bytes : state;
        fprintf(f, "%-8s %-9s %4d %15s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f  %s%s\n",
                r->lora ? "LoRA" : "full", r->recompute ? "on" : "off", r->zero_stage,
                dt_plan_group_digits(p->params_trainable, a, sizeof a), p->param_bytes / GIB,
                p->grad_bytes / GIB, p->optim_bytes / GIB, p->frozen_bytes / GIB,
                p->activation_bytes / GIB, p->total_bytes / GIB, r->fits ? "yes" : "no",
                i == chosen ? "  <- chosen" : "");
    }
    if (state) fprintf(f, "(totals include %.2f GiB of batchnorm statistics)\n", state / GIB);
    fprintf(f, "\n");
    if (chosen >= 0) {
        fprintf(f,
                "cheapest configuration that fits %.2f GiB per worker at %d worker%s: %s "
                "(%.2f GiB)\n",
                budget_gib, world, world > 1 ? "s" : "",
                variant_name(&rows[chosen], name, sizeof name),
                rows[chosen].plan.total_bytes / GIB);
        return;
    }
    fprintf(f, "nothing fits %.2f GiB per worker at %d worker%s.\n", budget_gib, world,
            world > 1 ? "s" : "");
    int best = -1, fewest = -1;
    for (int i = 0; i < n; i++) {
        if (!rows[i].min_workers) continue;
        if (best < 0) best = i;
        if (fewest < 0 || rows[i].min_workers < rows[fewest].min_workers) fewest = i;
    }
    if (best >= 0) {
        fprintf(f,
                "suggestion: %s fits at %d workers (-n %d); it is the first in the order of "
                "preference that fits with more workers.\n",
                variant_name(&rows[best], name, sizeof name), rows[best].min_workers,
                rows[best].min_workers);
        if (rows[fewest].min_workers < rows[best].min_workers)
            fprintf(f, "fewest workers: %s fits at %d workers (-n %d).\n",
                    variant_name(&rows[fewest], name, sizeof name), rows[fewest].min_workers,
                    rows[fewest].min_workers);
        return;
    }
    /* Nothing fits even fully sharded: the parts ZeRO does not shard are the floor. */
    int least = 0;
    int64_t floor_b = -1;
    for (int i = 0; i < n; i++) {
        const dt_plan *p = &rows[i].plan;
        int64_t fl = p->frozen_bytes + p->state_bytes + p->activation_bytes;
        /* <=: of equal floors, the later row (higher ZeRO stage) shards the rest best. */
        if (floor_b < 0 || fl <= floor_b) floor_b = fl, least = i;
    }
    fprintf(f,
            "suggestion: no configuration fits at any worker count up to %d: even %s keeps "
            "%.2f GiB per worker that ZeRO does not shard (frozen weights and activations). "
            "Lower data.batch or data.seq_len, or raise --budget-gib.\n",
            DT_PLAN_COMPARE_MAX_WORKERS, variant_name(&rows[least], name, sizeof name),
            floor_b / GIB);
}

static int run_compare(const char *path, int n_over, char **over, int world, double budget_gib,
                       int json) {
    dt_plan_variant rows[DT_PLAN_COMPARE_MAX];
    int n, chosen;
    dt_status st = dt_plan_compare(path, n_over, over, world, budget_gib, rows, &n, &chosen);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain plan --compare: %s\n", dt_last_error());
        return st == DT_ERR_NOMEM || st == DT_ERR_INTERNAL ? 1 : 2;
    }
    if (json) {
        compare_json(stdout, rows, n, chosen, budget_gib);
        return 0;
    }
    dt_config *cfg;
    if (dt_config_from_args(path, n_over, over, &cfg) != DT_OK) {
        fprintf(stderr, "dtrain plan: %s\n", dt_last_error());
        return 2;
    }
    compare_text(stdout, dt_config_get_values(cfg), rows, n, chosen, world, budget_gib);
    dt_config_free(cfg);
    return 0;
}

/* The plan against the machine it is made on (the same figures `dtrain train` admits by): a
 * warning on stderr, the plan itself is still printed and the exit code stays 0. */
static void warn_machine(const dt_plan *p, int world) {
    dt_mem_avail m;
    char src[700];
    if (dt_mem_available(1, &m) != DT_OK || m.per_worker < 0) return;
    dt_mem_source(&m, src, sizeof src);
    if (p->total_bytes > m.per_worker)
        fprintf(stderr,
                "dtrain plan: warning: one worker needs %.2f GiB, more than the %.2f GiB this "
                "machine has available (%s); `dtrain train` refuses it here (train.memory_check)\n",
                p->total_bytes / GIB, m.per_worker / GIB, src);
    else if (world > 1 && (double)dt_plan_host_bytes(p, world) > (double)m.per_worker)
        fprintf(stderr,
                "dtrain plan: warning: %d workers need %.2f GiB together, more than the %.2f GiB "
                "this machine has available (%s): spread them over several hosts\n",
                world, (double)dt_plan_host_bytes(p, world) / GIB, m.per_worker / GIB, src);
}

/* The largest data.batch the GPU batch search tries. */
#define PLAN_GPU_MAX_BATCH 65536

/* The GPU plan of cfg for `device` (NULL: train.device's cuda) and gpu_gib (0: the card's). */
static int run_gpu(const dt_config *cfg, int world, const char *device, double gpu_gib, int json) {
    dt_gpu_card card;
    const char *spec = device        ? device
                       : gpu_gib > 0 ? NULL
                                     : dt_config_get_values(cfg)->train.device;
    dt_status st = dt_gpu_card_get(spec, gpu_gib, &card);
    dt_plan p;
    dt_plan_gpu g;
    int64_t max_batch = -1;
    int min_workers = -1;
    if (st == DT_OK) st = dt_plan_gpu_compute(cfg, world, &card, &p, &g);
    if (st == DT_OK) st = dt_plan_gpu_max_batch(cfg, world, &card, PLAN_GPU_MAX_BATCH, &max_batch);
    if (st == DT_OK)
        st = dt_plan_gpu_min_workers(cfg, &p, &card, DT_PLAN_GPU_MAX_WORKERS, &min_workers);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain plan: %s%s\n", dt_last_error(),
                device || gpu_gib > 0 ? "" : " (train.device in the config)");
        return st == DT_ERR_NOMEM || st == DT_ERR_INTERNAL ? 1 : 2;
    }
    dt_plan_gpu_print(stdout, &p, &g, max_batch, min_workers, json);
    return 0;
}

/* 1 when the config asks for a CUDA device (train.device: cuda or cuda:N; auto plans the CPU,
 * where training runs until the CUDA engine exists). */
static int config_cuda(const dt_config *cfg) {
    dt_device d;
    int is_auto = 0;
    if (dt_device_parse(dt_config_get_values(cfg)->train.device, &d, &is_auto) != DT_OK) {
        dt_error_clear();
        return 0;
    }
    return !is_auto && d.kind == DT_DEVICE_CUDA;
}

int dt_cli_plan(int argc, char **argv) {
    const char *path = NULL, *device = NULL;
    int world = 1, json = 0, n_over = 0, compare = 0, budget_set = 0;
    double budget_gib = 24, gpu_gib = 0;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    if (!over) {
        fprintf(stderr, "dtrain plan: out of memory\n");
        return 1;
    }
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--compare")) {
            compare = 1;
        } else if (!strcmp(a, "--budget-gib") || !strncmp(a, "--budget-gib=", 13)) {
            const char *s = a[12] == '=' ? a + 13 : i + 1 < argc ? argv[++i] : NULL;
            if (!s || parse_budget(s, &budget_gib)) {
                fprintf(stderr, "dtrain plan: --budget-gib needs a size in GiB > 0 (got '%s')\n",
                        s ? s : "");
                goto done;
            }
            budget_set = 1;
        } else if (!strcmp(a, "--gpu-gib") || !strncmp(a, "--gpu-gib=", 10)) {
            const char *s = a[9] == '=' ? a + 10 : i + 1 < argc ? argv[++i] : NULL;
            if (!s || parse_budget(s, &gpu_gib)) {
                fprintf(stderr, "dtrain plan: --gpu-gib needs a size in GiB > 0 (got '%s')\n",
                        s ? s : "");
                goto done;
            }
        } else if (!strcmp(a, "--device") || !strncmp(a, "--device=", 9)) {
            device = a[8] == '=' ? a + 9 : i + 1 < argc ? argv[++i] : NULL;
            if (!device || !device[0]) {
                fprintf(stderr, "dtrain plan: --device needs a GPU (%s, cuda:N) or cpu\n",
                        dt_gpu_card_names());
                goto done;
            }
        } else if (!strcmp(a, "-n") || !strcmp(a, "--workers")) {
            if (i + 1 >= argc || parse_world(argv[++i], &world)) {
                fprintf(stderr, "dtrain plan: %s needs a number of workers >= 1\n", a);
                goto done;
            }
        } else if (!strncmp(a, "-n", 2) && a[2]) {
            if (parse_world(a + 2, &world)) {
                fprintf(stderr, "dtrain plan: bad worker count '%s'\n", a + 2);
                goto done;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "dtrain plan: unknown option '%s'\n", a);
            usage(stderr);
            goto done;
        } else if (strchr(a, '=')) {
            over[n_over++] = argv[i];
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "dtrain plan: '%s' is neither the config nor section.key=value\n", a);
            goto done;
        }
    }
    if (!path) {
        usage(stderr);
        goto done;
    }
    if (budget_set && !compare) {
        fprintf(stderr, "dtrain plan: --budget-gib is used only with --compare\n");
        goto done;
    }
    int cpu = device && !strcmp(device, "cpu");
    if (cpu && gpu_gib > 0) {
        fprintf(stderr, "dtrain plan: --gpu-gib sizes a GPU: it does not go with --device cpu\n");
        goto done;
    }
    if (compare && (gpu_gib > 0 || (device && !cpu))) {
        fprintf(stderr, "dtrain plan: --compare plans host memory only: it does not take "
                        "--device or --gpu-gib yet\n");
        goto done;
    }
    if (compare) {
        rc = run_compare(path, n_over, over, world, budget_gib, json);
        goto done;
    }
    dt_config *cfg;
    if (dt_config_from_args(path, n_over, over, &cfg) != DT_OK) {
        fprintf(stderr, "dtrain plan: %s\n", dt_last_error());
        goto done;
    }
    if (!cpu && (device || gpu_gib > 0 || config_cuda(cfg))) {
        rc = run_gpu(cfg, world, device, gpu_gib, json);
        dt_config_free(cfg);
        goto done;
    }
    dt_plan p;
    dt_status st = dt_plan_compute(cfg, world, &p);
    dt_config_free(cfg);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain plan: %s\n", dt_last_error());
        rc = st == DT_ERR_NOMEM || st == DT_ERR_INTERNAL ? 1 : 2;
        goto done;
    }
    dt_plan_print(stdout, &p, json);
    warn_machine(&p, world);
    rc = 0;
done:
    free(over);
    return rc;
}

int dt_cli_help_config(void) {
    dt_config_help(stdout);
    return 0;
}
