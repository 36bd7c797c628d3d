/* Shard files: the header codec and writing (layout in shard.h; reading in shard_read.c). */
#include "data/shard.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include "core/bytes.h"
#include "core/file.h"
#include "core/fsinfo.h"
#include "core/fsmode.h"

enum { HDR_CHECKED_BYTES = 248, SEC_ALIGN = 64 };

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
    if (h->version >= 2) {
        dt_le_put64(out + 208, h->blocks_offset);
        dt_le_put32(out + 216, h->block_bytes);
        dt_le_put64(out + 224, h->blocks_xxh3);
    }
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
    if (version != 1 && version != DT_SHARD_VERSION)
        return dt_error_set(
            DT_ERR_FORMAT,
            "%s: unsupported shard version %u at byte 8 (this build reads versions 1 and %u)", path,
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
    if (version >= 2) {
        h->blocks_offset = dt_le_get64(b + 208);
        h->block_bytes = dt_le_get32(b + 216);
        h->blocks_xxh3 = dt_le_get64(b + 224);
    }
    return DT_OK;
}

/* The payload as the file holds it: zero padding before each 64-byte-aligned section, then the
 * section's bytes. `emit` sees it piece by piece, in file order (padding as NULL: zeros). */
typedef int (*payload_fn)(void *ctx, const void *p, uint64_t n);
static int walk_payload(const dt_shard_header *h, const void *const *data, payload_fn emit,
                        void *ctx) {
    uint64_t pos = DT_SHARD_HEADER_BYTES;
    for (uint32_t i = 0; i < h->n_sections; i++) {
        if (!emit(ctx, NULL, h->sec[i].offset - pos)) return 0;
        if (h->sec[i].bytes && !emit(ctx, data[i], h->sec[i].bytes)) return 0;
        pos = h->sec[i].offset + h->sec[i].bytes;
    }
    return emit(ctx, NULL, h->blocks_offset - pos);
}

/* Hashes the payload before the block table: per block into `sums`, and all of it into `all`. */
typedef struct hash_ctx {
    XXH3_state_t *all, *blk;
    uint64_t in_block, k;
    uint8_t *sums;
    uint32_t block_bytes;
} hash_ctx;

static int hash_piece(void *arg, const void *p, uint64_t n) {
    static const uint8_t zeros[SEC_ALIGN];
    hash_ctx *c = arg;
    const uint8_t *b = p;
    while (n) {
        uint64_t take = c->block_bytes - c->in_block;
        if (take > n) take = n;
        if (!b && take > SEC_ALIGN) take = SEC_ALIGN;
        XXH3_64bits_update(c->all, b ? (const void *)b : zeros, (size_t)take);
        XXH3_64bits_update(c->blk, b ? (const void *)b : zeros, (size_t)take);
        c->in_block += take, n -= take;
        if (b) b += take;
        if (c->in_block == c->block_bytes) {
            dt_le_put64(c->sums + 8 * c->k++, XXH3_64bits_digest(c->blk));
            XXH3_64bits_reset(c->blk);
            c->in_block = 0;
        }
    }
    return 1;
}

static int write_piece(void *arg, const void *p, uint64_t n) {
    static const uint8_t zeros[SEC_ALIGN];
    FILE *f = arg;
    if (p) return fwrite(p, 1, (size_t)n, f) == n;
    /* padding is under 64 bytes */
    return n <= SEC_ALIGN && fwrite(zeros, 1, (size_t)n, f) == n;
}

dt_status dt_shard_write(const char *path, dt_shard_header *h, const void *const *data) {
    uint64_t off = DT_SHARD_HEADER_BYTES;
    for (uint32_t i = 0; i < h->n_sections; i++) {
        off += (SEC_ALIGN - off % SEC_ALIGN) % SEC_ALIGN;
        h->sec[i].offset = off;
        off += h->sec[i].bytes;
    }
    off += (SEC_ALIGN - off % SEC_ALIGN) % SEC_ALIGN;
    h->version = DT_SHARD_VERSION;
    h->block_bytes = DT_SHARD_BLOCK_BYTES;
    h->blocks_offset = off;
    uint64_t covered = off - DT_SHARD_HEADER_BYTES;
    uint64_t n_blocks = (covered + h->block_bytes - 1) / h->block_bytes;
    hash_ctx c = {XXH3_createState(),       XXH3_createState(), 0, 0,
                  malloc(n_blocks * 8 + 1), h->block_bytes};
    dt_status st = DT_OK;
    if (!c.all || !c.blk || !c.sums) {
        st = dt_error_set(DT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    XXH3_64bits_reset(c.all);
    XXH3_64bits_reset(c.blk);
    walk_payload(h, data, hash_piece, &c);
    if (c.in_block) dt_le_put64(c.sums + 8 * c.k++, XXH3_64bits_digest(c.blk));
    XXH3_64bits_update(c.all, c.sums, (size_t)(n_blocks * 8));
    h->blocks_xxh3 = XXH3_64bits(c.sums, (size_t)(n_blocks * 8));
    h->payload_bytes = covered + n_blocks * 8;
    h->payload_xxh3 = XXH3_64bits_digest(c.all);

    uint8_t hdr[DT_SHARD_HEADER_BYTES];
    dt_shard_header_encode(h, hdr);
    FILE *f = dt_fcreate(path, "wb"); /* 0640 less the umask */
    if (!f) {
        st = dt_error_set(DT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    int ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr && walk_payload(h, data, write_piece, f) &&
             fwrite(c.sums, 1, (size_t)(n_blocks * 8), f) == n_blocks * 8;
    int err = ok ? 0 : errno;
    /* fflush + fsync before fclose: a full disk (ENOSPC) shows up here at the latest, not as a
     * short file found later */
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) ok = 0, err = errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (!ok) {
        unlink(path);
        char note[DT_FS_NOTE_LEN];
        st = dt_error_set(DT_ERR_IO, "%s: write failed: %s%s%s", path, strerror(err),
                          dt_fs_full_note(path, err, note, sizeof note),
                          err == ENOSPC || err == EDQUOT
                              ? ": free space there or import to another directory"
                              : "");
    }
done:
    XXH3_freeState(c.all);
    XXH3_freeState(c.blk);
    free(c.sums);
    return st;
}
