/* Shard files: writing and validated memory-mapped reading (layout in shard.h). */
#include "data/shard.h"
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
#include "data/util.h"
#include "core/file.h"
#include "core/fsmode.h"

enum { HDR_CHECKED_BYTES = 248, SEC_ALIGN = 64 };

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

void dt_shard_header_encode(const dt_shard_header *h, uint8_t out[DT_SHARD_HEADER_BYTES]) {
    memset(out, 0, DT_SHARD_HEADER_BYTES);
    memcpy(out, DT_SHARD_MAGIC, 8);
    dt_le_put32(out + 8, h->version);
    dt_le_put32(out + 12, DT_SHARD_HEADER_BYTES);
    dt_le_put32(out + 16, h->kind);
    dt_le_put32(out + 20, h->dtype);
    dt_le_put64(out + 24, h->records);
    for (int i = 0; i < 4; i++) dt_le_put32(out + 32 + 4 * i, h->shape[i]);
    dt_le_put64(out + 48, h->elements);
    dt_le_put32(out + 56, h->n_sections);
    dt_le_put32(out + 60, h->flags);
    for (uint32_t i = 0; i < h->n_sections && i < DT_SHARD_MAX_SECTIONS; i++) {
        uint8_t *p = out + 64 + 32 * i;
        dt_le_put32(p, h->sec[i].id);
        dt_le_put32(p + 4, h->sec[i].dtype);
        dt_le_put64(p + 8, h->sec[i].offset);
        dt_le_put64(p + 16, h->sec[i].bytes);
        dt_le_put64(p + 24, h->sec[i].count);
    }
    dt_le_put64(out + 192, h->payload_bytes);
    dt_le_put64(out + 200, h->payload_xxh3);
    dt_le_put64(out + HDR_CHECKED_BYTES, XXH3_64bits(out, HDR_CHECKED_BYTES));
}

dt_status dt_shard_header_decode(const char *path, const uint8_t *b, size_t len,
                                 dt_shard_header *h) {
    if (len < DT_SHARD_HEADER_BYTES)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: truncated: the file has %zu bytes, a shard header needs %u", path,
                            len, DT_SHARD_HEADER_BYTES);
    if (memcmp(b, DT_SHARD_MAGIC, 8) != 0)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: bad magic at byte 0 (%02x %02x %02x %02x ...): not a dtrain shard",
                            path, b[0], b[1], b[2], b[3]);
    uint32_t version = dt_le_get32(b + 8);
    if (version != DT_SHARD_VERSION)
        return dt_error_set(
            DT_ERR_FORMAT,
            "%s: unsupported shard version %u at byte 8 (this build reads version %u)", path,
            version, DT_SHARD_VERSION);
    uint64_t want = dt_le_get64(b + HDR_CHECKED_BYTES), got = XXH3_64bits(b, HDR_CHECKED_BYTES);
    if (want != got)
        return dt_error_set(DT_ERR_FORMAT,
                            "%s: header checksum mismatch: bytes 0-247 hash to %016" PRIx64
                            ", byte 248 says %016" PRIx64 " (corrupt header)",
                            path, got, want);
    uint32_t hb = dt_le_get32(b + 12);
    if (hb != DT_SHARD_HEADER_BYTES)
        return dt_error_set(DT_ERR_FORMAT, "%s: header size %u at byte 12, expected %u", path, hb,
                            DT_SHARD_HEADER_BYTES);
    memset(h, 0, sizeof *h);
    h->version = version;
    h->kind = dt_le_get32(b + 16);
    h->dtype = dt_le_get32(b + 20);
    h->records = dt_le_get64(b + 24);
    for (int i = 0; i < 4; i++) h->shape[i] = dt_le_get32(b + 32 + 4 * i);
    h->elements = dt_le_get64(b + 48);
    h->n_sections = dt_le_get32(b + 56);
    h->flags = dt_le_get32(b + 60);
    if (h->n_sections > DT_SHARD_MAX_SECTIONS)
        return dt_error_set(DT_ERR_FORMAT, "%s: %u sections at byte 56 (at most %d)", path,
                            h->n_sections, DT_SHARD_MAX_SECTIONS);
    for (uint32_t i = 0; i < h->n_sections; i++) {
        const uint8_t *p = b + 64 + 32 * i;
        h->sec[i] = (dt_shard_section){dt_le_get32(p), dt_le_get32(p + 4), dt_le_get64(p + 8),
                                       dt_le_get64(p + 16), dt_le_get64(p + 24)};
    }
    h->payload_bytes = dt_le_get64(b + 192);
    h->payload_xxh3 = dt_le_get64(b + 200);
    return DT_OK;
}

