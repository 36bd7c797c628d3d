/* Sweeps without training: the samplers (grid order and count with a conditional key, the
 * shuffled grid, random log-uniform and int ranges, the Sobol sequence), the spec's one-line
 * rejections, and ASHA's and the median rule's decisions on small tables derived by hand from
 * the rules (ASHA: Li et al. 2020 as Ray Tune's AsyncHyperBandScheduler implements it).
 *   test_sweep REPO */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/sweep.h"
#include "harness.h"

static char tmp[256], repo[1024];

static const char *write_spec(const char *name, const char *body) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.yaml", tmp, name);
    FILE *f = fopen(path, "w");
    fprintf(f, "base: %s/examples/llama-tiny-fortunes.yaml\n%s", repo, body);
    fclose(f);
    return path;
}

static const char *val(const dt_sweep_trial *t, const char *key) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->key[i], key)) return t->value[i];
    return NULL;
}

/* The grid is itertools.product order (first key slowest); c exists only where b is y. */
static void test_grid(void) {
    dt_sweep_spec *s;
    CHECK_OK(dt_sweep_spec_load(write_spec("grid", "parameters:\n"
                                                   "  optim.lr: [0.001, 0.01]\n"
                                                   "  optim.name: {values: [sgd, adamw]}\n"
                                                   "  optim.momentum:\n"
                                                   "    values: [0.5, 0.9]\n"
                                                   "    when: {optim.name: sgd}\n"),
                                &s));
    if (!s) return;
    dt_sweep_trial *t;
    int n;
    CHECK_OK(dt_sweep_sample(s, &t, &n));
    static const char *want[][3] = {{"0.001", "sgd", "0.5"},  {"0.001", "sgd", "0.9"},
                                    {"0.001", "adamw", NULL}, {"0.01", "sgd", "0.5"},
                                    {"0.01", "sgd", "0.9"},   {"0.01", "adamw", NULL}};
    CHECK(n == 6, "grid: %d trials, want 6", n);
    for (int i = 0; i < n && i < 6; i++) {
        const char *m = val(&t[i], "optim.momentum");
        CHECK(!strcmp(val(&t[i], "optim.lr"), want[i][0]) &&
                  !strcmp(val(&t[i], "optim.name"), want[i][1]) &&
                  (want[i][2] ? m && !strcmp(m, want[i][2]) : !m),
              "grid trial %d: lr %s name %s momentum %s", i, val(&t[i], "optim.lr"),
              val(&t[i], "optim.name"), m ? m : "(none)");
    }
    free(t);
    dt_sweep_spec_free(s);
}

/* Index of trial t in the unshuffled grid g (n trials), or -1. */
static int grid_index(const dt_sweep_trial *g, int n, const dt_sweep_trial *t) {
    for (int i = 0; i < n; i++) {
        int same = g[i].n == t->n;
        for (int k = 0; same && k < t->n; k++)
            same = !strcmp(g[i].key[k], t->key[k]) && !strcmp(g[i].value[k], t->value[k]);
        if (same) return i;
    }
    return -1;
}

/* shuffle: true on a 3 x 3 x 3 grid: a permutation of the grid's 27 trials (each exactly
 * once), not the grid's order, the same for the same seed and another for another seed;
 * `trials: 5` keeps the first 5 of the shuffled order (a random subset, not the grid's first
 * 5). Unbiased: over 2700 seeds each of the 27 positions holds grid trial 0 about 100 times
 * (binomial sd 9.8; the bounds 50..150 are 5 sd; Sattolo's off-by-one, j < i, would never
 * leave it at position 0). */
