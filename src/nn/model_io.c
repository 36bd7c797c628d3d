/* Model weights in and out by parameter name (see dt_model_load / dt_model_save). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "nn/st_index.h"

/* Finds tensor `name`; returns DT_OK with *file set, or an error naming it. */
static dt_status src_find(const dt_st_sources *s, const char *name, dt_tensor *t, int *file) {
    if ((*file = dt_st_sources_find(s, name, t)) >= 0) return DT_OK;
    return dt_error_set(DT_ERR_FORMAT, "%s: missing tensor '%s'", s->n ? s->paths[0] : "?", name);
}

static int ignored(const char *name, const char *const *ignore) {
    size_t n = strlen(name);
    for (int i = 0; ignore && ignore[i]; i++) {
        size_t k = strlen(ignore[i]);
        if (n >= k && !strcmp(name + n - k, ignore[i])) return 1;
    }
    return 0;
}

/* Checks that `name` exists with a float dtype and dst's shape; fills *src. */
static dt_status check_one(const dt_st_sources *s, const char *name, const dt_tensor *dst,
                           dt_tensor *src) {
    int fi = 0;
    dt_status st = src_find(s, name, src, &fi);
    if (st != DT_OK) return st;
    if (src->dtype != DT_F32 && src->dtype != DT_BF16 && src->dtype != DT_F16)
        return dt_error_set(DT_ERR_DTYPE, "%s: tensor '%s' is %s, expected a float type",
                            s->paths[fi], name, dt_dtype_name(src->dtype));
    if (!dt_tensor_same_shape(src, dst)) {
        char a[96], b[96];
        return dt_error_set(DT_ERR_SHAPE, "%s: tensor '%s' has shape %s, the model needs %s",
                            s->paths[fi], name, dt_shape_str(a, sizeof a, src->ndim, src->shape),
                            dt_shape_str(b, sizeof b, dst->ndim, dst->shape));
    }
    return DT_OK;
}

/* Two passes: everything is checked before anything is copied, so a refused file leaves the
 * model's parameters untouched. */
static int is_adapter(const char *name) {
    return strstr(name, ".lora_A.") || strstr(name, ".lora_B.");
}

static dt_status load(dt_graph *g, const char *path, const char *const *ignore, int skip_lora);

dt_status dt_model_load(dt_graph *g, const char *path, const char *const *ignore) {
    return load(g, path, ignore, 0);
}

dt_status dt_model_load_base(dt_graph *g, const char *path, const char *const *ignore) {
    return load(g, path, ignore, 1);
}

static dt_status load(dt_graph *g, const char *path, const char *const *ignore, int skip_lora) {
    dt_st_sources s;
    dt_status st = dt_st_sources_open(path, &s);
    int np = dt_graph_param_count(g);
    for (int pass = 0; pass < 2 && st == DT_OK; pass++) {
        for (int i = 0; i < np && st == DT_OK; i++) {
            const dt_param_info *pi = dt_graph_param_info(g, i);
            const dt_tensor *dst = dt_graph_value(g, pi->id);
            dt_tensor src;
            if (skip_lora && is_adapter(pi->name)) continue;
            if (!dst || !dst->data)
                st = dt_error_set(DT_ERR_STATE, "load %s: graph is not compiled", path);
            else if ((st = check_one(&s, pi->name, dst, &src)) == DT_OK && pass == 1) {
                dt_tensor d = *dst;
                st = dt_tensor_copy(&d, &src);
            }
        }
        /* Tensors the model does not have: an error, so a wrong architecture is not loaded. */
        for (int f = 0; pass == 0 && f < s.n && st == DT_OK; f++)
            for (int k = 0; k < dt_st_count(s.files[f]) && st == DT_OK; k++) {
                const char *nm = dt_st_name(s.files[f], k);
                if (dt_graph_find(g, nm) < 0 && !ignored(nm, ignore))
                    st = dt_error_set(DT_ERR_FORMAT,
                                      "%s: tensor '%s' is not a parameter of the model", s.paths[f],
                                      nm);
            }
    }
    dt_st_sources_close(&s);
    return st;
}

dt_status dt_model_save(dt_graph *g, const char *path, int64_t bn_batches) {
    int np = dt_graph_param_count(g), n = 0;
    dt_st_entry *e = calloc((size_t)np * 2 + 1, sizeof *e);
    dt_tensor *extra = calloc((size_t)np + 1, sizeof *extra);
    char **names = calloc((size_t)np + 1, sizeof *names);
    int64_t nb = bn_batches;
    int n_extra = 0;
    dt_status st = DT_OK;
    if (!e || !extra || !names) {
        st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        const dt_tensor *v = dt_graph_value(g, pi->id);
        if (!v || !v->data) {
            st = dt_error_set(DT_ERR_STATE, "save %s: graph is not compiled", path);
            goto done;
        }
        e[n].name = pi->name, e[n++].t = v;
        const char *suf = ".running_var";
        size_t ln = strlen(pi->name), ls = strlen(suf);
        if (bn_batches >= 0 && ln > ls && !strcmp(pi->name + ln - ls, suf)) {
            names[n_extra] = malloc(ln + 16);
            snprintf(names[n_extra], ln + 16, "%.*s.num_batches_tracked", (int)(ln - ls), pi->name);
            dt_tensor_init(&extra[n_extra], &nb, DT_I64, 0, NULL);
            e[n].name = names[n_extra], e[n++].t = &extra[n_extra];
            n_extra++;
        }
    }
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    st = dt_st_save(path, e, n, mk, mv, 1);
done:
    for (int i = 0; i < n_extra; i++) free(names[i]);
    free(names), free(extra), free(e);
    return st;
}
