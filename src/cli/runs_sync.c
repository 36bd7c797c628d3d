/* dtrain runs sync [--output-dir DIR] [--uri URI] [PATH ...]
 *
 * Replays MLflow spool files (include/dtrain/mlflow.h: what a run could not send to its MLflow
 * server) to the server each line names, or to --uri. PATH is a spool file or a run folder
 * (its mlflow-spool.jsonl); without one, every DIR/<experiment>/<run>/mlflow-spool.jsonl
 * (default DIR: runs). A replayed spool is removed; a failed one is kept whole (replaying it
 * again is harmless). Exit 0 when every spool was replayed (or there was none), 1 when one
 * failed, 2 on a usage error. */
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli_runs.h"
#include "dtrain/mlflow.h"

enum { EXIT_GOOD = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };
#define SPOOL_NAME "mlflow-spool.jsonl"

static int sync_one(const char *path, const char *uri) {
    int sent = 0;
    if (dt_mlflow_sync(path, uri, &sent) != DT_OK) {
        fprintf(stderr, "dtrain runs sync: %s (%d request%s replayed first; the file is kept)\n",
                dt_last_error(), sent, sent == 1 ? "" : "s");
        return EXIT_BAD;
    }
    printf("%s: %d request%s replayed\n", path, sent, sent == 1 ? "" : "s");
    return EXIT_GOOD;
}

int dt_runs_sync(int argc, char **argv) {
    const char *dir = "runs", *uri = NULL;
    int rc = EXIT_GOOD, n = 0;
    for (int i = 0; i < argc; i++) {
        const char **opt = !strcmp(argv[i], "--output-dir") ? &dir
                           : !strcmp(argv[i], "--uri")      ? &uri
                                                            : NULL;
        if (opt && i + 1 < argc) {
            *opt = argv[++i];
        } else if (opt || argv[i][0] == '-') {
            fprintf(stderr, "dtrain runs sync: %s %s\n", argv[i],
                    opt ? "needs a value" : "is not an option");
            return EXIT_USAGE;
        }
    }
    if (uri && !dt_mlflow_is_uri(uri)) {
        fprintf(stderr, "dtrain runs sync: --uri %s: not an http:// or https:// address\n", uri);
        return EXIT_USAGE;
    }
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--output-dir") || !strcmp(argv[i], "--uri")) {
            i++;
            continue;
        }
        char path[4200];
        struct stat sb;
        if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode))
            snprintf(path, sizeof path, "%s/%s", argv[i], SPOOL_NAME);
        else
            snprintf(path, sizeof path, "%s", argv[i]);
        n++;
        if (sync_one(path, uri) != EXIT_GOOD) rc = EXIT_BAD;
    }
    if (n) return rc;
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/*/*/%s", dir, SPOOL_NAME);
    glob_t g;
    int gr = glob(pat, 0, NULL, &g);
    if (gr == GLOB_NOMATCH) {
        printf("no MLflow spool files under %s: nothing to replay\n", dir);
        return EXIT_GOOD;
    }
    if (gr != 0) {
        fprintf(stderr, "dtrain runs sync: cannot list %s\n", pat);
        return EXIT_BAD;
    }
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (sync_one(g.gl_pathv[i], uri) != EXIT_GOOD) rc = EXIT_BAD;
    globfree(&g);
    return rc;
}
