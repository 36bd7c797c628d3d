/* The terminal progress line (train.progress): rank 0 redraws one line in place --
 *
 *   step 120/600  epoch 1  loss 3.1416  41234 tok/s  data-wait 0.2%  ETA 1m05s  ckpt 100
 *
 * (plus "comm-wait" with several workers) with "\r" + text + "\033[K" (clear to the end of the
 * line), at most every REDRAW_S seconds (every step when steps are slower). It never wraps: on a
 * narrow terminal the least useful fields are left out, then the rest is cut. Throughput and the
 * data-wait and comm-wait shares are over the steps of the last WINDOW_S seconds (at least one);
 * the ETA adds the run's average time between steps (evaluation, checkpoints) to their step time.
 *
 * Every other line must start at column 0, whichever thread prints it (the checkpoint writer
 * prints "committed" lines; warnings go to stderr). So while the run lasts, t->log and stderr are
 * replaced by pass-through streams (fopencookie) that first finish a drawn progress line with a
 * newline, under the same mutex as the drawing: a log line can never land in the middle of a
 * progress segment, nor a segment in the middle of a log line. The periodic step line is the
 * exception: it replaces the progress line on the screen ("\r\033[K", dt_train_progress_clear)
 * instead of leaving a copy of it above, so the scrollback keeps today's step lines and the
 * live line stays at the bottom. Reassigning stderr is what glibc documents for this; both
 * streams are put back by dt_train_progress_free, after the writer threads have been joined. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "train/train_impl.h"

#define REDRAW_S 0.25 /* at most ~4 redraws a second */
#define WINDOW_S 10.0 /* rates and ETA over about this much recent wall time */
enum { RING = 64, DEFAULT_COLS = 100 };

/* Cumulative counters at one redraw: differences of two give a window's rates. */
typedef struct mark {
    double t, wait, busy, comm; /* wall clock; data wait, step time and comm wait totals, s */
    int64_t step;
} mark;

struct dt_train_pline {
    pthread_mutex_t mu;        /* drawing and every write through the wrappers */
    FILE *out;                 /* the real log stream: where the line is drawn */
    FILE *log_wrap;            /* t->log during the run */
    FILE *err_real, *err_wrap; /* the process's stderr and its replacement */
    int active;                /* between begin and end: draw */
    int open;                  /* a segment is on the screen without its newline */
    int log_mid, err_mid;      /* a line was started on that stream but not finished: do not draw */
    int64_t ckpt_step;         /* the last committed checkpoint, -1: none */
    double last_draw;
    double loss_sum; /* rank 0's step losses since the last redraw */
    int64_t loss_n;
    mark first; /* at dt_trainer_run's start */
    mark ring[RING];
    int n_marks, head; /* ring[head] is the newest */
};

/* ---- the pass-through streams ------------------------------------------------------------ */

typedef struct wrap {
    dt_train_pline *p;
    FILE *real;
    int is_err;
} wrap;

static ssize_t wrap_write(void *cookie, const char *buf, size_t n) {
    wrap *w = cookie;
    dt_train_pline *p = w->p;
    pthread_mutex_lock(&p->mu);
    if (p->open) { /* finish the progress line: the text starts at column 0 below it */
        fputc('\n', p->out);
        fflush(p->out);
        p->open = 0;
    }
    size_t done = fwrite(buf, 1, n, w->real);
    fflush(w->real);
    if (n) *(w->is_err ? &p->err_mid : &p->log_mid) = buf[n - 1] != '\n';
    pthread_mutex_unlock(&p->mu);
    return done ? (ssize_t)done : n ? -1 : 0;
}

static int wrap_close(void *cookie) {
    free(cookie);
    return 0;
}

static FILE *make_wrap(dt_train_pline *p, FILE *real, int is_err) {
    wrap *w = malloc(sizeof *w);
    if (!w) return NULL;
    *w = (wrap){.p = p, .real = real, .is_err = is_err};
    FILE *f =
        fopencookie(w, "w", (cookie_io_functions_t){.write = wrap_write, .close = wrap_close});
    if (!f) {
        free(w);
        return NULL;
    }
    /* whole lines reach wrap_write (the memory line is several fprintf calls); stderr stays
     * unbuffered like the real one */
    setvbuf(f, NULL, is_err ? _IONBF : _IOLBF, 0);
    return f;
}

/* ---- life cycle -------------------------------------------------------------------------- */

static int wanted(const dt_trainer *t) {
    if (t->rank != 0 || !t->log || t->v.train.progress == DT_CFG_PROGRESS_OFF) return 0;
    if (t->v.train.progress == DT_CFG_PROGRESS_ON) return 1;
    /* auto: a terminal. Open MPI 4 gives every rank a pseudo-terminal as stdout even when
     * mpirun's own output goes to a file or pipe, so under MPI the terminal that counts is
     * mpirun's (the rank's parent on the launching host): `mpirun ... > log` stays plain, and
     * so does `dtrain launch`, whose mpirun writes to a pipe the launcher reads line by line. */
    int fd = fileno(t->log);
    if (fd < 0 || !isatty(fd)) return 0;
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_RANK") && !getenv("PMIX_RANK")) return 1;
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/%d/fd/1", (int)getppid());
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    return !strncmp(target, "/dev/pts/", 9) || !strncmp(target, "/dev/tty", 8);
}

