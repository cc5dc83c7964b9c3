// Evaluation on a held-out split: MLM loss and masked-token accuracy, CLM loss and perplexity.
#ifndef MHE_TRAINER_EVALUATE_H
#define MHE_TRAINER_EVALUATE_H

#include <stdint.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "trainer/model/model.h"

typedef struct {
    double loss;         // mean over labelled positions of the whole evaluation set
    double accuracy;     // argmax == label over labelled positions
    double perplexity;   // exp(loss)
    int64_t tokens;      // labelled positions evaluated (all ranks)
} EvalResult;

// Evaluates `batches` global batches of the loader (the same ones every time: the validation
// order does not move), or with batches <= 0 every packed sample of the split once (epoch 0,
// stream order); each rank its slice; sums are all-reduced so every rank gets the result.
// `logits_host` is scratch of micro_batch * seq_len * vocab floats (NULL: allocated inside).
EvalResult evaluate_split(Model *m, Loader *l, Comm *comm, int batches, float *logits_host);

#endif
