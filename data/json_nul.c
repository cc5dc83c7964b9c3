#include "data/json_nul.h"

#include <string.h>

static int is_nul_escape(const char *p, size_t left) {
    return left >= 6 && p[1] == 'u' && memcmp(p + 2, "0000", 4) == 0;
}

long json_find_nul_escape(const char *text, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '\\') continue;
        if (is_nul_escape(text + i, len - i)) return (long)i;
        i++;  // the escaped character (a second backslash included) is not an escape's start
    }
    return -1;
}

size_t json_replace_nul_escapes(char *text, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '\\') continue;
        if (is_nul_escape(text + i, len - i)) {
            memcpy(text + i + 2, "fffd", 4);
            n++;
            i += 5;
        } else {
            i++;
        }
    }
    return n;
}
