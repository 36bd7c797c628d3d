/* `dtrain generate --model HF_DIR (--prompt TEXT | --ids 1,2,3) [options]`: text generation with
 * a Llama model from a Hugging Face folder, greedy or sampled, with a KV cache. With --adapter
 * the PEFT LoRA adapter is merged into the weights in memory first (dt_lora_merge_graph), so
 * decoding costs what the base's does. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"
#include "dtrain/dtrain.h"
#include "dtrain/generate.h"
#include "dtrain/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtrain generate --model HF_DIR (--prompt TEXT | --ids ID,ID,...) [options]\n"
            "  --adapter DIR      a PEFT LoRA adapter of HF_DIR (dtrain train's <run>/adapter),\n"
            "                     merged into the weights in memory\n"
            "  --tokenizer FILE   tokenizer.json or tiktoken rank file (default: HF_DIR's\n"
            "                     tokenizer.json, then original/tokenizer.model)\n"
            "  --max-new N        new tokens at most (default 64)\n"
            "  --max-seq N        KV-cache length (default: prompt + max-new)\n"
            "  --temperature T    0 = greedy (default 0)\n"
            "  --top-p P  --top-k K  --seed S  --ignore-eos  --threads N\n"
            "  --dump-logits FILE write the prompt's last-position logits (f32 safetensors)\n"
            "Prints the generated text (or ids, with --ids or no tokenizer).\n");
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    while (v && *s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX) break;
        if (k == cap) {
            int32_t *w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!w) break;
            v = w;
        }
        v[k++] = (int32_t)x;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            break;
    }
    if (!v || *s || k == 0) {
        free(v);
        return -1;
    }
    *out = v, *n = k;
    return 0;
}

int dt_cli_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *ids_arg = NULL, *tok_path = NULL, *dump = NULL;
    const char *adapter = NULL;
    int max_new = 64, max_seq = 0, threads = 0;
    dt_sample_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--model"))
            model = v;
        else if (ARG("--prompt"))
            prompt = v;
        else if (ARG("--adapter"))
            adapter = v;
        else if (ARG("--ids"))
            ids_arg = v;
        else if (ARG("--tokenizer"))
            tok_path = v;
        else if (ARG("--max-new"))
            max_new = atoi(v);
        else if (ARG("--max-seq"))
            max_seq = atoi(v);
        else if (ARG("--temperature"))
            o.temperature = strtof(v, NULL);
        else if (ARG("--top-p"))
            o.top_p = strtof(v, NULL);
        else if (ARG("--top-k"))
            o.top_k = atoi(v);
        else if (ARG("--seed"))
            o.seed = strtoull(v, NULL, 10);
        else if (ARG("--threads"))
            threads = atoi(v);
        else if (ARG("--dump-logits"))
            dump = v;
        else if (!strcmp(a, "--ignore-eos"))
            o.ignore_eos = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout), 0;
        else {
            fprintf(stderr, "dtrain generate: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
#undef ARG
    }
    if (!model || (!prompt == !ids_arg) || max_new <= 0 || o.temperature < 0) {
        fprintf(stderr, "dtrain generate: need --model and exactly one of --prompt/--ids "
                        "(max-new > 0, temperature >= 0)\n");
        usage(stderr);
        return 2;
    }
    dt_threads_set(threads);
    char path[4096];
    dt_tokenizer *tok = NULL;
    if (!tok_path) {
        snprintf(path, sizeof path, "%s/tokenizer.json", model);
        if (!exists(path)) snprintf(path, sizeof path, "%s/original/tokenizer.model", model);
        if (exists(path)) tok_path = path;
    }
    if (prompt && !tok_path) {
        fprintf(stderr, "dtrain generate: %s has no tokenizer.json; give --tokenizer or --ids\n",
                model);
        return 2;
    }
    if (tok_path && dt_tokenizer_load(tok_path, &tok) != DT_OK) {
        fprintf(stderr, "dtrain generate: %s\n", dt_last_error());
        return 2;
    }
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    dt_tokens tt = {0};
    if (ids_arg) {
        if (parse_ids(ids_arg, &ids, &n)) {
            fprintf(stderr, "dtrain generate: --ids '%s': expected ids like 1,2,3\n", ids_arg);
            dt_tokenizer_free(tok);
            return 2;
        }
    } else {
        if (dt_tokenizer_encode(tok, prompt, strlen(prompt), DT_TOK_ALLOW_SPECIAL, &tt) != DT_OK) {
            fprintf(stderr, "dtrain generate: prompt: %s\n", dt_last_error());
            dt_tokenizer_free(tok);
            return 2;
        }
        ids = tt.ids, n = (int)tt.n;
    }
    dt_llm *m = NULL;
    dt_graph *merged = NULL; /* with --adapter: holds the weights m borrows */
    int32_t *out = malloc((size_t)max_new * sizeof *out);
    int n_out = 0;
    int cache = max_seq > 0 ? max_seq : n + max_new;
    dt_llama_config mc;
    if (adapter ? dt_lora_merge_graph(model, adapter, &merged, &mc) != DT_OK ||
                      dt_llm_from_graph(merged, &mc, cache, &m) != DT_OK
                : dt_llm_load(model, cache, &m) != DT_OK) {
        fprintf(stderr, "dtrain generate: %s\n", dt_last_error());
        goto done;
    }
    if (dump) { /* for checks against other implementations */
        int64_t V = dt_llm_config(m)->vocab_size;
        float *lg = malloc((size_t)V * sizeof *lg);
        dt_tensor t;
        dt_tensor_init(&t, lg, DT_F32, 1, &V);
        dt_st_entry e = {"logits", &t};
        dt_status st = lg ? dt_llm_logits(m, ids, n, lg) : DT_ERR_NOMEM;
        if (st == DT_OK) st = dt_st_save(dump, &e, 1, NULL, NULL, 0);
        free(lg);
        if (st != DT_OK) {
            fprintf(stderr, "dtrain generate: %s\n", dt_last_error());
            goto done;
        }
    }
    if (dt_llm_generate(m, ids, n, max_new, &o, out, &n_out) != DT_OK) {
        fprintf(stderr, "dtrain generate: %s\n", dt_last_error());
        goto done;
    }
    if (tok && !ids_arg) {
        char *text = NULL;
        size_t len = 0;
        if (dt_tokenizer_decode(tok, out, n_out, &text, &len) != DT_OK) {
            fprintf(stderr, "dtrain generate: decode: %s\n", dt_last_error());
            goto done;
        }
        fwrite(prompt, 1, strlen(prompt), stdout);
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
        free(text);
    } else {
        for (int i = 0; i < n_out; i++) printf(i ? ",%d" : "%d", out[i]);
        printf("\n");
    }
    rc = 0;
done:
    dt_llm_free(m);
    dt_graph_free(merged);
    free(out);
    if (ids_arg) free(ids);
    dt_tokens_free(&tt);
    dt_tokenizer_free(tok);
    return rc;
}
