#include "common/sha256.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA256_X86 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress_portable(uint32_t h[8], const unsigned char *blk) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 | (uint32_t)blk[4 * i + 2] << 8 |
               (uint32_t)blk[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}


#ifdef SHA256_X86
// The SHA-NI instructions hold the state as (A,B,E,F) and (C,D,G,H) and do two rounds per
// sha256rnds2; the message schedule for group k (words 4k..4k+3) is
//   W_k = msg2(msg1(W_{k-4}, W_{k-3}) + alignr(W_{k-1}, W_{k-2}, 4), W_{k-1}).
// Checkpoint hashing is I/O-sized (GBs per save), where this is ~10x the portable code.
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_accel(uint32_t h[8], const unsigned char *p,
                                                                        size_t blocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);  // B A D C
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B);   // H G F E
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);                                         // ABEF
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);                                               // CDGH
    for (; blocks > 0; blocks--, p += 64) {
        const __m128i save0 = s0, save1 = s1;
        __m128i w[4];
        for (int k = 0; k < 16; k++) {
            if (k < 4) {
                w[k] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * k)), bswap);
            } else {
                __m128i x = _mm_sha256msg1_epu32(w[k & 3], w[(k + 1) & 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(w[(k + 3) & 3], w[(k + 2) & 3], 4));
                w[k & 3] = _mm_sha256msg2_epu32(x, w[(k + 3) & 3]);
            }
            __m128i msg = _mm_add_epi32(w[k & 3], _mm_loadu_si128((const __m128i *)&K[4 * k]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(msg, 0x0E));
        }
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);     // F E B A
    s1 = _mm_shuffle_epi32(s1, 0xB1);      // D C H G
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);   // D C B A
    s1 = _mm_alignr_epi8(s1, tmp, 8);      // H G F E
    _mm_storeu_si128((__m128i *)&h[0], s0);
    _mm_storeu_si128((__m128i *)&h[4], s1);
}

static int accel_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 29) & 1;  // CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29]
}
#endif

static void compress(const Sha256 *s, uint32_t h[8], const unsigned char *p, size_t blocks) {
#ifdef SHA256_X86
    if (s->accel) {
        compress_accel(h, p, blocks);
        return;
    }
#else
    (void)s;
#endif
    for (; blocks > 0; blocks--, p += 64) compress_portable(h, p);
}

void sha256_init(Sha256 *s) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, H0, sizeof H0);
    s->total = 0;
    s->used = 0;
#ifdef SHA256_X86
    s->accel = accel_available();
#else
    s->accel = 0;
#endif
}

void sha256_update(Sha256 *s, const void *data, size_t len) {
    const unsigned char *p = data;
    s->total += len;
    if (s->used) {
        size_t take = 64 - s->used < len ? 64 - s->used : len;
        memcpy(s->buf + s->used, p, take);
        s->used += take; p += take; len -= take;
        if (s->used < 64) return;
        compress(s, s->h, s->buf, 1);
        s->used = 0;
    }
    const size_t blocks = len / 64;
    if (blocks) compress(s, s->h, p, blocks);
    p += 64 * blocks;
    len -= 64 * blocks;
    memcpy(s->buf, p, len);
    s->used = len;
}

void sha256_final(Sha256 *s, unsigned char digest[32]) {
    uint64_t bits = s->total * 8;
    unsigned char pad[72] = {0x80};
    // Pad to 56 mod 64, then the 64-bit big-endian length.
    size_t npad = (s->used < 56 ? 56 : 120) - s->used;
    for (int i = 0; i < 8; i++) pad[npad + i] = (unsigned char)(bits >> (56 - 8 * i));
    uint64_t keep = s->total;
    sha256_update(s, pad, npad + 8);
    s->total = keep;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) digest[4 * i + j] = (unsigned char)(s->h[i] >> (24 - 8 * j));
}

static void to_hex(const unsigned char d[32], char hex[SHA256_HEX_LEN]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
}

void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN]) {
    Sha256 s;
    unsigned char d[32];
    sha256_init(&s);
    sha256_update(&s, data, len);
    sha256_final(&s, d);
    to_hex(d, hex);
}

int sha256_file_hex(const char *path, char hex[SHA256_HEX_LEN]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    Sha256 s;
    sha256_init(&s);
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(&s, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) return -1;
    unsigned char d[32];
    sha256_final(&s, d);
    to_hex(d, hex);
    return 0;
}
