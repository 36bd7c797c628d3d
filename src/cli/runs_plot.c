/* dtrain runs plot RUN[,RUN...] [--metric KEY[,KEY...]] -o FILE.svg|FILE.png (see
 * src/cli/runs.c; drawing in src/cli/plot_axes.c).
 *
 * One panel per metric, stacked in one file under a chart title and one legend (a run keeps its
 * colour in every panel); in a panel, one curve per run: x the step, y the value, nice-number
 * ticks, grid lines, axis titles. A run with several attempts (resumed) is one curve by step:
 * where attempts repeat a step (a resume replays the steps after its checkpoint) the latest
 * attempt's value wins, as on the live dashboard (dt_track_metrics_since). NaN/inf values are
 * gaps. A run without a metric is left out of that panel with a warning; a metric that no run
 * has is an error. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "cli/cli_runs.h"
#include "cli/plot_axes.h"
#include "core/fsmode.h"
#include "dtrain/dtrain.h"

enum { EXIT_GOOD = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };
/* Canvas units (SVG pixels; the PNG has DT_PLOT_PNG_SCALE times as many). */
enum { WIDTH = 900, PANEL_H = 300, MARGIN = 16, TITLE_PT = 16 };

/* Matplotlib's "tab10": ten colours told apart on screen and on paper; more runs reuse them. */
static const uint32_t PALETTE[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                   0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
#define N_PALETTE (int)(sizeof PALETTE / sizeof PALETTE[0])

typedef struct row {
    int64_t step;
    int attempt, seq; /* seq: the store's order, so equal (step, attempt) keep it in the sort */
    double v;
} row;

/* One run's values of one metric, by step. */
typedef struct curve {
    row *r;
    int n, cap, finite;
} curve;

static int add_row(void *ud, const dt_track_metric_row *m) {
    curve *c = ud;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 256;
        row *r = realloc(c->r, (size_t)cap * sizeof *r);
        if (!r) return 1;
        c->r = r, c->cap = cap;
    }
    c->r[c->n] = (row){m->step, m->attempt, c->n, m->value};
    c->n++;
    return 0;
}

static int by_step(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    if (x->attempt != y->attempt) return x->attempt < y->attempt ? -1 : 1;
    return x->seq - y->seq;
}

/* Rows come in (attempt, step) order: sorted by step, the last of each step is the latest
 * attempt's (or, within one attempt, the last written). */
static dt_status load_curve(dt_track *s, int64_t run, const char *key, curve *c) {
    dt_status st = dt_track_metrics(s, run, key, add_row, c);
    if (st != DT_OK) return st;
    if (c->n) qsort(c->r, (size_t)c->n, sizeof *c->r, by_step);
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        if (i + 1 < c->n && c->r[i + 1].step == c->r[i].step) continue;
        c->r[n++] = c->r[i];
        c->finite += isfinite(c->r[n - 1].v) != 0;
    }
    c->n = n;
    return DT_OK;
}

/* Adds the non-empty, not yet listed items of a comma-separated list to l. */
static int split(const char *csv, dt_runs_kv *l) {
    char *dup = strdup(csv), *save = NULL;
    if (!dup) return -1;
    int rc = 0;
    for (char *t = strtok_r(dup, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        int seen = 0;
        for (int i = 0; i < l->n; i++) seen |= !strcmp(l->key[i], t);
        if (!seen) rc = dt_runs_kv_add(l, t, "");
    }
    free(dup);
    return rc;
}

/* An SVG id from the run id and the metric key: [A-Za-z0-9_.-] kept, anything else '_'. */
static void curve_id(char *b, size_t n, int64_t run, const char *key) {
    int k = snprintf(b, n, "curve-%lld-", (long long)run);
    for (; *key && k + 1 < (int)n; key++, k++) {
        char ch = *key;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '.' || ch == '-';
        b[k] = ok ? ch : '_';
    }
    b[k] = 0;
}

typedef struct plot {
    int nr, nk;
    dt_track_run *run;
    char **label;    /* "experiment/name" */
    uint32_t *color; /* by the run's place on the command line */
    curve *c;        /* c[k * nr + i]: metric k of run i */
    dt_runs_kv keys;
} plot;

/* Panel k's axes for its data at canvas height y0. */
static void place_panel(dt_plot *p, const plot *pl, int k, double y0, double min_x, double max_x,
                        dt_plot_panel *pa) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < pl->nr; i++) {
        const curve *c = &pl->c[k * pl->nr + i];
        for (int j = 0; j < c->n; j++) {
            if (!isfinite(c->r[j].v)) continue;
            xmin = fmin(xmin, (double)c->r[j].step), xmax = fmax(xmax, (double)c->r[j].step);
            ymin = fmin(ymin, c->r[j].v), ymax = fmax(ymax, c->r[j].v);
        }
    }
    dt_plot_panel_place(p, pa, 0, y0, WIDTH, PANEL_H, min_x, max_x, xmin, xmax, ymin, ymax);
}

