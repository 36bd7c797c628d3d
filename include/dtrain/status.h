/* Status codes and the last-error message.
 *
 * Library functions return a dt_status and leave a human-readable message that names the
 * file, key, op, tensor or shape involved (like SQLite's errmsg). The message is thread-local.
 * No library function exits or aborts on bad input; only the CLI decides to exit. */
#ifndef DTRAIN_STATUS_H
#define DTRAIN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_status {
    DT_OK = 0,
    DT_ERR_INVALID = 1,   /* bad argument or API misuse */
    DT_ERR_SHAPE = 2,     /* shapes do not fit together */
    DT_ERR_DTYPE = 3,     /* unsupported or mismatched dtype */
    DT_ERR_RANGE = 4,     /* index out of range (embedding id, class label, ...) */
    DT_ERR_NOMEM = 5,     /* allocation failed */
    DT_ERR_IO = 6,        /* file or network I/O failed */
    DT_ERR_FORMAT = 7,    /* malformed file contents */
    DT_ERR_STATE = 8,     /* call not valid in the object's current state */
    DT_ERR_INTERNAL = 9,  /* a library (BLAS, oneDNN) failed */
    DT_ERR_NOTFOUND = 10, /* a file, object or key that does not exist */
} dt_status;

/* The message of the most recent error on this thread ("" if none). */
const char *dt_last_error(void);
/* Short name of a status code, e.g. "shape". */
const char *dt_status_name(dt_status s);
/* Records a printf-style message as the last error and returns `s`. */
dt_status dt_error_set(dt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the last error. */
void dt_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif
