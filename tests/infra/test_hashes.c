// CRC-32C and SHA-256 against published test vectors (RFC 3720 B.4, FIPS 180-4 examples).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/sha256.h"
#include "tests/infra/infra_util.h"

static void test_crc32c_matches_rfc3720_vectors(void **state) {
    (void)state;
    unsigned char buf[32];
    assert_int_equal(crc32c("123456789", 9), 0xE3069283u);
    memset(buf, 0, 32);
    assert_int_equal(crc32c(buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, 32);
    assert_int_equal(crc32c(buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    assert_int_equal(crc32c(buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    assert_int_equal(crc32c(buf, 32), 0x113FDB5Cu);
    // Continuing over pieces equals one pass.
    assert_int_equal(crc32c_update(crc32c(buf, 13), buf + 13, 19), crc32c(buf, 32));
}

static void test_crc32c_mask_is_tensorflows(void **state) {
    (void)state;
    // masked(c) = rotate-right-15(c) + 0xa282ead8, computed by hand for one value.
    const uint32_t c = 0x12345678u;
    const uint32_t rot = (c >> 15) | (c << 17);
    assert_int_equal(rot, 0xACF02468u);
    assert_int_equal(crc32c_mask(c), (uint32_t)(0xACF02468u + 0xa282ead8u));
}

static void test_sha256_matches_fips_vectors(void **state) {
    (void)state;
    char hex[SHA256_HEX_LEN];
    sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(m2, strlen(m2), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // One million 'a' fed in odd-sized pieces crosses every block-boundary case.
    Sha256 s;
    unsigned char chunk[997], d[32];
    memset(chunk, 'a', sizeof chunk);
    sha256_init(&s);
    size_t left = 1000000;
    while (left) {
        size_t k = left < sizeof chunk ? left : (left % 3 ? 61 : sizeof chunk);
        if (k > left) k = left;
        sha256_update(&s, chunk, k);
        left -= k;
    }
    sha256_final(&s, d);
    static const unsigned char want[32] = {0xcd, 0xc7, 0x6e, 0x5c, 0x99, 0x14, 0xfb, 0x92, 0x81, 0xa1, 0xc7,
                                           0xe2, 0x84, 0xd7, 0x3e, 0x67, 0xf1, 0x80, 0x9a, 0x48, 0xa4, 0x97,
                                           0x20, 0x0e, 0x04, 0x6d, 0x39, 0xcc, 0xc7, 0x11, 0x2c, 0xd0};
    assert_memory_equal(d, want, 32);
}

// The SHA-extension path (used when the CPU has it) and the portable code agree on every length
// around the block boundaries and on a long buffer.
static void test_sha256_accelerated_equals_portable(void **state) {
    (void)state;
    Sha256 probe;
    sha256_init(&probe);
    if (!probe.accel) print_message("no SHA extensions on this CPU: both sides run the portable code\n");
    static unsigned char buf[70000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)((i * 2654435761u) >> 24);
    const size_t lens[] = {0, 1, 55, 56, 63, 64, 65, 119, 127, 128, 129, 1000, 4097, 70000};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        unsigned char a[32], b[32];
        Sha256 s;
        sha256_init(&s);
        sha256_update(&s, buf, lens[k]);
        sha256_final(&s, a);
        sha256_init(&s);
        s.accel = 0;
        sha256_update(&s, buf, lens[k]);
        sha256_final(&s, b);
        assert_memory_equal(a, b, 32);
    }
}

static void test_sha256_file_equals_buffer(void **state) {
    (void)state;
    char *dir = infra_scratch_dir("hashes");
    char path[4200];
    snprintf(path, sizeof path, "%s/blob", dir);
    size_t n = 200000;
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    char a[SHA256_HEX_LEN], b[SHA256_HEX_LEN];
    sha256_hex(buf, n, a);
    assert_int_equal(sha256_file_hex(path, b), 0);
    assert_string_equal(a, b);
    assert_int_equal(sha256_file_hex("/nonexistent/file", b), -1);
    free(buf);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_matches_rfc3720_vectors),
        cmocka_unit_test(test_crc32c_mask_is_tensorflows),
        cmocka_unit_test(test_sha256_matches_fips_vectors),
        cmocka_unit_test(test_sha256_accelerated_equals_portable),
        cmocka_unit_test(test_sha256_file_equals_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