static void draw_panel(dt_plot *p, const plot *pl, int k, const dt_plot_panel *pa) {
    const char *key = pl->keys.key[k];
    dt_plot_group(p, key);
    dt_plot_panel_draw(p, pa, key, "step", key);
    for (int i = 0; i < pl->nr; i++) {
        const curve *c = &pl->c[k * pl->nr + i];
        if (!c->finite) continue;
        char id[160];
        curve_id(id, sizeof id, pl->run[i].id, key);
        dt_plot_curve(p, pl->color[i], 2, id, pl->label[i], key);
        int gap = 1;
        for (int j = 0; j < c->n; j++) {
            if (!isfinite(c->r[j].v)) {
                gap = 1;
                continue;
            }
            dt_plot_point(p, dt_plot_px(pa, (double)c->r[j].step), dt_plot_py(pa, c->r[j].v), gap);
            gap = 0;
        }
        dt_plot_curve_end(p);
    }
    dt_plot_group_end(p);
}

/* Measures, then draws the whole chart into f. 0 written, -1 cairo or the stream failed. */
static int render(const plot *pl, int svg, FILE *f) {
    dt_plot *p = dt_plot_init(svg);
    if (!p) return -1;
    /* the chart title: the experiment when the runs share one, then the metrics */
    char title[1024];
    int same = 1, t = 0;
    for (int i = 1; i < pl->nr; i++) same &= !strcmp(pl->run[i].experiment, pl->run[0].experiment);
    if (same)
        t = snprintf(title, sizeof title, "%s: ", pl->run[0].experiment);
    else
        t = snprintf(title, sizeof title, "%d runs: ", pl->nr);
    for (int k = 0; k < pl->nk && t < (int)sizeof title; k++)
        t += snprintf(title + t, sizeof title - (size_t)t, "%s%s", k ? ", " : "", pl->keys.key[k]);
    /* the legend names the runs drawn in at least one panel */
    const char **lab = calloc((size_t)pl->nr, sizeof *lab);
    uint32_t *col = calloc((size_t)pl->nr, sizeof *col);
    int nl = 0;
    for (int i = 0; lab && col && i < pl->nr; i++) {
        int drawn = 0;
        for (int k = 0; k < pl->nk; k++) drawn |= pl->c[k * pl->nr + i].finite > 0;
        if (drawn) lab[nl] = pl->label[i], col[nl++] = pl->color[i];
    }
    dt_plot_panel *pa = calloc((size_t)pl->nk, sizeof *pa);
    int rc = -1;
    if (lab && col && pa) {
        double ly = MARGIN + TITLE_PT + 10, lx = MARGIN + 8, lw = WIDTH - 2 * lx;
        double lh = dt_plot_legend(p, 0, lx, ly, lw, nl, lab, col);
        double y0 = ly + lh + 6, h = y0 + pl->nk * PANEL_H + MARGIN / 2;
        dt_plot_begin(p, f, WIDTH, h);
        dt_plot_text(p, WIDTH / 2.0, MARGIN + TITLE_PT, title, TITLE_PT, 1, 0, 0, "title");
        dt_plot_legend(p, 1, lx, ly, lw, nl, lab, col);
        /* the widest y tick labels and x tick label set every panel's edges */
        double left = 0, right = WIDTH;
        for (int k = 0; k < pl->nk; k++) {
            place_panel(p, pl, k, y0 + k * PANEL_H, 0, WIDTH, &pa[k]);
            left = fmax(left, pa[k].x), right = fmin(right, pa[k].x + pa[k].w);
        }
        for (int k = 0; k < pl->nk; k++) {
            place_panel(p, pl, k, y0 + k * PANEL_H, left, right, &pa[k]);
            draw_panel(p, pl, k, &pa[k]);
        }
        rc = dt_plot_finish(p);
        p = NULL;
    }
    dt_plot_free(p);
    free(lab), free(col), free(pa);
    return rc;
}

