// Corpus readers: stream documents out of Wikipedia dumps, WikiExtractor output, folders of
// books and JSON lines, one callback per document, in input order, with bounded memory
// (one document at a time).
#ifndef MHE_DATA_CORPUS_H
#define MHE_DATA_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    CORPUS_AUTO,            // by extension, then by the first bytes of the content
    CORPUS_WIKI,            // MediaWiki XML export (.xml, .xml.bz2, multistream)
    CORPUS_WIKIEXTRACTOR,   // <doc id= url= title=> ... </doc> blocks
    CORPUS_BOOKS,           // one plain-text book per file (Project Gutenberg parts stripped)
    CORPUS_JSONL,           // one JSON object per line with a "text" field (WikiExtractor --json)
    CORPUS_PARQUET,         // Apache Parquet (Hugging Face hub shards), read through pyarrow
    CORPUS_ARROW            // Arrow IPC stream or file (a `datasets` cache), read through pyarrow
} CorpusFormat;

// The input name that means JSON lines on standard input.
#define CORPUS_STDIN "-"

// A document: UTF-8 text, one paragraph per line.
typedef void (*CorpusDocFn)(void *ctx, const char *text, size_t len);

typedef struct {
    long long documents;       // passed to the callback
    long long pages;           // wiki: <page> elements seen
    long long redirects;       // wiki: namespace-0 redirects skipped
    long long other_namespace; // wiki: pages outside namespace 0 skipped
    long long empty;           // documents that were empty after cleaning (skipped)
    long long nul_replaced;    // JSON lines, parquet, Arrow: NUL characters (\u0000) replaced by U+FFFD
    long long bytes_in;        // text bytes the readers saw (decompressed; JSON as the lines hold it)
    long long bytes_kept;      // bytes of the documents passed to the callback
} CorpusStats;

bool corpus_format_parse(const char *name, CorpusFormat *out);
const char *corpus_format_name(CorpusFormat f);

// The files an input names: itself ("-" included), or every regular file below a directory
// (hidden ones skipped), sorted by path so the order is the same on every machine; a
// directory holding .parquet or .arrow files gives only those (the rest of a `datasets` cache
// or hub snapshot is metadata: dataset_info.json, state.json, README.md).  Exits 2 when the
// path does not exist or a directory holds no files.
char **corpus_list_files(const char *path, int *n_files);
void corpus_free_files(char **files, int n_files);

// The format of one file under `requested` (AUTO resolves from the name and content).
CorpusFormat corpus_detect(const char *file, CorpusFormat requested);

// The columns (JSON keys) that hold a document's text and its title, for JSON lines, parquet
// and Arrow (process-wide, set before reading; default "text", "title").  The title is
// optional; a document whose first line is its title loses that line (a heading).
void corpus_set_columns(const char *text, const char *title);
const char *corpus_text_column(void);
const char *corpus_title_column(void);

// Reads one file, calling fn for each non-empty document; adds to *stats.  Bad input
// (truncated bz2, malformed XML or JSON, invalid UTF-8) exits 2 naming file and position.
void corpus_read_file(const char *file, CorpusFormat format, CorpusDocFn fn, void *ctx,
                      CorpusStats *stats);
// Same, decoding multistream bz2 with `threads` threads (the documents and their order are
// the same for any thread count).
void corpus_read_file_threads(const char *file, CorpusFormat format, int threads, CorpusDocFn fn,
                              void *ctx, CorpusStats *stats);

// Internal to the readers (corpus_wiki.c, corpus_text.c).
void corpus_read_wiki(const char *file, int threads, CorpusDocFn fn, void *ctx, CorpusStats *stats);
void corpus_read_wikiextractor(const char *file, int threads, CorpusDocFn fn, void *ctx,
                               CorpusStats *stats);
void corpus_read_book(const char *file, int threads, CorpusDocFn fn, void *ctx, CorpusStats *stats);
void corpus_read_jsonl(const char *file, int threads, CorpusDocFn fn, void *ctx, CorpusStats *stats);
void corpus_read_jsonl_stream(FILE *f, const char *name, CorpusDocFn fn, void *ctx, CorpusStats *stats);
struct ByteSource;
void corpus_read_jsonl_source(struct ByteSource *src, const char *file, const char *text_key,
                              const char *title_key, CorpusDocFn fn, void *ctx, CorpusStats *stats);
// Parquet and Arrow through data/arrow_bridge.py (data/corpus_arrow.c).
void corpus_read_arrow(const char *file, CorpusFormat format, CorpusDocFn fn, void *ctx, CorpusStats *stats);
// Books: one document per chapter (data/book_split.c); a heading paragraph starts its
// chapter.  corpus_set_book_chapters(false) makes a book one document (process-wide setting,
// set before reading).
void corpus_set_book_chapters(bool on);
bool book_is_heading(const char *paragraph, size_t n);
void book_split(const char *text, size_t n, void (*emit_doc)(void *ctx, const char *, size_t),
                void *ctx);
// The same, fed one paragraph at a time (none holding '\n'): each document is emitted as soon as
// no later paragraph can change it, so memory holds a few chapters, not the book.  finish emits
// the rest (an empty document when no paragraph came) and frees the splitter.
typedef struct BookSplitter BookSplitter;
BookSplitter *book_splitter_new(void (*emit_doc)(void *ctx, const char *, size_t), void *ctx);
void book_splitter_paragraph(BookSplitter *b, const char *paragraph, size_t n);
void book_splitter_finish(BookSplitter *b);
// Offset of the first byte that is not valid UTF-8, or -1 when all n bytes are valid.
long long utf8_invalid_offset(const char *s, size_t n);
// Exits 2 with "file: byte base+N: invalid UTF-8 (byte 0x..)" at the first invalid byte: the
// message of every reader of text (prepare's readers, `tokenizer encode`).
void corpus_check_utf8(const char *file, const char *s, size_t n, long long base);

#endif
