// Word counting for tokenizer training: the corpus readers stream documents, batches of
// them go through a bounded queue to counting threads with a counter each, and the
// counters are summed at the end.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/bpe_train.h"
#include "data/corpus.h"
#include "data/unicode_text.h"

enum { BATCH_BYTES = 1 << 20, QUEUE_DEPTH = 4 };

void word_counter_add(WordCounter *c, const char *s, size_t n, int64_t count) {
    int id = train_vocab_add(&c->words, s, n);
    if (c->words.n > c->cap_count) {
        int old = c->cap_count;
        c->cap_count = c->words.cap;
        c->count = mhe_realloc(c->count, (size_t)c->cap_count * sizeof *c->count);
        memset(c->count + old, 0, (size_t)(c->cap_count - old) * sizeof *c->count);
    }
    c->count[id] += count;
}

typedef struct {
    const Tokenizer *norm;
    TokenizerKind kind;
    WordCounter *counter;
    char *buf;  // UTF-8 of the current WordPiece word
    size_t cap;
} Splitter;

static void add_wordpiece_word(void *ctx, const uint32_t *w, size_t m) {
    Splitter *sp = ctx;
    if (sp->cap < 4 * m) {
        sp->cap = 4 * m + 64;
        sp->buf = mhe_realloc(sp->buf, sp->cap);
    }
    size_t nb = 0;
    for (size_t i = 0; i < m; i++) nb += (size_t)utf8_put(sp->buf + nb, w[i]);
    word_counter_add(sp->counter, sp->buf, nb, 1);
}

static void add_bpe_word(void *ctx, const char *s, size_t n) {
    word_counter_add(((Splitter *)ctx)->counter, s, n, 1);
}

// Every line (paragraph) is one training text.
static void count_lines(Splitter *sp, const char *text, size_t len) {
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - text) : len;
        if (sp->kind == TOK_WORDPIECE)
            wordpiece_split(sp->norm, text + i, e - i, add_wordpiece_word, sp);
        else
            bpe_split(text + i, e - i, add_bpe_word, sp);
        i = e + 1;
    }
}

typedef struct {
    char *text;
    size_t len;
} Batch;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    Batch q[QUEUE_DEPTH];
    int head, n;
    bool done;
    Batch filling;  // documents gathered by the reader, '\n'-joined
    size_t fill_cap;
} Queue;

static void queue_push(Queue *q, Batch b) {
    pthread_mutex_lock(&q->mu);
    while (q->n == QUEUE_DEPTH) pthread_cond_wait(&q->not_full, &q->mu);
    q->q[(q->head + q->n) % QUEUE_DEPTH] = b;
    q->n++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

static bool queue_pop(Queue *q, Batch *b) {
    pthread_mutex_lock(&q->mu);
    while (q->n == 0 && !q->done) pthread_cond_wait(&q->not_empty, &q->mu);
    bool got = q->n > 0;
    if (got) {
        *b = q->q[q->head];
        q->head = (q->head + 1) % QUEUE_DEPTH;
        q->n--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    return got;
}

static void flush_filling(Queue *q) {
    if (!q->filling.len) return;
    queue_push(q, q->filling);
    q->filling = (Batch){NULL, 0};
    q->fill_cap = 0;
}

typedef struct {
    Queue *queue;
    Splitter sp;
} Worker;

static void *worker_main(void *arg) {
    Worker *w = arg;
    Batch b;
    while (queue_pop(w->queue, &b)) {
        count_lines(&w->sp, b.text, b.len);
        free(b.text);
    }
    return NULL;
}

typedef struct {
    Splitter *direct;  // counting in the reader thread, or
    Queue *queue;      // handing batches to workers
} ReadCtx;

static void on_document(void *ctx, const char *text, size_t len) {
    ReadCtx *r = ctx;
    if (r->direct) {
        count_lines(r->direct, text, len);
        return;
    }
    Queue *q = r->queue;
    if (q->filling.len + len + 1 > q->fill_cap) {
        q->fill_cap = q->filling.len + len + 1 > BATCH_BYTES ? q->filling.len + len + 1 : BATCH_BYTES;
        q->filling.text = mhe_realloc(q->filling.text, q->fill_cap);
    }
    memcpy(q->filling.text + q->filling.len, text, len);
    q->filling.len += len;
    q->filling.text[q->filling.len++] = '\n';
    if (q->filling.len >= BATCH_BYTES) flush_filling(q);
}

static void read_all(int n_paths, char **paths, ReadCtx *r) {
    CorpusStats stats = {0};
    for (int i = 0; i < n_paths; i++) {
        int nf;
        char **files = corpus_list_files(paths[i], &nf);
        for (int f = 0; f < nf; f++) corpus_read_file(files[f], CORPUS_AUTO, on_document, r, &stats);
        corpus_free_files(files, nf);
    }
}

void train_count_words(const Tokenizer *norm, TokenizerKind kind, int threads, int n_paths,
                       char **paths, WordCounter *wc) {
    if (threads <= 1) {
        Splitter sp = {norm, kind, wc, NULL, 0};
        ReadCtx r = {&sp, NULL};
        read_all(n_paths, paths, &r);
        free(sp.buf);
        return;
    }
    Queue q = {.done = false};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.not_empty, NULL);
    pthread_cond_init(&q.not_full, NULL);
    Worker *w = mhe_calloc((size_t)threads, sizeof *w);
    WordCounter *counters = mhe_calloc((size_t)threads, sizeof *counters);
    pthread_t *th = mhe_malloc((size_t)threads * sizeof *th);
    for (int i = 0; i < threads; i++) {
        w[i] = (Worker){&q, {norm, kind, &counters[i], NULL, 0}};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) mhe_fatal("cannot start a counting thread");
    }
    ReadCtx r = {NULL, &q};
    read_all(n_paths, paths, &r);
    flush_filling(&q);
    pthread_mutex_lock(&q.mu);
    q.done = true;
    pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        WordCounter *c = &counters[i];
        for (int k = 0; k < c->words.n; k++) {
            word_counter_add(wc, c->words.tok[k], c->words.len[k], c->count[k]);
            free(c->words.tok[k]);
        }
        train_vocab_free(&c->words);
        free(c->count);
        free(w[i].sp.buf);
    }
    free(q.filling.text);
    free(w);
    free(counters);
    free(th);
    pthread_mutex_destroy(&q.mu);
    pthread_cond_destroy(&q.not_empty);
    pthread_cond_destroy(&q.not_full);
}
