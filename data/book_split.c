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

// The splitter takes the cleaned book one paragraph at a time and emits each document as soon as
// nothing still to come can change it, so a book of any size is held a few chapters' worth at a
// time (data/corpus_book.c streams books through it).  Offsets are in the whole cleaned text
// (paragraphs joined by '\n'); `buf` holds its bytes from `base` on.  A chapter start is kept
// when it lies BOOK_MIN or more after the one before, and the last kept one is dropped when
// fewer than BOOK_MIN bytes follow it: `pending` is a kept start not yet past that test.
struct BookSplitter {
    void (*emit_doc)(void *, const char *, size_t);
    void *ctx;
    bool whole;        // one document per book (corpus_set_book_chapters(false))
    char *buf;
    size_t len, cap;   // bytes held, from offset base
    size_t base, t;    // t: the text's length so far
    long long paragraphs;
    size_t a, piece;   // the current chapter's start and its next piece's start (a when none cut)
    bool cut_any;      // pieces of the current chapter already emitted (so it is a long one)
    bool pending;
    size_t h;          // the pending chapter start
};

BookSplitter *book_splitter_new(void (*emit_doc)(void *, const char *, size_t), void *ctx) {
    BookSplitter *b = mhe_calloc(1, sizeof *b);
    b->emit_doc = emit_doc;
    b->ctx = ctx;
    b->whole = !g_split_books;
    return b;
}

static const char *at(const BookSplitter *b, size_t off) { return b->buf + (off - b->base); }

static void drop_before(BookSplitter *b, size_t off) {
    size_t k = off - b->base;
    memmove(b->buf, b->buf + k, b->len - k);
    b->len -= k;
    b->base = off;
}

// The first paragraph end at or past piece + BOOK_PIECE and before `limit`, or 0 when none.
static size_t piece_cut(const BookSplitter *b, size_t limit) {
    size_t from = b->piece + BOOK_PIECE;
    if (from >= limit) return 0;
    const char *nl = memchr(at(b, from), '\n', limit - from);
    return nl ? (size_t)(nl - b->buf) + b->base : 0;
}

static void emit_piece(BookSplitter *b, size_t cut) {
    b->emit_doc(b->ctx, at(b, b->piece), cut - b->piece);
    b->piece = cut + 1;
    b->cut_any = true;
    drop_before(b, b->piece);
}

// The current chapter ends at b_end (its last byte before the next chapter's '\n', or the end):
// emitted whole when short, else in greedy pieces of >= BOOK_PIECE bytes at paragraph ends, a
// remainder under BOOK_PIECE/2 staying with the piece before.
static void chapter_end(BookSplitter *b, size_t b_end) {
    if (!b->cut_any && b_end - b->a <= BOOK_LONG) {
        b->emit_doc(b->ctx, at(b, b->a), b_end - b->a);
        b->piece = b_end + 1;
    }
    while (b->piece < b_end) {
        size_t cut = piece_cut(b, b_end);
        if (!cut || b_end - (cut + 1) < BOOK_PIECE / 2) cut = b_end;
        b->emit_doc(b->ctx, at(b, b->piece), cut - b->piece);
        b->piece = cut + 1;
        b->cut_any = true;
    }
    b->cut_any = false;
}

static void next_chapter(BookSplitter *b, size_t start) {
    chapter_end(b, start - 1);  // the '\n' before a heading paragraph is no chapter's
    b->a = b->piece = start;
    drop_before(b, start);
}

void book_splitter_paragraph(BookSplitter *b, const char *p, size_t n) {
    const size_t i = b->paragraphs ? b->t + 1 : 0;
    if (!b->whole && b->paragraphs && book_is_heading(p, n) && i - (b->pending ? b->h : b->a) >= BOOK_MIN) {
        if (b->pending) next_chapter(b, b->h);  // no longer the last kept start: it stays
        b->pending = true;
        b->h = i;
    }
    if (b->len + n + 2 > b->cap) {
        while (b->len + n + 2 > b->cap) b->cap = b->cap ? 2 * b->cap : 1 << 16;
        b->buf = mhe_realloc(b->buf, b->cap);
    }
    if (b->paragraphs) b->buf[b->len++] = '\n';
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    b->t = i + n;
    b->paragraphs++;
    if (b->whole) return;
    if (b->pending && b->t - b->h >= BOOK_MIN) {  // whatever follows, this start stays
        b->pending = false;
        next_chapter(b, b->h);
    }
    // Pieces of a long chapter, as soon as the rest of the chapter is known to be long enough
    // that the cut cannot move: the chapter ends at the pending start or later, past the text so far.
    const size_t known = b->pending ? b->h - 1 : b->t;
    if (known - b->a <= BOOK_LONG) return;
    for (size_t cut; (cut = piece_cut(b, known)) && known - (cut + 1) >= BOOK_PIECE / 2;) emit_piece(b, cut);
}

void book_splitter_finish(BookSplitter *b) {
    if (b->whole || !b->paragraphs) b->emit_doc(b->ctx, b->buf ? b->buf : "", b->len);
    else chapter_end(b, b->t);  // a pending start with under BOOK_MIN after it joins this chapter
    free(b->buf);
    free(b);
}

// Calls emit_doc for each document of the cleaned book s (one paragraph per line): runs of
// whole paragraphs, joined by '\n' as in s, that together are s.
void book_split(const char *s, size_t n, void (*emit_doc)(void *, const char *, size_t), void *ctx) {
    BookSplitter *b = book_splitter_new(emit_doc, ctx);
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n;
        book_splitter_paragraph(b, s + i, e - i);
        i = e + 1;
    }
    book_splitter_finish(b);
}
