/* The dtrain command: dispatches to subcommands (src/cli/<name>.c). */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/cli_data.h"
#include "cli/cli_plan.h"
#include "dtrain/dtrain.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dtrain <command> [args]\n"
               "commands:\n"
               "  data        import | inspect | verify datasets (shards + manifest)\n"
               "  plan        per-worker memory of a training config, without weights\n"
               "  generate    text generation with a Llama model (Hugging Face folder)\n"
               "  train       --help-config: every config key (the trainer is in progress)\n"
               "  demo        train a small model on generated data (engine self-demo)\n"
               "  version     print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("dtrain %s\n", dt_version());
        return 0;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "demo")) return dt_cli_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "data")) return dt_cli_data(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return dt_cli_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return dt_cli_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) {
        if (argc > 2 && !strcmp(argv[2], "--help-config")) return dt_cli_help_config();
        fprintf(stderr, "dtrain train: the trainer is not built yet (issue 5); "
                        "`dtrain train --help-config` lists the config keys\n");
        return 2;
    }
    fprintf(stderr, "dtrain: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
