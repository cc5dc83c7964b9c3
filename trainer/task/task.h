// Fine-tuning task data (issue 14): readers of the benchmark layouts, featurisation with the
// model's tokenizer into TaskBatch rows, and the benchmarks' metrics.  The interface is the
// contract of /work/notes/FT_CONTRACT.md; the formats are listed in trainer/config/task_formats.h.
#ifndef MHE_TRAINER_TASK_H
#define MHE_TRAINER_TASK_H

#include "data/tokenizer.h"
#include "trainer/config/config.h"
#include "trainer/model/task_batch.h"

typedef enum { TASK_SPLIT_TRAIN, TASK_SPLIT_DEV } TaskSplit;
typedef struct TaskData TaskData;
// Reads and featurises a split with the model's tokenizer.  A bad row exits 2 with
// "file:line: what was expected".  Pairs: [CLS] a [SEP] b [SEP] (bert; type ids 0/1) or
// a <|endoftext|> b (gpt); truncation longest-first; span: doc-stride windows, question first.
TaskData *task_data_load(const Config *cfg, const Tokenizer *tok, TaskSplit split);
void task_data_free(TaskData *d);
long task_data_features(const TaskData *d);   // rows the model sees (span: windows)
long task_data_examples(const TaskData *d);
int  task_data_num_labels(const TaskData *d);
// Fills a TaskBatch whose arrays live in `buf` (reused between calls) with features idx[0..B),
// padded to T = cfg max_seq.
typedef struct TaskBatchBuf TaskBatchBuf;
TaskBatchBuf *task_batch_buf_new(int max_batch, int T);
void task_batch_buf_free(TaskBatchBuf *b);
const TaskBatch *task_data_fill(const TaskData *d, const long *idx, int B, TaskBatchBuf *buf);
// Scores the model outputs of every feature of the split, in feature order (layout of
// model_download_task_outputs, concatenated).  Writes every metric the format defines.
typedef struct { int n; int primary; char name[8][24]; double value[8]; } TaskScores;
void task_score(const TaskData *d, const float *outputs, TaskScores *out);
// The score of the trivial predictor (majority class of train on this split / always no-answer),
// for the "beats the majority class" checks.
void task_score_trivial(const TaskData *dev, const TaskData *train, TaskScores *out);

#endif
