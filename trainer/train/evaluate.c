#include "trainer/train/evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"

// Adds the loss, labelled count and correct argmax predictions of the last forward to sums.
// With the compact head (the default when the backend can gather rows) logits row i is the
// i-th label in (b, t) order, and only those rows were computed; else row r is position r.
static void accumulate(Model *m, const int32_t *labels, int rows, int V, float *logits, double sums[3]) {
    sums[0] += model_loss_sum(m);
    sums[1] += (double)model_label_count(m);
    model_download_logits(m, logits);
    const int full = model_full_logits(m);
    long i = 0;
    for (int r = 0; r < rows; r++) {
        if (labels[r] < 0) continue;
        const float *row = logits + (size_t)(full ? r : i++) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        sums[2] += best == labels[r];
    }
}

// Every packed sample of the split once (epoch 0, in stream order), split between the ranks.
// The last micro-batch of a rank may be short: the model takes any B <= max_batch.
static void whole_split(Model *m, Loader *l, int rank, int world, LoaderBatch *b, int V, float *logits,
                        double sums[3]) {
    const int64_t n = loader_samples_per_epoch(l);
    const int64_t lo = n * rank / world, hi = n * (rank + 1) / world;
    const int T = b->seq_len;
    for (int64_t s = lo; s < hi; s += b->batch) {
        const int rows = (int)(hi - s < b->batch ? hi - s : b->batch);
        for (int r = 0; r < rows; r++) {
            loader_sample(l, 0, s + r, b->input_ids + (size_t)r * T, b->attention_mask + (size_t)r * T,
                          b->labels + (size_t)r * T);
            for (int t = 0; t < T; t++) b->token_type_ids[(size_t)r * T + t] = 0;
        }
        model_forward(m, b->input_ids, b->token_type_ids, b->attention_mask, b->labels, rows, T, 0);
        accumulate(m, b->labels, rows * T, V, logits, sums);
    }
}

EvalResult evaluate_split(Model *m, Loader *l, Comm *comm, int batches, float *logits_host) {
    const int rank = comm_rank(comm), world = comm_world(comm);
    LoaderBatch b = loader_batch_alloc(l);
    const int V = model_param_table(m)->tensors[0].shape[0];  // embed.word [V, D]
    float *logits = logits_host ? logits_host : mhe_malloc((size_t)b.batch * b.seq_len * V * sizeof(float));
    // sums[0] loss, [1] labelled positions, [2] correct predictions
    double sums[3] = {0, 0, 0};
    const int was_full = model_full_logits(m);
    model_set_full_logits(m, 0);
    if (batches <= 0) {
        whole_split(m, l, rank, world, &b, V, logits, sums);
    } else {
        const int micros = loader_micro_batches(l, world);
        for (int s = 0; s < batches; s++)
            for (int i = 0; i < micros; i++) {
                loader_batch(l, s, rank, world, i, &b);
                model_forward(m, b.input_ids, b.token_type_ids, b.attention_mask, b.labels, b.batch, b.seq_len, 0);
                accumulate(m, b.labels, b.batch * b.seq_len, V, logits, sums);
            }
    }
    comm_allreduce_sum_f64(comm, sums, 3);
    model_set_full_logits(m, was_full);
    if (!logits_host) free(logits);
    loader_batch_free(&b);
    EvalResult r;
    r.tokens = (int64_t)sums[1];
    r.loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    r.accuracy = sums[1] > 0 ? sums[2] / sums[1] : 0.0;
    r.perplexity = exp(r.loss);
    return r;
}
