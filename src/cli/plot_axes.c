/* Canvas back ends (cairo PNG, hand-written SVG), nice-number axes and the legend of
 * `dtrain runs plot` (src/cli/plot_axes.h says why the SVG is not cairo's). */
#include "cli/plot_axes.h"

#include <cairo.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Font sizes (canvas units) and the axis colours. */
enum { TICK_PT = 11, AXIS_PT = 12, PANEL_PT = 13, LEGEND_PT = 12 };
#define GRID_RGB 0xe6e6e6u
#define FRAME_RGB 0x8c8c8cu
#define TEXT_RGB 0x222222u
#define FONT "sans-serif"
#define DOT_R 3.5 /* radius of the disc that marks a lone point */

struct dt_plot {
    int svg;
    cairo_surface_t *ms; /* a 1x1 surface whose context measures text for both formats */
    cairo_t *m;
    cairo_surface_t *img; /* PNG: the drawing */
    cairo_t *cr;
    FILE *f;
    int sub_n, n_pts; /* points in the current subpath / in all of the curve being drawn */
    double sx, sy;    /* the current subpath's first point */
    uint32_t rgb;     /* the curve's colour */
    double *lone;     /* (x, y) of the curve's points that stand alone between gaps */
    int n_lone, cap_lone;
};

dt_plot *dt_plot_init(int svg) {
    dt_plot *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->svg = svg;
    p->ms = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    p->m = cairo_create(p->ms);
    if (cairo_status(p->m) != CAIRO_STATUS_SUCCESS) {
        dt_plot_free(p);
        return NULL;
    }
    return p;
}

void dt_plot_free(dt_plot *p) {
    if (!p) return;
    if (p->cr) cairo_destroy(p->cr);
    if (p->img) cairo_surface_destroy(p->img);
    if (p->m) cairo_destroy(p->m);
    if (p->ms) cairo_surface_destroy(p->ms);
    free(p->lone);
    free(p);
}

void dt_plot_release_caches(void) {
    cairo_debug_reset_static_data();
}

