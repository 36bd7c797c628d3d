/* Fixed-width integers in files: little-endian fields (shards, safetensors headers, checkpoint
 * records), big-endian ones (IDX image files), and 64-bit hashes as 16 hex digits. */
#ifndef DTRAIN_CORE_BYTES_H
#define DTRAIN_CORE_BYTES_H

#include <stdint.h>

static inline void dt_le_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dt_le_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t dt_le_get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t dt_le_get64(const uint8_t *p) {
    return (uint64_t)dt_le_get32(p) | (uint64_t)dt_le_get32(p + 4) << 32;
}
static inline uint32_t dt_be_get32(const uint8_t *p) {
    return (uint32_t)p[3] | (uint32_t)p[2] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[0] << 24;
}

/* "0123456789abcdef" form of a 64-bit hash into buf[17]. */
void dt_hex64(uint64_t v, char buf[17]);
/* Parses 16 hex digits; 0 on success. */
int dt_parse_hex64(const char *s, uint64_t *v);

#endif
