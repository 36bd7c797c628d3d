/* Drawing for `dtrain runs plot` (src/cli/runs_plot.c): one small canvas API with two back ends,
 * a PNG drawn by cairo and an SVG written element by element, plus nice-number axes and a legend.
 *
 * Why SVG is not cairo's SVG surface: cairo 1.16 (Debian 12) writes text as glyph outlines and
 * gives no element an id or class, so the chart's text could not be searched or selected and its
 * curves could not be told apart by a script. Here the SVG has <text> elements and one <path
 * class="curve"> per (run, metric) whose points are exactly the plotted values. Both formats
 * share one layout: text is measured with cairo's font (fontconfig's sans-serif) for both.
 *
 * Coordinates are canvas units with y down; the PNG has DT_PLOT_PNG_SCALE pixels per unit. */
#ifndef DTRAIN_CLI_PLOT_AXES_H
#define DTRAIN_CLI_PLOT_AXES_H

#include <stdint.h>
#include <stdio.h>

#define DT_PLOT_PNG_SCALE 2 /* sharp text on high-density screens and in slides */

typedef struct dt_plot dt_plot;

/* A canvas that will write SVG (svg != 0) or PNG; NULL when out of memory. */
dt_plot *dt_plot_init(int svg);
/* Width of `s` in canvas units at font `size`. Works before dt_plot_begin (layout needs it). */
double dt_plot_text_width(dt_plot *p, const char *s, double size, int bold);
/* Starts a w x h drawing on a white background; the file is written by dt_plot_finish. */
void dt_plot_begin(dt_plot *p, FILE *f, double w, double h);
/* Writes the drawing to the FILE given to dt_plot_begin (SVG: its end) and frees the canvas.
 * 0 when written, -1 when cairo or the stream failed. */
int dt_plot_finish(dt_plot *p);
void dt_plot_free(dt_plot *p); /* without writing; NULL is fine */
/* Frees cairo's font caches (the fontconfig patterns behind them), which LeakSanitizer would
 * report at exit. Only with no canvas alive: the CLI calls it once its chart is written. */
void dt_plot_release_caches(void);

/* Colours are 0xRRGGBB; `cls` becomes the SVG element's class (the PNG ignores it). */
void dt_plot_line(dt_plot *p, double x0, double y0, double x1, double y1, uint32_t rgb,
                  double width, const char *cls);
void dt_plot_frame(dt_plot *p, double x, double y, double w, double h, uint32_t rgb);
/* Text with its baseline at y; anchor -1 left, 0 centre, 1 right of x; vertical: rotated a
 * quarter turn counter-clockwise about (x, y). */
void dt_plot_text(dt_plot *p, double x, double y, const char *s, double size, int bold, int anchor,
                  int vertical, const char *cls);
/* SVG <g class="panel" data-metric=KEY> around a panel's elements (the PNG ignores it). */
void dt_plot_group(dt_plot *p, const char *metric);
void dt_plot_group_end(dt_plot *p);
/* One curve: <path class="curve" id=ID data-run=RUN data-metric=METRIC d="M x y L x y ...">.
 * Each point is one M (move: after a gap) or L pair; a point alone between gaps is drawn as a
 * dot (round cap of a closed zero-length subpath). */
void dt_plot_curve(dt_plot *p, uint32_t rgb, double width, const char *id, const char *run,
                   const char *metric);
void dt_plot_point(dt_plot *p, double x, double y, int move);
void dt_plot_curve_end(dt_plot *p);

/* ---- axes ---------------------------------------------------------------------------------- */

/* Ticks at lo, lo + step, ..., hi: step is 1, 2 or 5 times a power of ten (Heckbert's "nice
 * numbers"), lo and hi multiples of it enclosing the data. */
typedef struct dt_plot_ticks {
    double lo, hi, step;
    int n;
    int decimals; /* fixed notation: digits after the point */
    int exp;      /* > 0: scientific notation with exp - 1 mantissa decimals */
} dt_plot_ticks;
/* About `target` ticks over [min, max]; `integer`: a step of 1 at least (training steps). */
void dt_plot_ticks_make(double min, double max, int target, int integer, dt_plot_ticks *t);
/* The label of the tick of value v: as few digits as tell the ticks apart ("0.003", "2e-05"). */
void dt_plot_tick_label(const dt_plot_ticks *t, double v, char *buf, size_t n);

/* A panel: the plot area (x, y, w, h) in canvas units and its axes. */
typedef struct dt_plot_panel {
    double x, y, w, h;
    double bx; /* the box's left edge: the y axis title's place */
    dt_plot_ticks xt, yt;
} dt_plot_panel;
/* Ticks for the data ranges and the plot area inside the box (bx, by, bw, bh), leaving room for
 * the panel title above and the tick labels and axis titles left and below; the area spans
 * [min_x, max_x] at most (stacked panels line their plot areas up: place them all once with the
 * box's edges, then again with the largest x and the smallest x + w). */
void dt_plot_panel_place(dt_plot *p, dt_plot_panel *pa, double bx, double by, double bw, double bh,
                         double min_x, double max_x, double xmin, double xmax, double ymin,
                         double ymax);
/* Grid lines, frame, tick labels, the panel title and the axis titles. */
void dt_plot_panel_draw(dt_plot *p, const dt_plot_panel *pa, const char *title, const char *xtitle,
                        const char *ytitle);
double dt_plot_px(const dt_plot_panel *pa, double x);
double dt_plot_py(const dt_plot_panel *pa, double y);

/* Legend entries (a colour swatch and a label) laid out in rows within width w from (x, y);
 * returns the height used. draw 0: only measures. */
double dt_plot_legend(dt_plot *p, int draw, double x, double y, double w, int n,
                      const char *const *labels, const uint32_t *colors);

#endif
