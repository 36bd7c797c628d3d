/* Config values: defaults, typed parsing and checking of one value against its schema row,
 * overrides, typed access, and nearest-key suggestions. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "config/config_impl.h"

/* ---------------------------------------------------------------- helpers */

static void *field(dt_config *c, const dt_config_key *k) {
    return (char *)&c->v + k->offset;
}
static const void *cfield(const dt_config *c, const dt_config_key *k) {
    return (const char *)&c->v + k->offset;
}

void dt_cfg_where(const dt_config *c, int line, char *buf, size_t n) {
    if (line > 0)
        snprintf(buf, n, "%s:%d", c->path[0] ? c->path : "config", line);
    else if (line == DT_CFG_FROM_CLI)
        snprintf(buf, n, "command line");
    else
        snprintf(buf, n, "default");
}

static void trim(const char *s, const char **b, size_t *len) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t l = strlen(s);
    while (l && isspace((unsigned char)s[l - 1])) l--;
    *b = s, *len = l;
}

/* Range of key k as text: " in [0, 1)", " >= 0", "" (none). */
static void range_text(const dt_config_key *k, char *buf, size_t n) {
    unsigned r = k->range;
    buf[0] = '\0';
    if ((r & DT_CFG_HAS_MIN) && (r & DT_CFG_HAS_MAX))
        snprintf(buf, n, " in %c%.10g, %.10g%c", (r & DT_CFG_MIN_OPEN) ? '(' : '[', k->min, k->max,
                 (r & DT_CFG_MAX_OPEN) ? ')' : ']');
    else if (r & DT_CFG_HAS_MIN)
        snprintf(buf, n, " %s %.10g", (r & DT_CFG_MIN_OPEN) ? ">" : ">=", k->min);
    else if (r & DT_CFG_HAS_MAX)
        snprintf(buf, n, " %s %.10g", (r & DT_CFG_MAX_OPEN) ? "<" : "<=", k->max);
}

/* choices "a|b|c" -> "a, b, c" */
static void choices_text(const char *ch, char *buf, size_t n) {
    size_t j = 0;
    for (const char *p = ch; *p && j + 3 < n; p++) {
        if (*p == '|') {
            buf[j++] = ',';
            buf[j++] = ' ';
        } else {
            buf[j++] = *p;
        }
    }
    buf[j] = '\0';
}

/* What a key takes, for messages and help: "an integer in [1, 64]", "one of sgd, adamw". */
static void expect_text(const dt_config_key *k, char *buf, size_t n) {
    char r[96], ch[256];
    range_text(k, r, sizeof r);
    switch (k->type) {
    case DT_CFG_INT:
        snprintf(buf, n, "an integer%s", r);
        break;
    case DT_CFG_FLOAT:
        snprintf(buf, n, "a number%s", r);
        break;
    case DT_CFG_BOOL:
        snprintf(buf, n, "true or false");
        break;
    case DT_CFG_ENUM:
        choices_text(k->choices, ch, sizeof ch);
        snprintf(buf, n, "one of %s", ch);
        break;
    case DT_CFG_LIST:
        if (k->choices) {
            choices_text(k->choices, ch, sizeof ch);
            snprintf(buf, n, "a list of: %s", ch);
        } else {
            snprintf(buf, n, "a list of names");
        }
        break;
    case DT_CFG_STR:
        snprintf(buf, n, "a string");
        break;
    case DT_CFG_PATH:
        snprintf(buf, n, "a path");
        break;
    case DT_CFG_URI:
        snprintf(buf, n, "a path, file://PATH or s3://BUCKET[/PREFIX]");
        break;
    }
}

static dt_status bad_value(dt_config *c, int k, int line, dt_status st, const char *problem) {
    const dt_config_key *key = dt_config_key_at(k);
    char where[DT_CFG_STR_MAX + 32], exp[400];
    dt_cfg_where(c, line, where, sizeof where);
    expect_text(key, exp, sizeof exp);
    return dt_error_set(st, "%s: %s: %s (expected %s)", where, key->name, problem, exp);
}

