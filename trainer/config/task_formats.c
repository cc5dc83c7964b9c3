// The table of fine-tuning task formats (task_formats.h).  Labels are spelled as the
// distribution files spell them and ordered as Hugging Face's processors order them
// (transformers.data.processors.glue get_labels; SuperGLUE as the `super_glue` datasets), so
// class indices mean the same thing here and in an exported model's config.
#include <stdio.h>
#include <string.h>

#include "trainer/config/task_formats.h"

#define BIN01 {"0", "1"}
#define NLI2 {"entailment", "not_entailment"}
#define BOOL2 {"false", "true"}

static const TaskFormatSpec FORMATS[] = {
    {"cola", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 1, BIN01, "mcc",
     "CoLA: no header; source, label, original mark, sentence"},
    {"sst2", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 1, BIN01, "accuracy",
     "SST-2: header `sentence label`"},
    {"mrpc", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 2, BIN01, "acc_and_f1",
     "MRPC: header; Quality, #1 ID, #2 ID, #1 String, #2 String"},
    {"qqp", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 2, BIN01, "acc_and_f1",
     "QQP: header; id qid1 qid2 question1 question2 is_duplicate"},
    {"stsb", TASK_FAMILY_GLUE, TASK_REGRESSION, 1, 2, {0}, "corr",
     "STS-B: header; sentence1 col 7, sentence2 col 8, score (0-5) last"},
    {"mnli", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 3, 2, {"contradiction", "entailment", "neutral"},
     "accuracy", "MNLI (dev_matched): header; sentence1 col 8, sentence2 col 9, gold label last"},
    {"mnli_mm", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 3, 2, {"contradiction", "entailment", "neutral"},
     "accuracy", "MNLI mismatched (dev_mismatched): as mnli"},
    {"qnli", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 2, NLI2, "accuracy",
     "QNLI: header; index question sentence label"},
    {"rte", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 2, NLI2, "accuracy",
     "RTE: header; index sentence1 sentence2 label"},
    {"wnli", TASK_FAMILY_GLUE, TASK_CLASSIFICATION, 2, 2, BIN01, "accuracy",
     "WNLI: header; index sentence1 sentence2 label"},
    {"boolq", TASK_FAMILY_SUPERGLUE, TASK_CLASSIFICATION, 2, 2, BOOL2, "accuracy",
     "BoolQ JSONL: question, passage, label (bool)"},
    {"cb", TASK_FAMILY_SUPERGLUE, TASK_CLASSIFICATION, 3, 2, {"entailment", "contradiction", "neutral"},
     "acc_and_f1_macro", "CB JSONL: premise, hypothesis, label"},
    {"superglue_rte", TASK_FAMILY_SUPERGLUE, TASK_CLASSIFICATION, 2, 2, NLI2, "accuracy",
     "SuperGLUE RTE JSONL: premise, hypothesis, label"},
    {"wic", TASK_FAMILY_SUPERGLUE, TASK_CLASSIFICATION, 2, 2, BOOL2, "accuracy",
     "WiC JSONL: word, sentence1, sentence2, label (bool); text a = \"word: sentence1\""},
    {"squad1", TASK_FAMILY_SQUAD, TASK_SPAN, 0, 0, {0}, "squad_f1", "SQuAD v1.1 JSON"},
    {"squad2", TASK_FAMILY_SQUAD, TASK_SPAN, 0, 0, {0}, "squad_f1",
     "SQuAD v2.0 JSON (is_impossible: no-answer questions)"},
    {"tsv", TASK_FAMILY_GENERIC, TASK_NONE, 0, 0, {0}, NULL,
     "TSV with a header row naming task.text_a, task.text_b, task.label_column"},
    {"jsonl", TASK_FAMILY_GENERIC, TASK_NONE, 0, 0, {0}, NULL,
     "JSON lines with keys task.text_a, task.text_b, task.label_column"},
};
#define N_FORMATS (int)(sizeof FORMATS / sizeof *FORMATS)

int task_config_pair(const TaskConfig *t) {
    const TaskFormatSpec *f = task_format_find(t->format);
    if (!f || f->type == TASK_SPAN) return 0;
    if (f->family == TASK_FAMILY_GENERIC) return t->text_b && t->text_b[0];
    return f->texts == 2;
}

const TaskFormatSpec *task_format_find(const char *name) {
    for (int i = 0; name && i < N_FORMATS; i++)
        if (!strcmp(FORMATS[i].name, name)) return &FORMATS[i];
    return NULL;
}

int task_format_count(void) { return N_FORMATS; }

const TaskFormatSpec *task_format_at(int i) { return i >= 0 && i < N_FORMATS ? &FORMATS[i] : NULL; }

const char *task_format_names(void) {
    static char buf[512];
    if (!buf[0])
        for (int i = 0; i < N_FORMATS; i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, FORMATS[i].name);
        }
    return buf;
}

int task_metric_names(TaskType type, int num_labels, int squad_v2, const char *names[TASK_MAX_METRICS]) {
    int n = 0;
    switch (type) {
    case TASK_CLASSIFICATION:
        names[n++] = "accuracy";
        if (num_labels == 2) names[n++] = "f1";
        if (num_labels != 2) names[n++] = "f1_macro";
        names[n++] = "mcc";
        if (num_labels == 2) names[n++] = "acc_and_f1";
        if (num_labels == 2) names[n++] = "f1_macro";
        names[n++] = "acc_and_f1_macro";
        break;
    case TASK_REGRESSION:
        names[n++] = "pearson";
        names[n++] = "spearman";
        names[n++] = "corr";
        names[n++] = "mse";
        break;
    case TASK_SPAN:
        names[n++] = "squad_em";
        names[n++] = "squad_f1";
        if (squad_v2) {
            names[n++] = "has_ans_em";
            names[n++] = "has_ans_f1";
            names[n++] = "no_ans_acc";
            names[n++] = "best_exact";
            names[n++] = "best_f1";
            names[n++] = "best_f1_thresh";
        }
        break;
    case TASK_NONE: break;
    }
    return n;
}

int task_config_labels(const TaskConfig *t, const char *out[TASK_MAX_LABELS], char *buf, size_t cap) {
    const TaskFormatSpec *fmt = task_format_find(t->format);
    if (!fmt || t->type != TASK_CLASSIFICATION) return 0;
    if (fmt->family != TASK_FAMILY_GENERIC) {
        for (int i = 0; i < fmt->num_labels; i++) out[i] = fmt->labels[i];
        return fmt->num_labels;
    }
    snprintf(buf, cap, "%s", t->labels ? t->labels : "");
    int n = 0;
    for (char *p = buf; *p && n < TASK_MAX_LABELS;) {
        out[n++] = p;
        char *comma = strchr(p, ',');
        if (!comma) break;
        *comma = '\0';
        p = comma + 1;
    }
    return n;
}
