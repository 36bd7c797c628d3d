/* S3-compatible object storage through libcurl (placeholder until the S3 backend lands). */
#include "ckpt/storage_impl.h"

dt_status dt_store_s3_open(dt_store *s, const char *bucket_prefix) {
    (void)bucket_prefix;
    return dt_error_set(DT_ERR_STATE, "storage open: %s: S3 support is not built yet", s->url);
}
