/* Subcommands of the dtrain CLI. Each returns the process exit code (0 done, 1 failed at run
 * time, 2 usage or config error). */
#ifndef DTRAIN_CLI_H
#define DTRAIN_CLI_H

int dt_cli_ckpt(int argc, char **argv); /* src/cli/ckpt.c: dtrain ckpt ls|verify|show */
int dt_cli_generate(int argc, char **argv);
int dt_cli_lora(int argc, char **argv); /* src/cli/lora.c: dtrain lora merge */
int dt_cli_train(int argc, char **argv);
int dt_cli_launch(int argc, char **argv);
int dt_cli_runs(int argc, char **argv); /* src/cli/runs.c: dtrain runs ls|show|compare|export|rm */
/* src/cli/models.c: dtrain models register|ls|show|diff|alias|export|verify */
int dt_cli_models(int argc, char **argv);

/* src/cli/sweep.c: dtrain sweep SWEEP.yaml | --resume ID | show ID */
int dt_cli_sweep(int argc, char **argv);

int dt_cli_serve(int argc, char **argv); /* src/cli/serve.c: dtrain serve (dashboard, /metrics) */

/* Installs fn for SIGTERM and SIGINT (without SA_RESTART: a blocking wait returns EINTR). */
void dt_cli_on_stop(void (*fn)(int));

#endif
