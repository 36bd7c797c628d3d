/* Shard files: the byte layout, writing, and validated memory-mapped reading.
 *
 * Header: 256 bytes, all fields little-endian.
 *   off  size  field
 *     0     8  magic "DTSHARD\x1a"
 *     8     4  version (2; version 1 files are still read)
 *    12     4  header bytes (256)
 *    16     4  kind (1 image, 2 tokens, 3 encoded images)
 *    20     4  dtype of the main section (image: u8 pixels; tokens: u32 tokens; encoded: u8)
 *    24     8  records (images, or documents)
 *    32    16  record shape u32[4] (image: H, W, C, classes; encoded: 0, 0, 0, classes;
 *              tokens: 0)
 *    48     8  elements of the main section (image: records*H*W*C; tokens: total tokens;
 *              encoded: bytes of all the files)
 *    56     4  number of sections (<= 4)
 *    60     4  flags (bit 0: the token shard has a loss mask)
 *    64   128  section table, 4 x 32 bytes: u32 id, u32 dtype, u64 offset, u64 bytes, u64 count
 *   192     8  payload bytes (file size - 256)
 *   200     8  xxh3-64 of the payload (every byte after the header, padding included)
 *   208     8  version 2: offset of the block table (version 1: 0)
 *   216     4  version 2: block bytes B (a power of two, 4 KiB - 1 GiB; the writer uses 1 MiB)
 *   220     4  reserved, zero
 *   224     8  version 2: xxh3-64 of the block table
 *   232    16  reserved, zero
 *   248     8  xxh3-64 of header bytes [0, 248)
 * Version 2 ends the payload with a block table (64-byte aligned, after the last section): one
 * u64 xxh3-64 per block of B file bytes from byte 256 up to the table (the last block may be
 * shorter), so that a reader can check just the blocks it touches (dt_shard_check) instead of
 * the whole payload. The payload checksum (byte 200) covers the table too.
 * Sections start at 64-byte-aligned offsets; gaps are zero. Section ids: 1 pixels (u8
 * [N,H,W,C]), 2 labels (i32 [N]), 3 tokens (u32 [T]), 4 document offsets (u64 [N+1], from 0 to
 * T, non-decreasing), 5 loss mask (u8 [T], 0 or 1), 6 encoded bytes (u8 [E]: the image files,
 * one after the other), 7 image info (u32 [N, 4]: width, height, format, flags; format 1 JPEG,
 * 2 PNG, 3 WebP; flags 0). An encoded shard has sections 6, 4 (offsets into the bytes, from 0
 * to E), 2 and 7. */
#ifndef DT_DATA_SHARD_H
#define DT_DATA_SHARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "dtrain/data.h"

enum {
    DT_SEC_PIXELS = 1,
    DT_SEC_LABELS = 2,
    DT_SEC_TOKENS = 3,
    DT_SEC_OFFSETS = 4,
    DT_SEC_MASK = 5,
    DT_SEC_BLOB = 6,
    DT_SEC_IMGINFO = 7,
    DT_SHARD_MAX_SECTIONS = 4,
    DT_SHARD_FLAG_MASK = 1,
};

typedef struct dt_shard_section {
    uint32_t id, dtype;
    uint64_t offset, bytes, count;
} dt_shard_section;

typedef struct dt_shard_header {
    uint32_t version, kind, dtype;
    uint64_t records;
    uint32_t shape[4];
    uint64_t elements;
    uint32_t n_sections, flags;
    dt_shard_section sec[DT_SHARD_MAX_SECTIONS];
    uint64_t payload_bytes, payload_xxh3;
    uint64_t blocks_offset, blocks_xxh3; /* version 2 */
    uint32_t block_bytes;                /* version 2 */
} dt_shard_header;

/* A mapped, validated shard. */
typedef struct dt_shard {
    char *path;
    uint8_t *map;
    size_t size;
    dt_shard_header h;
    const uint8_t *pixels;
    const int32_t *labels;
    const uint32_t *tokens;
    const uint64_t *offsets;
    const uint8_t *mask;
    const uint8_t *blob;     /* encoded: the files' bytes */
    const uint32_t *imginfo; /* encoded: [N, 4] width, height, format, flags */
    /* version 2: the block table and each block's state (0 unchecked, 1 good, 2 corrupt), set
     * once by whichever thread checks the block first (atomics: the prefetch threads share it) */
    const uint8_t *block_sums;
    uint64_t n_blocks;
    _Atomic uint8_t *block_state;
    _Atomic int64_t bad_blocks; /* blocks found corrupt so far */
    _Atomic int whole_checked;  /* version 1: 0 unchecked, 1 good, 2 corrupt (whole payload) */
    /* a shard in an object store (data/remote.h): map is an anonymous mapping whose blocks are
     * fetched on demand, and dt_shard_check goes through the fetcher; NULL for a file */
    struct dt_remote_shard *remote;
} dt_shard;

/* Writes a shard: `data[i]` holds `h->sec[i].bytes` bytes. Fills in the section offsets, the
 * payload size and checksum in `h`. */
dt_status dt_shard_write(const char *path, dt_shard_header *h, const void *const *data);
/* Maps and validates `path`; with `verify` also checks the payload checksum. On error the
 * message names the file and the byte offset of the bad field. */
dt_status dt_shard_open(const char *path, int verify, dt_shard *s);
void dt_shard_close(dt_shard *s);
/* The checks of dt_shard_open on s->map [s->size] (s->path set): header, sizes, sections, block
 * table, record tables (their blocks through dt_shard_check). Closes s on error. */
dt_status dt_shard_validate(dt_shard *s, int verify);
/* Block k (version 2): its length, whether its bytes match the block table, and the one-line
 * DT_ERR_FORMAT naming the shard and the block's byte range. */
uint64_t dt_shard_block_len(const dt_shard *s, uint64_t k);
int dt_shard_block_good(const dt_shard *s, uint64_t k);
dt_status dt_shard_block_error(const dt_shard *s, uint64_t k);
/* Checks the payload blocks holding file bytes [off, off + len) the first time any of them is
 * touched (version 2; a version 1 shard is hashed whole, once). DT_OK when intact; otherwise
 * DT_ERR_FORMAT with a message naming the shard and the bad block's byte range. Safe to call
 * from several threads at once. */
dt_status dt_shard_check(dt_shard *s, uint64_t off, uint64_t len);
/* Encodes / decodes the 256-byte header (decode validates magic, version and header checksum
 * only; dt_shard_open checks the rest). */
void dt_shard_header_encode(const dt_shard_header *h, uint8_t out[DT_SHARD_HEADER_BYTES]);
dt_status dt_shard_header_decode(const char *path, const uint8_t *buf, size_t len,
                                 dt_shard_header *h);

#endif
