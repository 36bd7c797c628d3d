/* `dtrain data import|inspect|verify` through dt_cli_data (src/cli/data.c): exit codes 0 (done),
 * 1 (bad data: a corrupt shard fails verify), 2 (usage errors), on a generated CIFAR-10 source
 * and a text source.
 *
 * usage: test_data_cli TIKTOKEN_FILE */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
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
    /* the same import again: nothing changes ("up to date"); another one is refused */
    struct stat s0, s1;
    snprintf(shard, sizeof shard, "%s/train/shard-00000.dts", out);
    CHECK(stat(shard, &s0) == 0, "shard written");
    CHECK(cli(7, "import", "cifar10", src, "-o", out, "--val", "0.25") == 0,
          "the same import again: 0 (up to date)");
    CHECK(stat(shard, &s1) == 0 && s1.st_ino == s0.st_ino &&
              s1.st_mtim.tv_nsec == s0.st_mtim.tv_nsec && s1.st_mtim.tv_sec == s0.st_mtim.tv_sec,
          "up to date: the shard was not rewritten");
    CHECK(cli(7, "import", "cifar10", src, "-o", out, "--val", "0.5") == 1,
          "other options into an existing import: 1");
    snprintf(p, sizeof p, "%s/test_batch.bin", src);
    struct timespec later[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = 1000000000}};
    utimensat(AT_FDCWD, p, later, 0); /* a source file changed */
    CHECK(cli(7, "import", "cifar10", src, "-o", out, "--val", "0.25") == 1,
          "a changed source into an existing import: 1");
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
    CHECK(cli(9, "import", "text", txt, "-o", tout, "--tokenizer", tok, "--doc-sep", "%") == 0,
          "the same text import again: 0 (up to date)");
    /* the tokenizer travels with the data, beside each split's manifest */
    const char *base = strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok;
    snprintf(p, sizeof p, "%s/train/%s", tout, base);
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(dt_read_file(p, 0, &a, &na) == DT_OK && dt_read_file(tok, 0, &b, &nb) == DT_OK &&
              na == nb && !memcmp(a, b, na),
          "%s is a copy of the tokenizer", p);
    free(a), free(b);

    /* jsonl: the chat options; another --system is another import; a bad --train-on is usage */
    char js[4200], jout[4200];
    snprintf(js, sizeof js, "%s/c.jsonl", tmp);
    const char *jrec = "{\"instruction\": \"Hi\", \"output\": \"Hello\"}\n";
    dt_write_file(js, jrec, strlen(jrec));
    snprintf(jout, sizeof jout, "%s/chat", tmp);
    CHECK(cli(14, "import", "jsonl", js, "-o", jout, "--tokenizer", tok, "--format", "alpaca",
              "--system", "S", "--train-on", "last", "--strict") == 0,
          "import jsonl with --format, --system, --train-on, --strict");
    CHECK(cli(14, "import", "jsonl", js, "-o", jout, "--tokenizer", tok, "--format", "alpaca",
              "--system", "S", "--train-on", "last", "--strict") == 0,
          "the same jsonl import again: 0 (up to date)");
    CHECK(cli(14, "import", "jsonl", js, "-o", jout, "--tokenizer", tok, "--format", "alpaca",
              "--system", "T", "--train-on", "last", "--strict") == 1,
          "another --system into an existing import: 1");
    CHECK(cli(9, "import", "jsonl", js, "-o", tout, "--tokenizer", tok, "--train-on", "first") == 2,
          "--train-on first: 2");
    CHECK(cli(9, "import", "jsonl", js, "-o", tout, "--tokenizer", tok, "--template", "vicuna") ==
              2,
          "--template vicuna: 2");
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_cli");
}
