// Plain-text books, streamed: a .txt of any size is read in two passes of bounded memory, never
// whole (a multi-GB BookCorpus-style file on every node would otherwise be held twice, raw and
// reflowed).  The Project Gutenberg framing decides where the book starts and ends, and that can
// sit anywhere in the file (no "*** START" line means the text starts at byte 0, which is only
// known at the end), so the first pass finds the book's bounds and validates the UTF-8; the
// second reflows the lines inside them into paragraphs and hands those to the chapter splitter
// (data/book_split.c), which emits each document once nothing later can change it.  Memory: the
// longest line, the paragraph being built (at most BOOK_PARAGRAPH_MAX, below) and the few
// chapters the splitter holds.  A bz2 book is decoded twice.
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/env.h"
#include "common/error.h"
#include "data/byte_source.h"
#include "data/corpus.h"
#include "data/strbuf.h"

// Hard-wrapped text without blank lines (BookCorpus: one sentence per line) would be one
// paragraph of the whole file: a paragraph that reaches this size ends at its line's end.  The
// longest paragraph of the shared books is 8 KB, so real books are not cut.
#define BOOK_PARAGRAPH_MAX ((size_t)1 << 20)

// Lines of a file, read MHE_TEXT_CHUNK bytes at a time; a line may span any number of reads.
typedef struct {
    ByteSource *src;
    char *chunk;
    size_t chunk_size, pos, end;
    StrBuf line;          // the current line, with its '\n' when it has one
    long long offset;     // file offset of the next line
} LineReader;

static void lines_open(LineReader *r, const char *file, int threads) {
    memset(r, 0, sizeof *r);
    r->src = byte_source_open_threads(file, threads);
    r->chunk_size = (size_t)mhe_env_int("MHE_TEXT_CHUNK", 1, 1LL << 30, 1, 1 << 20);
    r->chunk = mhe_malloc(r->chunk_size);
}

static void lines_close(LineReader *r) {
    byte_source_close(r->src);
    free(r->chunk);
    strbuf_free(&r->line);
}

// The next line into r->line; *start: its file offset.  False at the end.
static bool lines_next(LineReader *r, long long *start) {
    strbuf_clear(&r->line);
    *start = r->offset;
    for (;;) {
        if (r->pos == r->end) {
            r->pos = 0;
            r->end = byte_source_read(r->src, r->chunk, r->chunk_size);
            if (r->end == 0) break;
        }
        const char *p = r->chunk + r->pos, *nl = memchr(p, '\n', r->end - r->pos);
        size_t take = nl ? (size_t)(nl - p) + 1 : r->end - r->pos;
        strbuf_append(&r->line, p, take);
        r->pos += take;
        if (nl) break;
    }
    r->offset += (long long)r->line.len;
    return r->line.len > 0;
}

static bool line_has_ci(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (strncasecmp(s + i, needle, m) == 0) return true;
    return false;
}

// Where the book lies, in offsets after the BOM: [begin, end), and `from`, where the search for
// the older "End of the Project Gutenberg EBook" line starts (it sits within the last 400 bytes
// before the "*** END" line; the line holding byte end - 400 and every later one).
typedef struct {
    long long bom, begin, end, from;
    bool has_end;
} BookBounds;

