// The BPE merge learner shared by the WordPiece and byte-level BPE trainers.
#ifndef MHE_DATA_BPE_TRAIN_H
#define MHE_DATA_BPE_TRAIN_H

#include <stdint.h>

#include "data/tokenizer_internal.h"

// Distinct training words as symbol-id sequences with their counts.
typedef struct {
    int32_t **sym;
    int32_t *len;
    int64_t *count;
    int n, cap;
} TrainWords;

// Growable token list: the vocabulary being built (id = index), with a lookup map.
typedef struct {
    char **tok;
    uint32_t *len;
    int n, cap;
    uint32_t *slots;  // open addressing, id + 1
    uint32_t mask;
} TrainVocab;

int train_vocab_add(TrainVocab *v, const char *s, size_t n);  // existing id or a new one
int train_vocab_get(const TrainVocab *v, const char *s, size_t n);
void train_vocab_free(TrainVocab *v);

// Distinct pre-tokenized words (bytes; WordPiece words normalised) with their counts.
typedef struct {
    TrainVocab words;  // the string map: id = word index
    int64_t *count;
    int cap_count;
} WordCounter;

void word_counter_add(WordCounter *c, const char *s, size_t n, int64_t count);

// Counts the words of every paragraph line of every document of the inputs (any format the
// corpus readers know), with `threads` counting threads besides the reading one (<= 1: all
// in the calling thread).  The merges do not depend on the order of the words, so the
// result is the same for any thread count.
void train_count_words(const Tokenizer *norm, TokenizerKind kind, int threads, int n_paths,
                       char **paths, WordCounter *wc);

// Learns merges until the vocabulary has `vocab_size` tokens or no pair occurs at least
// `min_frequency` times (at least once).  `strip_prefix` bytes are dropped from the right
// symbol when the merged string is formed ("##" for WordPiece continuations).  Merges
// are recorded in *merges (rank = order) with the merged token's id.
void bpe_train_merges(TrainWords *w, TrainVocab *v, int vocab_size, int min_frequency,
                      const char *cont_prefix, PairMap *merges, int *n_merges);

#endif
