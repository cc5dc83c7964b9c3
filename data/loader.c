// Loader: stream layout, packing, global order and masking (see loader.h for the contract).
#include "data/loader.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fnv1a.h"
#include "common/rng.h"
#include "data/shard.h"

#define MASK_STREAM 0x6d61736bULL   // "mask": keeps mask draws apart from other uses of the seed
#define ORDER_STREAM 0x6f72646572ULL

// Where each sequence sits in the stream: 8 bytes per sequence (a Wikipedia-sized corpus of
// 6M documents costs 48 MB), the tokens themselves stay in the mapped files.
typedef struct {
    int64_t base, end;      // the shard's part of the stream: [base, end)
    int64_t *start;         // [n_seq] stream offset of each sequence
} ShardSpan;

struct Loader {
    LoaderOptions opt;
    uint8_t *special;        // [vocab_size]: ids never masked nor drawn as random tokens
    int n_shards;
    ShardReader **shards;
    ShardSpan *spans;
    int64_t stream_len, content;  // content = stream tokens per sample
    int64_t n_samples;
    int32_t separator, pad;
    int order_bits;          // Feistel domain is 2^order_bits >= n_samples
    uint8_t *owned_continuation;
};

static void add_shard_paths(const char *prefix, char ***paths, int *n) {
    char buf[4096];
    struct stat st;
    glob_t g;
    memset(&g, 0, sizeof g);
    size_t pl = strlen(prefix);
    if (pl > 4 && strcmp(prefix + pl - 4, ".idx") == 0) {
        snprintf(buf, sizeof buf, "%s", prefix);  // a pattern or a path to an .idx
    } else if (strpbrk(prefix, "*?[")) {
        snprintf(buf, sizeof buf, "%s.idx", prefix);  // a pattern over prefixes
    } else {
        snprintf(buf, sizeof buf, "%s.idx", prefix);
        if (stat(buf, &st) != 0) snprintf(buf, sizeof buf, "%s_*.idx", prefix);
    }
    if (glob(buf, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        globfree(&g);
        mhe_fail("%s: no shards found (looked for %s.idx, %s_*.idx)", prefix, prefix, prefix);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {  // glob sorts its matches
        *paths = mhe_realloc(*paths, (size_t)(*n + 1) * sizeof **paths);
        char *p = mhe_strdup(g.gl_pathv[i]);
        p[strlen(p) - 4] = 0;  // drop ".idx": the reader wants the prefix
        (*paths)[(*n)++] = p;
    }
    globfree(&g);
}


Loader *loader_open(int n_prefixes, char *const *prefixes, const LoaderOptions *opt) {
    Loader *l = mhe_calloc(1, sizeof *l);
    l->opt = *opt;
    const SpecialIds *sp = &opt->special;
    int T = opt->seq_len;
    if (opt->objective == OBJ_MLM) {
        if (sp->cls < 0 || sp->sep < 0 || sp->mask < 0)
            mhe_fail("MLM needs [CLS], [SEP] and [MASK] in the tokenizer's vocabulary");
        if (T < 3) mhe_fail("MLM needs data.seq_len >= 3, got %d", T);
        l->separator = sp->sep;
        l->pad = sp->pad >= 0 ? sp->pad : 0;
        l->content = T - 2;
    } else {
        l->separator = sp->eos >= 0 ? sp->eos : sp->sep;
        if (l->separator < 0) mhe_fail("CLM needs an end-of-text token (or [SEP]) in the vocabulary");
        l->pad = l->separator;
        l->content = T;
    }
    l->special = mhe_calloc((size_t)opt->vocab_size, 1);
    const int ids[6] = {sp->cls, sp->sep, sp->mask, sp->pad, sp->unk, sp->eos};
    for (int i = 0; i < 6; i++)
        if (ids[i] >= 0 && ids[i] < opt->vocab_size) l->special[ids[i]] = 1;
    if (opt->vocab_size <= 6) mhe_fail("vocabulary of %d tokens is too small", opt->vocab_size);

    char **paths = NULL;
    for (int i = 0; i < n_prefixes; i++) add_shard_paths(prefixes[i], &paths, &l->n_shards);
    l->shards = mhe_calloc((size_t)l->n_shards, sizeof *l->shards);
    l->spans = mhe_calloc((size_t)l->n_shards, sizeof *l->spans);
    for (int s = 0; s < l->n_shards; s++) {
        ShardReader *r = l->shards[s] = shard_reader_open(paths[s]);
        shard_reader_check_ids(r, opt->vocab_size);
        ShardSpan *sp = &l->spans[s];
        sp->base = l->stream_len;
        sp->start = mhe_malloc((size_t)(r->n_seq ? r->n_seq : 1) * sizeof *sp->start);
        for (int64_t d = 0; d + 1 < r->n_doc; d++) {
            int64_t before = l->stream_len;
            for (int64_t q = r->doc_idx[d]; q < r->doc_idx[d + 1]; q++) {
                sp->start[q] = l->stream_len;
                l->stream_len += r->lengths[q];
            }
            if (l->stream_len > before) l->stream_len++;  // the separator after a document
        }
        sp->end = l->stream_len;
        free(paths[s]);
    }
    free(paths);
    if (l->stream_len == 0) mhe_fail("%s: the shards hold no tokens", prefixes[0]);
    l->n_samples = (l->stream_len + l->content - 1) / l->content;
    l->order_bits = 2;
    while (((int64_t)1 << l->order_bits) < l->n_samples) l->order_bits += 2;
    return l;
}

void loader_close(Loader *l) {
    if (!l) return;
    for (int s = 0; s < l->n_shards; s++) shard_reader_close(l->shards[s]);
    for (int s = 0; s < l->n_shards; s++) free(l->spans[s].start);
    free(l->shards);
    free(l->spans);
    free(l->special);
    free(l->owned_continuation);
    free(l);
}

int64_t loader_samples_per_epoch(const Loader *l) { return l->n_samples; }
int64_t loader_stream_tokens(const Loader *l) { return l->stream_len; }

int loader_micro_batches(const Loader *l, int world) {
    int G = l->opt.global_batch, B = l->opt.micro_batch;
    if (world < 1 || G % world != 0)
        mhe_fail("train.global_batch (%d) must be a multiple of the number of workers (%d)", G, world);
    if ((G / world) % B != 0)
        mhe_fail("train.global_batch / workers (%d) must be a multiple of train.micro_batch (%d)",
                 G / world, B);
    return G / world / B;
}

// Last index i in [0, n) with v[i] <= x (v sorted, v[0] <= x).
static int64_t last_at_or_before(const int64_t *v, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (v[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Copies stream[pos, pos+count) into out (the range lies within the stream).
static void stream_copy(const Loader *l, int64_t pos, int64_t count, int32_t *out) {
    int s = 0;
    while (count > 0) {
        while (pos >= l->spans[s].end) s++;  // shards are few: a scan is enough
        const ShardSpan *sp = &l->spans[s];
        const ShardReader *r = l->shards[s];
        // Ties (empty sequences share a start) resolve to the last one, the one with tokens.
        int64_t q = last_at_or_before(sp->start, r->n_seq, pos);
        int64_t off = pos - sp->start[q];
        if (off < r->lengths[q]) {
            int64_t n = r->lengths[q] - off < count ? r->lengths[q] - off : count;
            shard_reader_tokens(r, q, off, n, out);
            out += n, pos += n, count -= n;
        } else {
            *out++ = l->separator;  // the one position after a document's last sequence
            pos++, count--;
        }
    }
}

uint64_t loader_digest(const Loader *l) {
    uint64_t h = FNV1A_BASIS;
    int64_t head[3] = {l->stream_len, l->n_samples, l->n_shards};
    h = fnv1a(h, head, sizeof head);
    for (int s = 0; s < l->n_shards; s++)
        h = fnv1a(h, l->shards[s]->lengths, (size_t)l->shards[s]->n_seq * sizeof *l->shards[s]->lengths);
    enum { WINDOWS = 256, WIDTH = 64 };
    int32_t buf[WIDTH];
    for (int w = 0; w < WINDOWS; w++) {
        int64_t pos = l->stream_len * w / WINDOWS;
        int64_t n = l->stream_len - pos < WIDTH ? l->stream_len - pos : WIDTH;
        if (n <= 0) continue;
        stream_copy(l, pos, n, buf);
        h = fnv1a(h, buf, (size_t)n * sizeof *buf);
    }
    return h;
}

// A bijection of [0, 2^bits) keyed by (seed, epoch): a 4-round Feistel network.
static uint64_t feistel(uint64_t x, int bits, uint64_t seed, uint64_t epoch) {
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1, left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; round++) {
        uint64_t f = rng_at(seed, ORDER_STREAM ^ epoch, round, right) & mask;
        uint64_t next = left ^ f;
        left = right;
        right = next;
    }
    return (left << half) | right;
}

void loader_global_sample(const Loader *l, int64_t g, int64_t *epoch, int64_t *sample) {
    *epoch = g / l->n_samples;
    uint64_t x = (uint64_t)(g % l->n_samples);
    // Cycle-walking: apply the bijection until it lands inside [0, N); it stays a bijection.
    do x = feistel(x, l->order_bits, l->opt.shuffle_seed, (uint64_t)*epoch);
    while (x >= (uint64_t)l->n_samples);
    *sample = (int64_t)x;
}

static int32_t random_token(const Loader *l, uint64_t bits) {
    int32_t id = (int32_t)(bits % (uint64_t)l->opt.vocab_size);
    while (l->special[id]) id = (id + 1) % l->opt.vocab_size;
    return id;
}

// MLM selection and replacement, in place; labels hold the original ids at selected positions.
static void mask_sample(const Loader *l, int64_t epoch, int64_t sample, int32_t *ids,
                        const int32_t *attn, int32_t *labels) {
    const LoaderOptions *o = &l->opt;
    uint64_t seed = o->mask_seed ^ MASK_STREAM;
    int T = o->seq_len;
    bool selected = false, prev_word = false;  // prev_word: position t-1 held a word piece
    for (int t = 0; t < T; t++) {
        labels[t] = LOADER_IGNORE_LABEL;
        if (!attn[t] || l->special[ids[t]]) {
            selected = prev_word = false;
            continue;
        }
        // Whole-word: a continuation piece shares the decision of the word's first piece.
        bool cont = o->whole_word && o->continuation && prev_word && o->continuation[ids[t]];
        prev_word = true;
        if (!cont)
            selected = rng_uniform(rng_at(seed, (uint64_t)epoch, (uint64_t)sample, 4 * (uint64_t)t)) <
                       o->mask_prob;
        if (!selected) continue;
        labels[t] = ids[t];
        double u = rng_uniform(rng_at(seed, (uint64_t)epoch, (uint64_t)sample, 4 * (uint64_t)t + 1));
        if (u < o->mask_token_frac)
            ids[t] = o->special.mask;
        else if (u < o->mask_token_frac + o->random_token_frac)
            ids[t] = random_token(l, rng_at(seed, (uint64_t)epoch, (uint64_t)sample, 4 * (uint64_t)t + 2));
    }
}

void loader_sample(const Loader *l, int64_t epoch, int64_t sample, int32_t *ids, int32_t *attn,
                   int32_t *labels) {
    int T = l->opt.seq_len;
    int64_t start = sample * l->content;
    int64_t n = l->stream_len - start < l->content ? l->stream_len - start : l->content;
    if (l->opt.objective == OBJ_MLM) {
        ids[0] = l->opt.special.cls;
        stream_copy(l, start, n, ids + 1);
        ids[n + 1] = l->opt.special.sep;
        for (int t = 0; t < T; t++) attn[t] = t < n + 2;
        for (int t = (int)n + 2; t < T; t++) ids[t] = l->pad;
        mask_sample(l, epoch, sample, ids, attn, labels);
        return;
    }
    // CLM: labels are the next stream token; one more token than the inputs is read.
    int64_t m = l->stream_len - start < T + 1 ? l->stream_len - start : T + 1;
    int32_t *next = labels;  // reuse: labels[t] = stream[start + t + 1]
    stream_copy(l, start, n, ids);
    for (int t = 0; t < T; t++) {
        attn[t] = t < n;
        if (t >= n) ids[t] = l->pad;
    }
    if (m > 1) stream_copy(l, start + 1, m - 1, next);
    for (int t = (int)(m > 1 ? m - 1 : 0); t < T; t++) next[t] = LOADER_IGNORE_LABEL;
}

LoaderBatch loader_batch_alloc(const Loader *l) {
    LoaderBatch b = {.batch = l->opt.micro_batch, .seq_len = l->opt.seq_len};
    size_t n = (size_t)b.batch * (size_t)b.seq_len;
    b.input_ids = mhe_calloc(n, sizeof(int32_t));
    b.token_type_ids = mhe_calloc(n, sizeof(int32_t));
    b.attention_mask = mhe_calloc(n, sizeof(int32_t));
    b.labels = mhe_calloc(n, sizeof(int32_t));
    return b;
}

void loader_batch_free(LoaderBatch *b) {
    free(b->input_ids);
    free(b->token_type_ids);
    free(b->attention_mask);
    free(b->labels);
    memset(b, 0, sizeof *b);
}

void loader_batch(const Loader *l, int64_t step, int rank, int world, int micro_index,
                  LoaderBatch *out) {
    int M = loader_micro_batches(l, world);
    if (rank < 0 || rank >= world || micro_index < 0 || micro_index >= M || step < 0)
        mhe_fatal("loader_batch: rank %d/%d, micro-batch %d/%d, step %lld out of range", rank,
                  world, micro_index, M, (long long)step);
    int B = l->opt.micro_batch, T = l->opt.seq_len, G = l->opt.global_batch;
    int64_t first = step * G + (int64_t)rank * (G / world) + (int64_t)micro_index * B;
    for (int b = 0; b < B; b++) {
        int64_t epoch, sample;
        loader_global_sample(l, first + b, &epoch, &sample);
        size_t row = (size_t)b * (size_t)T;
        loader_sample(l, epoch, sample, out->input_ids + row, out->attention_mask + row,
                      out->labels + row);
        memset(out->token_type_ids + row, 0, (size_t)T * sizeof(int32_t));
    }
}

void loader_own_continuation(Loader *l, uint8_t *continuation) {
    l->opt.continuation = continuation;
    l->owned_continuation = continuation;
}
