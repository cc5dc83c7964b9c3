// Books into documents: one per chapter (heading rules in data/README.md), long chapters and
// books without headings cut at paragraph boundaries.  A book is a few long documents
// otherwise, too few to draw a validation split of many documents from (DESIGN.md §4).
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "data/corpus.h"

// A chapter shorter than this joins the next one (tables of contents, "VOLUME I" before
// "CHAPTER I", front matter); one longer than BOOK_LONG is cut into pieces of at least
// BOOK_PIECE bytes, and a last piece under BOOK_PIECE/2 joins the one before.
#define BOOK_MIN 2000
#define BOOK_LONG 32768
#define BOOK_PIECE 16384
#define HEADING_MAX 80

static bool g_split_books = true;

void corpus_set_book_chapters(bool on) { g_split_books = on; }

static bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
static bool is_alnum(char c) { return is_upper(c) || is_lower(c) || (c >= '0' && c <= '9'); }

// "CHAPTER" or "Chapter", not "chapter" or "cHAPTER": headings are capitalised.
static bool caps_or_title(const char *w, size_t n) {
    if (n == 0 || !is_upper(w[0])) return false;
    bool all_upper = true, rest_lower = true;
    for (size_t i = 1; i < n; i++) {
        all_upper &= is_upper(w[i]);
        rest_lower &= is_lower(w[i]);
    }
    return all_upper || rest_lower;
}

static bool word_in(const char *w, size_t n, const char *const *list) {
    for (; *list; list++)
        if (strlen(*list) == n && strncasecmp(w, *list, n) == 0) return true;
    return false;
}

static const char *const HEADING_WORDS[] = {"chapter", "book", "act", "part", "stave", "adventure",
                                            "volume", "canto", "section", NULL};
static const char *const NUMBER_WORDS[] = {
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
    "ninth", "tenth", "eleventh", "twelfth", "last", "final", NULL};
static const char *const ALONE_WORDS[] = {"prologue", "epilogue", "preface", "introduction",
                                          "conclusion", NULL};

static bool is_roman(const char *w, size_t n) {
    if (n == 0 || n > 7) return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("IVXLCDM", w[i])) return false;
    return true;
}

static bool is_digits(const char *w, size_t n) {
    if (n == 0 || n > 3) return false;
    for (size_t i = 0; i < n; i++)
        if (w[i] < '0' || w[i] > '9') return false;
    return true;
}

static size_t word_end(const char *s, size_t n, size_t i) {
    while (i < n && is_alnum(s[i])) i++;
    return i;
}

static size_t skip_spaces(const char *s, size_t n, size_t i) {
    while (i < n && s[i] == ' ') i++;
    return i;
}

static bool has_lower(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_lower(s[i])) return true;
    return false;
}

bool book_is_heading(const char *s, size_t n) {
    if (n == 0 || n > HEADING_MAX) return false;
    size_t e1 = word_end(s, n, 0);
    const char *w1 = s;
    size_t n1 = e1;
    if (n1 == 0) return false;
    // "PROLOGUE", "Epilogue." alone.
    if ((e1 == n || (e1 + 1 == n && s[e1] == '.')) && caps_or_title(w1, n1) && word_in(w1, n1, ALONE_WORDS))
        return true;
    // "IV", "IV.", "VII. THE ADVENTURE OF THE BLUE CARBUNCLE", "12", "12.".
    if (is_roman(w1, n1) || is_digits(w1, n1)) {
        if (e1 == n || (e1 + 1 == n && s[e1] == '.')) return true;
        return is_roman(w1, n1) && s[e1] == '.' && e1 + 1 < n && s[e1 + 1] == ' ' && !has_lower(s, n);
    }
    if (!caps_or_title(w1, n1)) return false;
    size_t b2 = skip_spaces(s, n, e1);
    if (b2 == e1 || b2 == n) return false;
    size_t e2 = word_end(s, n, b2);
    const char *w2 = s + b2;
    size_t n2 = e2 - b2;
    // "THE FIRST BOOK (OF OPTICKS)".
    if (n1 == 3 && strncasecmp(w1, "the", 3) == 0) {
        if (!caps_or_title(w2, n2) || !word_in(w2, n2, NUMBER_WORDS)) return false;
        size_t b3 = skip_spaces(s, n, e2);
        size_t e3 = word_end(s, n, b3);
        return b3 > e2 && caps_or_title(s + b3, e3 - b3) && word_in(s + b3, e3 - b3, HEADING_WORDS);
    }
    // "CHAPTER 1. Loomings.", "ACT II. SCENE I.", "Chapter 12", "ADVENTURE I. A SCANDAL IN
    // BOHEMIA", "ACT FIRST.": a heading word, a number, then the end or punctuation, so that
    // "Part I understand" or "Book 10 of the Aeneid" stay text.
    if (!word_in(w1, n1, HEADING_WORDS)) return false;
    bool number = is_digits(w2, n2) || is_roman(w2, n2) ||
                  (caps_or_title(w2, n2) && word_in(w2, n2, NUMBER_WORDS));
    if (!number) return false;
    return e2 == n || strchr(".:;,-", s[e2]) || (n - e2 >= 3 && memcmp(s + e2, "\xE2\x80\x94", 3) == 0);  // "—"
}

// Calls emit_doc for each document of the cleaned book s (one paragraph per line): runs of
// whole paragraphs, joined by '\n' as in s, that together are s.
void book_split(const char *s, size_t n, void (*emit_doc)(void *, const char *, size_t), void *ctx) {
    if (!g_split_books || n == 0) {
        emit_doc(ctx, s, n);
        return;
    }
    // Chapter starts: offset 0 and every heading paragraph.
    size_t cap = 64, count = 0;
    size_t *starts = mhe_malloc(cap * sizeof *starts);
    starts[count++] = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n;
        if (i > 0 && book_is_heading(s + i, e - i)) {
            if (count == cap) starts = mhe_realloc(starts, (cap *= 2) * sizeof *starts);
            starts[count++] = i;
        }
        i = e + 1;
    }
    // A run of chapters shorter than BOOK_MIN absorbs the next heading; a short last run joins
    // the one before.
    size_t kept = 1;
    for (size_t k = 1; k < count; k++)
        if (starts[k] - starts[kept - 1] >= BOOK_MIN) starts[kept++] = starts[k];
    if (kept > 1 && n - starts[kept - 1] < BOOK_MIN) kept--;
    for (size_t k = 0; k < kept; k++) {
        size_t a = starts[k], b = k + 1 < kept ? starts[k + 1] : n;
        if (b > a && s[b - 1] == '\n') b--;  // the separator before the next chapter
        if (b - a <= BOOK_LONG) {
            emit_doc(ctx, s + a, b - a);
            continue;
        }
        // Long: greedy pieces of >= BOOK_PIECE bytes at paragraph ends.
        size_t piece = a;
        while (piece < b) {
            size_t cut = b;
            for (size_t i = piece; i < b;) {
                const char *nl = memchr(s + i, '\n', b - i);
                size_t e = nl ? (size_t)(nl - s) : b;
                if (e - piece >= BOOK_PIECE) {
                    cut = e;
                    break;
                }
                i = e + 1;
            }
            // A short remainder stays with this piece.
            if (cut < b && b - (cut + 1) < BOOK_PIECE / 2) cut = b;
            emit_doc(ctx, s + piece, cut - piece);
            piece = cut + 1;
        }
    }
    free(starts);
}
