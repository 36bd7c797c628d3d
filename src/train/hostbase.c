/* The frozen LoRA base once per host (docs/lora.md, "The base once per host").
 *
 * Every worker maps the model's safetensors files read-only and shared (dt_model_map_base): the
 * frozen parameters stored in the dtype they train in point into the page cache, one copy for
 * all the workers of the host. The frozen parameters that need a conversion (an f32 file under a
 * bf16 base) are converted by local rank 0 alone into a segment in /dev/shm, laid out as the
 * graph's frozen buffer (the same offsets on every worker: the same model), which every worker of
 * the host then maps read-only; the file is unlinked as soon as all have mapped it, so nothing
 * is left behind however the job ends after that. Where the segment cannot be made or mapped a
 * worker copies as before, and the start line says why.
 *
 * Also the memory reports that count shared pages once: PSS (/proc/self/smaps_rollup) per worker
 * and its sum over the workers of the host. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "train/train_impl.h"

struct dt_train_base {
    dt_base_map *map;
    const void *seg; /* the converted frozen buffer, mapped PROT_READ (NULL: none) */
    size_t seg_bytes;
    size_t seg_held; /* of seg_bytes, the bytes the segment's file takes (the rest is a hole) */
    char note[600];  /* the start line's "frozen base: ..." */
};

static int is_own_slot(dt_graph *g, const dt_param_info *pi) {
    size_t nb = 0;
    const char *fz = dt_graph_flat_frozen(g, &nb);
    const char *d = dt_graph_value(g, pi->id)->data;
    return d >= fz && d < fz + nb;
}

/* Points the frozen parameters still in g's own frozen buffer at the segment's copy. */
static dt_status attach_segment(dt_train_base *b, dt_graph *g) {
    size_t nb = 0;
    dt_graph_flat_frozen(g, &nb);
    if (nb > b->seg_bytes)
        return dt_error_set(DT_ERR_STATE,
                            "frozen base: the shared segment holds %zu bytes, the "
                            "graph's frozen buffer %zu",
                            b->seg_bytes, nb);
    for (int i = 0; i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(pi->flags & DT_PARAM_FROZEN) || !is_own_slot(g, pi)) continue;
        dt_status st = dt_graph_param_external(g, pi->id, (const char *)b->seg + pi->offset);
        if (st != DT_OK) return st;
    }
    return DT_OK;
}

/* /dev/shm/dtrain-base-<job>-<host's first rank>-<uid>: the same name on every worker of a host
 * and a different one for every job (Open MPI's job id, Slurm's, or the launcher's pid, which
 * the ranks of a host share as their parent). DT_SHM_DIR names another memory-backed directory
 * (a container's small /dev/shm); one that cannot take the file makes the workers copy. */
static void segment_name(const dt_trainer *t, char *out, size_t n) {
    const char *job = getenv("PMIX_NAMESPACE");
    if (!job || !job[0]) job = getenv("OMPI_MCA_ess_base_jobid");
    if (!job || !job[0]) job = getenv("SLURM_JOB_ID");
    char jb[96];
    if (job && job[0])
        snprintf(jb, sizeof jb, "%s", job);
    else
        snprintf(jb, sizeof jb, "p%ld", (long)getppid());
    for (char *c = jb; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            *c = '_';
    const char *dir = getenv("DT_SHM_DIR");
    if (!dir || !dir[0]) dir = "/dev/shm";
    snprintf(out, n, "%.400s/dtrain-base-%s-%d-%ld", dir, jb, t->rank - dt_comm_local_rank(t->comm),
             (long)getuid());
}

/* Local rank 0: writes the converted frozen parameters (those still in g's own frozen buffer: the
 * ones that are mapped from the model files are not copied) at their offsets into a file of the
 * frozen buffer's size. The rest of the file is a hole, which a memory-backed directory does not
 * store and nobody reads (the mapped parameters point into the model files), so the segment costs
 * the converted bytes, not the whole base's. */
static int write_segment(dt_graph *g, const char *name, char *why, size_t wn) {
    size_t nb = 0;
    const char *p = dt_graph_flat_frozen(g, &nb);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    unlink(tmp);
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, wn, "cannot create %.400s: %s", tmp, strerror(errno));
        return 0;
    }
    int ok = ftruncate(fd, (off_t)nb) == 0;
    for (int i = 0; ok && i < dt_graph_param_count(g); i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (!(pi->flags & DT_PARAM_FROZEN) || !is_own_slot(g, pi)) continue;
        size_t len = dt_tensor_nbytes(dt_graph_value(g, pi->id)), done = 0;
        while (ok && done < len) {
            size_t chunk = len - done > (1u << 26) ? (1u << 26) : len - done;
            ssize_t w = pwrite(fd, p + pi->offset + done, chunk, (off_t)(pi->offset + done));
            ok = w > 0;
            if (ok)
                done += (size_t)w;
            else if (w == 0)
                errno = ENOSPC;
        }
    }
    if (!ok) {
        snprintf(why, wn, "cannot write %.400s: %s", tmp, strerror(errno));
        close(fd), unlink(tmp);
        return 0;
    }
    if (close(fd) != 0 || rename(tmp, name) != 0) {
        snprintf(why, wn, "cannot write %.400s: %s", name, strerror(errno));
        unlink(tmp);
        return 0;
    }
    return 1;
}

