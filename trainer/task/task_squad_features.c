// SQuAD windows as BERT's run_squad makes them: each whitespace word of the context tokenized
// alone (tok_to_orig_index / orig_to_tok_index), the question cut to task.max_query_len tokens,
// the context covered by windows of max_seq - |question| - 3 tokens whose starts are doc_stride
// apart (the last one ends at the context's end), rows `[CLS] question [SEP] context [SEP]`
// (GPT: `question <|endoftext|> context`).  The answer's token span is narrowed to the tokens
// of the answer text (_improve_answer_span); a window that does not hold the whole answer, and
// every window of an unanswerable question, gets start = end = 0.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/task_internal.h"

void task_pool_push(TaskData *d, int32_t id, long *cap);

// Code points -> bytes within a word of `len` bytes.
static int cp_to_byte(const char *w, int len, int cp) { return (int)utf8_offset(w, (size_t)len, cp); }

// Tokenizes the context word by word and aligns each token with the bytes of its word it
// spells (WordPiece: the token without "##", in code points; BPE: one code point per byte, the
// added leading space dropped).  A word whose tokens do not spell it (an [UNK], accents
// stripped into fewer characters) is left unaligned.
static void doc_tokens(DocTokens *dt, const SquadContext *c, const Tokenizer *tok, int bpe) {
    memset(dt, 0, sizeof *dt);
    int cap = 0;
    IdBuf buf = {0};
    char *tmp = NULL;
    size_t tmp_cap = 0;
    dt->word_first_tok = mhe_malloc((size_t)(c->n_words + 1) * sizeof *dt->word_first_tok);
    for (int w = 0; w < c->n_words; w++) {
        const char *word = c->text + c->word_start[w];
        const int wlen = c->word_end[w] - c->word_start[w];
        idbuf_clear(&buf);
        if (bpe && w > 0) {  // GPT-2 sees the word after a space, as inside running text
            if (tmp_cap < (size_t)wlen + 2) tmp = mhe_realloc(tmp, tmp_cap = (size_t)wlen + 2);
            tmp[0] = ' ';
            memcpy(tmp + 1, word, (size_t)wlen);
            tokenizer_encode(tok, tmp, (size_t)wlen + 1, &buf);
        } else {
            tokenizer_encode(tok, word, (size_t)wlen, &buf);
        }
        dt->word_first_tok[w] = dt->n;
        if (dt->n + (int)buf.len > cap) {
            cap = 2 * (dt->n + (int)buf.len) + 16;
            dt->ids = mhe_realloc(dt->ids, (size_t)cap * sizeof *dt->ids);
            dt->word = mhe_realloc(dt->word, (size_t)cap * sizeof *dt->word);
            dt->b_from = mhe_realloc(dt->b_from, (size_t)cap * sizeof *dt->b_from);
            dt->b_to = mhe_realloc(dt->b_to, (size_t)cap * sizeof *dt->b_to);
            dt->cont = mhe_realloc(dt->cont, (size_t)cap * sizeof *dt->cont);
        }
        int pos = 0, ok = 1;  // units (code points or bytes) of the word spelled so far
        const int units = bpe ? wlen : (int)utf8_count(word, (size_t)wlen);
        for (size_t k = 0; k < buf.len; k++) {
            const int t = dt->n + (int)k;
            dt->ids[t] = buf.ids[k];
            dt->word[t] = w;
            const char *s = tokenizer_id_to_token(tok, buf.ids[k]);
            dt->cont[t] = !bpe && s && !strncmp(s, "##", 2);
            int n = 0;
            if (!s) ok = 0;
            else if (bpe) n = (int)utf8_count(s, strlen(s)) - (k == 0 && w > 0);
            else n = (int)utf8_count(s, strlen(s)) - (k > 0 && !strncmp(s, "##", 2) ? 2 : 0);
            dt->b_from[t] = pos;
            pos += n;
            dt->b_to[t] = pos;
        }
        if (pos != units) ok = 0;
        for (size_t k = 0; k < buf.len; k++) {
            const int t = dt->n + (int)k;
            if (!ok) dt->b_from[t] = dt->b_to[t] = -1;
            else if (!bpe) {
                dt->b_from[t] = cp_to_byte(word, wlen, dt->b_from[t]);
                dt->b_to[t] = cp_to_byte(word, wlen, dt->b_to[t]);
            }
        }
        dt->n += (int)buf.len;
    }
    dt->word_first_tok[c->n_words] = dt->n;
    idbuf_free(&buf);
    free(tmp);
}

// _improve_answer_span: the narrowest [start, end] inside the word span whose ids are exactly
// the answer text's tokens (so "1895" is the answer in the word "(1895)."), else the words.
static void improve_span(const DocTokens *dt, int *start, int *end, const IdBuf *ans) {
    for (int s = *start; s <= *end; s++)
        for (int e = *end; e >= s; e--)
            if ((size_t)(e - s + 1) == ans->len && !memcmp(dt->ids + s, ans->ids, ans->len * sizeof *ans->ids)) {
                *start = s;
                *end = e;
                return;
            }
}

