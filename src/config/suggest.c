/* Suggestions for unknown keys, sections and enum values: the nearest valid name by edit
 * distance (a one-edit typo first, then the same key name in another section, then a looser
 * match), or the section's valid keys when nothing is close. */
#include <stdio.h>
#include <string.h>
#include "config/config_impl.h"

/* Optimal-string-alignment distance (edits: insert, delete, substitute, swap neighbours). */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 126 || lb > 126) return 1000;
    int d[128][128];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int m = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < m) m = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < m) m = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < m)
                m = d[i - 2][j - 2] + 1;
            d[i][j] = m;
        }
    return d[la][lb];
}

const char *dt_cfg_nearest(const char *s, const char *const *cand, int n) {
    const char *best = NULL;
    int bd = 1 << 30, len = (int)strlen(s);
    for (int i = 0; i < n; i++) {
        int d = edit_distance(s, cand[i]);
        if (d < bd) bd = d, best = cand[i];
    }
    int limit = len / 3 > 2 ? len / 3 : 2;
    return bd <= limit ? best : NULL;
}

/* Prefix of at least 3 characters either way ("optimizer" / "optim"). */
static const char *prefix_match(const char *s, const char *const *cand, int n) {
    size_t ls = strlen(s);
    for (int i = 0; i < n; i++) {
        size_t lc = strlen(cand[i]), m = ls < lc ? ls : lc;
        if (m >= 3 && !strncmp(s, cand[i], m)) return cand[i];
    }
    return NULL;
}

void dt_cfg_unknown_msg(const char *name, int is_section, char *buf, size_t n) {
    const char *cand[DT_CFG_MAX_KEYS];
    static const char *const sections[] = {"model", "data", "optim", "schedule", "train",
                                           "dist",  "lora", "ckpt",  "output",   "tracking"};
    int nk = dt_config_key_count();
    for (int i = 0; i < nk; i++) cand[i] = dt_config_key_at(i)->name;
    /* The same key name in another section (train.lr -> optim.lr, or "lr" at the top). */
    const char *dot = strchr(name, '.'), *bare = dot ? dot + 1 : name, *same = NULL;
    for (int i = 0; i < nk && !same; i++)
        if (!strcmp(strchr(cand[i], '.') + 1, bare)) same = cand[i];
    if (is_section) {
        const char *near = same ? same : dt_cfg_nearest(name, sections, 10);
        if (!near) near = prefix_match(name, sections, 10);
        if (near)
            snprintf(buf, n, "unknown section '%s' (did you mean '%s'?)", name, near);
        else
            snprintf(buf, n,
                     "unknown section '%s' (sections: model, data, optim, schedule, train, dist, "
                     "lora, ckpt, output, tracking)",
                     name);
        return;
    }
    /* A one-edit typo first, then the key in another section, then a looser match. */
    const char *one = NULL;
    for (int i = 0; i < nk && !one; i++)
        if (edit_distance(name, cand[i]) <= 1) one = cand[i];
    const char *near = one ? one : same ? same : dt_cfg_nearest(name, cand, nk);
    if (near) {
        snprintf(buf, n, "unknown key '%s' (did you mean '%s'?)", name, near);
        return;
    }
    /* Nothing close: list the section's keys when the section exists. */
    size_t sl = dot ? (size_t)(dot - name) : 0, j;
    j = (size_t)snprintf(buf, n, "unknown key '%s'", name);
    int listed = 0;
    for (int i = 0; i < nk && j < n; i++) {
        if (!sl || strncmp(cand[i], name, sl) || cand[i][sl] != '.') continue;
        j += (size_t)snprintf(buf + j, n - j, "%s%s", listed++ ? ", " : " (valid keys: ", cand[i]);
    }
    if (listed && j < n) snprintf(buf + j, n - j, ")");
}
