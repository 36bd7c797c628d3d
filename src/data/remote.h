/* Datasets in an object store (data.train: s3://BUCKET/PREFIX): the manifest is fetched whole,
 * each shard's header, block table and record tables (labels, offsets, image info) at open, and
 * the payload blocks (1 MiB, each with its checksum in the block table) by ranged GETs when the
 * loader first needs them or asks for them ahead (dt_remote_prefetch), verified as the local
 * reader verifies them, into a per-shard anonymous mapping of the shard's size. Resident
 * payload blocks are bounded by the cache size: the least recently used block that no reading
 * thread holds is dropped (its pages given back) and fetched again when needed.
 *
 * A store that does not answer (connection refused, 5xx, timeouts) is retried with backoff
 * until store_wait_s has passed: one line says training waits, one that it goes on; after that
 * the read fails with one line naming the object and the bytes. A missing object, a short one,
 * refused credentials and a block that fails its checksum fail at once. */
#ifndef DT_DATA_REMOTE_H
#define DT_DATA_REMOTE_H

#include <stddef.h>
#include <stdint.h>
#include "data/shard.h"

typedef struct dt_remote dt_remote;

typedef struct dt_remote_opts {
    int64_t cache_bytes; /* resident payload blocks of all shards (the record tables excepted) */
    double wait_s;       /* how long a store that does not answer is waited for */
    int threads;         /* fetch threads (ranged GETs in flight at once) */
} dt_remote_opts;

/* Is `dir` a dataset in an object store (an s3:// URL)? */
int dt_remote_is_url(const char *dir);
dt_status dt_remote_open(const char *url, const dt_remote_opts *o, dt_remote **out);
/* Stops the fetch threads and closes the store; call before closing the shards. */
void dt_remote_close(dt_remote *r);
/* A small object (the manifest) whole, with the store waited for as the blocks are. */
dt_status dt_remote_get_meta(dt_remote *r, const char *key, size_t max, uint8_t **data, size_t *n);
/* Opens shard `file` of `bytes` bytes (the manifest's size) as dt_shard_open does a local one:
 * s->path is the object's URL. Version 1 shards (no block checksums) are refused. */
dt_status dt_remote_shard_open(dt_remote *r, const char *file, uint64_t bytes, dt_shard *s);
/* dt_shard_check for a remote shard: fetches the blocks holding [off, off + len) that are not
 * resident, waits for them and checks them; the calling thread holds them (they are not
 * dropped) until it has made a few more calls, so the bytes stay valid while it reads them. */
dt_status dt_remote_check(dt_shard *s, uint64_t off, uint64_t len);
/* Queues the blocks holding [off, off + len) of a remote shard to be fetched (no wait). */
void dt_remote_prefetch(dt_shard *s, uint64_t off, uint64_t len);
/* Blocks fetched so far and their bytes; *ahead (may be NULL): how many of them were queued
 * by dt_remote_prefetch (a reader may have come to wait for one before it arrived). */
void dt_remote_fetched(dt_remote *r, int64_t *blocks, int64_t *bytes, int64_t *ahead);
/* Frees what a remote shard holds besides its mapping (from dt_shard_close). */
void dt_remote_shard_free(dt_shard *s);

#endif
