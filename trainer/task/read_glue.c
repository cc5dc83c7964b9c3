// The GLUE distribution's TSV files, read with the columns of Hugging Face's GLUE processors
// (transformers.data.processors.glue): tab-separated, no quoting, header row except CoLA's
// train/dev.  Unlike the processors, a row with the wrong number of columns or an unknown label
// is an error, and a test-set file (no label column) is refused rather than read unlabelled.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/num.h"
#include "trainer/task/task_internal.h"

typedef struct {
    const char *format;
    int header;                 // first row is a header (skipped, checked for the label column)
    int cols;                   // CoLA: exact column count (the others: the header's)
    int min_cols;               // the header must have at least these
    int a, b, label;            // column indices; b -1 = single text; label -1 = the last column
    const char *label_header;   // the header's name of the label column
    const char *layout;         // for messages
} GlueLayout;

static const GlueLayout LAYOUTS[] = {
    {"cola", 0, 4, 4, 3, -1, 1, NULL, "source, label, original mark, sentence (no header)"},
    {"sst2", 1, 0, 2, 0, -1, 1, "label", "sentence, label"},
    {"mrpc", 1, 0, 5, 3, 4, 0, "Quality", "Quality, #1 ID, #2 ID, #1 String, #2 String"},
    {"qqp", 1, 0, 6, 3, 4, 5, "is_duplicate", "id, qid1, qid2, question1, question2, is_duplicate"},
    {"stsb", 1, 0, 10, 7, 8, -1, "score", "index, genre, filename, year, old_index, source1, "
                                          "source2, sentence1, sentence2, score"},
    {"mnli", 1, 0, 11, 8, 9, -1, "gold_label", "index, promptID, pairID, genre, 4 parses, "
                                               "sentence1, sentence2, labels..., gold_label"},
    {"mnli_mm", 1, 0, 11, 8, 9, -1, "gold_label", "as mnli"},
    {"qnli", 1, 0, 4, 1, 2, -1, "label", "index, question, sentence, label"},
    {"rte", 1, 0, 4, 1, 2, -1, "label", "index, sentence1, sentence2, label"},
    {"wnli", 1, 0, 4, 1, 2, -1, "label", "index, sentence1, sentence2, label"},
};

int task_label_index(const char *const *labels, int n_labels, const char *s) {
    for (int i = 0; i < n_labels; i++)
        if (labels[i] && !strcmp(labels[i], s)) return i;
    return -1;
}

static void label_list(char *out, size_t cap, const TaskFormatSpec *fmt) {
    out[0] = '\0';
    for (int i = 0; i < fmt->num_labels; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s'%s'", i ? ", " : "", fmt->labels[i]);
}

// A regression target: a finite decimal number and nothing else (README "Numbers", through
// the one number parser: no hex, spaces, inf or nan).
int task_parse_target(const char *s, float *out) {
    double v;
    if (mhe_parse_real(s, -3e38, 3e38, &v) != MHE_NUM_OK) return 0;
    *out = (float)v;
    return 1;
}

void task_read_glue(TaskExamples *out, const TaskFormatSpec *fmt, const char *path) {
    const GlueLayout *L = NULL;
    for (size_t i = 0; i < sizeof LAYOUTS / sizeof *LAYOUTS; i++)
        if (!strcmp(LAYOUTS[i].format, fmt->name)) L = &LAYOUTS[i];
    if (!L) mhe_fail("internal: no GLUE layout for format %s", fmt->name);
    // The format table says how many texts a row has (export relies on it); the layout agrees.
    if ((L->b >= 0 ? 2 : 1) != fmt->texts)
        mhe_fail("internal: format %s has %d texts in task_formats.c but %d columns here", fmt->name, fmt->texts,
                 L->b >= 0 ? 2 : 1);
    TextLines tl;
    text_lines_read(&tl, path);
    memset(out, 0, sizeof *out);
    out->path = path;
    out->text = mhe_calloc((size_t)(tl.n ? tl.n : 1), sizeof *out->text);
    enum { CAP = 64 };
    char *f[CAP];
    int cols = L->cols;
    long first = 0;
    if (L->header) {
        if (tl.n == 0) mhe_fail_at(path, 1, 0, "expected the header row of a %s file (%s), found an empty file", fmt->name, L->layout);
        const int n = split_tabs(tl.line[0], f, CAP);
        const int lc = L->label < 0 ? n - 1 : L->label;
        if (n < L->min_cols || lc >= CAP || strcmp(f[lc], L->label_header) != 0)
            mhe_fail_at(path, 1, 0,
                        "expected the header of a labelled %s file (%s; column %d named '%s'), found %d "
                        "column(s)%s%s%s: GLUE test files carry no labels and can neither train nor be "
                        "evaluated", fmt->name, L->layout, lc + 1, L->label_header, n,
                        n > lc && lc < CAP ? " with '" : "", n > lc && lc < CAP ? f[lc] : "",
                        n > lc && lc < CAP ? "' there" : "");
        cols = n;
        first = 1;
    }
    char labels[256];
    label_list(labels, sizeof labels, fmt);
    for (long i = first; i < tl.n; i++) {
        const int line = (int)i + 1;
        const int n = split_tabs(tl.line[i], f, CAP);
        if (n != cols) {
            if (!L->header && i == 0 && n == 2 && !strcmp(f[0], "index"))
                mhe_fail_at(path, line, 0, "expected a labelled CoLA row (%s), found the header "
                            "'index, sentence' of a GLUE test file: test files carry no labels and "
                            "can neither train nor be evaluated", L->layout);
            mhe_fail_at(path, line, 0, "expected %d tab-separated columns (%s), found %d", cols,
                        L->layout, n);
        }
        TextExample *e = &out->text[out->n++];
        e->line = line;
        e->a = mhe_strdup(f[L->a]);
        e->b = L->b >= 0 ? mhe_strdup(f[L->b]) : NULL;
        const char *lab = f[L->label < 0 ? n - 1 : L->label];
        if (fmt->type == TASK_REGRESSION) {
            if (!task_parse_target(lab, &e->target))
                mhe_fail_at(path, line, 0, "expected a number in the last column (the %s score), found '%s'",
                            fmt->name, lab);
        } else if ((e->label = task_label_index(fmt->labels, fmt->num_labels, lab)) < 0) {
            mhe_fail_at(path, line, 0, "expected a label (%s) in column %d, found '%s'", labels,
                        (L->label < 0 ? n - 1 : L->label) + 1, lab);
        }
    }
    text_lines_free(&tl);
}
