// The prepare pipeline: reader (caller's thread) -> tokenizing workers -> ordered writer.
#include "data/prepare.h"
#include "data/input_account.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/rng.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/strbuf.h"
#include "data/tokenizer.h"
#include "data/valid_split.h"

// Batches trade queue overhead against memory: ~1 MB of text or 256 documents each.
#define BATCH_MAX_BYTES (1 << 20)
#define BATCH_MAX_DOCS 256
#define SPLIT_STREAM 0x73706c6974ULL  // "split": keeps split draws apart from other streams

typedef struct Batch {
    int64_t seq;           // position in input order
    int64_t first_doc;     // global index of its first document
    StrBuf text;           // documents back to back
    size_t *doc_end;       // end offset of each document in text
    int *doc_source;       // input each document came from
    int n_docs, cap_docs;
    IdBuf ids;             // tokens of all documents back to back
    size_t *ids_end;       // end of each document's ids
    bool done;
    struct Batch *next;    // work queue link
} Batch;

typedef struct {
    const PrepareOptions *opt;
    const Tokenizer *tok;
    int vocab_size;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv, slot_cv;
    Batch *work_head, *work_tail;
    Batch **ring;          // in-flight batches by seq % max_in_flight
    int max_in_flight, in_flight;
    bool finished;         // reader produced its last batch
    int64_t produced;      // batches produced
    Batch *cur;
    int64_t next_doc;
    int source;            // input being read
    FILE *text_out;
    const char *text_out_path;  // for the write-failure message
    // Writer state.
    ShardWriter *writer[2];
    ManifestShard *shards[2];
    int n_shards[2], cap_shards[2];
    int64_t shard_bytes;
    PrepareResult *res;
    // Per-source rule: every document goes to a staging file first (raw int32 ids, read back
    // sequentially, so memory stays flat), the split is chosen once all token counts are
    // known, then the documents are copied into the train and valid shards in input order.
    FILE *staging;
    char staging_path[4200];
    int *doc_src;
    int64_t *doc_tok, n_staged, cap_staged, staged_tokens;
    double t0, last_report;  // progress lines for long runs
} Pipeline;

static const char *const SPLIT_NAMES[2] = {"train", "valid"};

bool prepare_is_valid_doc(uint64_t seed, int64_t doc_index, double valid_fraction) {
    return rng_uniform(rng_at(seed, SPLIT_STREAM, (uint64_t)doc_index, 0)) < valid_fraction;
}

static Batch *batch_new(Pipeline *p) {
    Batch *b = mhe_calloc(1, sizeof *b);
    b->seq = p->produced;
    b->first_doc = p->next_doc;
    return b;
}

static void batch_free(Batch *b) {
    strbuf_free(&b->text);
    idbuf_free(&b->ids);
    free(b->doc_end);
    free(b->doc_source);
    free(b->ids_end);
    free(b);
}