dt_status dt_shard_write(const char *path, dt_shard_header *h, const void *const *data) {
    static const uint8_t zeros[SEC_ALIGN];
    uint64_t off = DT_SHARD_HEADER_BYTES;
    XXH3_state_t *st = XXH3_createState();
    if (!st) return dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
    XXH3_64bits_reset(st);
    for (uint32_t i = 0; i < h->n_sections; i++) {
        uint64_t pad = (SEC_ALIGN - off % SEC_ALIGN) % SEC_ALIGN;
        XXH3_64bits_update(st, zeros, (size_t)pad);
        off += pad;
        h->sec[i].offset = off;
        if (h->sec[i].bytes) XXH3_64bits_update(st, data[i], (size_t)h->sec[i].bytes);
        off += h->sec[i].bytes;
    }
    h->payload_bytes = off - DT_SHARD_HEADER_BYTES;
    h->payload_xxh3 = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    h->version = DT_SHARD_VERSION;

    uint8_t hdr[DT_SHARD_HEADER_BYTES];
    dt_shard_header_encode(h, hdr);
    FILE *f = dt_fcreate(path, "wb");
    if (!f) return dt_error_set(DT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr;
    uint64_t pos = DT_SHARD_HEADER_BYTES;
    for (uint32_t i = 0; ok && i < h->n_sections; i++) {
        uint64_t pad = h->sec[i].offset - pos;
        ok = fwrite(zeros, 1, (size_t)pad, f) == pad;
        if (ok && h->sec[i].bytes)
            ok = fwrite(data[i], 1, (size_t)h->sec[i].bytes, f) == h->sec[i].bytes;
        pos = h->sec[i].offset + h->sec[i].bytes;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) return dt_error_set(DT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return DT_OK;
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
    }
    return "unknown";
}

static uint32_t sec_dtype(uint32_t id) {
    switch (id) {
    case DT_SEC_PIXELS:
    case DT_SEC_MASK:
        return DT_DATA_U8;
    case DT_SEC_LABELS:
        return DT_DATA_I32;
    case DT_SEC_TOKENS:
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
    } else {
        return dt_error_set(DT_ERR_FORMAT, "%s: unknown kind %u at byte 16", path, h->kind);
    }
    return DT_OK;
}

/* Record-level checks that are cheap next to reading the data: offsets and labels. */
static dt_status check_records(const dt_shard *s, int verify) {
    const dt_shard_header *h = &s->h;
    if (h->kind == DT_DATA_TOKENS) {
        const dt_shard_section *c = NULL;
        for (uint32_t i = 0; i < h->n_sections; i++)
            if (h->sec[i].id == DT_SEC_OFFSETS) c = &h->sec[i];
        if (s->offsets[0] != 0)
            return dt_error_set(
                DT_ERR_FORMAT, "%s: first document offset (byte %" PRIu64 ") is %" PRIu64 ", not 0",
                s->path, c->offset, s->offsets[0]);
        for (uint64_t i = 0; i < h->records; i++)
            if (s->offsets[i + 1] < s->offsets[i] || s->offsets[i + 1] > h->elements)
                return dt_error_set(DT_ERR_FORMAT,
                                    "%s: document offset %" PRIu64 " (byte %" PRIu64 ") is %" PRIu64
                                    ": offsets must rise to %" PRIu64,
                                    s->path, i + 1, c->offset + 8 * (i + 1), s->offsets[i + 1],
                                    h->elements);
        if (s->offsets[h->records] != h->elements)
            return dt_error_set(DT_ERR_FORMAT,
                                "%s: last document offset is %" PRIu64 ", the shard has %" PRIu64
                                " tokens",
                                s->path, s->offsets[h->records], h->elements);
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
    if (s->map) munmap(s->map, s->size);
    free(s->path);
    memset(s, 0, sizeof *s);
}
