// Classification / regression rows: BERT `[CLS] a [SEP] b [SEP]` with type ids 0 then 1, GPT
// `a <|endoftext|> b`; when a pair is too long the longer text loses its last token until it
// fits (BERT's _truncate_seq_pair, HF truncation="longest_first"), a single text is cut.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

void task_pool_push(TaskData *d, int32_t id, long *cap) {
    if (d->n_ids == *cap) {
        *cap = *cap ? 2 * *cap : 1 << 16;
        d->ids = mhe_realloc(d->ids, (size_t)*cap * sizeof *d->ids);
    }
    d->ids[d->n_ids++] = id;
}

void task_featurize_text(TaskData *d, const Tokenizer *tok) {
    const long n = d->ex.n;
    IdBuf *a = mhe_calloc((size_t)(n ? n : 1), sizeof *a), *b = mhe_calloc((size_t)(n ? n : 1), sizeof *b);
    // tokenizer_encode is read-only on the tokenizer: examples tokenize in parallel.
#pragma omp parallel for schedule(dynamic, 64)
    for (long i = 0; i < n; i++) {
        const TextExample *e = &d->ex.text[i];
        tokenizer_encode(tok, e->a, strlen(e->a), &a[i]);
        if (e->b) tokenizer_encode(tok, e->b, strlen(e->b), &b[i]);
    }
    const SpecialIds sp = tokenizer_special_ids(tok);
    d->n_features = n;
    d->features = mhe_calloc((size_t)(n ? n : 1), sizeof *d->features);
    long cap = 0;
    for (long i = 0; i < n; i++) {
        const TextExample *e = &d->ex.text[i];
        const int pair = e->b != NULL;
        const int special = d->gpt ? pair : 2 + pair;
        const int budget = d->T - special;
        int la = (int)a[i].len, lb = pair ? (int)b[i].len : 0;
        if (pair)
            while (la + lb > budget) {
                if (la > lb) la--;
                else lb--;
            }
        else if (la > budget) la = budget;
        TaskFeature *f = &d->features[i];
        f->ids_off = d->n_ids;
        f->example = (int)i;
        f->label = e->label;
        f->target = e->target;
        if (!d->gpt) task_pool_push(d, sp.cls, &cap);
        for (int k = 0; k < la; k++) task_pool_push(d, a[i].ids[k], &cap);
        if (!d->gpt) task_pool_push(d, sp.sep, &cap);
        f->seg_b = (int)(d->n_ids - f->ids_off);
        if (pair) {
            if (d->gpt) task_pool_push(d, sp.eos, &cap);
            else f->seg_b = (int)(d->n_ids - f->ids_off);
            for (int k = 0; k < lb; k++) task_pool_push(d, b[i].ids[k], &cap);
            if (!d->gpt) task_pool_push(d, sp.sep, &cap);
        }
        // A GPT row needs one real token for `last`: an empty text reads as <|endoftext|>.
        if (d->n_ids == f->ids_off) task_pool_push(d, sp.eos, &cap);
        f->len = (int)(d->n_ids - f->ids_off);
        if (!pair || d->gpt) f->seg_b = f->len;
        if (d->task.type == TASK_CLASSIFICATION)
            d->label_counts[e->label]++;
        d->target_sum += e->target;
        idbuf_free(&a[i]);
        idbuf_free(&b[i]);
    }
    free(a);
    free(b);
}
