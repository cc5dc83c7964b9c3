// SQuAD v1.1 / v2.0 JSON: data[].paragraphs[].{context, qas[].{id, question, answers[].{text,
// answer_start}, is_impossible}}.  Contexts are split into whitespace words as BERT's run_squad
// does, and each answer is checked to be where answer_start (in code points) says it is.
// cJSON keeps no positions, so a bad question is reported at the line of its id in the file.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

typedef struct {
    const char *path, *text;
    size_t len;
} Src;

// The line of the first occurrence of "value" (quoted) in the file, 0 when absent.
static int line_of(const Src *s, const char *value) {
    char needle[512];
    snprintf(needle, sizeof needle, "\"%s\"", value);
    const char *hit = strstr(s->text, needle);
    if (!hit) return 0;
    int line = 1;
    for (const char *p = s->text; p < hit; p++) line += *p == '\n';
    return line;
}

// run_squad's is_whitespace: space, tab, CR, LF and U+202F (narrow no-break space).
static int ws_len(const char *p) {
    if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') return 1;
    if ((unsigned char)p[0] == 0xE2 && (unsigned char)p[1] == 0x80 && (unsigned char)p[2] == 0xAF) return 3;
    return 0;
}

static int cp_len(const char *p) {
    const unsigned char c = (unsigned char)*p;
    int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    for (int i = 1; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80) return i;
    return n;
}

// Words of the context and, per code point, the word it belongs to (whitespace: the word
// before it, -1 at the start): run_squad's doc_tokens and char_to_word_offset.
static int *split_context(SquadContext *c, long *n_cp) {
    const char *t = c->text;
    const size_t len = strlen(t);
    int *cp_word = mhe_malloc((len + 1) * sizeof *cp_word);
    c->word_start = mhe_malloc((len + 1) * sizeof *c->word_start);
    c->word_end = mhe_malloc((len + 1) * sizeof *c->word_end);
    c->n_words = 0;
    long ncp = 0;
    int prev_ws = 1;
    for (size_t i = 0; i < len;) {
        const int w = ws_len(t + i);
        const int step = w ? w : cp_len(t + i);
        if (w) {
            prev_ws = 1;
        } else {
            if (prev_ws) c->word_start[c->n_words++] = (int)i;
            c->word_end[c->n_words - 1] = (int)(i + (size_t)step);
            prev_ws = 0;
        }
        cp_word[ncp++] = c->n_words - 1;
        i += (size_t)step;
    }
    *n_cp = ncp;
    return cp_word;
}

static const cJSON *need(const Src *s, const cJSON *o, const char *key, int (*is)(const cJSON *),
                         const char *what, const char *where, const char *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || !is(v))
        mhe_fail_at(s->path, id ? line_of(s, id) : 0, 0, "expected \"%s\": %s%s%s", key, what, where ? " in " : "", where ? where : "");
    return v;
}

static int is_string(const cJSON *v) { return cJSON_IsString(v); }
static int is_array(const cJSON *v) { return cJSON_IsArray(v); }
static int is_number(const cJSON *v) { return cJSON_IsNumber(v); }

static void read_question(TaskExamples *out, const Src *s, const TaskFormatSpec *fmt, const cJSON *qa,
                          int ctx, const int *cp_word, long n_cp, const char *where) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(qa, "id");
    if (!cJSON_IsString(id)) mhe_fail_at(s->path, 0, 0, "expected \"id\": a string in every question of %s", where);
    // The line is looked up only for a message: a scan of the file per question would make
    // reading SQuAD's 130,000 questions quadratic.
    const char *qid = id->valuestring;
