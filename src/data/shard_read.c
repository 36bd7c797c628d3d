/* Shard files: validated memory-mapped reading and the first-touch block checks (layout in
 * shard.h; writing in shard.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include "core/bytes.h"
#include "core/file.h"
#include "data/remote.h"
#include "data/shard.h"

enum { SEC_ALIGN = 64 };

static size_t dtype_size(uint32_t dt) {
    switch (dt) {
    case DT_DATA_U8:
        return 1;
    case DT_DATA_I32:
    case DT_DATA_U32:
        return 4;
    case DT_DATA_U64:
        return 8;
    }
    return 0;
}

static const char *sec_name(uint32_t id) {
    switch (id) {
    case DT_SEC_PIXELS:
        return "pixels";
    case DT_SEC_LABELS:
        return "labels";
    case DT_SEC_TOKENS:
        return "tokens";
    case DT_SEC_OFFSETS:
        return "document offsets";
    case DT_SEC_MASK:
        return "loss mask";
    case DT_SEC_BLOB:
        return "encoded bytes";
    case DT_SEC_IMGINFO:
        return "image info";
    }
    return "unknown";
}

static uint32_t sec_dtype(uint32_t id) {
    switch (id) {
    case DT_SEC_PIXELS:
    case DT_SEC_MASK:
    case DT_SEC_BLOB:
        return DT_DATA_U8;
    case DT_SEC_LABELS:
        return DT_DATA_I32;
    case DT_SEC_TOKENS:
    case DT_SEC_IMGINFO:
        return DT_DATA_U32;
    case DT_SEC_OFFSETS:
        return DT_DATA_U64;
    }
    return 0;
}

/* Checks the section table against the file size and the record counts; sets the pointers. */
static dt_status check_sections(dt_shard *s) {
    const dt_shard_header *h = &s->h;
    const char *path = s->path;
    uint64_t prev_end = DT_SHARD_HEADER_BYTES, n = h->records;
    /* Every record has a 4-byte label or an 8-byte document offset in the file: a count the file
     * cannot hold is refused before it is used (records + 1 offsets would wrap at 2^64 - 1, and
     * the offsets would then be read far past the mapping). */
    if (n > s->size / 4)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: %" PRIu64 " records (byte 24) cannot fit in a file of %zu bytes",
                            path, n, s->size);
    for (uint32_t i = 0; i < h->n_sections; i++) {
        const dt_shard_section *c = &h->sec[i];
        uint64_t at = 64 + 32 * (uint64_t)i; /* where this entry sits in the header */
        size_t es = dtype_size(c->dtype);
        if (!sec_dtype(c->id) || c->dtype != sec_dtype(c->id))
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: section %u (byte %" PRIu64
                                ") has id %u and dtype %u, which do not go together",
                                path, i, at, c->id, c->dtype);
        if (c->offset < prev_end || c->offset % SEC_ALIGN)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s section offset %" PRIu64 " (byte %" PRIu64
                                ") overlaps the previous one or is not 64-byte aligned",
                                path, sec_name(c->id), c->offset, at + 8);
        if (c->count > UINT64_MAX / es || c->bytes != c->count * es)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s section: %" PRIu64 " bytes for %" PRIu64
                                " elements (byte %" PRIu64 ")",
                                path, sec_name(c->id), c->bytes, c->count, at + 16);
        if (c->bytes > s->size || c->offset > s->size - c->bytes)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: truncated: the %s section ends at byte %" PRIu64
                                ", the file has %zu bytes",
                                path, sec_name(c->id), c->offset + c->bytes, s->size);
        prev_end = c->offset + c->bytes;
        const void *p = s->map + c->offset;
        uint64_t want = 0;
        switch (c->id) {
        case DT_SEC_PIXELS:
            s->pixels = p;
            want = h->elements;
            break;
        case DT_SEC_LABELS:
            s->labels = p;
            want = n;
            break;
        case DT_SEC_TOKENS:
            s->tokens = p;
            want = h->elements;
            break;
        case DT_SEC_OFFSETS:
            s->offsets = p;
            want = n + 1;
            break;
        case DT_SEC_MASK:
            s->mask = p;
            want = h->elements;
            break;
        case DT_SEC_BLOB:
            s->blob = p;
            want = h->elements;
            break;
        case DT_SEC_IMGINFO:
            s->imginfo = p;
            want = n * 4; /* n <= size / 4: no wrap */
            break;
        }
        if (c->count != want)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s section has %" PRIu64 " elements (byte %" PRIu64
                                "), the header implies %" PRIu64,
                                path, sec_name(c->id), c->count, at + 24, want);
    }
    if (h->kind == DT_DATA_IMAGE) {
        /* records x H x W x C must not wrap around: with 2^30 records of 2^34 bytes the
         * product is 0 mod 2^64, and image i would be read far outside the file */
        uint64_t hwc = 0, total = 0;
        int wraps =
            __builtin_mul_overflow((uint64_t)h->shape[0] * h->shape[1], h->shape[2], &hwc) ||
            __builtin_mul_overflow(n, hwc, &total);
        if (wraps || !hwc || h->dtype != DT_DATA_U8 || h->elements != total)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: image shard shape %ux%ux%u, dtype %u and %" PRIu64
                                " elements (bytes 20-55) do not fit %" PRIu64 " records",
                                path, h->shape[0], h->shape[1], h->shape[2], h->dtype, h->elements,
                                n);
        if (!s->pixels || !s->labels)
            return dt_error_set(DT_ERR_FORMAT, "%s: image shard without a %s section", path,
                                s->pixels ? "labels" : "pixels");
    } else if (h->kind == DT_DATA_TOKENS) {
        if (h->dtype != DT_DATA_U32)
            return dt_error_set(DT_ERR_FORMAT, "%s: token shard dtype %u at byte 20 (expected u32)",
                                path, h->dtype);
        if (!s->tokens || !s->offsets)
            return dt_error_set(DT_ERR_FORMAT, "%s: token shard without a %s section", path,
                                s->tokens ? "document offsets" : "tokens");
        if (!!(h->flags & DT_SHARD_FLAG_MASK) != !!s->mask)
            return dt_error_set(DT_ERR_FORMAT, "%s: flags (byte 60) and loss mask section disagree",
                                path);
    } else if (h->kind == DT_DATA_ENCODED) {
        if (h->dtype != DT_DATA_U8)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: encoded-image shard dtype %u at byte 20 (expected u8)", path,
                                h->dtype);
        if (!s->blob || !s->offsets || !s->labels || !s->imginfo)
            return dt_error_set(DT_ERR_FORMAT, "%s: encoded-image shard without a %s section", path,
                                !s->blob      ? "encoded bytes"
                                : !s->offsets ? "offsets"
                                : !s->labels  ? "labels"
                                              : "image info");
    } else {
        return dt_error_set(DT_ERR_FORMAT, "%s: unknown kind %u at byte 16", path, h->kind);
    }
    if (h->kind != DT_DATA_TOKENS && s->tokens)
        return dt_error_set(DT_ERR_FORMAT, "%s: a tokens section in a shard of kind %u", path,
                            h->kind);
    return DT_OK;
}

