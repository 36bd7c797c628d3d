/* Internal state of the trainer (src/train/trainer.c builds it, loop.c runs it). */
#ifndef DTRAIN_TRAIN_IMPL_H
#define DTRAIN_TRAIN_IMPL_H

#include "dtrain/device.h"
#include "dtrain/data.h"
#include "dtrain/dist.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/trainer.h"
#include <signal.h>

enum { DT_TASK_IMAGE = 0, DT_TASK_LM = 1 };
enum { DT_MODEL_RESNET = 0, DT_MODEL_LLAMA = 1, DT_MODEL_CUSTOM = 2 };

struct dt_trainer {
    dt_config_values v; /* a copy: the trainer does not depend on the config's lifetime */
    int task, model;
    dt_model_def custom;
    dt_resnet_config rc;
    dt_llama_config lc;
    dt_dataset *train_ds, *val_ds;
    dt_loader *train_ld, *val_ld;
    int64_t B, T, C, H, W, classes; /* classes: image labels or vocabulary */
    /* dist.batch_shares: this rank's B samples are positions [share_off, share_off + B) of each
     * global batch of G (G = data.batch x world); uneven: the parts differ (else every rank's
     * B is data.batch and the loader interleaves, as without shares) */
    int64_t G, share_off;
    int uneven;
    int64_t *parts; /* uneven: every rank's B (world of them), for the log and checkpoints */
    dt_graph *g;
    int x, y, logits, loss;
    dt_comm *comm; /* single process or MPI (dist.backend) */
    dt_ddp *ddp;   /* gradient all-reduce when world > 1 */
    int rank, world;
    dt_device device; /* where this rank trains (train.device, resolved) */
    /* train.device=cuda (src/train/device_train.c): the graph compiled for the device and the
     * optimizer's moments there; g stays the host copy (init, evaluation, checkpoints, export
     * read it after dt_train_device_pull) */
    dt_graph *dg;
    float *dbuf[DT_OPTIM_MAX_BUFFERS];
    double *dwork;          /* DT_CUDA_SUMSQ_WORK doubles: the gradient norm's scratch */
    struct dt_gpu_comm *gc; /* several device ranks: the gradient all-reduce (else NULL) */
    /* Several ranks that exchange gradients the device ranks' way (dt_train_device_agree): one
     * all-reduce of the whole gradient after backward through t->gc, on every rank of a job with
     * a CUDA rank or with dist.gpu_comm=host; its CPU ranks then have t->gc and no dt_ddp, and
     * hstream (a CPU-device stream) for the exchange's calls. mixed: CPU and CUDA ranks both. */
    int staged, mixed;
    dt_stream *hstream;
    /* CUDA device runs: each rank's device memory in use and its peak over the log lines,
     * bytes, [2 * world] (rank r at 2r, 2r + 1), as of the last log line; NULL before */
    double *gpu_mem;
    /* every rank's device, [world]: -1 the CPU, else its CUDA index; gathered at the first log
     * line (NULL before), logged as device.R */
    double *dev_of;
    double gpu_peak; /* this rank's */
    int host_stale;  /* the device's parameters are newer than g's */
    /* train.cuda_graph (device_capture.c): the recorded step, eager steps so far, a failed
     * recording, the one line saying why steps stay eager printed */
    struct dt_capture *cap;
    struct dt_stage *stage; /* eager steps' batch copies (device_stage.c) */
    int64_t cap_eager;
    int cap_failed, cap_noted;
    char device_note[200]; /* the log's device line */
    int failed;            /* a collective may be left unmatched: do not finalise MPI cleanly */
    dt_optim *opt;
    dt_lr_schedule sched;
    int64_t sched_start; /* the schedule's step 0 (> 0 after schedule.on_extend=restart) */
    float *p, *gr;
    size_t n;
    dt_train_progress prog;
    dt_eval_result eval;
    int have_eval;
    char run_dir[4096];
    char exported[4200]; /* rank 0: where the trained model was written ("" : not) */
    FILE *log;
    /* interval statistics for the log line */
    double t_start, t_last, wait_sum, step_time_sum;
    double comm_wait_mark;                /* ddp wait totals at the last log line */
    double comm_cpu_mark;                 /* comm-thread CPU total at the last log line */
    struct dt_train_ckpt *ck;             /* checkpoints (src/train/ckpt.c over src/ckpt/) */
    char *config_yaml;                    /* the resolved config, for trainer_state.json */
    volatile sig_atomic_t stop_requested; /* SIGTERM/SIGINT: save and stop after this step */
    dt_plan plan; /* dtrain plan's per-worker memory, beside the measured one */
    int have_plan;
    double rss_step_mib; /* resident memory right after the last training step */
    double rss_base_mib; /* resident memory before the model was built (libraries, MPI) */
    double hwm_load_mib; /* the peak before the first step (building, loading, sharding) */
    int steps_peak;      /* 1: the kernel's peak was reset before the first step (VmHWM) */
    int64_t samples_since;
    struct dt_train_track *tk; /* rank 0: the experiment store (src/train/track_glue.c) */
    double wait_total_s, step_time_total_s; /* never reset: the progress line's windows */
    struct dt_train_pline *pl;  /* rank 0 on a terminal: the progress line (progress.c) */
    struct dt_train_shares *sh; /* dist.batch_shares=auto: measuring, the re-balance (shares.c) */
    struct dt_train_base *base; /* lora.share_base: the mapped frozen base (hostbase.c) */
    int64_t parts_auto_step;    /* > 0: auto chose t->parts at this step (checkpoints say so) */
    double compute_s;           /* the last step's forward + backward seconds, all micro-batches */
    double slow_factor;         /* DT_TEST_SLOW_RANK's factor for this rank; 0: not read yet */
};

