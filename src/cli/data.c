/* `dtrain data`: import datasets into shards, inspect them, verify their checksums.
 *
 *   dtrain data import KIND SRC... -o DIR [options]
 *   dtrain data inspect DIR
 *   dtrain data verify DIR...
 *
 * DIR may be one split (a directory with manifest.json) or an import's output directory, in
 * which case every split inside it is inspected or verified, or one split in an object store
 * (s3://BUCKET/PREFIX, read as training reads it: every block fetched and checked). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli_data.h"
#include "cli/json_out.h"
#include "core/file.h"
#include "dtrain/data.h"
#include "dtrain/status.h"
#include "dtrain/storage.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: dtrain data import KIND SRC... -o DIR [options]\n"
        "       dtrain data inspect DIR|s3://BUCKET/PREFIX\n"
        "       dtrain data verify DIR|s3://BUCKET/PREFIX...\n"
        "kinds:\n"
        "  fashion-mnist, mnist  SRC is a directory of IDX files (plain or .gz), e.g.\n"
        "                        /usr/share/datasets/fashion-mnist -> DIR/train, DIR/test\n"
        "  cifar10               SRC holds data_batch_{1..5}.bin and test_batch.bin\n"
        "  text                  SRC are text files or directories -> DIR/train\n"
        "  jsonl                 SRC are JSONL files of instruction records: OpenAI\n"
        "                        messages, ShareGPT conversations, Alpaca, prompt/response,\n"
        "                        prompt/completion; the tokenizer's chat template, loss mask\n"
        "                        on assistant turns only\n"
        "  images                SRC is an ImageFolder (SRC/<class>/<image>), a folder with\n"
        "                        train/ and val/ (or test/) ImageFolders, or a list file\n"
        "                        (.csv: path,label lines; .jsonl: {\"path\", \"label\"});\n"
        "                        JPEG, PNG, WebP stored as they are\n"
        "import options:\n"
        "  -o, --output DIR      output directory (must not exist)\n"
        "  --val FRACTION        move this fraction of train into DIR/val (default 0)\n"
        "  --seed N              seed of the val split (default 0)\n"
        "  --tokenizer FILE      text/jsonl: .tiktoken rank file, tokenizer.json or a model\n"
        "                        folder (default $DT_TOKENIZER)\n"
        "  --format F            jsonl: auto (per record), messages, sharegpt, alpaca,\n"
        "                        completion, prompt-response\n"
        "  --template T          jsonl: llama3, llama3.1, chatml, mistral, gemma (default: the\n"
        "                        chat_template of tokenizer_config.json beside the tokenizer)\n"
        "  --system TEXT         jsonl: system prompt of records that have none\n"
        "  --train-on all|last   jsonl: loss on every assistant turn (default) or the last\n"
        "  --strict              jsonl: a malformed record refuses the import (default: it is\n"
        "                        reported with its file and line, and skipped); images: a\n"
        "                        corrupt or unreadable image does (default: listed, skipped)\n"
        "  --doc-sep LINE        text: a line equal to LINE ends a document (fortune files: %%)\n"
        "  --shard-mb N          payload megabytes per shard (default 64)\n"
        "  --max-records N       keep at most N records per source split\n"
        "  --list FILE           images: the list file (instead of SRC)\n"

        "  --max-side N          images: re-encode larger images as JPEG (quality 90) with\n"
        "                        their longer side N\n"
        "  --threads N           images: threads checking images (default: one per core)\n"
        "  -q, --quiet           no progress lines\n"
        "  --json                one JSON object on stdout at the end: output, up_to_date,\n"
        "                        splits (path, name, split, kind, records, classes, bytes,\n"
        "                        tokens, fingerprint), exit_code; the rest goes to stderr\n"
        "exit status: 0 imported (or up to date), 1 failed, 2 bad arguments or input\n");
}

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

static int is_split(const char *dir) {
    char *p = join(dir, DT_MANIFEST_NAME);
    struct stat st;
    int ok = p && stat(p, &st) == 0;
    free(p);
    return ok;
}

/* Splits of DIR (malloc'd paths, at most max): DIR itself if it has a manifest, else its
 * subdirectories that have one, sorted by name. */