/* Splits choices "a|b|c" into ptrs (pointing into buf); returns the count. */
static int split_choices(const char *ch, char *buf, size_t n, const char **out, int cap) {
    snprintf(buf, n, "%s", ch);
    int cnt = 0;
    for (char *p = buf; p && cnt < cap;) {
        out[cnt++] = p;
        p = strchr(p, '|');
        if (p) *p++ = '\0';
    }
    return cnt;
}

static int choice_index(const char *ch, const char *v, size_t len) {
    int i = 0;
    for (const char *p = ch;; i++) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !strncmp(p, v, len)) return i;
        if (!e) return -1;
        p = e + 1;
    }
}

/* "<where>: <key>: 'adam' is not one of sgd, adamw (did you mean 'adamw'?)" */
static dt_status choice_error(dt_config *c, int k, int line, const char *what, const char *v) {
    const dt_config_key *key = dt_config_key_at(k);
    char buf[512], list[512], hint[160] = "", where[DT_CFG_STR_MAX + 32];
    const char *cand[32];
    int n = split_choices(key->choices, buf, sizeof buf, cand, 32);
    const char *near = dt_cfg_nearest(v, cand, n);
    if (near) snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    choices_text(key->choices, list, sizeof list);
    dt_cfg_where(c, line, where, sizeof where);
    return dt_error_set(DT_ERR_INVALID, "%s: %s: %s'%s' is not one of %s%s", where, key->name, what,
                        v, list, hint);
}

/* ---------------------------------------------------------------- storage URIs */

/* A URL with user information ("s3://KEY:SECRET@bucket"): refused, and never echoed. */
static const char uri_userinfo[] =
    "credentials in the URL (user:secret@) are refused: S3 keys come from AWS_ACCESS_KEY_ID / "
    "AWS_SECRET_ACCESS_KEY or a credentials file (AWS_SHARED_CREDENTIALS_FILE)";

const char *dt_cfg_uri_problem(const char *s) {
    if (!s[0]) return NULL;
    const char *colon = strstr(s, "://");
    if (!colon) return NULL; /* a plain path */
    size_t auth = strcspn(colon + 3, "/?#");
    if (memchr(colon + 3, '@', auth)) return uri_userinfo;
    if (!strncmp(s, "file://", 7)) return s[7] ? NULL : "file:// needs a path";
    if (!strncmp(s, "s3://", 5)) {
        if (!s[5] || s[5] == '/') return "s3:// needs a bucket name";
        return NULL;
    }
    return "unsupported storage scheme";
}

/* ---------------------------------------------------------------- parsing one value */

static int is_null(const char *v, size_t len) {
    return len == 0 || (len == 1 && v[0] == '~') || (len == 4 && !strncasecmp(v, "null", 4));
}

static dt_status check_range(dt_config *c, int k, int line, double x, const char *v) {
    const dt_config_key *key = dt_config_key_at(k);
    unsigned r = key->range;
    int low = (r & DT_CFG_HAS_MIN) && ((r & DT_CFG_MIN_OPEN) ? !(x > key->min) : x < key->min);
    int high = (r & DT_CFG_HAS_MAX) && ((r & DT_CFG_MAX_OPEN) ? !(x < key->max) : x > key->max);
    if (!low && !high) return DT_OK;
    char prob[DT_CFG_STR_MAX + 64];
    snprintf(prob, sizeof prob, "%s is out of range", v);
    return bad_value(c, k, line, DT_ERR_RANGE, prob);
}

static dt_status set_string(dt_config *c, int k, int line, const char *v, size_t len) {
    const dt_config_key *key = dt_config_key_at(k);
    char prob[128];
    if (len >= DT_CFG_STR_MAX) {
        snprintf(prob, sizeof prob, "the value is %zu characters long, more than %d", len,
                 DT_CFG_STR_MAX - 1);
        return bad_value(c, k, line, DT_ERR_RANGE, prob);
    }
    char tmp[DT_CFG_STR_MAX];
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    if (key->type == DT_CFG_URI) {
        const char *p = dt_cfg_uri_problem(tmp);
        if (p == uri_userinfo) return bad_value(c, k, line, DT_ERR_INVALID, p);
        if (p) {
            char m[DT_CFG_STR_MAX + 64];
            snprintf(m, sizeof m, "'%s': %s", tmp, p);
            return bad_value(c, k, line, DT_ERR_INVALID, m);
        }
    }
    memcpy(field(c, key), tmp, len + 1);
    return DT_OK;
}

