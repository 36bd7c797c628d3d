/* The collective board: the ranks of one host count, in a small shared-memory segment, the
 * collectives each has entered on a communicator and whether it is inside one now. Every rank
 * enters the collectives of a communicator in the same order, so when one rank's collective
 * makes no progress (the hang watchdog), a local rank whose count is lower has not reached it:
 * that is the stuck one, and the watchdog's line names it. Ranks on other hosts are not on the
 * board; the line says so instead.
 *
 * The segment is POSIX shared memory (shm_open): local rank 0 creates it under a name unique to
 * its process, the others attach by that name (broadcast by the backend at open), and it is
 * unlinked as soon as all have it mapped, so nothing is left behind however the job ends. Each
 * slot is written by its own rank only (two atomic stores per collective, nothing on the data
 * path) and read by a watchdog only when it fires. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "dist/comm_impl.h"

typedef struct board_slot {
    atomic_llong entered; /* collectives begun on this communicator */
    atomic_int inside;    /* 1 while in one */
    atomic_int rank, pid; /* the world rank and process of this local rank; pid 0: not yet */
    char pad[44];         /* one slot per 64-byte line: no false sharing between ranks */
} board_slot;

struct dt_board {
    board_slot *slot; /* [local_size] */
    int n, me;
};

static dt_board *map_board(int fd, int n, int me) {
    size_t bytes = (size_t)n * sizeof(board_slot);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    dt_board *b = calloc(1, sizeof *b);
    if (!b) {
        munmap(p, bytes);
        return NULL;
    }
    b->slot = p, b->n = n, b->me = me;
    return b;
}

dt_board *dt_board_create(char *name, size_t cap, int local_size) {
    static atomic_int serial;
    snprintf(name, cap, "/dtrain-board-%ld-%d", (long)getpid(), atomic_fetch_add(&serial, 1));
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return NULL;
    if (ftruncate(fd, (off_t)((size_t)local_size * sizeof(board_slot))) != 0) {
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    dt_board *b = map_board(fd, local_size, 0);
    if (!b) shm_unlink(name);
    return b;
}

dt_board *dt_board_attach(const char *name, int local_size, int local_rank) {
    int fd = name[0] ? shm_open(name, O_RDWR, 0600) : -1;
    return fd < 0 ? NULL : map_board(fd, local_size, local_rank);
}

void dt_board_unlink(const char *name) {
    if (name[0]) shm_unlink(name);
}

void dt_board_join(dt_board *b, int rank) {
    if (!b) return;
    board_slot *s = &b->slot[b->me];
    atomic_store(&s->entered, 0);
    atomic_store(&s->inside, 0);
    atomic_store(&s->rank, rank);
    atomic_store(&s->pid, (int)getpid());
}

void dt_board_close(dt_board *b) {
    if (!b) return;
    munmap(b->slot, (size_t)b->n * sizeof(board_slot));
    free(b);
}

void dt_board_enter(dt_board *b) {
    if (!b) return;
    atomic_fetch_add(&b->slot[b->me].entered, 1);
    atomic_store(&b->slot[b->me].inside, 1);
}

void dt_board_leave(dt_board *b) {
    if (b) atomic_store(&b->slot[b->me].inside, 0);
}

/* The state letter of process pid from /proc/PID/stat ('T': stopped), '?' if unknown. With
 * open/read only: the caller is the watchdog thread while another thread may hold stdio. */
static char proc_state(int pid) {
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    int fd = open(p, O_RDONLY);
    if (fd < 0) return '?';
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return '?';
    buf[n] = '\0';
    const char *r = strrchr(buf, ')'); /* "PID (comm) S ...": comm may hold spaces */
    return r && r[1] == ' ' && r[2] ? r[2] : '?';
}

/* ": rank 1 (host H, pid P) has not reached it" / "ranks 1, 3 (host H) have not reached it", or
 * what can be said when no local rank is behind. Called by the watchdog thread while this rank
 * waits; writes with snprintf into out[n] only (no allocation, no stdio lock). */
void dt_board_describe(const dt_board *b, int world, const char *host, char *out, size_t n) {
    if (!b) {
        snprintf(out, n, "a peer rank is stuck or dead");
        return;
    }
    long long mine = atomic_load(&b->slot[b->me].entered);
    int behind = 0, first = -1, pid = 0, stopped = -1, stopped_pid = 0;
    char list[256] = "";
    size_t l = 0;
    for (int j = 0; j < b->n; j++) {
        const board_slot *s = &b->slot[j];
        if (j == b->me || !atomic_load(&s->pid)) continue;
        int r = atomic_load(&s->rank);
        if (atomic_load(&s->entered) >= mine) { /* here too: stopped (SIGSTOP) inside it? */
            char st = proc_state(atomic_load(&s->pid));
            if (stopped < 0 && (st == 'T' || st == 't'))
                stopped = r, stopped_pid = atomic_load(&s->pid);
            continue;
        }
        if (!behind) first = r, pid = atomic_load(&s->pid);
        if (l < sizeof list)
            l += (size_t)snprintf(list + l, sizeof list - l, behind ? ", %d" : "%d", r);
        behind++;
    }
    int remote = world - b->n;
    char others[96] = "";
    if (remote > 0)
        snprintf(others, sizeof others, "; %d rank%s on other hosts not seen from here", remote,
                 remote == 1 ? "" : "s");
    if (behind == 1)
        snprintf(out, n, "rank %d (host %s, pid %d) has not reached it%s", first, host, pid,
                 others);
    else if (behind > 1)
        snprintf(out, n, "ranks %s (host %s) have not reached it%s", list, host, others);
    else if (stopped >= 0)
        snprintf(out, n, "rank %d (host %s, pid %d) is stopped inside it%s", stopped, host,
                 stopped_pid, others);
    else if (remote > 0)
        snprintf(out, n,
                 "every rank on this host has reached it: a rank on another host is stuck or "
                 "dead (%d rank%s there)",
                 remote, remote == 1 ? "" : "s");
    else
        snprintf(out, n, "every rank has reached it: a peer rank is stuck or dead inside it");
}
