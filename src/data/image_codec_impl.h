/* Inside the image codec: the PNG half (image_png.c) that image_codec.c dispatches to. */
#ifndef DT_DATA_IMAGE_CODEC_IMPL_H
#define DT_DATA_IMAGE_CODEC_IMPL_H

#include <stdio.h>
#include "data/image_codec.h"

dt_status dt_png_probe(const uint8_t *buf, size_t len, dt_image_info *out);
/* Full-size RGB8 into rgb (cap bytes). */
dt_status dt_png_decode(const uint8_t *buf, size_t len, uint8_t *rgb, size_t cap, int32_t *w,
                        int32_t *h);

#endif
