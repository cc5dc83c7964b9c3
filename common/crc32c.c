#include "common/crc32c.h"

// Bit by bit, no lookup table: event files grow by a few hundred bytes per logging step, so
// speed does not matter, and a table filled at first use would be global mutable state.
static uint32_t byte_step(uint32_t crc) {
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    return crc;
}

uint32_t crc32c_update(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = (crc >> 8) ^ byte_step((crc ^ p[i]) & 0xffu);
    return ~crc;
}
