/* What an image import reads: the files of an ImageFolder tree or of a list file, with labels,
 * in a fixed order (import_images.c decodes and writes them).
 *
 * ImageFolder as torchvision's: classes are the sorted names of DIR's subdirectories (label k
 * is the k-th), and each class's files are every file below its folder, visited as
 * sorted(os.walk(class_dir, followlinks=True)) then sorted file names do: directories in
 * sorted order of their full paths, the files of each sorted by name (byte order, which is
 * Python's code point order for UTF-8). Unlike torchvision, names starting with '.' (hidden
 * files and folders such as .ipynb_checkpoints) are left out, and files are kept by content
 * later, not by extension. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/file.h"
#include "data/import.h"

enum { MAX_DEPTH = 32 };

/* Non-hidden entries of dir that are directories (dirs = 1) or regular files (dirs = 0), links
 * followed, as full paths (names in *names when given), sorted by name. */
static dt_status list_dir(const char *dir, int dirs, dt_strv *out, dt_strv *names) {
    DIR *d = opendir(dir);
    if (!d) return dt_error_set(DT_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    dt_strv nm = {0};
    struct dirent *e;
    dt_status st = DT_OK;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = dt_path_join(dir, e->d_name);
        struct stat sb;
        if (p && stat(p, &sb) == 0 && (dirs ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode))) {
            if (dt_strv_push(&nm, strdup(e->d_name)))
                st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", dir);
        } else if (!p) {
            st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", dir);
        }
        free(p);
    }
    closedir(d);
    if (!st && nm.n > 1) qsort(nm.s, (size_t)nm.n, sizeof *nm.s, dt_strv_cmp);
    for (int64_t i = 0; !st && i < nm.n; i++)
        if (dt_strv_push(out, dt_path_join(dir, nm.s[i])) ||
            (names && dt_strv_push(names, strdup(nm.s[i]))))
            st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", dir);
    dt_strv_free(&nm);
    return st;
}

/* Every directory below (and including) `dir`, depth-first, unsorted. */
static dt_status walk_dirs(const char *dir, int depth, dt_strv *out) {
    if (depth > MAX_DEPTH)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: folders nested more than %d deep (a symbolic link loop?)", dir,
                            MAX_DEPTH);
    if (dt_strv_push(out, strdup(dir))) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    dt_strv subs = {0};
    dt_status st = list_dir(dir, 1, &subs, NULL);
    for (int64_t i = 0; !st && i < subs.n; i++) st = walk_dirs(subs.s[i], depth + 1, out);
    dt_strv_free(&subs);
    return st;
}

static dt_status add_entry(dt_image_list *l, char *path, int32_t label) {
    if (!path) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (l->n == l->cap) {
        int64_t c = l->cap ? l->cap * 2 : 256;
        dt_image_entry *q = realloc(l->e, (size_t)c * sizeof *q);
        if (!q) {
            free(path);
            return dt_error_set(DT_ERR_NOMEM, "out of memory");
        }
        l->e = q, l->cap = c;
    }
    l->e[l->n++] = (dt_image_entry){path, label};
    return DT_OK;
}

