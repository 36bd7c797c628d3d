/* dt_data_import: dispatch by kind, one temporary directory per import, rename at the end. */
#include "data/import.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "data/sampler.h"
#include "core/file.h"
#include "core/fsmode.h"

void dt_import_options_default(dt_import_options *o) {
    memset(o, 0, sizeof *o);
    o->seed = 0;
}

char *dt_import_tokenizer_path(const dt_import_options *o) {
    const char *p = o->tokenizer;
    if (!p || !*p) p = getenv("DT_TOKENIZER");
    if (!p || !*p) return NULL;
    /* A model folder stands for its tokenizer.json; a folder without one is handed on as it is,
     * so that the reader refuses it as a directory (naming the path the user gave) instead of
     * naming a tokenizer.json the user never mentioned. */
    struct stat sb;
    if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char *inner = dt_path_join(p, "tokenizer.json");
        if (!inner || stat(inner, &sb) == 0) return inner;
        free(inner);
    }
    return strdup(p);
}

char *dt_import_tokenizer_config(const char *tok) {
    const char *slash = strrchr(tok, '/');
    if (!slash) return strdup("tokenizer_config.json");
    char *dir = strndup(tok, (size_t)(slash - tok) + (slash == tok));
    char *p = dir ? dt_path_join(dir, "tokenizer_config.json") : NULL;
    free(dir);
    return p;
}

void dt_import_note(const dt_import *im, const char *fmt, ...) {
    if (im->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "import %s: ", im->kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int dt_strv_push(dt_strv *v, char *s) {
    if (!s) return -1;
    if (v->n == v->cap) {
        int64_t c = v->cap ? v->cap * 2 : 64;
        char **q = realloc(v->s, (size_t)c * sizeof *q);
        if (!q) {
            free(s);
            return -1;
        }
        v->s = q, v->cap = c;
    }
    v->s[v->n++] = s;
    return 0;
}

void dt_strv_free(dt_strv *v) {
    for (int64_t i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    memset(v, 0, sizeof *v);
}

int dt_strv_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

uint8_t *dt_import_val_mask(int64_t n, double fraction, uint64_t seed) {
    uint8_t *m = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!m) {
        dt_error_set(DT_ERR_NOMEM, "out of memory for a split of %lld records", (long long)n);
        return NULL;
    }
    int64_t nv = (int64_t)(fraction * (double)n + 0.5);
    if (nv > n) nv = n;
    dt_perm p;
    dt_perm_init(&p, n, seed, 0x56414C53ull); /* "VALS": not an epoch the loader uses */
    for (int64_t i = 0; i < nv; i++) m[dt_perm_apply(&p, i)] = 1;
    return m;
}

dt_status dt_import_writer(dt_import *im, const char *split, dt_dataset_spec *spec,
                           dt_dataset_writer **w) {
    if (im->n_w == 4) return dt_error_set(DT_ERR_INTERNAL, "import: too many splits");
    char *dir = dt_path_join(im->top, split);
    if (!dir) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    spec->split = split;
    if (!spec->shard_bytes) spec->shard_bytes = im->o->shard_bytes;
    dt_status st = dt_dataset_writer_open(dir, spec, w);
    free(dir);
    if (st) return st;
    im->w[im->n_w] = *w;
    snprintf(im->split_name[im->n_w], sizeof im->split_name[0], "%s", split);
    im->n_w++;
    return DT_OK;
}

/* mkdir -p of the parent of `path`. */
static dt_status make_parent(const char *path) {
    char *p = strdup(path);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) {
        free(p);
        return DT_OK;
    }
    *slash = 0;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST) break;
        *c = '/';
    }
    dt_status st = DT_OK;
    if (mkdir(p, DT_DIR_MODE) != 0 && errno != EEXIST)
        st = dt_error_set(DT_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
    free(p);
    return st;
}

dt_status dt_data_import(const char *kind, const char *const *srcs, int n_srcs, const char *out_dir,
                         const dt_import_options *opts) {
    dt_import_options defaults;
    if (!opts) {
        dt_import_options_default(&defaults);
        opts = &defaults;
    }
    static const char *kinds[] = {"fashion-mnist", "mnist", "cifar10", "text", "jsonl", "images"};
    int k = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(kind, kinds[i])) k = i;
    if (k < 0)
        return dt_error_set(DT_ERR_INVALID,
                            "import: unknown kind \"%s\" (fashion-mnist, mnist, "
                            "cifar10, text, jsonl, images)",
                            kind);
    if (n_srcs < 1 || ((k < 3 || k == 5) && n_srcs != 1))
        return dt_error_set(DT_ERR_INVALID, "import %s: %s", kind,
                            n_srcs < 1 ? "no source given" : "takes one source directory");
    if (opts->val_fraction < 0 || opts->val_fraction >= 1)
        return dt_error_set(DT_ERR_INVALID, "import %s: val fraction %g outside [0, 1)", kind,
                            opts->val_fraction);
    dt_status st = k == 4 ? dt_import_jsonl_check(opts) : DT_OK;
    if (st) return st;
    if (dt_path_exists(out_dir))
        return dt_error_set(DT_ERR_IO,
                            "%s: already exists and is not this import, or not intact (other "
                            "sources, files or options, or a damaged shard: `dtrain data verify` "
                            "tells; an import never overwrites): give another -o, or remove %s "
                            "to import again",
                            out_dir, out_dir);
    st = make_parent(out_dir);
    if (st) return st;
    dt_import im = {.o = opts, .kind = kind};
    im.out = strdup(out_dir);
    im.top = dt_temp_dir_for(out_dir);
    if (!im.out || !im.top) {
        free(im.out);
        free(im.top);
        return im.out ? DT_ERR_IO : dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    switch (k) {
    case 0:
    case 1:
        st = dt_import_idx(&im, srcs[0], kind);
        break;
    case 2:
        st = dt_import_cifar10(&im, srcs[0]);
        break;
    case 3:
        st = dt_import_text(&im, srcs, n_srcs);
        break;
    case 5:
        st = dt_import_images(&im, srcs[0]);
        break;
    default:
        st = dt_import_jsonl(&im, srcs, n_srcs);
        break;
    }
    for (int i = 0; i < im.n_w; i++) {
        if (st == DT_OK)
            st = dt_dataset_writer_close(im.w[i]);
        else
            dt_dataset_writer_abort(im.w[i]);
    }
    if (st == DT_OK) st = dt_import_finish_record(&im, srcs, n_srcs);
    if (st == DT_OK && dt_chmod_umask(im.top, DT_DIR_MODE) != 0) /* mkdtemp made it 0700 */
        st = dt_error_set(DT_ERR_IO, "%s: chmod: %s", im.top, strerror(errno));
    if (st == DT_OK && rename(im.top, im.out) != 0)
        st = dt_error_set(DT_ERR_IO, "%s: cannot rename %s into place: %s", im.out, im.top,
                          strerror(errno));
    if (st != DT_OK) {
        dt_remove_tree(im.top);
        /* a write that failed in the temporary folder (a full disk): say what became of out */
        if (st == DT_ERR_IO && strstr(dt_last_error(), im.top)) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            dt_error_set(st, "%s: not imported (nothing was made there): %s", im.out, m);
        }
    }
    free(im.top);
    free(im.out);
    return st;
}
