/* `dtrain plan --compare` (src/cli/plan.c linked in) on examples/llama3.1-8b-lora.yaml:
 *  - 16 rows, in preference order (full before LoRA, recompute off before on, ZeRO 0..3), both
 *    from dt_plan_compare and in the --json array and the text table;
 *  - consistency: the full-finetuning, recompute-off, ZeRO-0 row equals `dtrain plan` run with
 *    lora.enabled=false model.recompute=false dist.zero_stage=0 (every figure of its JSON), and
 *    every row equals dt_plan_compute on the config with that row's keys set;
 *  - monotonicity: a higher ZeRO stage never needs more memory, recompute never more
 *    activations; LoRA rows take the config's lora.* (rank override seen), or r=16 on q,k,v,o
 *    when lora is off;
 *  - the choice: fits the budget, and no row earlier in the order fits; the line names it;
 *  - nothing fits: --budget-gib 1 says so and prints the suggestion; a budget that fits only with
 *    more workers suggests the fewest workers for the first row that can fit, checked against
 *    dt_plan_compute at that count and one below;
 *  - usage errors (bad budget, --budget-gib without --compare) and ResNet (8 rows, no LoRA).
 * argv[1]: the source tree. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli_plan.h"
#include "harness.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static char tmpdir[256];
static char out[1 << 17], err[1 << 14];
static char l8[1024];

/* Runs dt_cli_plan with stdout/stderr captured; returns the exit code. */
static int run(int argc, char **argv) {
    return dt_test_capture(dt_cli_plan, argc, argv, out, sizeof out, err, sizeof err);
}

#define RUN(...)                                                                                   \
    run((int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)), (char *[]){__VA_ARGS__})

