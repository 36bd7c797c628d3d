/* 64-bit hashes as hex (src/core/bytes.h). */
#include "core/bytes.h"

void dt_hex64(uint64_t v, char buf[17]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4) buf[i] = hx[v & 15];
    buf[16] = '\0';
}

int dt_parse_hex64(const char *s, uint64_t *v) {
    uint64_t r = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        r = r << 4 | (uint64_t)d;
    }
    if (s[16] != '\0') return -1;
    *v = r;
    return 0;
}