static void test_grid_shuffle(void) {
    static const char *const params = "parameters:\n"
                                      "  optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]\n"
                                      "  schedule.warmup_steps: [0, 10, 30]\n"
                                      "  optim.weight_decay: [0.0, 0.01, 0.1]\n";
    char body[512];
    dt_sweep_spec *g = NULL, *s = NULL, *cut = NULL;
    CHECK_OK(dt_sweep_spec_load(write_spec("plain", params), &g));
    snprintf(body, sizeof body, "shuffle: true\nseed: 5\n%s", params);
    CHECK_OK(dt_sweep_spec_load(write_spec("shuffled", body), &s));
    snprintf(body, sizeof body, "shuffle: true\nseed: 5\ntrials: 5\n%s", params);
    CHECK_OK(dt_sweep_spec_load(write_spec("shuffled_cut", body), &cut));
    if (!g || !s || !cut) return;
    CHECK(s->shuffle && !g->shuffle, "shuffle: not read");
    dt_sweep_trial *tg, *ts, *ts2, *tc;
    int ng, ns, ns2, nc, seen[27] = {0}, moved = 0, bad = 0, same = 1, other = 0;
    CHECK_OK(dt_sweep_sample(g, &tg, &ng));
    CHECK_OK(dt_sweep_sample(s, &ts, &ns));
    CHECK_OK(dt_sweep_sample(s, &ts2, &ns2));
    CHECK_OK(dt_sweep_sample(cut, &tc, &nc));
    CHECK(ng == 27 && ns == 27 && ns2 == 27 && nc == 5, "shuffle: %d %d %d %d trials", ng, ns, ns2,
          nc);
    for (int i = 0; i < ns && i < 27; i++) {
        int k = grid_index(tg, ng, &ts[i]);
        if (k < 0)
            bad++;
        else
            seen[k]++, moved += k != i;
        same &= grid_index(tg, ng, &ts2[i]) == k;
    }
    for (int k = 0; k < 27; k++) bad += seen[k] != 1;
    CHECK(!bad, "shuffle: not a permutation of the grid (%d trials missing or repeated)", bad);
    CHECK(moved > 0, "shuffle: the grid's own order");
    CHECK(same, "shuffle: the same seed gave another order");
    int cut_moved = 0;
    for (int i = 0; i < nc && i < 5; i++) {
        CHECK(grid_index(ts, ns, &tc[i]) == i, "shuffle + trials: trial %d is not the shuffled %d",
              i, i);
        cut_moved += grid_index(tg, ng, &tc[i]) != i;
    }
    CHECK(cut_moved > 0, "shuffle + trials: the grid's first 5");
    int at[27] = {0};
    for (int seed = 0; seed < 2700; seed++) {
        free(ts2);
        s->seed = (uint64_t)seed;
        CHECK_OK(dt_sweep_sample(s, &ts2, &ns2));
        for (int i = 0; i < ns2 && i < 27; i++)
            if (grid_index(tg, 1, &ts2[i]) == 0) at[i]++;
        if (seed == 6)
            for (int i = 0; i < 27; i++) other |= grid_index(ts, ns, &ts2[i]) != i;
    }
    bad = 0;
    for (int i = 0; i < 27; i++) bad += at[i] < 50 || at[i] > 150;
    CHECK(!bad, "shuffle: grid trial 0 at position 0 %d times, 26 %d times (want ~100 each)", at[0],
          at[26]);
    CHECK(other, "shuffle: seeds 5 and 6 gave the same order");
    free(tg), free(ts), free(ts2), free(tc);
    dt_sweep_spec_free(g), dt_sweep_spec_free(s), dt_sweep_spec_free(cut);
}

/* Random: every value inside its range, log-uniform spread evenly in log space (the mean of
 * log10 within 0.2 of the middle over 1024 draws: 5 standard errors; a uniform draw would
 * be ~1.6 off), every integer
 * of an int range drawn, a conditional key present exactly when its condition holds, and the
 * same seed giving the same trials. */
