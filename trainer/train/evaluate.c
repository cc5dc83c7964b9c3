#include "trainer/train/evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"

EvalResult evaluate_split(Model *m, Loader *l, Comm *comm, int batches, float *logits_host) {
    const int rank = comm_rank(comm), world = comm_world(comm);
    const int micros = loader_micro_batches(l, world);
    LoaderBatch b = loader_batch_alloc(l);
    const int V = model_param_table(m)->tensors[0].shape[0];  // embed.word [V, D]
    float *logits = logits_host ? logits_host : mhe_malloc((size_t)b.batch * b.seq_len * V * sizeof(float));
    // sums[0] loss, [1] labelled positions, [2] correct predictions
    double sums[3] = {0, 0, 0};
    model_set_full_logits(m, 1);  // accuracy indexes logits by position
    for (int s = 0; s < batches; s++) {
        for (int i = 0; i < micros; i++) {
            loader_batch(l, s, rank, world, i, &b);
            model_forward(m, b.input_ids, b.token_type_ids, b.attention_mask, b.labels, b.batch, b.seq_len, 0);
            sums[0] += model_loss_sum(m);
            sums[1] += (double)model_label_count(m);
            model_download_logits(m, logits);
            for (int r = 0; r < b.batch * b.seq_len; r++) {
                if (b.labels[r] < 0) continue;
                const float *row = logits + (size_t)r * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (row[v] > row[best]) best = v;
                sums[2] += best == b.labels[r];
            }
        }
    }
    comm_allreduce_sum_f64(comm, sums, 3);
    model_set_full_logits(m, 0);
    if (!logits_host) free(logits);
    loader_batch_free(&b);
    EvalResult r;
    r.tokens = (int64_t)sums[1];
    r.loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    r.accuracy = sums[1] > 0 ? sums[2] / sums[1] : 0.0;
    r.perplexity = exp(r.loss);
    return r;
}
