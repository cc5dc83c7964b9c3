// The per-source validation split of `mhetrain prepare` (data/README.md, "Validation split").
#include "data/valid_split.h"

#include <stdlib.h>

#include "common/error.h"
#include "common/rng.h"

typedef struct {
    uint64_t key;
    int64_t doc;
} Keyed;

static int by_key(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

void valid_split_choose(uint64_t seed, int n_sources, int64_t n_docs, const int *doc_source,
                        const int64_t *doc_tokens, int docs_per_source, int64_t min_tokens,
                        bool *is_valid, SourceSplit *sources) {
    for (int s = 0; s < n_sources; s++) sources[s] = (SourceSplit){0};
    for (int64_t d = 0; d < n_docs; d++) {
        sources[doc_source[d]].documents++;
        sources[doc_source[d]].tokens += doc_tokens[d];
        is_valid[d] = false;
    }
    int used = 0;
    for (int s = 0; s < n_sources; s++) used += sources[s].documents > 0;
    // Each source with documents owes an equal share of the token minimum.
    int64_t share = used ? (min_tokens + used - 1) / used : 0;
    Keyed *keys = mhe_malloc((size_t)(n_docs ? n_docs : 1) * sizeof *keys);
    for (int s = 0; s < n_sources; s++) {
        SourceSplit *src = &sources[s];
        src->tokens_wanted = share;
        int64_t n = 0;
        for (int64_t d = 0; d < n_docs; d++)
            if (doc_source[d] == s) {
                // k = the document's rank within its source: the draw does not depend on
                // what the other inputs hold.
                keys[n] = (Keyed){rng_at(seed, VALID_SPLIT_STREAM, (uint64_t)s, (uint64_t)n), d};
                n++;
            }
        qsort(keys, (size_t)n, sizeof *keys, by_key);
        int64_t cap = n / 2;  // training keeps at least half of every source's documents
        for (int64_t i = 0; i < cap; i++) {
            if (src->valid_documents >= docs_per_source && src->valid_tokens >= share) break;
            is_valid[keys[i].doc] = true;
            src->valid_documents++;
            src->valid_tokens += doc_tokens[keys[i].doc];
        }
        src->met = src->valid_documents >= docs_per_source && src->valid_tokens >= share;
    }
    free(keys);
}
