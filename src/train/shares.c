/* dist.batch_shares=auto: every rank starts with an equal, contiguous part of the global batch
 * (G = data.batch x world), measures its own compute time per sample (forward + backward of its
 * micro-batches: no data wait, no wait for the gradient all-reduce) over the steps
 * (rebalance_step/4, rebalance_step], and after rebalance_step the ranks exchange the rates;
 * rank 0 splits G in proportion to them (dt_config_share_from_rates) and broadcasts the parts,
 * so every rank takes the same decision. Each rank then rebuilds what depends on its batch: the
 * graph (inputs [B, ...], arena), DDP over its gradient buffer, the training loader at its new
 * offset and the validation loader (its batches are B too). Parameters, batchnorm statistics,
 * frozen weights and the optimizer's state do not depend on the batch: the flat buffers are copied
 * into the new graph (the same layout) and the optimizer is kept. The loss weighting is the uneven
 * shares' (b_r / G), so the run stays one process with batch G within fp32 rounding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "train/train_impl.h"

typedef struct dt_train_shares dt_train_shares;
struct dt_train_shares {
    dt_config *cfg;    /* the run's config, to plan the memory of another batch */
    int64_t S;         /* dist.rebalance_step */
    int64_t done_step; /* > 0: the parts were chosen (measured or resumed) at this step */
    double compute_s;  /* measured: forward + backward seconds */
    double samples;    /* and the samples they processed */
    double *rates;     /* every rank's samples/s of compute, after the exchange */
    int have_rates;
};

dt_status dt_train_shares_start(dt_trainer *t, const dt_config *cfg) {
    dt_train_shares *s = t->sh = calloc(1, sizeof *s);
    if (!s || !(t->parts = calloc((size_t)t->world, sizeof *t->parts)) ||
        !(s->rates = calloc((size_t)t->world, sizeof *s->rates)))
        return dt_error_set(DT_ERR_NOMEM, "trainer: out of memory");
    dt_status st = dt_config_clone(cfg, &s->cfg);
    if (st != DT_OK) return st;
    s->S = t->v.dist.rebalance_step;
    /* equal parts as contiguous runs of the global batch (the path uneven parts take), so the
     * switch changes only the sizes and offsets, never the way batches are cut */
    for (int r = 0; r < t->world; r++) t->parts[r] = t->v.data.batch;
    t->B = t->v.data.batch, t->share_off = t->rank * t->B, t->uneven = 1;
    return DT_OK;
}

void dt_train_shares_free(dt_trainer *t) {
    if (!t->sh) return;
    dt_config_free(t->sh->cfg);
    free(t->sh->rates);
    free(t->sh);
    t->sh = NULL;
}

void dt_train_slow_hook(dt_trainer *t, double compute_s) {
    if (t->slow_factor == 0) {
        const char *e = getenv("DT_TEST_SLOW_RANK");
        int r = -1;
        double f = 0;
        t->slow_factor = -1;
        if (e && sscanf(e, "%d:%lf", &r, &f) == 2 && r == t->rank && f > 1 && f < 100)
            t->slow_factor = f;
    }
    if (t->slow_factor <= 1 || compute_s <= 0) return;
    double d = (t->slow_factor - 1) * compute_s;
    struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
    nanosleep(&ts, NULL);
}

static void fmt_parts(const int64_t *p, int n, char *buf, size_t cap) {
    int l = 0;
    buf[0] = '\0';
    for (int r = 0; r < n && l >= 0 && (size_t)l < cap; r++)
        l += snprintf(buf + l, cap - (size_t)l, r ? ", %lld" : "%lld", (long long)p[r]);
}

/* Rebuilds this rank's graph, DDP and training loader for parts[] (every rank at once: DDP's
 * set-up is collective). The data cursor (the next global batch) is carried over. */
