/* Batch staging for the device trainer: a ring of pinned host slots and a copy stream. The host
 * writes a batch into the next slot; dt_stage_push copies it to the device on the copy stream
 * and makes the compute stream wait for that copy (an event), so the host does not block on it.
 * The copy itself waits for everything issued on the compute stream before it (a second
 * event): the destination (the graph's input buffers) may still be read by the previous step,
 * so it is never overwritten early. A slot is reused only after its copy finished. */
#ifndef DT_TRAIN_DEVICE_STAGE_H
#define DT_TRAIN_DEVICE_STAGE_H

#include <stddef.h>
#include "dtrain/device.h"

typedef struct dt_stage dt_stage;

/* slots >= 1 pinned buffers of slot_bytes on device d's host side, and d's copy stream. */
dt_status dt_stage_open(dt_device d, size_t slot_bytes, int slots, dt_stage **out);
void dt_stage_close(dt_stage *s); /* waits for the copies in flight */
/* *host = the next slot (slot_bytes), once its previous copy has finished. */
dt_status dt_stage_next(dt_stage *s, void **host);
/* Copies n pieces of the slot dt_stage_next gave (consecutive, from its start: bytes[i] to
 * dst[i]) after the work issued so far on compute, and makes compute wait for them. */
dt_status dt_stage_push(dt_stage *s, int n, void *const *dst, const size_t *bytes,
                        dt_stream *compute);

#endif