void dt_image_list_free(dt_image_list *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->e[i].path);
    free(l->e);
    for (int32_t k = 0; k < l->classes; k++) free(l->names[k]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* The files of the classes `names` [classes] below root (root/<class>/...), labels by index. A
 * class folder that does not exist (a val split without it) contributes nothing. */
static dt_status folder_files(const char *root, char *const *names, int32_t classes,
                              dt_image_list *l) {
    dt_status st = DT_OK;
    for (int32_t k = 0; !st && k < classes; k++) {
        char *cdir = dt_path_join(root, names[k]);
        struct stat sb;
        dt_strv dirs = {0};
        if (!cdir) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        if (!st && stat(cdir, &sb) == 0 && S_ISDIR(sb.st_mode)) st = walk_dirs(cdir, 0, &dirs);
        free(cdir);
        if (!st && dirs.n > 1) qsort(dirs.s, (size_t)dirs.n, sizeof *dirs.s, dt_strv_cmp);
        for (int64_t i = 0; !st && i < dirs.n; i++) {
            dt_strv files = {0};
            st = list_dir(dirs.s[i], 0, &files, NULL);
            for (int64_t j = 0; !st && j < files.n; j++) {
                st = add_entry(l, files.s[j], k);
                files.s[j] = NULL; /* owned by the list now (or freed by add_entry) */
            }
            dt_strv_free(&files);
        }
        dt_strv_free(&dirs);
    }
    return st;
}

dt_status dt_image_folder(const char *root, const dt_image_list *classes_of, dt_image_list *l) {
    memset(l, 0, sizeof *l);
    dt_strv paths = {0}, names = {0};
    dt_status st = DT_OK;
    if (classes_of) { /* a val / test split: the classes of train */
        names.s = calloc((size_t)classes_of->classes + 1, sizeof *names.s);
        if (!names.s) return dt_error_set(DT_ERR_NOMEM, "out of memory");
        names.n = names.cap = classes_of->classes;
        for (int32_t k = 0; k < classes_of->classes; k++)
            if (!(names.s[k] = strdup(classes_of->names[k])))
                st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        /* and no class of its own that train lacks */
        dt_strv own = {0}, own_names = {0};
        if (!st) st = list_dir(root, 1, &own, &own_names);
        for (int64_t i = 0; !st && i < own_names.n; i++) {
            int found = 0;
            for (int32_t k = 0; k < classes_of->classes && !found; k++)
                found = !strcmp(own_names.s[i], classes_of->names[k]);
            if (!found)
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s: class folder \"%s\" is not a class of the train split", root,
                                  own_names.s[i]);
        }
        dt_strv_free(&own);
        dt_strv_free(&own_names);
    } else {
        st = list_dir(root, 1, &paths, &names);
        if (!st && names.n == 0)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: no class folders (ImageFolder layout: DIR/<class>/<image>)",
                              root);
        if (!st && names.n > INT32_MAX / 2)
            st = dt_error_set(DT_ERR_FORMAT, "%s: too many class folders", root);
    }
    dt_strv_free(&paths);
    if (st) {
        dt_strv_free(&names);
        return st;
    }
    l->names = names.s, l->classes = (int32_t)names.n;
    st = folder_files(root, l->names, l->classes, l);
    if (st) dt_image_list_free(l);
    return st;
}

/* ---- list files: CSV "path,label" lines or JSONL {"path": ..., "label": ...} ---- */

/* 1 if s is a non-negative decimal integer below 2^31. */
static int plain_int(const char *s, int32_t *v) {
    if (!*s) return 0;
    long long x = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9' || x > 1 << 30) return 0;
        x = x * 10 + (*c - '0');
    }
    if (x > INT32_MAX / 2) return 0;
    *v = (int32_t)x;
    return 1;
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    size_t k = 0;
    while (s[k] == ' ' || s[k] == '\t') k++;
    memmove(s, s + k, n - k + 1);
}