static dt_status switch_parts(dt_trainer *t, const int64_t *parts) {
    dt_status st;
    dt_data_cursor cur;
    dt_loader_cursor(t->train_ld, &cur);
    /* ZeRO-3: the whole parameters, to copy (the new DDP shards them again) */
    if ((st = dt_ddp_params_whole(t->ddp)) != DT_OK) return st;
    size_t np = 0, ns = 0, nf = 0;
    const float *p = dt_graph_flat_param(t->g, &np);
    const float *sv = dt_graph_flat_state(t->g, &ns);
    const void *fz = dt_graph_flat_frozen(t->g, &nf);
    /* a shared base is loaded into the new graph again from its mappings, not copied */
    size_t nf_copy = dt_train_base_held(t) ? 0 : nf;
    float *kp = malloc(np * sizeof *kp + 1), *ks = malloc(ns * sizeof *ks + 1);
    void *kf = malloc(nf_copy + 1);
    if (!kp || !ks || !kf) {
        free(kp), free(ks), free(kf);
        return dt_error_set(DT_ERR_NOMEM, "dist.batch_shares=auto: out of memory for the copy of "
                                          "the parameters");
    }
    if (np) memcpy(kp, p, np * sizeof *kp);
    if (ns) memcpy(ks, sv, ns * sizeof *ks);
    if (nf_copy) memcpy(kf, fz, nf_copy);
    /* the old objects go first, so that the peak is one graph plus the copies */
    dt_ddp_close(t->ddp), t->ddp = NULL;
    dt_graph_free(t->g), t->g = NULL;
    dt_loader_close(t->train_ld), t->train_ld = NULL;
    dt_loader_close(t->val_ld), t->val_ld = NULL; /* its batches are t->B too */
    int64_t off = 0;
    for (int r = 0; r < t->world; r++) {
        if (r < t->rank) off += parts[r];
        t->parts[r] = parts[r];
    }
    t->B = parts[t->rank], t->share_off = off;
    st = dt_train_build_graph(t);
    if (st == DT_OK) {
        size_t np2 = 0, ns2 = 0, nf2 = 0;
        float *p2 = dt_graph_flat_param(t->g, &np2), *s2 = dt_graph_flat_state(t->g, &ns2);
        void *f2 = dt_graph_flat_frozen(t->g, &nf2);
        if (np2 != np || ns2 != ns || nf2 != nf)
            st = dt_error_set(DT_ERR_STATE,
                              "dist.batch_shares=auto: the graph for batch %lld has other flat "
                              "buffers (%zu/%zu/%zu elements, before %zu/%zu/%zu)",
                              (long long)t->B, np2, ns2, nf2, np, ns, nf);
        else {
            if (np) memcpy(p2, kp, np * sizeof *kp);
            if (ns) memcpy(s2, ks, ns * sizeof *ks);
            if (nf_copy) memcpy(f2, kf, nf_copy);
            st = dt_train_base_reattach(t);
        }
    }
    free(kp), free(ks), free(kf);
    if (st == DT_OK) st = dt_train_make_ddp(t);
    if (st == DT_OK) {
        t->p = dt_graph_flat_param(t->g, NULL);
        t->gr = dt_graph_flat_grad(t->g, NULL);
        st = dt_train_open_loaders(t);
    }
    if (st == DT_OK) {
        cur.batch_size = t->B;
        st = dt_loader_seek(t->train_ld, &cur);
    }
    /* the new DDP counts its waits from 0 */
    t->comm_wait_mark = t->comm_cpu_mark = 0;
    dt_train_progress_rebase(t);
    if (st == DT_OK) st = dt_train_ckpt_retarget(t);
    return st;
}

/* Memory admission for this rank's new part: every rank plans its own, and all agree. 1: the
 * switch may go ahead; 0: refused (one line said why, the old split stays); < 0: a
 * communication error (*st). */
static int admit(dt_trainer *t, const int64_t *parts, dt_status *st) {
    char b[32];
    /* the config of the graph this rank holds now (its part is data.batch): switch_parts frees
     * that graph before building the new one, so only the growth must fit */
    dt_config *held = NULL;
    if ((*st = dt_config_clone(t->sh->cfg, &held)) != DT_OK) return -1;
    snprintf(b, sizeof b, "%lld", (long long)t->B);
    if ((*st = dt_config_set(held, "data.batch", b)) != DT_OK) {
        dt_config_free(held);
        return -1;
    }
    snprintf(b, sizeof b, "%lld", (long long)parts[t->rank]);
    *st = dt_config_set(t->sh->cfg, "data.batch", b);
    if (*st != DT_OK) {
        dt_config_free(held);
        return -1;
    }
    dt_status a = dt_train_admit_memory(t, t->sh->cfg, held);
    dt_config_free(held);
    if (a == DT_OK) return 1;
    if (a != DT_ERR_INVALID && a != DT_ERR_RANGE) return *st = a, -1;
    char parts_s[512];
    fmt_parts(parts, t->world, parts_s, sizeof parts_s);
    if (t->rank == 0 || a == DT_ERR_INVALID) /* rank 0, and each rank that refused itself */
        fprintf(stderr,
                "dtrain: rank %d: dist.batch_shares=auto: keeping the equal split, the measured "
                "parts [%s] do not fit: %s\n",
                t->rank, parts_s, dt_last_error());
    dt_error_clear();
    *st = DT_OK;
    return 0;
}

