/* JSON forms of experiment-store rows (src/track/track_json.h). */
#include "track/track_json.h"

cJSON *dt_track_run_json(const dt_track_run *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)r->id);
    cJSON_AddStringToObject(o, "experiment", r->experiment);
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddStringToObject(o, "status", r->lost ? "lost" : r->status);
    cJSON_AddNumberToObject(o, "attempts", r->attempts);
    cJSON_AddNumberToObject(o, "world", r->world);
    cJSON_AddNumberToObject(o, "start", r->start_time);
    cJSON_AddNumberToObject(o, "end", r->end_time);
    cJSON_AddNumberToObject(o, "last_step", (double)r->last_step);
    cJSON_AddNumberToObject(o, "n_metrics", (double)r->n_metrics);
    cJSON_AddStringToObject(o, "hosts", r->hosts);
    return o;
}

cJSON *dt_track_artifact_json(const dt_track_artifact_row *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", a->kind);
    cJSON_AddStringToObject(o, "uri", a->uri);
    cJSON_AddNumberToObject(o, "step", (double)a->step);
    cJSON_AddNumberToObject(o, "attempt", a->attempt);
    cJSON_AddNumberToObject(o, "created", a->created);
    cJSON_AddItemToObject(o, "removed",
                          a->removed > 0 ? cJSON_CreateNumber(a->removed) : cJSON_CreateNull());
    cJSON *m = a->metrics_json[0] ? cJSON_Parse(a->metrics_json) : NULL;
    cJSON_AddItemToObject(o, "metrics", m ? m : cJSON_CreateObject());
    return o;
}

cJSON *dt_track_attempt_json(const dt_track_attempt *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "attempt", a->attempt);
    cJSON_AddStringToObject(o, "status", a->status);
    cJSON_AddStringToObject(o, "exit_reason", a->exit_reason);
    cJSON_AddNumberToObject(o, "start_time", a->start_time);
    cJSON_AddItemToObject(o, "end_time",
                          a->end_time > 0 ? cJSON_CreateNumber(a->end_time) : cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "world_size", a->world);
    cJSON_AddStringToObject(o, "hosts", a->hosts);
    cJSON_AddStringToObject(o, "writer_host", a->writer_host);
    cJSON_AddNumberToObject(o, "writer_pid", (double)a->writer_pid);
    return o;
}