static int list_splits(const char *dir, char **out, int max) {
    if (is_split(dir)) {
        out[0] = strdup(dir);
        return out[0] != NULL;
    }
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char *p = join(dir, e->d_name);
        if (p && is_split(p))
            out[n++] = p;
        else
            free(p);
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(out[j], out[j - 1]) < 0; j--) {
            char *t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    return n;
}

static void free_splits(char **s, int n) {
    for (int i = 0; i < n; i++) free(s[i]);
}

/* One split of an import, for --json. */
static void add_split_json(cJSON *arr, const char *path, const dt_dataset_info *in) {
    cJSON *x = cJSON_CreateObject();
    if (!x || !cJSON_AddItemToArray(arr, x)) {
        cJSON_Delete(x);
        return;
    }
    cJSON_AddStringToObject(x, "path", path);
    cJSON_AddStringToObject(x, "name", in->name);
    cJSON_AddStringToObject(x, "split", in->split);
    cJSON_AddStringToObject(x, "kind",
                            in->kind == DT_DATA_TOKENS    ? "tokens"
                            : in->kind == DT_DATA_ENCODED ? "encoded-image"
                                                          : "image");
    cJSON_AddNumberToObject(x, "records", (double)in->records);
    if (in->kind != DT_DATA_TOKENS) cJSON_AddNumberToObject(x, "classes", in->classes);
    if (in->kind == DT_DATA_ENCODED) cJSON_AddNumberToObject(x, "bytes", (double)in->bytes);
    if (in->kind == DT_DATA_TOKENS) cJSON_AddNumberToObject(x, "tokens", (double)in->tokens);
    cJSON_AddStringToObject(x, "fingerprint", in->fingerprint);
}

