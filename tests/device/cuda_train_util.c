#include "cuda_train_util.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "dtrain/dtrain.h"
#include "harness.h"

int cuda_train_write_tiny(const char *data_dir, const char *model_dir, int vocab) {
    char cmd[2200], path[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", data_dir, model_dir);
    if (!CHECK(system(cmd) == 0, "cannot prepare %s and %s", data_dir, model_dir)) return -1;
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL, "cannot write %s", path)) return -1;
    fprintf(f,
            "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 64, "
            "\"intermediate_size\": 160, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
            "\"num_key_value_heads\": 2, \"max_position_embeddings\": 64, "
            "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": true, "
            "\"hidden_act\": \"silu\"}\n",
            vocab);
    int closed = fclose(f) == 0;
    if (!CHECK(closed, "writing %s", path)) return -1;
    dt_dataset_spec sp = {.kind = DT_DATA_TOKENS, .vocab_size = vocab, .name = "progressions"};
    dt_dataset_writer *w = NULL;
    dt_status st = dt_dataset_writer_open(data_dir, &sp, &w);
    uint32_t doc[300], seed = 99;
    for (int d = 0; st == DT_OK && d < 64; d++) {
        seed = seed * 1664525u + 1013904223u;
        uint32_t step = 1 + (seed >> 8) % 7, start = (seed >> 16) % (uint32_t)vocab;
        for (uint32_t i = 0; i < 300; i++) doc[i] = (start + step * i) % (uint32_t)vocab;
        st = dt_dataset_writer_add_doc(w, doc, NULL, 300);
        if (st != DT_OK) dt_dataset_writer_abort(w);
    }
    if (st == DT_OK) st = dt_dataset_writer_close(w);
    return CHECK(st == DT_OK, "writing %s: %s", data_dir, dt_last_error()) ? 0 : -1;
}

void cuda_train_compare_params(const char *what, const float *ref, const float *got, size_t n,
                               double lr, int steps) {
    double top = 0, worst = 0;
    size_t off = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > top) top = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (!(e <= 1e-4 * top + 1e-3 * fabs(ref[i])) && off++ == 0) first = i;
        if (!(e <= worst)) worst = e;
    }
    CHECK(n > 0 && off * 1000 <= n, "%s: %zu of %zu parameters off, first [%zu] %.8g vs %.8g", what,
          off, n, first, n ? got[first] : 0.0f, n ? ref[first] : 0.0f);
    CHECK(worst <= 2 * lr * steps, "%s: a parameter is %g off (more than 2 lr x %d steps)", what,
          worst, steps);
    printf("%s: %zu of %zu parameters beyond the element tolerance, largest error %.3g\n", what,
           off, n, worst);
}
