/* trainer_state.json: the one encoder and decoder of a checkpoint's state (docs/checkpoints.md
 * lists the keys; include/dtrain/checkpoint.h the rules). The file is written by dtrain, but
 * read back from storage that anything may have touched, so the decoder holds every key to its
 * type and range before a reader does arithmetic with it: (int64_t) of NaN, inf or 1e300 is
 * undefined, 2.5 is not silently truncated to 2, a file name cannot lead out of its directory. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/file.h"
#include "core/json.h"
#include "dtrain/checkpoint.h"

#define INT_MAX_EXCL 9e15                /* integers a double holds exactly, with room */
#define SIZE_MAX_INCL 9007199254740992.0 /* 2^53: file sizes, inclusive */

void dt_ckpt_state_init(dt_ckpt_state *s) {
    memset(s, 0, sizeof *s);
    s->step = s->epoch = s->samples_seen = -1;
    s->rng_seed = s->rng_counter = s->sched_step = s->sched_total = s->sched_start = -1;
    s->optimizer_step = s->layout_n = s->layout_shard = -1;
    s->world_size = s->zero_stage = s->layout_shards = -1;
    s->batch_parts_auto_step = -1;
    s->sched_lr = NAN;
}

void dt_ckpt_state_free(dt_ckpt_state *s) {
    free(s->format), free(s->data_cursor), free(s->config);
    free(s->code_version), free(s->dtrain_version);
    for (int i = 0; i < s->n_params; i++) free(s->params[i].name);
    for (int i = 0; i < s->n_files; i++) free(s->files[i].name);
    free(s->params), free(s->files), free(s->batch_parts);
    dt_ckpt_state_init(s);
}

void dt_ckpt_optim_name(char name[64], int shard, int shards) {
    snprintf(name, 64, "optim-%05d-of-%05d.safetensors", shard, shards);
}

dt_status dt_ckpt_state_set_metric(dt_ckpt_state *s, const char *name, double value) {
    if (s->n_metrics == DT_CKPT_MAX_METRICS || strlen(name) >= sizeof s->metrics[0].name)
        return dt_error_set(DT_ERR_RANGE,
                            "checkpoint: metric %.80s: at most %d metrics of up to "
                            "63 bytes",
                            name, DT_CKPT_MAX_METRICS);
    dt_ckpt_metric *m = &s->metrics[s->n_metrics++];
    snprintf(m->name, sizeof m->name, "%s", name);
    m->value = value;
    return DT_OK;
}

double dt_ckpt_state_metric(const dt_ckpt_state *s, const char *name) {
    for (int i = 0; i < s->n_metrics; i++)
        if (!strcmp(s->metrics[i].name, name)) return s->metrics[i].value;
    return NAN;
}

const dt_ckpt_file_entry *dt_ckpt_state_file(const dt_ckpt_state *s, const char *name) {
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].name, name)) return &s->files[i];
    return NULL;
}

/* ---- encode ------------------------------------------------------------------------------ */

static void add_int(cJSON *o, const char *key, int64_t v) {
    if (v >= 0) cJSON_AddNumberToObject(o, key, (double)v);
}

static void add_str(cJSON *o, const char *key, const char *v) {
    if (v) cJSON_AddStringToObject(o, key, v);
}

