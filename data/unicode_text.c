// UTF-8 decoding and Unicode classes on top of utf8proc.
#include "data/unicode_text.h"

#include <utf8proc.h>

uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    const uint8_t *p = (const uint8_t *)s + *i;
    size_t avail = n - *i;
    uint8_t b = p[0];
    if (b < 0x80) {
        *i += 1;
        return b;
    }
    int need;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1; cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2; cp = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3; cp = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *i += 1;
        return 0xFFFD;
    }
    size_t k = 1;
    for (; k <= (size_t)need; k++) {
        if (k >= avail) break;
        uint8_t c = p[k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (c < l || c > h) break;
        cp = (cp << 6) | (c & 0x3F);
    }
    if (k <= (size_t)need) {  // invalid or truncated: drop the maximal valid prefix
        *i += k;
        return 0xFFFD;
    }
    *i += k;
    return cp;
}

int utf8_put(char *dst, uint32_t cp) {
    uint8_t *d = (uint8_t *)dst;
    if (cp < 0x80) { d[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { d[0] = 0xC0 | (cp >> 6); d[1] = 0x80 | (cp & 0x3F); return 2; }
    if (cp < 0x10000) {
        d[0] = 0xE0 | (cp >> 12); d[1] = 0x80 | ((cp >> 6) & 0x3F); d[2] = 0x80 | (cp & 0x3F);
        return 3;
    }
    d[0] = 0xF0 | (cp >> 18); d[1] = 0x80 | ((cp >> 12) & 0x3F);
    d[2] = 0x80 | ((cp >> 6) & 0x3F); d[3] = 0x80 | (cp & 0x3F);
    return 4;
}

long long utf8_first_invalid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t at = i;
        if ((uint8_t)s[i] < 0x80) { i++; continue; }
        uint32_t cp = utf8_next(s, n, &i);
        if (cp == 0xFFFD) {
            // A genuine U+FFFD is EF BF BD; anything else decoding to it was invalid.
            if (!(i - at == 3 && (uint8_t)s[at] == 0xEF && (uint8_t)s[at + 1] == 0xBF &&
                  (uint8_t)s[at + 2] == 0xBD))
                return (long long)at;
        }
    }
    return -1;
}

bool uni_is_whitespace(uint32_t c) {
    // White_Space: the same set in Rust's char::is_whitespace and in HF's regex \s.
    if (c == ' ' || (c >= 9 && c <= 13)) return true;
    if (c < 0x85) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The other classes come from tables of what HF's pipelines do (unicode_hf_tables.c): its
// Rust crates and regex engine predate utf8proc's Unicode version, and ids must match HF,
// not the newest Unicode.
extern const uint32_t HF_PUNCT[][2], HF_CONTROL[][2], HF_NONSPACING_MARK[][2], HF_LETTER[][2],
    HF_NUMBER[][2];
extern const int HF_PUNCT_COUNT, HF_CONTROL_COUNT, HF_NONSPACING_MARK_COUNT, HF_LETTER_COUNT,
    HF_NUMBER_COUNT;

static bool in_ranges(uint32_t c, const uint32_t (*r)[2], int n) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid - 1;
        else if (c > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

bool uni_is_letter(uint32_t c) {
    if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return in_ranges(c, HF_LETTER, HF_LETTER_COUNT);
}

bool uni_is_number(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return in_ranges(c, HF_NUMBER, HF_NUMBER_COUNT);
}

bool uni_is_punct(uint32_t c) { return c >= 0x80 && in_ranges(c, HF_PUNCT, HF_PUNCT_COUNT); }

bool uni_is_control(uint32_t c) {
    if (c < 0x80) return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
    return in_ranges(c, HF_CONTROL, HF_CONTROL_COUNT);
}

bool uni_is_nonspacing_mark(uint32_t c) {
    return c >= 0x80 && in_ranges(c, HF_NONSPACING_MARK, HF_NONSPACING_MARK_COUNT);
}

bool uni_is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

int uni_nfd(uint32_t c, uint32_t *dst) {
    if (c < 0xC0) { dst[0] = c; return 1; }
    utf8proc_int32_t buf[8];
    int last = 0;
    utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)c, buf, 8,
                                                 UTF8PROC_DECOMPOSE, &last);
    if (k <= 0 || k > 8) { dst[0] = c; return 1; }
    for (int j = 0; j < k; j++) dst[j] = (uint32_t)buf[j];
    return (int)k;
}

int uni_ccc(uint32_t c) {
    if (c < 0x300) return 0;
    return utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
}

int uni_lower(uint32_t c, uint32_t *dst) {
    if (c < 0x80) {
        dst[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        return 1;
    }
    // The one unconditional multi-character lowercase mapping (SpecialCasing.txt).
    if (c == 0x130) { dst[0] = 'i'; dst[1] = 0x307; return 2; }
    dst[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}
