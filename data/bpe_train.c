// BPE merge learning over counted words: pair counts in a hash map, a lazy max-heap of
// (count, pair) and for every pair the words that contain it, so a merge only revisits the
// words it changes.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/bpe_train.h"

static uint32_t vhash(const char *s, size_t n) { return (uint32_t)tok_hash_bytes(s, n); }

int train_vocab_get(const TrainVocab *v, const char *s, size_t n) {
    if (!v->slots) return -1;
    uint32_t h = vhash(s, n) & v->mask;
    for (; v->slots[h]; h = (h + 1) & v->mask) {
        uint32_t id = v->slots[h] - 1;
        if (v->len[id] == n && memcmp(v->tok[id], s, n) == 0) return (int)id;
    }
    return -1;
}

static void vocab_rehash(TrainVocab *v, uint32_t size) {
    free(v->slots);
    v->slots = mhe_calloc(size, sizeof *v->slots);
    v->mask = size - 1;
    for (int id = 0; id < v->n; id++) {
        uint32_t h = vhash(v->tok[id], v->len[id]) & v->mask;
        while (v->slots[h]) h = (h + 1) & v->mask;
        v->slots[h] = (uint32_t)id + 1;
    }
}

int train_vocab_add(TrainVocab *v, const char *s, size_t n) {
    int id = train_vocab_get(v, s, n);
    if (id >= 0) return id;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 1024;
        v->tok = mhe_realloc(v->tok, (size_t)v->cap * sizeof *v->tok);
        v->len = mhe_realloc(v->len, (size_t)v->cap * sizeof *v->len);
    }
    v->tok[v->n] = mhe_malloc(n + 1);
    memcpy(v->tok[v->n], s, n);
    v->tok[v->n][n] = 0;
    v->len[v->n] = (uint32_t)n;
    v->n++;
    if (!v->slots || (uint32_t)v->n * 2u > v->mask) {
        vocab_rehash(v, v->slots ? (v->mask + 1) * 2 : 4096);
    } else {
        uint32_t h = vhash(s, n) & v->mask;
        while (v->slots[h]) h = (h + 1) & v->mask;
        v->slots[h] = (uint32_t)v->n;
    }
    return v->n - 1;
}

void train_vocab_free(TrainVocab *v) {
    free(v->tok);  // the strings themselves are handed over to the Tokenizer
    free(v->len);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

// Per-pair statistics, indexed through a PairMap (its "rank" slot holds the pair index).
typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t *words;  // words that contained the pair when it was counted (may be stale)
    int n_words, cap_words;
} PairStat;

typedef struct {
    int64_t count;
    int32_t pair;
} HeapItem;

typedef struct {
    PairMap index;
    PairStat *p;
    int n, cap;
    HeapItem *heap;
    int hn, hcap;
} PairTable;

static int pair_index(PairTable *pt, int a, int b, bool create) {
    int idx, unused;
    if (pairmap_get(&pt->index, a, b, &idx, &unused)) return idx;
    if (!create) return -1;
    if (pt->n == pt->cap) {
        pt->cap = pt->cap ? pt->cap * 2 : 4096;
        pt->p = mhe_realloc(pt->p, (size_t)pt->cap * sizeof *pt->p);
    }
    pt->p[pt->n] = (PairStat){a, b, 0, NULL, 0, 0};
    pairmap_put(&pt->index, a, b, pt->n, 0);
    return pt->n++;
}

// Max-heap order: larger count first, then the smaller pair (as HF's trainer breaks ties).
static bool heap_before(const PairTable *pt, HeapItem x, HeapItem y) {
    if (x.count != y.count) return x.count > y.count;
    const PairStat *p = &pt->p[x.pair], *q = &pt->p[y.pair];
    return p->a != q->a ? p->a < q->a : p->b < q->b;
}

static void heap_push(PairTable *pt, HeapItem it) {
    if (pt->hn == pt->hcap) {
        pt->hcap = pt->hcap ? pt->hcap * 2 : 4096;
        pt->heap = mhe_realloc(pt->heap, (size_t)pt->hcap * sizeof *pt->heap);
    }
    int i = pt->hn++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!heap_before(pt, it, pt->heap[parent])) break;
        pt->heap[i] = pt->heap[parent];
        i = parent;
    }
    pt->heap[i] = it;
}

static HeapItem heap_pop(PairTable *pt) {
    HeapItem top = pt->heap[0], last = pt->heap[--pt->hn];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= pt->hn) break;
        if (c + 1 < pt->hn && heap_before(pt, pt->heap[c + 1], pt->heap[c])) c++;
        if (!heap_before(pt, pt->heap[c], last)) break;
        pt->heap[i] = pt->heap[c];
        i = c;
    }
    if (pt->hn > 0) pt->heap[i] = last;
    return top;
}

