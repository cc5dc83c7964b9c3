// The training data loader (DESIGN.md §2, §4): memory-mapped shards -> one token stream ->
// fixed-length packed samples in a seeded global order, sliced per rank and micro-batch.
//
// Stream: documents of all shards in order (shards in the order given, prefix globs sorted),
// each document followed by a separator ([SEP] for MLM, the end-of-text token for CLM).
// Sample i is a fixed window of the stream: MLM: [CLS] stream[i*(T-2), (i+1)*(T-2)) [SEP];
// CLM: inputs stream[i*T, (i+1)*T), labels shifted by one.  The last, partial sample is padded
// (attention_mask 0, labels -100), so one epoch covers every token exactly once.
// Order: global sample g = step*G + k is sample perm_e(g mod N) of epoch e = g / N, perm_e a
// seeded bijection (a Feistel network, no tables); rank r of W takes k in [r*G/W, (r+1)*G/W),
// in micro-batches of B.  Masks depend on (seed, epoch, sample) only: nothing depends on the
// number of workers, and resuming needs only the step number.
#ifndef MHE_DATA_LOADER_H
#define MHE_DATA_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/tokenizer.h"
// What a sample is built for (config.h: objective.type): masked tokens or next-token labels.
typedef enum { OBJ_MLM, OBJ_CLM } Objective;

#define LOADER_IGNORE_LABEL (-100)

typedef struct {
    Objective objective;
    int seq_len;                 // T
    int global_batch;            // G
    int micro_batch;             // B
    uint64_t shuffle_seed;       // sample order
    uint64_t mask_seed;          // MLM masks
    float mask_prob, mask_token_frac, random_token_frac;
    bool whole_word;
    int vocab_size;              // ids must be below it; random replacements are drawn in it
    SpecialIds special;
    const uint8_t *continuation; // [vocab_size]: 1 when a token continues a word (whole_word)
} LoaderOptions;

typedef struct {
    int batch, seq_len;          // B, T
    int32_t *input_ids, *token_type_ids, *attention_mask, *labels;  // each [B*T], row-major
} LoaderBatch;

typedef struct Loader Loader;

// Opens the shards named by `prefixes`: each is a shard prefix (PREFIX.idx exists), or the
// stem of a split (all PREFIX_*.idx, sorted), or a glob pattern (over .idx files, or over
// prefixes: "dir/train_0000*").  Shards are
// validated; ids >= vocab_size exit 2.  Exits 2 when nothing matches or the stream is empty.
Loader *loader_open(int n_prefixes, char *const *prefixes, const LoaderOptions *opt);
// Hands the loader the table its options' `continuation` points at: freed by loader_close.
void loader_own_continuation(Loader *l, uint8_t *continuation);
void loader_close(Loader *l);

int64_t loader_samples_per_epoch(const Loader *l);
int64_t loader_stream_tokens(const Loader *l);      // stream length, separators included
int loader_micro_batches(const Loader *l, int world);  // G / world / B (exits 2 if not exact)
// What identifies the data a rank trains on, for comparing ranks: the stream's shape (shards,
// sequence lengths) and 256 windows of its tokens.  Cheap (no pass over the tokens), and two
// different corpora or a stale copy of one agree only by a freak of the sampled windows.
uint64_t loader_digest(const Loader *l);

// The packed sample `sample` (0 <= sample < N) of epoch `epoch`, masked; rows of T.
void loader_sample(const Loader *l, int64_t epoch, int64_t sample, int32_t *input_ids,
                   int32_t *attention_mask, int32_t *labels);

LoaderBatch loader_batch_alloc(const Loader *l);
void loader_batch_free(LoaderBatch *b);
// Micro-batch `micro_index` of rank `rank` (of `world`) at optimizer step `step`.
void loader_batch(const Loader *l, int64_t step, int rank, int world, int micro_index,
                  LoaderBatch *out);
// The global sample (epoch, sample) at position g of the global order.
void loader_global_sample(const Loader *l, int64_t g, int64_t *epoch, int64_t *sample);

#endif
