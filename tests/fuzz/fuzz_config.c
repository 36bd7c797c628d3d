/* Fuzz target: the YAML training config and `section.key=value` overrides (src/config/: the
 * event-based reader, every key's schema check, the cross-key validation) and the YAML
 * flattener of the experiment store (src/track/flatten.c, which reads a run's config).
 *
 * Input: the YAML file, then up to eight overrides, each after FZ_SEP. Entry points:
 * dt_config_from_args (load, apply the overrides, validate) on a file holding the YAML; an
 * accepted config is written back with dt_config_dump_yaml and that text flattened with
 * dt_track_flatten_yaml, as a run's record is made; the input's YAML is flattened directly too
 * (the store reads whatever config text a run holds). */
#include <stdio.h>
#include <stdlib.h>
#include "dtrain/config.h"
#include "dtrain/track.h"
#include "fuzz_util.h"

static int count_kv(void *ud, const char *key, const char *value) {
    (void)key, (void)value;
    ++*(long *)ud;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[4096];
    if (!path[0]) fz_path(path, sizeof path, "config.yaml");
    const uint8_t *part[9];
    size_t len[9];
    int n = fz_split(data, size, part, len, 9);
    fz_write(path, part[0], len[0]);
    char *over[8];
    for (int i = 1; i < n; i++) over[i - 1] = fz_strndup(part[i], len[i]);
    dt_config *c = NULL;
    long kv = 0;
    if (dt_config_from_args(path, n - 1, over, &c) == DT_OK) {
        char *text = NULL;
        size_t tl = 0;
        FILE *f = open_memstream(&text, &tl);
        if (f) {
            dt_config_dump_yaml(c, f);
            fclose(f);
            if (text) dt_track_flatten_yaml(text, count_kv, &kv);
            free(text);
        }
        dt_config_free(c);
    }
    char *yaml = fz_strndup(part[0], len[0]);
    dt_track_flatten_yaml(yaml, count_kv, &kv);
    free(yaml);
    for (int i = 1; i < n; i++) free(over[i - 1]);
    return 0;
}
