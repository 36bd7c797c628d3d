/* Fuzz target: a dataset shard file (src/data/shard.c, shard_read.c: the 256-byte header, its
 * section table, document offsets, labels, loss mask).
 *
 * Input: one control byte, then the shard file. Both the header and the payload carry xxh3
 * checksums that random bytes never match, so the control byte lets the fuzzer past them:
 *   bit 0  recompute the payload checksum (header byte 200) over the input's payload
 *   bit 1  recompute the header checksum (byte 248) over header bytes 0-247
 *   bit 2  open with verify (the payload checksum and every loss-mask value are checked)
 * Entry points: dt_shard_header_decode on the bytes, then dt_shard_open on a file holding them;
 * an accepted shard's records are read the way dt_dataset_image / dt_dataset_doc read them
 * (first and last byte of every image and document), so a section that points outside the
 * mapping is an ASan report. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "data/shard.h"
#include "core/bytes.h"
#include "fuzz_util.h"

static volatile uint64_t sink;

static void walk(const dt_shard *s) {
    const dt_shard_header *h = &s->h;
    uint64_t n = h->records < 4096 ? h->records : 4096;
    if (h->kind == DT_DATA_IMAGE) {
        uint64_t hwc = (uint64_t)h->shape[0] * h->shape[1] * h->shape[2];
        for (uint64_t i = 0; i < n; i++)
            sink += s->pixels[i * hwc] + s->pixels[i * hwc + hwc - 1] + (uint64_t)s->labels[i];
    } else if (h->kind == DT_DATA_ENCODED) {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t a = s->offsets[i], b = s->offsets[i + 1];
            if (b > a) sink += s->blob[a] + s->blob[b - 1];
            sink += (uint64_t)s->labels[i] + s->imginfo[4 * i] + s->imginfo[4 * i + 3];
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t a = s->offsets[i], b = s->offsets[i + 1];
            if (b > a) sink += s->tokens[a] + s->tokens[b - 1] + (s->mask ? s->mask[b - 1] : 0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[4096];
    if (!path[0]) fz_path(path, sizeof path, "fuzz.dts");
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    size_t n = size - 1;
    uint8_t *f = malloc(n ? n : 1);
    if (!f) abort();
    memcpy(f, data + 1, n);
    if (n >= DT_SHARD_HEADER_BYTES) {
        if (ctl & 1) dt_le_put64(f + 200, XXH3_64bits(f + 256, n - 256));
        if (ctl & 2) dt_le_put64(f + 248, XXH3_64bits(f, 248));
    }
    dt_shard_header h;
    dt_shard_header_decode("fuzz.dts", f, n, &h);
    fz_write(path, f, n);
    free(f);
    dt_shard s;
    if (dt_shard_open(path, ctl & 4 ? 1 : 0, &s) == DT_OK) {
        walk(&s);
        dt_shard_close(&s);
    }
    return 0;
}