// First pass: the bounds (Project Gutenberg: the book lies between the "*** START OF ..." and
// "*** END OF ..." lines; the licence comes after), every byte's UTF-8, and the bytes read.
static BookBounds book_bounds(const char *file, int threads, CorpusStats *stats) {
    BookBounds bb = {0, 0, 0, 0, false};
    LineReader r;
    lines_open(&r, file, threads);
    long long start, *starts = NULL;  // line starts from the one holding (this line - 400) on
    size_t n_starts = 0, cap = 0, first = 0;
    while (lines_next(&r, &start)) {
        corpus_check_utf8(file, r.line.s, r.line.len, start);
        const char *l = r.line.s;
        size_t ln = r.line.len - (l[r.line.len - 1] == '\n');
        if (start == 0 && ln >= 3 && memcmp(l, "\xEF\xBB\xBF", 3) == 0) bb.bom = 3, l += 3, ln -= 3;
        if (bb.has_end) continue;
        const long long at = start == 0 ? 0 : start - bb.bom;
        if (n_starts == cap) starts = mhe_realloc(starts, (cap = cap ? 2 * cap : 64) * sizeof *starts);
        starts[n_starts++] = at;
        while (first + 1 < n_starts && starts[first + 1] <= at - 400) first++;
        if (first > 256 && first * 2 > n_starts) {  // keep the window's lines only
            memmove(starts, starts + first, (n_starts - first) * sizeof *starts);
            n_starts -= first;
            first = 0;
        }
        while (ln && (*l == ' ' || *l == '\t')) l++, ln--;
        if (ln < 3 || strncmp(l, "***", 3) != 0) continue;
        if (line_has_ci(l, ln, "START OF") && bb.begin == 0) {
            bb.begin = at + (long long)(r.line.len - (start == 0 ? (size_t)bb.bom : 0));
        } else if (line_has_ci(l, ln, "END OF") && at >= bb.begin) {
            bb.has_end = true;
            bb.end = at;
            bb.from = starts[first] <= at - 400 && starts[first] > bb.begin ? starts[first] : bb.begin;
        }
    }
    free(starts);
    stats->bytes_in += r.offset;
    if (!bb.has_end) bb.end = r.offset - bb.bom;
    lines_close(&r);
    return bb;
}

typedef struct {
    CorpusDocFn fn;
    void *ctx;
    CorpusStats *stats;
} BookEmit;

static void book_emit(void *arg, const char *s, size_t n) {
    BookEmit *be = arg;
    if (n == 0) {
        be->stats->empty++;
        return;
    }
    be->stats->documents++;
    be->stats->bytes_kept += (long long)n;
    be->fn(be->ctx, s, n);
}

// Hard-wrapped lines into paragraphs: lines of a paragraph join with a space, blank lines
// separate paragraphs, whitespace runs collapse; Gutenberg's "Produced by <volunteers>" credit
// that opens many books is not the book's text.
typedef struct {
    StrBuf para;
    bool any, pending_para, first;
    BookSplitter *split;
} Reflow;

static void paragraph_done(Reflow *f) {
    if (!f->para.len) return;
    if (!(f->first && f->para.len >= 11 && strncasecmp(f->para.s, "produced by", 11) == 0))
        book_splitter_paragraph(f->split, f->para.s, f->para.len);
    f->first = false;
    strbuf_clear(&f->para);
}

static void reflow_line(Reflow *f, const char *s, size_t n) {
    size_t a = 0, b = n;
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    if (a == b) {
        if (f->any) f->pending_para = true;
        return;
    }
    if (f->pending_para) paragraph_done(f);
    else if (f->any) strbuf_putc(&f->para, ' ');
    f->pending_para = false;
    f->any = true;
    bool pending_space = false;
    for (size_t k = a; k < b; k++) {
        char c = s[k];
        if (c == '\t' || c == '\r' || c == ' ') {
            pending_space = true;
            continue;
        }
        if (pending_space) strbuf_putc(&f->para, ' ');
        pending_space = false;
        strbuf_putc(&f->para, c);
    }
    if (f->para.len >= BOOK_PARAGRAPH_MAX) f->pending_para = true;
}

void corpus_read_book(const char *file, int threads, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    const BookBounds bb = book_bounds(file, threads, stats);
    BookEmit be = {fn, ctx, stats};
    Reflow f = {.first = true, .split = book_splitter_new(book_emit, &be)};
    LineReader r;
    lines_open(&r, file, threads);
    long long start;
    while (lines_next(&r, &start)) {
        const char *l = r.line.s;
        size_t ln = r.line.len - (l[r.line.len - 1] == '\n');
        if (start == 0) l += bb.bom, ln -= (size_t)bb.bom;
        const long long at = start == 0 ? 0 : start - bb.bom;
        if (at >= bb.end) break;
        if (at < bb.begin) continue;
        // The older "End of the Project Gutenberg EBook of ..." line (sometimes wrapped over two)
        // sits just before the footer: the book ends at it when it is among the last few lines.
        if (bb.has_end && at >= bb.from &&
            (line_has_ci(l, ln, "end of the project gutenberg") || line_has_ci(l, ln, "end of project gutenberg")))
            break;
        reflow_line(&f, l, ln);
    }
    lines_close(&r);
    paragraph_done(&f);
    strbuf_free(&f.para);
    book_splitter_finish(f.split);
}
