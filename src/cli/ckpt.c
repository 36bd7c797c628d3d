/* dtrain ckpt ls|verify|show URL
 *
 * Looks at checkpoints on any store -- a path, file://PATH or s3://BUCKET/PREFIX (credentials
 * from the environment, see include/dtrain/storage.h) -- without building a model:
 *
 *   ls     URL of a run's checkpoints directory (or of the run directory, or of one checkpoint):
 *          one line per step-* directory, committed or incomplete, with size and metrics;
 *          --verify also checks every file's size and xxh3
 *   verify URL of one checkpoint directory: exit 0 when every file matches trainer_state.json,
 *          1 with one line naming the file and the problem
 *   show   URL of one checkpoint directory: trainer_state.json's main fields (--json: raw)
 *
 * The store is opened at the parent of the URL's last component(s) and the rest is the key, so
 * the checkpoint functions (src/ckpt/checkpoint.c) see the same relative keys as the trainer.
 * Exit status: 0 good, 1 bad checkpoint or failed I/O, 2 usage error. Errors are one line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"
#include "dtrain/checkpoint.h"
#include "dtrain/storage.h"

enum { EXIT_GOOD = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtrain ckpt ls [--verify] [--json] URL\n"
            "       dtrain ckpt verify URL\n"
            "       dtrain ckpt show [--json] URL\n"
            "URL: a path, file://PATH or s3://BUCKET/PREFIX (S3 settings from AWS_ENDPOINT_URL,\n"
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).\n"
            "  ls       every step-* directory under a run's checkpoints directory (URL may also\n"
            "           be the run directory): step, committed or incomplete, size, loss and\n"
            "           eval_loss; --verify checks every file of the committed ones (exit 1 if\n"
            "           one is bad); --json prints a JSON array\n"
            "  verify   one checkpoint directory (.../checkpoints/step-000001200): every file\n"
            "           listed in trainer_state.json has its size and xxh3; exit 0 when good, 1\n"
            "           with one line naming the bad file\n"
            "  show     one checkpoint's trainer_state.json, readably (--json: as stored)\n");
}

/* A location: the store opened above the URL's last `up` components, which form the key. */
typedef struct loc {
    dt_store *store;
    char url[4096];    /* the argument, without trailing '/' (for messages) */
    char parent[4112]; /* the store's URL: scheme + a path of up to 4095 bytes */
    char key[1024];
} loc;

static int is_step_name(const char *name, int64_t *step) {
    long long s;
    int len = 0;
    if (sscanf(name, "step-%lld%n", &s, &len) != 1 || name[len] || s < 0) return 0;
    if (step) *step = (int64_t)s;
    return 1;
}

static const char *basename_of(const char *key) {
    const char *s = strrchr(key, '/');
    return s ? s + 1 : key;
}

