/* Batch staging: pinned slots, a copy stream, events (src/train/device_stage.h). */
#include "train/device_stage.h"
#include <stdlib.h>

#define STAGE_MAX_SLOTS 8

struct dt_stage {
    dt_device dev;
    size_t slot_bytes;
    int slots, cur; /* cur: the slot dt_stage_next gave last, -1 before the first */
    void *host[STAGE_MAX_SLOTS];
    dt_event *done[STAGE_MAX_SLOTS]; /* slot i's copy finished */
    int used[STAGE_MAX_SLOTS];       /* done[i] was recorded */
    dt_event *consumed;              /* the compute stream's work before a copy */
    dt_stream *copy;
};

dt_status dt_stage_open(dt_device d, size_t slot_bytes, int slots, dt_stage **out) {
    *out = NULL;
    if (slots < 1 || slots > STAGE_MAX_SLOTS)
        return dt_error_set(DT_ERR_INVALID, "batch staging: %d slots (1 to %d)", slots,
                            STAGE_MAX_SLOTS);
    dt_stage *s = calloc(1, sizeof *s);
    if (!s) return dt_error_set(DT_ERR_NOMEM, "batch staging: no memory");
    s->dev = d, s->slot_bytes = slot_bytes, s->slots = slots, s->cur = -1;
    dt_status st = dt_stream_create(d, &s->copy);
    if (st == DT_OK) st = dt_event_create(d, &s->consumed);
    for (int i = 0; i < slots && st == DT_OK; i++) {
        st = dt_host_alloc_pinned(d, slot_bytes, &s->host[i]);
        if (st == DT_OK) st = dt_event_create(d, &s->done[i]);
    }
    if (st != DT_OK) {
        dt_stage_close(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_stage_close(dt_stage *s) {
    if (!s) return;
    if (s->copy) dt_stream_sync(s->copy);
    for (int i = 0; i < s->slots; i++) {
        dt_host_free_pinned(s->dev, s->host[i]);
        dt_event_destroy(s->done[i]);
    }
    dt_event_destroy(s->consumed);
    dt_stream_destroy(s->copy);
    free(s);
}

dt_status dt_stage_next(dt_stage *s, void **host) {
    int i = (s->cur + 1) % s->slots;
    dt_status st = s->used[i] ? dt_event_sync(s->done[i]) : DT_OK;
    if (st != DT_OK) return st;
    s->cur = i;
    *host = s->host[i];
    return DT_OK;
}

dt_status dt_stage_push(dt_stage *s, int n, void *const *dst, const size_t *bytes,
                        dt_stream *compute) {
    if (s->cur < 0) return dt_error_set(DT_ERR_STATE, "batch staging: push before a slot");
    size_t off = 0;
    for (int k = 0; k < n; k++) off += bytes[k];
    if (off > s->slot_bytes)
        return dt_error_set(DT_ERR_INVALID, "batch staging: %zu bytes pushed, slots of %zu", off,
                            s->slot_bytes);
    const unsigned char *h = s->host[s->cur];
    dt_status st = dt_event_record(s->consumed, compute);
    if (st == DT_OK) st = dt_stream_wait_event(s->copy, s->consumed);
    off = 0;
    for (int k = 0; k < n && st == DT_OK; off += bytes[k++])
        if (bytes[k])
            st = dt_device_copy_async(s->dev, dst[k], h + off, bytes[k], DT_COPY_H2D, s->copy);
    if (st == DT_OK) st = dt_event_record(s->done[s->cur], s->copy);
    if (st == DT_OK) s->used[s->cur] = 1;
    return st == DT_OK ? dt_stream_wait_event(compute, s->done[s->cur]) : st;
}
