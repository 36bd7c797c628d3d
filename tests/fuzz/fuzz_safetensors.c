/* Fuzz target: a safetensors file (src/nn/safetensors.c): the u64 header length, the JSON
 * header (dtypes, shapes, data_offsets) and the tensors' placement in the data section.
 *
 * Input: the file's bytes. Entry points: dt_st_open_view (whole file in memory, as a download
 * from object storage is read), then every tensor through dt_st_name / dt_st_get / dt_st_locate
 * with a read of its first and last byte (a view pointing outside the buffer is an ASan report);
 * and the streaming path the checkpoint restore uses: dt_st_header_size + dt_st_open_header. */
#include <stdlib.h>
#include <string.h>
#include "dtrain/safetensors.h"
#include "fuzz_util.h"

static volatile uint8_t sink;

static void walk(dt_st_file *f, int has_data) {
    int n = dt_st_count(f);
    for (int i = 0; i < n; i++) {
        const char *name = dt_st_name(f, i);
        dt_tensor t;
        size_t off = 0;
        if (!name || dt_st_get(f, name, &t) != DT_OK) continue;
        if (dt_st_locate(f, name, &t, &off) != DT_OK) continue;
        size_t bytes = (size_t)dt_tensor_numel(&t) * dt_dtype_size(t.dtype);
        if (has_data && t.data && bytes) {
            const uint8_t *p = t.data;
            sink ^= p[0] ^ p[bytes - 1];
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_st_file *f = NULL;
    if (dt_st_open_view("fuzz.safetensors", data, size, &f) == DT_OK) {
        walk(f, 1);
        dt_st_close(f);
    }
    /* streaming: the header from the file's first bytes, checked against the file's size */
    size_t hn = 0;
    if (size >= 8 && dt_st_header_size("fuzz.safetensors", data, size, &hn) == DT_OK &&
        hn <= size && dt_st_open_header("fuzz.safetensors", data, hn, size, &f) == DT_OK) {
        walk(f, 0);
        dt_st_close(f);
    }
    /* the owning variant takes a malloc'd copy */
    void *copy = malloc(size ? size : 1);
    if (copy) {
        memcpy(copy, data, size);
        if (dt_st_open_memory("fuzz.safetensors", copy, size, &f) == DT_OK) dt_st_close(f);
    }
    return 0;
}