static void test_random(void) {
    dt_sweep_spec *s;
    CHECK_OK(dt_sweep_spec_load(write_spec("rand", "sampler: random\nseed: 7\ntrials: 1024\n"
                                                   "parameters:\n"
                                                   "  optim.lr: {min: 1.0e-5, max: 1.0e-1, "
                                                   "distribution: log_uniform}\n"
                                                   "  schedule.warmup_steps: {min: 2, max: 5, "
                                                   "distribution: int}\n"
                                                   "  optim.name: {choice: [sgd, adamw]}\n"
                                                   "  optim.momentum: {min: 0, max: 0.99, "
                                                   "when: {optim.name: sgd}}\n"),
                                &s));
    if (!s) return;
    dt_sweep_trial *t, *t2;
    int n, n2, seen[4] = {0}, bad = 0, cond_bad = 0, same = 1;
    CHECK_OK(dt_sweep_sample(s, &t, &n));
    CHECK_OK(dt_sweep_sample(s, &t2, &n2));
    CHECK(n == 1024 && n2 == 1024, "random: %d trials, want 1024", n);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double lr = atof(val(&t[i], "optim.lr"));
        int w = atoi(val(&t[i], "schedule.warmup_steps"));
        if (lr < 1e-5 || lr > 1e-1 || w < 2 || w > 5)
            bad++;
        else
            seen[w - 2]++;
        sum += log10(lr);
        int sgd = !strcmp(val(&t[i], "optim.name"), "sgd");
        const char *m = val(&t[i], "optim.momentum");
        if (sgd != (m != NULL) || (m && (atof(m) < 0 || atof(m) > 0.99))) cond_bad++;
        for (int k = 0; k < t[i].n; k++)
            if (strcmp(t[i].value[k], t2[i].value[k])) same = 0;
    }
    CHECK(!bad, "random: %d values out of range", bad);
    CHECK(fabs(sum / n - (-3.0)) < 0.2, "log_uniform: mean log10 %.3f, want -3 +- 0.2", sum / n);
    CHECK(seen[0] && seen[1] && seen[2] && seen[3], "int range: %d %d %d %d", seen[0], seen[1],
          seen[2], seen[3]);
    CHECK(!cond_bad, "conditional key wrong in %d trials", cond_bad);
    CHECK(same, "the same seed gave other trials");
    free(t), free(t2);
    dt_sweep_spec_free(s);
}

/* The first points of the unscrambled 2-D sequence, derived by hand from the direction numbers
 * (dimension 1: v_k = 2^-k; dimension 2: m = 1, 3 and x + 1, so v = .1, .11, .101 in binary) in
 * Gray-code order; they are also what scipy.stats.qmc.Sobol(2, scramble=False) yields (the
 * scipy comparison for all 24 dimensions is sweep_sobol_scipy). Every dimension is a
 * (0, 1)-sequence: the first 2^10 points put one point in each interval [k/1024, (k+1)/1024),
 * and dimensions 1 and 2 form a (0, m, 2)-net: one point in each of 64 boxes 1/8 x 1/8. */
static void test_sobol(void) {
    static const double want[8][2] = {{0, 0},         {0.5, 0.5},     {0.75, 0.25},
                                      {0.25, 0.75},   {0.375, 0.375}, {0.875, 0.875},
                                      {0.625, 0.125}, {0.125, 0.625}};
    double x[DT_SWEEP_MAX_PARAMS];
    for (uint32_t i = 0; i < 8; i++) {
        CHECK_OK(dt_sobol_point(i, 2, x));
        CHECK(x[0] == want[i][0] && x[1] == want[i][1], "sobol point %u: (%g, %g), want (%g, %g)",
              i, x[0], x[1], want[i][0], want[i][1]);
    }
    static int cells[DT_SWEEP_MAX_PARAMS][1024];
    int box[64] = {0}, bad = 0;
    for (uint32_t i = 0; i < 1024; i++) {
        CHECK_OK(dt_sobol_point(i, DT_SWEEP_MAX_PARAMS, x));
        for (int d = 0; d < DT_SWEEP_MAX_PARAMS; d++) cells[d][(int)(x[d] * 1024)]++;
        if (i < 64) box[(int)(x[0] * 8) * 8 + (int)(x[1] * 8)]++;
    }
    for (int d = 0; d < DT_SWEEP_MAX_PARAMS; d++)
        for (int k = 0; k < 1024; k++) bad += cells[d][k] != 1;
    CHECK(!bad, "sobol: %d of 24 x 1024 intervals without exactly one point", bad);
    bad = 0;
    for (int k = 0; k < 64; k++) bad += box[k] != 1;
    CHECK(!bad, "sobol: dims 1-2 of the first 64 points miss %d boxes of 1/8 x 1/8", bad);
    CHECK(dt_sobol_point(0, 0, x) != DT_OK && dt_sobol_point(0, 25, x) != DT_OK,
          "sobol: 0 or 25 dimensions accepted");
}

static void expect_reject(const char *name, const char *body, const char *what) {
    dt_sweep_spec *s = NULL;
    dt_status st = dt_sweep_spec_load(write_spec(name, body), &s);
    CHECK(st != DT_OK && strstr(dt_last_error(), what) && strstr(dt_last_error(), name),
          "%s: status %d, message '%s' lacks '%s'", name, (int)st, dt_last_error(), what);
    CHECK(!strchr(dt_last_error(), '\n'), "%s: message is not one line", name);
    dt_sweep_spec_free(s);
}

