/* `dtrain train CONFIG [section.key=value ...]`: one process (or one rank under mpirun later). */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/cli_plan.h"
#include "dtrain/dtrain.h"
#include "dtrain/trainer.h"

int dt_cli_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: dtrain train CONFIG.yaml [section.key=value ...]\n"
                   "       dtrain train --help-config   (every key, type, default, meaning)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--help-config")) return dt_cli_help_config();
    dt_config *cfg = NULL;
    if (dt_config_from_args(argv[1], argc - 2, argv + 2, &cfg) != DT_OK) {
        fprintf(stderr, "dtrain train: %s\n", dt_last_error());
        return 2;
    }
    dt_trainer *t = NULL;
    dt_status st = dt_trainer_create(cfg, NULL, &t);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain train: %s\n", dt_last_error());
        dt_config_free(cfg);
        /* a model/data/config mismatch is the user's input: found before any work */
        return st == DT_ERR_INVALID ? 2 : 1;
    }
    st = dt_trainer_run(t);
    if (st != DT_OK) fprintf(stderr, "dtrain train: %s\n", dt_last_error());
    dt_trainer_free(t);
    dt_config_free(cfg);
    return st == DT_OK ? 0 : 1;
}