dt_status dt_train_shares_after_step(dt_trainer *t) {
    dt_train_shares *s = t->sh;
    if (!s || s->done_step) return DT_OK;
    int64_t k = t->prog.step; /* the step just done, as the log numbers it */
    if (k > s->S / 4 && k <= s->S) {
        s->compute_s += t->compute_s;
        s->samples += (double)(t->B * t->v.train.grad_accum);
    }
    if (k != s->S) return DT_OK;
    s->done_step = k;
    /* every rank's rate: one small all-reduce of a world-sized vector */
    for (int r = 0; r < t->world; r++) s->rates[r] = 0;
    s->rates[t->rank] = s->compute_s > 0 ? s->samples / s->compute_s : 0;
    dt_status st = dt_comm_allreduce_f64(t->comm, s->rates, (size_t)t->world);
    if (st != DT_OK) return st;
    s->have_rates = 1;
    int64_t *parts = malloc((size_t)t->world * sizeof *parts);
    if (!parts) return dt_error_set(DT_ERR_NOMEM, "trainer: out of memory");
    /* rank 0 decides, all take its parts (no rank computes a split of its own) */
    if (t->rank == 0 && dt_config_share_from_rates(t->G, s->rates, t->world, parts) != DT_OK) {
        fprintf(stderr, "dtrain: dist.batch_shares=auto: keeping the equal split: %s\n",
                dt_last_error());
        dt_error_clear();
        memcpy(parts, t->parts, (size_t)t->world * sizeof *parts);
    }
    st = dt_comm_broadcast(t->comm, parts, (size_t)t->world * sizeof *parts, 0);
    int same = 1;
    for (int r = 0; r < t->world; r++) same &= parts[r] == t->parts[r];
    int ok = st == DT_OK && !same ? admit(t, parts, &st) : 0;
    if (st == DT_OK && t->log) {
        char rates[512], ps[512];
        int l = 0;
        rates[0] = '\0';
        for (int r = 0; r < t->world && l >= 0 && (size_t)l < sizeof rates; r++)
            l += snprintf(rates + l, sizeof rates - (size_t)l, r ? ", %.1f" : "%.1f", s->rates[r]);
        fmt_parts(parts, t->world, ps, sizeof ps);
        fprintf(t->log,
                "batch shares (dist.batch_shares=auto, step %lld): compute rates [%s] samples/s "
                "per worker; per-worker batches [%s] of the global batch of %lld%s\n",
                (long long)k, rates, ps, (long long)t->G,
                ok     ? ""
                : same ? " (unchanged)"
                       : " (refused: the old split stays)");
        fflush(t->log);
    }
    if (st == DT_OK && ok) {
        t->parts_auto_step = k; /* what the checkpoints record with the parts */
        st = switch_parts(t, parts);
    }
    free(parts);
    return st;
}

dt_status dt_train_shares_resumed(dt_trainer *t, const dt_ckpt_state *cs) {
    dt_train_shares *s = t->sh;
    if (!s || cs->batch_parts_auto_step <= 0 || cs->n_batch_parts != t->world) return DT_OK;
    s->done_step = cs->batch_parts_auto_step;
    int same = 1;
    for (int r = 0; r < t->world; r++) same &= cs->batch_parts[r] == t->parts[r];
    t->parts_auto_step = cs->batch_parts_auto_step;
    if (t->log) {
        char ps[512];
        fmt_parts(cs->batch_parts, t->world, ps, sizeof ps);
        fprintf(t->log,
                "batch shares (dist.batch_shares=auto): per-worker batches [%s] of the global "
                "batch of %lld, as measured at step %lld (from the checkpoint)\n",
                ps, (long long)t->G, (long long)cs->batch_parts_auto_step);
    }
    return same ? dt_train_ckpt_retarget(t) : switch_parts(t, cs->batch_parts);
}

void dt_train_shares_track(dt_trainer *t, void (*metric)(dt_trainer *, const char *, double)) {
    if (!t->uneven || !t->parts) return;
    char key[64];
    for (int r = 0; r < t->world; r++) {
        snprintf(key, sizeof key, "batch_part.%d", r);
        metric(t, key, (double)t->parts[r]);
        if (t->sh && t->sh->have_rates) {
            snprintf(key, sizeof key, "compute_rate.%d", r);
            metric(t, key, t->sh->rates[r]);
        }
    }
}
