/* The training loop: micro-batches with accumulation, clipping, schedule, optimizer; evaluation;
 * log lines; export. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "dtrain/dtrain.h"
#include "dtrain/gpu_comm.h"
#include "train/train_impl.h"

double dt_train_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t dt_train_feed(dt_trainer *t, const dt_batch *b) {
    int64_t n = b->n;
    int32_t *y = dt_graph_value(t->g, t->y)->data;
    if (t->task == DT_TASK_IMAGE) {
        float *x = dt_graph_value(t->g, t->x)->data;
        size_t per = (size_t)(t->C * t->H * t->W);
        memcpy(x, b->images, (size_t)n * per * sizeof(float));
        memset(x + (size_t)n * per, 0, (size_t)(t->B - n) * per * sizeof(float));
        for (int64_t i = 0; i < t->B; i++) y[i] = i < n ? b->labels[i] : -100;
    } else {
        int32_t *x = dt_graph_value(t->g, t->x)->data;
        int64_t T = t->T;
        memcpy(x, b->inputs, (size_t)(n * T) * sizeof(int32_t));
        memset(x + n * T, 0, (size_t)((t->B - n) * T) * sizeof(int32_t));
        for (int64_t i = 0; i < t->B * T; i++)
            y[i] = (i < n * T && b->loss_mask[i] > 0.0f) ? b->targets[i] : -100;
    }
    return n;
}

dt_status dt_trainer_step(dt_trainer *t) {
    int64_t accum = t->v.train.grad_accum, step = t->prog.step;
    double t0 = dt_train_now(), wait = 0, loss = 0, compute = 0;
    /* ZeRO-2/3 keep no full gradient: every micro-batch is reduce-scattered and added into
     * this rank's shard, and the graph never accumulates. */
    int accumulates = dt_ddp_accumulates(t->ddp);
    dt_graph *G = t->dg ? t->dg : t->g; /* where the step runs (train.device) */
    /* the mean over micro-batches and (make_ddp: summed, not averaged) over workers */
    /* uneven batch shares: this rank's mean weighted by its part of the global batch, so the
     * sum over ranks is the global batch's mean (each sample weighs 1/G) */
    if (t->uneven)
        dt_graph_set_loss_scale(G, (float)((double)t->B / (double)(accum * t->G)));
    else
        dt_graph_set_loss_scale(G, 1.0f / (float)(accum * (t->ddp || t->gc ? t->world : 1)));
    if (t->ddp) dt_ddp_zero_grad(t->ddp);
    dt_comm_set_step(t->comm, step + 1); /* the watchdog's "at step N", as the log numbers it */
    double norm = 0;
    float lr = dt_lr_at(&t->sched, step - t->sched_start);
    int replayed = 0; /* the step ran as the captured CUDA graph (device_capture.c) */
    for (int64_t m = 0; m < accum; m++) {
        dt_batch b;
        double w0 = dt_train_now();
        dt_status st = dt_loader_next(t->train_ld, &b);
        wait += dt_train_now() - w0;
        if (st != DT_OK) return st;
        if (b.n != t->B)
            return dt_error_set(DT_ERR_STATE, "trainer: short training batch (%lld of %lld)",
                                (long long)b.n, (long long)t->B);
        dt_train_feed(t, &b);
        t->prog.epoch = b.epoch;
        /* before a recorded step too: its replay reads the counter set here */
        dt_graph_set_rng(G, (uint64_t)t->v.train.seed, (uint64_t)(step * accum + m), t->rank);
        if (t->dg) {
            double c0 = dt_train_now();
            float l;
            if ((st = dt_train_capture_step(t, lr, &l, &norm, &replayed)) != DT_OK) return st;
            if (replayed) { /* the whole step, update included (grad_accum is 1) */
                compute += dt_train_now() - c0;
                loss += l;
                break;
            }
        }
        if ((st = dt_train_device_feed(t)) != DT_OK) return st;
        dt_graph_set_accumulate(G, m > 0 && accumulates);
        /* Like PyTorch DDP's default: batchnorm statistics are per rank during the step and
         * rank 0's are given to all before each step (broadcast_buffers). Gradients are only
         * all-reduced on the last micro-batch; the others accumulate locally. */
        if (t->ddp && m == 0 && (st = dt_ddp_broadcast_state(t->ddp)) != DT_OK) return st;
        if (t->ddp) dt_ddp_set_enabled(t->ddp, m == accum - 1);
        double c0 = dt_train_now(); /* compute: what dist.batch_shares=auto measures */
        if ((st = dt_graph_forward(G, 1)) != DT_OK || (st = dt_graph_backward(G)) != DT_OK)
            return st;
        dt_train_slow_hook(t, dt_train_now() - c0);
        compute += dt_train_now() - c0;
        if (t->ddp && (st = dt_ddp_wait(t->ddp)) != DT_OK) return st;
        float l;
        if (t->dg && (st = dt_train_device_loss(t, &l)) != DT_OK) return st;
        loss += t->dg ? l : *(const float *)dt_graph_value(t->g, t->loss)->data;
    }
    dt_status st;
    if (replayed) {
        /* clipped and updated inside the graph; norm is its gradient norm */
    } else if (t->dg) {
        if ((st = dt_train_device_update(t, lr, &norm)) != DT_OK) return st;
    } else if (t->ddp) {
        /* This rank's slice: everything, or its ZeRO shard (then all-gathered for stages 1-2;
         * stage 3 gathers parameters when the next forward needs them). */
        size_t lo, hi;
        float *g = dt_ddp_shard(t->ddp, &lo, &hi);
        if ((st = dt_ddp_clip_grad(t->ddp, (float)t->v.optim.clip_norm, &norm)) != DT_OK ||
            (st = dt_optim_step(t->opt, t->p + lo, g, lr)) != DT_OK)
            return st;
        if ((st = dt_ddp_step_end(t->ddp)) != DT_OK) return st;
    } else {
        /* a CPU rank of a staged job: the sum over ranks first (the loss was scaled by 1/world) */
        if (t->gc && (st = dt_train_device_host_allreduce(t)) != DT_OK) return st;
        if (t->v.optim.clip_norm > 0)
            norm = dt_grad_clip_norm(t->gr, t->n, (float)t->v.optim.clip_norm);
        else
            norm = sqrt(dt_grad_sumsq(t->gr, t->n));
        if ((st = dt_optim_step(t->opt, t->p, t->gr, lr)) != DT_OK) return st;
    }
    if (!isfinite(loss))
        return dt_error_set(DT_ERR_STATE,
                            "trainer: loss is %g at step %lld (diverged; lower "
                            "optim.lr or set optim.clip_norm)",
                            loss, (long long)step);
    t->prog.step = step + 1;
    t->prog.loss = loss / (double)accum;
    t->prog.lr = lr;
    t->prog.grad_norm = norm;
    double busy = dt_train_now() - t0;
    t->compute_s = compute;
    t->wait_sum += wait, t->wait_total_s += wait;
    t->step_time_sum += busy, t->step_time_total_s += busy;
    t->samples_since += t->G / t->world * accum; /* this rank's average part: G/world each */
    return DT_OK;
}

