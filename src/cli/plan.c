/* dtrain plan CONFIG [-n N] [--json] [section.key=value ...]
 *
 * Prints the memory one worker needs for a training step of the configured model, without
 * loading weights: parameters, gradients, optimizer state, frozen weights and activations,
 * after ZeRO sharding over N workers (src/config/plan.c does the arithmetic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli_plan.h"
#include "dtrain/config.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dtrain plan CONFIG [-n N] [--json] [section.key=value ...]\n"
               "  -n N     workers (data-parallel ranks; default 1)\n"
               "  --json   one JSON object with every figure in bytes\n"
               "Prints per-worker memory (GiB) of a training step; no weights are loaded.\n");
}

static int parse_world(const char *s, int *out) {
    char *end;
    long n = strtol(s, &end, 10);
    if (end == s || *end || n < 1 || n > 1000000) return -1;
    *out = (int)n;
    return 0;
}

int dt_cli_plan(int argc, char **argv) {
    const char *path = NULL;
    int world = 1, json = 0, n_over = 0;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    if (!over) {
        fprintf(stderr, "dtrain plan: out of memory\n");
        return 1;
    }
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--workers")) {
            if (i + 1 >= argc || parse_world(argv[++i], &world)) {
                fprintf(stderr, "dtrain plan: %s needs a number of workers >= 1\n", a);
                goto done;
            }
        } else if (!strncmp(a, "-n", 2) && a[2]) {
            if (parse_world(a + 2, &world)) {
                fprintf(stderr, "dtrain plan: bad worker count '%s'\n", a + 2);
                goto done;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "dtrain plan: unknown option '%s'\n", a);
            usage(stderr);
            goto done;
        } else if (strchr(a, '=')) {
            over[n_over++] = argv[i];
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "dtrain plan: '%s' is neither the config nor section.key=value\n", a);
            goto done;
        }
    }
    if (!path) {
        usage(stderr);
        goto done;
    }
    dt_config *cfg;
    if (dt_config_from_args(path, n_over, over, &cfg) != DT_OK) {
        fprintf(stderr, "dtrain plan: %s\n", dt_last_error());
        goto done;
    }
    dt_plan p;
    dt_status st = dt_plan_compute(cfg, world, &p);
    dt_config_free(cfg);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain plan: %s\n", dt_last_error());
        rc = st == DT_ERR_NOMEM || st == DT_ERR_INTERNAL ? 1 : 2;
        goto done;
    }
    dt_plan_print(stdout, &p, json);
    rc = 0;
done:
    free(over);
    return rc;
}

int dt_cli_help_config(void) {
    dt_config_help(stdout);
    return 0;
}
