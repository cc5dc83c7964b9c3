// SQuAD exact match and F1 as the official evaluate-v2.0.py (and transformers' squad_metrics)
// define them: normalize_answer = lowercase, drop ASCII punctuation (string.punctuation), replace
// the words a/an/the (regex \b(a|an|the)\b, Unicode word characters) by a space, collapse
// whitespace; F1 over the multiset of normalised tokens.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/error.h"
#include "trainer/task/metrics.h"

// Python's str.isspace(): ASCII whitespace, the information separators, NEL, and the Unicode
// space separators / line and paragraph separators.
static int py_space(int32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85) return 1;
    if (c < 0x80) return 0;
    const utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

// re's \w for str patterns: letters, numbers, underscore.
static int py_word(int32_t c) {
    if (c == '_') return 1;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return 1;
    default: return 0;
    }
}

static int py_punct(int32_t c) { return c < 0x80 && c > 0x20 && c != 0x7F && strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", (int)c); }

// Decodes s into code points (invalid bytes become U+FFFD); returns the count.
static size_t decode(const char *s, int32_t **out) {
    const size_t len = strlen(s);
    int32_t *cp = mhe_malloc((len + 1) * sizeof *cp);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0) c = 0xFFFD, k = 1;
        cp[n++] = c;
        i += (size_t)k;
    }
    *out = cp;
    return n;
}

static int cased(int32_t c) {
    const utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

// Unicode's Case_Ignorable: marks, format characters, modifiers, and the word-internal
// punctuation (apostrophe, period, colon, middle dot, ...).
static int case_ignorable(int32_t c) {
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK: return 1;
    default: break;
    }
    static const int32_t mid[] = {0x27, 0x2E, 0x3A, 0x5E, 0x60, 0xA8, 0xAD, 0xAF, 0xB4, 0xB7, 0xB8, 0x387,
                                  0x5F4, 0x2018, 0x2019, 0x2024, 0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07,
                                  0xFF0E, 0xFF1A};
    for (size_t i = 0; i < sizeof mid / sizeof *mid; i++)
        if (c == mid[i]) return 1;
    return 0;
}

// Python's str.lower(): the simple lowercase mapping plus the two special cases it applies,
// U+0130 (İ → i + U+0307) and the final sigma (Σ → ς after a cased letter and not before one,
// case-ignorable characters skipped).  `out` has room for 2n code points.
static size_t py_lower(const int32_t *cp, size_t n, int32_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t c = cp[i];
        if (c == 0x130) {
            out[m++] = 'i';
            out[m++] = 0x307;
        } else if (c == 0x3A3) {
            size_t j = i;
            while (j > 0 && case_ignorable(cp[j - 1])) j--;
            const int after_cased = j > 0 && cased(cp[j - 1]);
            size_t k = i + 1;
            while (k < n && case_ignorable(cp[k])) k++;
            const int before_cased = k < n && cased(cp[k]);
            out[m++] = after_cased && !before_cased ? 0x3C2 : 0x3C3;
        } else {
            out[m++] = utf8proc_tolower(c);
        }
    }
    return m;
}

void squad_normalize(const char *s, char *out, size_t cap) {
    int32_t *raw;
    const size_t n_raw = decode(s, &raw);
    int32_t *cp = mhe_malloc((2 * n_raw + 1) * sizeof *cp);
    size_t n = py_lower(raw, n_raw, cp), m = 0;
    free(raw);
    for (size_t i = 0; i < n; i++)  // then punctuation
        if (!py_punct(cp[i])) cp[m++] = cp[i];
    n = m;
    // Articles: a maximal run of word characters that is exactly a, an or the becomes a space.
    for (size_t i = 0; i < n;) {
        if (!py_word(cp[i])) { i++; continue; }
        size_t j = i;
        while (j < n && py_word(cp[j])) j++;
        const size_t L = j - i;
        const int art = (L == 1 && cp[i] == 'a') || (L == 2 && cp[i] == 'a' && cp[i + 1] == 'n') ||
                        (L == 3 && cp[i] == 't' && cp[i + 1] == 'h' && cp[i + 2] == 'e');
        if (art) {
            cp[i] = ' ';
            for (size_t k = i + 1; k < j; k++) cp[k] = -1;  // deleted
        }
        i = j;
    }
    // Whitespace: tokens joined by single spaces.
    size_t o = 0;
    int pending = 0;
    for (size_t i = 0; i < n; i++) {
        if (cp[i] < 0) continue;
        if (py_space(cp[i])) { pending = o > 0; continue; }
        utf8proc_uint8_t enc[4];
        const utf8proc_ssize_t k = utf8proc_encode_char(cp[i], enc);
        if (o + (size_t)k + 2 > cap) break;
        if (pending) out[o++] = ' ', pending = 0;
        memcpy(out + o, enc, (size_t)k);
        o += (size_t)k;
    }
    if (cap) out[o < cap ? o : cap - 1] = '\0';
    free(cp);
}

static char *normalized(const char *s) {
    const size_t cap = 4 * strlen(s) + 8;
    char *out = mhe_malloc(cap);
    squad_normalize(s, out, cap);
    return out;
}

int squad_exact(const char *gold, const char *pred) {
    char *g = normalized(gold), *p = normalized(pred);
    const int eq = strcmp(g, p) == 0;
    free(g);
    free(p);
    return eq;
}

static int split_spaces(char *s, char ***out) {
    int n = 0, cap = 16;
    char **t = mhe_malloc((size_t)cap * sizeof *t);
    for (char *p = strtok(s, " "); p; p = strtok(NULL, " ")) {
        if (n == cap) t = mhe_realloc(t, (size_t)(cap *= 2) * sizeof *t);
        t[n++] = p;
    }
    *out = t;
    return n;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

double squad_f1(const char *gold, const char *pred) {
    char *g = normalized(gold), *p = normalized(pred);
    char **gt, **pt;
    const int ng = split_spaces(g, &gt), np = split_spaces(p, &pt);
    double f1;
    if (ng == 0 || np == 0) {
        f1 = ng == np;  // both empty: 1; one empty: 0
    } else {
        qsort(gt, (size_t)ng, sizeof *gt, cmp_str);
        qsort(pt, (size_t)np, sizeof *pt, cmp_str);
        int same = 0;
        for (int i = 0, j = 0; i < ng && j < np;) {
            const int c = strcmp(gt[i], pt[j]);
            if (c == 0) same++, i++, j++;
            else if (c < 0) i++;
            else j++;
        }
        const double prec = (double)same / np, rec = (double)same / ng;
        f1 = same ? 2 * prec * rec / (prec + rec) : 0.0;
    }
    free(gt);
    free(pt);
    free(g);
    free(p);
    return f1;
}
