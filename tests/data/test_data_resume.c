/* Resume across processes: a loader (2 prefetch threads, augmentation on) is stopped after K
 * batches and its cursor saved to a file; a new process restores the cursor and writes the next
 * M batches; they must equal, byte for byte, batches K..K+M-1 of an uninterrupted loader run in
 * a third process. Done for an image dataset and a token dataset, K chosen so the resumed run
 * crosses an epoch boundary.
 *
 * usage: test_data_resume                       (the test: runs itself as the three processes)
 *        test_data_resume full DIR K M OUT      (uninterrupted: batches K..K+M-1 to OUT)
 *        test_data_resume stop DIR K CURSOR     (K batches, then the cursor to CURSOR)
 *        test_data_resume resume DIR M CURSOR OUT */
#include <spawn.h>
#include <sys/wait.h>
#include "data_testutil.h"

extern char **environ;

static dt_loader *make_loader(const char *dir, dt_dataset **d) {
    if (dt_dataset_open(dir, 0, d) != DT_OK) return NULL;
    dt_loader_config c;
    dt_loader_config_default(&c);
    c.batch_size = 24, c.seed = 1234, c.prefetch_threads = 2, c.queue_depth = 6;
    c.augment = 1, c.crop_padding = 2, c.seq_len = 32, c.rank = 1, c.world_size = 2;
    dt_loader *l = NULL;
    if (dt_loader_open(*d, &c, &l) != DT_OK) {
        dt_dataset_close(*d);
        return NULL;
    }
    return l;
}

static void write_batch(FILE *f, const dt_dataset *d, const dt_batch *b) {
    const dt_dataset_info *in = dt_dataset_get_info(d);
    fwrite(&b->epoch, 8, 1, f), fwrite(&b->index, 8, 1, f), fwrite(&b->n, 8, 1, f);
    fwrite(b->samples, 8, (size_t)b->n, f);
    if (in->kind == DT_DATA_IMAGE) {
        size_t img = (size_t)in->channels * in->height * in->width;
        fwrite(b->images, 4, (size_t)b->n * img, f);
        fwrite(b->labels, 4, (size_t)b->n, f);
    } else {
        size_t nt = (size_t)b->n * 32;
        fwrite(b->inputs, 4, nt, f), fwrite(b->targets, 4, nt, f);
        fwrite(b->loss_mask, 4, nt, f), fwrite(b->positions, 4, nt, f);
    }
}

static int child(int argc, char **argv) {
    const char *mode = argv[1], *dir = argv[2];
    dt_dataset *d;
    dt_loader *l = make_loader(dir, &d);
    if (!l) {
        fprintf(stderr, "%s: %s\n", mode, dt_last_error());
        return 1;
    }
    dt_batch b;
    int rc = 0;
    if (!strcmp(mode, "full") && argc == 6) {
        long k = atol(argv[3]), m = atol(argv[4]);
        FILE *f = fopen(argv[5], "wb");
        for (long i = 0; i < k + m && f; i++) {
            if (dt_loader_next(l, &b) != DT_OK) rc = 1;
            if (i >= k) write_batch(f, d, &b);
        }
        if (!f || fclose(f)) rc = 1;
    } else if (!strcmp(mode, "stop") && argc == 5) {
        long k = atol(argv[3]);
        for (long i = 0; i < k; i++) rc |= dt_loader_next(l, &b) != DT_OK;
        dt_data_cursor c;
        dt_loader_cursor(l, &c);
        char s[256];
        dt_data_cursor_format(&c, s, sizeof s);
        rc |= dt_write_file(argv[4], s, strlen(s)) != DT_OK;
        printf("stop: cursor %s\n", s);
    } else if (!strcmp(mode, "resume") && argc == 6) {
        long m = atol(argv[3]);
        uint8_t *txt;
        size_t len;
        dt_data_cursor c;
        if (dt_read_file(argv[4], 0, &txt, &len) != DT_OK ||
            dt_data_cursor_parse((char *)txt, &c) || dt_loader_seek(l, &c)) {
            fprintf(stderr, "resume: %s\n", dt_last_error());
            rc = 1;
        } else {
            free(txt);
            FILE *f = fopen(argv[5], "wb");
            for (long i = 0; i < m && f; i++) {
                if (dt_loader_next(l, &b) != DT_OK) rc = 1;
                write_batch(f, d, &b);
            }
            if (!f || fclose(f)) rc = 1;
        }
    } else {
        rc = 2;
    }
    dt_loader_close(l);
    dt_dataset_close(d);
    return rc;
}

static int run_self(char *const args[]) {
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) != 0) return -1;
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_resume(const char *tmp, const char *name, long k, long m) {
    char dir[4200], full[4300], resumed[4300], cur[4300], ks[32], ms[32];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    snprintf(full, sizeof full, "%s/%s.full", tmp, name);
    snprintf(resumed, sizeof resumed, "%s/%s.resumed", tmp, name);
    snprintf(cur, sizeof cur, "%s/%s.cursor", tmp, name);
    snprintf(ks, sizeof ks, "%ld", k), snprintf(ms, sizeof ms, "%ld", m);
    char *a1[] = {"t", "full", dir, ks, ms, full, NULL};
    char *a2[] = {"t", "stop", dir, ks, cur, NULL};
    char *a3[] = {"t", "resume", dir, ms, cur, resumed, NULL};
    CHECK(run_self(a1) == 0, "%s: uninterrupted process failed", name);
    CHECK(run_self(a2) == 0, "%s: stopping process failed", name);
    CHECK(run_self(a3) == 0, "%s: resuming process failed", name);
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    dt_read_file(full, 0, &x, &nx);
    dt_read_file(resumed, 0, &y, &ny);
    CHECK(x && y && nx == ny && nx > 0 && !memcmp(x, y, nx),
          "%s: %ld batches after resuming at batch %ld equal the uninterrupted run's (%zu vs %zu "
          "bytes)",
          name, m, k, nx, ny);
    free(x), free(y);
}

int main(int argc, char **argv) {
    if (argc > 1) return child(argc, argv);
    char tmp[4096], dir[4200];
    if (!CHECK(tu_tempdir(tmp, sizeof tmp, "resume"), "mkdtemp")) return dt_test_finish("resume");
    snprintf(dir, sizeof dir, "%s/img", tmp);
    CHECK_OK(tu_make_images(dir, 500, 8, 8, 3, 10, 20000));
    snprintf(dir, sizeof dir, "%s/tok", tmp);
    CHECK_OK(tu_make_tokens(dir, 300, 120, 2000, 1, 8000));
    /* images: 250 per rank, 11 batches per epoch; stop at 9, resume for 6 (into epoch 1) */
    check_resume(tmp, "img", 9, 6);
    check_resume(tmp, "tok", 10, 6); /* 12 batches per epoch */
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_resume");
}
