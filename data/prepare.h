// mhetrain prepare: corpora -> tokenized Megatron shards + manifest.json (DESIGN.md §4).
// Reading, tokenizing and writing overlap: the reader fills batches of documents into a
// bounded queue, worker threads tokenize them, and the writer takes them back in input order,
// so memory is bounded and the output is byte-identical whatever the number of threads.
#ifndef MHE_DATA_PREPARE_H
#define MHE_DATA_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "data/corpus.h"
#include "data/valid_split.h"

typedef struct {
    const char *tokenizer;     // NULL: only extract cleaned text (text_out required)
    const char *out_dir;       // NULL when only extracting text
    double shard_size_mb;      // a shard is closed once its .bin reaches this size
    bool valid_by_fraction;    // true: each document is valid with probability valid_fraction
    double valid_fraction;     //   (the old rule); false: the per-source rule below
    int valid_docs_per_source; // per-source rule (data/valid_split.h): at least this many
    int64_t valid_min_tokens;  //   documents from each input, and together this many tokens
    bool whole_books;          // a book is one document (default: one per chapter)
    uint64_t seed;             // split seed
    int threads;               // tokenizing threads (>= 1)
    CorpusFormat format;
    const char *text_out;      // also write cleaned documents here (NULL: no)
    int n_inputs;
    char **inputs;
} PrepareOptions;

typedef struct {
    int64_t documents[2];      // [0] train, [1] valid
    int64_t tokens[2];
    int shards[2];
    int64_t skipped_empty;     // documents with no tokens (or no text)
    int64_t nul_replaced;
    CorpusStats reading;       // the input account over every file (data/corpus.h)      // NUL characters (\u0000 in JSON lines, parquet, Arrow) replaced by U+FFFD
    int n_sources;             // = n_inputs; per input: documents, tokens and their split
    SourceSplit *sources;      // (malloc'd; free it)
    double seconds;
    double tokens_per_second;
    double peak_rss_mb;
} PrepareResult;

// Runs the whole preparation; bad input exits 2, I/O failures exit 1.
void prepare_run(const PrepareOptions *opt, PrepareResult *res);

// The split a document goes to: true for validation.  A pure function of (seed, index).
bool prepare_is_valid_doc(uint64_t seed, int64_t doc_index, double valid_fraction);

#endif
