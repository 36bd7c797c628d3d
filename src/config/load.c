/* Reading the YAML config with libyaml's event parser: one document, a mapping of sections,
 * each a mapping of keys to scalars (or, for list keys, a sequence of scalars). Every value is
 * checked against the schema as it is read, so the first error names the file and line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "config/config_impl.h"
#include "core/file.h"

/* A config file is a few KB; libyaml holds a scalar whole in memory, so a longer file (or an
 * endless stream given as the path) is cut off here rather than read into one giant value.
 * Nesting needs no bound of its own: libyaml's parser keeps its state on the heap (no recursion)
 * and this reader refuses anything deeper than section / key / list at the first such event. */
#define MAX_CONFIG_BYTES ((size_t)4 << 20)

typedef struct reader {
    yaml_parser_t p;
    dt_config *c;
    const char *path;
    FILE *f;
    size_t bytes;                        /* read so far */
    int too_long;                        /* the input passed MAX_CONFIG_BYTES */
    unsigned char seen[DT_CFG_MAX_KEYS]; /* set by this file: duplicate detection */
} reader;

static int read_input(void *ud, unsigned char *buf, size_t size, size_t *got) {
    reader *r = ud;
    size_t n = fread(buf, 1, size, r->f);
    if (n == 0 && ferror(r->f)) return 0;
    r->bytes += n;
    if (r->bytes > MAX_CONFIG_BYTES) {
        r->too_long = 1;
        return 0;
    }
    *got = n;
    return 1;
}

static int line_of(const yaml_event_t *e) {
    return (int)e->start_mark.line + 1;
}

static dt_status next(reader *r, yaml_event_t *e) {
    if (yaml_parser_parse(&r->p, e)) return DT_OK;
    if (r->too_long)
        return dt_error_set(DT_ERR_FORMAT, "%s: more than %zu bytes, the limit of a config file",
                            r->path, MAX_CONFIG_BYTES);
    const char *ctx = r->p.context ? r->p.context : "";
    return dt_error_set(DT_ERR_FORMAT, "%s:%d: malformed YAML: %s%s%s", r->path,
                        (int)r->p.problem_mark.line + 1, r->p.problem ? r->p.problem : "error",
                        ctx[0] ? " " : "", ctx);
}

static const char *kind_name(yaml_event_type_t t) {
    switch (t) {
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_ALIAS_EVENT:
        return "an alias";
    default:
        return "a scalar";
    }
}

static dt_status not_scalar(reader *r, const yaml_event_t *e, const char *key) {
    const dt_config_key *k = dt_config_key_find(key);
    return dt_error_set(DT_ERR_FORMAT, "%s:%d: %s: expected one value (%s), got %s", r->path,
                        line_of(e), key, k ? dt_config_type_name(k->type) : "scalar",
                        kind_name(e->type));
}

static const char *scalar(const yaml_event_t *e) {
    return (const char *)e->data.scalar.value;
}

static int is_null(const char *s) {
    return !s[0] || !strcmp(s, "~") || !strcmp(s, "null");
}

/* A list key's value: a sequence of scalars, or a scalar "a, b" / "[]". */
static dt_status read_list(reader *r, int k, const char *key, int line) {
    dt_cfg_list_clear(r->c, k, line);
    for (;;) {
        yaml_event_t e;
        dt_status st = next(r, &e);
        if (st) return st;
        if (e.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&e);
            return DT_OK;
        }
        if (e.type != YAML_SCALAR_EVENT) {
            st = dt_error_set(DT_ERR_FORMAT, "%s:%d: %s: list items must be names, got %s", r->path,
                              line_of(&e), key, kind_name(e.type));
            yaml_event_delete(&e);
            return st;
        }
        st = dt_cfg_list_append(r->c, k, scalar(&e), line_of(&e));
        yaml_event_delete(&e);
        if (st) return st;
    }
}

/* One "key: value" inside section `sec`; `ke` is the key's scalar event. */
static dt_status read_key(reader *r, const char *sec, const yaml_event_t *ke) {
    char name[512];
    snprintf(name, sizeof name, "%s.%s", sec, scalar(ke));
    int line = line_of(ke);
    yaml_event_t v;
    dt_status st = next(r, &v);
    if (st) return st;
    int k = dt_cfg_key_index(name);
    if (k < 0) {
        char m[1024];
        dt_cfg_unknown_msg(name, 0, m, sizeof m);
        st = dt_error_set(DT_ERR_INVALID, "%s:%d: %s", r->path, line, m);
    } else if (r->seen[k]) {
        st = dt_error_set(DT_ERR_INVALID, "%s:%d: key '%s' appears twice (first at line %d)",
                          r->path, line, name, r->c->line[k]);
    } else if (v.type == YAML_SCALAR_EVENT) {
        r->seen[k] = 1;
        /* Quoted scalars read like plain ones ("0.1" is a number for a float key), except that
         * a quoted value of a list key is one item, commas and all. */
        const char *text = scalar(&v);
        int quoted = v.data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                     v.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
        const dt_config_key *key = dt_config_key_at(k);
        if (quoted && key->type == DT_CFG_LIST) {
            dt_cfg_list_clear(r->c, k, line);
            st = text[0] ? dt_cfg_list_append(r->c, k, text, line) : DT_OK;
        } else {
            st = dt_cfg_set_text(r->c, k, text, line);
        }
    } else if (v.type == YAML_SEQUENCE_START_EVENT && dt_config_key_at(k)->type == DT_CFG_LIST) {
        r->seen[k] = 1;
        st = read_list(r, k, name, line);
    } else {
        st = not_scalar(r, &v, name);
    }
    yaml_event_delete(&v);
    return st;
}