static void push_mark(dt_trainer *t, dt_train_pline *p, double now) {
    mark m = {
        .t = now, .wait = t->wait_total_s, .busy = t->step_time_total_s, .step = t->prog.step};
    if (t->ddp) {
        dt_ddp_stats ds;
        dt_ddp_get_stats(t->ddp, &ds);
        m.comm = ds.wait_total_s + ds.gather_wait_total_s;
    }
    p->head = (p->head + 1) % RING;
    p->ring[p->head] = m;
    if (p->n_marks < RING) p->n_marks++;
}

void dt_train_progress_begin(dt_trainer *t) {
    if (t->pl || !wanted(t)) return;
    dt_train_pline *p = calloc(1, sizeof *p);
    if (!p) return; /* no progress line: plain log lines as without a terminal */
    pthread_mutex_init(&p->mu, NULL);
    p->out = t->log;
    p->err_real = stderr;
    p->log_wrap = make_wrap(p, t->log, 0);
    p->err_wrap = make_wrap(p, stderr, 1);
    if (!p->log_wrap || !p->err_wrap) {
        if (p->log_wrap) fclose(p->log_wrap);
        if (p->err_wrap) fclose(p->err_wrap);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return;
    }
    fflush(t->log), fflush(stderr);
    t->log = p->log_wrap;
    stderr = p->err_wrap;
    /* a resumed run starts from its checkpoint */
    p->ckpt_step = t->prog.step > 0 ? t->prog.step : -1;
    p->head = -1;
    push_mark(t, p, dt_train_now());
    p->first = p->ring[p->head];
    p->active = 1;
    t->pl = p;
}

void dt_train_progress_end(dt_trainer *t) {
    dt_train_pline *p = t->pl;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    if (p->open) fputc('\n', p->out), fflush(p->out);
    p->open = 0, p->active = 0;
    pthread_mutex_unlock(&p->mu);
}

void dt_train_progress_free(dt_trainer *t) {
    dt_train_pline *p = t->pl;
    if (!p) return;
    dt_train_progress_end(t);
    if (stderr == p->err_wrap) stderr = p->err_real;
    if (t->log == p->log_wrap) t->log = p->out;
    fclose(p->log_wrap); /* flushes what is left into the real streams */
    fclose(p->err_wrap);
    pthread_mutex_destroy(&p->mu);
    free(p);
    t->pl = NULL;
}

void dt_train_progress_ckpt(dt_trainer *t, int64_t step) {
    dt_train_pline *p = t->pl;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->ckpt_step = step;
    pthread_mutex_unlock(&p->mu);
}

void dt_train_progress_rebase(dt_trainer *t) {
    dt_train_pline *p = t->pl;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->n_marks = 0; /* the next mark starts a new window */
    pthread_mutex_unlock(&p->mu);
}

void dt_train_progress_clear(dt_trainer *t) {
    dt_train_pline *p = t->pl;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    if (p->open) fputs("\r\033[K", p->out), fflush(p->out);
    p->open = 0;
    pthread_mutex_unlock(&p->mu);
}

/* ---- drawing ----------------------------------------------------------------------------- */

