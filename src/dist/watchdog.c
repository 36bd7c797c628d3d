/* The hang watchdog (dt_comm_set_timeout): a rank whose peer stopped -- SIGSTOPped, swapped out,
 * deadlocked, on a host that vanished without closing its sockets -- would wait inside a
 * collective forever, and so would the whole job. A watchdog thread per process looks, a few
 * times per timeout, at the collective this rank is in (comm.c marks each one's start and end:
 * two clock reads and a few atomic stores per collective, nothing on the data path). One that
 * has waited longer than the timeout is reported: one line on stderr naming this rank, its host,
 * the collective (and the bucket and step when known), how long it waited, the config key and
 * the local ranks that have not reached that collective (the collective board, board.c);
 * then the program's hang handler (dt_comm_set_hang_handler) ends the job -- the library never
 * ends the process itself.
 *
 * Why a thread and not MPI_Test polling against a deadline: Open MPI's nonblocking collectives
 * are another implementation (libnbc) with other algorithms, hence other summation orders and
 * bits for more than 2 ranks, and they progress only while some thread is inside MPI, so a poll
 * with sleeps slows every large all-reduce. A collective that timed out could not be cancelled
 * either (MPI has no cancel for collectives): the process must end anyway. The blocking calls stay
 * as they are, and so do their bits and speed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "dist/comm_impl.h"

struct dt_watch {
    dt_comm *c;
    int64_t timeout_ns, period_ns;
    char host[128];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC; signalled to quit */
    int quit;
    /* The collective in flight, written by the thread that runs it: seq changes at every enter
     * and leave, so the watchdog can tell that what it read belongs to one collective. */
    atomic_long seq;
    atomic_llong since_ns; /* CLOCK_MONOTONIC when it began; 0: none in flight */
    _Atomic(const char *) what;
    _Atomic(const char *) unit; /* "gradient bucket" (ddp), or NULL */
    atomic_int index;           /* the unit's number */
    atomic_llong step;          /* dt_comm_set_step; -1: not set */
    atomic_int final;           /* in dt_comm_close: the backend may be gone (no MPI_Abort) */
    long fired_seq;             /* the collective already reported (the handler returned) */
};

static _Atomic(dt_comm_hang_fn) g_hang_fn;
static _Atomic(void *) g_hang_ud;