double dt_train_now(void);
/* Start-up pieces src/train/shares.c repeats for a new batch part (src/train/trainer.c): */
dt_status dt_train_build_graph(dt_trainer *t); /* the model's graph for batch t->B, compiled */
dt_status dt_train_build_graph_on(dt_trainer *t, dt_device d, dt_graph **out);
/* train.device=cuda (device_train.c). check: refuses what the device engine does not cover
 * (after the world is known, before anything is built); open: the device graph (after the
 * host graph); upload: the weights and optimizer state to the device (after init and resume);
 * feed: the batch fed into g copied to
 * the device inputs; update: the all-reduce over ranks (t->gc), clipping and the optimizer on the
 * device, *norm the gradient's global norm before clipping; pull: the device's parameters and
 * optimizer moments into g's and the optimizer's host buffers (evaluation, checkpoints, export);
 * no-ops on the CPU. */
dt_status dt_train_device_check(dt_trainer *t);
/* After the communicator (collective: every rank): t->staged and t->mixed from every rank's
 * device and dist.gpu_comm. */
dt_status dt_train_device_agree(dt_trainer *t);
/* A CPU rank of a staged job, after backward: its gradients summed over ranks (t->gc). */
dt_status dt_train_device_host_allreduce(dt_trainer *t);
dt_status dt_train_device_open(dt_trainer *t);
dt_status dt_train_device_upload(dt_trainer *t);
dt_status dt_train_device_feed(dt_trainer *t);
dt_status dt_train_device_loss(dt_trainer *t, float *loss);
/* At a log line (collective: every rank): on a CUDA device run, every rank's device memory in
 * use (total less free: dtrain's buffers, the CUDA context, cuBLASLt's and NCCL's) and its peak
 * over the log lines into t->gpu_mem, and "  gpu-mem 3.1 GiB (peak 3.4)" (rank 0's) into
 * buf[n]; nothing elsewhere. */
dt_status dt_train_device_memory(dt_trainer *t, char *buf, size_t n);
/* At the first log line (collective: every rank): every rank's device into t->dev_of. */
dt_status dt_train_device_ranks(dt_trainer *t);
/* Each rank's device as metric device.R (-1 the CPU, else its CUDA index), and on a CUDA
 * device run the per-rank device memory as metrics gpu_mem.R and gpu_mem_peak.R (bytes). */
void dt_train_device_track(dt_trainer *t, void (*metric)(dt_trainer *, const char *, double));
dt_status dt_train_device_update(dt_trainer *t, float lr, double *norm);
/* Several device ranks, instead of a dt_ddp (after the weights exist): rank 0's weights to all
 * and the gradient all-reduce's setup (dist.gpu_comm); collective. */
dt_status dt_train_device_dist(dt_trainer *t);
dt_status dt_train_device_pull(dt_trainer *t);
/* 1 when the checkpoint step after this one may write (last: the run's last step; stop: a
 * stop was requested), so the
 * device's state must be pulled first; 0 without a device graph. */
int dt_train_device_ckpt_may_save(const dt_trainer *t, int last, int stop);
/* The step as a CUDA graph (device_capture.c), called with the first micro-batch fed into g:
 * *done = 1 when it ran the whole step (recorded first when due) and *loss, *norm are the
 * step's; 0 when the step is to run eagerly (then nothing was issued). */