/* Opens the store of `arg`; `up` components (1 or 2) go into the key. Returns an exit code. */
static int open_loc(const char *cmd, const char *arg, int up, loc *L) {
    memset(L, 0, sizeof *L);
    if (strlen(arg) >= sizeof L->url - 8) {
        fprintf(stderr, "dtrain ckpt %s: URL too long\n", cmd);
        return EXIT_USAGE;
    }
    snprintf(L->url, sizeof L->url, "%s", arg);
    size_t l = strlen(L->url);
    while (l > 1 && L->url[l - 1] == '/') L->url[--l] = 0;
    int s3 = !strncmp(L->url, "s3://", 5), file = !strncmp(L->url, "file://", 7);
    if (!s3 && !file && strstr(L->url, "://")) {
        fprintf(stderr, "dtrain ckpt %s: %s: unknown scheme (expected a path, file:// or s3://)\n",
                cmd, arg);
        return EXIT_USAGE;
    }
    char full[4096]; /* the path after the scheme; a local one made absolute and canonical */
    const char *scheme = s3 ? "s3://" : "", *body = L->url + (s3 ? 5 : file ? 7 : 0);
    if (!s3) {
        /* local: resolve ".", ".." and relative paths; and never create a missing directory
         * (opening a POSIX store creates its root) */
        char real[PATH_MAX];
        struct stat sb;
        if (!*body || !realpath(body, real) || stat(real, &sb) != 0) {
            fprintf(stderr, "dtrain ckpt %s: %s: %s\n", cmd, arg,
                    *body ? strerror(errno) : "empty path");
            return EXIT_BAD;
        }
        if (!S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "dtrain ckpt %s: %s: not a directory\n", cmd, arg);
            return EXIT_BAD;
        }
        snprintf(full, sizeof full, "%s", real);
    } else {
        snprintf(full, sizeof full, "%s", body);
    }
    /* split above the last `up` components */
    char *cut = full + strlen(full);
    for (int k = 0; k < up; k++) {
        while (cut > full && cut[-1] != '/') cut--;
        if (cut == full) break;
        if (k + 1 < up) cut--;
    }
    /* s3: the bucket stays in the store URL; local: the path is absolute, "/" at least */
    if (cut == full || !*cut) {
        fprintf(stderr, "dtrain ckpt %s: %s: %s\n", cmd, arg,
                s3 ? "needs a path below the bucket (s3://BUCKET/PREFIX/...)"
                   : "not a checkpoint or checkpoints directory");
        return EXIT_USAGE;
    }
    if (strlen(cut) >= sizeof L->key) {
        fprintf(stderr, "dtrain ckpt %s: %s: path too long\n", cmd, arg);
        return EXIT_USAGE;
    }
    snprintf(L->key, sizeof L->key, "%s", cut);
    cut[-1] = 0;
    snprintf(L->parent, sizeof L->parent, "%s%s", scheme, full[0] ? full : "/");
    dt_status st = dt_store_open(L->parent, NULL, &L->store);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain ckpt %s: %s\n", cmd, dt_last_error());
        return st == DT_ERR_INVALID ? EXIT_USAGE : EXIT_BAD;
    }
    return EXIT_GOOD;
}

/* "9.7 MB": decimal units, as the trainer's log. */
static const char *human(int64_t b, char *buf, size_t n) {
    if (b < 1000)
        snprintf(buf, n, "%" PRId64 " B", b);
    else if (b < 1000000)
        snprintf(buf, n, "%.1f kB", (double)b / 1e3);
    else if (b < 1000000000)
        snprintf(buf, n, "%.1f MB", (double)b / 1e6);
    else
        snprintf(buf, n, "%.2f GB", (double)b / 1e9);
    return buf;
}

/* Checks beyond the checksums: trainer_state.json lists model.safetensors and every optimizer
 * shard its layout names, and its step is the directory's. */
static dt_status check_complete(dt_store *s, const char *dir) {
    dt_ckpt_state cs;
    dt_status st = dt_ckpt_state_load(s, dir, &cs);
    if (st != DT_OK) return st;
    int64_t dstep;
    if (cs.layout_shards < 1) {
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s has no layout.shards", dir,
                          DT_CKPT_STATE);
    } else if (!dt_ckpt_state_file(&cs, DT_CKPT_MODEL)) {
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s does not list %s", dir, DT_CKPT_STATE,
                          DT_CKPT_MODEL);
    } else if (cs.step < 0) {
        st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s has no step", dir, DT_CKPT_STATE);
    } else if (is_step_name(basename_of(dir), &dstep) && dstep != cs.step) {
        st = dt_error_set(DT_ERR_FORMAT,
                          "checkpoint %s: %s is of step %" PRId64
                          ", not of this directory's step %" PRId64,
                          dir, DT_CKPT_STATE, cs.step, dstep);
    } else {
        for (int r = 0; r < cs.layout_shards; r++) {
            char name[64];
            dt_ckpt_optim_name(name, r, cs.layout_shards);
            if (!dt_ckpt_state_file(&cs, name)) {
                st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s does not list %s", dir,
                                  DT_CKPT_STATE, name);
                break;
            }
        }
    }
    dt_ckpt_state_free(&cs);
    return st;
}