static dt_status log_line(dt_trainer *t) {
    /* Every rank reaches the same log steps: the mean loss over ranks costs one tiny collective
     * per log line, not per step. */
    if (t->world > 1) {
        /* uneven shares: weighted by each rank's part, the global batch's mean */
        double l = t->uneven ? t->prog.loss * (double)t->B / (double)t->G : t->prog.loss;
        dt_status st = dt_comm_allreduce_f64(t->comm, &l, 1);
        if (st != DT_OK) return st;
        t->prog.loss = t->uneven ? l : l / t->world;
    }
    double now = dt_train_now(), dt = now - t->t_last;
    /* Exposed communication: time the step waited for gradients after backward (and, under
     * ZeRO-3, for parameters), as a share of step time -- what overlap did not hide. */
    char comm[64] = "";
    if (t->ddp) {
        dt_ddp_stats ds;
        dt_ddp_get_stats(t->ddp, &ds);
        double w = ds.wait_total_s + ds.gather_wait_total_s;
        t->prog.comm_wait = t->step_time_sum > 0 ? (w - t->comm_wait_mark) / t->step_time_sum : 0;
        t->prog.comm_wait_total_s = w;
        t->prog.comm_bytes = (double)ds.sent_bytes;
        snprintf(comm, sizeof comm, "  comm-wait %.1f%%", 100 * t->prog.comm_wait);
        t->comm_wait_mark = w;
        double cpu = ds.comm_cpu_total_s;
        t->prog.comm_cpu = t->step_time_sum > 0 ? (cpu - t->comm_cpu_mark) / t->step_time_sum : 0;
        t->prog.comm_cpu_total_s = cpu;
        t->comm_cpu_mark = cpu;
    } else if (t->gc) { /* GPU ranks: the exchange after backward, all of it exposed */
        double w = dt_gpu_comm_wait_s(t->gc);
        t->prog.comm_wait = t->step_time_sum > 0 ? (w - t->comm_wait_mark) / t->step_time_sum : 0;
        t->prog.comm_wait_total_s = w;
        t->prog.comm_bytes = (double)t->n * sizeof(float);
        snprintf(comm, sizeof comm, "  comm-wait %.1f%%", 100 * t->prog.comm_wait);
        t->comm_wait_mark = w;
    }
    char gpu[96] = "";
    dt_status gs = dt_train_device_ranks(t);
    if (gs == DT_OK) gs = dt_train_device_memory(t, gpu, sizeof gpu);
    if (gs != DT_OK) return gs;
    t->prog.samples_per_s = dt > 0 ? (double)t->samples_since / dt : 0;
    t->prog.data_wait = t->step_time_sum > 0 ? t->wait_sum / t->step_time_sum : 0;
    t->prog.data_wait_total_s = t->wait_total_s;
    t->prog.elapsed_s = now - t->t_start;
    dt_train_progress_clear(t); /* on a terminal the step line takes the progress line's place */
    if (t->log)
        fprintf(t->log,
                "step %6lld/%lld  epoch %lld  loss %.4f  lr %.3g  |g| %.3g  %.0f %s/s  "
                "data-wait %.1f%%%s%s  %.0fs\n",
                (long long)t->prog.step, (long long)t->prog.total_steps,
                (long long)t->prog.epoch + 1, t->prog.loss, t->prog.lr, t->prog.grad_norm,
                t->prog.samples_per_s * t->world * (t->task == DT_TASK_LM ? (double)t->T : 1.0),
                t->task == DT_TASK_LM ? "tok" : "img", 100 * t->prog.data_wait, comm, gpu,
                t->prog.elapsed_s);
    if (t->log) fflush(t->log);
    dt_train_track_log(t);
    t->t_last = now, t->wait_sum = t->step_time_sum = 0, t->samples_since = 0;
    return DT_OK;
}

