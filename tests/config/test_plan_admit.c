/* Memory admission of a rebuilt graph (dt_plan_admit_rebuild, dist.batch_shares=auto's
 * re-balance): the buffers a worker holds now and frees before allocating the new ones count as
 * available, so what must fit is the growth, not the whole new plan beside the old one.
 *
 * Against this host's real MemAvailable (or cgroup): a ResNet-18 batch B is chosen whose plan is
 * 1.5x what one worker may use. Alone it is refused; as the rebuild of a graph of 0.93 B (plan
 * ~1.4x, held now) it is admitted (1.5 <= 0.9 x 2.4); as the rebuild of a graph of B / 15 (~0.1x)
 * it is still refused, naming what is freed first. The margins (>= 25% of the available memory)
 * absorb other processes moving MemAvailable while the test runs. */
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include "core/meminfo.h"
#include "dtrain/config.h"
#include "harness.h"

static const char *yaml;

static dt_config *at_batch(long b) {
    char bs[64];
    snprintf(bs, sizeof bs, "data.batch=%ld", b);
    char *over[] = {bs};
    dt_config *c = NULL;
    if (dt_config_from_args(yaml, 1, over, &c) != DT_OK) {
        CHECK(0, "config at batch %ld: %s", b, dt_last_error());
        return NULL;
    }
    return c;
}

static int64_t need(long b) {
    dt_config *c = at_batch(b);
    dt_plan p;
    memset(&p, 0, sizeof p);
    if (c) CHECK_OK(dt_plan_compute(c, 1, &p));
    dt_config_free(c);
    return p.total_bytes;
}

int main(void) {
    char dir[] = "/tmp/dt-admit-XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/r18.yaml", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fputs("model:\n  depth: 18\n  small_stem: true\n  num_classes: 10\n"
          "data:\n  image_size: 32\n  batch: 8\noptim:\n  name: sgd\n",
          f);
    fclose(f);
    yaml = path;
    dt_mem_avail m;
    CHECK_OK(dt_mem_available(1, &m));
    if (m.per_worker <= 0) {
        printf("SKIP: this host's available memory cannot be read\n");
        remove(path), rmdir(dir);
        return 77;
    }
    /* the plan grows linearly with the batch: two points, then B for 1.5x */
    int64_t n64 = need(64), n128 = need(128);
    double per = (double)(n128 - n64) / 64.0, fixed = (double)n64 - 64.0 * per;
    long B = (long)((1.5 * (double)m.per_worker - fixed) / per);
    double r = (double)need(B) / (double)m.per_worker;
    printf("available %.2f GiB; batch %ld plans %.2fx\n", m.per_worker / 1073741824.0, B, r);
    CHECK(r > 1.4 && r < 1.6, "batch %ld plans %.2fx of the available memory", B, r);
    dt_config *c = at_batch(B), *big = at_batch(B * 93 / 100), *small = at_batch(B / 15);
    if (c && big && small) {
        char warn[2048];
        CHECK(dt_plan_admit(c, 1, 1, warn, sizeof warn) == DT_ERR_INVALID &&
                  strstr(dt_last_error(), "train.memory_check"),
              "the whole plan alone is refused: %s", dt_last_error());
        dt_error_clear();
        CHECK(dt_plan_admit_rebuild(c, NULL, 1, 1, warn, sizeof warn) == DT_ERR_INVALID,
              "held NULL is dt_plan_admit");
        dt_error_clear();
        dt_status st = dt_plan_admit_rebuild(c, big, 1, 1, warn, sizeof warn);
        CHECK(st == DT_OK && !warn[0], "rebuilt from 0.93 B: admitted without a warning (%s%s)",
              st == DT_OK ? "" : dt_last_error(), warn);
        dt_error_clear();
        st = dt_plan_admit_rebuild(c, small, 1, 1, warn, sizeof warn);
        CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "it frees first"),
              "rebuilt from B / 15: refused, naming what is freed: %s", dt_last_error());
        dt_error_clear();
    }
    dt_config_free(c), dt_config_free(big), dt_config_free(small);
    remove(path), rmdir(dir);
    return dt_test_finish("config_plan_admit");
}
