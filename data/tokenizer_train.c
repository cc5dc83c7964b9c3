// mhetrain tokenizer train: counts the pre-tokenized words of the corpus, then learns
// BPE merges over them (bpe_train.c) for a WordPiece (HF WordPieceTrainer style: "##"
// continuations) or a byte-level BPE vocabulary.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/bpe_train.h"
#include "data/corpus.h"
#include "data/unicode_text.h"

static const char *WORDPIECE_SPECIALS[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
#define EOS_TOKEN "<|endoftext|>"

// Distinct words (bytes) with counts, in first-seen order so training is deterministic.
typedef struct {
    TrainVocab words;  // reuses the string map: id = word index
    int64_t *count;
    int cap_count;
} WordCounter;

static void counter_add(WordCounter *c, const char *s, size_t n) {
    int id = train_vocab_add(&c->words, s, n);
    if (c->words.n > c->cap_count) {
        int old = c->cap_count;
        c->cap_count = c->words.cap;
        c->count = mhe_realloc(c->count, (size_t)c->cap_count * sizeof *c->count);
        memset(c->count + old, 0, (size_t)(c->cap_count - old) * sizeof *c->count);
    }
    c->count[id]++;
}

typedef struct {
    WordCounter *counter;
    char *buf;
    size_t cap;
} SplitCtx;

static void add_wordpiece_word(void *ctx, const uint32_t *w, size_t m) {
    SplitCtx *sc = ctx;
    if (sc->cap < 4 * m) {
        sc->cap = 4 * m + 64;
        sc->buf = mhe_realloc(sc->buf, sc->cap);
    }
    size_t nb = 0;
    for (size_t i = 0; i < m; i++) nb += (size_t)utf8_put(sc->buf + nb, w[i]);
    counter_add(sc->counter, sc->buf, nb);
}

static void add_bpe_word(void *ctx, const char *s, size_t n) {
    SplitCtx *sc = ctx;
    counter_add(sc->counter, s, n);
}

typedef struct {
    const Tokenizer *norm;
    TokenizerKind kind;
    SplitCtx sc;
} DocCtx;

// Every line (paragraph) of a document is one training text.
static void count_document(void *ctx, const char *text, size_t len) {
    DocCtx *d = ctx;
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - text) : len;
        if (d->kind == TOK_WORDPIECE)
            wordpiece_split(d->norm, text + i, e - i, add_wordpiece_word, &d->sc);
        else
            bpe_split(text + i, e - i, add_bpe_word, &d->sc);
        i = e + 1;
    }
}

// Streams the documents of every input (any format the corpus readers know: .txt books,
// MediaWiki dumps, WikiExtractor output, JSON lines; folders recursively) into the counter.
// The readers reject invalid UTF-8, which bpe_split relies on.
static void count_inputs(const Tokenizer *norm, TokenizerKind kind, int n_paths, char **paths,
                         WordCounter *wc) {
    DocCtx d = {norm, kind, {wc, NULL, 0}};
    CorpusStats stats = {0};
    for (int i = 0; i < n_paths; i++) {
        int nf;
        char **files = corpus_list_files(paths[i], &nf);
        for (int f = 0; f < nf; f++) corpus_read_file(files[f], CORPUS_AUTO, count_document, &d, &stats);
        corpus_free_files(files, nf);
    }
    free(d.sc.buf);
}

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
    count_inputs(norm, opt->kind, n_paths, paths, &wc);
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