static int cmd_import(int argc, char **argv) {
    dt_import_options o;
    dt_import_options_default(&o);
    const char *kind = NULL, *out = NULL;
    int want_json = 0;
    const char **srcs = calloc((size_t)argc + 1, sizeof *srcs);
    int ns = 0;
    if (!srcs) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        char *end = NULL;
        if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has) {
            out = argv[++i];
        } else if (!strcmp(a, "--val") && has) {
            o.val_fraction = strtod(argv[++i], &end);
        } else if (!strcmp(a, "--seed") && has) {
            o.seed = strtoull(argv[++i], &end, 10);
        } else if (!strcmp(a, "--tokenizer") && has) {
            o.tokenizer = argv[++i];
        } else if (!strcmp(a, "--format") && has) {
            o.format = argv[++i];
        } else if (!strcmp(a, "--template") && has) {
            o.chat_template = argv[++i];
        } else if (!strcmp(a, "--system") && has) {
            o.system = argv[++i];
        } else if (!strcmp(a, "--train-on") && has) {
            const char *v = argv[++i];
            o.train_last = !strcmp(v, "last");
            if (!o.train_last && strcmp(v, "all")) end = argv[i];
        } else if (!strcmp(a, "--strict")) {
            o.strict = 1;
        } else if (!strcmp(a, "--doc-sep") && has) {
            o.doc_separator = argv[++i];
        } else if (!strcmp(a, "--shard-mb") && has) {
            o.shard_bytes = (int64_t)(strtod(argv[++i], &end) * (1 << 20));
            if (o.shard_bytes <= 0) end = argv[i];
        } else if (!strcmp(a, "--max-records") && has) {
            o.max_records = strtoll(argv[++i], &end, 10);
        } else if (!strcmp(a, "--list") && has) {
            srcs[ns++] = argv[++i];
        } else if (!strcmp(a, "--max-side") && has) {
            long v = strtol(argv[++i], &end, 10);
            if (v < 1 || v > 65535) end = argv[i];
            o.max_side = (int)v;
        } else if (!strcmp(a, "--threads") && has) {
            long v = strtol(argv[++i], &end, 10);
            if (v < 1 || v > 64) end = argv[i];
            o.threads = (int)v;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.quiet = 1;
        } else if (!strcmp(a, "--json")) {
            want_json = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dtrain data import: unknown or incomplete option %s\n", a);
            free(srcs);
            return 2;
        } else if (!kind) {
            kind = a;
        } else {
            srcs[ns++] = a;
        }
        if (end && *end) {
            fprintf(stderr, "dtrain data import: %s: bad value \"%s\"\n", a, argv[i]);
            free(srcs);
            return 2;
        }
    }
    if (!kind || !ns || !out) {
        fprintf(stderr, "dtrain data import: need KIND, SRC and -o DIR\n");
        usage(stderr);
        free(srcs);
        return 2;
    }
    if (want_json && dt_cli_json_begin("data import") != 0) {
        free(srcs);
        return 1;
    }
    /* the same import again changes nothing: say so and succeed (a script may run it twice) */
    int current = dt_data_import_current(kind, srcs, ns, out, &o);
    dt_status st = current ? DT_OK : dt_data_import(kind, srcs, ns, out, &o);
    free(srcs);
    if (current) printf("%s: up to date (the same %s import of the same files)\n", out, kind);
    if (st) {
        char m[2048];
        snprintf(m, sizeof m, "%s", dt_last_error());
        fprintf(stderr, "dtrain data import: %s\n", m);
        return dt_cli_json_end(NULL, st == DT_ERR_INVALID ? 2 : 1, m);
    }
    cJSON *res = cJSON_CreateObject(), *arr = NULL;
    if (res) {
        cJSON_AddStringToObject(res, "output", out);
        cJSON_AddBoolToObject(res, "up_to_date", current);
        arr = cJSON_AddArrayToObject(res, "splits");
    }
    char *splits[8];
    int n = list_splits(out, splits, 8);
    for (int i = 0; i < n; i++) {
        dt_dataset *d;
        if (dt_dataset_open(splits[i], 0, &d)) continue;
        const dt_dataset_info *in = dt_dataset_get_info(d);
        add_split_json(arr, splits[i], in);
        printf("%s: %" PRId64 " %s", splits[i], in->records,
               in->kind == DT_DATA_TOKENS ? "documents" : "images");
        if (in->kind == DT_DATA_ENCODED)
            printf(" (%d classes, %" PRId64 " bytes)", in->classes, in->bytes);
        if (in->kind == DT_DATA_TOKENS) printf(", %" PRId64 " tokens", in->tokens);
        printf(", fingerprint %s\n", in->fingerprint);
        dt_dataset_close(d);
    }
    free_splits(splits, n);
    return dt_cli_json_end(res, 0, NULL);
}

static int is_url(const char *dir) {
    return !strncmp(dir, "s3://", 5);
}

/* The manifest's text (malloc'd, NUL-ended): from the directory, or fetched from an s3:// URL. */
static char *read_manifest(const char *dir) {
    char *b = NULL;
    if (is_url(dir)) {
        dt_store_opts so = dt_store_opts_default();
        dt_store *st;
        void *p = NULL;
        size_t n = 0;
        if (dt_store_open(dir, &so, &st) != DT_OK) return NULL;
        if (dt_store_get(st, DT_MANIFEST_NAME, &p, &n) == DT_OK && (b = malloc(n + 1))) {
            memcpy(b, p, n);
            b[n] = 0;
        }
        free(p);
        dt_store_close(st);
        return b;
    }
    char *p = join(dir, DT_MANIFEST_NAME);
    FILE *f = NULL;
    if (p) dt_file_fopen_regular(p, "rb", &f);
    free(p);
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n)
        b[n] = 0;
    else
        free(b), b = NULL;
    fclose(f);
    return b;
}

static void print_meta(const char *dir) {
    char *b = read_manifest(dir);
    if (b) {
        cJSON *r = cJSON_Parse(b);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "meta");
        for (const cJSON *e = m ? m->child : NULL; e; e = e->next) {
            char *v = cJSON_IsString(e) ? NULL : cJSON_PrintUnformatted(e);
            printf("  %-13s %s\n", e->string, v ? v : e->valuestring);
            free(v);
        }
        cJSON_Delete(r);
    }
    free(b);
}

