#include "common/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/num.h"

int mhe_env_flag(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    if (strcmp(v, "0") == 0) return 0;
    if (strcmp(v, "1") == 0) return 1;
    mhe_fail("%s=%s: expected 0 or 1 (README.md, \"Environment variables\")", name, v);
}

long long mhe_env_int(const char *name, long long lo, long long hi, long long multiple, long long dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    long long x = 0;
    if (mhe_parse_int(v, lo, hi, &x) != MHE_NUM_OK || (multiple > 1 && x % multiple != 0)) {
        char also[64] = "";
        if (multiple > 1) snprintf(also, sizeof also, ", a multiple of %lld", multiple);
        mhe_fail("%s=%s: expected an integer in [%lld, %lld]%s (README.md, \"Environment variables\")", name, v, lo, hi,
                 also);
    }
    return x;
}

const char *mhe_env_choice(const char *name, const char *const *choices, int n) {
    const char *v = getenv(name);
    if (!v || !*v) return NULL;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(v, choices[i]) == 0) return choices[i];
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", choices[i]);
    }
    mhe_fail("%s=%s: expected %s (README.md, \"Environment variables\")", name, v, list);
}