/* Full verification of one checkpoint directory (key dir). */
static dt_status verify_dir(dt_store *s, const char *dir, int64_t *bytes) {
    dt_status st = dt_ckpt_verify(s, dir, bytes);
    return st != DT_OK ? st : check_complete(s, dir);
}

/* Whether any object exists under dir/ (tells "no such checkpoint" from "not committed"). */
static int exists_dir(dt_store *s, const char *dir, dt_status *err) {
    char prefix[1100], **keys;
    int n;
    snprintf(prefix, sizeof prefix, "%s/", dir);
    *err = dt_store_list(s, prefix, &keys, &n);
    if (*err != DT_OK) return 0;
    dt_store_list_free(keys, n);
    return n > 0;
}

/* ---- ls ----------------------------------------------------------------------------------- */

static void fmt_metric(double v, char *buf, size_t n) {
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.4f", v);
}

static int cmd_ls(const char *arg, int verify, int json) {
    loc L;
    int rc = open_loc("ls", arg, 1, &L);
    if (rc != EXIT_GOOD) return rc;
    int64_t only = -1; /* URL of one checkpoint: list its root, show that step */
    if (is_step_name(basename_of(L.key), &only)) {
        dt_store_close(L.store);
        if ((rc = open_loc("ls", arg, 2, &L)) != EXIT_GOOD) return rc;
        *strrchr(L.key, '/') = 0;
    }
    dt_ckpt_info *v = NULL;
    int n = 0;
    dt_status st = dt_ckpt_list(L.store, L.key, NULL, &v, &n);
    if (st == DT_OK && n == 0 && only < 0) {
        /* a run directory: its checkpoints/ */
        char sub[sizeof L.key + 16];
        snprintf(sub, sizeof sub, "%s/checkpoints", L.key);
        dt_ckpt_info *w;
        int m;
        if (strlen(sub) < sizeof L.key && dt_ckpt_list(L.store, sub, NULL, &w, &m) == DT_OK) {
            if (m > 0) {
                free(v);
                v = w, n = m;
                memcpy(L.key, sub, strlen(sub) + 1);
            } else {
                free(w);
            }
        }
    }
    if (st != DT_OK) {
        fprintf(stderr, "dtrain ckpt ls: %s\n", dt_last_error());
        dt_store_close(L.store);
        return EXIT_BAD;
    }
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    int bad = 0, shown = 0;
    for (int i = 0; i < n; i++) {
        dt_ckpt_info *c = &v[i];
        if (only >= 0 && c->step != only) continue;
        shown++;
        double loss = NAN, eval_loss = NAN;
        int state_ok = 1;
        if (c->committed) {
            dt_ckpt_state cs;
            state_ok = dt_ckpt_state_load(L.store, c->dir, &cs) == DT_OK;
            loss = dt_ckpt_state_metric(&cs, "loss"),
            eval_loss = dt_ckpt_state_metric(&cs, "eval_loss");
            dt_ckpt_state_free(&cs);
        }
        char msg[1024] = "";
        int good = 0;
        if (verify && c->committed) {
            int64_t b;
            good = verify_dir(L.store, c->dir, &b) == DT_OK;
            if (!good) {
                snprintf(msg, sizeof msg, "%s", dt_last_error());
                bad++;
            }
        }
        if (json) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "step", (double)c->step);
            cJSON_AddStringToObject(e, "dir", basename_of(c->dir));
            cJSON_AddBoolToObject(e, "committed", c->committed);
            cJSON_AddNumberToObject(e, "bytes", (double)c->bytes);
            if (!isnan(loss)) cJSON_AddNumberToObject(e, "loss", loss);
            if (!isnan(eval_loss)) cJSON_AddNumberToObject(e, "eval_loss", eval_loss);
            if (verify && c->committed) {
                cJSON_AddBoolToObject(e, "verified", good);
                if (!good) cJSON_AddStringToObject(e, "error", msg);
            }
            cJSON_AddItemToArray(arr, e);
            continue;
        }
        char size[32], ls[32], es[32];
        fmt_metric(loss, ls, sizeof ls), fmt_metric(eval_loss, es, sizeof es);
        if (!state_ok) snprintf(ls, sizeof ls, "?"), snprintf(es, sizeof es, "?");
        char line[1400];
        int k = snprintf(line, sizeof line, "%-15s %-10s %9s  loss %-8s  eval_loss %s",
                         basename_of(c->dir), c->committed ? "committed" : "incomplete",
                         human(c->bytes, size, sizeof size), ls, es);
        if (verify && k > 0 && (size_t)k < sizeof line)
            snprintf(line + k, sizeof line - (size_t)k, "%*s%s%s", 10 - (int)strlen(es), "",
                     !c->committed ? "-"
                     : good        ? "verified"
                                   : "BAD: ",
                     msg);
        printf("%s\n", line);
    }
    if (json) {
        char *txt = cJSON_Print(arr);
        if (txt) printf("%s\n", txt);
        free(txt);
        cJSON_Delete(arr);
    } else if (!shown) {
        fprintf(stderr, "dtrain ckpt ls: no checkpoints under %s\n", L.url);
    }
    if (bad)
        fprintf(stderr, "dtrain ckpt ls: %d committed checkpoint%s under %s failed verification\n",
                bad, bad > 1 ? "s" : "", L.url);
    free(v);
    dt_store_close(L.store);
    return bad ? EXIT_BAD : EXIT_GOOD;
}

