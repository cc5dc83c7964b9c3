// MHE_* environment settings, checked where they are read: a value outside what the variable
// takes is a one-line error naming the variable, its value and the values expected (exit 2),
// never silently ignored.  README.md ("Environment variables") lists every variable read.
#ifndef MHE_COMMON_ENV_H
#define MHE_COMMON_ENV_H

// Unset or empty: dflt; "0" or "1": that; anything else an error.
int mhe_env_flag(const char *name, int dflt);

// Unset or empty: dflt; else an integer (common/num.h) in [lo, hi] and a multiple of `multiple`
// (1: any), else an error.
long long mhe_env_int(const char *name, long long lo, long long hi, long long multiple, long long dflt);

// Unset or empty: NULL; else one of choices[0..n) (returned), else an error listing them.
const char *mhe_env_choice(const char *name, const char *const *choices, int n);

#endif