static int term_cols(FILE *f) {
    struct winsize ws;
    int fd = fileno(f);
    if (fd >= 0 && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return DEFAULT_COLS;
}

static void fmt_duration(double s, char *buf, size_t n) {
    long long v = (long long)(s + 0.5);
    if (v < 60)
        snprintf(buf, n, "%llds", v);
    else if (v < 3600)
        snprintf(buf, n, "%lldm%02llds", v / 60, v % 60);
    else
        snprintf(buf, n, "%lldh%02lldm", v / 3600, v % 3600 / 60);
}

/* The line's fields, in display order; `keep` ranks them for a narrow terminal: the lowest
 * goes first, and "step N/M" stays. */
enum { F_STEP, F_EPOCH, F_LOSS, F_RATE, F_DATA, F_COMM, F_ETA, F_CKPT, N_FIELDS };
static const int keep[N_FIELDS] = {
    [F_STEP] = 7, [F_ETA] = 6,  [F_LOSS] = 5, [F_CKPT] = 4,
    [F_RATE] = 3, [F_COMM] = 2, [F_DATA] = 1, [F_EPOCH] = 0,
};
enum { FIELD_CHARS = 64 };

static void compose(dt_trainer *t, dt_train_pline *p, double now, char f[N_FIELDS][FIELD_CHARS]) {
    const mark *cur = &p->ring[p->head], *base = NULL;
    /* the window: the oldest mark within WINDOW_S, but at least the previous one */
    for (int k = 1; k < p->n_marks; k++) {
        const mark *m = &p->ring[(p->head - k + RING) % RING];
        if (base && now - m->t > WINDOW_S) break;
        base = m;
    }
    int64_t steps = base ? cur->step - base->step : 0;
    double busy = base ? cur->busy - base->busy : 0;
    double per_step =
        (double)(t->G * t->v.train.grad_accum) * (t->task == DT_TASK_LM ? (double)t->T : 1.0);
    /* training speed: over the steps' own time, so an evaluation does not dent it */
    double rate = steps > 0 && busy > 0 ? (double)steps * per_step / busy : 0;
    /* The ETA: the window's time per step plus the run's average time between steps
     * (evaluation, checkpoint snapshots, log lines): an evaluation is spread over all the steps
     * so far instead of inflating the estimate right after it. */
    int64_t run_steps = cur->step - p->first.step;
    double between = run_steps > 0
                         ? ((cur->t - p->first.t) - (cur->busy - p->first.busy)) / (double)run_steps
                         : 0;
    double step_s = steps > 0 ? busy / (double)steps + (between > 0 ? between : 0) : 0;
    double loss = p->loss_n ? p->loss_sum / (double)p->loss_n : t->prog.loss;
    for (int i = 0; i < N_FIELDS; i++) f[i][0] = '\0';
    snprintf(f[F_STEP], FIELD_CHARS, "step %lld/%lld", (long long)cur->step,
             (long long)t->prog.total_steps);
    snprintf(f[F_EPOCH], FIELD_CHARS, "epoch %lld", (long long)t->prog.epoch + 1);
    snprintf(f[F_LOSS], FIELD_CHARS, "loss %.4f", loss);
    snprintf(f[F_RATE], FIELD_CHARS, "%.0f %s/s", rate, t->task == DT_TASK_LM ? "tok" : "img");
    snprintf(f[F_DATA], FIELD_CHARS, "data-wait %.1f%%",
             busy > 0 ? 100 * (cur->wait - base->wait) / busy : 0.0);
    if (t->ddp)
        snprintf(f[F_COMM], FIELD_CHARS, "comm-wait %.1f%%",
                 busy > 0 ? 100 * (cur->comm - base->comm) / busy : 0.0);
    char d[32];
    if (cur->step >= t->prog.total_steps) {
        fmt_duration(now - t->t_start, d, sizeof d);
        snprintf(f[F_ETA], FIELD_CHARS, "done in %s", d);
    } else if (step_s > 0) {
        fmt_duration((double)(t->prog.total_steps - cur->step) * step_s, d, sizeof d);
        snprintf(f[F_ETA], FIELD_CHARS, "ETA %s", d);
    } else {
        snprintf(f[F_ETA], FIELD_CHARS, "ETA ?");
    }
    if (p->ckpt_step >= 0)
        snprintf(f[F_CKPT], FIELD_CHARS, "ckpt %lld", (long long)p->ckpt_step);
    else
        snprintf(f[F_CKPT], FIELD_CHARS, "ckpt none");
}

/* Joins the fields with two spaces into at most `max` characters: drops the least wanted
 * fields while the line is too long, then cuts what is left (a very narrow terminal). */
static size_t fit(char f[N_FIELDS][FIELD_CHARS], size_t max, char *out, size_t n) {
    int on[N_FIELDS];
    size_t len = 0;
    for (int i = 0; i < N_FIELDS; i++) {
        on[i] = f[i][0] != '\0';
        if (on[i]) len += strlen(f[i]) + (len ? 2 : 0);
    }
    for (int drop = 0; len > max && drop < keep[F_STEP]; drop++)
        for (int i = 0; i < N_FIELDS; i++)
            if (on[i] && keep[i] == drop) {
                on[i] = 0;
                len = 0;
                for (int j = 0; j < N_FIELDS; j++)
                    if (on[j]) len += strlen(f[j]) + (len ? 2 : 0);
            }
    size_t l = 0;
    out[0] = '\0';
    for (int i = 0; i < N_FIELDS; i++)
        if (on[i]) l += (size_t)snprintf(out + l, n - l, "%s%s", l ? "  " : "", f[i]);
    return l < max ? l : max;
}

void dt_train_progress_step(dt_trainer *t) {
    dt_train_pline *p = t->pl;
    if (!p || !p->active) return;
    p->loss_sum += t->prog.loss, p->loss_n++;
    double now = dt_train_now();
    int last = t->prog.step >= t->prog.total_steps;
    pthread_mutex_lock(&p->mu);
    /* a line printed since the last redraw (p->open cleared) brings the line back at once */
    if (p->open && !last && now - p->last_draw < REDRAW_S) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    push_mark(t, p, now);
    char f[N_FIELDS][FIELD_CHARS], text[N_FIELDS * (FIELD_CHARS + 2)];
    compose(t, p, now, f);
    size_t cols = (size_t)term_cols(p->out);
    /* one column short of the width: a full last column makes some terminals wrap */
    size_t len = fit(f, cols > 1 ? cols - 1 : 1, text, sizeof text);
    if (!p->log_mid && !p->err_mid) {
        fputc('\r', p->out);
        fwrite(text, 1, len, p->out);
        fputs("\033[K", p->out);
        fflush(p->out);
        p->open = 1;
        p->last_draw = now;
        p->loss_sum = 0, p->loss_n = 0;
    }
    pthread_mutex_unlock(&p->mu);
}