/* Encoded images: formats, sizes and the labels per class (with the class names). */
static void inspect_encoded(dt_dataset *d, const dt_dataset_info *in) {
    static const char *const fmt_names[4] = {"?", "jpeg", "png", "webp"};
    printf("  %-13s encoded-image (JPEG/PNG/WebP files as stored), %d classes\n", "kind",
           in->classes);
    printf("  %-13s %" PRId64 " (%" PRId64 " bytes, mean %.0f)\n", "images", in->records, in->bytes,
           in->records ? (double)in->bytes / (double)in->records : 0.0);
    int64_t fmts[4] = {0}, counts[256] = {0}, bad = 0;
    int32_t wmin = 0, wmax = 0, hmin = 0, hmax = 0;
    for (int64_t i = 0; i < in->records; i++) {
        const uint8_t *b;
        size_t len;
        int32_t lab, w, h;
        if (dt_dataset_encoded(d, i, &b, &len, &lab, &w, &h) != DT_OK) {
            if (!bad++) fprintf(stderr, "dtrain data inspect: %s\n", dt_last_error());
            continue;
        }
        fmts[b[0] == 0xFF ? 1 : b[0] == 0x89 ? 2 : b[0] == 'R' ? 3 : 0]++;
        if (lab >= 0 && lab < 256) counts[lab]++;
        if (!i || w < wmin) wmin = w;
        if (!i || w > wmax) wmax = w;
        if (!i || h < hmin) hmin = h;
        if (!i || h > hmax) hmax = h;
    }
    printf("  %-13s", "formats");
    for (int f = 1; f < 4; f++) printf(" %s:%" PRId64, fmt_names[f], fmts[f]);
    printf("\n  %-13s width %d-%d, height %d-%d\n", "sizes", wmin, wmax, hmin, hmax);
    if (bad) printf("  %-13s %" PRId64 " images in corrupt blocks\n", "corrupt", bad);
    printf("  %-13s", "labels");
    for (int c = 0; c < (in->classes > 0 && in->classes <= 256 ? in->classes : 0); c++) {
        const char *nm = dt_dataset_class_name(d, c);
        printf(" %d%s%s:%" PRId64, c, nm ? "=" : "", nm ? nm : "", counts[c]);
    }
    printf("\n");
}

