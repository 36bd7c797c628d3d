/* A YAML document's nested mappings as dotted keys: the resolved config
 *   optim:
 *     lr: 0.003           ->  "optim.lr" = "0.003"
 *   lora:
 *     targets: [q, v]     ->  "lora.targets" = "[q, v]"
 * (libyaml's document loader; values as written, without quotes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "dtrain/track.h"

/* Aliases (*a) refer to a node again without copying it, so a few lines of anchors can name
 * 10^9 paths (a "billion laughs"): the walk is bounded to a budget of nodes visited and of bytes
 * of the sequence values it builds, both 16x the text's size (an ordinary config visits each
 * node once). */
typedef struct walker {
    yaml_document_t *doc;
    dt_track_kv_cb cb;
    void *ud;
    int stop;
    size_t nodes_left, bytes_left;
} walker;

static dt_status too_big(void) {
    return dt_error_set(DT_ERR_FORMAT,
                        "config YAML: aliases expand to more than 16 times the text's size");
}

static const char *scalar(const yaml_node_t *n) {
    return (const char *)n->data.scalar.value;
}

static dt_status walk(walker *w, const yaml_node_t *n, const char *prefix, int depth) {
    if (w->stop || !n) return DT_OK;
    if (depth > 32) return dt_error_set(DT_ERR_FORMAT, "config YAML: nested too deeply");
    if (!w->nodes_left--) return too_big();
    char key[1024];
    if (n->type == YAML_SCALAR_NODE) {
        if (prefix[0]) w->stop = w->cb(w->ud, prefix, scalar(n));
        return DT_OK;
    }
    if (n->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE)
                return dt_error_set(DT_ERR_FORMAT, "config YAML: a key under '%s' is not a name",
                                    prefix);
            snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", scalar(k));
            dt_status st = walk(w, yaml_document_get_node(w->doc, p->value), key, depth + 1);
            if (st != DT_OK) return st;
        }
        return DT_OK;
    }
    /* a sequence of scalars: "[a, b]"; anything deeper: indexed keys */
    size_t len = 3, i = 0;
    int flat = 1;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        const yaml_node_t *c = yaml_document_get_node(w->doc, *it);
        if (!c || c->type != YAML_SCALAR_NODE) flat = 0;
        if (c && c->type == YAML_SCALAR_NODE) len += strlen(scalar(c)) + 2;
    }
    if (flat) {
        if (len > w->bytes_left) return too_big();
        w->bytes_left -= len;
        char *v = malloc(len);
        if (!v) return dt_error_set(DT_ERR_NOMEM, "config YAML: out of memory");
        size_t o = 0;
        v[o++] = '[';
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++, i++)
            o += (size_t)sprintf(v + o, "%s%s", i ? ", " : "",
                                 scalar(yaml_document_get_node(w->doc, *it)));
        v[o++] = ']', v[o] = '\0';
        if (prefix[0]) w->stop = w->cb(w->ud, prefix, v);
        free(v);
        return DT_OK;
    }
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++, i++) {
        snprintf(key, sizeof key, "%s.%zu", prefix, i);
        dt_status st = walk(w, yaml_document_get_node(w->doc, *it), key, depth + 1);
        if (st != DT_OK) return st;
    }
    return DT_OK;
}

/* walk() refuses more than 32 levels, but only after libyaml has built the document, and
 * libyaml's scanner takes time quadratic in the flow nesting depth (every token re-checks the
 * pending simple key of every open level: 100000 levels of "[" take 20 s). Its events come
 * lazily, so a first pass over them stops a text nested deeper than that within the first
 * levels, before yaml_parser_load reads the rest. A malformed text is left to the load's
 * message. */
#define MAX_YAML_DEPTH 40

static dt_status check_depth(const char *yaml) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return dt_error_set(DT_ERR_NOMEM, "YAML: out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, strlen(yaml));
    dt_status st = DT_OK;
    int depth = 0, done = 0;
    while (!done && st == DT_OK) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) break;
        if (e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT) depth++;
        if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) depth--;
        if (depth > MAX_YAML_DEPTH)
            st = dt_error_set(DT_ERR_FORMAT, "config YAML: line %zu: nested too deeply",
                              e.start_mark.line + 1);
        done = e.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&p);
    return st;
}

dt_status dt_track_flatten_yaml(const char *yaml, dt_track_kv_cb cb, void *ud) {
    if (!yaml || !cb) return dt_error_set(DT_ERR_INVALID, "flatten YAML: NULL argument");
    dt_status dst = check_depth(yaml);
    if (dst != DT_OK) return dst;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return dt_error_set(DT_ERR_NOMEM, "YAML: out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, strlen(yaml));
    if (!yaml_parser_load(&p, &doc)) {
        dt_status st = dt_error_set(DT_ERR_FORMAT, "config YAML: line %zu: %s",
                                    p.problem_mark.line + 1, p.problem ? p.problem : "malformed");
        yaml_parser_delete(&p);
        return st;
    }
    size_t budget = 16 * strlen(yaml) + 1024;
    walker w = {&doc, cb, ud, 0, budget, budget};
    dt_status st = walk(&w, yaml_document_get_root_node(&doc), "", 0);
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    return st;
}
