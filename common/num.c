#include "common/num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

static const char *digits(const char *p) {
    while (*p >= '0' && *p <= '9') p++;
    return p;
}

bool mhe_num_is_integer(const char *s) {
    const char *p = s + (*s == '-' || *s == '+');
    const char *e = digits(p);
    return e > p && *e == 0;
}

bool mhe_num_is_number(const char *s) {
    const char *p = s + (*s == '-' || *s == '+');
    const char *e = digits(p);
    bool whole = e > p;
    if (*e == '.') {
        const char *f = digits(e + 1);
        if (!whole && f == e + 1) return false;  // "." and "-." have no digit
        e = f;
    } else if (!whole) {
        return false;
    }
    if (*e == 'e' || *e == 'E') {
        const char *x = e + 1 + (e[1] == '-' || e[1] == '+');
        const char *y = digits(x);
        if (y == x) return false;
        e = y;
    }
    return *e == 0;
}

// Exact decimal accumulation; false on overflow of 64 bits.
static bool decimal_u64(const char *p, uint64_t *out) {
    uint64_t v = 0;
    for (; *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

// The value of a number literal that is a whole number of magnitude <= 2^63, as a double.
static MheNum whole_number(const char *s, double *d) {
    if (!mhe_num_is_number(s)) return MHE_NUM_SYNTAX;
    errno = 0;
    *d = strtod(s, NULL);
    if (!isfinite(*d) || fabs(*d) > 9223372036854775807.0) return MHE_NUM_RANGE;
    return *d == floor(*d) ? MHE_NUM_OK : MHE_NUM_SYNTAX;
}

MheNum mhe_parse_int(const char *s, long long lo, long long hi, long long *out) {
    long long v;
    if (mhe_num_is_integer(s)) {
        bool neg = *s == '-';
        uint64_t u;
        if (!decimal_u64(s + (*s == '-' || *s == '+'), &u)) return MHE_NUM_RANGE;
        if (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX) return MHE_NUM_RANGE;
        v = neg ? (long long)(0 - u) : (long long)u;
    } else {
        double d;
        MheNum r = whole_number(s, &d);
        if (r != MHE_NUM_OK) return r;
        if (d >= 9223372036854775807.0) return MHE_NUM_RANGE;  // 2^63 itself does not fit
        v = (long long)d;
    }
    if (v < lo || v > hi) return MHE_NUM_RANGE;
    *out = v;
    return MHE_NUM_OK;
}

MheNum mhe_parse_u64(const char *s, uint64_t *out) {
    if (mhe_num_is_integer(s)) {
        if (*s == '-') {
            const char *p = s + 1;
            while (*p == '0') p++;
            if (*p) return MHE_NUM_RANGE;  // -0 is 0
            *out = 0;
            return MHE_NUM_OK;
        }
        return decimal_u64(s + (*s == '+'), out) ? MHE_NUM_OK : MHE_NUM_RANGE;
    }
    double d;
    MheNum r = whole_number(s, &d);
    if (r != MHE_NUM_OK) return r;
    if (d < 0) return MHE_NUM_RANGE;
    *out = (uint64_t)d;
    return MHE_NUM_OK;
}

MheNum mhe_parse_real(const char *s, double lo, double hi, double *out) {
    if (!mhe_num_is_number(s)) return MHE_NUM_SYNTAX;
    double d = strtod(s, NULL);
    if (!isfinite(d) || d < lo || d > hi) return MHE_NUM_RANGE;
    *out = d;
    return MHE_NUM_OK;
}