void task_featurize_squad(TaskData *d, const Tokenizer *tok) {
    const int bpe = d->gpt;
    const SpecialIds sp = tokenizer_special_ids(tok);
    d->docs = mhe_calloc((size_t)(d->ex.n_contexts ? d->ex.n_contexts : 1), sizeof *d->docs);
#pragma omp parallel for schedule(dynamic, 16)
    for (int c = 0; c < d->ex.n_contexts; c++) doc_tokens(&d->docs[c], &d->ex.contexts[c], tok, bpe);
    long cap = 0, fcap = 0;
    IdBuf q = {0}, ans = {0};
    const int special = d->gpt ? 1 : 3;
    for (long i = 0; i < d->ex.n; i++) {
        const SquadExample *e = &d->ex.squad[i];
        const DocTokens *dt = &d->docs[e->context];
        const SquadContext *ctx = &d->ex.contexts[e->context];
        idbuf_clear(&q);
        tokenizer_encode(tok, e->question, strlen(e->question), &q);
        const int ql = (int)q.len < d->task.max_query_len ? (int)q.len : d->task.max_query_len;
        int tok_start = -1, tok_end = -1;
        if (!e->impossible && e->start_word >= 0) {
            tok_start = dt->word_first_tok[e->start_word];
            tok_end = dt->word_first_tok[e->end_word + 1] - 1;
            const SquadAnswer *a = &e->answers[0];
            idbuf_clear(&ans);
            const size_t b0 = utf8_offset(ctx->text, strlen(ctx->text), a->start);
            if (bpe && b0 > 0) {
                size_t n = strlen(a->text);
                char *t = mhe_malloc(n + 2);
                t[0] = ' ';
                memcpy(t + 1, a->text, n + 1);
                tokenizer_encode(tok, t, n + 1, &ans);
                free(t);
            } else {
                tokenizer_encode(tok, a->text, strlen(a->text), &ans);
            }
            improve_span(dt, &tok_start, &tok_end, &ans);
        }
        const int window = d->T - ql - special;
        for (int start = 0;;) {
            int len = dt->n - start;
            if (len > window) len = window;
            if (d->n_features == fcap) {
                fcap = fcap ? 2 * fcap : 1024;
                d->features = mhe_realloc(d->features, (size_t)fcap * sizeof *d->features);
            }
            TaskFeature *f = &d->features[d->n_features++];
            memset(f, 0, sizeof *f);
            f->example = (int)i;
            f->ids_off = d->n_ids;
            f->doc_start = start;
            f->ctx_len = len;
            if (!d->gpt) task_pool_push(d, sp.cls, &cap);
            for (int k = 0; k < ql; k++) task_pool_push(d, q.ids[k], &cap);
            task_pool_push(d, d->gpt ? sp.eos : sp.sep, &cap);
            f->seg_b = f->ctx_off = (int)(d->n_ids - f->ids_off);
            for (int k = 0; k < len; k++) task_pool_push(d, dt->ids[start + k], &cap);
            if (!d->gpt) task_pool_push(d, sp.sep, &cap);
            f->len = (int)(d->n_ids - f->ids_off);
            if (d->gpt) f->seg_b = f->len;
            if (tok_start >= 0 && tok_start >= start && tok_end < start + len) {
                f->start = tok_start - start + f->ctx_off;
                f->end = tok_end - start + f->ctx_off;
            }
            if (start + len >= dt->n) break;
            start += len < d->task.doc_stride ? len : d->task.doc_stride;
        }
    }
    idbuf_free(&q);
    idbuf_free(&ans);
    // Which window gives each context token its most context (_check_is_max_context): the one
    // where min(tokens left, tokens right) + 0.01 * window length is largest, the first on ties.
    d->max_context = mhe_calloc((size_t)(d->n_ids ? d->n_ids : 1), 1);
    for (long f0 = 0; f0 < d->n_features;) {
        long f1 = f0;
        while (f1 < d->n_features && d->features[f1].example == d->features[f0].example) f1++;
        for (long f = f0; f < f1; f++) {
            const TaskFeature *F = &d->features[f];
            for (int k = 0; k < F->ctx_len; k++) {
                const int pos = F->doc_start + k;
                double best = -1;
                long best_f = -1;
                for (long g = f0; g < f1; g++) {
                    const TaskFeature *G = &d->features[g];
                    if (pos < G->doc_start || pos >= G->doc_start + G->ctx_len) continue;
                    const int left = pos - G->doc_start, right = G->doc_start + G->ctx_len - 1 - pos;
                    const double score = (left < right ? left : right) + 0.01 * G->ctx_len;
                    if (best_f < 0 || score > best) best = score, best_f = g;
                }
                d->max_context[F->ids_off + F->ctx_off + k] = best_f == f;
            }
        }
        f0 = f1;
    }
}