/* Offsets u64 [N + 1] into the main section: from 0, non-decreasing, ending at its size. */
static dt_status check_offsets(const dt_shard *s, const char *what) {
    const dt_shard_header *h = &s->h;
    const dt_shard_section *c = NULL;
    for (uint32_t i = 0; i < h->n_sections; i++)
        if (h->sec[i].id == DT_SEC_OFFSETS) c = &h->sec[i];
    if (s->offsets[0] != 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: first %s offset (byte %" PRIu64 ") is %" PRIu64 ", not 0", s->path,
                            what, c->offset, s->offsets[0]);
    for (uint64_t i = 0; i < h->records; i++)
        if (s->offsets[i + 1] < s->offsets[i] || s->offsets[i + 1] > h->elements)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: %s offset %" PRIu64 " (byte %" PRIu64 ") is %" PRIu64
                                ": offsets must rise to %" PRIu64,
                                s->path, what, i + 1, c->offset + 8 * (i + 1), s->offsets[i + 1],
                                h->elements);
    if (s->offsets[h->records] != h->elements)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: last %s offset is %" PRIu64 ", the shard has %" PRIu64 " %s",
                            s->path, what, s->offsets[h->records], h->elements,
                            h->kind == DT_DATA_TOKENS ? "tokens" : "bytes");
    return DT_OK;
}