static void note_word(PairStat *s, int w) {
    if (s->n_words && s->words[s->n_words - 1] == w) return;
    if (s->n_words == s->cap_words) {
        s->cap_words = s->cap_words ? s->cap_words * 2 : 4;
        s->words = mhe_realloc(s->words, (size_t)s->cap_words * sizeof *s->words);
    }
    s->words[s->n_words++] = w;
}

// Adds sign * count of word w to every adjacent pair of it.
static void count_word(PairTable *pt, const TrainWords *tw, int w, int sign, bool note) {
    for (int i = 0; i + 1 < tw->len[w]; i++) {
        int idx = pair_index(pt, tw->sym[w][i], tw->sym[w][i + 1], true);
        pt->p[idx].count += sign * tw->count[w];
        if (note) note_word(&pt->p[idx], w);
    }
}

void bpe_train_merges(TrainWords *tw, TrainVocab *v, int vocab_size, int min_frequency,
                      const char *cont_prefix, PairMap *merges, int *n_merges) {
    PairTable pt = {0};
    pairmap_init(&pt.index, 1 << 16);
    for (int w = 0; w < tw->n; w++) count_word(&pt, tw, w, +1, true);
    for (int i = 0; i < pt.n; i++)
        if (pt.p[i].count > 0) heap_push(&pt, (HeapItem){pt.p[i].count, i});
    size_t plen = cont_prefix ? strlen(cont_prefix) : 0;
    int64_t floor = min_frequency > 1 ? min_frequency : 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    int32_t *seen_new = NULL;  // pairs that gained count in this merge
    int n_new = 0, cap_new = 0;
    *n_merges = 0;
    while (v->n < vocab_size && pt.hn > 0) {
        HeapItem top = heap_pop(&pt);
        PairStat *s = &pt.p[top.pair];
        if (top.count != s->count) {  // stale entry: requeue with the current count
            if (s->count > 0) heap_push(&pt, (HeapItem){s->count, top.pair});
            continue;
        }
        if (s->count < floor) break;
        int a = s->a, b = s->b;
        size_t la = v->len[a], lb = v->len[b];
        size_t skip = (plen && lb >= plen && memcmp(v->tok[b], cont_prefix, plen) == 0) ? plen : 0;
        if (buf_cap < la + lb + 1) {
            buf_cap = 2 * (la + lb + 1);
            buf = mhe_realloc(buf, buf_cap);
        }
        memcpy(buf, v->tok[a], la);
        memcpy(buf + la, v->tok[b] + skip, lb - skip);
        int merged = train_vocab_add(v, buf, la + lb - skip);
        pairmap_put(merges, a, b, (*n_merges)++, merged);
        // Take the word list out: re-counting below may grow (and move) it.
        int32_t *words = s->words;
        int nw = s->n_words;
        s->words = NULL;
        s->n_words = s->cap_words = 0;
        n_new = 0;
        for (int k = 0; k < nw; k++) {
            int w = words[k];
            int32_t *sym = tw->sym[w];
            int len = tw->len[w];
            bool has = false;
            for (int i = 0; i + 1 < len && !has; i++) has = sym[i] == a && sym[i + 1] == b;
            if (!has) continue;
            count_word(&pt, tw, w, -1, false);
            int o = 0;
            for (int i = 0; i < len;) {
                if (i + 1 < len && sym[i] == a && sym[i + 1] == b) {
                    sym[o++] = merged;
                    i += 2;
                } else {
                    sym[o++] = sym[i++];
                }
            }
            tw->len[w] = o;
            count_word(&pt, tw, w, +1, false);
            for (int i = 0; i + 1 < o; i++) {
                if (sym[i] != merged && sym[i + 1] != merged) continue;
                int idx = pair_index(&pt, sym[i], sym[i + 1], true);
                note_word(&pt.p[idx], w);
                if (n_new == cap_new) {
                    cap_new = cap_new ? cap_new * 2 : 256;
                    seen_new = mhe_realloc(seen_new, (size_t)cap_new * sizeof *seen_new);
                }
                seen_new[n_new++] = idx;
            }
        }
        free(words);
        s = &pt.p[top.pair];
        // Pairs holding the new symbol only grew: queue their current counts.  (Duplicates
        // in the heap are harmless; stale ones are skipped when popped.)
        for (int k = 0; k < n_new; k++) {
            PairStat *q = &pt.p[seen_new[k]];
            if (q->count > 0 && (k == 0 || seen_new[k - 1] != seen_new[k]))
                heap_push(&pt, (HeapItem){q->count, seen_new[k]});
        }
    }
    for (int i = 0; i < pt.n; i++) free(pt.p[i].words);
    free(pt.p);
    free(pt.heap);
    pairmap_free(&pt.index);
    free(buf);
    free(seen_new);
}