dt_status dt_train_capture_step(dt_trainer *t, float lr, float *loss, double *norm, int *done);
void dt_train_capture_close(dt_trainer *t);
void dt_train_device_close(dt_trainer *t);
/* The training loader (t->B at t->share_off of each global batch) and the validation loader
 * (batches of t->B, each rank its interleaved 1/world of data.val). */
dt_status dt_train_open_loaders(dt_trainer *t);
dt_status dt_train_make_ddp(dt_trainer *t); /* DDP over t->g; every rank gets rank 0's weights */
/* train.memory_check of cfg on every rank, agreed: one refusal refuses all. held: the config
 * whose buffers this rank holds now and frees before building cfg's (a re-balance), or NULL. */
dt_status dt_train_admit_memory(dt_trainer *t, const dt_config *cfg, const dt_config *held);

/* dist.batch_shares=auto (src/train/shares.c). start (split_batch, world > 1): equal contiguous
 * parts and the measuring state. after_step (run_loop, after each step): adds the step's
 * compute time per sample over steps (rebalance_step/4, rebalance_step]; after rebalance_step
 * the ranks exchange their rates, rank 0 splits the global batch by speed, and every rank
 * rebuilds its graph, DDP and loader for its new part (unless memory admission refuses it).
 * resumed: a checkpoint whose parts auto chose -- switch to them, measure nothing. */
struct dt_ckpt_state;
dt_status dt_train_shares_start(dt_trainer *t, const dt_config *cfg);
dt_status dt_train_shares_after_step(dt_trainer *t);
dt_status dt_train_shares_resumed(dt_trainer *t, const struct dt_ckpt_state *s);
/* Rank 0 at a log line: each rank's part and measured rate as metrics (after the re-balance). */
void dt_train_shares_track(dt_trainer *t, void (*metric)(dt_trainer *, const char *, double));
void dt_train_shares_free(dt_trainer *t);
/* Test hook DT_TEST_SLOW_RANK=R:F: rank R sleeps (F - 1) x the forward + backward time it just
 * took, so that it computes F times slower (tests of dist.batch_shares=auto). */
void dt_train_slow_hook(dt_trainer *t, double compute_s);
/* The checkpoint context's view of the trainer's objects changed (graph, DDP, loader, parts). */
dt_status dt_train_ckpt_retarget(dt_trainer *t);
/* This process's resident memory and its peak, MiB (from /proc/self/status; 0 if unknown). */
void dt_train_rss(double *rss_mib, double *peak_mib);
/* Resets the kernel's peak resident figure (VmHWM) to the current resident set
 * (/proc/self/clear_refs, "5"), so that the next dt_train_rss's peak is the peak since; 1 if
 * done, 0 where the kernel does not allow it (the peak then stays the process's). */
int dt_train_peak_reset(void);
/* The frozen LoRA base once per host (src/train/hostbase.c; lora.share_base): loads the base
 * into t->g, mapping what it can read-only and shared, with the ranks of each host converting
 * the rest once into shared memory (collective when there are several workers on a host);
 * lora.share_base=false: dt_model_load_base. _reattach loads it again into a rebuilt t->g from
 * what is held (no-op without it); _held: whether the base is held (the frozen buffer then need
 * not be copied over a rebuild); _note: the start line's "frozen base: ..." ("" if none); _free
 * after the graph. */
typedef struct dt_train_base dt_train_base;
dt_status dt_train_base_load(dt_trainer *t, const char *path, const char *const *ignore);
dt_status dt_train_base_reattach(dt_trainer *t);
int dt_train_base_held(const dt_trainer *t);
const char *dt_train_base_note(const dt_trainer *t);
void dt_train_base_free(dt_trainer *t);
/* lora.shard_base, after dt_ddp_open copied each worker's shard out of the mappings: they are
 * closed (the graph no longer points into them) and the note says so. No-op without them. */
void dt_train_base_sharded(dt_trainer *t);
/* This process's proportional set size (shared pages divided among their users), MiB, from
 * /proc/self/smaps_rollup (-1 if unknown); and, collective, its sum over the workers of this
 * host (*n_host of them). */
double dt_train_pss_mib(void);
dt_status dt_train_host_pss(dt_trainer *t, double mine, double *host, int *n_host);
/* lora.* of the config -> the builder's LoRA settings (trainer.c; the checkpoint export too). */
dt_status dt_train_lora_config(const dt_config_values *v, dt_lora_config *l);
/* Copies a loader batch into the graph's inputs; pads a short (eval) batch with ignored
 * targets. Returns the number of real samples. */
int64_t dt_train_feed(dt_trainer *t, const dt_batch *b);
/* Writes run.json (status "running", "done" or "failed") into the run directory. */
dt_status dt_train_record(dt_trainer *t, const char *status);