/* ---- verify, show ------------------------------------------------------------------------- */

/* Opens a checkpoint directory; prints the error and returns non-zero if there is none. */
static int open_ckpt(const char *cmd, const char *arg, loc *L) {
    int rc = open_loc(cmd, arg, 1, L);
    if (rc != EXIT_GOOD) return rc;
    dt_status st;
    if (!exists_dir(L->store, L->key, &st)) {
        if (st != DT_OK)
            fprintf(stderr, "dtrain ckpt %s: %s\n", cmd, dt_last_error());
        else
            fprintf(stderr, "dtrain ckpt %s: %s: no such checkpoint directory (empty or missing)\n",
                    cmd, arg);
        dt_store_close(L->store);
        return EXIT_BAD;
    }
    return EXIT_GOOD;
}

static int cmd_verify(const char *arg) {
    loc L;
    int rc = open_ckpt("verify", arg, &L);
    if (rc != EXIT_GOOD) return rc;
    int64_t bytes = 0;
    if (verify_dir(L.store, L.key, &bytes) != DT_OK) {
        fprintf(stderr, "dtrain ckpt verify: %s\n", dt_last_error());
        dt_store_close(L.store);
        return EXIT_BAD;
    }
    dt_ckpt_state cs;
    dt_ckpt_state_load(L.store, L.key, &cs); /* verified just now */
    char size[32];
    printf("ok: %s: step %" PRId64 ", %d files + %s, %s, sizes and xxh3 checksums match\n", L.url,
           cs.step, cs.n_files, DT_CKPT_STATE, human(bytes, size, sizeof size));
    dt_ckpt_state_free(&cs);
    dt_store_close(L.store);
    return EXIT_GOOD;
}

static void print_int(const char *label, int64_t v) {
    if (v >= 0) printf("%-15s %" PRId64 "\n", label, v);
}

