// The fine-tuning task formats (issue 14), at the config layer: each format's task type, its
// labels in index order, and its metrics (the primary one first).  The config validates
// `task.format`, `task.metric` and resolves `task.num_labels` from this table; the readers and
// metrics of trainer/task/ use the same table, so a format is declared exactly once, here.
#ifndef MHE_TRAINER_CONFIG_TASK_FORMATS_H
#define MHE_TRAINER_CONFIG_TASK_FORMATS_H

#include "trainer/config/config.h"

#define TASK_MAX_LABELS 8
#define TASK_MAX_METRICS 8

typedef enum {
    TASK_FAMILY_GLUE,       // GLUE TSV distribution files
    TASK_FAMILY_SUPERGLUE,  // SuperGLUE JSONL
    TASK_FAMILY_SQUAD,      // SQuAD JSON (v1.1 / v2.0)
    TASK_FAMILY_GENERIC,    // tsv / jsonl with named columns (task.text_a, text_b, label_column)
} TaskFamily;

typedef struct {
    const char *name;           // task.format spelling
    TaskFamily family;
    TaskType type;              // TASK_NONE for generic (the user's task.type decides)
    int num_labels;             // 0 for span and generic
    int texts;                  // texts per row: 1 (CoLA, SST-2) or 2; 0 for span and generic
    const char *labels[TASK_MAX_LABELS];  // label strings as the files spell them, index order
    const char *default_metric;
    const char *doc;
} TaskFormatSpec;

// NULL when unknown.
const TaskFormatSpec *task_format_find(const char *name);
int task_format_count(void);
const TaskFormatSpec *task_format_at(int i);
// The label strings of a resolved task section in class-index order (the format's, or task.labels
// for generic classification), e.g. for an export's id2label; pointers into the format table or
// into `buf`.  Returns the count (0 for regression and span).
int task_config_labels(const TaskConfig *t, const char *out[TASK_MAX_LABELS], char *buf, size_t cap);
// Whether a classification/regression task's rows are text pairs (a generic format: when
// task.text_b is set); 0 for span tasks.
int task_config_pair(const TaskConfig *t);
// "cola, sst2, ..." (for messages and docs).
const char *task_format_names(void);

// The metrics a task computes, in TaskScores order: classification with 2 labels: accuracy f1
// mcc acc_and_f1 f1_macro acc_and_f1_macro; with more: accuracy f1_macro mcc acc_and_f1_macro;
// regression: pearson spearman corr mse; span: squad_em squad_f1 (squad2 adds has_ans_em
// has_ans_f1 no_ans_acc).  Returns the count.
int task_metric_names(TaskType type, int num_labels, int squad_v2, const char *names[TASK_MAX_METRICS]);

#endif
