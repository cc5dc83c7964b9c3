// Answer text from span logits, as BERT's run_squad / transformers' compute_predictions_logits
// decide it, searched exhaustively instead of over the 20 best starts and ends: in every window
// of the question, a span start <= end < start + max_answer_len with both ends in the context
// part and the start in its max-context window scores start_logit + end_logit; the best span
// wins.  squad2: the null score is the smallest start_logit[0] + end_logit[0] over the windows,
// and the question is answered "" when null - best span > task.null_threshold (BERT's
// null_score_diff_threshold, 0 by default).  The best non-null span and null - best are kept
// too: the official v2.0 script's best_exact / best_f1 sweep that threshold over them.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

// The text of context tokens [a, b]: from the first byte token a spells to the last byte b
// spells, inside their words (get_final_text's projection of the tokens onto the original
// text); a token not aligned with its word extends to the word's edge.  A span that starts with
// a "##" continuation is given its whole words, as transformers' compute_predictions_logits
// does (its detokenised text keeps the "##" and so never matches the original).
static char *span_text(const TaskData *d, const SquadExample *e, int a, int b) {
    const DocTokens *dt = &d->docs[e->context];
    const SquadContext *c = &d->ex.contexts[e->context];
    const int wa = dt->word[a], wb = dt->word[b];
    const int whole = dt->cont[a];
    const int s = c->word_start[wa] + (dt->b_from[a] >= 0 && !whole ? dt->b_from[a] : 0);
    int t = dt->b_to[b] >= 0 && !whole ? c->word_start[wb] + dt->b_to[b] : c->word_end[wb];
    if (t > c->word_end[wb]) t = c->word_end[wb];
    if (t < s) t = s;
    char *out = mhe_malloc((size_t)(t - s) + 1);
    memcpy(out, c->text + s, (size_t)(t - s));
    out[t - s] = '\0';
    return out;
}

char *task_squad_predict(const TaskData *d, long ex, const float *outputs, const long *first_feature,
                         const long *n_features_of, SquadPrediction *detail) {
    const SquadExample *e = &d->ex.squad[ex];
    const int T = d->T, max_len = d->task.max_answer_len;
    const int v2 = !strcmp(d->fmt->name, "squad2");
    double best = 0, null_score = 0;
    int have = 0, have_null = 0, best_a = 0, best_b = 0;
    for (long f = first_feature[ex]; f < first_feature[ex] + n_features_of[ex]; f++) {
        const TaskFeature *F = &d->features[f];
        const float *o = outputs + (size_t)f * T * 2;  // [T, 2]: start, end logits
        const double null = (double)o[0] + (double)o[1];
        if (!have_null || null < null_score) null_score = null, have_null = 1;
        for (int i = 0; i < F->ctx_len; i++) {
            if (!d->max_context[F->ids_off + F->ctx_off + i]) continue;
            const double si = o[(size_t)(F->ctx_off + i) * 2];
            for (int j = i; j < F->ctx_len && j < i + max_len; j++) {
                const double score = si + (double)o[(size_t)(F->ctx_off + j) * 2 + 1];
                if (!have || score > best) {
                    best = score;
                    best_a = F->doc_start + i;
                    best_b = F->doc_start + j;
                    have = 1;
                }
            }
        }
    }
    // No span at all (a question without context tokens) is a certain "no answer".
    const double diff = have ? null_score - best : HUGE_VAL;
    if (detail) {
        detail->nonnull = have ? span_text(d, e, best_a, best_b) : mhe_strdup("");
        detail->null_diff = diff;
    }
    // Compared in float, the precision of the logits and of the config value, so a threshold
    // copied from best_f1_thresh answers the question it was taken from.
    if (!have || (v2 && (float)diff > d->task.null_threshold)) return mhe_strdup("");
    return span_text(d, e, best_a, best_b);
}