/* Record-level checks that are cheap next to reading the data: offsets and labels. */
static dt_status check_records(const dt_shard *s, int verify) {
    const dt_shard_header *h = &s->h;
    if (h->kind == DT_DATA_TOKENS) {
        dt_status st = check_offsets(s, "document");
        if (st) return st;
        if (verify && s->mask)
            for (uint64_t i = 0; i < h->elements; i++)
                if (s->mask[i] > 1)
                    return dt_error_set(DT_ERR_FORMAT,
                                        "%s: loss mask value %u at token %" PRIu64 " is not 0 or 1",
                                        s->path, s->mask[i], i);
    } else {
        const dt_shard_section *c = NULL;
        for (uint32_t i = 0; i < h->n_sections; i++)
            if (h->sec[i].id == DT_SEC_LABELS) c = &h->sec[i];
        uint32_t classes = h->shape[3];
        for (uint64_t i = 0; i < h->records; i++)
            if (s->labels[i] < 0 || (classes && (uint32_t)s->labels[i] >= classes))
                return dt_error_set(DT_ERR_FORMAT,
                                    "%s: label of record %" PRIu64 " (byte %" PRIu64
                                    ") is %d, outside [0, %u)",
                                    s->path, i, c->offset + 4 * i, s->labels[i], classes);
        if (h->kind == DT_DATA_ENCODED) {
            dt_status st = check_offsets(s, "image");
            if (st) return st;
            for (uint32_t i = 0; i < h->n_sections; i++)
                if (h->sec[i].id == DT_SEC_IMGINFO) c = &h->sec[i];
            for (uint64_t i = 0; i < h->records; i++) {
                const uint32_t *r = s->imginfo + 4 * i;
                if (!r[0] || !r[1] || r[0] > 65535 || r[1] > 65535 || r[2] < 1 || r[2] > 3)
                    return dt_error_set(DT_ERR_FORMAT,
                                        "%s: image info of record %" PRIu64 " (byte %" PRIu64
                                        ") is %ux%u, format %u: sides must be 1-65535, format 1-3",
                                        s->path, i, c->offset + 16 * i, r[0], r[1], r[2]);
            }
        }
    }
    return DT_OK;
}

/* Version 2: the block table sits after the last section and ends the file; its own checksum
 * (byte 224) is checked here, so that a block found bad later is bad data, not a bad table. */
static dt_status check_block_table(dt_shard *s) {
    const dt_shard_header *h = &s->h;
    uint64_t prev_end = DT_SHARD_HEADER_BYTES, end = DT_SHARD_HEADER_BYTES + h->payload_bytes;
    for (uint32_t i = 0; i < h->n_sections; i++) prev_end = h->sec[i].offset + h->sec[i].bytes;
    uint32_t b = h->block_bytes;
    if (b < 4096 || b > (1u << 30) || (b & (b - 1)))
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: block size %u at byte 216 is not a power of two in [4 KiB, 1 GiB]",
                            s->path, b);
    uint64_t at = h->blocks_offset;
    if (at < prev_end || at % SEC_ALIGN || at > end)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: block table offset %" PRIu64
                            " (byte 208) is not 64-byte aligned after the last section",
                            s->path, at);
    s->n_blocks = (at - DT_SHARD_HEADER_BYTES + b - 1) / b;
    if (end - at != s->n_blocks * 8)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: block table at byte %" PRIu64 " has %" PRIu64 " bytes, %" PRIu64
                            " blocks of %u bytes need %" PRIu64,
                            s->path, at, end - at, s->n_blocks, b, s->n_blocks * 8);
    s->block_sums = s->map + at;
    uint64_t got = XXH3_64bits(s->block_sums, (size_t)(s->n_blocks * 8));
    if (got != h->blocks_xxh3)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: block table checksum mismatch: bytes %" PRIu64 "-%zu hash to "
                            "%016" PRIx64 ", the header (byte 224) says %016" PRIx64,
                            s->path, at, s->size - 1, got, h->blocks_xxh3);
    s->block_state = calloc((size_t)s->n_blocks + 1, 1);
    if (!s->block_state) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", s->path);
    return DT_OK;
}