static dt_status read_section(reader *r, const yaml_event_t *se, unsigned *sections_seen) {
    static const char *const names[] = {"model", "data", "optim", "schedule", "train",
                                        "dist",  "lora", "ckpt",  "output",   "tracking"};
    const char *sec = scalar(se);
    int si = -1;
    for (int i = 0; i < 10; i++)
        if (!strcmp(sec, names[i])) si = i;
    yaml_event_t v;
    dt_status st = next(r, &v);
    if (st) return st;
    if (si < 0) {
        char m[1024];
        dt_cfg_unknown_msg(sec, 1, m, sizeof m);
        st = dt_error_set(DT_ERR_INVALID, "%s:%d: %s", r->path, line_of(se), m);
    } else if (*sections_seen >> si & 1u) {
        st = dt_error_set(DT_ERR_INVALID, "%s:%d: section '%s' appears twice", r->path, line_of(se),
                          sec);
    } else if (v.type == YAML_SCALAR_EVENT && v.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
               is_null(scalar(&v))) {
        *sections_seen |= 1u << si; /* "section:" with nothing under it */
    } else if (v.type != YAML_MAPPING_START_EVENT) {
        st = dt_error_set(DT_ERR_FORMAT, "%s:%d: section '%s' must hold 'key: value' lines, not %s",
                          r->path, line_of(&v), sec, kind_name(v.type));
    } else {
        *sections_seen |= 1u << si;
        for (;;) {
            yaml_event_t ke;
            if ((st = next(r, &ke))) break;
            if (ke.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&ke);
                break;
            }
            if (ke.type != YAML_SCALAR_EVENT)
                st = dt_error_set(DT_ERR_FORMAT, "%s:%d: section '%s': keys must be names, got %s",
                                  r->path, line_of(&ke), sec, kind_name(ke.type));
            else
                st = read_key(r, sec, &ke);
            yaml_event_delete(&ke);
            if (st) break;
        }
    }
    yaml_event_delete(&v);
    return st;
}

/* The document: a mapping of sections (or empty). */
static dt_status read_doc(reader *r) {
    yaml_event_t e;
    dt_status st;
    int docs = 0;
    for (;;) {
        if ((st = next(r, &e))) return st;
        yaml_event_type_t t = e.type;
        int line = line_of(&e);
        if (t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&e);
            return DT_OK;
        }
        if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
            yaml_event_delete(&e);
            return dt_error_set(DT_ERR_FORMAT, "%s:%d: only one YAML document is allowed", r->path,
                                line);
        }
        if (t == YAML_SCALAR_EVENT) { /* an empty document reads as a null scalar */
            int empty = is_null(scalar(&e));
            yaml_event_delete(&e);
            if (!empty)
                return dt_error_set(DT_ERR_FORMAT,
                                    "%s:%d: the config must be a mapping of sections", r->path,
                                    line);
            continue;
        }
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_ALIAS_EVENT) {
            yaml_event_delete(&e);
            return dt_error_set(DT_ERR_FORMAT, "%s:%d: the config must be a mapping of sections",
                                r->path, line);
        }
        yaml_event_delete(&e);
        if (t != YAML_MAPPING_START_EVENT) continue; /* stream/document start and end */
        unsigned seen = 0;
        for (;;) {
            yaml_event_t se;
            if ((st = next(r, &se))) return st;
            if (se.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&se);
                break;
            }
            if (se.type != YAML_SCALAR_EVENT)
                st = dt_error_set(DT_ERR_FORMAT, "%s:%d: section names must be plain names, got %s",
                                  r->path, line_of(&se), kind_name(se.type));
            else
                st = read_section(r, &se, &seen);
            yaml_event_delete(&se);
            if (st) return st;
        }
    }
}

dt_status dt_config_load(const char *path, dt_config **out) {
    if (!path || !out) return dt_error_set(DT_ERR_INVALID, "config load: NULL path or output");
    *out = NULL;
    FILE *f;
    dt_status os = dt_file_fopen_regular(path, "rb", &f);
    if (os) return os;
    dt_config *c = dt_config_init_defaults();
    if (!c) {
        fclose(f);
        return DT_ERR_NOMEM;
    }
    snprintf(c->path, sizeof c->path, "%s", path);
    reader *r = calloc(1, sizeof *r);
    if (!r || !yaml_parser_initialize(&r->p)) {
        free(r);
        fclose(f);
        dt_config_free(c);
        return dt_error_set(DT_ERR_NOMEM, "%s: out of memory for the YAML parser", path);
    }
    r->c = c;
    r->path = path;
    r->f = f;
    yaml_parser_set_input(&r->p, read_input, r);
    dt_status st = read_doc(r);
    yaml_parser_delete(&r->p);
    free(r);
    fclose(f);
    if (st) {
        dt_config_free(c);
        return st;
    }
    *out = c;
    return DT_OK;
}
