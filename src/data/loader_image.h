/* The loader's encoded-image samples (kind encoded-image): decode (JPEG scaled in the DCT domain
 * where the crop allows) and transform one image into its batch slot, f32 [3, size, size].
 * Internal to src/data (loader.c). */
#ifndef DT_DATA_LOADER_IMAGE_H
#define DT_DATA_LOADER_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "data/image_transform.h"
#include "dtrain/data.h"

/* One prefetch thread's buffers: the decoded image (uint8 [h, w, 3]) and the transform's
 * scratch. They grow to the largest image met and are then reused: no allocation per sample
 * after the first batches. */
typedef struct dt_enc_scratch {
    uint8_t *rgb;
    size_t rgb_cap;
    void *tx;
    size_t tx_cap;
} dt_enc_scratch;

/* The transform of a loader config (train: augment; eval otherwise) into *tc, checked; errors
 * name the loader field. */
dt_status dt_enc_transform_cfg(const dt_loader_config *c, dt_transform_cfg *tc);

/* Record `src` of d decoded and transformed into out [3, size, size] with the draws of sample
 * `id` of `epoch` (id differs from src when a corrupt record's stand-in is used); *label its
 * label. dct: JPEG decoded at 1/2, 1/4 or 1/8 by dt_transform_dct_denom's rule. Errors:
 * DT_ERR_FORMAT for a corrupt payload block (from dt_dataset_encoded) or an image that does not
 * decode (naming the dataset and record; then *undecodable = 1), DT_ERR_NOMEM. */
dt_status dt_enc_sample(const dt_dataset *d, const dt_transform_cfg *tc, int dct, uint64_t seed,
                        int64_t epoch, int64_t id, int64_t src, dt_enc_scratch *s, float *out,
                        int32_t *label, int *undecodable);
void dt_enc_scratch_free(dt_enc_scratch *s);

#endif
