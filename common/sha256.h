// SHA-256 (FIPS 180-4), for the per-file checksums recorded in checkpoints' state.json.
#ifndef MHE_COMMON_SHA256_H
#define MHE_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t total;           // bytes hashed so far
    unsigned char buf[64];
    size_t used;              // bytes pending in buf
    int accel;                // x86 SHA extensions available (set by init; 0 forces portable code)
} Sha256;

#define SHA256_HEX_LEN 65     // 64 hex digits + NUL

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t len);
void sha256_final(Sha256 *s, unsigned char digest[32]);

// Lowercase hex digest of a buffer.
void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN]);
// Lowercase hex digest of a file's contents.  Returns 0, or -1 with errno set when the file
// cannot be read (the caller decides whether that is an error).
int sha256_file_hex(const char *path, char hex[SHA256_HEX_LEN]);

#endif
