// mhetrain tokenizer train: counts the pre-tokenized words of the corpus, then learns
// BPE merges over them (bpe_train.c) for a WordPiece (HF WordPieceTrainer style: "##"
// continuations) or a byte-level BPE vocabulary.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/bpe_train.h"
#include "data/unicode_text.h"

static const char *WORDPIECE_SPECIALS[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
#define EOS_TOKEN "<|endoftext|>"

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

// WordPiece alphabet: every character as itself and, when it occurs inside a word, as "##c";
// both sorted by code point so ids do not depend on hash order.
static void wordpiece_symbols(const WordCounter *wc, TrainVocab *v, TrainWords *tw) {
    uint32_t *first = NULL, *cont = NULL;
    size_t nfirst = 0, ncont = 0, cfirst = 0, ccont = 0;
    for (int w = 0; w < wc->words.n; w++) {
        size_t i = 0, n = wc->words.len[w];
        bool initial = true;
        while (i < n) {
            uint32_t c = utf8_next(wc->words.tok[w], n, &i);
            uint32_t **arr = initial ? &first : &cont;
            size_t *na = initial ? &nfirst : &ncont, *ca = initial ? &cfirst : &ccont;
            if (*na == *ca) *arr = mhe_realloc(*arr, (*ca = *ca * 2 + 1024) * sizeof **arr);
            (*arr)[(*na)++] = c;
            initial = false;
        }
        if (nfirst > 1u << 20) {  // keep the lists short: dedupe as we go
            qsort(first, nfirst, sizeof *first, cmp_u32);
            size_t k = 0;
            for (size_t j = 0; j < nfirst; j++) if (!k || first[k - 1] != first[j]) first[k++] = first[j];
            nfirst = k;
        }
        if (ncont > 1u << 20) {
            qsort(cont, ncont, sizeof *cont, cmp_u32);
            size_t k = 0;
            for (size_t j = 0; j < ncont; j++) if (!k || cont[k - 1] != cont[j]) cont[k++] = cont[j];
            ncont = k;
        }
    }
    qsort(first, nfirst, sizeof *first, cmp_u32);
    qsort(cont, ncont, sizeof *cont, cmp_u32);
    char buf[8] = "##";
    for (size_t j = 0; j < nfirst + ncont; j++) {
        bool is_cont = j >= nfirst;
        uint32_t c = is_cont ? cont[j - nfirst] : first[j];
        if (j && j != nfirst && c == (is_cont ? cont[j - nfirst - 1] : first[j - 1])) continue;
        train_vocab_add(v, is_cont ? buf : buf + 2, (size_t)utf8_put(buf + 2, c) + (is_cont ? 2 : 0));
    }
    free(first);
    free(cont);
    for (int w = 0; w < wc->words.n; w++) {
        size_t i = 0, n = wc->words.len[w];
        int32_t *sym = mhe_malloc((n + 1) * sizeof *sym);
        int len = 0;
        while (i < n) {
            size_t at = i;
            utf8_next(wc->words.tok[w], n, &i);
            memcpy(buf + 2, wc->words.tok[w] + at, i - at);
            sym[len] = len ? train_vocab_get(v, buf, i - at + 2) : train_vocab_get(v, buf + 2, i - at);
            len++;
        }
        tw->sym[w] = sym;
        tw->len[w] = len;
        tw->count[w] = wc->count[w];
    }
}

static void bpe_symbols(const WordCounter *wc, TrainVocab *v, TrainWords *tw) {
    int byte_id[256];
    for (int b = 0; b < 256; b++) {
        char buf[4];
        byte_id[b] = train_vocab_add(v, buf, (size_t)utf8_put(buf, bytelevel_char((uint8_t)b)));
    }
    for (int w = 0; w < wc->words.n; w++) {
        size_t n = wc->words.len[w];
        int32_t *sym = mhe_malloc((n + 1) * sizeof *sym);
        for (size_t i = 0; i < n; i++) sym[i] = byte_id[(uint8_t)wc->words.tok[w][i]];
        tw->sym[w] = sym;
        tw->len[w] = (int32_t)n;
        tw->count[w] = wc->count[w];
    }
}

Tokenizer *tokenizer_train(const TokenizerTrainOptions *opt, int n_paths, char **paths) {
    if (opt->vocab_size < 1) mhe_fail("tokenizer train: vocabulary size must be positive");
    Tokenizer *norm = tokenizer_new(TOK_WORDPIECE, 0, NULL);
    norm->lowercase = norm->strip_accents = opt->lowercase;
    WordCounter wc = {0};
    train_count_words(norm, opt->kind, opt->threads, n_paths, paths, &wc);
    tokenizer_free(norm);
    if (wc.words.n == 0) mhe_fail("tokenizer train: the inputs hold no words");
    TrainVocab v = {0};
    if (opt->kind == TOK_WORDPIECE)
        for (int s = 0; s < 5; s++) train_vocab_add(&v, WORDPIECE_SPECIALS[s], strlen(WORDPIECE_SPECIALS[s]));
    else
        train_vocab_add(&v, EOS_TOKEN, strlen(EOS_TOKEN));
    TrainWords tw = {0};
    tw.n = wc.words.n;
    tw.sym = mhe_malloc((size_t)tw.n * sizeof *tw.sym);
    tw.len = mhe_malloc((size_t)tw.n * sizeof *tw.len);
    tw.count = mhe_malloc((size_t)tw.n * sizeof *tw.count);
    if (opt->kind == TOK_WORDPIECE)
        wordpiece_symbols(&wc, &v, &tw);
    else
        bpe_symbols(&wc, &v, &tw);
    for (int w = 0; w < wc.words.n; w++) free(wc.words.tok[w]);
    train_vocab_free(&wc.words);
    free(wc.count);
    PairMap merges;
    pairmap_init(&merges, opt->vocab_size);
    int n_merges = 0;
    bpe_train_merges(&tw, &v, opt->vocab_size, opt->min_frequency,
                     opt->kind == TOK_WORDPIECE ? "##" : NULL, &merges, &n_merges);
    for (int w = 0; w < tw.n; w++) free(tw.sym[w]);
    free(tw.sym);
    free(tw.len);
    free(tw.count);
    Tokenizer *t = tokenizer_new(opt->kind, v.n, v.tok);
    v.tok = NULL;
    train_vocab_free(&v);
    if (opt->kind == TOK_WORDPIECE) {
        pairmap_free(&merges);
        t->lowercase = t->strip_accents = opt->lowercase;
        tokenizer_finish(t);
        for (int s = 0; s < 5; s++) tokenizer_add_added(t, WORDPIECE_SPECIALS[s], s);
    } else {
        t->merges = merges;
        t->n_merges = n_merges;
        tokenizer_finish(t);
        tokenizer_add_added(t, EOS_TOKEN, 0);
    }
    return t;
}
