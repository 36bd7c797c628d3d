/* The dtrain command: dispatches to subcommands (src/cli/<name>.c). */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "dtrain/dtrain.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dtrain <command> [args]\n"
               "commands:\n"
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
    fprintf(stderr, "dtrain: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