static int map_segment(dt_train_base *b, const char *name, size_t nb, char *why, size_t wn) {
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || (size_t)sb.st_size != nb) {
        snprintf(why, wn, "cannot map %.400s: %s", name,
                 fd < 0 ? strerror(errno) : "not the size of the frozen buffer");
        if (fd >= 0) close(fd);
        return 0;
    }
    void *p = nb ? mmap(NULL, nb, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, wn, "cannot map %.400s: %s", name, strerror(errno));
        return 0;
    }
    b->seg = p, b->seg_bytes = nb, b->seg_held = (size_t)sb.st_blocks * 512;
    return 1;
}

static double mib(size_t b) {
    return (double)b / 1048576.0;
}

/* The conversion, once per host; collective (two barriers on every rank). */
static dt_status share_converted(dt_trainer *t, dt_train_base *b, const dt_base_report *r) {
    char name[640], why[600] = "";
    segment_name(t, name, sizeof name);
    int local0 = dt_comm_local_rank(t->comm) == 0, ok = 1;
    size_t nb = 0;
    dt_graph_flat_frozen(t->g, &nb);
    dt_status st = DT_OK;
    if (local0) { /* converts the rest into its own buffer, then into the segment */
        st = dt_base_map_attach(b->map, t->g, 1, NULL);
        ok = st == DT_OK && write_segment(t->g, name, why, sizeof why);
        dt_base_map_drop_pages(b->map); /* the wide file, read once */
    }
    /* both barriers on every rank, whatever failed, so that no rank waits for another in vain
     * (a failed local rank 0 has ok = 0: it returns its error after the second) */
    dt_status bs = dt_comm_barrier(t->comm);
    if (bs != DT_OK) return bs;
    if (ok) ok = map_segment(b, name, nb, why, sizeof why);
    if (ok)
        st = attach_segment(b, t->g);
    else if (!local0) /* as without sharing: this worker converts its own copy */
        st = dt_base_map_attach(b->map, t->g, 1, NULL);
    bs = dt_comm_barrier(t->comm); /* every worker has mapped it (or given up) */
    if (local0) unlink(name);
    if (st != DT_OK) return st;
    if (ok)
        snprintf(b->note, sizeof b->note,
                 "frozen base: %d tensors (%.1f MiB) mapped read-only from the model files, %d "
                 "(%.1f MiB) converted once per host into shared memory (%.200s; the segment holds "
                 "%.1f MiB), shared by the %d workers of the host",
                 r->n_mapped, mib(r->mapped_bytes), r->n_other, mib(r->other_bytes), r->why,
                 mib(b->seg_held), dt_comm_local_size(t->comm));
    else
        snprintf(b->note, sizeof b->note,
                 "frozen base: %d tensors (%.1f MiB) mapped read-only from the model files, %d "
                 "(%.1f MiB) copied into each worker (%.200s): no shared segment (%.250s)",
                 r->n_mapped, mib(r->mapped_bytes), r->n_other, mib(r->other_bytes), r->why, why);
    return bs;
}

