/* `--json` for the commands that produce something (train, launch, data import): the command's
 * result as one JSON object on stdout, for orchestrators (Argo, Kubeflow, Airflow, a shell
 * script) that chain commands. While it runs, whatever would go to stdout (logs, progress,
 * the library's lines) goes to stderr instead, so stdout holds the object alone. */
#ifndef DTRAIN_CLI_JSON_OUT_H
#define DTRAIN_CLI_JSON_OUT_H

#include <cjson/cJSON.h>

/* Takes every "--json" out of argv[1..] (it may stand anywhere, e.g. after the config's
 * overrides); returns whether there was one. */
int dt_cli_json_take(int *argc, char **argv);
/* Sends stdout to stderr until dt_cli_json_end; -1 (with a line on stderr) if it cannot. */
int dt_cli_json_begin(const char *cmd);
/* Whether dt_cli_json_begin is in effect. */
int dt_cli_json_on(void);
/* Adds "exit_code": rc (and "error": error when not NULL) to o (NULL: a new object with
 * "status" "refused" for rc 2, else "failed"), prints it as one line on the original stdout,
 * frees it; returns rc. Without --json: frees o, returns rc. */
int dt_cli_json_end(cJSON *o, int rc, const char *error);
/* The JSON file at path (NULL when missing or malformed). */
cJSON *dt_cli_json_read(const char *path);

#endif
