/* --json output of the producing commands (src/cli/json_out.h). */
#include "cli/json_out.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int saved_fd = -1; /* the original stdout */

int dt_cli_json_take(int *argc, char **argv) {
    int found = 0, n = 0;
    for (int i = 0; i < *argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--json"))
            found = 1;
        else
            argv[n++] = argv[i];
    }
    *argc = n;
    return found;
}

int dt_cli_json_begin(const char *cmd) {
    fflush(stdout);
    saved_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0); /* not inherited by children */
    if (saved_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "dtrain %s: --json: cannot redirect stdout\n", cmd);
        return -1;
    }
    return 0;
}

int dt_cli_json_on(void) {
    return saved_fd >= 0;
}

int dt_cli_json_end(cJSON *o, int rc, const char *error) {
    if (saved_fd < 0) {
        cJSON_Delete(o);
        return rc;
    }
    if (!o) o = cJSON_CreateObject();
    if (o && !cJSON_GetObjectItemCaseSensitive(o, "status"))
        cJSON_AddStringToObject(o, "status", rc == 2 ? "refused" : rc ? "failed" : "done");
    if (o && error) cJSON_AddStringToObject(o, "error", error);
    if (o) cJSON_AddNumberToObject(o, "exit_code", rc);
    char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    fflush(stdout);
    FILE *f = fdopen(saved_fd, "w");
    saved_fd = -1;
    if (f) {
        if (txt) fprintf(f, "%s\n", txt);
        fclose(f);
    }
    free(txt);
    return rc;
}

cJSON *dt_cli_json_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) &&
        fread(b, 1, (size_t)n, f) == (size_t)n)
        b[n] = 0;
    else
        free(b), b = NULL;
    fclose(f);
    cJSON *o = b ? cJSON_Parse(b) : NULL;
    free(b);
    return o;
}
