/* A main() for the fuzz targets without libFuzzer: feeds every file named on the command line
 * (directories: every regular file under them, sorted) to LLVMFuzzerTestOneInput
 * once. Built with the ordinary and the ASan builds, so CTest replays the seed corpora and the
 * regression inputs under the sanitizers on every CI run, and a crash found by fuzzing stays
 * fixed.
 *
 *   fuzz_shard_replay tests/fuzz/corpus/shard tests/fuzz/regress/shard some-input.bin */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fuzz_util.h"

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) abort();
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    fclose(f);
    /* an exact-size copy, so ASan sees reads past the input's end */
    uint8_t *in = malloc(n ? n : 1);
    if (!in) abort();
    if (n) memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file, or every regular file under a directory (sorted, recursively). */
static void replay_path(const char *path, int *done, int *bad) {
    struct stat sb;
    if (stat(path, &sb) != 0) return; /* an absent directory: no inputs yet */
    if (S_ISREG(sb.st_mode)) {
        *bad += replay_file(path) != 0;
        (*done)++;
        return;
    }
    if (!S_ISDIR(sb.st_mode)) return;
    DIR *d = opendir(path);
    if (!d) return;
    char **names = NULL;
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (size_t)(nn + 1) * sizeof *names);
        if (!names) abort();
        names[nn] = malloc(strlen(path) + strlen(e->d_name) + 2);
        if (!names[nn]) abort();
        sprintf(names[nn], "%s/%s", path, e->d_name);
        nn++;
    }
    closedir(d);
    if (nn) qsort(names, (size_t)nn, sizeof *names, cmp);
    for (int k = 0; k < nn; k++) {
        replay_path(names[k], done, bad);
        free(names[k]);
    }
    free(names);
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int done = 0, bad = 0;
    for (int i = 1; i < argc; i++) replay_path(argv[i], &done, &bad);
    printf("replayed %d inputs through %s\n", done, argv[0]);
    return bad ? 1 : 0;
}
