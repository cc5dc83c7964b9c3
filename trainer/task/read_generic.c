// The generic formats: `tsv` (a header row names the columns) and `jsonl` (keys), with the
// columns task.text_a, task.text_b (optional) and task.label_column, and the labels task.labels.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

static int find_column(char **names, int n, const char *want) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return i;
    return -1;
}

static _Noreturn void missing_column(const char *path, const char *key, const char *want,
                                     char **names, int n) {
    char have[512] = "";
    for (int i = 0; i < n && i < 64; i++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s'%s'", i ? ", " : "", names[i]);
    mhe_fail_at(path, 1, 0, "expected a header row naming the column '%s' (%s), found %s", want, key, have);
}

static void read_generic_tsv(TaskExamples *out, const TaskConfig *t, const char *path) {
    TextLines tl;
    text_lines_read(&tl, path);
    memset(out, 0, sizeof *out);
    out->path = path;
    out->text = mhe_calloc((size_t)(tl.n ? tl.n : 1), sizeof *out->text);
    if (tl.n == 0) mhe_fail_at(path, 1, 0, "expected a header row naming the columns, found an empty file");
    enum { CAP = 256 };
    char *h[CAP], *f[CAP];
    const int cols = split_tabs(tl.line[0], h, CAP);
    const int nh = cols < CAP ? cols : CAP;
    const int ca = find_column(h, nh, t->text_a);
    if (ca < 0) missing_column(path, "task.text_a", t->text_a, h, nh);
    const int has_b = t->text_b && t->text_b[0];
    const int cb = has_b ? find_column(h, nh, t->text_b) : -1;
    if (has_b && cb < 0) missing_column(path, "task.text_b", t->text_b, h, nh);
    const int cl = find_column(h, nh, t->label_column);
    if (cl < 0) missing_column(path, "task.label_column", t->label_column, h, nh);
    char buf[1024];
    const char *labels[TASK_MAX_LABELS];
    const int n_labels = task_config_labels(t, labels, buf, sizeof buf);
    for (long i = 1; i < tl.n; i++) {
        const int line = (int)i + 1;
        const int n = split_tabs(tl.line[i], f, CAP);
        if (n != cols)
            mhe_fail_at(path, line, 0, "expected %d tab-separated columns (as the header), found %d", cols, n);
        TextExample *e = &out->text[out->n++];
        e->line = line;
        e->a = mhe_strdup(f[ca]);
        e->b = has_b ? mhe_strdup(f[cb]) : NULL;
        if (t->type == TASK_REGRESSION) {
            if (!task_parse_target(f[cl], &e->target))
                mhe_fail_at(path, line, 0, "expected a number in column '%s', found '%s'", t->label_column, f[cl]);
        } else if ((e->label = task_label_index(labels, n_labels, f[cl])) < 0) {
            mhe_fail_at(path, line, 0, "expected a label of task.labels (%s) in column '%s', found '%s'",
                        t->labels, t->label_column, f[cl]);
        }
    }
    text_lines_free(&tl);
}

void task_read_generic(TaskExamples *out, const TaskConfig *t, const char *path) {
    if (!strcmp(t->format, "tsv")) read_generic_tsv(out, t, path);
    else task_read_generic_jsonl(out, t, path);
}
