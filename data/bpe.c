// GPT-2 byte-level BPE encoding: the GPT-2 pre-tokenization pattern (by hand, with utf8proc
// classes), the byte-to-unicode mapping (as byte ids) and merges by lowest rank first.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/tokenizer_internal.h"
#include "data/unicode_text.h"

enum { CL_WS, CL_L, CL_N, CL_O };

static uint8_t char_class(uint32_t c) {
    if (c < 0x80) {
        if (c == ' ' || (c >= 9 && c <= 13)) return CL_WS;
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CL_L;
        if (c >= '0' && c <= '9') return CL_N;
        return CL_O;
    }
    if (uni_is_whitespace(c)) return CL_WS;
    if (uni_is_letter(c)) return CL_L;
    if (uni_is_number(c)) return CL_N;
    return CL_O;
}

typedef struct {
    int32_t *sym;
    int32_t *rank;  // rank[i] of the pair (sym[i], sym[i+1]); INT32_MAX when no merge
    int32_t *merged;
    size_t cap;
} BpeScratch;

static void pair_rank(const Tokenizer *t, BpeScratch *w, size_t i) {
    int r, m;
    if (pairmap_get(&t->merges, w->sym[i], w->sym[i + 1], &r, &m)) {
        w->rank[i] = r;
        w->merged[i] = m;
    } else {
        w->rank[i] = INT32_MAX;
    }
}

// Merges the pair of lowest (rank, position) until none applies, which is what HF's
// priority queue does.
static void bpe_word(const Tokenizer *t, const uint8_t *b, size_t n, BpeScratch *w, IdBuf *out) {
    if (w->cap < n + 1) {
        w->cap = n + 64;
        w->sym = mhe_realloc(w->sym, w->cap * sizeof *w->sym);
        w->rank = mhe_realloc(w->rank, w->cap * sizeof *w->rank);
        w->merged = mhe_realloc(w->merged, w->cap * sizeof *w->merged);
    }
    size_t L = 0;
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[b[i]] >= 0) w->sym[L++] = t->byte_id[b[i]];
    if (L == 0) return;
    for (size_t i = 0; i + 1 < L; i++) pair_rank(t, w, i);
    while (L > 1) {
        size_t best = 0;
        int32_t br = w->rank[0];
        for (size_t i = 1; i + 1 < L; i++)
            if (w->rank[i] < br) {
                br = w->rank[i];
                best = i;
            }
        if (br == INT32_MAX) break;
        w->sym[best] = w->merged[best];
        size_t tail = L - best - 2;
        memmove(&w->sym[best + 1], &w->sym[best + 2], tail * sizeof *w->sym);
        memmove(&w->rank[best + 1], &w->rank[best + 2], tail * sizeof *w->rank);
        memmove(&w->merged[best + 1], &w->merged[best + 2], tail * sizeof *w->merged);
        L--;
        if (best > 0) pair_rank(t, w, best - 1);
        if (best + 1 < L) pair_rank(t, w, best);
    }
    for (size_t i = 0; i < L; i++) idbuf_push(out, w->sym[i]);
}

void bpe_split(const char *s, size_t n, BpeWordFn fn, void *ctx) {
    uint32_t *cp = mhe_malloc((n + 1) * sizeof *cp);
    uint32_t *off = mhe_malloc((n + 1) * sizeof *off);
    uint8_t *cl = mhe_malloc(n + 1);
    size_t K = 0, i = 0;
    while (i < n) {
        off[K] = (uint32_t)i;
        cp[K] = utf8_next(s, n, &i);
        cl[K] = char_class(cp[K]);
        K++;
    }
    off[K] = (uint32_t)n;
    size_t k = 0;
    while (k < K) {
        size_t end;
        uint32_t c = cp[k];
        if (c == '\'' && k + 1 < K &&
            (cp[k + 1] == 's' || cp[k + 1] == 't' || cp[k + 1] == 'm' || cp[k + 1] == 'd')) {
            end = k + 2;
        } else if (c == '\'' && k + 2 < K &&
                   ((cp[k + 1] == 'r' && cp[k + 2] == 'e') || (cp[k + 1] == 'v' && cp[k + 2] == 'e') ||
                    (cp[k + 1] == 'l' && cp[k + 2] == 'l'))) {
            end = k + 3;
        } else {
            size_t p = k;
            if (c == ' ' && k + 1 < K && cl[k + 1] != CL_WS) p = k + 1;
            uint8_t want = cl[p];
            if (want != CL_WS) {
                end = p + 1;
                while (end < K && cl[end] == want) end++;
            } else {
                size_t j = k + 1;
                while (j < K && cl[j] == CL_WS) j++;
                // \s+(?!\S) leaves the last blank to the next word; a single blank before
                // a non-blank falls through to \s+.
                end = (j == K || j - k == 1) ? j : j - 1;
            }
        }
        fn(ctx, s + off[k], off[end] - off[k]);
        k = end;
    }
    free(cp);
    free(off);
    free(cl);
}

typedef struct {
    const Tokenizer *t;
    BpeScratch w;
    IdBuf *out;
} EncodeCtx;

static void encode_word(void *ctx, const char *s, size_t n) {
    EncodeCtx *e = ctx;
    bpe_word(e->t, (const uint8_t *)s, n, &e->w, e->out);
}

void bpe_encode_segment(const Tokenizer *t, const char *s, size_t n, IdBuf *out) {
    char *fixed = NULL;
    if (utf8_first_invalid(s, n) >= 0) {  // encode what Python's errors="replace" would see
        fixed = mhe_malloc(3 * n + 1);
        size_t i = 0, m = 0;
        while (i < n) m += (size_t)utf8_put(fixed + m, utf8_next(s, n, &i));
        s = fixed;
        n = m;
    }
    if (t->add_prefix_space && s[0] != ' ') {
        char *p = mhe_malloc(n + 1);
        p[0] = ' ';
        memcpy(p + 1, s, n);
        free(fixed);
        fixed = p;
        s = p;
        n++;
    }
    EncodeCtx e = {t, {0}, out};
    bpe_split(s, n, encode_word, &e);
    free(e.w.sym);
    free(e.w.rank);
    free(e.w.merged);
    free(fixed);
}