dt_status dt_ckpt_state_encode(const dt_ckpt_state *s, char **json) {
    *json = NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o) return dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    add_str(o, "format", s->format);
    add_int(o, "step", s->step);
    add_int(o, "epoch", s->epoch);
    add_int(o, "samples_seen", s->samples_seen);
    add_str(o, "data_cursor", s->data_cursor);
    if (s->rng_seed >= 0 || s->rng_counter >= 0) {
        cJSON *r = cJSON_AddObjectToObject(o, "rng");
        add_int(r, "seed", s->rng_seed);
        add_int(r, "counter", s->rng_counter);
    }
    if (s->sched_step >= 0 || s->sched_total >= 0 || s->sched_start >= 0 || !isnan(s->sched_lr)) {
        cJSON *sc = cJSON_AddObjectToObject(o, "schedule");
        add_int(sc, "step", s->sched_step);
        add_int(sc, "start", s->sched_start);
        add_int(sc, "total_steps", s->sched_total);
        if (!isnan(s->sched_lr)) cJSON_AddNumberToObject(sc, "lr", s->sched_lr);
    }
    add_int(o, "optimizer_step", s->optimizer_step);
    add_int(o, "world_size", s->world_size);
    if (s->n_batch_parts) {
        cJSON *bp = cJSON_AddArrayToObject(o, "batch_parts");
        for (int i = 0; bp && i < s->n_batch_parts; i++)
            cJSON_AddItemToArray(bp, cJSON_CreateNumber((double)s->batch_parts[i]));
        add_int(o, "batch_parts_auto_step", s->batch_parts_auto_step);
    }
    add_int(o, "zero_stage", s->zero_stage);
    if (s->layout_n >= 0) {
        cJSON *ly = cJSON_AddObjectToObject(o, "layout");
        add_int(ly, "n", s->layout_n);
        add_int(ly, "shards", s->layout_shards);
        add_int(ly, "shard", s->layout_shard);
        cJSON *ps = cJSON_AddArrayToObject(ly, "params");
        for (int i = 0; ps && i < s->n_params; i++) {
            cJSON *a = cJSON_CreateArray();
            cJSON_AddItemToArray(a, cJSON_CreateString(s->params[i].name));
            cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->params[i].offset));
            cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->params[i].numel));
            cJSON_AddItemToArray(ps, a);
        }
    }
    if (s->n_metrics) {
        cJSON *m = cJSON_AddObjectToObject(o, "metrics");
        for (int i = 0; m && i < s->n_metrics; i++)
            cJSON_AddNumberToObject(m, s->metrics[i].name, s->metrics[i].value);
    }
    add_str(o, "config", s->config);
    add_str(o, "code_version", s->code_version);
    add_str(o, "dtrain_version", s->dtrain_version);
    if (s->n_files) {
        cJSON *files = cJSON_AddObjectToObject(o, "files");
        for (int i = 0; files && i < s->n_files; i++) {
            cJSON *f = cJSON_AddObjectToObject(files, s->files[i].name);
            char hex[17];
            snprintf(hex, sizeof hex, "%016" PRIx64, s->files[i].xxh3);
            cJSON_AddNumberToObject(f, "bytes", (double)s->files[i].bytes);
            cJSON_AddStringToObject(f, "xxh3", hex);
        }
    }
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    return *json ? DT_OK : dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
}

/* ---- decode ------------------------------------------------------------------------------ */

typedef struct dec {
    const char *where;
    dt_status st; /* the first error */
} dec;

static void fail(dec *d, const char *key, const char *what, const cJSON *v) {
    if (d->st != DT_OK) return;
    char val[64] = "";
    if (cJSON_IsNumber(v)) /* the value as written: 1152921504606846976, 2.5, 1e+300, inf */
        snprintf(val, sizeof val,
                 v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e20 ? " %.0f"
                                                                                        : " %.17g",
                 v->valuedouble);
    d->st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s%s %s", d->where, key, val, what);
}

/* v is an integer in [lo, hi) (NaN and inf are not). */
static int is_int(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble < hi &&
           v->valuedouble == floor(v->valuedouble);
}

/* o must be an object without a key twice (cJSON would find the first copy, Python the last). */
static int object_ok(dec *d, const cJSON *o, const char *key) {
    if (!cJSON_IsObject(o)) {
        fail(d, key, "is not an object", NULL);
        return 0;
    }
    const char *dup = NULL;
    int r = dt_json_duplicate_key(o, &dup);
    if (r < 0) d->st = d->st ? d->st : dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
    if (r > 0 && d->st == DT_OK)
        d->st = dt_error_set(DT_ERR_FORMAT, "checkpoint %s: %s holds key \"%.100s\" twice",
                             d->where, key, dup);
    return r == 0 && d->st == DT_OK;
}

/* An integer in [lo, hi) read into *out (`range` says it in the message); absent: unchanged. */
static void get_int(dec *d, const cJSON *o, const char *name, const char *key, double lo, double hi,
                    const char *range, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v) return;
    if (!is_int(v, lo, hi)) {
        char what[96];
        snprintf(what, sizeof what, "is not an integer in %s", range);
        fail(d, key, what, v);
        return;
    }
    *out = (int64_t)v->valuedouble;
}

/* get_int for the keys held in an int */
static void get_small(dec *d, const cJSON *o, const char *name, const char *key, double lo,
                      double hi, const char *range, int *out) {
    int64_t v = *out;
    get_int(d, o, name, key, lo, hi, range, &v);
    *out = (int)v;
}

static void get_str(dec *d, const cJSON *o, const char *name, char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || d->st) return;
    if (!cJSON_IsString(v)) {
        fail(d, name, "is not a string", NULL);
        return;
    }
    if (!(*out = strdup(v->valuestring)))
        d->st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
}

