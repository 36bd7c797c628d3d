/* dist.batch_shares parsing and the two splits: explicit weights (dt_config_share_split) and
 * measured rates (dt_config_share_from_rates, dist.batch_shares=auto): the parts add up to the
 * global batch, follow the rates by largest remainder, keep every worker at >= 1 sample, and
 * bad rates are refused with the key named. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "dtrain/config.h"
#include "dtrain/status.h"
#include "harness.h"

static int64_t sum(const int64_t *p, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    return s;
}

static void test_parse(void) {
    int64_t w[8];
    int n = -1;
    CHECK_OK(dt_config_batch_shares("auto", w, 8, &n));
    CHECK(n == 0, "auto: no weights (equal parts first), got %d", n);
    CHECK(dt_config_shares_auto("auto") && dt_config_shares_auto(" auto"), "auto recognised");
    CHECK(!dt_config_shares_auto("equal") && !dt_config_shares_auto("2,1") &&
              !dt_config_shares_auto("autox"),
          "only auto is auto");
    CHECK(dt_config_batch_shares("autox", w, 8, &n) != DT_OK &&
              strstr(dt_last_error(), "dist.batch_shares"),
          "autox refused naming the key: %s", dt_last_error());
    dt_config *c = NULL;
    char *over[] = {"dist.batch_shares=auto", "dist.rebalance_step=7"};
    CHECK_OK(dt_config_from_args(NULL, 2, over, &c));
    if (c) {
        CHECK(dt_config_get_values(c)->dist.rebalance_step == 7, "dist.rebalance_step read");
        dt_config *k = NULL;
        CHECK_OK(dt_config_clone(c, &k));
        if (k) {
            CHECK_OK(dt_config_set(k, "data.batch", "5"));
            CHECK(dt_config_get_values(k)->data.batch == 5 &&
                      dt_config_get_values(c)->data.batch != 5,
                  "a clone changes alone");
            CHECK(dt_config_shares_auto(dt_config_get_values(k)->dist.batch_shares),
                  "the clone keeps the values");
        }
        dt_config_free(k);
    }
    dt_config_free(c);
    char *bad[] = {"dist.rebalance_step=0"};
    c = NULL;
    CHECK(dt_config_from_args(NULL, 1, bad, &c) != DT_OK &&
              strstr(dt_last_error(), "dist.rebalance_step"),
          "rebalance_step 0 refused: %s", dt_last_error());
    dt_config_free(c);
}

static void test_from_rates(void) {
    int64_t p[4];
    /* one worker twice as fast: 16 -> 10.67 / 5.33 -> [11, 5] */
    CHECK_OK(dt_config_share_from_rates(16, (double[]){200, 100}, 2, p));
    CHECK(p[0] == 11 && p[1] == 5, "[200,100] of 16: [%lld,%lld], expected [11,5]", (long long)p[0],
          (long long)p[1]);
    /* equal rates: equal parts; a tie of remainders goes to the lower rank */
    CHECK_OK(dt_config_share_from_rates(9, (double[]){1, 1}, 2, p));
    CHECK(p[0] == 5 && p[1] == 4, "[1,1] of 9: [%lld,%lld]", (long long)p[0], (long long)p[1]);
    /* a very slow worker still gets one sample, taken from the largest part */
    CHECK_OK(dt_config_share_from_rates(8, (double[]){1000, 1e-3, 500}, 3, p));
    CHECK(p[1] == 1 && sum(p, 3) == 8 && p[0] > p[2], "slow worker: [%lld,%lld,%lld]",
          (long long)p[0], (long long)p[1], (long long)p[2]);
    /* parts follow the rates: |part - G r / sum| < 1 and they add up to G */
    double r[4] = {3.3, 1.7, 2.9, 0.4}, s = 3.3 + 1.7 + 2.9 + 0.4;
    CHECK_OK(dt_config_share_from_rates(101, r, 4, p));
    CHECK(sum(p, 4) == 101, "parts add up to 101: %lld", (long long)sum(p, 4));
    for (int i = 0; i < 4; i++)
        CHECK(fabs((double)p[i] - 101 * r[i] / s) < 1, "part %d = %lld near %.2f", i,
              (long long)p[i], 101 * r[i] / s);
    /* deterministic */
    int64_t q[4];
    CHECK_OK(dt_config_share_from_rates(101, r, 4, q));
    CHECK(!memcmp(p, q, sizeof p), "the same rates give the same parts");
    CHECK(dt_config_share_from_rates(8, (double[]){1, 0}, 2, p) != DT_OK &&
              strstr(dt_last_error(), "worker 1"),
          "a zero rate refused naming the worker: %s", dt_last_error());
    CHECK(dt_config_share_from_rates(8, (double[]){NAN, 1}, 2, p) != DT_OK, "NaN refused");
    CHECK(dt_config_share_from_rates(1, (double[]){1, 1}, 2, p) != DT_OK &&
              strstr(dt_last_error(), "global batch of 1"),
          "a global batch smaller than the workers refused: %s", dt_last_error());
}

int main(void) {
    test_parse();
    test_from_rates();
    return dt_test_finish("test_shares");
}
