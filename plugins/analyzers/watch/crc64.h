/* CRC-64 used by watch (upstream msMemScope's "data check sum"): polynomial
 * 0x42F0E1EBA9EA3693 applied bit-reflected (shift right), initial value and
 * final xor all ones; written as 16 lower-case hex digits. Header-only, C and
 * C++, no allocation: usable inside the target and in the host. */
#ifndef MSMEMSCOPE_WATCH_CRC64_H
#define MSMEMSCOPE_WATCH_CRC64_H

#include <stddef.h>
#include <stdint.h>

#define MSMS_CRC64_POLY 0x42F0E1EBA9EA3693ULL

static inline const uint64_t* msms_crc64_table(void) {
    static uint64_t table[256];
    static int ready = 0;
    if (!ready) {
        for (int i = 0; i < 256; ++i) {
            uint64_t c = (uint64_t)i;
            for (int j = 0; j < 8; ++j) c = (c & 1) ? (c >> 1) ^ MSMS_CRC64_POLY : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    return table;
}

/* Continues a CRC: start with crc = 0 (the all-ones init/xor are applied inside). */
static inline uint64_t msms_crc64_update(uint64_t crc, const void* data, size_t n) {
    const uint64_t* t = msms_crc64_table();
    const unsigned char* p = (const unsigned char*)data;
    uint64_t c = ~crc;
    for (size_t i = 0; i < n; ++i) c = (c >> 8) ^ t[(uint8_t)(c ^ p[i])];
    return ~c;
}

static inline uint64_t msms_crc64(const void* data, size_t n) { return msms_crc64_update(0, data, n); }

#endif
