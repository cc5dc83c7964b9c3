// common/num.h, the one number parser behind configs, overrides, options and checkpoint
// fields: exactly the forms README.md documents ("Numbers"), with their values; everything
// strtol/strtod would also have taken (spaces, hex, hex floats, inf, nan, trailing junk) is
// refused, and out-of-range values are told apart from malformed ones.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/num.h"

static void integers(void **state) {
    (void)state;
    struct { const char *s; MheNum r; long long v; } cases[] = {
        {"0", MHE_NUM_OK, 0},       {"12", MHE_NUM_OK, 12},     {"-3", MHE_NUM_OK, -3},
        {"+7", MHE_NUM_OK, 7},      {"007", MHE_NUM_OK, 7},     {"1e9", MHE_NUM_OK, 1000000000},
        {"2.0", MHE_NUM_OK, 2},     {"2.", MHE_NUM_OK, 2},      {"1E3", MHE_NUM_OK, 1000},
        {"-4e2", MHE_NUM_OK, -400}, {"9223372036854775807", MHE_NUM_OK, INT64_MAX},
        {"-9223372036854775808", MHE_NUM_OK, INT64_MIN},
        {"9223372036854775808", MHE_NUM_RANGE, 0}, {"1e19", MHE_NUM_RANGE, 0},
        {"1e999", MHE_NUM_RANGE, 0},
        {"2.5", MHE_NUM_SYNTAX, 0}, {"1e-1", MHE_NUM_SYNTAX, 0}, {"", MHE_NUM_SYNTAX, 0},
        {" 5", MHE_NUM_SYNTAX, 0},  {"5 ", MHE_NUM_SYNTAX, 0},  {"0x10", MHE_NUM_SYNTAX, 0},
        {"0o7", MHE_NUM_SYNTAX, 0}, {"0b1", MHE_NUM_SYNTAX, 0}, {"1_000", MHE_NUM_SYNTAX, 0},
        {"inf", MHE_NUM_SYNTAX, 0}, {"nan", MHE_NUM_SYNTAX, 0}, {".inf", MHE_NUM_SYNTAX, 0},
        {"-", MHE_NUM_SYNTAX, 0},   {"+-1", MHE_NUM_SYNTAX, 0}, {"1e", MHE_NUM_SYNTAX, 0},
        {"12abc", MHE_NUM_SYNTAX, 0}, {"0x1p3", MHE_NUM_SYNTAX, 0}, {"1,000", MHE_NUM_SYNTAX, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        long long v = -12345;
        MheNum r = mhe_parse_int(cases[i].s, INT64_MIN, INT64_MAX, &v);
        if (r != cases[i].r) fail_msg("'%s': status %d, expected %d", cases[i].s, r, cases[i].r);
        if (r == MHE_NUM_OK && v != cases[i].v) fail_msg("'%s': %lld, expected %lld", cases[i].s, v, cases[i].v);
    }
    long long v;
    assert_int_equal(mhe_parse_int("11", 1, 10, &v), MHE_NUM_RANGE);
    assert_int_equal(mhe_parse_int("0", 1, 10, &v), MHE_NUM_RANGE);
    assert_int_equal(mhe_parse_int("10", 1, 10, &v), MHE_NUM_OK);
}

static void unsigned64(void **state) {
    (void)state;
    uint64_t v;
    assert_int_equal(mhe_parse_u64("18446744073709551615", &v), MHE_NUM_OK);
    assert_true(v == UINT64_MAX);
    assert_int_equal(mhe_parse_u64("18446744073709551616", &v), MHE_NUM_RANGE);
    assert_int_equal(mhe_parse_u64("-1", &v), MHE_NUM_RANGE);
    assert_int_equal(mhe_parse_u64("-0", &v), MHE_NUM_OK);
    assert_true(v == 0);
    assert_int_equal(mhe_parse_u64("1234", &v), MHE_NUM_OK);
    assert_true(v == 1234);
    assert_int_equal(mhe_parse_u64("1e3", &v), MHE_NUM_OK);
    assert_true(v == 1000);
    assert_int_equal(mhe_parse_u64("0x10", &v), MHE_NUM_SYNTAX);
    assert_int_equal(mhe_parse_u64(" 1", &v), MHE_NUM_SYNTAX);
}

static void reals(void **state) {
    (void)state;
    struct { const char *s; MheNum r; double v; } cases[] = {
        {"3e-4", MHE_NUM_OK, 3e-4}, {"0.1", MHE_NUM_OK, 0.1}, {".5", MHE_NUM_OK, 0.5},
        {"-.5", MHE_NUM_OK, -0.5},  {"2.", MHE_NUM_OK, 2.0},  {"1E9", MHE_NUM_OK, 1e9},
        {"+1.5e+2", MHE_NUM_OK, 150.0}, {"7", MHE_NUM_OK, 7.0},
        {"1e999", MHE_NUM_RANGE, 0}, {"-1e999", MHE_NUM_RANGE, 0},
        {"inf", MHE_NUM_SYNTAX, 0}, {"-inf", MHE_NUM_SYNTAX, 0}, {"nan", MHE_NUM_SYNTAX, 0},
        {"infinity", MHE_NUM_SYNTAX, 0}, {".nan", MHE_NUM_SYNTAX, 0}, {"0x1p-3", MHE_NUM_SYNTAX, 0},
        {"0x10", MHE_NUM_SYNTAX, 0}, {".", MHE_NUM_SYNTAX, 0}, {"e5", MHE_NUM_SYNTAX, 0},
        {"1e+", MHE_NUM_SYNTAX, 0}, {" 1", MHE_NUM_SYNTAX, 0}, {"1.5 ", MHE_NUM_SYNTAX, 0},
        {"1.5.2", MHE_NUM_SYNTAX, 0}, {"", MHE_NUM_SYNTAX, 0}, {"1_0.0", MHE_NUM_SYNTAX, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double v = -12345;
        MheNum r = mhe_parse_real(cases[i].s, -1e300, 1e300, &v);
        if (r != cases[i].r) fail_msg("'%s': status %d, expected %d", cases[i].s, r, cases[i].r);
        if (r == MHE_NUM_OK && v != cases[i].v) fail_msg("'%s': %g, expected %g", cases[i].s, v, cases[i].v);
    }
    double v;
    assert_int_equal(mhe_parse_real("1.5", 0, 1, &v), MHE_NUM_RANGE);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(integers), cmocka_unit_test(unsigned64),
                                       cmocka_unit_test(reals)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
