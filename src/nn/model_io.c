/* Model weights in and out by parameter name (see dt_model_load / dt_model_save). */
#include <stdint.h>
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

/* What load does with the frozen parameters: copy them (converting), point them into the
 * files where their bytes can be used as they are, or leave them alone. */
enum { FROZEN_COPY, FROZEN_MAP, FROZEN_MAP_ONLY };

static dt_status load(dt_graph *g, const dt_st_sources *s, const char *const *ignore, int skip_lora,
                      int frozen, dt_base_report *rep);

static dt_status load_path(dt_graph *g, const char *path, const char *const *ignore, int skip_lora,
                           int frozen) {
    dt_st_sources s;
    dt_status st = dt_st_sources_open(path, &s);
    if (st == DT_OK) st = load(g, &s, ignore, skip_lora, frozen, NULL);
    dt_st_sources_close(&s);
    return st;
}

dt_status dt_model_load(dt_graph *g, const char *path, const char *const *ignore) {
    return load_path(g, path, ignore, 0, FROZEN_COPY);
}

dt_status dt_model_load_base(dt_graph *g, const char *path, const char *const *ignore) {
    return load_path(g, path, ignore, 1, FROZEN_COPY);
}

struct dt_base_map {
    dt_st_sources s;
    const char *const *ignore;
};

dt_status dt_model_map_base(dt_graph *g, const char *path, const char *const *ignore, int copy_rest,
                            dt_base_map **out, dt_base_report *rep) {
    *out = NULL;
    dt_base_map *m = calloc(1, sizeof *m);
    if (!m) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    dt_status st = dt_st_sources_open(path, &m->s);
    m->ignore = ignore;
    if (st == DT_OK) st = dt_base_map_attach(m, g, copy_rest, rep);
    if (st != DT_OK) {
        dt_base_map_close(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

dt_status dt_base_map_attach(const dt_base_map *m, dt_graph *g, int copy_rest,
                             dt_base_report *rep) {
    dt_base_report r = {0};
    dt_status st = load(g, &m->s, m->ignore, 1, copy_rest ? FROZEN_MAP : FROZEN_MAP_ONLY, &r);
    if (rep) *rep = r;
    return st;
}

void dt_base_map_drop_pages(const dt_base_map *m) {
    for (int f = 0; m && f < m->s.n; f++) dt_st_drop_pages(m->s.files[f]);
}

void dt_base_map_close(dt_base_map *m) {
    if (!m) return;
    dt_st_sources_close(&m->s);
    free(m);
}

/* Whether src's bytes can serve as dst as they are; if not, why (for the log line). */
static int mappable(const dt_tensor *src, const dt_tensor *dst, char *why, size_t n) {
    size_t es = dt_dtype_size(dst->dtype);
    if (src->dtype != dst->dtype)
        snprintf(why, n, "stored as %s, the base needs %s", dt_dtype_name(src->dtype),
                 dt_dtype_name(dst->dtype));
    else if (es && (uintptr_t)src->data % es)
        snprintf(why, n, "its data in the file is not aligned to %zu bytes", es);
    else
        return 1;
    return 0;
}

static dt_status load(dt_graph *g, const dt_st_sources *s, const char *const *ignore, int skip_lora,
                      int frozen, dt_base_report *rep) {
    const char *path = s->n ? s->paths[0] : "?";
    dt_status st = DT_OK;
    int np = dt_graph_param_count(g);
    for (int pass = 0; pass < 2 && st == DT_OK; pass++) {
        for (int i = 0; i < np && st == DT_OK; i++) {
            const dt_param_info *pi = dt_graph_param_info(g, i);
            const dt_tensor *dst = dt_graph_value(g, pi->id);
            dt_tensor src;
            int fz = (pi->flags & DT_PARAM_FROZEN) != 0;
            char why[160] = "";
            if (skip_lora && is_adapter(pi->name)) continue;
            if (!dst || !dst->data)
                st = dt_error_set(DT_ERR_STATE, "load %s: graph is not compiled", path);
            else if ((st = check_one(s, pi->name, dst, &src)) != DT_OK || pass == 0)
                continue;
            else if (fz && frozen != FROZEN_COPY && mappable(&src, dst, why, sizeof why)) {
                st = dt_graph_param_external(g, pi->id, src.data);
                if (rep) rep->n_mapped++, rep->mapped_bytes += dt_tensor_nbytes(dst);
            } else {
                if (fz && rep) {
                    if (!rep->n_other++)
                        snprintf(rep->why, sizeof rep->why, "'%s' %s", pi->name, why);
                    rep->other_bytes += dt_tensor_nbytes(dst);
                }
                dt_tensor d = *dst;
                if (!fz || frozen != FROZEN_MAP_ONLY) st = dt_tensor_copy(&d, &src);
            }
        }
        /* Tensors the model does not have: an error, so a wrong architecture is not loaded. */
        for (int f = 0; pass == 0 && f < s->n && st == DT_OK; f++)
            for (int k = 0; k < dt_st_count(s->files[f]) && st == DT_OK; k++) {
                const char *nm = dt_st_name(s->files[f], k);
                if (dt_graph_find(g, nm) < 0 && !ignored(nm, ignore))
                    st = dt_error_set(DT_ERR_FORMAT,
                                      "%s: tensor '%s' is not a parameter of the model",
                                      s->paths[f], nm);
            }
    }
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