enum { BLK_UNCHECKED = 0, BLK_GOOD = 1, BLK_BAD = 2 };

uint64_t dt_shard_block_len(const dt_shard *s, uint64_t k) {
    uint64_t B = s->h.block_bytes, a = DT_SHARD_HEADER_BYTES + k * B, end = s->h.blocks_offset;
    return end - a < B ? end - a : B;
}

int dt_shard_block_good(const dt_shard *s, uint64_t k) {
    uint64_t a = DT_SHARD_HEADER_BYTES + k * s->h.block_bytes;
    return XXH3_64bits(s->map + a, (size_t)dt_shard_block_len(s, k)) ==
           dt_le_get64(s->block_sums + 8 * k);
}

dt_status dt_shard_block_error(const dt_shard *s, uint64_t k) {
    uint64_t a = DT_SHARD_HEADER_BYTES + k * s->h.block_bytes, n = dt_shard_block_len(s, k);
    return dt_error_set(DT_ERR_FORMAT,
                        "%s: corrupt data in bytes %" PRIu64 "-%" PRIu64 " (block %" PRIu64
                        " does not match its checksum at byte %" PRIu64 ")",
                        s->path, a, a + n - 1, k, s->h.blocks_offset + 8 * k);
}

dt_status dt_shard_check(dt_shard *s, uint64_t off, uint64_t len) {
    if (!len) return DT_OK;
    if (s->remote) return dt_remote_check(s, off, len);
    if (s->h.version < 2) {
        int w = atomic_load_explicit(&s->whole_checked, memory_order_acquire);
        if (w == BLK_UNCHECKED) {
            uint64_t got = XXH3_64bits(s->map + DT_SHARD_HEADER_BYTES, (size_t)s->h.payload_bytes);
            w = got == s->h.payload_xxh3 ? BLK_GOOD : BLK_BAD;
            atomic_store_explicit(&s->whole_checked, w, memory_order_release);
        }
        if (w == BLK_GOOD) return DT_OK;
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: payload checksum mismatch: bytes %u-%zu do not hash to the "
                            "header's (byte 200) %016" PRIx64
                            "; a version 1 shard has no block checksums: re-import the data",
                            s->path, DT_SHARD_HEADER_BYTES, s->size - 1, s->h.payload_xxh3);
    }
    uint64_t B = s->h.block_bytes, end = s->h.blocks_offset;
    if (off < DT_SHARD_HEADER_BYTES || off >= end || len > end - off)
        return dt_error_set(DT_ERR_RANGE, "%s: bytes %" PRIu64 "+%" PRIu64 " outside the payload",
                            s->path, off, len);
    uint64_t k0 = (off - DT_SHARD_HEADER_BYTES) / B,
             k1 = (off + len - 1 - DT_SHARD_HEADER_BYTES) / B;
    for (uint64_t k = k0; k <= k1; k++) {
        uint8_t state = atomic_load_explicit(&s->block_state[k], memory_order_acquire);
        if (state == BLK_UNCHECKED) {
            /* two threads may hash the same block at once: both get the same answer, and only
             * the one whose store lands first counts a corrupt block */
            int good = dt_shard_block_good(s, k);
            uint8_t expect = BLK_UNCHECKED;
            state = good ? BLK_GOOD : BLK_BAD;
            if (atomic_compare_exchange_strong(&s->block_state[k], &expect, state) && !good)
                atomic_fetch_add(&s->bad_blocks, 1);
        }
        if (state == BLK_BAD) return dt_shard_block_error(s, k);
    }
    return DT_OK;
}