void dt_cfg_list_clear(dt_config *c, int k, int line) {
    dt_config_list *l = field(c, dt_config_key_at(k));
    l->n = 0;
    c->line[k] = line;
}

dt_status dt_cfg_list_append(dt_config *c, int k, const char *item, int line) {
    const dt_config_key *key = dt_config_key_at(k);
    dt_config_list *l = field(c, key);
    const char *v;
    size_t len;
    trim(item, &v, &len);
    char tmp[DT_CFG_STR_MAX], prob[DT_CFG_STR_MAX + 64];
    snprintf(tmp, sizeof tmp, "%.*s", (int)(len < sizeof tmp ? len : sizeof tmp - 1), v);
    if (len == 0) return bad_value(c, k, line, DT_ERR_INVALID, "empty list item");
    if (len >= DT_CFG_ITEM_MAX) {
        snprintf(prob, sizeof prob, "item '%s' is longer than %d characters", tmp,
                 DT_CFG_ITEM_MAX - 1);
        return bad_value(c, k, line, DT_ERR_RANGE, prob);
    }
    if (key->choices && choice_index(key->choices, v, len) < 0)
        return choice_error(c, k, line, "list item ", tmp);
    for (int i = 0; !(key->range & DT_CFG_REPEATS) && i < l->n; i++)
        if (!strcmp(l->item[i], tmp)) {
            snprintf(prob, sizeof prob, "item '%s' appears twice", tmp);
            return bad_value(c, k, line, DT_ERR_INVALID, prob);
        }
    if (l->n == DT_CFG_LIST_MAX) {
        snprintf(prob, sizeof prob, "more than %d items", DT_CFG_LIST_MAX);
        return bad_value(c, k, line, DT_ERR_RANGE, prob);
    }
    memcpy(l->item[l->n++], tmp, len + 1);
    c->line[k] = line;
    return DT_OK;
}

static dt_status set_list(dt_config *c, int k, int line, const char *v, size_t len) {
    char buf[DT_CFG_STR_MAX];
    if (len >= sizeof buf) return bad_value(c, k, line, DT_ERR_RANGE, "the value is too long");
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *s = buf;
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
        s[len - 1] = '\0';
        s++;
    }
    dt_config_list save = *(dt_config_list *)field(c, dt_config_key_at(k));
    int save_line = c->line[k];
    dt_cfg_list_clear(c, k, line);
    const char *b;
    size_t l;
    trim(s, &b, &l);
    if (l == 0) return DT_OK; /* [] or empty: no items */
    for (char *p = s; p;) {
        char *e = strchr(p, ',');
        if (e) *e = '\0';
        /* Items may be quoted in the bracket form: ["q_proj", 'v_proj']. */
        trim(p, &b, &l);
        char item[DT_CFG_STR_MAX];
        if (l >= 2 && (b[0] == '"' || b[0] == '\'') && b[l - 1] == b[0]) b++, l -= 2;
        snprintf(item, sizeof item, "%.*s", (int)l, b);
        dt_status st = dt_cfg_list_append(c, k, item, line);
        if (st != DT_OK) {
            *(dt_config_list *)field(c, dt_config_key_at(k)) = save;
            c->line[k] = save_line;
            return st;
        }
        p = e ? e + 1 : NULL;
    }
    return DT_OK;
}