dt_status dt_image_list_file(const char *file, dt_image_list *l) {
    memset(l, 0, sizeof *l);
    uint8_t *text;
    size_t len;
    dt_status st = dt_read_file_max(file, 0, DT_MAX_META_BYTES, "an image list", &text, &len);
    if (st) return st;
    int jsonl = strlen(file) > 6 && !strcmp(file + strlen(file) - 6, ".jsonl");
    char *base = strdup(file);
    char *slash = base ? strrchr(base, '/') : NULL;
    const char *dir = slash ? (*slash = 0, *base ? base : "/") : ".";
    dt_strv paths = {0}, labels = {0};
    int64_t line = 0;
    char *next = (char *)text;
    while (!st && next) {
        char *ln = next, *nl = strchr(ln, '\n');
        next = nl ? (*nl = 0, nl + 1) : NULL;
        line++;
        trim(ln);
        if (!*ln) continue;
        char *p = NULL, *lab = NULL;
        if (jsonl) {
            cJSON *o = cJSON_Parse(ln);
            const cJSON *jp = cJSON_GetObjectItemCaseSensitive(o, "path");
            const cJSON *jl = cJSON_GetObjectItemCaseSensitive(o, "label");
            char num[32];
            if (cJSON_IsString(jp) && (cJSON_IsString(jl) || cJSON_IsNumber(jl))) {
                p = strdup(jp->valuestring);
                if (cJSON_IsNumber(jl)) snprintf(num, sizeof num, "%.17g", jl->valuedouble);
                lab = strdup(cJSON_IsString(jl) ? jl->valuestring : num);
            } else {
                st = dt_error_set(DT_ERR_FORMAT,
                                  "%s:%lld: not a JSON object with a string \"path\" and a "
                                  "\"label\" (string or integer)",
                                  file, (long long)line);
            }
            cJSON_Delete(o);
        } else {
            char *comma = strrchr(ln, ',');
            if (!comma) {
                st = dt_error_set(DT_ERR_FORMAT, "%s:%lld: not \"path,label\"", file,
                                  (long long)line);
            } else {
                *comma = 0;
                trim(ln);
                trim(comma + 1);
                if (line == 1 && !strcmp(ln, "path") && !strcmp(comma + 1, "label")) continue;
                p = strdup(ln), lab = strdup(comma + 1);
            }
        }
        if (st) break;
        if (!p || !lab || !*p || !*lab) {
            st = p && lab ? dt_error_set(DT_ERR_FORMAT, "%s:%lld: empty path or label", file,
                                         (long long)line)
                          : dt_error_set(DT_ERR_NOMEM, "out of memory");
            free(p), free(lab);
            break;
        }
        char *full = p[0] == '/' ? strdup(p) : dt_path_join(dir, p);
        free(p);
        if (dt_strv_push(&paths, full) || dt_strv_push(&labels, lab))
            st = dt_error_set(DT_ERR_NOMEM, "out of memory");
    }
    free(text);
    free(base);
    if (!st && !paths.n) st = dt_error_set(DT_ERR_FORMAT, "%s: no images listed", file);
    /* labels: all integers -> used as they are (classes = max + 1, named by number); otherwise
     * class names, indexed in sorted order (as ImageFolder would index folders of those names) */
    int all_int = 1;
    int32_t v, maxv = -1;
    for (int64_t i = 0; i < labels.n && all_int; i++)
        if ((all_int = plain_int(labels.s[i], &v)) && v > maxv) maxv = v;
    dt_strv cls = {0};
    if (!st && all_int) {
        for (int32_t k = 0; !st && k <= maxv; k++) {
            char num[16];
            snprintf(num, sizeof num, "%d", k);
            if (dt_strv_push(&cls, strdup(num))) st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        }
    } else if (!st) {
        for (int64_t i = 0; !st && i < labels.n; i++)
            if (dt_strv_push(&cls, strdup(labels.s[i])))
                st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        if (!st && cls.n > 1) qsort(cls.s, (size_t)cls.n, sizeof *cls.s, dt_strv_cmp);
        int64_t u = 0;
        for (int64_t i = 0; i < cls.n; i++) {
            if (u && !strcmp(cls.s[u - 1], cls.s[i])) {
                free(cls.s[i]);
                continue;
            }
            cls.s[u++] = cls.s[i];
        }
        cls.n = u;
    }
    l->names = cls.s, l->classes = (int32_t)cls.n;
    for (int64_t i = 0; !st && i < paths.n; i++) {
        int32_t lab = 0;
        if (all_int) {
            plain_int(labels.s[i], &lab);
        } else {
            char **hit = bsearch(&labels.s[i], cls.s, (size_t)cls.n, sizeof *cls.s, dt_strv_cmp);
            lab = (int32_t)(hit - cls.s);
        }
        st = add_entry(l, paths.s[i], lab);
        paths.s[i] = NULL;
    }
    dt_strv_free(&paths);
    dt_strv_free(&labels);
    if (st) dt_image_list_free(l);
    return st;
}
