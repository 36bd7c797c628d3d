/* `dtrain data import|inspect|verify` through dt_cli_data (src/cli/data.c): exit codes 0 (done),
 * 1 (bad data: a corrupt shard fails verify), 2 (usage errors), on a generated CIFAR-10 source
 * and a text source.
 *
 * usage: test_data_cli TIKTOKEN_FILE */
#include <stdarg.h>
#include "cli/cli_data.h"
#include "data_testutil.h"

static int cli(int n, ...) {
    char *argv[32];
    va_list ap;
    va_start(ap, n);
    argv[0] = "data";
    for (int i = 0; i < n; i++) argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    argv[n + 1] = NULL;
    printf("$ dtrain data");
    for (int i = 1; i <= n; i++) printf(" %s", argv[i]);
    printf("\n");
    fflush(stdout);
    int rc = dt_cli_data(n + 1, argv);
    fflush(stdout);
    return rc;
}

int main(int argc, char **argv) {
    char tmp[4096], src[4200], out[4200], txt[4200], tout[4200], shard[4300];
    if (!CHECK(tu_tempdir(tmp, sizeof tmp, "cli"), "mkdtemp")) return dt_test_finish("cli");
    const char *tok = argc > 1 ? argv[1] : "data/tokenizers/cl100k_base.tiktoken";
    snprintf(src, sizeof src, "%s/cifar", tmp);
    mkdir(src, 0755);
    uint8_t *rec = calloc(20, 3073);
    for (int r = 0; r < 20; r++) rec[r * 3073] = (uint8_t)(r % 10), rec[r * 3073 + 1 + r] = 200;
    char p[4300];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", src);
    dt_write_file(p, rec, 20 * 3073);
    snprintf(p, sizeof p, "%s/test_batch.bin", src);
    dt_write_file(p, rec, 10 * 3073);
    free(rec);
    snprintf(out, sizeof out, "%s/out", tmp);
    CHECK(cli(6, "import", "cifar10", src, "-o", out, "--val") == 2, "--val without a value: 2");
    CHECK(cli(7, "import", "cifar10", src, "-o", out, "--val", "0.25") == 0, "import cifar10");
    CHECK(cli(2, "inspect", out) == 0, "inspect");
    CHECK(cli(2, "verify", out) == 0, "verify");
    snprintf(shard, sizeof shard, "%s/train/shard-00000.dts", out);
    tu_flip(shard, 300, 1);
    CHECK(cli(2, "verify", out) == 1, "verify of a corrupt shard: 1");
    CHECK(cli(5, "import", "cifar10", src, "-o", out) == 1, "import over an existing dir: 1");
    CHECK(cli(3, "import", "cifar10", src) == 2, "no -o: 2");
    CHECK(cli(5, "import", "imagenet", src, "-o", tout) == 2, "unknown kind: 2");
    CHECK(cli(1, "frobnicate") == 2, "unknown subcommand: 2");
    CHECK(cli(2, "inspect", tmp) == 1, "inspect of a non-dataset: 1");

    snprintf(txt, sizeof txt, "%s/t.txt", tmp);
    const char *t = "One.\n%\nTwo, with more words in it.\n%\nThree.\n";
    dt_write_file(txt, t, strlen(t));
    snprintf(tout, sizeof tout, "%s/text", tmp);
    CHECK(cli(9, "import", "text", txt, "-o", tout, "--tokenizer", tok, "--doc-sep", "%") == 0,
          "import text");
    CHECK(cli(2, "inspect", tout) == 0, "inspect text");
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_cli");
}
