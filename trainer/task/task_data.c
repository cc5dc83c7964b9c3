// TaskData: a split read (by the format's reader) and featurised, and batches filled from it.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

void task_read_examples(TaskExamples *out, const TaskConfig *t, const char *path) {
    const TaskFormatSpec *fmt = task_format_find(t->format);
    if (!fmt) mhe_fail("task.format '%s' is not a known format (%s)", t->format ? t->format : "", task_format_names());
    switch (fmt->family) {
    case TASK_FAMILY_GLUE: task_read_glue(out, fmt, path); break;
    case TASK_FAMILY_SUPERGLUE: task_read_superglue(out, fmt, path); break;
    case TASK_FAMILY_SQUAD: task_read_squad(out, fmt, path); break;
    case TASK_FAMILY_GENERIC: task_read_generic(out, t, path); break;
    }
    if (out->n == 0) mhe_fail_at(path, 0, 0, "expected at least one example, found none");
}

void task_examples_free(TaskExamples *ex) {
    for (long i = 0; ex->text && i < ex->n; i++) {
        free(ex->text[i].a);
        free(ex->text[i].b);
    }
    for (long i = 0; ex->squad && i < ex->n; i++) {
        SquadExample *e = &ex->squad[i];
        free(e->id);
        free(e->question);
        for (int k = 0; k < e->n_answers; k++) free(e->answers[k].text);
        free(e->answers);
    }
    for (int c = 0; c < ex->n_contexts; c++) {
        free(ex->contexts[c].text);
        free(ex->contexts[c].word_start);
        free(ex->contexts[c].word_end);
    }
    free(ex->text);
    free(ex->squad);
    free(ex->contexts);
    memset(ex, 0, sizeof *ex);
}

TaskData *task_data_load(const Config *cfg, const Tokenizer *tok, TaskSplit split) {
    const TaskConfig *t = &cfg->task;
    if (t->type == TASK_NONE) mhe_fail("task.type is none: there is no task to load (set task.type)");
    TaskData *d = mhe_calloc(1, sizeof *d);
    d->task = *t;
    d->fmt = task_format_find(t->format);
    if (!d->fmt) mhe_fail("task.format '%s' is not a known format (%s)", t->format ? t->format : "", task_format_names());
    d->gpt = cfg->model.arch == ARCH_GPT;
    d->T = t->max_seq > 0 ? t->max_seq : cfg->data.seq_len;
    d->num_labels = t->num_labels;
    const SpecialIds sp = tokenizer_special_ids(tok);
    if (d->gpt ? sp.eos < 0 : (sp.cls < 0 || sp.sep < 0))
        mhe_fail("the tokenizer has no %s token, which %s task rows need", d->gpt ? "<|endoftext|>" : "[CLS]/[SEP]",
                 d->gpt ? "GPT" : "BERT");
    d->pad_id = d->gpt ? sp.eos : (sp.pad >= 0 ? sp.pad : 0);
    const char *path = split == TASK_SPLIT_TRAIN ? t->train_file : t->dev_file;
    if (!path || !path[0]) mhe_fail("task.%s is empty", split == TASK_SPLIT_TRAIN ? "train_file" : "dev_file");
    task_read_examples(&d->ex, t, path);
    if (d->fmt->type == TASK_SPAN || t->type == TASK_SPAN) task_featurize_squad(d, tok);
    else task_featurize_text(d, tok);
    return d;
}

void task_data_free(TaskData *d) {
    if (!d) return;
    for (int c = 0; d->docs && c < d->ex.n_contexts; c++) {
        DocTokens *dt = &d->docs[c];
        free(dt->ids);
        free(dt->word);
        free(dt->b_from);
        free(dt->b_to);
        free(dt->cont);
        free(dt->word_first_tok);
    }
    free(d->docs);
    task_examples_free(&d->ex);
    free(d->features);
    free(d->ids);
    free(d->max_context);
    free(d);
}

long task_data_features(const TaskData *d) { return d->n_features; }
long task_data_examples(const TaskData *d) { return d->ex.n; }
int task_data_num_labels(const TaskData *d) { return d->num_labels; }

struct TaskBatchBuf {
    int max_batch, T;
    int32_t *ids, *type_ids, *mask, *label, *start, *end, *last;
    float *target;
    TaskBatch batch;
};

TaskBatchBuf *task_batch_buf_new(int max_batch, int T) {
    TaskBatchBuf *b = mhe_calloc(1, sizeof *b);
    b->max_batch = max_batch;
    b->T = T;
    const size_t bt = (size_t)max_batch * (size_t)T;
    b->ids = mhe_malloc(bt * sizeof *b->ids);
    b->type_ids = mhe_malloc(bt * sizeof *b->type_ids);
    b->mask = mhe_malloc(bt * sizeof *b->mask);
    b->label = mhe_malloc((size_t)max_batch * sizeof *b->label);
    b->start = mhe_malloc((size_t)max_batch * sizeof *b->start);
    b->end = mhe_malloc((size_t)max_batch * sizeof *b->end);
    b->last = mhe_malloc((size_t)max_batch * sizeof *b->last);
    b->target = mhe_malloc((size_t)max_batch * sizeof *b->target);
    return b;
}

void task_batch_buf_free(TaskBatchBuf *b) {
    if (!b) return;
    free(b->ids);
    free(b->type_ids);
    free(b->mask);
    free(b->label);
    free(b->start);
    free(b->end);
    free(b->last);
    free(b->target);
    free(b);
}

const TaskBatch *task_data_fill(const TaskData *d, const long *idx, int B, TaskBatchBuf *buf) {
    if (B > buf->max_batch || d->T != buf->T)
        mhe_fatal("internal: task batch of %d rows x %d tokens in a buffer of %d x %d", B, d->T,
                  buf->max_batch, buf->T);
    const int T = d->T;
    for (int r = 0; r < B; r++) {
        if (idx[r] < 0 || idx[r] >= d->n_features)
            mhe_fatal("internal: task feature %ld out of range [0, %ld)", idx[r], d->n_features);
        const TaskFeature *f = &d->features[idx[r]];
        int32_t *ids = buf->ids + (size_t)r * T, *ty = buf->type_ids + (size_t)r * T, *m = buf->mask + (size_t)r * T;
        for (int t = 0; t < T; t++) {
            const int real = t < f->len;
            ids[t] = real ? d->ids[f->ids_off + t] : d->pad_id;
            ty[t] = real && t >= f->seg_b;
            m[t] = real;
        }
        buf->label[r] = f->label;
        buf->target[r] = f->target;
        buf->start[r] = f->start;
        buf->end[r] = f->end;
        buf->last[r] = f->len - 1;
    }
    const TaskType type = d->task.type;
    TaskBatch *b = &buf->batch;
    b->B = B;
    b->T = T;
    b->ids = buf->ids;
    b->type_ids = d->gpt ? NULL : buf->type_ids;
    b->attn_mask = buf->mask;
    b->label = type == TASK_CLASSIFICATION ? buf->label : NULL;
    b->target = type == TASK_REGRESSION ? buf->target : NULL;
    b->start = type == TASK_SPAN ? buf->start : NULL;
    b->end = type == TASK_SPAN ? buf->end : NULL;
    b->last = buf->last;
    return b;
}
