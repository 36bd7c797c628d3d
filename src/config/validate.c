/* Cross-key checks (run once every override is in), the YAML dump of the resolved config, and
 * the schema help. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "config/config_impl.h"
#include "core/fsmode.h"
#include "dtrain/device.h"

/* Error "<where key was set>: <message>". */
static dt_status cross(const dt_config *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dt_status cross(const dt_config *c, const char *key, const char *fmt, ...) {
    char where[DT_CFG_STR_MAX + 32], msg[1024];
    int k = dt_cfg_key_index(key);
    dt_cfg_where(c, k >= 0 ? c->line[k] : 0, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error_set(DT_ERR_INVALID, "%s: %s", where, msg);
}

/* The photo transform keys (data.crop_scale ... data.std): counts and ranges. */
static dt_status image_keys(const dt_config *c) {
    const dt_config_values *v = &c->v;
    double a[4], m[4], sd[4];
    int n, nm, ns;
    struct {
        const dt_config_list *l;
        const char *key;
    } pairs[2] = {{&v->data.crop_scale, "data.crop_scale"},
                  {&v->data.crop_ratio, "data.crop_ratio"}};
    for (int i = 0; i < 2; i++) {
        if (dt_config_numbers(pairs[i].l, pairs[i].key, a, 4, &n) != DT_OK) {
            char e[512];
            snprintf(e, sizeof e, "%s", dt_last_error());
            return cross(c, pairs[i].key, "%s", e);
        }
        if (n != 2 || !(a[0] > 0 && a[0] <= a[1]) || (i == 0 && a[1] > 1))
            return cross(c, pairs[i].key, "%s: need two numbers [min, max] with 0 < min <= max%s",
                         pairs[i].key, i == 0 ? " <= 1" : "");
    }
    if (dt_config_numbers(&v->data.jitter, "data.jitter", a, 4, &n) != DT_OK || n != 3 ||
        !(a[0] >= 0 && a[1] >= 0 && a[2] >= 0))
        return cross(c, "data.jitter",
                     "data.jitter: need three numbers >= 0 (brightness, contrast, saturation)");
    if (dt_config_numbers(&v->data.mean, "data.mean", m, 4, &nm) != DT_OK ||
        dt_config_numbers(&v->data.std, "data.std", sd, 4, &ns) != DT_OK) {
        char e[512];
        snprintf(e, sizeof e, "%s", dt_last_error());
        return cross(c, strstr(e, "data.std") ? "data.std" : "data.mean", "%s", e);
    }
    if (nm != ns || (nm != 0 && nm != 1 && nm != 3))
        return cross(c, "data.mean",
                     "data.mean has %d numbers, data.std %d: give both with one per channel (1 "
                     "or 3), or neither",
                     nm, ns);
    for (int i = 0; i < ns; i++)
        if (!(sd[i] > 0))
            return cross(c, "data.std", "data.std: item %d is %g, not > 0", i + 1, sd[i]);
    int64_t size = v->data.image_size ? v->data.image_size : 224;
    if (v->data.resize && v->data.resize < size)
        return cross(c, "data.resize",
                     "data.resize %lld is below the image size %lld (the centre crop needs "
                     "resize >= size)",
                     (long long)v->data.resize, (long long)size);
    return DT_OK;
}

dt_status dt_config_validate(const dt_config *c) {
    if (!c) return dt_error_set(DT_ERR_INVALID, "config validate: NULL config");
    const dt_config_values *v = &c->v;
    const int llama = v->model.kind == DT_CFG_MODEL_LLAMA;
    if (!llama) {
        int64_t d = v->model.depth;
        if (d != 18 && d != 34 && d != 50 && d != 101 && d != 152)
            return cross(c, "model.depth",
                         "model.depth: %lld is not a ResNet depth (expected 18, 34, 50, 101 or "
                         "152)",
                         (long long)d);
    }
    if (llama && !v->model.hf_path[0])
        return cross(c, "model.kind",
                     "model.kind is llama but model.hf_path is empty (expected a Hugging Face "
                     "folder or config.json)");
    if (v->model.init == DT_CFG_INIT_PRETRAINED && !v->model.hf_path[0])
        return cross(c, "model.init",
                     "model.init is pretrained but model.hf_path is empty (expected the weights' "
                     "folder or file)");
    {
        dt_device d;
        int is_auto = 0;
        if (dt_device_parse(v->train.device, &d, &is_auto) != DT_OK)
            return cross(c, "train.device",
                         "train.device: '%s' is not a device (expected auto, cpu, cuda or "
                         "cuda:N)",
                         v->train.device);
        /* NCCL moves device buffers: a run that trains on the CPU has none to give it */
        if (v->dist.gpu_comm == DT_CFG_GPU_COMM_NCCL && d.kind == DT_DEVICE_CPU && !is_auto)
            return cross(c, "dist.gpu_comm",
                         "dist.gpu_comm is nccl but train.device is '%s' (NCCL needs "
                         "train.device=cuda)",
                         v->train.device);
    }
    if (v->lora.enabled && !llama)
        return cross(c, "lora.enabled",
                     "lora.enabled is true but model.kind is 'resnet' (LoRA needs model.kind "
                     "llama)");
    if (v->lora.enabled && v->lora.targets.n == 0)
        return cross(c, "lora.targets", "lora.enabled is true but lora.targets is empty");
    if (v->lora.shard_base == DT_CFG_SHARD_TRUE && !v->lora.enabled)
        return cross(c, "lora.shard_base", "lora.shard_base is true but lora.enabled is false");
    if (v->lora.shard_base == DT_CFG_SHARD_TRUE && dt_config_shares_auto(v->dist.batch_shares))
        return cross(c, "lora.shard_base",
                     "lora.shard_base is true but dist.batch_shares is auto (a rebuilt graph "
                     "would need the sharded base loaded again; use fixed shares)");
    if (v->optim.nesterov && v->optim.name != DT_CFG_OPTIM_SGD)
        return cross(c, "optim.nesterov",
                     "optim.nesterov is true but optim.name is adamw "
                     "(Nesterov momentum is an SGD option)");
    if (v->optim.nesterov && !(v->optim.momentum > 0))
        return cross(c, "optim.nesterov",
                     "optim.nesterov is true but optim.momentum is %g (Nesterov needs momentum "
                     "> 0)",
                     v->optim.momentum);
    {
        int64_t w[64];
        int nw;
        if (dt_config_batch_shares(v->dist.batch_shares, w, 64, &nw) != DT_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", dt_last_error());
            return cross(c, "dist.batch_shares", "%s", m);
        }
    }
    if (v->train.steps == 0 && v->train.epochs == 0)
        return cross(c, "train.steps", "train.steps and train.epochs are both 0 (set one of them)");
    int decays = v->schedule.kind == DT_CFG_SCHED_LINEAR || v->schedule.kind == DT_CFG_SCHED_COSINE;
    int64_t total = v->schedule.total_steps ? v->schedule.total_steps : v->train.steps;
    if (decays && total > 0 && v->schedule.warmup_steps >= total)
        return cross(c, "schedule.warmup_steps",
                     "schedule.warmup_steps %lld is not below where the learning-rate decay "
                     "ends, %lld (%s=%lld): for a run this short give a shorter warmup, "
                     "e.g. schedule.warmup_steps=%lld, or a later end, schedule.total_steps=%lld "
                     "or more",
                     (long long)v->schedule.warmup_steps, (long long)total,
                     v->schedule.total_steps ? "schedule.total_steps" : "train.steps",
                     (long long)total, (long long)(total / 10),
                     (long long)v->schedule.warmup_steps + 1);
    if (decays && v->schedule.min_lr > v->optim.lr)
        return cross(c, "schedule.min_lr", "schedule.min_lr %g is above optim.lr %g",
                     v->schedule.min_lr, v->optim.lr);
    dt_status ist = image_keys(c);
    if (ist != DT_OK) return ist;
    const char *r = v->ckpt.resume;
    if (strcmp(r, "auto") && strcmp(r, "never")) {
        const char *p = r[0] ? dt_cfg_uri_problem(r) : "empty";
        if (p && strchr(r, '@') && strstr(p, "credentials")) /* the value holds a secret */
            return cross(c, "ckpt.resume", "ckpt.resume: %s", p);
        if (p)
            return cross(c, "ckpt.resume",
                         "ckpt.resume: '%s': %s (expected auto, never or a checkpoint URI)", r, p);
    }
    return DT_OK;
}

/* ---------------------------------------------------------------- dump */

enum { SEC_MAX = 64 };

/* Keys come grouped by section (schema.c): prints `lead` and "SECTION:" before the first key of
 * each, `sec` [SEC_MAX] holding the current one. Returns the key's name within its section. */
static const char *section_start(FILE *f, char *sec, const char *name, const char *lead) {
    const char *dot = strchr(name, '.');
    size_t sl = (size_t)(dot - name);
    if (strlen(sec) != sl || strncmp(sec, name, sl)) {
        snprintf(sec, SEC_MAX, "%.*s", (int)sl, name);
        fprintf(f, "%s%s:\n", lead, sec);
    }
    return dot + 1;
}

static void put_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

dt_status dt_config_dump_yaml(const dt_config *c, FILE *f) {
    if (!c || !f) return dt_error_set(DT_ERR_INVALID, "config dump: NULL config or file");
    fprintf(f, "# dtrain config, resolved (every key; load it with dtrain train FILE)\n");
    char sec[SEC_MAX] = "", buf[DT_CFG_STR_MAX + 64];
    for (int k = 0; k < dt_config_key_count(); k++) {
        const dt_config_key *key = dt_config_key_at(k);
        fprintf(f, "  %s: ", section_start(f, sec, key->name, ""));
        const void *fld = (const char *)dt_config_get_values(c) + key->offset;
        if (key->type == DT_CFG_LIST) {
            const dt_config_list *l = fld;
            fputc('[', f);
            for (int i = 0; i < l->n; i++) {
                if (i) fputs(", ", f);
                put_quoted(f, l->item[i]);
            }
            fputc(']', f);
        } else if (key->type == DT_CFG_STR || key->type == DT_CFG_PATH || key->type == DT_CFG_URI) {
            put_quoted(f, fld);
        } else {
            dt_cfg_value_text(c, k, buf, sizeof buf);
            fputs(buf, f);
        }
        fputc('\n', f);
    }
    if (ferror(f)) return dt_error_set(DT_ERR_IO, "config dump: write failed");
    return DT_OK;
}

dt_status dt_config_save_yaml(const dt_config *c, const char *path) {
    if (!path) return dt_error_set(DT_ERR_INVALID, "config save: NULL path");
    FILE *f = dt_fcreate(path, "w"); /* 0640: core/fsmode.h */
    if (!f) return dt_error_set(DT_ERR_IO, "%s: cannot create the file", path);
    dt_status st = dt_config_dump_yaml(c, f);
    if (fclose(f) != 0 && st == DT_OK) st = dt_error_set(DT_ERR_IO, "%s: write failed", path);
    return st;
}

/* ---------------------------------------------------------------- help */

void dt_config_help(FILE *f) {
    fprintf(f, "Config keys (YAML sections; override any as section.key=value):\n");
    char sec[SEC_MAX] = "";
    for (int k = 0; k < dt_config_key_count(); k++) {
        const dt_config_key *key = dt_config_key_at(k);
        section_start(f, sec, key->name, "\n");
        char type[200], def[DT_CFG_STR_MAX + 8];
        if (key->type == DT_CFG_ENUM || (key->type == DT_CFG_LIST && key->choices))
            snprintf(type, sizeof type, "%s %s", key->type == DT_CFG_ENUM ? "" : "list of",
                     key->choices);
        else
            snprintf(type, sizeof type, "%s", dt_config_type_name(key->type));
        if ((key->range & DT_CFG_HAS_MIN) || (key->range & DT_CFG_HAS_MAX)) {
            size_t l = strlen(type);
            unsigned r = key->range;
            if ((r & DT_CFG_HAS_MIN) && (r & DT_CFG_HAS_MAX))
                snprintf(type + l, sizeof type - l, " %c%.10g, %.10g%c",
                         (r & DT_CFG_MIN_OPEN) ? '(' : '[', key->min, key->max,
                         (r & DT_CFG_MAX_OPEN) ? ')' : ']');
            else if (r & DT_CFG_HAS_MIN)
                snprintf(type + l, sizeof type - l, " %s %.10g",
                         (r & DT_CFG_MIN_OPEN) ? ">" : ">=", key->min);
        }
        const char *t = type[0] == ' ' ? type + 1 : type;
        snprintf(def, sizeof def, "%s", key->def[0] ? key->def : "\"\"");
        fprintf(f, "  %-26s %-30s default %-10s %s\n", key->name, t, def, key->help);
    }
}
