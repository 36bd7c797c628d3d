/* `dtrain plan` and `dtrain train --help-config` (src/cli/plan.c). Each returns the process exit
 * code: 0 done, 1 failed at run time, 2 usage or config error. */
#ifndef DTRAIN_CLI_PLAN_H
#define DTRAIN_CLI_PLAN_H

#include "dtrain/config.h"
#include "dtrain/status.h"

/* dtrain plan CONFIG [-n N] [--json] [--compare [--budget-gib G]] [--device D] [--gpu-gib N]
 * [section.key=value ...]; argv[0] is "plan". */
int dt_cli_plan(int argc, char **argv);
/* Prints every config key, its type, default and meaning to stdout. */
int dt_cli_help_config(void);

/* ---- `dtrain plan --compare` ------------------------------------------------------------- */

/* {full finetuning, LoRA} x {recompute off, on} x {ZeRO 0..3}. */
#define DT_PLAN_COMPARE_MAX 16
/* Worker counts searched for a configuration's fewest workers that fit the budget. */
#define DT_PLAN_COMPARE_MAX_WORKERS 1024

/* One compared configuration: the config with lora.enabled, model.recompute and
 * dist.zero_stage overridden (LoRA keeps the config's lora.* settings, or r=16 on
 * q_proj,k_proj,v_proj,o_proj when the config has LoRA off). */
typedef struct dt_plan_variant {
    int lora;        /* 0 full finetuning, 1 LoRA */
    int recompute;   /* model.recompute */
    int zero_stage;  /* dist.zero_stage */
    dt_plan plan;    /* at the compared worker count */
    int fits;        /* plan.total_bytes <= budget */
    int min_workers; /* fewest workers in 1..DT_PLAN_COMPARE_MAX_WORKERS that fit; 0 none */
} dt_plan_variant;

/* Plans every configuration of the comparison for `path` + overrides (the user's; the compared
 * keys are set after them) at `world` workers, in preference order: full finetuning before LoRA,
 * then recompute off before on, then ZeRO stage 0..3. rows holds DT_PLAN_COMPARE_MAX entries;
 * *n_rows gets 16 for Llama, 8 for ResNet (LoRA needs Llama). *chosen gets the index of the first
 * row that fits, -1 when none does. */
dt_status dt_plan_compare(const char *path, int n_over, char *const *over, int world,
                          double budget_gib, dt_plan_variant *rows, int *n_rows, int *chosen);

#endif