static void test_reject(void) {
    expect_reject("unknown_key", "parameters:\n  optim.lrr: [1]\n", "optim.lrr");
    expect_reject("bad_type", "parameters:\n  train.seed: [1, abc]\n", "train.seed");
    expect_reject("out_of_range", "parameters:\n  optim.lr: {min: -1, max: 1}\n", "optim.lr");
    expect_reject("owned", "parameters:\n  output.dir: [a, b]\n", "output.dir");
    expect_reject("grid_range", "parameters:\n  optim.lr: {min: 0.1, max: 1}\n", "grid");
    expect_reject("log_zero",
                  "sampler: random\ntrials: 2\nparameters:\n"
                  "  optim.weight_decay: {min: 0, max: 1, distribution: log_uniform}\n",
                  "log_uniform");
    expect_reject("when_unknown",
                  "parameters:\n  optim.momentum: {values: [0.9], when: {optim.name: sgd}}\n",
                  "earlier parameter");
    expect_reject("typo_top", "paramters:\n  optim.lr: [1]\n", "paramters");
    expect_reject("bad_rule", "parameters:\n  optim.lr: [0.1]\nearly_stopping: {rule: hyper}\n",
                  "early_stopping.rule");
    expect_reject("bad_override", "overrides: {train.stepz: 3}\nparameters:\n  optim.lr: [0.1]\n",
                  "train.stepz");
    expect_reject("no_trials", "sampler: sobol\nparameters:\n  optim.lr: [0.1]\n", "trials");
    expect_reject("shuffle_random",
                  "sampler: random\nshuffle: true\ntrials: 2\nparameters:\n  optim.lr: [0.1]\n",
                  "shuffle");
    expect_reject("shuffle_bool", "shuffle: yes\nparameters:\n  optim.lr: [0.1]\n", "shuffle");
}

/* ASHA, grace 1, max_t 9, rf 3: rungs 1, 3, 9; minimised metric (negated inside). Each
 * expected decision worked out by hand: the cutoff is the 66.7th percentile (linear) of the
 * negated values already at the rung, and a trial below it stops.
 *   t0@1 1.0  rung empty                                  continue
 *   t1@1 2.0  cutoff of {-1}             = -1      -2 <  stop
 *   t2@1 0.5  cutoff of {-2,-1}          = -1.333  -0.5   continue
 *   t0@3 0.9  rung 3 empty                                continue
 *   t3@1 0.8  cutoff of {-2,-1,-0.5}     = -0.833  -0.8   continue
 *   t2@3 0.95 cutoff of {-0.9}           = -0.9    -0.95 stop
 *   t3@3 0.7  cutoff of {-0.95,-0.9}     = -0.917  -0.7   continue
 *   t0@9      max_t: done (stop)
 *   t3@3 0.1  already recorded at rung 3: continue (no second decision) */