static void set_font(cairo_t *cr, double size, int bold) {
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double dt_plot_text_width(dt_plot *p, const char *s, double size, int bold) {
    cairo_text_extents_t e;
    set_font(p->m, size, bold);
    cairo_text_extents(p->m, s, &e);
    return e.x_advance;
}

static void set_rgb(cairo_t *cr, uint32_t c) {
    cairo_set_source_rgb(cr, (c >> 16 & 255) / 255.0, (c >> 8 & 255) / 255.0, (c & 255) / 255.0);
}

/* XML text and attribute values: run names and metric keys are free text. */
static void xml_put(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

void dt_plot_begin(dt_plot *p, FILE *f, double w, double h) {
    p->f = f;
    if (p->svg) {
        fprintf(f,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\""
                " viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Verdana, sans-serif\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
                w, h, w, h);
        return;
    }
    p->img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(w * DT_PLOT_PNG_SCALE),
                                        (int)ceil(h * DT_PLOT_PNG_SCALE));
    p->cr = cairo_create(p->img);
    cairo_scale(p->cr, DT_PLOT_PNG_SCALE, DT_PLOT_PNG_SCALE);
    cairo_set_source_rgb(p->cr, 1, 1, 1);
    cairo_paint(p->cr);
}

static cairo_status_t png_write(void *ud, const unsigned char *data, unsigned int n) {
    return fwrite(data, 1, n, ud) == n ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

int dt_plot_finish(dt_plot *p) {
    int rc = 0;
    if (p->svg) {
        fputs("</svg>\n", p->f);
    } else {
        cairo_surface_flush(p->img);
        rc = cairo_status(p->cr) == CAIRO_STATUS_SUCCESS &&
                     cairo_surface_write_to_png_stream(p->img, png_write, p->f) ==
                         CAIRO_STATUS_SUCCESS
                 ? 0
                 : -1;
    }
    dt_plot_free(p);
    return rc;
}

void dt_plot_line(dt_plot *p, double x0, double y0, double x1, double y1, uint32_t rgb,
                  double width, const char *cls) {
    if (p->svg) {
        fprintf(p->f,
                "<line class=\"%s\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\""
                " stroke=\"#%06x\" stroke-width=\"%g\"/>\n",
                cls, x0, y0, x1, y1, rgb, width);
        return;
    }
    cairo_set_line_width(p->cr, width);
    cairo_set_line_cap(p->cr, CAIRO_LINE_CAP_BUTT);
    set_rgb(p->cr, rgb);
    cairo_move_to(p->cr, x0, y0);
    cairo_line_to(p->cr, x1, y1);
    cairo_stroke(p->cr);
}

void dt_plot_frame(dt_plot *p, double x, double y, double w, double h, uint32_t rgb) {
    if (p->svg) {
        fprintf(p->f,
                "<rect class=\"frame\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\""
                " fill=\"none\" stroke=\"#%06x\" stroke-width=\"1\"/>\n",
                x, y, w, h, rgb);
        return;
    }
    cairo_set_line_width(p->cr, 1);
    set_rgb(p->cr, rgb);
    cairo_rectangle(p->cr, x, y, w, h);
    cairo_stroke(p->cr);
}

void dt_plot_text(dt_plot *p, double x, double y, const char *s, double size, int bold, int anchor,
                  int vertical, const char *cls) {
    if (p->svg) {
        fprintf(p->f, "<text class=\"%s\" x=\"%.2f\" y=\"%.2f\" font-size=\"%g\"%s%s", cls, x, y,
                size, bold ? " font-weight=\"bold\"" : "",
                anchor < 0   ? ""
                : anchor > 0 ? " text-anchor=\"end\""
                             : " text-anchor=\"middle\"");
        if (vertical) fprintf(p->f, " transform=\"rotate(-90 %.2f %.2f)\"", x, y);
        fprintf(p->f, " fill=\"#%06x\">", TEXT_RGB);
        xml_put(p->f, s);
        fputs("</text>\n", p->f);
        return;
    }
    double w = dt_plot_text_width(p, s, size, bold);
    cairo_save(p->cr);
    set_font(p->cr, size, bold);
    set_rgb(p->cr, TEXT_RGB);
    cairo_translate(p->cr, x, y);
    if (vertical) cairo_rotate(p->cr, -M_PI / 2);
    cairo_move_to(p->cr, anchor < 0 ? 0 : anchor > 0 ? -w : -w / 2, 0);
    cairo_show_text(p->cr, s);
    cairo_restore(p->cr);
}

void dt_plot_group(dt_plot *p, const char *metric) {
    if (!p->svg) return;
    fputs("<g class=\"panel\" data-metric=\"", p->f);
    xml_put(p->f, metric);
    fputs("\">\n", p->f);
}

void dt_plot_group_end(dt_plot *p) {
    if (p->svg) fputs("</g>\n", p->f);
}

void dt_plot_curve(dt_plot *p, uint32_t rgb, double width, const char *id, const char *run,
                   const char *metric) {
    p->sub_n = p->n_pts = p->n_lone = 0;
    p->rgb = rgb;
    if (p->svg) {
        fprintf(p->f, "<path class=\"curve\" id=\"%s\" data-run=\"", id);
        xml_put(p->f, run);
        fputs("\" data-metric=\"", p->f);
        xml_put(p->f, metric);
        fprintf(p->f,
                "\" fill=\"none\" stroke=\"#%06x\" stroke-width=\"%g\" stroke-linejoin=\"round\""
                " stroke-linecap=\"round\" d=\"",
                rgb, width);
        return;
    }
    cairo_new_path(p->cr);
    cairo_set_line_width(p->cr, width);
    cairo_set_line_join(p->cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(p->cr, CAIRO_LINE_CAP_ROUND);
    set_rgb(p->cr, rgb);
}

/* A subpath of one point gets a close: with round caps both SVG and cairo stroke that
 * zero-length subpath as a dot. A dot as thin as the line is easy to miss (an eval value logged
 * once, a value between two NaNs), so dt_plot_curve_end also marks it with a disc. */
static void close_lone_point(dt_plot *p) {
    if (p->sub_n != 1) return;
    if (p->svg)
        fputs(" Z", p->f);
    else
        cairo_close_path(p->cr);
    if (p->n_lone == p->cap_lone) {
        int cap = p->cap_lone ? 2 * p->cap_lone : 16;
        double *l = realloc(p->lone, 2 * (size_t)cap * sizeof *l);
        if (!l) return; /* only the marker is lost */
        p->lone = l, p->cap_lone = cap;
    }
    p->lone[2 * p->n_lone] = p->sx, p->lone[2 * p->n_lone + 1] = p->sy;
    p->n_lone++;
}

void dt_plot_point(dt_plot *p, double x, double y, int move) {
    move |= !p->sub_n;
    if (move) close_lone_point(p), p->sub_n = 0, p->sx = x, p->sy = y;
    p->sub_n++;
    if (p->svg) {
        fprintf(p->f, "%s%c %.2f %.2f", p->n_pts++ ? " " : "", move ? 'M' : 'L', x, y);
        return;
    }
    (move ? cairo_move_to : cairo_line_to)(p->cr, x, y);
}

void dt_plot_curve_end(dt_plot *p) {
    close_lone_point(p);
    if (p->svg) {
        fputs("\"/>\n", p->f);
        for (int i = 0; i < p->n_lone; i++)
            fprintf(p->f,
                    "<circle class=\"dot\" cx=\"%.2f\" cy=\"%.2f\" r=\"%g\" fill=\"#%06x\"/>\n",
                    p->lone[2 * i], p->lone[2 * i + 1], DOT_R, p->rgb);
        return;
    }
    cairo_stroke(p->cr);
    for (int i = 0; i < p->n_lone; i++) {
        cairo_new_sub_path(p->cr);
        cairo_arc(p->cr, p->lone[2 * i], p->lone[2 * i + 1], DOT_R, 0, 2 * M_PI);
    }
    cairo_fill(p->cr);
}

/* ---- axes ---------------------------------------------------------------------------------- */

/* 1, 2, 5 or 10 times a power of ten near x: the closest (round) or the next above (else). */
static double nice_num(double x, int round) {
    double e = floor(log10(x)), f = x / pow(10, e), nf;
    if (round)
        nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else
        nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * pow(10, e);
}

void dt_plot_ticks_make(double min, double max, int target, int integer, dt_plot_ticks *t) {
    /* values near +-DBL_MAX: a range that overflows would make every tick inf */
    min = fmax(min, -1e300), max = fmin(max, 1e300);
    if (!(max > min)) { /* one value: a range around it */
        double d = integer ? 1 : min != 0 ? fabs(min) * 0.1 : 1;
        min = integer && min >= 0 && min < 1 ? min : min - d;
        max += d;
    }
    if (target < 2) target = 2;
    double step = nice_num(nice_num(max - min, 0) / (target - 1), 1);
    if (integer && step < 1) step = 1;
    /* the 1e-9 keeps a bound that is already a tick (up to rounding) from growing a step */
    t->lo = floor(min / step + 1e-9) * step;
    t->hi = ceil(max / step - 1e-9) * step;
    t->step = step;
    t->n = (int)fmin(llround((t->hi - t->lo) / step) + 1, 100);
    double big = fmax(fabs(t->lo), fabs(t->hi));
    int e_step = (int)floor(log10(step) + 1e-9), e_big = (int)floor(log10(big) + 1e-9);
    t->decimals = e_step < 0 ? -e_step : 0;
    /* steps of 1e-5 and below, or labels of seven digits and more: 2.5e-05, 1.2e+06 */
    t->exp = e_step <= -5 || e_big >= 6 ? e_big - e_step + 1 : 0;
}

void dt_plot_tick_label(const dt_plot_ticks *t, double v, char *buf, size_t n) {
    if (fabs(v) < t->step * 1e-6) v = 0; /* no "-0" or "1e-17" at the zero tick */
    if (t->exp > 0 && v != 0)
        snprintf(buf, n, "%.*e", t->exp - 1, v);
    else
        snprintf(buf, n, "%.*f", t->exp > 0 ? 0 : t->decimals, v); /* "0" among "2e-06" */
}

double dt_plot_px(const dt_plot_panel *pa, double x) {
    return pa->x + (x - pa->xt.lo) / (pa->xt.hi - pa->xt.lo) * pa->w;
}

double dt_plot_py(const dt_plot_panel *pa, double y) {
    return pa->y + pa->h - (y - pa->yt.lo) / (pa->yt.hi - pa->yt.lo) * pa->h;
}

enum { PAD = 8, TOP = PANEL_PT + 12, BOTTOM = 6 + TICK_PT + 8 + AXIS_PT + 6, RIGHT = 24 };

void dt_plot_panel_place(dt_plot *p, dt_plot_panel *pa, double bx, double by, double bw, double bh,
                         double min_x, double max_x, double xmin, double xmax, double ymin,
                         double ymax) {
    pa->h = bh - TOP - BOTTOM;
    /* 2% of the range on both sides: an extreme value on a tick would hide in the frame */
    double pad = 0.02 * (ymax - ymin);
    ymin = ymin >= 0 && ymin < pad ? 0 : ymin - pad; /* no negative tick for lr, accuracy */
    ymax = ymax <= 0 && ymax > -pad ? 0 : ymax + pad;
    dt_plot_ticks_make(ymin, ymax, (int)(pa->h / 45) + 1, 0, &pa->yt);
    double lw = 0;
    for (int i = 0; i < pa->yt.n; i++) {
        char b[64];
        dt_plot_tick_label(&pa->yt, pa->yt.lo + i * pa->yt.step, b, sizeof b);
        lw = fmax(lw, dt_plot_text_width(p, b, TICK_PT, 0));
    }
    pa->bx = bx;
    pa->x = fmax(min_x, bx + PAD + AXIS_PT + PAD + lw + 6);
    pa->y = by + TOP;
    /* the last x tick label is centred on the right edge: room for half of it (a guess from
     * RIGHT first, then from the ticks that width gives) */
    double right = RIGHT;
    for (int pass = 0; pass < 2; pass++) {
        pa->w = fmin(max_x, bx + bw - right) - pa->x;
        dt_plot_ticks_make(xmin, xmax, (int)(pa->w / 90) + 1, 1, &pa->xt);
        char b[64];
        dt_plot_tick_label(&pa->xt, pa->xt.hi, b, sizeof b);
        right = fmax(RIGHT, dt_plot_text_width(p, b, TICK_PT, 0) / 2 + PAD);
    }
}

void dt_plot_panel_draw(dt_plot *p, const dt_plot_panel *pa, const char *title, const char *xtitle,
                        const char *ytitle) {
    char b[64];
    for (int i = 0; i < pa->yt.n; i++) {
        double v = pa->yt.lo + i * pa->yt.step, y = dt_plot_py(pa, v);
        dt_plot_line(p, pa->x, y, pa->x + pa->w, y, GRID_RGB, 1, "grid");
        dt_plot_line(p, pa->x - 4, y, pa->x, y, FRAME_RGB, 1, "tick");
        dt_plot_tick_label(&pa->yt, v, b, sizeof b);
        dt_plot_text(p, pa->x - 6, y + 0.35 * TICK_PT, b, TICK_PT, 0, 1, 0, "ytick");
    }
    for (int i = 0; i < pa->xt.n; i++) {
        double v = pa->xt.lo + i * pa->xt.step, x = dt_plot_px(pa, v);
        dt_plot_line(p, x, pa->y, x, pa->y + pa->h, GRID_RGB, 1, "grid");
        dt_plot_line(p, x, pa->y + pa->h, x, pa->y + pa->h + 4, FRAME_RGB, 1, "tick");
        dt_plot_tick_label(&pa->xt, v, b, sizeof b);
        dt_plot_text(p, x, pa->y + pa->h + 6 + TICK_PT, b, TICK_PT, 0, 0, 0, "xtick");
    }
    dt_plot_frame(p, pa->x, pa->y, pa->w, pa->h, FRAME_RGB);
    dt_plot_text(p, pa->x + pa->w / 2, pa->y - 8, title, PANEL_PT, 1, 0, 0, "panel-title");
    dt_plot_text(p, pa->x + pa->w / 2, pa->y + pa->h + BOTTOM - 6, xtitle, AXIS_PT, 0, 0, 0,
                 "axis-title");
    /* rotated, the title's glyphs rise to the left of its baseline */
    dt_plot_text(p, pa->bx + PAD + 0.8 * AXIS_PT, pa->y + pa->h / 2, ytitle, AXIS_PT, 0, 0, 1,
                 "axis-title");
}

enum { SWATCH = 22, ROW = 20, GAP = 20 };

double dt_plot_legend(dt_plot *p, int draw, double x, double y, double w, int n,
                      const char *const *labels, const uint32_t *colors) {
    double cx = x, cy = y;
    int in_row = 0;
    for (int i = 0; i < n; i++) {
        double ew = SWATCH + 6 + dt_plot_text_width(p, labels[i], LEGEND_PT, 0);
        if (in_row && cx + ew > x + w) cx = x, cy += ROW, in_row = 0;
        if (draw) {
            double base = cy + ROW / 2 + 0.35 * LEGEND_PT;
            dt_plot_line(p, cx, cy + ROW / 2, cx + SWATCH, cy + ROW / 2, colors[i], 3, "swatch");
            dt_plot_text(p, cx + SWATCH + 6, base, labels[i], LEGEND_PT, 0, -1, 0, "legend");
        }
        cx += ew + GAP, in_row++;
    }
    return n ? cy - y + ROW : 0;
}