dt_status dt_cfg_set_text(dt_config *c, int k, const char *text, int line) {
    const dt_config_key *key = dt_config_key_at(k);
    if (!key) return dt_error_set(DT_ERR_INVALID, "config: no key number %d", k);
    const char *v;
    size_t len;
    trim(text ? text : "", &v, &len);
    char val[DT_CFG_STR_MAX + 8], prob[DT_CFG_STR_MAX + 64];
    snprintf(val, sizeof val, "%.*s", (int)(len < DT_CFG_STR_MAX ? len : DT_CFG_STR_MAX), v);
    dt_status st = DT_OK;
    switch (key->type) {
    case DT_CFG_INT: {
        if (is_null(v, len)) return bad_value(c, k, line, DT_ERR_INVALID, "no value given");
        char *end;
        errno = 0;
        long long x = strtoll(val, &end, 10);
        if (end == val || *end) {
            snprintf(prob, sizeof prob, "'%s' is not an integer", val);
            return bad_value(c, k, line, DT_ERR_INVALID, prob);
        }
        if (errno == ERANGE) {
            snprintf(prob, sizeof prob, "%s is out of range", val);
            return bad_value(c, k, line, DT_ERR_RANGE, prob);
        }
        if ((st = check_range(c, k, line, (double)x, val))) return st;
        *(int64_t *)field(c, key) = x;
        break;
    }
    case DT_CFG_FLOAT: {
        if (is_null(v, len)) return bad_value(c, k, line, DT_ERR_INVALID, "no value given");
        char *end;
        double x = strtod(val, &end);
        if (end == val || *end || !isfinite(x)) {
            snprintf(prob, sizeof prob, "'%s' is not a number", val);
            return bad_value(c, k, line, DT_ERR_INVALID, prob);
        }
        if ((st = check_range(c, k, line, x, val))) return st;
        *(double *)field(c, key) = x;
        break;
    }
    case DT_CFG_BOOL: {
        static const char *t[] = {"true", "yes", "on", "1"}, *f[] = {"false", "no", "off", "0"};
        int b = -1;
        for (int i = 0; i < 4 && b < 0; i++) {
            if (!strcasecmp(val, t[i])) b = 1;
            if (!strcasecmp(val, f[i])) b = 0;
        }
        if (b < 0) {
            snprintf(prob, sizeof prob, "'%s' is not a boolean", val);
            return bad_value(c, k, line, DT_ERR_INVALID, prob);
        }
        *(int *)field(c, key) = b;
        break;
    }
    case DT_CFG_ENUM: {
        int i = choice_index(key->choices, v, len);
        if (i < 0) return choice_error(c, k, line, "", val);
        *(int *)field(c, key) = i;
        break;
    }
    case DT_CFG_LIST:
        return set_list(c, k, line, v, len);
    case DT_CFG_STR:
    case DT_CFG_PATH:
    case DT_CFG_URI:
        if (is_null(v, len)) len = 0;
        if ((st = set_string(c, k, line, v, len))) return st;
        break;
    }
    c->line[k] = line;
    return DT_OK;
}

/* ---------------------------------------------------------------- life cycle */

dt_config *dt_config_init_defaults(void) {
    dt_config *c = calloc(1, sizeof *c);
    if (!c) {
        dt_error_set(DT_ERR_NOMEM, "config: out of memory");
        return NULL;
    }
    for (int k = 0; k < dt_config_key_count(); k++) {
        if (dt_cfg_set_text(c, k, dt_config_key_at(k)->def, DT_CFG_FROM_DEFAULT) != DT_OK) {
            /* The schema's own defaults must parse; tests/config checks that they do. */
            free(c);
            return NULL;
        }
    }
    return c;
}

void dt_config_free(dt_config *c) {
    free(c);
}

dt_status dt_config_clone(const dt_config *c, dt_config **out) {
    *out = NULL;
    if (!c) return dt_error_set(DT_ERR_INVALID, "config clone: NULL config");
    dt_config *w = malloc(sizeof *w);
    if (!w) return dt_error_set(DT_ERR_NOMEM, "config: out of memory");
    *w = *c; /* plain values: no pointers inside */
    *out = w;
    return DT_OK;
}

dt_status dt_config_set(dt_config *c, const char *key, const char *value) {
    if (!c || !key || !value)
        return dt_error_set(DT_ERR_INVALID, "config set: NULL config, key or value");
    int k = dt_cfg_key_index(key);
    if (k < 0) {
        char m[DT_CFG_STR_MAX + 256];
        dt_cfg_unknown_msg(key, 0, m, sizeof m);
        return dt_error_set(DT_ERR_INVALID, "command line: %s", m);
    }
    return dt_cfg_set_text(c, k, value, DT_CFG_FROM_CLI);
}

