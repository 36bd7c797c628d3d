/* Helpers of the fuzz targets (see fuzz_util.h). */
#include "fuzz_util.h"
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/data.h"
#include "dtrain/tokenizer.h"

static char g_dir[1024];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

void fz_rm(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode))
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    else
        unlink(path);
}

static void cleanup(void) {
    if (g_dir[0]) fz_rm(g_dir);
}

const char *fz_dir(void) {
    if (g_dir[0]) return g_dir;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/dtfuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot make a temporary directory in %s: %s\n", base,
                strerror(errno));
        abort();
    }
    atexit(cleanup);
    return g_dir;
}

void fz_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", fz_dir(), name);
}

void fz_write(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
    const char *p = data;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            fprintf(stderr, "fuzz: write %s: %s\n", path, strerror(errno));
            abort();
        }
        p += k, n -= (size_t)k;
    }
    close(fd);
}

void fz_mkdirs(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            mkdir(p, 0700);
            *c = '/';
        }
    mkdir(p, 0700);
}

int fz_split(const uint8_t *data, size_t n, const uint8_t **part, size_t *len, int max) {
    const size_t sl = sizeof FZ_SEP - 1;
    int k = 0;
    const uint8_t *p = data, *end = data + n;
    while (k < max - 1) {
        const uint8_t *s = memmem(p, (size_t)(end - p), FZ_SEP, sl);
        if (!s) break;
        part[k] = p, len[k] = (size_t)(s - p), k++;
        p = s + sl;
    }
    part[k] = p, len[k] = (size_t)(end - p);
    return k + 1;
}

char *fz_strndup(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = 0;
    return s;
}

/* ---- tokenizers ---- */

static const char sample[] = "Hello world! <|endoftext|> 12345 \xc3\xa9t\xc3\xa9 \n\n  tabs\there "
                             "<|begin_of_text|>x";
static volatile int64_t sink;

void fz_tokenizer_exercise(dt_tokenizer *t) {
    dt_tokens ids = {0};
    if (dt_tokenizer_encode(t, sample, sizeof sample - 1, DT_TOK_ALLOW_SPECIAL, &ids) == DT_OK) {
        char *text = NULL;
        size_t len = 0;
        if (dt_tokenizer_decode(t, ids.ids, ids.n, &text, &len) == DT_OK) sink += (int64_t)len;
        free(text);
        for (int64_t i = 0; i < ids.n; i++) {
            size_t bl = 0;
            if (dt_tokenizer_token_bytes(t, ids.ids[i], &bl)) sink += (int64_t)bl;
        }
    }
    dt_tokens_free(&ids);
    if (dt_tokenizer_add_llama3_chat(t) == DT_OK) sink += dt_tokenizer_special_id(t, "<|eot_id|>");
    sink += dt_tokenizer_vocab_size(t);
}

/* ---- importers ---- */

void fz_check_import(const char *out, int val) {
    static const char *const splits[3] = {"train", "test", "val"};
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", out, splits[i]);
        if (i == 2 && !val) break;
        struct stat sb;
        if (stat(p, &sb) != 0) continue; /* text and jsonl imports have no test split */
        dt_dataset *d = NULL;
        if (dt_dataset_open(p, DT_DATA_VERIFY, &d) != DT_OK) {
            fprintf(stderr, "fuzz: the import succeeded but %s does not open: %s\n", p,
                    dt_last_error());
            abort();
        }
        dt_dataset_close(d);
    }
}