dt_status dt_shard_open(const char *path, int verify, dt_shard *s) {
    memset(s, 0, sizeof *s);
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1)
        return dt_error_set(DT_ERR_INVALID, "%s: shards are little-endian; this host is not", path);
    s->path = strdup(path);
    if (!s->path) return dt_error_set(DT_ERR_NOMEM, "out of memory");
    int fd;
    dt_status os = dt_file_open_regular(path, O_RDONLY, 0, &fd);
    if (os) {
        dt_shard_close(s);
        return os;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        dt_shard_close(s);
        return dt_error_set(DT_ERR_IO, "%s: not a regular file", path);
    }
    s->size = (size_t)sb.st_size;
    if (s->size) {
        void *m = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            dt_status st = dt_error_set(DT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
            close(fd);
            s->size = 0;
            dt_shard_close(s);
            return st;
        }
        s->map = m;
    }
    close(fd);
    return dt_shard_validate(s, verify);
}

dt_status dt_shard_validate(dt_shard *s, int verify) {
    const char *path = s->path;
    dt_status st = dt_shard_header_decode(path, s->map, s->size, &s->h);
    if (st == DT_OK) {
        uint64_t end = DT_SHARD_HEADER_BYTES + s->h.payload_bytes;
        if (s->h.payload_bytes > s->size || end > s->size)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: truncated: the header (byte 192) says the payload "
                              "ends at byte %" PRIu64 ", the file has %zu bytes",
                              path, end, s->size);
        else if (end < s->size)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: %zu unexpected bytes after the payload end (byte %" PRIu64 ")",
                              path, s->size - (size_t)end, end);
    }
    if (st == DT_OK) st = check_sections(s);
    if (st == DT_OK && s->h.version >= 2) st = check_block_table(s);
    /* the sections read whole at open (labels, document offsets) are checked here, before
     * check_records reads them */
    for (uint32_t i = 0; st == DT_OK && i < s->h.n_sections; i++)
        if (s->h.version >= 2 &&
            (s->h.sec[i].id == DT_SEC_LABELS || s->h.sec[i].id == DT_SEC_OFFSETS ||
             s->h.sec[i].id == DT_SEC_IMGINFO))
            st = dt_shard_check(s, s->h.sec[i].offset, s->h.sec[i].bytes);
    if (st == DT_OK && verify && s->h.version >= 2)
        st = dt_shard_check(s, DT_SHARD_HEADER_BYTES, s->h.blocks_offset - DT_SHARD_HEADER_BYTES);
    if (st == DT_OK && verify) {
        uint64_t got = XXH3_64bits(s->map + DT_SHARD_HEADER_BYTES, (size_t)s->h.payload_bytes);
        if (got != s->h.payload_xxh3)
            st = dt_error_set(DT_ERR_FORMAT,
                              "%s: payload checksum mismatch: bytes %u-%zu hash to "
                              "%016" PRIx64 ", the header (byte 200) says %016" PRIx64,
                              path, DT_SHARD_HEADER_BYTES, s->size - 1, got, s->h.payload_xxh3);
    }
    if (st == DT_OK) st = check_records(s, verify);
    if (st != DT_OK) {
        dt_shard_close(s);
        return st;
    }
    return DT_OK;
}

void dt_shard_close(dt_shard *s) {
    if (s->remote) dt_remote_shard_free(s);
    if (s->map) munmap(s->map, s->size);
    free((void *)s->block_state);
    free(s->path);
    memset(s, 0, sizeof *s);
}
