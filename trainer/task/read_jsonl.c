// JSON-lines readers: SuperGLUE's classification tasks (BoolQ, CB, RTE, WiC) and the generic
// `jsonl` format with named keys.  One JSON object per line; anything else is an error.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

static cJSON *parse_line(const char *path, int line, const char *text) {
    task_check_json_line(path, line, text);
    // Only whitespace may follow the object: cJSON_Parse would stop after it and silently drop the
    // rest of the line (a second example run into the first).
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(text, &end, 0);
    if (o && end) {
        end += strspn(end, " \t\r");
        if (*end) {
            cJSON_Delete(o);
            mhe_fail_at(path, line, (int)(end - text) + 1, "expected one JSON object per line, found more after it");
        }
    }
    if (!o || !cJSON_IsObject(o)) {
        const char *err = cJSON_GetErrorPtr();
        long at = o ? 0 : err && err >= text && err <= text + strlen(text) ? (long)(err - text) : -1;
        cJSON_Delete(o);
        if (at >= 0 && !o)
            mhe_fail_at(path, line, (int)at + 1, "expected one JSON object per line (invalid JSON here)");
        mhe_fail_at(path, line, 0, "expected one JSON object per line");
    }
    return o;
}

static char *string_field(const char *path, int line, const cJSON *o, const char *key, const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v))
        mhe_fail_at(path, line, 0, "expected a string field \"%s\" (%s)%s", key, what,
                    v ? ", found another JSON type" : "");
    return mhe_strdup(v->valuestring);
}

// A JSON label as the text it is matched against: a string as is, true/false, an integer in
// decimal.  0 when the value is none of these.
static int label_text(const cJSON *v, char *out, size_t cap) {
    if (cJSON_IsString(v)) snprintf(out, cap, "%s", v->valuestring);
    else if (cJSON_IsTrue(v)) snprintf(out, cap, "true");
    else if (cJSON_IsFalse(v)) snprintf(out, cap, "false");
    else if (cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble)
        snprintf(out, cap, "%lld", (long long)v->valuedouble);
    else return 0;
    return 1;
}

static void labels_doc(char *out, size_t cap, const char *const *labels, int n) {
    out[0] = '\0';
    for (int i = 0; i < n; i++) snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? ", " : "", labels[i]);
}

static void read_label(const char *path, int line, const cJSON *o, const char *key,
                       const char *const *labels, int n_labels, TaskType type, TextExample *e,
                       const char *missing_hint) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    char doc[256], text[256];
    labels_doc(doc, sizeof doc, labels, n_labels);
    if (!v) mhe_fail_at(path, line, 0, "expected a label field \"%s\"%s", key, missing_hint);
    if (type == TASK_REGRESSION) {
        if (cJSON_IsNumber(v)) {
            // JSON has no inf, but 1e400 parses to one and 1e39 overflows a float: refused as the
            // TSV readers refuse them, or the loss and finetune_result.json would hold inf/NaN.
            e->target = (float)v->valuedouble;
            if (!isfinite(e->target))
                mhe_fail_at(path, line, 0, "expected a finite number in \"%s\" (the regression target), found %g, "
                            "which is not finite in single precision", key, v->valuedouble);
        } else if (!cJSON_IsString(v) || !task_parse_target(v->valuestring, &e->target))
            mhe_fail_at(path, line, 0, "expected a number in \"%s\" (the regression target)", key);
        return;
    }
    const int scalar = label_text(v, text, sizeof text);
    if (!scalar || (e->label = task_label_index(labels, n_labels, text)) < 0)
        mhe_fail_at(path, line, 0, "expected \"%s\" to be one of %s, found %s%s%s", key, doc,
                    scalar ? "'" : "another JSON type", scalar ? text : "", scalar ? "'" : "");
}

static const char NO_TEST[] =
    " (SuperGLUE test files carry no labels and can neither train nor be evaluated)";

void task_read_superglue(TaskExamples *out, const TaskFormatSpec *fmt, const char *path) {
    TextLines tl;
    text_lines_read(&tl, path);
    memset(out, 0, sizeof *out);
    out->path = path;
    out->text = mhe_calloc((size_t)(tl.n ? tl.n : 1), sizeof *out->text);
    const int boolq = !strcmp(fmt->name, "boolq"), wic = !strcmp(fmt->name, "wic");
    for (long i = 0; i < tl.n; i++) {
        const int line = (int)i + 1;
        cJSON *o = parse_line(path, line, tl.line[i]);
        TextExample *e = &out->text[out->n++];
        e->line = line;
        if (boolq) {
            e->a = string_field(path, line, o, "question", "BoolQ");
            e->b = string_field(path, line, o, "passage", "BoolQ");
        } else if (wic) {
            // WiC pairs the two sentences; the word is put in front of the first one
            // ("word: sentence1") so the model knows which word the question is about.
            char *word = string_field(path, line, o, "word", "WiC");
            char *s1 = string_field(path, line, o, "sentence1", "WiC");
            size_t n = strlen(word) + strlen(s1) + 3;
            e->a = mhe_malloc(n);
            snprintf(e->a, n, "%s: %s", word, s1);
            free(word);
            free(s1);
            e->b = string_field(path, line, o, "sentence2", "WiC");
        } else {
            e->a = string_field(path, line, o, "premise", fmt->name);
            e->b = string_field(path, line, o, "hypothesis", fmt->name);
        }
        read_label(path, line, o, "label", fmt->labels, fmt->num_labels, fmt->type, e, NO_TEST);
        cJSON_Delete(o);
    }
    text_lines_free(&tl);
}

void task_read_generic_jsonl(TaskExamples *out, const TaskConfig *t, const char *path) {
    TextLines tl;
    text_lines_read(&tl, path);
    memset(out, 0, sizeof *out);
    out->path = path;
    out->text = mhe_calloc((size_t)(tl.n ? tl.n : 1), sizeof *out->text);
    char buf[1024];
    const char *labels[TASK_MAX_LABELS];
    const int n_labels = task_config_labels(t, labels, buf, sizeof buf);
    for (long i = 0; i < tl.n; i++) {
        const int line = (int)i + 1;
        cJSON *o = parse_line(path, line, tl.line[i]);
        TextExample *e = &out->text[out->n++];
        e->line = line;
        e->a = string_field(path, line, o, t->text_a, "task.text_a");
        e->b = t->text_b && t->text_b[0] ? string_field(path, line, o, t->text_b, "task.text_b") : NULL;
        read_label(path, line, o, t->label_column, labels, n_labels, t->type, e, " (task.label_column)");
        cJSON_Delete(o);
    }
    text_lines_free(&tl);
}
