/* JSON forms of experiment-store rows (src/track/track_json.h). */
#include "track/track_json.h"

cJSON *dt_track_artifact_json(const dt_track_artifact_row *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", a->kind);
    cJSON_AddStringToObject(o, "uri", a->uri);
    cJSON_AddNumberToObject(o, "step", (double)a->step);
    cJSON_AddNumberToObject(o, "attempt", a->attempt);
    cJSON_AddNumberToObject(o, "created", a->created);
    cJSON *m = a->metrics_json[0] ? cJSON_Parse(a->metrics_json) : NULL;
    cJSON_AddItemToObject(o, "metrics", m ? m : cJSON_CreateObject());
    return o;
}