dt_status dt_config_set_arg(dt_config *c, const char *arg) {
    if (!c || !arg) return dt_error_set(DT_ERR_INVALID, "config set: NULL config or argument");
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return dt_error_set(DT_ERR_INVALID,
                            "command line: '%s' is not an override (expected section.key=value)",
                            arg);
    char key[256];
    size_t kl = (size_t)(eq - arg);
    if (kl >= sizeof key)
        return dt_error_set(DT_ERR_INVALID, "command line: key of '%.64s...' is too long", arg);
    memcpy(key, arg, kl);
    key[kl] = '\0';
    const char *kb;
    size_t kn;
    trim(key, &kb, &kn);
    char k2[256];
    snprintf(k2, sizeof k2, "%.*s", (int)kn, kb);
    if (!strchr(k2, '.'))
        return dt_error_set(DT_ERR_INVALID,
                            "command line: '%s': key '%s' has no section (expected "
                            "section.key=value)",
                            arg, k2);
    return dt_config_set(c, k2, eq + 1);
}

dt_status dt_config_from_args(const char *path, int n, char *const *overrides, dt_config **out) {
    if (!out) return dt_error_set(DT_ERR_INVALID, "config: NULL output");
    *out = NULL;
    dt_config *c = NULL;
    dt_status st;
    if (path) {
        if ((st = dt_config_load(path, &c))) return st;
    } else if (!(c = dt_config_init_defaults())) {
        return DT_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++)
        if ((st = dt_config_set_arg(c, overrides[i]))) {
            dt_config_free(c);
            return st;
        }
    if ((st = dt_config_validate(c))) {
        dt_config_free(c);
        return st;
    }
    *out = c;
    return DT_OK;
}

/* ---------------------------------------------------------------- access */

const dt_config_values *dt_config_get_values(const dt_config *c) {
    return c ? &c->v : NULL;
}
const char *dt_config_path(const dt_config *c) {
    return c ? c->path : "";
}

void dt_config_resolve_path(const dt_config *c, const char *path, char *out, size_t n) {
    const char *slash = c ? strrchr(c->path, '/') : NULL;
    if (!path[0] || path[0] == '/' || strstr(path, "://") || access(path, F_OK) == 0 || !slash) {
        snprintf(out, n, "%s", path);
        return;
    }
    snprintf(out, n, "%.*s/%s", (int)(slash - c->path), c->path, path);
    if (access(out, F_OK) != 0) snprintf(out, n, "%s", path); /* report the path as given */
}

static const dt_config_key *lookup(const dt_config *c, const char *key, const char *fn) {
    if (!c || !key) {
        dt_error_set(DT_ERR_INVALID, "%s: NULL config or key", fn);
        return NULL;
    }
    const dt_config_key *k = dt_config_key_find(key);
    if (!k) {
        char m[512];
        dt_cfg_unknown_msg(key, 0, m, sizeof m);
        dt_error_set(DT_ERR_INVALID, "%s: %s", fn, m);
    }
    return k;
}

static dt_status wrong_type(const dt_config_key *k, const char *fn) {
    return dt_error_set(DT_ERR_INVALID, "%s: key '%s' is of type %s", fn, k->name,
                        dt_config_type_name(k->type));
}

dt_status dt_config_get_int(const dt_config *c, const char *key, int64_t *out) {
    const dt_config_key *k = lookup(c, key, "config get_int");
    if (!k) return DT_ERR_INVALID;
    if (k->type == DT_CFG_INT)
        *out = *(const int64_t *)cfield(c, k);
    else if (k->type == DT_CFG_BOOL || k->type == DT_CFG_ENUM)
        *out = *(const int *)cfield(c, k);
    else
        return wrong_type(k, "config get_int");
    return DT_OK;
}

dt_status dt_config_get_float(const dt_config *c, const char *key, double *out) {
    const dt_config_key *k = lookup(c, key, "config get_float");
    if (!k) return DT_ERR_INVALID;
    if (k->type == DT_CFG_FLOAT)
        *out = *(const double *)cfield(c, k);
    else if (k->type == DT_CFG_INT)
        *out = (double)*(const int64_t *)cfield(c, k);
    else
        return wrong_type(k, "config get_float");
    return DT_OK;
}

