// BERT WordPiece encoding: BertNormalizer, BertPreTokenizer and greedy longest-match "##"
// pieces, in the order Hugging Face `tokenizers` applies them.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/tokenizer_internal.h"
#include "data/unicode_text.h"

typedef struct {
    uint32_t *cp;
    size_t len, cap;
} CpBuf;

static void cp_push(CpBuf *b, uint32_t c) {
    if (b->len == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 256;
        b->cp = mhe_realloc(b->cp, b->cap * sizeof *b->cp);
    }
    b->cp[b->len++] = c;
}

static void push_lowered(const Tokenizer *t, CpBuf *out, uint32_t c) {
    if (!t->lowercase) {
        cp_push(out, c);
        return;
    }
    uint32_t low[3];
    int k = uni_lower(c, low);
    for (int i = 0; i < k; i++) cp_push(out, low[i]);
}

// Appends a kept character of NFD output after the characters of the current run of
// non-zero combining classes that do not sort after it: canonical ordering.  Removed
// marks need no place, and the stable order of what is kept is the same either way.
static void push_ordered(CpBuf *out, size_t run_start, uint32_t c, int ccc) {
    cp_push(out, c);
    size_t k = out->len - 1;
    while (k > run_start && uni_ccc(out->cp[k - 1]) > ccc) {
        out->cp[k] = out->cp[k - 1];
        k--;
    }
    out->cp[k] = c;
}

// The whole segment is normalised before splitting because NFD can turn a letter into
// punctuation (U+037E -> ';'), exactly as HF normalises before pre-tokenizing.
static void normalize(const Tokenizer *t, const char *s, size_t n, CpBuf *out) {
    size_t i = 0, run_start = 0;  // run_start: first output index of the combining run
    while (i < n) {
        uint32_t c = utf8_next(s, n, &i);
        if (t->clean_text) {
            if (c == 0 || c == 0xFFFD || uni_is_control(c)) continue;
            if (uni_is_whitespace(c)) c = ' ';
        }
        bool cjk = t->chinese_chars && uni_is_cjk(c);
        if (cjk) cp_push(out, ' ');
        if (t->strip_accents && c >= 0x80) {
            uint32_t d[8];
            int k = uni_nfd(c, d);
            for (int j = 0; j < k; j++) {
                int ccc = uni_ccc(d[j]);
                bool keep = !uni_is_nonspacing_mark(d[j]);
                if (ccc == 0) {
                    if (keep) push_lowered(t, out, d[j]);
                    run_start = out->len;
                } else if (keep) {
                    push_ordered(out, run_start, d[j], ccc);  // marks have no case
                }
            }
        } else {
            push_lowered(t, out, c);
            run_start = out->len;
        }
        if (cjk) {
            cp_push(out, ' ');
            run_start = out->len;
        }
    }
}

static bool is_bert_punct(uint32_t c) {
    if (c < 0x80)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
               (c >= 123 && c <= 126);
    return uni_is_punct(c);
}

typedef struct {
    char *buf;      // "##" + the word's UTF-8
    uint32_t *off;  // byte offset of each character boundary within the word
    size_t cap_buf, cap_off;
} WordScratch;

static void word_pieces(const Tokenizer *t, const uint32_t *w, size_t m, WordScratch *ws,
                        IdBuf *out) {
    if (m > (size_t)t->max_word_chars) {
        idbuf_push(out, t->unk);
        return;
    }
    if (ws->cap_buf < 2 + 4 * m) {
        ws->cap_buf = 2 + 4 * m + 64;
        ws->buf = mhe_realloc(ws->buf, ws->cap_buf);
    }
    if (ws->cap_off < m + 1) {
        ws->cap_off = m + 65;
        ws->off = mhe_realloc(ws->off, ws->cap_off * sizeof *ws->off);
    }
    char *word = ws->buf + 2;
    uint32_t nb = 0;
    for (size_t i = 0; i < m; i++) {
        ws->off[i] = nb;
        nb += (uint32_t)utf8_put(word + nb, w[i]);
    }
    ws->off[m] = nb;
    size_t rollback = out->len;
    size_t start = 0;
    while (start < m) {
        int found = -1;
        size_t end = m;
        for (; end > start; end--) {
            uint32_t a = ws->off[start], b = ws->off[end];
            if (start == 0) {
                found = strmap_get(&t->vocab, word, b);
            } else {
                // Overwrite the two bytes before the piece with "##"; the word's own
                // bytes there were already consumed by earlier pieces.
                char *key = word + a - 2;  // a >= 1 and buf has 2 bytes before word
                char save0 = key[0], save1 = key[1];
                key[0] = key[1] = '#';
                found = strmap_get(&t->vocab, key, b - a + 2);
                key[0] = save0;
                key[1] = save1;
            }
            if (found >= 0) break;
        }
        if (found < 0) {
            out->len = rollback;
            idbuf_push(out, t->unk);
            return;
        }
        idbuf_push(out, found);
        start = end;
    }
}

void wordpiece_split(const Tokenizer *t, const char *s, size_t n, WordpieceWordFn fn, void *ctx) {
    CpBuf norm = {0};
    normalize(t, s, n, &norm);
    size_t i = 0;
    while (i < norm.len) {
        uint32_t c = norm.cp[i];
        if (uni_is_whitespace(c)) {
            i++;
            continue;
        }
        size_t j = i + 1;
        if (!is_bert_punct(c))
            while (j < norm.len && !uni_is_whitespace(norm.cp[j]) && !is_bert_punct(norm.cp[j])) j++;
        fn(ctx, &norm.cp[i], j - i);
        i = j;
    }
    free(norm.cp);
}

typedef struct {
    const Tokenizer *t;
    WordScratch ws;
    IdBuf *out;
} EncodeCtx;

static void encode_word(void *ctx, const uint32_t *w, size_t m) {
    EncodeCtx *e = ctx;
    word_pieces(e->t, w, m, &e->ws, e->out);
}

void wordpiece_encode_segment(const Tokenizer *t, const char *s, size_t n, IdBuf *out) {
    EncodeCtx e = {t, {0}, out};
    wordpiece_split(t, s, n, encode_word, &e);
    free(e.ws.buf);
    free(e.ws.off);
}
