// Shared by the trainer/task/*.c files (and the tests' driver): the examples the readers make,
// the features featurisation makes from them, and the TaskData that holds both.
#ifndef MHE_TRAINER_TASK_INTERNAL_H
#define MHE_TRAINER_TASK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/config/task_formats.h"
#include "trainer/task/task.h"

// ---- examples (readers) ----
// One example of a classification or regression task: text b NULL for single-text tasks.
typedef struct {
    char *a, *b;
    int label;      // class index (classification)
    float target;   // regression target
    int line;       // where it was read (1-based), for messages
} TextExample;

typedef struct {
    char *text;
    int start;      // answer_start in characters (code points) of the context
} SquadAnswer;

// One SQuAD question with its paragraph.  Words are the context split at whitespace exactly as
// BERT's run_squad does (space, tab, CR, LF, U+202F); `word_start`/`word_end` are their byte
// ranges in `context`.
typedef struct {
    char *id, *question;
    int context;            // index into TaskExamples.contexts (questions share paragraphs)
    int impossible;         // v2.0 is_impossible
    int n_answers;
    SquadAnswer *answers;   // gold answers (the first one is the training target)
    int start_word, end_word;  // the first answer's words (-1 when impossible)
    int line;               // 0: looked up from the id only when a message needs it
} SquadExample;

typedef struct {
    char *text;
    int n_words;
    int *word_start, *word_end;  // byte ranges of the whitespace words
} SquadContext;

typedef struct {
    const char *path;       // the file read
    long n;                 // examples
    TextExample *text;      // classification / regression
    SquadExample *squad;    // span
    int n_contexts;
    SquadContext *contexts;
} TaskExamples;

// Readers: every row becomes an example or the run ends with "file:line: expected ...", exit 2.
void task_read_glue(TaskExamples *out, const TaskFormatSpec *fmt, const char *path);
void task_read_superglue(TaskExamples *out, const TaskFormatSpec *fmt, const char *path);
void task_read_generic(TaskExamples *out, const TaskConfig *t, const char *path);
void task_read_squad(TaskExamples *out, const TaskFormatSpec *fmt, const char *path);
// Dispatches on the config's format; `path` is the split's file.
void task_read_examples(TaskExamples *out, const TaskConfig *t, const char *path);
void task_examples_free(TaskExamples *ex);

// The label index of `s` among the format's labels, -1 when it is none of them.
int task_label_index(const char *const *labels, int n_labels, const char *s);
// A regression target: a finite decimal number and nothing else around it.  0 when not.
int task_parse_target(const char *s, float *out);
// Exits 2 at the first byte of buf that is not UTF-8, naming path:line:col.
void task_check_utf8(const char *path, const char *buf, size_t len);
// Exits 2 at a raw control byte (below 0x20 but tab and CR) in a JSON line: JSON requires them
// escaped, and cJSON would take them into the text.
void task_check_json_line(const char *path, int line, const char *text);
void task_read_generic_jsonl(TaskExamples *out, const TaskConfig *t, const char *path);

// ---- text helpers (task_text.c) ----
// The lines of a text file (UTF-8 BOM dropped, "\n" or "\r\n" ends a line, no empty last line
// after a final newline).  Lines are NUL-terminated in place in `buf`.
typedef struct {
    char *buf;
    long n;
    char **line;
} TextLines;
void text_lines_read(TextLines *l, const char *path);
void text_lines_free(TextLines *l);
// Splits a line at tabs in place (no quoting, as the GLUE processors read with quotechar=None).
// Returns the number of fields (at most `cap`; more fields are counted but not stored).
int split_tabs(char *line, char **fields, int cap);
// Byte offset of code point `cp` in UTF-8 `s` of `len` bytes (len when past the end), and the
// number of code points.
size_t utf8_offset(const char *s, size_t len, long cp);
long utf8_count(const char *s, size_t len);

// ---- features ----
// One row the model sees.  Tokens [ids_off, ids_off + len) in TaskData.ids; type id 1 from
// position `seg_b` on (bert pairs; seg_b = len when all are 0).
typedef struct {
    long ids_off;
    int len, seg_b;
    int example;
    int label;
    float target;
    int start, end;         // span: answer token positions in the row, 0/0 = none
    // span: the window's first context token (index into the example's document tokens) and
    // where the context starts in the row; `ctx_len` context tokens follow.
    int doc_start, ctx_off, ctx_len;
} TaskFeature;

// The tokens of one SQuAD paragraph, word by word (BERT's all_doc_tokens/tok_to_orig_index),
// with the code points each token covers inside its word when they can be aligned (-1 otherwise:
// the answer text then grows to whole words).
typedef struct {
    int n;
    int32_t *ids;
    int *word;          // tok_to_orig_index
    int *b_from, *b_to;    // bytes of its word the token spells, [from, to); -1 when unaligned
    uint8_t *cont;         // a WordPiece "##" continuation
    int *word_first_tok;   // orig_to_tok_index, per word
} DocTokens;

struct TaskData {
    TaskConfig task;            // copy; strings owned by the Config
    const TaskFormatSpec *fmt;
    int gpt;                    // arch gpt: a <|endoftext|> b, no type ids
    int T;                      // task.max_seq
    int num_labels;
    int32_t pad_id;
    TaskExamples ex;
    long n_features;
    TaskFeature *features;
    int32_t *ids;               // token pool
    long n_ids;
    DocTokens *docs;            // span: per context
    // span: per feature, is each context token of the window its max-context window?
    uint8_t *max_context;       // [ids pool layout: ids_off + position]
    long label_counts[TASK_MAX_LABELS];
    double target_sum;
};

// Featurisation (task_features.c / task_squad_features.c).
void task_featurize_text(TaskData *d, const Tokenizer *tok);
void task_featurize_squad(TaskData *d, const Tokenizer *tok);

// Span prediction (task_squad_predict.c): the answer text of example `e` from the outputs
// ([features, T, 2]) of its features; "" = no answer.  Caller frees.  With detail (may be
// NULL): the best non-null span's text (caller frees; "" when the question has no context
// token) and null score - its score (HUGE_VAL without a span), the official v2.0 script's
// na_prob for its best-threshold sweep.
typedef struct {
    char *nonnull;
    double null_diff;
} SquadPrediction;
char *task_squad_predict(const TaskData *d, long e, const float *outputs, const long *first_feature,
                         const long *n_features_of, SquadPrediction *detail);

#endif
