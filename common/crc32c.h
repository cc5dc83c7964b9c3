// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum TensorBoard's record
// format uses, plus TensorFlow's "masked" form that keeps CRCs of CRCs from degenerating.
#ifndef MHE_COMMON_CRC32C_H
#define MHE_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

// Continues a CRC over more bytes: start with crc = 0; crc32c_update(crc32c_update(0,a),b)
// equals the CRC of a followed by b.
uint32_t crc32c_update(uint32_t crc, const void *data, size_t len);

static inline uint32_t crc32c(const void *data, size_t len) { return crc32c_update(0, data, len); }

// ((c >> 15) | (c << 17)) + 0xa282ead8, as TFRecord / event files store it.
static inline uint32_t crc32c_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

#endif