dt_status dt_config_get_bool(const dt_config *c, const char *key, int *out) {
    const dt_config_key *k = lookup(c, key, "config get_bool");
    if (!k) return DT_ERR_INVALID;
    if (k->type != DT_CFG_BOOL) return wrong_type(k, "config get_bool");
    *out = *(const int *)cfield(c, k);
    return DT_OK;
}

dt_status dt_config_get_str(const dt_config *c, const char *key, const char **out) {
    static _Thread_local char buf[DT_CFG_STR_MAX + 64];
    const dt_config_key *k = lookup(c, key, "config get_str");
    if (!k) return DT_ERR_INVALID;
    if (k->type == DT_CFG_LIST) return wrong_type(k, "config get_str");
    dt_cfg_value_text(c, (int)(k - dt_config_key_at(0)), buf, sizeof buf);
    *out = buf;
    return DT_OK;
}

/* Shortest text that reads back as the same double. */
static void fmt_double(double x, char *buf, size_t n) {
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

void dt_cfg_value_text(const dt_config *c, int k, char *buf, size_t n) {
    const dt_config_key *key = dt_config_key_at(k);
    const void *f = cfield(c, key);
    switch (key->type) {
    case DT_CFG_INT:
        snprintf(buf, n, "%lld", (long long)*(const int64_t *)f);
        break;
    case DT_CFG_FLOAT:
        fmt_double(*(const double *)f, buf, n);
        break;
    case DT_CFG_BOOL:
        snprintf(buf, n, "%s", *(const int *)f ? "true" : "false");
        break;
    case DT_CFG_ENUM: {
        char tmp[512];
        const char *cand[32];
        int cnt = split_choices(key->choices, tmp, sizeof tmp, cand, 32), i = *(const int *)f;
        snprintf(buf, n, "%s", i >= 0 && i < cnt ? cand[i] : "?");
        break;
    }
    case DT_CFG_LIST: {
        const dt_config_list *l = f;
        size_t j = 0;
        buf[0] = '\0';
        for (int i = 0; i < l->n && j < n; i++)
            j += (size_t)snprintf(buf + j, n - j, "%s%s", i ? "," : "", l->item[i]);
        break;
    }
    default:
        snprintf(buf, n, "%s", (const char *)f);
        break;
    }
}

const char *dt_config_origin(const dt_config *c, const char *key) {
    static _Thread_local char buf[DT_CFG_STR_MAX + 32];
    int k = c && key ? dt_cfg_key_index(key) : -1;
    if (k < 0) return "unknown key";
    dt_cfg_where(c, c->line[k], buf, sizeof buf);
    return buf;
}

/* ---- dist.batch_shares ---------------------------------------------------------------- */

dt_status dt_config_batch_shares(const char *s, int64_t *w, int max, int *n) {
    *n = 0;
    while (*s == ' ') s++;
    if (!strcmp(s, "equal")) return DT_OK;
    if (!strcmp(s, "auto")) return DT_OK; /* equal parts until dist.rebalance_step */
    const char *p = s;
    int bracket = *p == '[';
    if (bracket) p++;
    for (;;) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1000000)
            return dt_error_set(DT_ERR_INVALID,
                                "dist.batch_shares: '%.200s': expected equal or positive integer "
                                "weights (1 to 1e6) separated by commas, e.g. [3,1]",
                                s);
        if (*n == max)
            return dt_error_set(DT_ERR_INVALID, "dist.batch_shares: more than %d weights", max);
        w[(*n)++] = v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (bracket && *p == ']') p++, bracket = 0;
        while (*p == ' ') p++;
        if (*p || bracket)
            return dt_error_set(DT_ERR_INVALID,
                                "dist.batch_shares: '%.200s': unexpected '%.20s' (expected "
                                "weights separated by commas, e.g. [3,1])",
                                s, *p ? p : "end");
        return DT_OK;
    }
}

