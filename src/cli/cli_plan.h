/* `dtrain plan` and `dtrain train --help-config` (src/cli/plan.c). Each returns the process exit
 * code: 0 done, 1 failed at run time, 2 usage or config error. */
#ifndef DTRAIN_CLI_PLAN_H
#define DTRAIN_CLI_PLAN_H

/* dtrain plan CONFIG [-n N] [--json] [section.key=value ...]; argv[0] is "plan". */
int dt_cli_plan(int argc, char **argv);
/* Prints every config key, its type, default and meaning to stdout. */
int dt_cli_help_config(void);

#endif