static void get_params(dec *d, const cJSON *ps, dt_ckpt_state *s) {
    if (!cJSON_IsArray(ps)) {
        fail(d, "layout.params", "is not an array", NULL);
        return;
    }
    int n = cJSON_GetArraySize(ps);
    if (!(s->params = calloc((size_t)n + 1, sizeof *s->params))) {
        d->st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
        return;
    }
    const cJSON *a;
    cJSON_ArrayForEach(a, ps) {
        char key[64];
        snprintf(key, sizeof key, "layout.params[%d]", s->n_params);
        const cJSON *nm = cJSON_GetArrayItem(a, 0);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3 || !cJSON_IsString(nm)) {
            fail(d, key, "is not [name, offset, elements]", NULL);
            return;
        }
        dt_ckpt_param_entry *p = &s->params[s->n_params];
        p->offset = p->numel = -1;
        const cJSON *off = cJSON_GetArrayItem(a, 1), *num = cJSON_GetArrayItem(a, 2);
        if (!is_int(off, 0, INT_MAX_EXCL) || !is_int(num, 0, INT_MAX_EXCL)) {
            fail(d, key, "has an offset or size that is not an integer in [0, 9e15)", NULL);
            return;
        }
        if (!(p->name = strdup(nm->valuestring))) {
            d->st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
            return;
        }
        p->offset = (int64_t)off->valuedouble, p->numel = (int64_t)num->valuedouble;
        s->n_params++;
    }
}

static void get_parts(dec *d, const cJSON *bp, dt_ckpt_state *s) {
    int n = cJSON_GetArraySize(bp);
    if (!cJSON_IsArray(bp) || n < 1 || n >= 10000000) {
        fail(d, "batch_parts", "is not an array of one batch size per rank", NULL);
        return;
    }
    if (!(s->batch_parts = calloc((size_t)n, sizeof *s->batch_parts))) {
        d->st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
        return;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, bp) {
        if (!is_int(e, 1, INT_MAX_EXCL)) {
            fail(d, "batch_parts", "holds a value that is not an integer in [1, 9e15)", e);
            return;
        }
        s->batch_parts[s->n_batch_parts++] = (int64_t)e->valuedouble;
    }
}

static int is_hex16(const char *h) {
    return strlen(h) == 16 && strspn(h, "0123456789abcdef") == 16;
}

static void get_files(dec *d, const cJSON *files, dt_ckpt_state *s) {
    if (!object_ok(d, files, "files")) return;
    int n = cJSON_GetArraySize(files);
    if (!(s->files = calloc((size_t)n + 1, sizeof *s->files))) {
        d->st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
        return;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const char *name = f->string ? f->string : "";
        char key[300];
        snprintf(key, sizeof key, "files[\"%.200s\"]", name);
        if (!dt_plain_name(name)) {
            fail(d, key,
                 "is not a plain file name in the checkpoint directory (no '/', '.' or "
                 "'..')",
                 NULL);
            return;
        }
        const cJSON *jb = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        const cJSON *jh = cJSON_GetObjectItemCaseSensitive(f, "xxh3");
        if (!cJSON_IsObject(f) || !cJSON_IsNumber(jb) || !cJSON_IsString(jh)) {
            fail(d, key, "needs \"bytes\" and \"xxh3\"", NULL);
            return;
        }
        /* a size is an integer a double holds exactly (beyond 2^53 comparisons with a file's
         * size would not be exact) */
        if (!is_int(jb, 0, SIZE_MAX_INCL + 1)) {
            char k2[320];
            snprintf(k2, sizeof k2, "%s.bytes", key);
            fail(d, k2, "is not a size (an integer in [0, 2^53])", jb);
            return;
        }
        if (!is_hex16(jh->valuestring)) {
            char k2[320];
            snprintf(k2, sizeof k2, "%s.xxh3", key);
            fail(d, k2, "is not 16 lowercase hex digits", NULL);
            return;
        }
        dt_ckpt_file_entry *e = &s->files[s->n_files];
        if (!(e->name = strdup(name))) {
            d->st = dt_error_set(DT_ERR_NOMEM, "checkpoint: out of memory");
            return;
        }
        e->bytes = (int64_t)jb->valuedouble;
        e->xxh3 = strtoull(jh->valuestring, NULL, 16);
        s->n_files++;
    }
}

static void get_metrics(dec *d, const cJSON *m, dt_ckpt_state *s) {
    if (!object_ok(d, m, "metrics")) return;
    const cJSON *e;
    cJSON_ArrayForEach(e, m) {
        char key[100];
        snprintf(key, sizeof key, "metrics.%.60s", e->string ? e->string : "");
        if (!cJSON_IsNumber(e) && !cJSON_IsNull(e)) { /* null: what cJSON writes for NaN */
            fail(d, key, "is not a number", NULL);
            return;
        }
        if (dt_ckpt_state_set_metric(s, e->string ? e->string : "",
                                     cJSON_IsNumber(e) ? e->valuedouble : NAN) != DT_OK) {
            fail(d, key, "is one metric too many or too long a name", NULL);
            return;
        }
    }
}