dt_status dt_config_share_split(int64_t G, const int64_t *w, int n, int rank, int64_t *b,
                                int64_t *off) {
    int64_t S = 0;
    for (int i = 0; i < n; i++) S += w[i];
    /* floor(G w_i / S) each, then one more to the largest remainders (the lower rank first on
     * a tie) until the parts add up to G */
    int64_t part[n > 0 ? n : 1], rem[n > 0 ? n : 1], given = 0;
    for (int i = 0; i < n; i++) {
        part[i] = G * w[i] / S, rem[i] = G * w[i] % S;
        given += part[i];
    }
    for (; given < G; given++) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (rem[i] > rem[best]) best = i;
        part[best]++, rem[best] = -1;
    }
    *off = 0;
    for (int i = 0; i < n; i++) {
        if (part[i] < 1)
            return dt_error_set(DT_ERR_INVALID,
                                "dist.batch_shares: worker %d's share (%lld of %lld) gets no "
                                "sample of the global batch of %lld (raise data.batch)",
                                i, (long long)w[i], (long long)S, (long long)G);
        if (i < rank) *off += part[i];
    }
    *b = part[rank];
    return DT_OK;
}

int dt_config_shares_auto(const char *s) {
    while (s && *s == ' ') s++;
    return s && !strcmp(s, "auto");
}

int dt_config_shard_base(const dt_config_values *v) {
    if (!v->lora.enabled || v->lora.shard_base == DT_CFG_SHARD_FALSE) return 0;
    if (v->lora.shard_base == DT_CFG_SHARD_TRUE) return 1;
    return v->dist.zero_stage >= 3 && !dt_config_shares_auto(v->dist.batch_shares);
}

dt_status dt_config_share_from_rates(int64_t G, const double *rates, int n, int64_t *parts) {
    if (n < 1 || G < n)
        return dt_error_set(DT_ERR_INVALID,
                            "dist.batch_shares=auto: a global batch of %lld cannot give each of "
                            "%d workers a sample",
                            (long long)G, n);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!(rates[i] > 0) || !isfinite(rates[i]))
            return dt_error_set(DT_ERR_INVALID,
                                "dist.batch_shares=auto: worker %d's measured rate is %g "
                                "samples/s (expected > 0)",
                                i, rates[i]);
        sum += rates[i];
    }
    /* floor of each exact share, then one more to the largest remainders (lower rank first) */
    double rem[n];
    int64_t given = 0;
    for (int i = 0; i < n; i++) {
        double q = (double)G * (rates[i] / sum);
        parts[i] = (int64_t)floor(q);
        if (parts[i] > G) parts[i] = G;
        rem[i] = q - (double)parts[i];
        given += parts[i];
    }
    for (; given < G; given++) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (rem[i] > rem[best]) best = i;
        parts[best]++, rem[best] = -1;
    }
    for (; given > G; given--) { /* rounding above G: one less from the largest */
        int big = 0;
        for (int i = 1; i < n; i++)
            if (parts[i] > parts[big]) big = i;
        parts[big]--;
    }
    /* every worker keeps at least one sample: a static graph of batch 0 cannot run */
    for (int i = 0; i < n; i++)
        while (parts[i] < 1) {
            int big = 0;
            for (int k = 1; k < n; k++)
                if (parts[k] > parts[big]) big = k;
            parts[big]--, parts[i]++;
        }
    return DT_OK;
}

dt_status dt_config_numbers(const dt_config_list *l, const char *key, double *out, int max,
                            int *n) {
    *n = 0;
    if (l->n > max)
        return dt_error_set(DT_ERR_INVALID, "%s: %d numbers, at most %d", key, l->n, max);
    for (int i = 0; i < l->n; i++) {
        const char *t = l->item[i];
        char *e;
        double v = strtod(t, &e);
        if (e != t && *e == '/') { /* a fraction: 3/4 */
            const char *q = e + 1;
            double den = strtod(q, &e);
            v = e != q && den != 0 ? v / den : NAN;
        }
        if (e == t || *e || !isfinite(v))
            return dt_error_set(DT_ERR_INVALID, "%s: item %d '%s' is not a number", key, i + 1, t);
        out[(*n)++] = v;
    }
    return DT_OK;
}
