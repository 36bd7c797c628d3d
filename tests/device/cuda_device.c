/* The device interface on a GPU: memory, copies (sync, and async on streams from pinned
 * buffers), stream ordering through events, timing, and refusals (a stream of another device).
 * Exit 77 (skipped) without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "cuda_testutil.h"
#include "harness.h"

int main(void) {
    dt_stream *s;
    dt_device d = cuda_test_device("cuda_device", &s);
    const size_t n = (size_t)16 << 20; /* 64 MiB of floats: long enough to be timed */
    float *pin = NULL, *back = NULL;
    CHECK_OK(dt_host_alloc_pinned(d, n * sizeof(float), (void **)&pin));
    CHECK_OK(dt_host_alloc_pinned(d, n * sizeof(float), (void **)&back));
    if (!pin || !back) return dt_test_finish("cuda_device");
    for (size_t i = 0; i < n; i++) pin[i] = (float)(i % 1000) - 500.0f;
    float *a = NULL, *b = NULL;
    CHECK_OK(dt_device_alloc(d, n * sizeof(float), (void **)&a));
    CHECK_OK(dt_device_alloc(d, n * sizeof(float), (void **)&b));
    dt_stream *s2;
    CHECK_OK(dt_stream_create(d, &s2));
    dt_event *e0, *e1, *e2;
    CHECK_OK(dt_event_create(d, &e0));
    CHECK_OK(dt_event_create(d, &e1));
    CHECK_OK(dt_event_create(d, &e2));
    CHECK_OK(dt_event_record(e0, s));
    CHECK_OK(dt_device_copy_async(d, a, pin, n * sizeof(float), DT_COPY_H2D, s));
    CHECK_OK(dt_event_record(e1, s));
    /* s2: device copy a -> b after the upload, then back to the host */
    CHECK_OK(dt_stream_wait_event(s2, e1));
    CHECK_OK(dt_device_copy_async(d, b, a, n * sizeof(float), DT_COPY_D2D, s2));
    CHECK_OK(dt_device_copy_async(d, back, b, n * sizeof(float), DT_COPY_D2H, s2));
    CHECK_OK(dt_event_record(e2, s2));
    CHECK_OK(dt_event_sync(e2));
    int done = 0;
    CHECK_OK(dt_event_query(e2, &done));
    CHECK(done == 1, "event reached after sync");
    CHECK(!memcmp(pin, back, n * sizeof(float)), "h2d on s, d2d + d2h on s2 after the event");
    float ms = 0;
    CHECK_OK(dt_event_elapsed_ms(e0, e1, &ms));
    CHECK(ms > 0.0f, "upload took %g ms", ms);
    printf("pinned upload of %zu MiB: %.3f ms (%.1f GB/s)\n", n * 4 >> 20, ms,
           (double)n * 4 / (ms * 1e6));
    /* synchronous copies and memset */
    CHECK_OK(dt_device_memset(d, b, 0, n * sizeof(float)));
    CHECK_OK(dt_device_copy(d, back, b, 64, DT_COPY_D2H));
    CHECK(back[0] == 0.0f && back[15] == 0.0f, "memset + sync copy");
    /* a CPU stream with a CUDA device is refused */
    dt_device cpu = {DT_DEVICE_CPU, 0};
    dt_stream *cs;
    CHECK_OK(dt_stream_create(cpu, &cs));
    CHECK(dt_device_copy_async(d, a, pin, 64, DT_COPY_H2D, cs) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "the stream belongs to cpu"),
          "%s", dt_last_error());
    dt_device_info info;
    CHECK_OK(dt_device_query(d, &info));
    CHECK(info.free_bytes > 0 && info.free_bytes <= info.total_bytes, "free %zu of %zu",
          info.free_bytes, info.total_bytes);
    dt_stream_destroy(cs);
    dt_event_destroy(e0);
    dt_event_destroy(e1);
    dt_event_destroy(e2);
    dt_stream_destroy(s2);
    dt_stream_destroy(s);
    dt_device_free(d, a);
    dt_device_free(d, b);
    dt_host_free_pinned(d, pin);
    dt_host_free_pinned(d, back);
    return dt_test_finish("cuda_device");
}
