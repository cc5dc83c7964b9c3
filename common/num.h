// The one number parser: every config value, command-line override, option, environment
// setting and number-in-a-string of a file we read goes through it, so all accept exactly
// the forms README.md documents ("Numbers"), YAML 1.2's core-schema decimals and nothing else:
//   integer  [-+]?[0-9]+                                           12, -3, +7
//   number   [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?   3e-4, 0.1, .5, 2., 1E9
// An integer setting also takes a number whose value is a whole number (1e9, 2.0: token budgets
// read better that way).  Rejected: surrounding spaces, hex (0x10), octal (0o7), binary,
// underscores (1_000), inf/.inf/nan, and numbers whose value overflows the destination.
#ifndef MHE_COMMON_NUM_H
#define MHE_COMMON_NUM_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    MHE_NUM_OK,
    MHE_NUM_SYNTAX,  // not one of the forms above (or, for an integer, not a whole number)
    MHE_NUM_RANGE    // the right form, but outside [lo, hi] (or not finite)
} MheNum;

// True when s is an integer or a number of the grammar above (whatever its value).
bool mhe_num_is_integer(const char *s);
bool mhe_num_is_number(const char *s);
MheNum mhe_parse_int(const char *s, long long lo, long long hi, long long *out);
MheNum mhe_parse_u64(const char *s, uint64_t *out);
// Finite numbers in [lo, hi].
MheNum mhe_parse_real(const char *s, double lo, double hi, double *out);

#endif