static int inspect_one(const char *dir) {
    dt_dataset *d;
    if (dt_dataset_open(dir, 0, &d)) {
        fprintf(stderr, "dtrain data inspect: %s\n", dt_last_error());
        return 1;
    }
    const dt_dataset_info *in = dt_dataset_get_info(d);
    printf("%s\n", dir);
    printf("  %-13s %s%s%s\n", "name", in->name, *in->split ? ", split " : "", in->split);
    printf("  %-13s %s\n", "fingerprint", in->fingerprint);
    if (in->kind == DT_DATA_IMAGE) {
        printf("  %-13s image, %dx%dx%d uint8 HWC, %d classes\n", "kind", in->height, in->width,
               in->channels, in->classes);
        printf("  %-13s %" PRId64 "\n", "images", in->records);
        int64_t counts[256] = {0};
        double sum = 0, sq = 0;
        int64_t hwc = (int64_t)in->height * in->width * in->channels;
        for (int64_t i = 0; i < in->records; i++) {
            int32_t lab;
            const uint8_t *px = dt_dataset_image(d, i, &lab);
            if (lab >= 0 && lab < 256) counts[lab]++;
            for (int64_t k = 0; k < hwc; k++) sum += px[k], sq += (double)px[k] * px[k];
        }
        double n = (double)in->records * (double)hwc;
        if (n > 0) {
            double mean = sum / n, var = sq / n - mean * mean;
            printf("  %-13s mean %.4f, std %.4f (of 0-255), sum %.0f\n", "pixels", mean,
                   var > 0 ? sqrt(var) : 0.0, sum);
        }
        printf("  %-13s", "labels");
        for (int c = 0; c < (in->classes > 0 && in->classes <= 256 ? in->classes : 0); c++)
            printf(" %d:%" PRId64, c, counts[c]);
        printf("\n");
    } else if (in->kind == DT_DATA_ENCODED) {
        inspect_encoded(d, in);
    } else {
        printf("  %-13s tokens, uint32%s, vocabulary %" PRId64 ", eot %d, pad %d\n", "kind",
               in->has_mask ? " + loss mask" : "", in->vocab_size, in->eot_id, in->pad_id);
        int64_t masked = 0, longest = 0;
        for (int64_t i = 0; i < in->records; i++) {
            const uint32_t *t;
            const uint8_t *m;
            int64_t len;
            dt_dataset_doc(d, i, &t, &m, &len);
            if (len > longest) longest = len;
            for (int64_t k = 0; m && k < len; k++) masked += m[k];
        }
        printf("  %-13s %" PRId64 " (mean %.1f tokens, longest %" PRId64 ")\n", "documents",
               in->records, in->records ? (double)in->tokens / (double)in->records : 0.0, longest);
        printf("  %-13s %" PRId64 "\n", "tokens", in->tokens);
        if (in->has_mask)
            printf("  %-13s %" PRId64 " (%.1f%%)\n", "trained on", masked,
                   in->tokens ? 100.0 * (double)masked / (double)in->tokens : 0.0);
        if (in->records) {
            const uint32_t *t;
            const uint8_t *m;
            int64_t len;
            dt_dataset_doc(d, 0, &t, &m, &len);
            printf("  %-13s", "document 0");
            for (int64_t k = 0; k < len && k < 24; k++) printf(" %u", t[k]);
            printf("%s\n", len > 24 ? " ..." : "");
        }
    }
    print_meta(dir);
    printf("  %-13s %d\n", "shards", in->n_shards);
    for (int s = 0; s < dt_dataset_shard_count(d); s++) {
        const char *p = dt_dataset_shard_path(d, s);
        const char *base = strrchr(p, '/');
        printf("    %s  %lld bytes\n", base ? base + 1 : p,
               (long long)dt_dataset_shard_bytes(d, s));
    }
    dt_dataset_close(d);
    return 0;
}

static int verify_one(const char *dir) {
    if (dt_dataset_verify(dir) != DT_OK) {
        fprintf(stderr, "dtrain data verify: FAILED: %s\n", dt_last_error());
        return 1;
    }
    dt_dataset *d;
    if (dt_dataset_open(dir, 0, &d) == DT_OK) {
        const dt_dataset_info *in = dt_dataset_get_info(d);
        printf("%s: OK (%d shards, %" PRId64 " records, fingerprint %s)\n", dir, in->n_shards,
               in->records, in->fingerprint);
        dt_dataset_close(d);
    }
    return 0;
}

/* `dtrain data inspect|verify DIR...`: each DIR is a split or an import root holding splits;
 * `one` runs on every split found. */
static int for_each_split(const char *cmd, int argc, char **argv, int (*one)(const char *)) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (is_url(argv[i])) { /* a split in an object store: opened as training opens it */
            rc |= one(argv[i]);
            continue;
        }
        char *splits[8];
        int n = list_splits(argv[i], splits, 8);
        if (!n) {
            fprintf(stderr,
                    "dtrain data %s: %s: no dataset (no %s here or in its subdirectories)\n", cmd,
                    argv[i], DT_MANIFEST_NAME);
            rc = 1;
        }
        for (int k = 0; k < n; k++) rc |= one(splits[k]);
        free_splits(splits, n);
    }
    return rc;
}

int dt_cli_data(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "import")) return cmd_import(argc - 1, argv + 1);
    if (!strcmp(sub, "inspect")) return for_each_split("inspect", argc - 1, argv + 1, inspect_one);
    if (!strcmp(sub, "verify")) return for_each_split("verify", argc - 1, argv + 1, verify_one);
    fprintf(stderr, "dtrain data: unknown subcommand '%s'\n", sub);
    usage(stderr);
    return 2;
}
