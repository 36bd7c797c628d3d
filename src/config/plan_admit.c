/* Memory admission: the plan (plan.c, the figures of `dtrain plan`) against the memory this
 * worker may use (core/meminfo.h), before the trainer allocates the graph's arena, the flat
 * buffers or the weights. Without it a configuration too large for the host trains until the
 * kernel's OOM killer ends the job with exit 137 and no word from dtrain.
 *
 * The rule: refuse when the plan exceeds what is available, not when plan + a margin does. The
 * check runs after MPI, the libraries and the dataset mapping are loaded, so the process baseline
 * the plan does not model (~100 MiB) is already resident and already out of MemAvailable and in
 * the cgroup's usage; what the plan leaves out beyond that (allocator slack, the loader's
 * batches, oneDNN scratch) is a few percent, measured by tests/train/lora_memory.sh and
 * zero_memory.sh within 15% of the plan. A plan within 10% of the limit gets a warning instead:
 * refusing it would turn away runs that fit, on a plan that already over-estimates small
 * models' activations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config_impl.h"
#include "core/meminfo.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Plan of the variant in w; 1 when it fits `budget` bytes per worker. */
static int variant_fits(const dt_config *w, int world, int64_t budget) {
    dt_plan p;
    int ok = dt_plan_compute(w, world, &p) == DT_OK && p.total_bytes <= budget;
    dt_error_clear();
    return ok;
}

/* "data.batch=N", "model.recompute=true", ... each enough alone; j: bytes written so far.
 * p: c's plan (a ZeRO stage changes only the sharding: resharded, not measured again). */
static size_t suggestions(const dt_config *c, const dt_plan *p, int world, int64_t budget,
                          char *buf, size_t n) {
    dt_config *w = malloc(sizeof *w);
    size_t j = 0;
    int k = 0;
    if (!w) return 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (j < n) j += (size_t)snprintf(buf + j, n - j, "%s", k++ ? ", or " : "");                \
        if (j < n) j += (size_t)snprintf(buf + j, n - j, __VA_ARGS__);                             \
    } while (0)
    /* the largest micro-batch that fits: plans grow with the batch, so bisect */
    *w = *c;
    w->v.data.batch = 1;
    if (c->v.data.batch > 1 && variant_fits(w, world, budget)) {
        int64_t lo = 1, hi = c->v.data.batch; /* lo fits, hi does not */
        while (hi - lo > 1) {
            w->v.data.batch = lo + (hi - lo) / 2;
            if (variant_fits(w, world, budget))
                lo = w->v.data.batch;
            else
                hi = w->v.data.batch;
        }
        ADD("data.batch=%lld (train.grad_accum=%lld keeps about the same batch per step)",
            (long long)lo, (long long)((c->v.data.batch + lo - 1) / lo * c->v.train.grad_accum));
    }
    *w = *c;
    w->v.model.recompute = 1;
    if (!c->v.model.recompute && variant_fits(w, world, budget)) ADD("model.recompute=true");
    for (int z = (int)c->v.dist.zero_stage + 1; world > 1 && z <= 3; z++) {
        *w = *c;
        w->v.dist.zero_stage = z;
        dt_plan pz = *p;
        int ok = dt_plan_reshard(w, world, &pz) == DT_OK && pz.total_bytes <= budget;
        dt_error_clear();
        if (ok) {
            ADD("dist.zero_stage=%d", z);
            break;
        }
    }
    *w = *c;
    w->v.lora.enabled = 1;
    if (c->v.model.kind == DT_CFG_MODEL_LLAMA && !c->v.lora.enabled &&
        variant_fits(w, world, budget))
        ADD("lora.enabled=true");
#undef ADD
    free(w);
    return j;
}

/* What one worker of L on a host needs for plan p: a shared base is held once by the host, whose
 * memory per_worker divides. */
static int64_t worker_need(const dt_plan *p, int L) {
    return (dt_plan_host_bytes(p, L) + L - 1) / L;
}

dt_status dt_plan_admit(const dt_config *c, int world, int local_ranks, char *warn, size_t n) {
    return dt_plan_admit_rebuild(c, NULL, world, local_ranks, warn, n);
}

dt_status dt_plan_admit_rebuild(const dt_config *c, const dt_config *held, int world,
                                int local_ranks, char *warn, size_t n) {
    if (n) warn[0] = '\0';
    if (!c || c->v.train.memory_check == DT_CFG_MEMCHECK_OFF) return DT_OK;
    dt_plan p, ph;
    if (dt_plan_compute(c, world, &p) != DT_OK) { /* what it cannot plan, it cannot judge */
        dt_error_clear();
        return DT_OK;
    }
    dt_mem_avail m;
    dt_mem_available(local_ranks, &m);
    if (m.per_worker < 0) return DT_OK;
    char src[700], share[128] = "", msg[2048];
    dt_mem_source(&m, src, sizeof src);
    if (m.local_ranks > 1)
        snprintf(share, sizeof share, " shared by %d ranks on this host", m.local_ranks);
    int L = m.local_ranks > 1 ? m.local_ranks : 1;
    int64_t need = worker_need(&p, L);
    /* The buffers of `held` are resident now, so they are out of MemAvailable and in the
     * cgroup's usage; they are freed before the new ones are allocated, so they count as
     * available (a plan that cannot be made counts nothing: the stricter check). */
    if (held && dt_plan_compute(held, world, &ph) == DT_OK) {
        int64_t h = worker_need(&ph, L);
        m.per_worker += h;
        size_t l = strlen(share);
        snprintf(share + l, sizeof share - l, ", with %.2f GiB it frees first", h / GIB);
    }
    dt_error_clear();
    int over = need > m.per_worker;
    if (!over && (double)need <= 0.9 * (double)m.per_worker) return DT_OK;
    size_t j = (size_t)snprintf(
        msg, sizeof msg,
        "train.memory_check: the memory plan needs %.2f GiB per worker (%s; `dtrain plan -n %d` "
        "shows it%s), %s %.2f GiB available to this worker (%s%s)",
        need / GIB, p.run_desc, world,
        need < p.total_bytes ? "; the frozen base counted once per host" : "",
        over ? "more than the" : "close to the", m.per_worker / GIB, src, share);
    if (!over) {
        snprintf(msg + j, sizeof msg - j, "; going on, but the kernel may end the run");
        snprintf(warn, n, "%s", msg);
        return DT_OK;
    }
    dt_config *w = malloc(sizeof *w);
    if (w) {
        *w = *c;
        /* a ResNet plan reads the image side from the dataset: once is enough */
        if (p.kind != DT_CFG_MODEL_LLAMA) w->v.data.image_size = p.seq_len;
        char fit[600] = "";
        if (suggestions(w, &p, world, m.per_worker, fit, sizeof fit))
            j += (size_t)snprintf(msg + j, sizeof msg - j, "; it fits with %s", fit);
        else if (j < sizeof msg)
            j += (size_t)snprintf(msg + j, sizeof msg - j,
                                  "; no single key makes it fit: lower data.batch and "
                                  "data.seq_len, or run on more workers or hosts");
        free(w);
    }
    if (j < sizeof msg)
        snprintf(msg + j, sizeof msg - j, "%s",
                 c->v.train.memory_check == DT_CFG_MEMCHECK_WARN
                     ? " (train.memory_check=warn: going on)"
                     : " (train.memory_check=off skips this check)");
    if (c->v.train.memory_check == DT_CFG_MEMCHECK_WARN) {
        snprintf(warn, n, "%s", msg);
        return DT_OK;
    }
    return dt_error_set(DT_ERR_INVALID, "%s", msg); /* the config does not fit: exit 2 */
}