static void decode(dec *d, const cJSON *o, dt_ckpt_state *s) {
    if (!object_ok(d, o, "the top level")) return;
    get_str(d, o, "format", &s->format);
    if (s->format && strcmp(s->format, DT_CKPT_FORMAT) && !d->st)
        d->st = dt_error_set(DT_ERR_FORMAT,
                             "checkpoint %s: format \"%.60s\" is not %s (written by another "
                             "version of dtrain?)",
                             d->where, s->format, DT_CKPT_FORMAT);
    get_int(d, o, "step", "step", 0, INT_MAX_EXCL, "[0, 9e15)", &s->step);
    get_int(d, o, "epoch", "epoch", 0, INT_MAX_EXCL, "[0, 9e15)", &s->epoch);
    get_int(d, o, "samples_seen", "samples_seen", 0, INT_MAX_EXCL, "[0, 9e15)", &s->samples_seen);
    get_str(d, o, "data_cursor", &s->data_cursor);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "rng");
    if (r && object_ok(d, r, "rng")) {
        /* train.seed has no upper bound: a large one is recorded rounded, as a double holds it */
        get_int(d, r, "seed", "rng.seed", 0, 9.2e18, "[0, 9.2e18)", &s->rng_seed);
        get_int(d, r, "counter", "rng.counter", 0, INT_MAX_EXCL, "[0, 9e15)", &s->rng_counter);
    }
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o, "schedule");
    if (sc && object_ok(d, sc, "schedule")) {
        get_int(d, sc, "step", "schedule.step", 0, INT_MAX_EXCL, "[0, 9e15)", &s->sched_step);
        get_int(d, sc, "start", "schedule.start", 0, INT_MAX_EXCL, "[0, 9e15)", &s->sched_start);
        get_int(d, sc, "total_steps", "schedule.total_steps", 0, INT_MAX_EXCL, "[0, 9e15)",
                &s->sched_total);
        const cJSON *lr = cJSON_GetObjectItemCaseSensitive(sc, "lr");
        if (lr && !cJSON_IsNumber(lr) && !cJSON_IsNull(lr))
            fail(d, "schedule.lr", "is not a number", NULL);
        else if (cJSON_IsNumber(lr))
            s->sched_lr = lr->valuedouble;
    }
    get_int(d, o, "optimizer_step", "optimizer_step", 0, INT_MAX_EXCL, "[0, 9e15)",
            &s->optimizer_step);
    get_small(d, o, "world_size", "world_size", 1, 1e7, "[1, 1e7)", &s->world_size);
    const cJSON *bp = cJSON_GetObjectItemCaseSensitive(o, "batch_parts");
    if (bp && !d->st) get_parts(d, bp, s);
    get_int(d, o, "batch_parts_auto_step", "batch_parts_auto_step", 1, INT_MAX_EXCL, "[1, 9e15)",
            &s->batch_parts_auto_step);
    get_small(d, o, "zero_stage", "zero_stage", 0, 4, "[0, 3]", &s->zero_stage);
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layout");
    if (ly && object_ok(d, ly, "layout")) {
        get_int(d, ly, "n", "layout.n", 0, INT_MAX_EXCL, "[0, 9e15)", &s->layout_n);
        get_small(d, ly, "shards", "layout.shards", 1, 1e6, "[1, 1e6)", &s->layout_shards);
        get_int(d, ly, "shard", "layout.shard", 1, INT_MAX_EXCL, "[1, 9e15)", &s->layout_shard);
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(ly, "params");
        if (ps && !d->st) get_params(d, ps, s);
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "metrics");
    if (m && !d->st) get_metrics(d, m, s);
    get_str(d, o, "config", &s->config);
    get_str(d, o, "code_version", &s->code_version);
    get_str(d, o, "dtrain_version", &s->dtrain_version);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(o, "files");
    if (files && !d->st) get_files(d, files, s);
}

dt_status dt_ckpt_state_decode(const char *json, const char *where, dt_ckpt_state *s) {
    dt_ckpt_state_init(s);
    cJSON *o = cJSON_Parse(json ? json : "");
    if (!o) return dt_error_set(DT_ERR_FORMAT, "checkpoint %s: not valid JSON", where);
    dec d = {where, DT_OK};
    decode(&d, o, s);
    cJSON_Delete(o);
    if (d.st != DT_OK) dt_ckpt_state_free(s);
    return d.st;
}

dt_status dt_ckpt_state_load(dt_store *st, const char *dir, dt_ckpt_state *s) {
    char *txt = NULL, where[1300];
    dt_ckpt_state_init(s);
    dt_status rc = dt_ckpt_read_state(st, dir, &txt);
    if (rc != DT_OK) return rc;
    snprintf(where, sizeof where, "%s/%s", dir, DT_CKPT_STATE);
    rc = dt_ckpt_state_decode(txt, where, s);
    free(txt);
    return rc;
}