static void test_asha(void) {
    static const struct {
        int trial;
        int64_t step;
        double v;
        int keep;
    } table[] = {{0, 1, 1.0, 1},  {1, 1, 2.0, 0}, {2, 1, 0.5, 1}, {0, 3, 0.9, 1}, {3, 1, 0.8, 1},
                 {2, 3, 0.95, 0}, {3, 3, 0.7, 1}, {0, 9, 0.5, 0}, {3, 3, 5.0, 1}};
    dt_asha *a = calloc(1, sizeof *a);
    CHECK_OK(dt_asha_init(a, 1, 9, 3, 0));
    CHECK(a->n_rungs == 3 && a->rung[0] == 1 && a->rung[1] == 3 && a->rung[2] == 9,
          "rungs: %d (%lld %lld %lld)", a->n_rungs, (long long)a->rung[0], (long long)a->rung[1],
          (long long)a->rung[2]);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int k = dt_asha_on_result(a, table[i].trial, table[i].step, table[i].v);
        CHECK(k == table[i].keep, "asha row %zu (trial %d step %lld %.2f): %d, want %d", i,
              table[i].trial, (long long)table[i].step, table[i].v, k, table[i].keep);
    }
    CHECK(dt_asha_next(a, 1) == 3 && dt_asha_next(a, 3) == 9 && dt_asha_next(a, 9) == 9,
          "asha next rungs");
    /* grace 2, max_t 100, rf 4: floor(log(50) / log(4)) + 1 = 3 rungs: 2, 8, 32 */
    CHECK_OK(dt_asha_init(a, 2, 100, 4, 1));
    CHECK(a->n_rungs == 3 && a->rung[2] == 32, "rungs of (2, 100, 4): %d", a->n_rungs);
    /* maximised: a higher value passes; rf 4: the cutoff is the 75th percentile */
    CHECK(dt_asha_on_result(a, 0, 2, 0.5) == 1, "max: first");
    CHECK(dt_asha_on_result(a, 1, 2, 0.4) == 0, "max: 0.4 below {0.5}");
    CHECK(dt_asha_on_result(a, 2, 2, 0.6) == 1, "max: 0.6 above the 75th pct of {0.4, 0.5}");
    CHECK(dt_asha_init(a, 0, 10, 3, 0) != DT_OK && dt_asha_init(a, 1, 10, 1, 0) != DT_OK,
          "asha: grace 0 or rf 1 accepted");
    free(a);
}

/* Median rule, grace 1, min_samples 2, minimised: t2's best so far against the median of t0's
 * and t1's running means at the same step.
 *   t0: 1.0@1 0.8@2   t1: 2.0@1 1.8@2
 *   t2@1 1.5: means {1.0, 2.0}, median 1.5, best 1.5: not worse     continue
 *   t2@2 1.7: means {0.9, 1.9}, median 1.4, best 1.5: worse          stop
 *   t3@1 9.0: means {1.0, 2.0, 1.5}, median 1.5, best 9.0: worse      stop */
static void test_median(void) {
    dt_median *m = calloc(1, sizeof *m);
    dt_median_init(m, 1, 2, 0);
    CHECK(dt_median_on_result(m, 0, 1, 1.0) && dt_median_on_result(m, 1, 1, 2.0),
          "median: too few samples must continue");
    dt_median_on_result(m, 0, 2, 0.8);
    dt_median_on_result(m, 1, 2, 1.8);
    CHECK(dt_median_on_result(m, 2, 1, 1.5) == 1, "median: t2@1 equal to the median continues");
    CHECK(dt_median_on_result(m, 2, 2, 1.7) == 0, "median: t2@2 worse than 1.4 must stop");
    CHECK(dt_median_on_result(m, 3, 1, 9.0) == 0, "median: t3@1 9.0 must stop");
    dt_median_free(m);
    free(m);
}

/* `test_sweep --replay GRACE MAX_T RF`: ASHA decisions for "trial step value" lines on stdin,
 * one "trial step keep" line each, for asha_ray.py to compare with Ray Tune's scheduler. */
static int replay(char **argv) {
    dt_asha *a = calloc(1, sizeof *a);
    if (!a || dt_asha_init(a, atoll(argv[2]), atoll(argv[3]), atoi(argv[4]), 0) != DT_OK) return 2;
    int trial;
    long long step;
    double v;
    while (scanf("%d %lld %lf", &trial, &step, &v) == 3)
        printf("%d %lld %d\n", trial, step, dt_asha_on_result(a, trial, step, v));
    free(a);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--replay")) return replay(argv);
    if (argc == 3 && !strcmp(argv[1], "--sobol")) { /* for sobol_scipy.py */
        double x[DT_SWEEP_MAX_PARAMS];
        for (uint32_t i = 0; i < (uint32_t)atoi(argv[2]); i++) {
            dt_sobol_point(i, DT_SWEEP_MAX_PARAMS, x);
            for (int d = 0; d < DT_SWEEP_MAX_PARAMS; d++) printf("%s%.17g", d ? " " : "", x[d]);
            printf("\n");
        }
        return 0;
    }
    snprintf(repo, sizeof repo, "%s", argc > 1 ? argv[1] : ".");
    snprintf(tmp, sizeof tmp, "/tmp/test_sweep.XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    test_grid();
    test_grid_shuffle();
    test_random();
    test_sobol();
    test_reject();
    test_asha();
    test_median();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
    return dt_test_finish("test_sweep");
}
