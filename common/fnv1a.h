// FNV-1a, 64-bit: a fast, stable hash of bytes (the same on every platform and build), for
// identities that are compared, never trusted against tampering — parameter layouts, initial
// weight streams keyed by tensor name, the replicas' weight checksum.  (Checksums that guard
// files are sha256.h's.)
#ifndef MHE_COMMON_FNV1A_H
#define MHE_COMMON_FNV1A_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A_BASIS 0xcbf29ce484222325ull

// h continued over n bytes at data (start from FNV1A_BASIS).
static inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

#endif