void dt_comm_set_hang_handler(dt_comm_hang_fn fn, void *ud) {
    atomic_store(&g_hang_ud, ud);
    atomic_store(&g_hang_fn, fn);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void dt_watch_enter(dt_comm *c, const char *what) {
    dt_board_enter(c->board);
    dt_watch *w = c->watch;
    if (!w) return;
    atomic_fetch_add(&w->seq, 1);
    atomic_store(&w->what, what);
    atomic_store(&w->since_ns, now_ns());
}

void dt_watch_leave(dt_comm *c) {
    dt_board_leave(c->board);
    dt_watch *w = c->watch;
    if (!w) return;
    atomic_store(&w->since_ns, 0);
    atomic_fetch_add(&w->seq, 1);
}

void dt_watch_unit(dt_comm *c, const char *unit, int index) {
    dt_watch *w = c->watch;
    if (!w) return;
    atomic_store(&w->index, index);
    atomic_store(&w->unit, unit);
}

void dt_watch_final(dt_comm *c) {
    if (c->watch) atomic_store(&c->watch->final, 1);
}

/* The collective has waited `waited` ns: say so and hand over to the program's handler. Runs on
 * the watchdog thread while another thread of this process is blocked inside MPI, so it writes
 * with write(2) (no stdio lock that a blocked thread could hold). */
static void fire(dt_watch *w, const char *what, const char *unit, int index, long long step,
                 int64_t waited) {
    char ctx[96] = "", at[48] = "", line[1024], who[400];
    if (unit) snprintf(ctx, sizeof ctx, " of %s %d", unit, index);
    if (step >= 0) snprintf(at, sizeof at, " at step %lld", step);
    dt_comm_hang_fn fn = atomic_load(&g_hang_fn);
    char end[64];
    if (fn)
        snprintf(end, sizeof end, "aborting the job (exit status %d)", DT_COMM_EXIT_HANG);
    else
        snprintf(end, sizeof end, "no hang handler: waiting on");
    /* who has not arrived, from the local ranks' collective counts */
    dt_board_describe(w->c->board, w->c->size, w->host, who, sizeof who);
    int n = snprintf(line, sizeof line,
                     "dtrain: rank %d (host %s): %s%s%s made no progress for %.0f s "
                     "(dist.timeout_s): %s; %s\n",
                     w->c->rank, w->host, what ? what : "collective", ctx, at, (double)waited / 1e9,
                     who, end);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    /* rank 0's last log lines, unless a thread is inside stdout right now */
    if (ftrylockfile(stdout) == 0) {
        fflush(stdout);
        funlockfile(stdout);
    }
    if (write(2, line, (size_t)n) < 0) { /* nowhere left to say it; the exit status does */
    }
    if (!fn) return;
    dt_comm_hang h = {.rank = w->c->rank,
                      .code = DT_COMM_EXIT_HANG,
                      .mpi_abort_ok = !atomic_load(&w->final) && w->c->ops->abort_ok &&
                                      w->c->ops->abort_ok(w->c)};
    fn(atomic_load(&g_hang_ud), &h);
}

/* A wake-up this much later than asked means this process itself was frozen (SIGSTOP, a
 * suspended VM, swapped out): the stuck one is then this rank, not a peer, and the time it
 * stood still does not count. Scheduling delays on a busy host are far shorter. */
static int64_t frozen_gap(const dt_watch *w) {
    return w->period_ns + w->timeout_ns / 2;
}

static void *watch_main(void *arg) {
    dt_watch *w = arg;
    int64_t last = now_ns(), thawed = 0; /* thawed: when this process last resumed */
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        int64_t wake = last + w->period_ns;
        struct timespec ts = {(time_t)(wake / 1000000000), (long)(wake % 1000000000)};
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->quit) break;
        int64_t now = now_ns();
        if (now - last > frozen_gap(w)) thawed = now;
        last = now;
        long s0 = atomic_load(&w->seq);
        long long since = atomic_load(&w->since_ns);
        const char *what = atomic_load(&w->what), *unit = atomic_load(&w->unit);
        int index = atomic_load(&w->index);
        long long step = atomic_load(&w->step);
        if (!since || atomic_load(&w->seq) != s0) continue; /* none, or it just changed */
        int64_t waited = now - (since > thawed ? since : thawed);
        if (waited > w->timeout_ns && s0 != w->fired_seq) { /* once per collective */
            w->fired_seq = s0;
            fire(w, what, unit, index, step, now - since);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void dt_watch_stop(dt_comm *c) {
    dt_watch *w = c->watch;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    c->watch = NULL;
    free(w);
}

dt_status dt_watch_start(dt_comm *c, double timeout_s, long long step) {
    dt_watch *w = calloc(1, sizeof *w);
    if (!w) return dt_error_set(DT_ERR_NOMEM, "comm set_timeout: out of memory");
    w->c = c;
    w->timeout_ns = (int64_t)(timeout_s * 1e9);
    /* Checks several times per timeout (a hang is reported within about 1.1 timeouts), at
     * most once a second: an idle wake-up costs microseconds. */
    double period = timeout_s / 10;
    if (period > 1) period = 1;
    if (period < 0.01) period = 0.01;
    w->period_ns = (int64_t)(period * 1e9);
    if (gethostname(w->host, sizeof w->host - 1) != 0) snprintf(w->host, sizeof w->host, "?");
    atomic_init(&w->seq, 0);
    atomic_init(&w->since_ns, 0);
    atomic_init(&w->what, NULL);
    atomic_init(&w->unit, NULL);
    atomic_init(&w->index, -1);
    atomic_init(&w->step, step);
    atomic_init(&w->final, 0);
    w->fired_seq = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return dt_error_set(DT_ERR_STATE, "comm set_timeout: cannot start the watchdog thread");
    }
    c->watch = w;
    return DT_OK;
}

void dt_watch_set_step(dt_comm *c, long long step) {
    if (c->watch) atomic_store(&c->watch->step, step);
}
