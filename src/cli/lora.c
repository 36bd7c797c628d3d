/* `dtrain lora merge --base HF_DIR --adapter PEFT_DIR -o OUT`: folds a LoRA adapter into its
 * base model (W' = W + alpha/r B A, f32) and writes a Hugging Face folder that transformers and
 * `dtrain generate` load without PEFT. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/json_out.h"
#include "dtrain/dtrain.h"
#include "dtrain/models.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtrain lora merge --base HF_DIR --adapter ADAPTER_DIR -o OUT_DIR "
            "[--threads N]\n"
            "  --base DIR      the base model: config.json + model.safetensors (or shards)\n"
            "  --adapter DIR   a PEFT LoRA adapter: adapter_config.json +\n"
            "                  adapter_model.safetensors (dtrain train writes <run>/adapter)\n"
            "  -o, --output D  the merged model (config.json + f32 model.safetensors, with the\n"
            "                  base's tokenizer files); model files of an existing D are replaced\n"
            "  --threads N     compute threads (default: all cores)\n"
            "  --json          one JSON object on stdout at the end: output, base, adapter, r,\n"
            "                  alpha, seconds, exit_code (status \"done\", or error)\n"
            "exit status: 0 merged, 1 failed (I/O, memory), 2 bad arguments or input\n");
}

static int cmd_merge(int argc, char **argv) {
    const char *base = NULL, *adapter = NULL, *out = NULL;
    int threads = 0, want_json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--base"))
            base = v;
        else if (ARG("--adapter"))
            adapter = v;
        else if (ARG("-o") || ARG("--output"))
            out = v;
        else if (ARG("--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--json"))
            want_json = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout), 0;
        else {
            fprintf(stderr, "dtrain lora merge: unknown or incomplete option '%s'\n", a);
            return 2;
        }
#undef ARG
    }
    if (!base || !adapter || !out) {
        fprintf(stderr, "dtrain lora merge: need --base, --adapter and -o\n");
        return 2;
    }
    if (want_json && dt_cli_json_begin("lora merge") != 0) return 1;
    dt_threads_set(threads);
    dt_llama_config c;
    memset(&c, 0, sizeof c);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dt_status st = dt_lora_merge(base, adapter, out);
    if (st != DT_OK) {
        char m[2048];
        snprintf(m, sizeof m, "%s", dt_last_error());
        fprintf(stderr, "dtrain lora merge: %s\n", m);
        /* a missing or malformed input is the caller's error (2), I/O trouble a failure (1) */
        return dt_cli_json_end(
            NULL, st == DT_ERR_IO || st == DT_ERR_NOMEM || st == DT_ERR_INTERNAL ? 1 : 2, m);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int have = dt_lora_config_load(adapter, &c) == DT_OK;
    if (have)
        printf("merged %s (r=%d, alpha=%g) into %s -> %s in %.1f s\n", adapter, c.lora.rank,
               (double)c.lora.alpha, base, out, secs);
    cJSON *o = dt_cli_json_on() ? cJSON_CreateObject() : NULL;
    if (o) {
        cJSON_AddStringToObject(o, "output", out);
        cJSON_AddStringToObject(o, "base", base);
        cJSON_AddStringToObject(o, "adapter", adapter);
        if (have) cJSON_AddNumberToObject(o, "r", c.lora.rank);
        if (have) cJSON_AddNumberToObject(o, "alpha", (double)c.lora.alpha);
        cJSON_AddNumberToObject(o, "seconds", secs);
    }
    return dt_cli_json_end(o, 0, NULL);
}

int dt_cli_lora(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "merge")) return cmd_merge(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
        return usage(stdout), 0;
    if (argc >= 2)
        fprintf(stderr, "dtrain lora: unknown subcommand '%s' (merge; see dtrain lora --help)\n",
                argv[1]);
    else
        usage(stderr);
    return 2;
}
