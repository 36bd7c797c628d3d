/* Persistent storage for checkpoints: one interface over POSIX paths (local disk, NFS, HopsFS
 * mounts) and S3-compatible object stores (AWS S3, SeaweedFS, MinIO, ...).
 *
 *   dt_store *s;
 *   dt_store_open("s3://bucket/runs", NULL, &s);        // or "/mnt/nfs/runs", "file:///..."
 *   dt_store_put(s, "exp/run/checkpoints/step-000100/model.safetensors", buf, n);
 *   dt_store_list(s, "exp/run/checkpoints/", &keys, &nkeys);
 *   dt_store_close(s);
 *
 * Keys are '/'-separated paths relative to the store's root (no leading '/', no "." or ".."
 * components, no empty components). A put is atomic: a reader sees the old object (or none) or
 * the whole new one, never a part -- POSIX writes a temporary name in the same directory, fsyncs
 * it, renames it over the key and fsyncs the directory; S3 uses one PUT, or a multipart upload
 * that becomes visible only when completed (aborted on failure).
 *
 * S3 settings come from the environment, as the AWS tools read them (never from config files,
 * so credentials do not land in run records): AWS_ENDPOINT_URL (e.g. http://127.0.0.1:8333;
 * default https://s3.amazonaws.com), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION or
 * AWS_DEFAULT_REGION (default us-east-1). Requests use path-style addressing and are signed by
 * libcurl (CURLOPT_AWS_SIGV4). Messages never contain the secret key.
 *
 * Errors name the URL/key and what failed: DT_ERR_NOTFOUND for a missing key, DT_ERR_IO for I/O
 * and network failures (after retries), DT_ERR_INVALID for bad URLs/keys, DT_ERR_STATE for
 * refused credentials ("access denied": not retried). */
#ifndef DTRAIN_STORAGE_H
#define DTRAIN_STORAGE_H

#include <stddef.h>
#include <stdint.h>
#include "dtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_store dt_store;

typedef struct dt_store_opts {
    size_t multipart_threshold; /* S3: objects at least this large go multipart (default 64 MiB) */
    size_t part_size;           /* S3: multipart part size (default 16 MiB; S3's minimum 5 MiB) */
    int parallel_parts;         /* S3: parts uploaded at once (default 4) */
    int max_retries;            /* S3: retries of a request on 5xx/connection errors (default 5) */
    double retry_base_s;        /* S3: first backoff, doubled each retry, jittered (default 0.2) */
    double timeout_s;           /* S3: per-request timeout without progress (default 60) */
    int fsync;                  /* POSIX: fsync files and directories (default 1) */
    size_t read_chunk; /* dt_store_get_stream's chunk size (default 2 MiB; the environment's
                        * DT_STORE_READ_CHUNK, in bytes, overrides the default: tests use tiny
                        * chunks to split headers and tensors) */
} dt_store_opts;
dt_store_opts dt_store_opts_default(void);

/* url: a path ("runs", "/mnt/nfs/x"), "file://PATH", or "s3://BUCKET[/PREFIX]". A POSIX root is
 * created if missing. S3: checks that the credentials are present (not yet that they work --
 * the first request tells). opts NULL: defaults. */
dt_status dt_store_open(const char *url, const dt_store_opts *opts, dt_store **out);
void dt_store_close(dt_store *s);
/* The URL as given (no credentials in it); "s3" or "posix". */
const char *dt_store_url(const dt_store *s);
const char *dt_store_kind(const dt_store *s);

/* Writes data [n] as key, atomically (see above); replaces an existing object. */
dt_status dt_store_put(dt_store *s, const char *key, const void *data, size_t n);
/* Reads a whole object into a new malloc'd buffer (*data, *n; free() it). */
dt_status dt_store_get(dt_store *s, const char *key, void **data, size_t *n);
/* The same into the caller's buffer [cap] (reused across restores: no allocation, no page
 * faults); DT_ERR_RANGE if the object is larger. */
dt_status dt_store_get_into(dt_store *s, const char *key, void *buf, size_t cap, size_t *n);
/* A streaming read's consumer: called with consecutive pieces of the object, in order, on the
 * caller's thread; p [n] holds the object's bytes [off, off + n) and is valid only during the
 * call. Returning anything but DT_OK stops the read, and dt_store_get_stream returns that status
 * (the callback sets its message). */
typedef dt_status (*dt_store_chunk_fn)(void *ud, size_t off, const void *p, size_t n);
/* Reads an object through fn in chunks of opts.read_chunk bytes (all full but the last; no call
 * for an empty object), so that a restore hashes and places the bytes while the next ones are
 * read (POSIX: a reader thread fills rotating chunk buffers kept by the store; S3: the object is
 * fetched, then handed over in chunks). *total: the object's size. An object larger than
 * max_bytes is DT_ERR_RANGE, found before fn sees any byte on POSIX; other errors as
 * dt_store_get's, naming the key. */
dt_status dt_store_get_stream(dt_store *s, const char *key, size_t max_bytes, dt_store_chunk_fn fn,
                              void *ud, size_t *total);
/* Reads bytes [off, off + len) of an object into buf [len] (S3: one GET with a Range header,
 * retried as dt_store_get; POSIX: pread), so that a reader fetches just the blocks it needs.
 * The range must lie inside the object: a short one is DT_ERR_RANGE naming the key and the
 * bytes asked. len 0 reads nothing. */
dt_status dt_store_get_range(dt_store *s, const char *key, uint64_t off, size_t len, void *buf);
/* Size of an object; DT_ERR_NOTFOUND if it does not exist. */
dt_status dt_store_stat(dt_store *s, const char *key, size_t *n);
/* Every key under prefix ("" = all; a prefix ending in '/' lists a "directory" recursively),
 * sorted bytewise, as a malloc'd array of malloc'd strings (free with dt_store_list_free).
 * POSIX skips in-flight temporary files. */
dt_status dt_store_list(dt_store *s, const char *prefix, char ***keys, int *n);
void dt_store_list_free(char **keys, int n);
/* Removes an object; a missing one is not an error. POSIX also removes directories left
 * empty, up to the root. */
dt_status dt_store_delete(dt_store *s, const char *key);

#ifdef __cplusplus
}
#endif
#endif