static void submit(Pipeline *p, Batch *b) {
    pthread_mutex_lock(&p->mu);
    while (p->in_flight == p->max_in_flight) pthread_cond_wait(&p->slot_cv, &p->mu);
    p->in_flight++;
    p->ring[b->seq % p->max_in_flight] = b;
    if (p->work_tail) p->work_tail->next = b;
    else p->work_head = b;
    p->work_tail = b;
    p->produced++;
    pthread_cond_signal(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

static void on_doc(void *ctx, const char *text, size_t len) {
    Pipeline *p = ctx;
    if (p->text_out && (fwrite(text, 1, len, p->text_out) != len || fputs("\n\n", p->text_out) == EOF))
        mhe_fatal("%s: write failed: %s", p->text_out_path, strerror(errno));
    if (!p->tok) {
        p->next_doc++;
        return;
    }
    if (!p->cur) p->cur = batch_new(p);
    p->next_doc++;
    Batch *b = p->cur;
    if (b->n_docs == b->cap_docs) {
        b->cap_docs = b->cap_docs ? 2 * b->cap_docs : 32;
        b->doc_end = mhe_realloc(b->doc_end, (size_t)b->cap_docs * sizeof *b->doc_end);
        b->doc_source = mhe_realloc(b->doc_source, (size_t)b->cap_docs * sizeof *b->doc_source);
    }
    b->doc_source[b->n_docs] = p->source;
    strbuf_append(&b->text, text, len);
    b->doc_end[b->n_docs++] = b->text.len;
    if (b->text.len >= BATCH_MAX_BYTES || b->n_docs >= BATCH_MAX_DOCS) {
        p->cur = NULL;
        submit(p, b);
    }
}

static void *worker_main(void *arg) {
    Pipeline *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->work_head && !p->finished) pthread_cond_wait(&p->work_cv, &p->mu);
        Batch *b = p->work_head;
        if (!b) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->work_head = b->next;
        if (!p->work_head) p->work_tail = NULL;
        pthread_mutex_unlock(&p->mu);

        b->ids_end = mhe_malloc((size_t)(b->n_docs ? b->n_docs : 1) * sizeof *b->ids_end);
        size_t start = 0;
        for (int i = 0; i < b->n_docs; i++) {
            tokenizer_encode(p->tok, b->text.s + start, b->doc_end[i] - start, &b->ids);
            b->ids_end[i] = b->ids.len;
            start = b->doc_end[i];
        }
        strbuf_free(&b->text);  // the text is no longer needed: free it before the writer runs

        pthread_mutex_lock(&p->mu);
        b->done = true;
        pthread_cond_broadcast(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void close_shard(Pipeline *p, int split) {
    if (!p->writer[split]) return;
    shard_writer_close(p->writer[split]);
    p->writer[split] = NULL;
}

static void append_doc(Pipeline *p, int split, const int32_t *ids, size_t n) {
    if (!p->writer[split]) {
        int k = p->n_shards[split]++;
        if (k == p->cap_shards[split]) {
            p->cap_shards[split] = p->cap_shards[split] ? 2 * p->cap_shards[split] : 8;
            p->shards[split] = mhe_realloc(p->shards[split],
                                           (size_t)p->cap_shards[split] * sizeof(ManifestShard));
        }
        ManifestShard *s = &p->shards[split][k];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s_%05d", SPLIT_NAMES[split], k);
        char prefix[4096];
        snprintf(prefix, sizeof prefix, "%s/%s", p->opt->out_dir, s->name);
        p->writer[split] = shard_writer_open(prefix, p->vocab_size);
    }
    ManifestShard *s = &p->shards[split][p->n_shards[split] - 1];
    shard_writer_add(p->writer[split], ids, n);
    s->sequences++;
    s->tokens += (int64_t)n;
    p->res->documents[split]++;
    p->res->tokens[split] += (int64_t)n;
    if (shard_writer_bin_bytes(p->writer[split]) >= p->shard_bytes) close_shard(p, split);
}

static void write_doc(Pipeline *p, int64_t doc, int source, const int32_t *ids, size_t n) {
    if (n == 0) {
        p->res->skipped_empty++;
        return;
    }
    if (p->staging) {
        if (fwrite(ids, sizeof *ids, n, p->staging) != n)
            mhe_fatal("%s: write failed: %s", p->staging_path, strerror(errno));
        if (p->n_staged == p->cap_staged) {
            p->cap_staged = p->cap_staged ? 2 * p->cap_staged : 1024;
            p->doc_src = mhe_realloc(p->doc_src, (size_t)p->cap_staged * sizeof *p->doc_src);
            p->doc_tok = mhe_realloc(p->doc_tok, (size_t)p->cap_staged * sizeof *p->doc_tok);
        }
        p->doc_src[p->n_staged] = source;
        p->doc_tok[p->n_staged++] = (int64_t)n;
        p->staged_tokens += (int64_t)n;
        return;
    }
    int split = prepare_is_valid_doc(p->opt->seed, doc, p->opt->valid_fraction) ? 1 : 0;
    SourceSplit *src = &p->res->sources[source];
    src->documents++;
    src->tokens += (int64_t)n;
    src->valid_documents += split;
    src->valid_tokens += split ? (int64_t)n : 0;
    append_doc(p, split, ids, n);
}

// The per-source rule, once every document's token count is known.
static void split_staged(Pipeline *p) {
    if (fclose(p->staging) != 0) mhe_fatal("%s: write failed: %s", p->staging_path, strerror(errno));
    p->staging = NULL;
    bool *valid = mhe_calloc((size_t)(p->n_staged ? p->n_staged : 1), sizeof *valid);
    valid_split_choose(p->opt->seed, p->res->n_sources, p->n_staged, p->doc_src, p->doc_tok,
                       p->opt->valid_docs_per_source, p->opt->valid_min_tokens, valid,
                       p->res->sources);
    FILE *f = fopen(p->staging_path, "rb");
    if (!f) mhe_fatal("%s: cannot read: %s", p->staging_path, strerror(errno));
    int32_t *ids = NULL;
    int64_t cap = 0;
    for (int64_t d = 0; d < p->n_staged; d++) {
        int64_t n = p->doc_tok[d];
        if (n > cap) ids = mhe_realloc(ids, (size_t)(cap = n) * sizeof *ids);
        if (fread(ids, sizeof *ids, (size_t)n, f) != (size_t)n)
            mhe_fatal("%s: read failed (truncated?)", p->staging_path);
        append_doc(p, valid[d] ? 1 : 0, ids, (size_t)n);
    }
    fclose(f);
    unlink(p->staging_path);
    free(ids);
    free(valid);
}

// A progress line every PROGRESS_SECONDS: a full Wikipedia takes hours.
#define PROGRESS_SECONDS 30.0

static void *writer_main(void *arg) {
    Pipeline *p = arg;
    for (int64_t seq = 0;; seq++) {
        pthread_mutex_lock(&p->mu);
        Batch *b;
        for (;;) {
            b = p->ring[seq % p->max_in_flight];
            if (b && b->seq == seq && b->done) break;
            if (p->finished && seq >= p->produced) {
                pthread_mutex_unlock(&p->mu);
                return NULL;
            }
            pthread_cond_wait(&p->done_cv, &p->mu);
        }
        pthread_mutex_unlock(&p->mu);
        size_t start = 0;
        for (int i = 0; i < b->n_docs; i++) {
            write_doc(p, b->first_doc + i, b->doc_source[i], b->ids.ids + start, b->ids_end[i] - start);
            start = b->ids_end[i];
        }
        double now = mhe_now_s();
        if (now - p->last_report >= PROGRESS_SECONDS) {
            p->last_report = now;
            int64_t docs = p->res->documents[0] + p->res->documents[1] + p->n_staged;
            int64_t tokens = p->res->tokens[0] + p->res->tokens[1] + p->staged_tokens;
            fprintf(stderr, "prepare: %lld documents, %lld tokens, %.0f s, %.0f tokens/s\n",
                    (long long)docs, (long long)tokens, now - p->t0, (double)tokens / (now - p->t0));
        }
        pthread_mutex_lock(&p->mu);
        p->ring[seq % p->max_in_flight] = NULL;
        p->in_flight--;
        pthread_cond_signal(&p->slot_cv);
        pthread_mutex_unlock(&p->mu);
        batch_free(b);
    }
}

// Shards left by an earlier run would join this one's under the loader's "DIR/train" stem.
// Without a manifest.json they are the remains of an interrupted run: removed.  With one,
// they are a finished corpus: refused, never overwritten.
static void clear_stale_shards(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    struct stat st;
    bool finished = stat(path, &st) == 0;
    static const char *const KINDS[4] = {"train_*.idx", "train_*.bin", "valid_*.idx", "valid_*.bin"};
    int removed = 0;
    for (int k = 0; k < 4; k++) {
        glob_t g;
        snprintf(path, sizeof path, "%s/%s", dir, KINDS[k]);
        if (glob(path, 0, NULL, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) {
                if (finished) {
                    snprintf(path, sizeof path, "%s", g.gl_pathv[i]);
                    globfree(&g);
                    mhe_fail("%s: the output directory already holds a prepared corpus (%s and "
                             "manifest.json); remove it or choose another --out", dir, path);
                }
                if (unlink(g.gl_pathv[i]) != 0)
                    mhe_fatal("%s: cannot remove: %s", g.gl_pathv[i], strerror(errno));
                removed++;
            }
        }
        globfree(&g);
    }
    snprintf(path, sizeof path, "%s/staging.tmp", dir);
    if (unlink(path) == 0) removed++;
    if (removed)
        fprintf(stderr, "prepare: removed %d shard files of an unfinished earlier run in %s\n",
                removed, dir);
}

void prepare_run(const PrepareOptions *opt, PrepareResult *res) {
    memset(res, 0, sizeof *res);
    double t0 = mhe_now_s();
    Pipeline p = {.opt = opt, .res = res, .t0 = t0, .last_report = t0};
    if (opt->tokenizer) {
        p.tok = tokenizer_load(opt->tokenizer);
        p.vocab_size = tokenizer_vocab_size(p.tok);
        mhe_mkdirs(opt->out_dir);
        clear_stale_shards(opt->out_dir);
        if (!opt->valid_by_fraction) {
            snprintf(p.staging_path, sizeof p.staging_path, "%s/staging.tmp", opt->out_dir);
            p.staging = fopen(p.staging_path, "wb");
            if (!p.staging) mhe_fatal("%s: cannot create: %s", p.staging_path, strerror(errno));
        }
    }
    res->n_sources = opt->n_inputs;
    res->sources = mhe_calloc((size_t)(opt->n_inputs ? opt->n_inputs : 1), sizeof *res->sources);
    corpus_set_book_chapters(!opt->whole_books);
    if (opt->text_out) {
        p.text_out = fopen(opt->text_out, "wb");
        p.text_out_path = opt->text_out;
        if (!p.text_out) mhe_fatal("%s: cannot create: %s", opt->text_out, strerror(errno));
    }
    p.shard_bytes = (int64_t)(opt->shard_size_mb * 1048576.0);
    if (p.shard_bytes < 1) p.shard_bytes = 1;
    int threads = opt->threads > 0 ? opt->threads : 1;
    p.max_in_flight = 2 * threads + 2 < 64 ? 2 * threads + 2 : 64;  // at most ~64 MB of text
    p.ring = mhe_calloc((size_t)p.max_in_flight, sizeof *p.ring);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work_cv, NULL);
    pthread_cond_init(&p.done_cv, NULL);
    pthread_cond_init(&p.slot_cv, NULL);
    pthread_t *workers = mhe_calloc((size_t)threads, sizeof *workers), writer;
    if (p.tok) {
        for (int i = 0; i < threads; i++)
            if (pthread_create(&workers[i], NULL, worker_main, &p) != 0) mhe_fatal("cannot start a thread");
        if (pthread_create(&writer, NULL, writer_main, &p) != 0) mhe_fatal("cannot start a thread");
    }

    Manifest m = {0};
    CorpusStats stats = {0};
    for (int i = 0; i < opt->n_inputs; i++) {
        int nf;
        char **files = corpus_list_files(opt->inputs[i], &nf);
        long long before = stats.documents;
        p.source = i;
        for (int f = 0; f < nf; f++) {
            CorpusFormat fmt = corpus_detect(files[f], opt->format);
            manifest_add_input(&m, files[f], corpus_format_name(fmt));
            CorpusStats file_stats = {0};
            corpus_read_file_threads(files[f], fmt, threads, on_doc, &p, &file_stats);
            manifest_set_input_stats(&m, &file_stats);
            prepare_account_warning(files[f], fmt, &file_stats);
            corpus_stats_add(&stats, &file_stats);
        }
        if (stats.documents == before) mhe_fail("%s: no documents found in this input", opt->inputs[i]);
        corpus_free_files(files, nf);
    }
    if (p.cur) {
        Batch *b = p.cur;
        p.cur = NULL;
        submit(&p, b);
    }
    pthread_mutex_lock(&p.mu);
    p.finished = true;
    pthread_cond_broadcast(&p.work_cv);
    pthread_cond_broadcast(&p.done_cv);
    pthread_mutex_unlock(&p.mu);
    if (p.tok) {
        for (int i = 0; i < threads; i++) pthread_join(workers[i], NULL);
        pthread_join(writer, NULL);
        if (p.staging) split_staged(&p);
        close_shard(&p, 0);
        close_shard(&p, 1);
    }
    if (p.text_out && (ferror(p.text_out) | fclose(p.text_out)) != 0)
        mhe_fatal("%s: write failed: %s", opt->text_out, strerror(errno));
    res->skipped_empty += stats.empty;
    res->nul_replaced = stats.nul_replaced;
    res->reading = stats;

    if (p.tok) {
        if (res->documents[0] + res->documents[1] == 0) mhe_fail("the inputs hold no tokens to write");
        for (int s = 0; s < 2; s++) res->shards[s] = p.n_shards[s];
        m.tokenizer_path = opt->tokenizer;
        m.tokenizer_kind = tokenizer_kind(p.tok) == TOK_WORDPIECE ? "wordpiece" : "bpe";
        m.vocab_size = p.vocab_size;
        m.dtype = shard_dtype_for_vocab(p.vocab_size);
        m.stats = stats;
        manifest_write(&m, opt, res, p.shards, p.n_shards);
        tokenizer_free((Tokenizer *)p.tok);
    }
    manifest_free(&m);
    for (int s = 0; s < 2; s++) free(p.shards[s]);
    free(workers);
    free(p.ring);
    free(p.doc_src);
    free(p.doc_tok);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.work_cv);
    pthread_cond_destroy(&p.done_cv);
    pthread_cond_destroy(&p.slot_cv);

    res->seconds = mhe_now_s() - t0;
    int64_t tokens = res->tokens[0] + res->tokens[1];
    res->tokens_per_second = res->seconds > 0 ? (double)tokens / res->seconds : 0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    res->peak_rss_mb = (double)ru.ru_maxrss / 1024.0;
}
