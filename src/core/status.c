/* Thread-local last-error message (see include/dtrain/status.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "dtrain/status.h"

static _Thread_local char last_error[1024];

const char *dt_last_error(void) { return last_error; }

void dt_error_clear(void) { last_error[0] = '\0'; }

/* Formatted aside first: callers may prefix the previous message (an argument that is
 * dt_last_error() itself), and vsnprintf into the buffer it reads from is undefined. */
dt_status dt_error_set(dt_status s, const char *fmt, ...) {
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return s;
}

const char *dt_status_name(dt_status s) {
    switch (s) {
    case DT_OK: return "ok";
    case DT_ERR_INVALID: return "invalid argument";
    case DT_ERR_SHAPE: return "shape";
    case DT_ERR_DTYPE: return "dtype";
    case DT_ERR_RANGE: return "out of range";
    case DT_ERR_NOMEM: return "out of memory";
    case DT_ERR_IO: return "i/o";
    case DT_ERR_FORMAT: return "format";
    case DT_ERR_STATE: return "state";
    case DT_ERR_INTERNAL: return "internal";
    case DT_ERR_NOTFOUND: return "not found";
    }
    return "unknown";
}
