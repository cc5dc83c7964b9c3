// Per-source validation split: from every input ("source") of `mhetrain prepare`, documents
// drawn in a seeded order until the source gives at least docs_per_source documents and its
// equal share of min_tokens, never more than half of its documents.  A pure function of the
// seed and the (source, tokens) list, so the split is the same for every model type and
// training seed.
#ifndef MHE_DATA_VALID_SPLIT_H
#define MHE_DATA_VALID_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#define VALID_SPLIT_STREAM 0x76616c6964ULL  // "valid": apart from the other rng streams

typedef struct {
    int64_t documents, tokens;              // non-empty documents of the source
    int64_t valid_documents, valid_tokens;  // those chosen for validation
    int64_t tokens_wanted;                  // the source's share of min_tokens
    bool met;                               // both minimums reached within the half cap
} SourceSplit;

// doc_source[d] in [0, n_sources), doc_tokens[d] > 0, for the n_docs documents in input
// order.  Fills is_valid[n_docs] and sources[n_sources].
void valid_split_choose(uint64_t seed, int n_sources, int64_t n_docs, const int *doc_source,
                        const int64_t *doc_tokens, int docs_per_source, int64_t min_tokens,
                        bool *is_valid, SourceSplit *sources);

#endif