int dt_runs_plot(dt_track *s, int n, char **refs, const char *metrics, const char *out_path) {
    const char *dot = strrchr(out_path, '.');
    int svg = dot && !strcasecmp(dot, ".svg");
    if (!svg && !(dot && !strcasecmp(dot, ".png"))) {
        fprintf(stderr, "dtrain runs plot: %s: the output must be a .svg or .png file\n", out_path);
        return EXIT_USAGE;
    }
    plot pl = {0};
    dt_runs_kv rl = {0};
    int rc = EXIT_GOOD;
    for (int i = 0; i < n && !rc; i++) rc = split(refs[i], &rl) ? EXIT_BAD : EXIT_GOOD;
    if (!rc && split(metrics, &pl.keys)) rc = EXIT_BAD;
    if (rc) fprintf(stderr, "dtrain runs plot: out of memory\n");
    if (!rc && (!rl.n || !pl.keys.n)) {
        fprintf(stderr, "dtrain runs plot: %s\n", !rl.n ? "needs a run" : "--metric names no key");
        rc = EXIT_USAGE;
    }
    pl.nk = pl.keys.n;
    pl.run = calloc((size_t)rl.n + 1, sizeof *pl.run);
    pl.label = calloc((size_t)rl.n + 1, sizeof *pl.label);
    pl.color = calloc((size_t)rl.n + 1, sizeof *pl.color);
    pl.c = calloc((size_t)(rl.n + 1) * (size_t)(pl.nk + 1), sizeof *pl.c);
    if (!rc && (!pl.run || !pl.label || !pl.color || !pl.c)) {
        fprintf(stderr, "dtrain runs plot: out of memory\n");
        rc = EXIT_BAD;
    }
    for (int i = 0; !rc && i < rl.n; i++) {
        dt_track_run r;
        if (dt_track_run_find(s, rl.key[i], &r) != DT_OK) {
            fprintf(stderr, "dtrain runs plot: %s\n", dt_last_error());
            rc = EXIT_BAD;
            break;
        }
        int dup = 0; /* the same run named twice (id and name) is drawn once */
        for (int j = 0; j < pl.nr; j++) dup |= pl.run[j].id == r.id;
        if (dup) continue;
        pl.run[pl.nr] = r;
        pl.color[pl.nr] = PALETTE[pl.nr % N_PALETTE];
        size_t len = strlen(r.experiment) + strlen(r.name) + 2;
        if (!(pl.label[pl.nr] = malloc(len))) {
            fprintf(stderr, "dtrain runs plot: out of memory\n");
            rc = EXIT_BAD;
            break;
        }
        snprintf(pl.label[pl.nr++], len, "%s/%s", r.experiment, r.name);
    }
    /* the curves are loaded in the run order that pl.c's layout assumes: all runs are known */
    for (int k = 0; !rc && k < pl.nk; k++) {
        const char *key = pl.keys.key[k];
        int drawn = 0, any = 0;
        for (int i = 0; !rc && i < pl.nr; i++) {
            curve *c = &pl.c[k * pl.nr + i];
            if (load_curve(s, pl.run[i].id, key, c) != DT_OK) {
                fprintf(stderr, "dtrain runs plot: %s\n", dt_last_error());
                rc = EXIT_BAD;
            }
            drawn += c->finite > 0, any += c->n > 0;
        }
        if (!rc && !drawn) {
            fprintf(stderr, "dtrain runs plot: %s metric '%s'\n",
                    any ? "no finite value in these runs of" : "no run has", key);
            rc = EXIT_BAD;
        }
    }
    /* warnings only once every panel has a curve: a failed plot prints its one error line */
    for (int k = 0; !rc && k < pl.nk; k++) {
        const char *key = pl.keys.key[k];
        for (int i = 0; i < pl.nr; i++) {
            const curve *c = &pl.c[k * pl.nr + i];
            if (!c->finite)
                fprintf(stderr,
                        "dtrain runs plot: warning: run %lld (%s) has %s '%s'; left out of that "
                        "panel\n",
                        (long long)pl.run[i].id, pl.label[i],
                        c->n ? "no finite value of" : "no metric", key);
        }
    }
    if (!rc) {
        FILE *f = dt_fcreate(out_path, "wb");
        if (!f) {
            fprintf(stderr, "dtrain runs plot: cannot write %s: %s\n", out_path, strerror(errno));
            rc = EXIT_BAD;
        } else {
            int bad = render(&pl, svg, f) != 0;
            dt_plot_release_caches();
            bad |= ferror(f) != 0;
            bad |= fclose(f) != 0;
            if (bad) {
                fprintf(stderr, "dtrain runs plot: cannot write %s: rendering or I/O failed\n",
                        out_path);
                remove(out_path);
                rc = EXIT_BAD;
            } else {
                printf("wrote %s: %d run%s, %d metric%s\n", out_path, pl.nr, pl.nr == 1 ? "" : "s",
                       pl.nk, pl.nk == 1 ? "" : "s");
            }
        }
    }
    for (int i = 0; pl.c && i < pl.nr * pl.nk; i++) free(pl.c[i].r);
    for (int i = 0; pl.label && i < pl.nr; i++) free(pl.label[i]);
    free(pl.run), free(pl.label), free(pl.color), free(pl.c);
    dt_runs_kv_free(&rl), dt_runs_kv_free(&pl.keys);
    return rc;
}