dt_status dt_train_base_load(dt_trainer *t, const char *path, const char *const *ignore) {
    if (!t->v.lora.share_base) return dt_model_load_base(t->g, path, ignore);
    dt_train_base *b = t->base = calloc(1, sizeof *b);
    if (!b) return dt_error_set(DT_ERR_NOMEM, "frozen base: out of memory");
    dt_base_report r;
    int shared_seg = dt_comm_local_size(t->comm) > 1;
    /* Every worker maps what it can; with several on the host the rest waits for the segment. */
    dt_status st = dt_model_map_base(t->g, path, ignore, !shared_seg, &b->map, &r);
    if (st != DT_OK) return st;
    if (r.n_other > 0 && shared_seg) return share_converted(t, b, &r);
    if (r.n_other > 0)
        snprintf(b->note, sizeof b->note,
                 "frozen base: %d tensors (%.1f MiB) mapped read-only from the model files, %d "
                 "(%.1f MiB) copied (%s)",
                 r.n_mapped, mib(r.mapped_bytes), r.n_other, mib(r.other_bytes), r.why);
    else
        snprintf(b->note, sizeof b->note,
                 "frozen base: %d tensors (%.1f MiB) mapped read-only from the model files, "
                 "shared by the %d worker%s of the host",
                 r.n_mapped, mib(r.mapped_bytes), dt_comm_local_size(t->comm),
                 dt_comm_local_size(t->comm) == 1 ? "" : "s");
    return DT_OK;
}

int dt_train_base_held(const dt_trainer *t) {
    return t->base != NULL;
}

dt_status dt_train_base_reattach(dt_trainer *t) {
    dt_train_base *b = t->base;
    if (!b) return DT_OK;
    dt_status st = dt_base_map_attach(b->map, t->g, b->seg == NULL, NULL);
    return st == DT_OK && b->seg ? attach_segment(b, t->g) : st;
}

const char *dt_train_base_note(const dt_trainer *t) {
    return t->base ? t->base->note : "";
}

void dt_train_base_sharded(dt_trainer *t) {
    dt_train_base *b = t->base;
    if (!b) return;
    if (b->seg) munmap((void *)b->seg, b->seg_bytes);
    b->seg = NULL;
    dt_base_map_close(b->map);
    b->map = NULL;
    size_t n = strlen(b->note);
    snprintf(b->note + n, sizeof b->note - n, "; each worker copied its shard out");
}

void dt_train_base_free(dt_trainer *t) {
    dt_train_base *b = t->base;
    if (!b) return;
    if (b->seg) munmap((void *)b->seg, b->seg_bytes);
    dt_base_map_close(b->map);
    free(b);
    t->base = NULL;
}

double dt_train_pss_mib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long long kb;
    double v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %lld kB", &kb) == 1) v = (double)kb / 1024.0;
    fclose(f);
    return v;
}

/* FNV-1a of the host name: the same key on every worker of a machine. */
static double host_key(void) {
    char h[256] = "";
    gethostname(h, sizeof h - 1);
    uint64_t x = 1469598103934665603ull;
    for (const char *c = h; *c; c++) x = (x ^ (unsigned char)*c) * 1099511628211ull;
    return (double)(x >> 12); /* exact in a double */
}

dt_status dt_train_host_pss(dt_trainer *t, double mine, double *host, int *n_host) {
    *host = mine, *n_host = 1;
    if (t->world < 2) return DT_OK;
    double *v = calloc((size_t)t->world * 2, sizeof *v);
    if (!v) return dt_error_set(DT_ERR_NOMEM, "memory report: out of memory");
    double key = host_key();
    v[t->rank] = mine, v[t->world + t->rank] = key;
    dt_status st = dt_comm_allreduce_f64(t->comm, v, (size_t)t->world * 2);
    if (st == DT_OK) {
        *host = 0, *n_host = 0;
        for (int r = 0; r < t->world; r++)
            if (v[t->world + r] == key) *host += v[r], ++*n_host;
    }
    free(v);
    return st;
}
