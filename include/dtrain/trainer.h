/* The trainer: one config -> model, data, optimizer -> a trained, evaluated, exported model.
 *
 *   dt_config *cfg;  dt_config_from_args("run.yaml", n, overrides, &cfg);
 *   dt_trainer *t;   dt_trainer_open(cfg, NULL, &t);     // NULL: the model of the config
 *   dt_trainer_run(t);                                       // loop, eval, export
 *   dt_trainer_close(t);
 *
 * One optimizer step = train.grad_accum micro-batches of data.batch samples: data -> forward ->
 * backward (gradients accumulate in the flat buffer, each micro-batch's loss scaled by
 * 1/grad_accum) -> global-norm clipping -> schedule -> optimizer. Classifiers report loss and
 * top-1 accuracy, language models loss and perplexity.
 *
 * Custom models: pass a dt_model_def; build() declares parameters and ops with the public graph
 * API and returns the logits node ([B, classes] for an image batch x [B, C, H, W] f32, or
 * [B, T, vocab] for token ids x [B, T] i32). The rest (loss, data, optimizer, eval, logging) is
 * the trainer's; exporting writes every parameter by name to model.safetensors. */
#ifndef DTRAIN_TRAINER_H
#define DTRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/config.h"
#include "dtrain/graph.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_model_def {
    const char *name;
    int (*build)(dt_graph *g, int x, void *ud);
    dt_status (*init)(dt_graph *g, uint64_t seed, void *ud); /* NULL: N(0, 0.02), norms 1 */
    void *ud;
} dt_model_def;

typedef struct dt_eval_result {
    double loss;       /* mean over evaluated targets */
    double accuracy;   /* classifiers: top-1 in [0, 1]; language models: next-token top-1 */
    double perplexity; /* language models: exp(loss) */
    int64_t samples;   /* images or target tokens evaluated */
} dt_eval_result;

typedef struct dt_train_progress {
    int64_t step, total_steps, epoch;
    double loss; /* last optimizer step's mean micro-batch loss */
    double lr, grad_norm;
    double samples_per_s; /* over the last log interval */
    double data_wait;     /* share of step time spent waiting for data, last interval */
    double comm_wait;     /* share of step time waiting for the all-reduce, last interval */
    double data_wait_total_s, comm_wait_total_s; /* this attempt so far (seconds) */
    double comm_bytes; /* gradient bytes this worker reduced in the last step (several workers;
                          less than the gradients when embedding rows were sent sparse) */
    double comm_cpu;   /* CPU time of the communication thread (all-reduces, ZeRO gathers) as a
                          share of step time, last interval: the compute it took from this worker
                          where it shares the worker's cores, even when overlap hides the wait */
    double comm_cpu_total_s; /* this attempt so far (seconds) */
    double elapsed_s;
    int preempted; /* dt_trainer_request_stop: a checkpoint was saved and the run stopped */
} dt_train_progress;

typedef struct dt_trainer dt_trainer;

/* Asks a running dt_trainer_run to stop after the current step: it saves a checkpoint (all
 * ranks agree on the step), waits until it is committed and returns with progress.preempted
 * set. Async-signal-safe: call it from a SIGTERM/SIGINT handler (the CLI does; Kubernetes and
 * Slurm send SIGTERM before killing a preempted job). */
void dt_trainer_request_stop(dt_trainer *t);

/* Builds everything and checks that model and data fit (channels, classes, vocabulary) before
 * any work: such errors come back as DT_ERR_INVALID with a one-line message. */
dt_status dt_trainer_open(const dt_config *cfg, const dt_model_def *custom, dt_trainer **out);
/* One optimizer step. */
dt_status dt_trainer_step(dt_trainer *t);
/* Steps until the configured end, evaluating every train.eval_every steps and at the end, then
 * exports the model (output.export) into the run directory. */
dt_status dt_trainer_run(dt_trainer *t);
/* One pass over data.val in eval mode. */
dt_status dt_trainer_evaluate(dt_trainer *t, dt_eval_result *r);
/* Writes the model: ResNet/custom -> DIR/model.safetensors (torchvision names), Llama -> a
 * Hugging Face folder DIR. */
dt_status dt_trainer_export(dt_trainer *t, const char *dir);
/* Exporting a checkpoint without training: its trainer_state.json's config rebuilds the Llama
 * (forward only, no data read), its model.safetensors fills it, and out_dir gets
 *   format "hf"      a Hugging Face folder (a whole model), with the dataset's tokenizer
 *   format "peft"    the PEFT adapter (a LoRA checkpoint)
 *   format "merged"  the base with the adapter folded in (a LoRA checkpoint)
 * (NULL or "": hf for a whole model, peft for LoRA), as dt_trainer_export writes them. base:
 * the model.hf_path to use (NULL: the config's, when it exists from the working directory, else
 * base_hint, e.g. the run's lineage "model.path"); data_hint: data.train (for its tokenizer)
 * when the config's is not found from here.
 * note (may be NULL): a remark for the user, e.g. that no tokenizer could be added. The caller
 * verifies the checkpoint first (dt_ckpt_verify); a ResNet checkpoint is refused (its
 * model.safetensors already is the torchvision state dict). */
typedef struct dt_export_opts {
    const char *format;
    const char *base;
    const char *base_hint, *data_hint;
    char written[8]; /* out: the format written */
} dt_export_opts;
dt_status dt_trainer_export_checkpoint(const char *ckpt_dir, dt_export_opts *o, const char *out_dir,
                                       char *note, size_t note_n);
const dt_train_progress *dt_trainer_progress(const dt_trainer *t);
/* What the run produced, as one JSON object (malloc'd; rank 0, NULL on other ranks): run.json's
 * fields (status "done", "preempted" or "failed" by run_status, steps, losses, eval, datasets,
 * code revision), plus run_dir, run_name, run_id (the experiment store's, when tracking is on),
 * checkpoint {step, url} (the newest this attempt committed) and export (the model's folder).
 * Call it after dt_trainer_run, before dt_trainer_close. */
char *dt_trainer_summary_json(dt_trainer *t, dt_status run_status);
const dt_eval_result *dt_trainer_last_eval(const dt_trainer *t);
/* The run directory (output.dir/experiment/run_name). */
const char *dt_trainer_run_dir(const dt_trainer *t);
/* The run's name: `configured` (output.run_name) when set, else the UTC time as
 * YYYYMMDD-HHMMSS. The trainer and the launcher (include/dtrain/launch.h) both name runs so. */
void dt_trainer_run_name(const char *configured, char *out, size_t n);
dt_graph *dt_trainer_graph(dt_trainer *t);
/* The optimizer (this rank's slice [lo, hi) of the flat buffer under ZeRO): its state through
 * dt_optim_get_state, e.g. to check what a resume restored. */
dt_optim *dt_trainer_optim(dt_trainer *t);
/* Log lines go here (default stdout; NULL: silent). */
void dt_trainer_set_log(dt_trainer *t, FILE *f);
void dt_trainer_close(dt_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