typedef struct dt_train_ckpt dt_train_ckpt;
/* Opens the checkpoint store (ckpt.dir, else output.dir). */
dt_status dt_train_ckpt_open(dt_trainer *t, const char *run_name);
/* ckpt.resume: restores weights, optimizer state, progress and the data cursor; then starts the
 * saver (its writer thread). */
dt_status dt_train_ckpt_resume(dt_trainer *t);
/* After every step: the per-step exchange, commits, saves by policy, preemption. */
/* stop: t->stop_requested as read once before the device's state was pulled for this step (a
 * signal arriving later is the next step's, so no save reads weights older than its step). */
dt_status dt_train_ckpt_after_step(dt_trainer *t, int stop);
/* 1 if this rank's newest save failed (a failed final or preemption save fails the step). */
int dt_train_ckpt_failed(dt_trainer *t);
/* Rank 0: one line on stderr and the log when any save of this run failed. */
void dt_train_ckpt_summary(dt_trainer *t);
/* Rank 0, for a failed export's message: "; the trained weights are in the checkpoint of step N
 * under URL/ROOT" (or that none was committed), into buf[n]. */
void dt_train_ckpt_where(dt_trainer *t, char *buf, size_t n);
/* The newest checkpoint this attempt committed: its step (-1: none) and STORE_URL/KEY_PREFIX
 * into url[n] (from any thread; the writer thread sets it). */
int64_t dt_train_ckpt_last(dt_trainer *t, char *url, size_t n);
void dt_train_ckpt_close(dt_trainer *t);

/* The experiment store (tracking.uri; src/train/track_glue.c). Tracking never stops training:
 * its first error is one warning on stderr and tracking is off for the rest of the run. open is
 * called on every rank (it gathers the host names); the rest do nothing off rank 0. */
void dt_train_track_open(dt_trainer *t, const dt_config *cfg);
void dt_train_track_log(dt_trainer *t);                           /* at each log line */
void dt_train_track_eval(dt_trainer *t, const dt_eval_result *r); /* at each evaluation */
/* A committed checkpoint (the ckpt writer thread): its trainer_state.json gives the metrics. */
struct dt_ckpt_state;
void dt_train_track_ckpt(dt_trainer *t, int64_t step, const char *store_url, const char *dir,
                         const struct dt_ckpt_state *state);
/* A checkpoint retention removed (the ckpt writer thread): marked so in the store. */
void dt_train_track_ckpt_removed(dt_trainer *t, int64_t step, const char *store_url,
                                 const char *dir, const char *why);
void dt_train_track_export(dt_trainer *t, const char *dir); /* the exported model */
void dt_train_track_flush(dt_trainer *t); /* buffered metrics to disk (at a checkpoint) */
struct dt_mlflow;
/* Queues the run's artefacts (run files, exported model, manifest) to its MLflow run
 * (src/train/track_artifacts.c). */
void dt_train_track_artifacts(dt_trainer *t, struct dt_mlflow *ml);
void dt_train_track_end(dt_trainer *t, const char *status, const char *reason);
void dt_train_track_close(dt_trainer *t); /* ends a run left open as failed; closes */
/* The run's id in the experiment store (rank 0; 0: no tracking, or tracking went off). */
int64_t dt_train_track_run_id(const dt_trainer *t);

/* The progress line (train.progress; src/train/progress.c): rank 0, when the log is a terminal
 * (or train.progress=on), redraws one line in place after the steps. While it is on, t->log and
 * stderr go through streams that finish the line with a newline before any other text, so log
 * lines from any thread start at column 0. All are no-ops when it is off. */
typedef struct dt_train_pline dt_train_pline;
void dt_train_progress_begin(dt_trainer *t); /* dt_trainer_run, before the first step */
void dt_train_progress_step(dt_trainer *t);  /* after each step: redraws, at most ~4 times/s */
void dt_train_progress_clear(dt_trainer *t); /* erases the line (the step log line replaces it) */
/* The DDP was rebuilt (dist.batch_shares=auto): its wait totals start again from 0, so the
 * line's window starts again too. */
void dt_train_progress_rebase(dt_trainer *t);
void dt_train_progress_end(dt_trainer *t); /* finishes the line; no more drawing */
/* A committed checkpoint, for the line's "ckpt" field (from any thread). */
void dt_train_progress_ckpt(dt_trainer *t, int64_t step);
/* Puts t->log and stderr back; after the threads that print have been joined. */
void dt_train_progress_free(dt_trainer *t);

#endif