#define LINE line_of(s, qid)
    char qwhere[600];
    snprintf(qwhere, sizeof qwhere, "question '%s'", id->valuestring);
    SquadExample *e = &out->squad[out->n++];
    memset(e, 0, sizeof *e);
    e->line = 0;
    e->context = ctx;
    e->id = mhe_strdup(id->valuestring);
    e->question = mhe_strdup(need(s, qa, "question", is_string, "a string", qwhere, qid)->valuestring);
    const cJSON *imp = cJSON_GetObjectItemCaseSensitive(qa, "is_impossible");
    if (imp && !cJSON_IsBool(imp))
        mhe_fail_at(s->path, LINE, 0, "expected \"is_impossible\": true or false in %s", qwhere);
    e->impossible = imp && cJSON_IsTrue(imp);
    if (e->impossible && !strcmp(fmt->name, "squad1"))
        mhe_fail_at(s->path, LINE, 0, "expected answerable questions in a squad1 file, found "
                    "is_impossible in %s (use task.format squad2)", qwhere);
    const cJSON *answers = need(s, qa, "answers", is_array, "a list of {text, answer_start}", qwhere, qid);
    e->n_answers = cJSON_GetArraySize(answers);
    if (!e->impossible && e->n_answers == 0)
        mhe_fail_at(s->path, LINE, 0, "expected at least one answer in %s (or is_impossible: true "
                    "in squad2)", qwhere);
    e->answers = mhe_calloc((size_t)(e->n_answers ? e->n_answers : 1), sizeof *e->answers);
    e->start_word = e->end_word = -1;
    const char *text = out->contexts[ctx].text;
    const size_t tlen = strlen(text);
    int k = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, answers) {
        const char *atext = need(s, a, "text", is_string, "a string", qwhere, qid)->valuestring;
        const cJSON *st = need(s, a, "answer_start", is_number, "a character offset", qwhere, qid);
        const long start = (long)st->valuedouble, n = utf8_count(atext, strlen(atext));
        if (st->valuedouble != (double)start || start < 0 || n == 0 || start + n > n_cp)
            mhe_fail_at(s->path, LINE, 0, "expected a non-empty answer text inside the context at "
                        "answer_start %g (the context has %ld characters) in %s", st->valuedouble, n_cp, qwhere);
        const size_t b0 = utf8_offset(text, tlen, start), b1 = utf8_offset(text, tlen, start + n);
        if (b1 - b0 != strlen(atext) || memcmp(text + b0, atext, b1 - b0) != 0)
            mhe_fail_at(s->path, LINE, 0, "expected the answer text '%s' at answer_start %ld of the "
                        "context, found '%.*s' in %s", atext, start, (int)(b1 - b0), text + b0, qwhere);
        e->answers[k].text = mhe_strdup(atext);
        e->answers[k].start = (int)start;
        if (k == 0 && !e->impossible) {
            e->start_word = cp_word[start];
            e->end_word = cp_word[start + n - 1];
            if (e->start_word < 0) e->start_word = 0;  // an answer opening with whitespace
        }
        k++;
    }
#undef LINE
}

void task_read_squad(TaskExamples *out, const TaskFormatSpec *fmt, const char *path) {
    Src s = {path, NULL, 0};
    char *text = mhe_read_file(path, &s.len);
    task_check_utf8(path, text, s.len);
    int cline = 1;
    for (char *ln = text, *nl; ln; ln = nl ? nl + 1 : NULL, cline++) {  // raw control bytes, line by line
        nl = strchr(ln, '\n');
        if (nl) *nl = 0;
        task_check_json_line(path, cline, ln);
        if (nl) *nl = '\n';
    }
    s.text = text;
    memset(out, 0, sizeof *out);
    out->path = path;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) {
        const char *err = cJSON_GetErrorPtr();
        int line = 1, col = 1;
        for (const char *p = text; err && p < err && *p; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        mhe_fail_at(path, line, col, "expected SQuAD JSON (invalid JSON here)");
    }
    if (end && end[strspn(end, " \t\r\n")]) {  // a second document after the first: not one SQuAD file
        const char *at = end + strspn(end, " \t\r\n");
        int line = 1, col = 1;
        for (const char *p = text; p < at; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        mhe_fail_at(path, line, col, "expected SQuAD JSON to end after its object, found more");
    }
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (!cJSON_IsArray(data))
        mhe_fail_at(path, 1, 0, "expected a JSON object with \"data\": a list of articles (SQuAD layout)");
    long n_q = 0, n_p = 0;
    const cJSON *art, *par, *qa;
    cJSON_ArrayForEach(art, data) {
        const cJSON *pars = cJSON_GetObjectItemCaseSensitive(art, "paragraphs");
        if (!cJSON_IsArray(pars)) mhe_fail_at(path, 0, 0, "expected \"paragraphs\": a list in every article of \"data\"");
        cJSON_ArrayForEach(par, pars) {
            n_p++;
            const cJSON *qas = cJSON_GetObjectItemCaseSensitive(par, "qas");
            if (!cJSON_IsArray(qas)) mhe_fail_at(path, 0, 0, "expected \"qas\": a list in every paragraph");
            n_q += cJSON_GetArraySize(qas);
        }
    }
    out->squad = mhe_calloc((size_t)(n_q ? n_q : 1), sizeof *out->squad);
    out->contexts = mhe_calloc((size_t)(n_p ? n_p : 1), sizeof *out->contexts);
    int ai = 0;
    cJSON_ArrayForEach(art, data) {
        int pi = 0;
        cJSON_ArrayForEach(par, cJSON_GetObjectItemCaseSensitive(art, "paragraphs")) {
            char where[96];
            snprintf(where, sizeof where, "data[%d].paragraphs[%d]", ai, pi++);
            const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(par, "context");
            if (!cJSON_IsString(ctx)) mhe_fail_at(path, 0, 0, "expected \"context\": a string in %s", where);
            SquadContext *c = &out->contexts[out->n_contexts];
            c->text = mhe_strdup(ctx->valuestring);
            long n_cp = 0;
            int *cp_word = split_context(c, &n_cp);
            cJSON_ArrayForEach(qa, cJSON_GetObjectItemCaseSensitive(par, "qas"))
                read_question(out, &s, fmt, qa, out->n_contexts, cp_word, n_cp, where);
            free(cp_word);
            out->n_contexts++;
        }
        ai++;
    }
    cJSON_Delete(root);
    free(text);
}