dt_status dt_trainer_evaluate(dt_trainer *t, dt_eval_result *r) {
    memset(r, 0, sizeof *r);
    if (!t->val_ld) return dt_error_set(DT_ERR_STATE, "evaluate: no data.val configured");
    /* ZeRO-3: whole parameters for evaluation (ranks may evaluate different batch counts, so
     * the per-bucket gathers of a forward could not be matched). */
    dt_status zs = dt_ddp_params_whole(t->ddp);
    if (zs == DT_OK) zs = dt_train_device_pull(t); /* evaluated on the host graph */
    if (zs != DT_OK) return zs;
    dt_data_cursor saved;
    dt_loader_cursor(t->val_ld, &saved); /* every evaluation sees the same pass */
    int64_t nb = dt_loader_batches_per_epoch(t->val_ld), V = t->classes;
    double loss_sum = 0;
    int64_t counted = 0, correct = 0;
    for (int64_t k = 0; k < nb; k++) {
        dt_batch b;
        dt_status st = dt_loader_next(t->val_ld, &b);
        if (st != DT_OK) return st;
        dt_train_feed(t, &b);
        if ((st = dt_graph_forward(t->g, 0)) != DT_OK) return st;
        const int32_t *y = dt_graph_value(t->g, t->y)->data;
        const float *lg = dt_graph_value(t->g, t->logits)->data;
        int64_t rows = t->task == DT_TASK_LM ? t->B * t->T : t->B, valid = 0;
        for (int64_t i = 0; i < rows; i++) {
            if (y[i] < 0) continue;
            valid++;
            const float *row = lg + i * V;
            int64_t best = 0;
            for (int64_t c = 1; c < V; c++)
                if (row[c] > row[best]) best = c;
            correct += best == y[i];
        }
        /* the loss node is the mean over this batch's valid targets */
        loss_sum += (double)*(const float *)dt_graph_value(t->g, t->loss)->data * (double)valid;
        counted += valid;
    }
    dt_loader_seek(t->val_ld, &saved);
    if (t->ddp && (zs = dt_ddp_release_params(t->ddp)) != DT_OK) return zs;
    if (t->world > 1) { /* each rank evaluated its share of data.val */
        double sums[3] = {loss_sum, (double)counted, (double)correct};
        dt_status st = dt_comm_allreduce_f64(t->comm, sums, 3);
        if (st != DT_OK) return st;
        loss_sum = sums[0], counted = (int64_t)sums[1], correct = (int64_t)sums[2];
    }
    r->samples = counted;
    r->loss = counted ? loss_sum / (double)counted : NAN;
    r->accuracy = counted ? (double)correct / (double)counted : 0;
    r->perplexity = exp(r->loss);
    t->eval = *r;
    t->have_eval = 1;
    return DT_OK;
}