/* The integer after "\"key\": " in s (first occurrence); -1 when absent. */
static long long json_int(const char *s, const char *key) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(s, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Copies line i (0-based) of the JSON array's objects into buf; 0 when there is no such row. */
static int json_row(const char *s, int i, char *buf, size_t n) {
    const char *p = s;
    for (int k = 0; k <= i; k++) {
        p = strchr(p, '{');
        if (!p) return 0;
        if (k < i) p++;
    }
    const char *e = strchr(p, '}');
    if (!e || (size_t)(e - p) + 2 > n) return 0;
    memcpy(buf, p, (size_t)(e - p) + 1);
    buf[e - p + 1] = '\0';
    return 1;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* dt_plan_compute on the config with one row's keys set (independently of src/cli/plan.c). */
static dt_plan plan_of(const dt_plan_variant *r, int world, const char *extra) {
    char a[64], b[64], c[64];
    snprintf(a, sizeof a, "lora.enabled=%s", r->lora ? "true" : "false");
    snprintf(b, sizeof b, "model.recompute=%s", r->recompute ? "true" : "false");
    snprintf(c, sizeof c, "dist.zero_stage=%d", r->zero_stage);
    char *over[6] = {a, b, c};
    int n = 3;
    /* no lora.shard_base: the default (auto) shards the frozen base in LoRA's ZeRO-3 rows */
    if (extra) over[n++] = (char *)extra;
    dt_config *cfg = NULL;
    dt_plan p;
    memset(&p, 0, sizeof p);
    CHECK_OK(dt_config_from_args(l8, n, over, &cfg));
    if (cfg) CHECK_OK(dt_plan_compute(cfg, world, &p));
    dt_config_free(cfg);
    return p;
}

static void check_rows(const dt_plan_variant *rows, int n, int chosen, int world, double budget) {
    CHECK(n == 16, "%d rows, expected 16", n);
    for (int i = 0; i < n; i++) {
        const dt_plan_variant *r = &rows[i];
        /* Preference order: full, recompute off, ZeRO 0 first; ZeRO varies fastest. */
        CHECK(r->lora == i / 8 && r->recompute == (i / 4) % 2 && r->zero_stage == i % 4,
              "row %d is lora %d recompute %d zero %d", i, r->lora, r->recompute, r->zero_stage);
        CHECK(r->plan.world == world && r->plan.zero_stage == r->zero_stage,
              "row %d: world %d zero %d", i, r->plan.world, r->plan.zero_stage);
        CHECK(r->fits == ((double)r->plan.total_bytes <= budget * GIB),
              "row %d: fits %d total %lld", i, r->fits, (long long)r->plan.total_bytes);
        dt_plan p = plan_of(r, world, NULL);
        CHECK(p.total_bytes == r->plan.total_bytes &&
                  p.activation_bytes == r->plan.activation_bytes &&
                  p.params_trainable == r->plan.params_trainable,
              "row %d: compare total %lld vs dt_plan_compute %lld", i,
              (long long)r->plan.total_bytes, (long long)p.total_bytes);
        if (r->zero_stage > 0) {
            const dt_plan *lo = &rows[i - 1].plan;
            CHECK(
                r->plan.total_bytes <= lo->total_bytes && r->plan.param_bytes <= lo->param_bytes &&
                    r->plan.grad_bytes <= lo->grad_bytes && r->plan.optim_bytes <= lo->optim_bytes,
                "row %d: ZeRO %d needs %lld > ZeRO %d's %lld", i, r->zero_stage,
                (long long)r->plan.total_bytes, r->zero_stage - 1, (long long)lo->total_bytes);
        }
        if (r->recompute)
            CHECK(r->plan.activation_bytes <= rows[i - 4].plan.activation_bytes,
                  "row %d: recompute activations %lld > %lld without", i,
                  (long long)r->plan.activation_bytes,
                  (long long)rows[i - 4].plan.activation_bytes);
        if (r->lora)
            CHECK(r->plan.params_frozen == rows[i - 8].plan.params_trainable &&
                      r->plan.params_trainable < rows[i - 8].plan.params_trainable,
                  "row %d: LoRA frozen %lld trainable %lld", i, (long long)r->plan.params_frozen,
                  (long long)r->plan.params_trainable);
        /* LoRA under ZeRO-3: the frozen base sharded, 1/N of it plus the gathered weights */
        if (r->lora && r->zero_stage == 3 && world > 1)
            CHECK(r->plan.base_sharded && r->plan.frozen_bytes < rows[i - 1].plan.frozen_bytes &&
                      r->plan.frozen_bytes_1 == rows[i - 1].plan.frozen_bytes &&
                      r->plan.frozen_bytes >= rows[i - 1].plan.frozen_bytes / world,
                  "row %d: sharded base %lld, whole %lld", i, (long long)r->plan.frozen_bytes,
                  (long long)rows[i - 1].plan.frozen_bytes);
        /* min_workers: fits there and not one below (monotone in the worker count). */
        if (r->min_workers) {
            CHECK(plan_of(r, r->min_workers, NULL).total_bytes <= budget * GIB,
                  "row %d: does not fit at its min_workers %d", i, r->min_workers);
            if (r->min_workers > 1)
                CHECK(plan_of(r, r->min_workers - 1, NULL).total_bytes > budget * GIB,
                      "row %d: fits below its min_workers %d", i, r->min_workers);
        } else {
            CHECK(plan_of(r, DT_PLAN_COMPARE_MAX_WORKERS, NULL).total_bytes > budget * GIB,
                  "row %d: min_workers 0 but fits at %d", i, DT_PLAN_COMPARE_MAX_WORKERS);
        }
    }
    /* The choice: the first row that fits. */
    for (int i = 0; i < n; i++)
        if (i < chosen || chosen < 0)
            CHECK(!rows[i].fits, "row %d fits but comes before the choice %d", i, chosen);
    if (chosen >= 0)
        CHECK(rows[chosen].fits && (double)rows[chosen].plan.total_bytes <= budget * GIB,
              "chosen row %d does not fit", chosen);
}

int main(int argc, char **argv) {
    const char *src = argc > 1 ? argv[1] : ".";
    char r18[1024];
    snprintf(l8, sizeof l8, "%s/examples/llama3.1-8b-lora.yaml", src);
    snprintf(r18, sizeof r18, "%s/examples/resnet18-fmnist.yaml", src);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dt_plancmp_XXXXXX");
    if (!mkdtemp(tmpdir) || chdir(tmpdir) != 0) return 1;

    dt_plan_variant rows[DT_PLAN_COMPARE_MAX];
    int n = 0, chosen = -2;
    const int worlds[] = {1, 2, 8};
    for (int w = 0; w < 3; w++) {
        CHECK_OK(dt_plan_compare(l8, 0, NULL, worlds[w], 24, rows, &n, &chosen));
        check_rows(rows, n, chosen, worlds[w], 24);
        /* The shipped config fits 24 GiB with LoRA + recompute (18 GiB): something must fit. */
        CHECK(chosen >= 0, "-n %d: nothing fits 24 GiB", worlds[w]);
    }

    /* JSON at -n 2: 16 objects, row 0 = `dtrain plan` with those keys set, the chosen flag. */
    CHECK_OK(dt_plan_compare(l8, 0, NULL, 2, 24, rows, &n, &chosen));
    int rc = RUN("plan", l8, "-n", "2", "--compare", "--json");
    CHECK(rc == 0 && out[0] == '[' && count(out, "{\"finetune\"") == 16, "json: rc %d: %s %s", rc,
          out, err);
    char row0[2048], row[2048];
    CHECK(json_row(out, 0, row0, sizeof row0) && strstr(row0, "\"finetune\": \"full\"") &&
              strstr(row0, "\"recompute\": false") && strstr(row0, "\"zero_stage\": 0"),
          "json row 0: %s", row0);
    for (int i = 0; i < 16 && json_row(out, i, row, sizeof row); i++) {
        CHECK(json_int(row, "total_bytes") == rows[i].plan.total_bytes,
              "json row %d total %lld vs %lld", i, json_int(row, "total_bytes"),
              (long long)rows[i].plan.total_bytes);
        CHECK((strstr(row, "\"chosen\": true") != NULL) == (i == chosen), "json row %d chosen", i);
        CHECK((strstr(row, "\"fits\": true") != NULL) == rows[i].fits, "json row %d fits", i);
    }
    rc = RUN("plan", l8, "-n", "2", "--json", "lora.enabled=false", "model.recompute=false",
             "dist.zero_stage=0");
    CHECK(rc == 0 && out[0] == '{', "plain plan: rc %d %s", rc, err);
    const char *keys[] = {"params_trainable", "params_frozen", "param_bytes",      "grad_bytes",
                          "optim_bytes",      "frozen_bytes",  "activation_bytes", "total_bytes"};
    for (int k = 0; k < 8; k++)
        CHECK(json_int(out, keys[k]) >= 0 && json_int(out, keys[k]) == json_int(row0, keys[k]),
              "full/off/ZeRO-0 %s: compare %lld, plan %lld", keys[k], json_int(row0, keys[k]),
              json_int(out, keys[k]));
    CHECK(json_int(out, "params_trainable") == 8030261248LL, "full finetuning trains %lld",
          json_int(out, "params_trainable"));

    /* Text at -n 8: 16 rows, the choice line names the chosen row. */
    rc = RUN("plan", l8, "-n", "8", "--compare");
    CHECK_OK(dt_plan_compare(l8, 0, NULL, 8, 24, rows, &n, &chosen));
    CHECK(rc == 0 && count(out, "\nfull ") == 8 && count(out, "\nLoRA ") == 8 &&
              count(out, "<- chosen") == 1 && strstr(out, "budget: 24.00 GiB"),
          "text -n 8: rc %d\n%s%s", rc, out, err);
    printf("%s", out);
    if (chosen >= 0) {
        char want[200];
        snprintf(want, sizeof want, "at 8 workers: %s, recompute %s, ZeRO %d",
                 rows[chosen].lora ? "LoRA" : "full finetuning",
                 rows[chosen].recompute ? "on" : "off", rows[chosen].zero_stage);
        CHECK(strstr(out, "cheapest configuration that fits") && strstr(out, want),
              "choice line, want '%s':\n%s", want, out);
    }

    /* LoRA settings: the config's (rank 8 override), or r=16 q,k,v,o when lora is off. */
    char *r8[] = {"lora.rank=8"}, *off8[] = {"lora.enabled=false", "lora.rank=8"};
    CHECK_OK(dt_plan_compare(l8, 1, r8, 2, 24, rows, &n, &chosen));
    dt_plan ref = plan_of(&rows[8], 2, "lora.rank=8");
    CHECK(n == 16 && rows[8].plan.params_trainable == ref.params_trainable &&
              rows[8].plan.params_trainable == 13631488 / 2,
          "lora.rank=8: trainable %lld", (long long)rows[8].plan.params_trainable);
    CHECK_OK(dt_plan_compare(l8, 2, off8, 2, 24, rows, &n, &chosen));
    CHECK(n == 16 && rows[8].plan.params_trainable == 13631488,
          "lora off: r=16 q,k,v,o has %lld trainable", (long long)rows[8].plan.params_trainable);

    /* Nothing fits 1 GiB at any worker count (the logits alone are ~1 GiB). */
    CHECK_OK(dt_plan_compare(l8, 0, NULL, 2, 1, rows, &n, &chosen));
    check_rows(rows, n, chosen, 2, 1);
    CHECK(chosen == -1, "1 GiB: row %d chosen", chosen);
    rc = RUN("plan", l8, "-n", "2", "--compare", "--budget-gib", "1");
    CHECK(rc == 0 && strstr(out, "nothing fits 1.00 GiB per worker at 2 workers") &&
              strstr(out, "suggestion: no configuration fits at any worker count up to 1024") &&
              !strstr(out, "<- chosen"),
          "1 GiB: rc %d\n%s%s", rc, out, err);
    printf("%s", out);

    /* A budget only a sharded full finetuning meets with more workers: at -n 1 nothing fits
     * 14 GiB (LoRA's bf16 base alone is 14.96 GiB); the suggestion is the first row that fits
     * with more workers, at its fewest. */
    CHECK_OK(dt_plan_compare(l8, 0, NULL, 1, 14, rows, &n, &chosen));
    check_rows(rows, n, chosen, 1, 14);
    int best = -1;
    for (int i = 0; i < n && best < 0; i++)
        if (rows[i].min_workers) best = i;
    CHECK(chosen == -1 && best >= 0 && !rows[best].lora && rows[best].zero_stage == 3,
          "14 GiB: chosen %d, best %d", chosen, best);
    rc = RUN("plan", l8, "--compare", "--budget-gib=14");
    if (best >= 0) {
        char want[200];
        snprintf(want, sizeof want,
                 "suggestion: full finetuning, recompute %s, ZeRO 3 fits at %d "
                 "workers (-n %d)",
                 rows[best].recompute ? "on" : "off", rows[best].min_workers,
                 rows[best].min_workers);
        CHECK(rc == 0 && strstr(out, "nothing fits 14.00 GiB per worker at 1 worker.") &&
                  strstr(out, want),
              "14 GiB: want '%s'\nrc %d\n%s%s", want, rc, out, err);
        printf("%s", out);
        /* At the suggested count, --compare chooses that row. */
        char nw[16];
        snprintf(nw, sizeof nw, "%d", rows[best].min_workers);
        int ch;
        CHECK_OK(dt_plan_compare(l8, 0, NULL, rows[best].min_workers, 14, rows + 0, &n, &ch));
        CHECK(ch == best, "at -n %s the choice is row %d, not the suggested %d", nw, ch, best);
    }

    /* Usage errors and ResNet. */
    rc = RUN("plan", l8, "--compare", "--budget-gib", "0");
    CHECK(rc == 2 && strstr(err, "--budget-gib"), "budget 0: rc %d %s", rc, err);
    rc = RUN("plan", l8, "--compare", "--budget-gib");
    CHECK(rc == 2 && strstr(err, "--budget-gib"), "no budget: rc %d %s", rc, err);
    rc = RUN("plan", l8, "--budget-gib", "8");
    CHECK(rc == 2 && strstr(err, "--compare"), "budget without compare: rc %d %s", rc, err);
    rc = RUN("plan", l8, "--compare", "dist.zero_stage=9");
    CHECK(rc == 2 && strstr(err, "dist.zero_stage"), "bad override: rc %d %s", rc, err);
    rc = RUN("plan", "-h");
    CHECK(rc == 0 && strstr(out, "--compare") && strstr(out, "full finetuning before LoRA"),
          "help: %s", out);
    rc = RUN("plan", r18, "--compare", "--json");
    CHECK(rc == 0 && count(out, "{\"finetune\": \"full\"") == 8 && !strstr(out, "\"lora\""),
          "resnet18: rc %d %s %s", rc, out, err);

    if (chdir("/") == 0) rmdir(tmpdir);
    return dt_test_finish("test_plan_compare");
}
