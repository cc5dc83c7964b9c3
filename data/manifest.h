// manifest.json of a prepared corpus: what went in (inputs, tokenizer, settings) and what
// came out (counts, shards, checksums).  Written deterministically: no times, no thread count.
#ifndef MHE_DATA_MANIFEST_H
#define MHE_DATA_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

#include "data/corpus.h"
#include "data/prepare.h"

typedef struct {
    char name[64];         // file prefix inside the output directory, e.g. "train_00000"
    int64_t sequences, tokens;
} ManifestShard;

typedef struct {
    int n_inputs, cap_inputs;
    char **input_paths;
    const char **input_formats;
    CorpusStats *input_stats;   // per input file: what its reader read, kept and skipped
    const char *tokenizer_path, *tokenizer_kind;
    int vocab_size, dtype;
    CorpusStats stats;
} Manifest;

void manifest_add_input(Manifest *m, const char *path, const char *format);
// The account of the input added last (its reader's CorpusStats for that file alone).
void manifest_set_input_stats(Manifest *m, const CorpusStats *s);
// Writes OUT_DIR/manifest.json (hashing inputs, tokenizer and shards).
void manifest_write(const Manifest *m, const PrepareOptions *opt, const PrepareResult *res,
                    ManifestShard *const shards[2], const int n_shards[2]);
void manifest_free(Manifest *m);

// Reading back what a training run checks against its settings: the tokenizer the shards were
// made with.  Returns false when `path` does not exist; a manifest that is not the JSON prepare
// writes exits 2 with "path:line:col: ..." or "path: key: expected ...".  sha256 is "" when
// the manifest records none (the tokenizer was a directory).
typedef struct {
    char tokenizer_path[4096];
    char tokenizer_sha256[65];
    int vocab_size;
} ManifestTokenizer;
bool manifest_read_tokenizer(const char *path, ManifestTokenizer *out);

#endif
