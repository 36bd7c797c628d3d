/* `dtrain plan` and `--help-config` as the command runs them (src/cli/plan.c linked in): exit
 * codes (0 done, 2 usage or config error), the table and --json output on the shipped examples,
 * and one-line errors that name the key or file. Runs from a scratch folder so that the
 * examples' relative paths are resolved from the config file's folder. argv[1]: source tree. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli_plan.h"
#include "harness.h"

static char tmpdir[256];
static char out[1 << 16], err[1 << 14];

static int help_config(int argc, char **argv) {
    (void)argc, (void)argv;
    return dt_cli_help_config();
}

/* Runs dt_cli_plan (or help) with stdout/stderr captured; returns the exit code. */
static int run(int help, int argc, char **argv) {
    return dt_test_capture(help ? help_config : dt_cli_plan, argc, argv, out, sizeof out, err,
                           sizeof err);
}

#define RUN(...)                                                                                   \
    run(0, (int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)), (char *[]){__VA_ARGS__})

int main(int argc, char **argv) {
    const char *src = argc > 1 ? argv[1] : ".";
    char l8[1024], r152[1024], r18[1024];
    snprintf(l8, sizeof l8, "%s/examples/llama3.1-8b-lora.yaml", src);
    snprintf(r152, sizeof r152, "%s/examples/resnet152.yaml", src);
    snprintf(r18, sizeof r18, "%s/examples/resnet18-fmnist.yaml", src);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dt_plancli_XXXXXX");
    if (!mkdtemp(tmpdir) || chdir(tmpdir) != 0) return 1;

    int rc = RUN("plan", l8, "-n", "16");
    CHECK(rc == 0, "8B plan: rc %d, stderr: %s", rc, err);
    CHECK(strstr(out, "8,030,261,248 frozen") && strstr(out, "frozen base weights (bf16)") &&
              strstr(out, "total") && strstr(out, "16 workers"),
          "8B table: %s", out);
    printf("%s", out);
    rc = RUN("plan", l8, "-n16", "--json", "dist.zero_stage=1");
    CHECK(rc == 0 && strstr(out, "\"params_frozen\": 8030261248") && strstr(out, "\"world\": 16") &&
              strstr(out, "\"zero_stage\": 1") && out[0] == '{',
          "8B json: rc %d %s %s", rc, out, err);
    rc = RUN("plan", r152);
    CHECK(rc == 0 && strstr(out, "resnet-152") && strstr(out, "58,156,618 total"),
          "resnet152: rc %d %s %s", rc, out, err);
    rc = RUN("plan", r18, "--workers", "2", "dist.zero_stage=2", "--json");
    CHECK(rc == 0 && strstr(out, "\"world\": 2") && strstr(out, "\"zero_stage\": 2"),
          "resnet18: rc %d %s %s", rc, out, err);

    /* Errors: exit code 2 and a message naming the key / file. */
    rc = RUN("plan", r18, "optim.weight_decy=0.1");
    CHECK(rc == 2 && strstr(err, "optim.weight_decy") && strstr(err, "optim.weight_decay"),
          "unknown key: rc %d %s", rc, err);
    rc = RUN("plan", r18, "data.batch=many");
    CHECK(rc == 2 && strstr(err, "data.batch") && strstr(err, "'many'"), "bad value: rc %d %s", rc,
          err);
    rc = RUN("plan", "/nonexistent/run.yaml");
    CHECK(rc == 2 && strstr(err, "/nonexistent/run.yaml"), "missing file: rc %d %s", rc, err);
    rc = RUN("plan", r18, "-n", "0");
    CHECK(rc == 2 && strstr(err, "-n"), "-n 0: rc %d %s", rc, err);
    rc = RUN("plan", r18, "--bogus");
    CHECK(rc == 2 && strstr(err, "--bogus"), "unknown option: rc %d %s", rc, err);
    rc = RUN("plan");
    CHECK(rc == 2 && strstr(err, "usage"), "no config: rc %d %s", rc, err);
    rc = RUN("plan", r18, "extra.yaml");
    CHECK(rc == 2 && strstr(err, "extra.yaml"), "two configs: rc %d %s", rc, err);
    rc = RUN("plan", r18, "model.kind=llama");
    CHECK(rc == 2 && strstr(err, "model.hf_path"), "llama without hf_path: rc %d %s", rc, err);
    rc = RUN("plan", "-h");
    CHECK(rc == 0 && strstr(out, "usage"), "-h: rc %d", rc);
    rc = run(1, 0, NULL);
    CHECK(rc == 0 && strstr(out, "optim.lr") && strstr(out, "lora.targets") &&
              strstr(out, "default"),
          "--help-config: rc %d", rc);

    if (chdir("/") == 0) rmdir(tmpdir);
    return dt_test_finish("test_plan_cli");
}
