/* JSON forms of experiment-store rows, shared by `dtrain runs export` (src/cli/runs_report.c)
 * `dtrain runs ls --json` (src/cli/runs.c) and the monitoring API (src/serve/api.c). */
#ifndef DTRAIN_TRACK_JSON_H
#define DTRAIN_TRACK_JSON_H

#include <cjson/cJSON.h>
#include "dtrain/track.h"

/* {"id", "experiment", "name", "status" ("lost" for a lost run), "attempts", "world", "start",
 * "end", "last_step", "n_metrics", "hosts"}: a run as `dtrain runs ls --json` and /api/runs list
 * it. */
cJSON *dt_track_run_json(const dt_track_run *r);
/* {"kind", "uri", "step", "attempt", "created", "metrics": {...}} (metrics {} when none). */
cJSON *dt_track_artifact_json(const dt_track_artifact_row *a);
/* {"attempt", "status", "exit_reason", "start_time", "end_time" (null while running),
 * "world_size", "hosts", "writer_host", "writer_pid"}. */
cJSON *dt_track_attempt_json(const dt_track_attempt *a);

#endif
