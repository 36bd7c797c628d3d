/* The launcher's resources: options, the host list (--hosts, an Open MPI hostfile) and the
 * checks that refuse a job before anything starts. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/file.h"
#include "dtrain/launch.h"
#include "launch/launch_impl.h"

void dt_launch_opts_init(dt_launch_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 1;
    o->max_failures = 3;
    o->backoff_s = 1.0;
    o->mpirun = "mpirun";
    o->monitor_port = -1;
}

static dt_status add_host(dt_launch_opts *o, const char *name, int slots, const char *where) {
    if (o->n_hosts == DT_LAUNCH_MAX_HOSTS)
        return dt_error_set(DT_ERR_INVALID, "%s: more than %d hosts", where, DT_LAUNCH_MAX_HOSTS);
    dt_launch_host *h = &o->hosts[o->n_hosts];
    if (!*name || strlen(name) >= sizeof h->name || slots < 1)
        return dt_error_set(DT_ERR_INVALID, "%s: bad host entry '%s'", where, name);
    snprintf(h->name, sizeof h->name, "%s", name);
    h->slots = slots;
    o->n_hosts++;
    return DT_OK;
}

dt_status dt_launch_hosts_parse(dt_launch_opts *o, const char *list) {
    char buf[8192];
    if (strlen(list) >= sizeof buf)
        return dt_error_set(DT_ERR_INVALID, "--hosts: list longer than %zu bytes", sizeof buf);
    snprintf(buf, sizeof buf, "%s", list);
    int added = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","), added++) {
        char *c = strrchr(tok, ':');
        int slots = 1;
        if (c) {
            *c = 0;
            char *e;
            long l = strtol(c + 1, &e, 10);
            slots = c[1] && !*e && l >= 1 && l <= 1000000 ? (int)l : 0;
        }
        if (add_host(o, tok, slots, "--hosts") != DT_OK)
            return dt_error_set(DT_ERR_INVALID, "--hosts %s: expected host:slots[,host:slots...]",
                                list);
    }
    if (!added)
        return dt_error_set(DT_ERR_INVALID, "--hosts %s: expected host:slots[,host:slots...]",
                            list);
    return DT_OK;
}

dt_status dt_launch_hostfile_read(dt_launch_opts *o, const char *path) {
    FILE *f;
    dt_status fs = dt_file_fopen_regular(path, "r", &f); /* a FIFO would hang the read */
    if (fs != DT_OK) return dt_error_set(fs, "--hostfile %s", dt_last_error());
    char line[1024];
    int bad = 0, added = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char name[256];
        int slots = 1;
        if (sscanf(line, "%255s", name) != 1) continue;
        char *sl = strstr(line, "slots=");
        if (sl && (sscanf(sl + 6, "%d", &slots) != 1 || slots < 1)) bad = 1;
        if (!bad && add_host(o, name, slots, "--hostfile") != DT_OK) bad = 1;
        added += !bad;
    }
    fclose(f);
    if (bad || !added)
        return dt_error_set(DT_ERR_INVALID, "--hostfile %s: expected lines \"HOST [slots=N]\"",
                            path);
    return DT_OK;
}

int dt_launch_find_exe(const char *name, char *out, size_t n) {
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    for (char *d = strtok(buf, ":"); d; d = strtok(NULL, ":")) {
        snprintf(out, n, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return 0;
    }
    return -1;
}

void dt_launch_hosts_format(const dt_launch_opts *o, const char *sep, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; i < o->n_hosts; i++) {
        size_t l = strlen(buf);
        if (l + 1 >= n) break;
        snprintf(buf + l, n - l, "%s%s:%d", i ? sep : "", o->hosts[i].name, o->hosts[i].slots);
    }
}

dt_status dt_launch_check_resources(const dt_launch_opts *o) {
    if (o->n_hosts) {
        int slots = 0;
        for (int i = 0; i < o->n_hosts; i++) {
            slots += o->hosts[i].slots;
            /* a custom rsh agent (containers, namespaces) knows how to reach its hosts */
            if (!strcmp(o->hosts[i].name, "localhost") ||
                (o->mpirun_args && strstr(o->mpirun_args, "plm_rsh_agent")))
                continue;
            struct addrinfo hints = {.ai_family = AF_UNSPEC}, *res = NULL;
            int e = getaddrinfo(o->hosts[i].name, NULL, &hints, &res);
            if (e)
                return dt_error_set(DT_ERR_INVALID, "host '%s' cannot be resolved: %s",
                                    o->hosts[i].name, gai_strerror(e));
            freeaddrinfo(res);
        }
        if (o->workers > slots && !o->oversubscribe) {
            char list[2048];
            dt_launch_hosts_format(o, ", ", list, sizeof list);
            return dt_error_set(DT_ERR_INVALID,
                                "%d workers requested but the hosts offer %d slots (%s); add "
                                "hosts or slots, or --oversubscribe",
                                o->workers, slots, list);
        }
        return DT_OK;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && (long)o->workers * o->threads > cpus && !o->oversubscribe)
        return dt_error_set(DT_ERR_INVALID,
                            "%d workers x %d threads need %d cores, this host has %ld (fewer "
                            "workers or threads, --hosts, or --oversubscribe)",
                            o->workers, o->threads, o->workers * o->threads, cpus);
    return DT_OK;
}