static dt_status eval_and_log(dt_trainer *t) {
    dt_eval_result r;
    dt_status st = dt_trainer_evaluate(t, &r);
    if (st != DT_OK) return st;
    dt_train_track_eval(t, &r);
    if (t->log) {
        if (t->task == DT_TASK_LM)
            fprintf(t->log,
                    "eval  step %lld  loss %.4f  perplexity %.2f  top-1 %.2f%%  (%lld tokens)\n",
                    (long long)t->prog.step, r.loss, r.perplexity, 100 * r.accuracy,
                    (long long)r.samples);
        else
            fprintf(t->log, "eval  step %lld  loss %.4f  accuracy %.2f%%  (%lld images)\n",
                    (long long)t->prog.step, r.loss, 100 * r.accuracy, (long long)r.samples);
        fflush(t->log);
    }
    return DT_OK;
}

dt_status dt_trainer_export(dt_trainer *t, const char *dir) {
    char p[4200];
    dt_status ds = dt_train_device_pull(t);
    if (ds != DT_OK) return ds;
    if (t->model == DT_MODEL_LLAMA && t->lc.lora.rank > 0)
        return dt_lora_save(t->g, &t->lc, dir, t->v.model.hf_path);
    if (t->model == DT_MODEL_LLAMA) {
        /* with the tokenizer the data was made with, so `dtrain generate --model DIR` and
         * AutoTokenizer find it beside the weights, as in a Hugging Face folder */
        dt_status st = dt_llama_save_hf(t->g, &t->lc, dir, (size_t)4 << 30);
        int copied = 0; /* 0: the data has no tokenizer to give (docs/data.md) */
        if (st == DT_OK && t->rank == 0 && t->v.data.train[0])
            st = dt_dataset_tokenizer_export(t->v.data.train, dir, &copied);
        return st;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    int64_t batches = t->model == DT_MODEL_RESNET ? t->prog.step * t->v.train.grad_accum : -1;
    return dt_model_save(t->g, p, batches);
}

static dt_status run_loop(dt_trainer *t) {
    const dt_config_values *v = &t->v;
    dt_status st;
    int final_eval = 0;
    /* the peak of the steps apart from the load's (a whole base before it is sharded, the
     * converted copy...): the kernel's peak restarts from the resident set here */
    double rss0;
    dt_train_rss(&rss0, &t->hwm_load_mib);
    t->steps_peak = dt_train_peak_reset();
    while (t->prog.step < t->prog.total_steps) {
        if ((st = dt_trainer_step(t)) != DT_OK || (st = dt_train_shares_after_step(t)) != DT_OK)
            return st;
        if ((t->prog.step % v->train.log_every == 0 || t->prog.step == t->prog.total_steps) &&
            (st = log_line(t)) != DT_OK)
            return st;
        dt_train_progress_step(t);
        if (t->prog.step == t->prog.total_steps) {
            /* Memory between steps: what ZeRO keeps resident (evaluation, the final gather
             * and export come after). */
            double rss, peak, peer = (double)dt_comm_peer_rss() / 1048576.0;
            dt_train_rss(&rss, &peak);
            double steps = peak; /* since the reset before the first step */
            if (t->steps_peak && t->hwm_load_mib > peak) peak = t->hwm_load_mib;
            rss -= peer, peak -= peer,
                steps -= peer; /* the other workers' gradients, mapped here */
            t->rss_step_mib = rss;
            /* shared pages (the mapped base, libraries) divided among the processes using them,
             * summed over the workers of each host: what the host really holds */
            double pss = dt_train_pss_mib(), host_pss = 0;
            int n_host = 1;
            if ((st = dt_train_host_pss(t, pss, &host_pss, &n_host)) != DT_OK) return st;
            if (t->log) {
                fprintf(t->log,
                        "memory per worker: %.0f MiB resident after the last step, peak "
                        "%.0f MiB (%.0f before the model was built)",
                        rss, peak, t->rss_base_mib);
                if (t->steps_peak) /* the gathered weights, transient buffers, evaluations */
                    fprintf(t->log, "; since the first step peak %.0f MiB (+%.0f over the last)",
                            steps, steps - rss);
                if (pss >= 0)
                    fprintf(t->log,
                            "; proportional %.0f MiB (PSS: shared pages counted once), the host's "
                            "%d worker%s %.0f MiB",
                            pss, n_host, n_host == 1 ? "" : "s", host_pss);
                if (peer > 0)
                    fprintf(t->log,
                            "; not counted: %.0f MiB of other workers' gradient buffers mapped "
                            "for the shared-memory all-reduce",
                            peer);
                if (t->have_plan)
                    fprintf(t->log,
                            "; plan %.0f MiB (parameters %.0f, gradients %.0f, optimizer %.0f, "
                            "activations %.0f; ZeRO stage %d)",
                            (double)t->plan.total_bytes / 1048576.0,
                            (double)t->plan.param_bytes / 1048576.0,
                            (double)t->plan.grad_bytes / 1048576.0,
                            (double)t->plan.optim_bytes / 1048576.0,
                            (double)t->plan.activation_bytes / 1048576.0, t->plan.zero_stage);
                fprintf(t->log, "\n");
                size_t kept = 0, whole = 0;
                dt_ddp_frozen_bytes(t->ddp, &kept, &whole);
                dt_ddp_stats ds;
                dt_ddp_get_stats(t->ddp, &ds);
                if (whole && ds.steps) /* lora.shard_base: what the gathers made whole */
                    fprintf(t->log,
                            "frozen base: %.1f MiB gathered per step (over %lld steps, evaluations "
                            "included; the base "
                            "is %.1f MiB)\n",
                            (double)ds.frozen_gathered_bytes / 1048576.0 / (double)ds.steps,
                            (long long)ds.steps, (double)whole / 1048576.0);
            }
        }
        /* evaluation first, so that a checkpoint of the same step (the end's too) records
         * its metrics */
        int last = t->prog.step == t->prog.total_steps;
        if (t->val_ld &&
            (last || (v->train.eval_every && t->prog.step % v->train.eval_every == 0))) {
            if ((st = eval_and_log(t)) != DT_OK) return st;
            final_eval = last;
        }
        /* a checkpoint reads the host's weights and moments: from the device first when one
         * may be written (device_train.c: a step ckpt.every_steps names, every step
         * where checkpoints are timed, the last, on a stop) */
        int stop = t->stop_requested;
        if (dt_train_device_ckpt_may_save(t, last, stop) && (st = dt_train_device_pull(t)) != DT_OK)
            return st;
        if ((st = dt_train_ckpt_after_step(t, stop)) != DT_OK) return st;
        if (t->prog.preempted) return DT_OK; /* saved; no evaluation or export */
    }
    /* a run resumed from its last step trains nothing but is still evaluated */
    if (t->val_ld && !final_eval && (st = eval_and_log(t)) != DT_OK) return st;
    /* ZeRO-3: leave every rank with the whole trained model (export, the caller's reads). */
    if ((st = dt_ddp_params_whole(t->ddp)) != DT_OK) return st;
    return dt_train_device_pull(t); /* the caller's reads of dt_trainer_graph */
}

/* Where the trained model goes: the run directory (ResNet), its model/ (Llama) or adapter/
 * (LoRA). */
static void export_dir(const dt_trainer *t, char *dir, size_t n) {
    snprintf(dir, n, "%s%s", t->run_dir,
             t->model != DT_MODEL_LLAMA ? ""
             : t->lc.lora.rank > 0      ? "/adapter"
                                        : "/model");
}

/* The final or preemption checkpoint failed (rank 0): the weights are still in memory, so they
 * are exported to the run directory, whatever output.export says, and the run's last line says
 * where they went -- or why they could not -- before the checkpoint's error (m, rewritten;
 * the error may be cut at the message limit, the location is not). */
static void export_instead(dt_trainer *t, char *m, size_t n) {
    char why[1024], dir[4200], note[4600];
    snprintf(why, sizeof why, "%.1000s", m);
    export_dir(t, dir, sizeof dir);
    if (dt_ddp_shards_params(t->ddp)) /* rank 0 holds its shard only; gathering needs all */
        snprintf(note, sizeof note,
                 "the weights of step %lld are sharded (ZeRO-3) and were not exported: the "
                 "newest committed checkpoint is what is left",
                 (long long)t->prog.step);
    else if (dt_trainer_export(t, dir) == DT_OK) {
        snprintf(note, sizeof note, "the trained weights (step %lld) were exported to %s instead",
                 (long long)t->prog.step, dir);
        snprintf(t->exported, sizeof t->exported, "%s", dir);
        dt_train_track_export(t, dir);
    } else {
        char e[1024];
        snprintf(e, sizeof e, "%s", dt_last_error());
        snprintf(note, sizeof note, "exporting the weights to %.3000s failed too (%.1000s)", dir,
                 e);
    }
    snprintf(m, n, "%.4600s; %.1024s", note, why);
}

dt_status dt_trainer_run(dt_trainer *t) {
    const dt_config_values *v = &t->v;
    if (t->log) {
        const dt_dataset_info *in = dt_dataset_get_info(t->train_ds);
        fprintf(
            t->log,
            "dtrain train: %s, %zu parameters; %s: %lld %s; %d worker%s (%s%s%s) x batch %lld x "
            "%lld accumulation = effective batch %lld; %lld steps; run %s\n",
            t->model == DT_MODEL_RESNET  ? "resnet"
            : t->model == DT_MODEL_LLAMA ? "llama"
                                         : t->custom.name,
            t->n, in->name, (long long)in->records,
            t->task == DT_TASK_IMAGE ? "images" : "documents", t->world, t->world == 1 ? "" : "s",
            dt_comm_backend(t->comm), dt_ddp_zero_name(t->ddp)[0] ? ", " : "",
            dt_ddp_zero_name(t->ddp), (long long)t->B, (long long)v->train.grad_accum,
            (long long)(t->G * v->train.grad_accum), (long long)t->prog.total_steps, t->run_dir);
        fprintf(t->log, "%s\n", t->device_note);
        if (t->task != DT_TASK_IMAGE) /* the share of token slots that hold real tokens */
            fprintf(t->log,
                    "data.pack=%s: %lld sequences of %lld tokens, packing efficiency %.1f%%%s\n",
                    v->data.pack == DT_CFG_PACK_DOCS ? "docs" : "concat",
                    (long long)dt_loader_dataset_samples(t->train_ld), (long long)t->T,
                    100 * dt_loader_pack_efficiency(t->train_ld),
                    v->data.pack == DT_CFG_PACK_DOCS ? " (the rest padding)"
                                                     : " (windows may span documents)");
        if (t->ddp) fprintf(t->log, "gradient all-reduce: %s\n", dt_ddp_exchange_note(t->ddp));
        if (t->gc) fprintf(t->log, "gpu comm: %s\n", dt_gpu_comm_note(t->gc));
        if (dt_train_base_note(t)[0]) fprintf(t->log, "%s\n", dt_train_base_note(t));
        size_t kept = 0, whole = 0;
        dt_ddp_frozen_bytes(t->ddp, &kept, &whole);
        if (whole) /* lora.shard_base */
            fprintf(t->log,
                    "frozen base: sharded across the %d workers: %.1f MiB kept per worker of "
                    "%.1f MiB, each weight gathered just before use and released after%s\n",
                    t->world, (double)kept / 1048576.0, (double)whole / 1048576.0,
                    dt_ddp_frozen_row_tables(t->ddp)
                        ? " (the embedding: only the rows the workers look up)"
                        : "");
        if (t->uneven) { /* dist.batch_shares: who takes how much of the global batch */
            char parts[512];
            int l = 0;
            for (int r = 0; r < t->world && l < (int)sizeof parts - 24; r++)
                l += snprintf(parts + l, sizeof parts - (size_t)l, r ? ", %lld" : "%lld",
                              (long long)t->parts[r]);
            fprintf(t->log,
                    "batch shares (dist.batch_shares=%s): per-worker batches [%s] of the global "
                    "batch of %lld\n",
                    v->dist.batch_shares, parts, (long long)t->G);
        }
        fflush(t->log);
    }
    dt_status st = DT_OK;
    dt_train_progress_begin(t);
    if (t->rank == 0) st = dt_train_record(t, "running");
    if (st == DT_OK) st = run_loop(t);
    dt_train_progress_end(t);
    int64_t bad = dt_dataset_bad_blocks(t->train_ds);
    if (bad) {
        /* data.on_corrupt=skip: the count of what was left out, on every rank that met it */
        fprintf(
            stderr,
            "dtrain: rank %d skipped the records of %lld corrupt payload block%s of data.train\n",
            t->rank, (long long)bad, bad == 1 ? "" : "s");
        if (t->log)
            fprintf(t->log, "data: skipped the records of %lld corrupt payload block%s\n",
                    (long long)bad, bad == 1 ? "" : "s");
    }
    int64_t fetches = 0, fetched = 0;
    if (dt_dataset_fetched(t->train_ds, &fetches, &fetched) && t->rank == 0)
        printf("data.train: %lld blocks fetched from the store (%lld of them queued ahead; %.1f "
               "MiB; the dataset is %.1f MiB)\n",
               (long long)fetches, (long long)dt_dataset_fetched_ahead(t->train_ds),
               (double)fetched / 1048576.0, (double)dt_dataset_bytes(t->train_ds) / 1048576.0);
    dt_train_ckpt_summary(t);
    if (st != DT_OK) {
        t->failed = 1;
        if (t->rank == 0) {
            char m[5700];
            snprintf(m, sizeof m, "%s", dt_last_error());
            if (dt_train_ckpt_failed(t)) export_instead(t, m, sizeof m);
            dt_train_record(t, "failed");
            dt_train_track_end(t, "failed", m);
            dt_error_set(st, "%s", m);
        }
        return st;
    }
    if (t->rank != 0) return DT_OK; /* rank 0 writes the model and the record */
    if (t->prog.preempted) {
        if (t->log)
            fprintf(t->log, "stopped at step %lld on request (preemption)\n",
                    (long long)t->prog.step);
        dt_train_track_end(t, "preempted", NULL);
        return dt_train_record(t, "preempted");
    }
    if (v->output.export_model) {
        char dir[4200];
        export_dir(t, dir, sizeof dir);
        if ((st = dt_trainer_export(t, dir)) != DT_OK) {
            /* the run failed at its last act: recorded as failed, and the last line says
             * where the trained weights still are */
            char m[5700];
            snprintf(m, sizeof m, "%.3000s", dt_last_error());
            dt_train_ckpt_where(t, m + strlen(m), sizeof m - strlen(m));
            dt_train_record(t, "failed");
            dt_train_track_end(t, "failed", m);
            return dt_error_set(st, "%s", m);
        }
        if (t->log) fprintf(t->log, "model written to %s\n", dir);
        snprintf(t->exported, sizeof t->exported, "%s", dir);
        dt_train_track_export(t, dir);
    }
    dt_train_track_end(t, "done", NULL);
    return dt_train_record(t, "done");
}