static int cmd_show(const char *arg, int json) {
    loc L;
    int rc = open_ckpt("show", arg, &L);
    if (rc != EXIT_GOOD) return rc;
    char *txt;
    if (dt_ckpt_read_state(L.store, L.key, &txt) != DT_OK) {
        fprintf(stderr, "dtrain ckpt show: %s\n", dt_last_error());
        dt_store_close(L.store);
        return EXIT_BAD;
    }
    if (json) {
        size_t n = strlen(txt);
        fwrite(txt, 1, n, stdout);
        if (!n || txt[n - 1] != '\n') putchar('\n');
        free(txt);
        dt_store_close(L.store);
        return EXIT_GOOD;
    }
    char where[4200];
    snprintf(where, sizeof where, "%s/%s", L.url, DT_CKPT_STATE);
    dt_ckpt_state o;
    dt_status st = dt_ckpt_state_decode(txt, where, &o);
    free(txt);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain ckpt show: %s\n", dt_last_error());
        dt_store_close(L.store);
        return EXIT_BAD;
    }
    printf("%-15s %s\n", "checkpoint", L.url);
    printf("%-15s %s\n", "format", o.format ? o.format : "?");
    print_int("step", o.step);
    print_int("optimizer step", o.optimizer_step);
    print_int("epoch", o.epoch);
    print_int("samples seen", o.samples_seen);
    print_int("world size", o.world_size);
    print_int("ZeRO stage", o.zero_stage);
    if (o.layout_n >= 0)
        printf("%-15s %" PRId64 " trainable values in %d tensors, %d optimizer shard(s) of %" PRId64
               "\n",
               "layout", o.layout_n, o.n_params, o.layout_shards, o.layout_shard);
    printf("%-15s %s\n", "data cursor", o.data_cursor ? o.data_cursor : "-");
    if (!isnan(o.sched_lr)) printf("%-15s %.10g\n", "learning rate", o.sched_lr);
    if (o.rng_seed >= 0 || o.rng_counter >= 0)
        printf("%-15s seed %" PRId64 ", counter %" PRId64 "\n", "rng", o.rng_seed, o.rng_counter);
    printf("%-15s", "metrics");
    int nm = 0;
    for (int i = 0; i < o.n_metrics; i++)
        if (!isnan(o.metrics[i].value))
            printf(" %s %.6g", o.metrics[i].name, o.metrics[i].value), nm++;
    printf("%s\n", nm ? "" : " -");
    printf("%-15s %s (dtrain %s)\n", "code version", o.code_version ? o.code_version : "?",
           o.dtrain_version ? o.dtrain_version : "?");
    if (o.config) {
        int lines = 0;
        for (const char *c = o.config; *c; c++) lines += *c == '\n';
        printf("%-15s %d lines of resolved YAML (--json shows it)\n", "config", lines);
    }
    printf("files\n");
    int64_t total = 0;
    for (int i = 0; i < o.n_files; i++) {
        printf("  %-40s %14" PRId64 " bytes  xxh3 %016" PRIx64 "\n", o.files[i].name,
               o.files[i].bytes, o.files[i].xxh3);
        total += o.files[i].bytes;
    }
    char size[32];
    printf("  %-40s %14" PRId64 " bytes  (%s, without %s)\n", "total", total,
           human(total, size, sizeof size), DT_CKPT_STATE);
    dt_ckpt_state_free(&o);
    dt_store_close(L.store);
    return EXIT_GOOD;
}

int dt_cli_ckpt(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "dtrain ckpt: missing subcommand (ls, verify or show; --help)\n");
        return EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        usage(stdout);
        return EXIT_GOOD;
    }
    int is_ls = !strcmp(sub, "ls"), is_verify = !strcmp(sub, "verify"),
        is_show = !strcmp(sub, "show");
    if (!is_ls && !is_verify && !is_show) {
        fprintf(stderr, "dtrain ckpt: unknown subcommand '%s' (ls, verify or show; --help)\n", sub);
        return EXIT_USAGE;
    }
    const char *url = NULL;
    int verify = 0, json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return EXIT_GOOD;
        } else if (is_ls && !strcmp(a, "--verify")) {
            verify = 1;
        } else if ((is_ls || is_show) && !strcmp(a, "--json")) {
            json = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dtrain ckpt %s: unknown option '%s' (--help)\n", sub, a);
            return EXIT_USAGE;
        } else if (url) {
            fprintf(stderr, "dtrain ckpt %s: one URL expected, got '%s' and '%s'\n", sub, url, a);
            return EXIT_USAGE;
        } else {
            url = a;
        }
    }
    if (!url) {
        fprintf(stderr, "dtrain ckpt %s: missing URL (--help)\n", sub);
        return EXIT_USAGE;
    }
    if (is_ls) return cmd_ls(url, verify, json);
    if (is_verify) return cmd_verify(url);
    return cmd_show(url, json);
}
