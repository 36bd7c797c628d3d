/* Internal to src/config: the config object and the helpers shared by the schema, the value
 * parser (config.c), the YAML reader (load.c) and the checks (validate.c). */
#ifndef DT_CONFIG_IMPL_H
#define DT_CONFIG_IMPL_H

#include <stddef.h>
#include "dtrain/config.h"

#define DT_CFG_MAX_KEYS 128

/* Origin of a value. */
#define DT_CFG_FROM_DEFAULT 0
#define DT_CFG_FROM_CLI (-1) /* any positive number: the line in the file */

struct dt_config {
    dt_config_values v;
    char path[DT_CFG_STR_MAX]; /* file loaded, "" if none */
    int line[DT_CFG_MAX_KEYS]; /* per key: DT_CFG_FROM_* or the file line */
};

/* Index of a key in the schema, -1 if unknown. */
int dt_cfg_key_index(const char *name);

/* "FILE:LINE" or "command line" for an error about a value set at `line`. */
void dt_cfg_where(const dt_config *c, int line, char *buf, size_t n);

/* Parses `text` as the value of key k into c (recording `line` as its origin). On error sets a
 * message "<where>: <key>: <problem> (expected ...)" and returns its status. For LIST keys the
 * text is a comma-separated list, optionally in brackets. */
dt_status dt_cfg_set_text(dt_config *c, int k, const char *text, int line);
/* LIST keys, item by item (YAML sequences): clear, then append. */
void dt_cfg_list_clear(dt_config *c, int k, int line);
dt_status dt_cfg_list_append(dt_config *c, int k, const char *item, int line);

/* "unknown key 'x' (did you mean 'y'?)" or with the section's valid keys; for an unknown
 * section name too (is_section). Writes into buf. */
void dt_cfg_unknown_msg(const char *name, int is_section, char *buf, size_t n);
/* Nearest of `n` candidates to s by edit distance, or NULL when none is close. */
const char *dt_cfg_nearest(const char *s, const char *const *cand, int n);

/* Writes the value of key k as text (as the command line / YAML would take it; lists as
 * "a,b"). */
void dt_cfg_value_text(const dt_config *c, int k, char *buf, size_t n);

/* Checks a storage URI: "" | path | file://path | s3://bucket[/prefix]. NULL if fine, else a
 * static description of the problem. */
const char *dt_cfg_uri_problem(const char *s);

#endif
